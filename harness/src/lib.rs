//! kedge: the engine and CLI around `kedge-core` (the contract) and `kedge-ops` (the ops).
//!
//! - `suite`: case generation from the ops' declarations.
//! - `worker` / `supervisor`: crash-isolated execution (cases never run in the supervisor).
//! - `corpus`: case files.
//! - `exit`: the documented exit statuses.

pub mod corpus;
pub mod exit;
pub mod fuzzcases;
pub mod fuzzing;
pub mod minimize;
pub mod repro;
pub mod results;
pub mod select;
pub mod selftest;
pub mod suite;
pub mod supervisor;
pub mod worker;
