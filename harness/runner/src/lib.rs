//! kedge-runner: everything between the command line and `kedge-core`, laid out by phase as
//! cargo-nextest lays out its runner.
//!
//! - `select`: which cases (suites, corpora, filters, shards).
//! - `run`: the one run engine: executors on the CPU and on GPUs, the supervisor and its
//!   worker protocol (a typed `WorkerSpec`), scheduling over several GPUs.
//! - `sanitizer`: compute-sanitizer command lines, XML parsing, per-case attribution.
//! - `results`: writing (one writer per output directory), reading and merging results.
//! - `report`: Markdown, JSON and JUnit reports.
//! - `gate`: a baseline of known failures and the CI verdict.
//! - `provenance`: what run wrote results (profile, mode, suite, builds) and whether two sets
//!   of results, or results and a baseline, can be compared.
//! - `workflow`: the commands' work as functions with typed outcomes (sweep, plan,
//!   minimize, repro, selftest, fuzz, compare-runs).
//! - `external`: impls from outside kedge (plugins, NVRTC source kernels).
//! - `events`: what the engine and the workflows tell as they work, as typed events, and the
//!   reporters that take them; `console`: the reporter a person reads on stderr, notes, and a
//!   stdout that survives a closed pipe.
//! - `summary`: `sweep-summary.json`'s records.
//! - `errors`: one error type whose every variant knows its exit status.

#![warn(missing_docs)]

pub mod console;
pub mod errors;
pub mod events;
pub mod exit;
pub mod external;
pub mod gate;
pub mod provenance;
pub mod report;
pub mod results;
pub mod run;
pub mod sanitizer;
pub mod select;
pub mod summary;
pub mod workflow;

pub use errors::Error;
pub use exit::Status;
