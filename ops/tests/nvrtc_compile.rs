//! Every `.cu` file an impl plans to launch compiles for compute_90 through NVRTC.
//!
//! Needs libnvrtc (the `nvidia-cuda-nvrtc` wheel; `.ci/run` installs it). Without it the test
//! says it skipped, unless `CI` or `KEDGE_REQUIRE_NVRTC` is set: in CI a missing NVRTC fails.

use kedge_core::{nvrtc, Case, LimitsProfile};
use std::collections::BTreeMap;

fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("KEDGE_REQUIRE_NVRTC").is_some()
}

#[test]
fn every_kernel_compiles_for_compute_90() {
    if !nvrtc::present() {
        assert!(!required(), "NVRTC is required here (CI/KEDGE_REQUIRE_NVRTC set) but libnvrtc was not found: install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH");
        eprintln!("SKIPPED: libnvrtc not found; set LD_LIBRARY_PATH to the nvidia-cuda-nvrtc wheel's lib dir to run this test");
        return;
    }
    let h200 = LimitsProfile::builtin("h200").expect("h200 profile");
    let mut files: BTreeMap<&'static str, (&'static str, Vec<String>)> = BTreeMap::new();
    for op in kedge_ops::all_ops() {
        for imp in op.impls() {
            let mut shapes: Vec<_> = op.smoke();
            for b in op.boundaries(&h200) {
                let mut ne = b.base;
                if let kedge_core::op::Axis::Ne(d) = b.axis {
                    ne[d] = b.at;
                }
                shapes.push((ne, b.params.clone()));
            }
            for (ne, params) in shapes {
                let mut c = Case::new(op.name(), imp.name(), op.dtypes()[0], ne);
                c.params = params;
                let Ok(plan) = imp.plan(&c, &h200) else {
                    continue;
                };
                for l in plan.launches {
                    if let Some(k) = l.source {
                        let e = files.entry(k.file).or_insert((k.source, Vec::new()));
                        if !e.1.contains(&l.kernel) {
                            e.1.push(l.kernel.clone());
                        }
                    }
                }
            }
        }
    }
    assert!(!files.is_empty(), "no kernels were planned at all");
    let mut failures = Vec::new();
    for (file, (src, entries)) in &files {
        match nvrtc::compile_source(file, src, "compute_90", &[]) {
            Ok(c) => {
                let ptx = String::from_utf8_lossy(&c.image);
                for e in entries {
                    if !ptx.contains(&format!(".entry {e}(")) {
                        failures.push(format!("{file}: entry {e} not found in the PTX"));
                    }
                }
                eprintln!(
                    "compiled {file} for compute_90 ({} entries, cached: {})",
                    entries.len(),
                    c.from_cache
                );
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The shared norm/l2_norm impls pass exactly as many arguments, of the sizes, that each
/// kernel entry declares (read from its PTX): a drift between launcher and kernel fails here,
/// not on a GPU.
#[test]
fn row_norm_impls_pass_what_their_kernels_declare() {
    use kedge_core::device::KArg;
    if !nvrtc::present() {
        assert!(
            !required(),
            "NVRTC is required here but libnvrtc was not found"
        );
        eprintln!("SKIPPED: libnvrtc not found");
        return;
    }
    let impls: [(&str, &kedge_ops::norm_family::RowNormImpl); 4] = [
        ("norm", &kedge_ops::norm::GGML),
        ("norm", &kedge_ops::norm::CLAMPED),
        ("l2_norm", &kedge_ops::l2_norm::GGML),
        ("l2_norm", &kedge_ops::l2_norm::CLAMPED),
    ];
    for (op, imp) in impls {
        let case = Case::new(op, "x", kedge_core::DType::F32, [64, 2, 3, 1]);
        let sizes: Vec<u32> = imp
            .args(&case, 0, 0)
            .iter()
            .map(|a| match a {
                KArg::Ptr(_) | KArg::I64(_) | KArg::U64(_) => 8,
                KArg::I32(_) | KArg::U32(_) | KArg::F32(_) => 4,
            })
            .collect();
        for k in imp.entries {
            let ptx = nvrtc::compile(&k, "compute_90", &[]).expect("compiles");
            let ptx = String::from_utf8_lossy(&ptx.image).into_owned();
            let start = ptx
                .find(&format!(".entry {}(", k.entry))
                .expect("entry in PTX");
            let params = &ptx[start..start + ptx[start..].find(')').unwrap()];
            let declared: Vec<u32> = params
                .lines()
                .filter(|l| l.contains(".param"))
                .map(|l| {
                    if l.contains(".u64") || l.contains(".b64") {
                        8
                    } else {
                        4
                    }
                })
                .collect();
            assert_eq!(
                declared, sizes,
                "{} ({op}): PTX params vs launcher args",
                k.entry
            );
        }
    }
}
