//! Fuzz target `sanitizer_xml`: compute-sanitizer's `--xml` output parser and the per-case
//! attribution never panic on any input (body in `kedge_runner::workflow::fuzz::targets::sanitizer_xml`, replayed by
//! `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let reg = kedge_ops::registry();
    kedge_runner::workflow::fuzz::targets::sanitizer_xml(&reg, data);
});
