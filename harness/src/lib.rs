//! kedge: the engine and CLI around `kedge-core` (the contract) and `kedge-ops` (the ops).
//!
//! - `suite`: case generation from the ops' declarations.
//! - `worker` / `supervisor`: crash-isolated execution (cases never run in the supervisor).
//! - `corpus`: case files.
//! - `plugin` / `source_impl`: external impls (a C ABI shared library; an NVRTC source file).
//! - `exit`: the documented exit statuses.

pub mod corpus;
pub mod exit;
pub mod plugin;
pub mod results;
pub mod sanitizer;
pub mod select;
pub mod source_impl;
pub mod suite;
pub mod supervisor;
pub mod worker;
