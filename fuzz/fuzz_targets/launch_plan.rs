//! Fuzz target `launch_plan`: the body is `kedge::fuzzing::launch_plan`, which `cargo test` also replays
//! over `fuzz/seeds/launch_plan/` (harness/tests/fuzz_replay.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static REGISTRY: OnceLock<kedge_core::Registry> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let reg = REGISTRY.get_or_init(kedge_ops::registry);
    kedge::fuzzing::launch_plan(reg, data);
});
