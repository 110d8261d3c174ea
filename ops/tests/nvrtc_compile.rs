//! Every `.cu` file an impl plans to launch compiles for compute_90 through NVRTC.
//!
//! Needs libnvrtc (the `nvidia-cuda-nvrtc` wheel; `.ci/run` installs it). Without it the test
//! says it skipped, unless `CI` or `KEDGE_REQUIRE_NVRTC` is set: in CI a missing NVRTC fails.

use kedge_core::{nvrtc, Case, LimitsProfile};
use std::collections::BTreeMap;

/// The byte size of each parameter an entry declares, read from its compute_90 PTX.
fn ptx_param_sizes(k: &kedge_core::Kernel) -> Vec<u32> {
    let ptx = nvrtc::compile(k, "compute_90", &[]).expect("compiles");
    let ptx = String::from_utf8_lossy(&ptx.image).into_owned();
    let start = ptx
        .find(&format!(".entry {}(", k.entry))
        .unwrap_or_else(|| panic!("{} in PTX", k.entry));
    let end = start + ptx[start..].find(')').expect("param list ends");
    ptx[start..end]
        .lines()
        .filter(|l| l.contains(".param"))
        .map(|l| {
            if l.contains(".u64") || l.contains(".b64") {
                8
            } else {
                4
            }
        })
        .collect()
}

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
            let declared = ptx_param_sizes(&k);
            assert_eq!(
                declared, sizes,
                "{} ({op}): PTX params vs launcher args",
                k.entry
            );
        }
    }
}

/// Every impl that describes its kernel arguments (`Impl::args_for_repro`, what its launcher
/// and its standalone repro both pass) passes exactly as many arguments, of the sizes, that the
/// kernel entry declares in its PTX, on every smoke and boundary case of every dtype: a
/// parameter added to a kernel but not to its launcher (or the other way) fails here.
#[test]
fn described_launch_arguments_match_every_kernels_ptx_params() {
    use kedge_core::ReproArg;
    if !nvrtc::present() {
        assert!(
            !required(),
            "NVRTC is required here but libnvrtc was not found"
        );
        eprintln!("SKIPPED: libnvrtc not found");
        return;
    }
    let h200 = LimitsProfile::builtin("h200").expect("h200 profile");
    let mut declared: BTreeMap<(&'static str, &'static str), Vec<u32>> = BTreeMap::new();
    let mut checked = 0;
    for op in kedge_ops::all_ops() {
        for imp in op.impls() {
            let mut cases = Vec::new();
            for (ne, params) in op.smoke() {
                let mut c = Case::new(op.name(), imp.name(), op.dtypes()[0], ne);
                c.params = params;
                cases.push(c);
            }
            for b in op.boundaries(&h200) {
                let mut c = Case::new(
                    op.name(),
                    imp.name(),
                    b.dtype.unwrap_or(op.dtypes()[0]),
                    b.base,
                );
                c.params = b.params.clone();
                match b.axis {
                    kedge_core::op::Axis::Ne(d) => c.ne[d] = b.probe_values()[0],
                    kedge_core::op::Axis::Param(p) => {
                        c.params.insert(p.to_string(), b.probe_values()[0].into());
                    }
                }
                cases.push(c);
            }
            for c in cases {
                let Ok(plan) = imp.plan(&c, &h200) else {
                    continue;
                };
                let Some(args) = imp.args_for_repro(&c, &plan) else {
                    continue;
                };
                for (l, a) in plan.launches.iter().zip(&args) {
                    let Some(k) = l.source else { continue };
                    let want = declared
                        .entry((k.file, k.entry))
                        .or_insert_with(|| ptx_param_sizes(&k));
                    let got: Vec<u32> = a
                        .iter()
                        .map(|x| match x {
                            ReproArg::Tensor(_) | ReproArg::Scratch { .. } => 8,
                            ReproArg::I64(_) | ReproArg::U64(_) => 8,
                            ReproArg::I32(_) | ReproArg::U32(_) | ReproArg::F32(_) => 4,
                        })
                        .collect();
                    assert_eq!(
                        &got, want,
                        "{} ({}/{} {}): PTX params vs described args",
                        k.entry, c.op, c.imp, c.dtype
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 0, "no impl described its launch arguments");
    assert!(declared.keys().any(|(_, e)| *e == "sdpa_scores_bf16"));
}
