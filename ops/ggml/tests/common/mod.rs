//! Shared by the tests that need a real ggml build.
#![allow(dead_code)]

use std::path::PathBuf;

/// The build named by `var`. The tests that call this are ignored unless the build script saw
/// the variable (`cfg(kedge_have_ggml)`, `cfg(kedge_have_ggml_dl)`); run without it, they fail.
pub fn build_dir(var: &str, test: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => panic!("{test} needs a ggml build: set {var} (scripts/build-ggml.sh OUTDIR)"),
    }
}

/// The C compiler the tests build stand-in libraries with: `CC`, else `cc` (the one that
/// built kedge-ops' C shim, so it is there wherever these tests build).
pub fn c_compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// Deterministic values in [-2, 2) (SplitMix64).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// A NaN with a payload no op computes: poison for outputs.
pub const POISON: u32 = 0x7FA5_A5A5;

pub fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() != POISON,
            "{what}[{i}] still holds the poison: never written"
        );
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (w.is_infinite() && g == w);
        assert!(ok, "{what}[{i}] = {g}, expected {w}");
    }
}
