//! Every `.cu` file an impl plans to launch compiles for compute_90 through NVRTC, and every
//! planned launch passes exactly as many arguments, of the sizes, that its kernel entry
//! declares in its PTX: a parameter added to a kernel but not to its plan (or the other way)
//! fails here, not on a GPU.
//!
//! Needs libnvrtc (the `nvidia-cuda-nvrtc` wheel): without it at build time these tests are
//! ignored with the reason; CI sets KEDGE_REQUIRE_NVRTC, which makes it a build error.

use crate::boundaries;
use kedge_core::cuda::nvrtc;
use kedge_core::{Case, Kernel, KernelArg, LimitsProfile, Plan};
use std::collections::BTreeMap;

/// The byte size of each parameter an entry declares, read from its compute_90 PTX.
fn ptx_param_sizes(k: &Kernel) -> Vec<u32> {
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

/// Every plan of every impl on its op's smoke shapes and boundary probes (h200), in every
/// dtype the op takes: each element type's kernel instantiation is compiled and checked.
fn plans() -> Vec<(Case, Plan)> {
    let h200 = LimitsProfile::builtin("h200").expect("h200 profile");
    let mut out = Vec::new();
    for op in kedge_ops::all_ops() {
        for (imp, &dtype) in op
            .impls()
            .into_iter()
            .flat_map(|i| op.dtypes().iter().map(move |d| (i, d)))
        {
            let mut cases = Vec::new();
            for (ne, params) in op.smoke() {
                let mut c = Case::new(op.name(), imp.name(), dtype, ne);
                c.params = params;
                cases.push(c);
            }
            for b in boundaries(op, &h200, dtype) {
                cases.extend(b.cases(op.name(), imp.name(), dtype));
            }
            for c in cases {
                if let Ok(plan) = imp.plan(&c, &h200) {
                    out.push((c, plan));
                }
            }
        }
    }
    out
}

#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn every_kernel_compiles_for_compute_90() {
    let mut files: BTreeMap<&'static str, (&'static str, Vec<&'static str>)> = BTreeMap::new();
    for (_, plan) in plans() {
        for l in plan.launches {
            let e = files
                .entry(l.kernel.file)
                .or_insert((l.kernel.source, Vec::new()));
            if !e.1.contains(&l.kernel.entry) {
                e.1.push(l.kernel.entry);
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
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn planned_arguments_match_every_kernels_ptx_params() {
    let mut declared: BTreeMap<(&'static str, &'static str), Vec<u32>> = BTreeMap::new();
    let mut checked = 0;
    for (c, plan) in plans() {
        for l in &plan.launches {
            let k = l.kernel;
            let want = declared
                .entry((k.file, k.entry))
                .or_insert_with(|| ptx_param_sizes(&k));
            let got: Vec<u32> = l
                .args
                .iter()
                .map(|a| match a {
                    KernelArg::Tensor(_)
                    | KernelArg::TensorAt { .. }
                    | KernelArg::Scratch { .. } => 8,
                    KernelArg::I64(_) | KernelArg::U64(_) => 8,
                    KernelArg::I32(_) | KernelArg::U32(_) | KernelArg::F32(_) => 4,
                })
                .collect();
            assert_eq!(
                &got, want,
                "{} ({}/{} {}): PTX params vs planned args",
                k.entry, c.op, c.imp, c.dtype
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no launch was planned");
    for entry in [
        "rms_norm_ggml_256",
        "norm_clamped_1024",
        "l2_norm_ggml_32",
        "rms_norm_ggml_256_f16",
        "rms_norm_planted_read_past_end_bf16",
        "softmax_clamped_global_f16",
        "cumsum_add_tile_offsets_bf16",
        "add_id_ggml_f16",
        "tri_clamped_bf16",
        "rms_norm_mul_add_ggml_1024_bf16",
        "sdpa_scores_bf16",
    ] {
        assert!(
            declared.keys().any(|(_, e)| *e == entry),
            "{entry} was not checked"
        );
    }
}

/// The row ops' element types convert through inline PTX (ops/catalog/src/elem.cuh), which NVRTC
/// passes through to PTX unchecked: compiling to an sm_90 cubin runs the assembler over it, so
/// a conversion the hardware's ISA lacks fails here rather than when a GPU loads the module.
#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn typed_kernels_assemble_for_sm_90() {
    let mut files: BTreeMap<&'static str, &'static str> = BTreeMap::new();
    for (c, plan) in plans() {
        for l in plan.launches {
            if c.dtype != kedge_core::DType::F32 && l.kernel.source.contains("kedge_f16") {
                files.insert(l.kernel.file, l.kernel.source);
            }
        }
    }
    assert!(files.len() >= 8, "only {} typed kernel files", files.len());
    for (file, src) in files {
        let c = nvrtc::compile_source(file, src, "sm_90", &[])
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(c.is_cubin && !c.image.is_empty(), "{file}");
    }
}

/// kedge's own kernels for big cases (drawing inputs and scanning outputs on the device)
/// compile, and each entry takes the parameters its launcher passes.
#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn the_big_case_kernels_compile_and_take_their_launchers_arguments() {
    for (k, sizes) in kedge_core::cuda::big::KERNELS {
        assert_eq!(&ptx_param_sizes(k), sizes, "{}", k.entry);
    }
    // And assemble for the H200 (the f16 conversion is inline PTX).
    for (k, _) in kedge_core::cuda::big::KERNELS {
        nvrtc::compile(k, "sm_90", &[]).unwrap_or_else(|e| panic!("{}: {e}", k.entry));
    }
}

/// Compiling ahead (what a sweep on a GPU does before its workers start): each distinct file
/// is compiled once, whatever entries of it are named, into the cache given; a second time
/// finds every file there and compiles none; a file that does not compile is counted, not
/// fatal (the case that launches it says why).
#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn compiling_ahead_compiles_each_file_once_into_the_cache() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = Kernel {
        file: "ahead/a.cu",
        source: "extern \"C\" __global__ void a1(float *x) { x[0] = 1.0f; }\nextern \"C\" __global__ void a2(float *x) { x[0] = 2.0f; }\n",
        entry: "a1",
    };
    let b = Kernel {
        file: "ahead/b.cu",
        source: "extern \"C\" __global__ void b(int *x) { x[0] = 3; }\n",
        entry: "b",
    };
    let kernels = [a, a.entry("a2"), b, a];
    let first = nvrtc::compile_ahead_in(dir.path(), &kernels, "sm_90");
    assert_eq!(
        (first.files, first.compiled, first.failed.len()),
        (2, 2, 0),
        "{first:?}"
    );
    let cubins = std::fs::read_dir(dir.path())
        .expect("cache dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cubin"))
        .count();
    assert_eq!(cubins, 2);
    let again = nvrtc::compile_ahead_in(dir.path(), &kernels, "sm_90");
    assert_eq!(
        (again.files, again.compiled, again.failed.len()),
        (2, 0, 0),
        "{again:?}"
    );
    let broken = Kernel {
        file: "ahead/broken.cu",
        source: "extern \"C\" __global__ void c(int *x) { x[0] = undeclared; }\n",
        entry: "c",
    };
    let with_broken = nvrtc::compile_ahead_in(dir.path(), &[a, broken], "sm_90");
    assert_eq!(
        (with_broken.files, with_broken.compiled),
        (2, 0),
        "{with_broken:?}"
    );
    assert_eq!(with_broken.failed.len(), 1, "{with_broken:?}");
    assert!(
        with_broken.failed[0].contains("ahead/broken.cu"),
        "{with_broken:?}"
    );
}
