//! kedge: the engine and CLI around `kedge-core` and `kedge-ops`.
//!
//! - `sanitizer`: compute-sanitizer command lines, XML/text parsing, per-case attribution by
//!   `kedge_case_marker` records, findings and verdicts (`--sanitize`).
//! - `results`: reading and merging `results.jsonl` shards.
//! - `report`: Markdown / JSON / JUnit reports (`kedge report`).
//! - `gate`: baseline of known failures and the CI exit status (`kedge gate`).
//! - `shard`: `--shard K/N`.

pub mod gate;
pub mod report;
pub mod results;
pub mod sanitizer;
pub mod shard;
