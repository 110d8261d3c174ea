//! Fuzz target `reference_vs_naive`: the body is `kedge::fuzzing::reference_vs_naive`, which `cargo test` also replays
//! over `fuzz/seeds/reference_vs_naive/` (harness/tests/fuzz_replay.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static REGISTRY: OnceLock<kedge_core::Registry> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let reg = REGISTRY.get_or_init(kedge_ops::registry);
    kedge::fuzzing::reference_vs_naive(reg, data);
});
