//! Fuzz target `sanitizer_xml`: compute-sanitizer's `--xml` output parser never panics on any
//! input. Written against `kedge::sanitizer::parse_xml(&str)` (the sanitizer driver, merged
//! from its own branch); needs `--features sanitizer`. If the parser's name or signature
//! differs, adjust the one call below.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = kedge::sanitizer::parse_xml(&text);
});
