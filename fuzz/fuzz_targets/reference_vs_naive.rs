//! Fuzz target `reference_vs_naive`: the body is `kedge_runner::workflow::fuzz::targets::reference_vs_naive`, which `cargo test` also replays
//! over `fuzz/seeds/reference_vs_naive/` (the runner tests' `fuzz_replay` module).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static REGISTRY: OnceLock<kedge_core::Registry> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let reg = REGISTRY.get_or_init(kedge_ops::registry);
    kedge_runner::workflow::fuzz::targets::reference_vs_naive(reg, data);
});
