//! The fuzz targets, bounded, in `cargo test`: every committed seed in `fuzz/seeds/<target>/`
//! (and every crash artifact someone committed there after fixing it) goes through the same
//! function the libFuzzer target calls, then a fixed number of pseudo-random inputs does.
//! No cargo-fuzz or nightly toolchain needed; `fuzz/README.md` says how to fuzz for real.

use kedge_core::model::rng::Rng;
use kedge_runner::workflow::fuzz::targets;
use std::path::PathBuf;

fn seeds_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target)
}

#[test]
fn committed_seeds_replay_without_a_crash() {
    let reg = kedge_ops::registry();
    for (name, f) in targets::targets() {
        let dir = seeds_dir(name);
        let mut n = 0;
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let data = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&reg, &data)));
            assert!(r.is_ok(), "target {name} crashed on {}", p.display());
            n += 1;
        }
        assert!(n > 0, "no seeds for target {name} in {}", dir.display());
        eprintln!("{name}: {n} seeds replayed");
    }
}

#[test]
fn bounded_random_inputs_do_not_crash() {
    let reg = kedge_ops::registry();
    let mut rng = Rng::new(0x006b_6564_6765);
    for (name, f) in targets::targets() {
        for i in 0..1500 {
            let len = rng.below(192) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&reg, &data)));
            assert!(
                r.is_ok(),
                "target {name} crashed on random input {i}: {:02x?}",
                data
            );
        }
    }
}

/// Which ops the reference fuzzer covers; an op without a naive model is named here so the
/// gap is visible in the test output.
#[test]
fn naive_models_name_real_ops() {
    let reg = kedge_ops::registry();
    let models = targets::naive_models();
    for m in &models {
        assert!(reg.op(m.op).is_ok(), "naive model for unknown op {}", m.op);
    }
    let missing: Vec<_> = reg
        .ops()
        .iter()
        .map(|o| o.name())
        .filter(|n| !models.iter().any(|m| m.op == *n))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "ops whose CPU reference has no naive model in kedge_ops::fuzz_models yet: {}",
            missing.join(", ")
        );
    }
}
