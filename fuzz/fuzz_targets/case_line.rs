//! Fuzz target `case_line`: the body is `kedge_runner::workflow::fuzz::targets::case_line`, which `cargo test` also replays
//! over `fuzz/seeds/case_line/` (the runner tests' `fuzz_replay` module).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static REGISTRY: OnceLock<kedge_core::Registry> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let reg = REGISTRY.get_or_init(kedge_ops::registry);
    kedge_runner::workflow::fuzz::targets::case_line(reg, data);
});
