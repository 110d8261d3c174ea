//! kedge: the engine and CLI around `kedge-core` and `kedge-ops`.

pub mod sanitizer;
