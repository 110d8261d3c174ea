//! kedge's own row ops in f16 and bf16 on a real GPU, through the engine: every upstream and
//! fixed impl gives every smoke case and every boundary probe up to 2^24 elements the verdict
//! of the same case in f32, in exact and guard mode (a pass, or the upstream launch's failure:
//! launch errors past 65535 on grid.y/z); the planted read past the end passes natively (its
//! values are right) and faults on the guard page; the example source kernel runs its `_f16`
//! and `_bf16` entries.
//!
//! Ignored unless asked for (they need a GPU). On the H200:
//!   cargo test --release -p kedge-runner --test runner half_types -- --ignored --nocapture --test-threads 1
//!
//! A case that faults kills its CUDA context for good, so the guard-page case of the planted
//! impl runs in a child process (this test binary again, one test selected).

use kedge_core::cuda::driver_present;
use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
use kedge_core::{AllocMode, Case, DType, ImplRole, LimitsProfile, Registry, Verdict};
use kedge_runner::external::source::{add_source_impl, Geometry, SourceSpec};
use kedge_runner::select::suite;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "KEDGE_HALF_GPU_CHILD";
const OPS: &[&str] = &[
    "rms_norm",
    "rms_norm_mul_add",
    "norm",
    "l2_norm",
    "softmax",
    "cumsum",
    "tri",
    "add_id",
];
const HALF: [DType; 2] = [DType::F16, DType::Bf16];
/// Boundary probes above this many elements are left to `kedge sweep --max-elements 0`.
const MAX_ELEMENTS: i64 = 1 << 24;

fn device() -> DeviceSlot {
    assert!(
        driver_present(),
        "these tests need a GPU: no CUDA driver here"
    );
    DeviceSlot::open(0).unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

/// Smoke cases and boundary probes (own and generated for the dtype) of an impl, up to
/// `MAX_ELEMENTS`, validated.
fn cases(reg: &Registry, op: &str, imp: &str, dtype: DType) -> Vec<Case> {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let o = reg.op(op).unwrap();
    let mut raw = Vec::new();
    for (ne, params) in o.smoke() {
        let mut c = Case::new(op, imp, dtype, ne);
        c.params = params;
        raw.push(c);
    }
    for b in suite::boundaries(o, &h200, dtype) {
        raw.extend(b.cases(op, imp, dtype));
    }
    raw.into_iter()
        .filter(|c| c.ne.iter().product::<i64>() <= MAX_ELEMENTS)
        .map(|c| reg.validate(&c).expect("declared cases validate"))
        .collect()
}

#[test]
#[ignore = "needs a GPU"]
fn own_ops_in_f16_and_bf16_give_the_verdicts_of_f32() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let mut dev = device();
    let reg = kedge_ops::registry();
    let mut refs = ReferenceCache::default();
    let (mut passed, mut failed_as_f32, mut bad) = (0, 0, Vec::new());
    for &op in OPS {
        let o = reg.op(op).unwrap();
        for imp in reg.impls_of(o) {
            if !matches!(imp.role(), ImplRole::Upstream | ImplRole::Fixed) {
                continue;
            }
            for dtype in HALF {
                for c in cases(&reg, op, imp.name(), dtype) {
                    for alloc in [AllocMode::Exact, AllocMode::Guard] {
                        let c = c.clone().with_alloc(alloc);
                        let mut c32 = c.clone();
                        c32.dtype = DType::F32;
                        let r = execute(&reg, &mut dev, &c, &mut refs).result;
                        let r32 = execute(&reg, &mut dev, &c32, &mut refs).result;
                        // The same case in f32 is the oracle: a pass there is a pass here, and
                        // an upstream launch that fails there (a launch past the grid limits,
                        // padded rows stepped by ne00) fails here the same way.
                        if r.verdict != r32.verdict {
                            bad.push(format!(
                                "{}: {} {} (f32: {} {})",
                                c.label(),
                                r.verdict,
                                r.detail,
                                r32.verdict,
                                r32.detail
                            ));
                        } else if r.verdict == Verdict::Pass {
                            passed += 1;
                        } else {
                            failed_as_f32 += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{passed} passed, {failed_as_f32} failed as in f32");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(passed > 1000, "only {passed} cases passed");
    assert!(failed_as_f32 > 0, "no upstream launch failed");
}

/// Child side: the planted read past the end once, in the dtype and mode the environment
/// names; prints the verdict on a line the parent looks for.
#[test]
#[ignore = "needs a GPU"]
fn planted_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dtype, mode) = spec.split_once(' ').expect("dtype and mode");
    let mut dev = device();
    let reg = kedge_ops::registry();
    let c = Case::new(
        "rms_norm",
        "planted-read-past-end",
        dtype.parse().expect("dtype"),
        [300, 3, 2, 1],
    )
    .with_alloc(mode.parse().expect("alloc mode"));
    let c = reg.validate(&c).unwrap();
    let r = execute(&reg, &mut dev, &c, &mut ReferenceCache::default()).result;
    println!("KEDGE-VERDICT {} {:?}", r.verdict, r.detector);
}

#[test]
#[ignore = "needs a GPU"]
fn planted_read_past_end_passes_natively_and_faults_on_the_guard_page_in_16_bits() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    drop(device());
    let exe = std::env::current_exe().unwrap();
    for dtype in HALF {
        for (mode, want) in [
            ("exact", "KEDGE-VERDICT pass None"),
            ("guard", "KEDGE-VERDICT device-fault GuardPage"),
        ] {
            let out = Command::new(&exe)
                .args([
                    "--exact",
                    "half_types::planted_child",
                    "--include-ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD_ENV, format!("{dtype} {mode}"))
                .output()
                .expect("run child");
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains(want), "{dtype} {mode}:\n{text}");
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn example_source_kernel_runs_its_f16_and_bf16_entries() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let mut dev = device();
    let mut reg = kedge_ops::registry();
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/source-kernel/my_rms_norm.cu");
    let a = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &file, "my_rms_norm", Geometry::Clamped),
    )
    .expect("the example registers");
    assert_eq!(a.dtypes, vec![DType::F32, DType::F16, DType::Bf16]);
    let mut refs = ReferenceCache::default();
    let mut bad = Vec::new();
    for dtype in HALF {
        for c in cases(&reg, "rms_norm", &a.name, dtype) {
            for alloc in [AllocMode::Exact, AllocMode::Guard] {
                let c = c.clone().with_alloc(alloc);
                let r = execute(&reg, &mut dev, &c, &mut refs).result;
                if r.verdict != Verdict::Pass {
                    bad.push(format!("{}: {} {}", c.label(), r.verdict, r.detail));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
