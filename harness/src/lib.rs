//! kedge: the engine and CLI around `kedge-core` and `kedge-ops`.

pub mod gate;
pub mod report;
pub mod results;
pub mod sanitizer;
pub mod shard;
