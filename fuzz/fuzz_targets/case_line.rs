//! Fuzz target `case_line`: the body is `kedge::fuzzing::case_line`, which `cargo test` also replays
//! over `fuzz/seeds/case_line/` (harness/tests/fuzz_replay.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static REGISTRY: OnceLock<kedge_core::Registry> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let reg = REGISTRY.get_or_init(kedge_ops::registry);
    kedge::fuzzing::case_line(reg, data);
});
