//! kedge: the engine and CLI around `kedge-core` (the contract) and `kedge-ops` (the ops).
//!
//! - `suite`: case generation from the ops' declarations.
//! - `worker` / `supervisor`: crash-isolated execution (cases never run in the supervisor).
//! - `sanitizer`: compute-sanitizer command lines, XML/text parsing, per-case attribution by
//!   `kedge_case_marker` records, findings and verdicts (`--sanitize`).
//! - `results`: writing, reading and merging `results.jsonl` (shards too).
//! - `report`: Markdown / JSON / JUnit reports (`kedge report`).
//! - `gate`: baseline of known failures and the CI exit status (`kedge gate`).
//! - `schedule`: spreading a sweep over several GPUs (`--devices`): a shared queue, devices
//!   that pull from it, lost devices whose cases go to the others.
//! - `shard`: `--shard K/N`.
//! - `corpus`: case files.
//! - `plugin` / `source_impl`: external impls (a C ABI shared library; an NVRTC source file).
//! - `exit`: the documented exit statuses.

pub mod corpus;
pub mod exit;
pub mod fuzzcases;
pub mod fuzzing;
pub mod gate;
pub mod minimize;
pub mod plugin;
pub mod report;
pub mod repro;
pub mod results;
pub mod sanitizer;
pub mod schedule;
pub mod select;
pub mod selftest;
pub mod shard;
pub mod source_impl;
pub mod suite;
pub mod supervisor;
pub mod worker;
