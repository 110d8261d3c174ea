//! NVRTC source impls on the CPU: the example kernel compiles and matches the published row
//! ABI, wrong kernels are refused at load with both signatures, and the planned launches
//! follow the chosen geometry (ggml breaks grid.y past 65535; clamped never does).
//!
//! The compile checks need libnvrtc. Without it they say they skipped, unless `CI` or
//! `KEDGE_REQUIRE_NVRTC` is set.

use kedge::source_impl::{add_source_impl, Geometry, RowArgs, SourceError, SourceImpl, SourceSpec};
use kedge_core::{nvrtc, Case, DType, ImplRole, LimitsProfile, Registry, Role, TensorSpec};
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/source-kernel/my_rms_norm.cu")
}

fn nvrtc_here() -> bool {
    if nvrtc::present() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none() && std::env::var_os("KEDGE_REQUIRE_NVRTC").is_none(),
        "NVRTC is required here (CI/KEDGE_REQUIRE_NVRTC set) but libnvrtc was not found"
    );
    eprintln!(
        "SKIPPED: libnvrtc not found; set LD_LIBRARY_PATH to the nvidia-cuda-nvrtc wheel's lib dir"
    );
    false
}

fn case(imp: &str, ne: [i64; 4]) -> Case {
    Case::new("rms_norm", imp, DType::F32, ne)
        .with_param("eps", 1e-6)
        .with_param("row_pad", 0)
}

#[test]
fn example_kernel_is_checked_and_planned_per_geometry() {
    if !nvrtc_here() {
        return;
    }
    let mut reg = kedge_ops::registry();
    let clamped = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &example(), "my_rms_norm", Geometry::Clamped),
    )
    .expect("the example kernel matches the row ABI");
    assert!(clamped.checked);
    assert_eq!(clamped.name, "source:my_rms_norm:clamped");
    let ggml = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &example(), "my_rms_norm", Geometry::Ggml),
    )
    .expect("same kernel, ggml geometry");
    assert_eq!(ggml.name, "source:my_rms_norm:ggml");

    let op = reg.op("rms_norm").unwrap();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let c_imp = reg.imp(op, &clamped.name).unwrap();
    let g_imp = reg.imp(op, &ggml.name).unwrap();
    assert_eq!(c_imp.role(), ImplRole::External);

    // The incident's shape: ggml's mapping puts 65536 on grid.y; clamped stays legal.
    let big = case(&ggml.name, [64, 1, 65536, 1]);
    let g = g_imp.plan(&big, &h200).unwrap();
    let v = g.violations(&h200);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        (v[0].dim.as_str(), v[0].value, v[0].limit),
        ("grid.y", 65536, 65535)
    );
    let c = c_imp
        .plan(&case(&clamped.name, [64, 1, 65536, 1]), &h200)
        .unwrap();
    assert!(c.violations(&h200).is_empty());
    assert_eq!(c.launches[0].grid, [1, 65535, 1]);
    assert_eq!(c.launches[0].block, [256, 1, 1]);
    assert_eq!(c.launches[0].kernel, "my_rms_norm");
    // One below the limit, both fit and agree.
    let below = [64, 1, 65535, 1];
    let gb = g_imp.plan(&case(&ggml.name, below), &h200).unwrap();
    assert!(gb.violations(&h200).is_empty());
    assert_eq!(gb.launches[0].grid, [1, 65535, 1]);
    // The planned kernel carries the file's text, so the device compiles exactly it.
    let k = c.launches[0].source.expect("a kernel source");
    assert!(k
        .source
        .contains("extern \"C\" __global__ void my_rms_norm"));
    // The engine's CPU check passes the validated case through the registry.
    let vc = case(&clamped.name, [4096, 3, 2, 1]).validate(&reg).unwrap();
    let r = kedge_core::engine::check_on_cpu(&reg, &vc, &h200, true);
    assert_eq!(r.verdict, kedge_core::Verdict::Skipped, "{}", r.detail);
    // Registering the same name again is refused.
    match add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &example(), "my_rms_norm", Geometry::Ggml),
    ) {
        Err(SourceError::NameTaken { name, .. }) => assert_eq!(name, "source:my_rms_norm:ggml"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn wrong_kernels_are_refused_at_load() {
    if !nvrtc_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut reg = kedge_ops::registry();
    // eps missing, ncols as long long: both lists are shown.
    let short = write(
        dir.path(),
        "short.cu",
        "extern \"C\" __global__ void k(const float* x, float* dst, long long ncols) { dst[0] = x[0] + ncols; }\n",
    );
    match add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &short, "k", Geometry::Clamped),
    ) {
        Err(e @ SourceError::Signature { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains(".u64 .u64 .u64") && m.contains("float eps_or_scale"),
                "{m}"
            );
        }
        other => panic!("expected a signature error, got {other:?}"),
    }
    // Not extern "C": the name is mangled and the error says so.
    let mangled = write(
        dir.path(),
        "mangled.cu",
        "__global__ void k(const float* x, float* dst, int ncols, long long a, long long b, long long c, long long d, long long e, long long f, float eps) { dst[0] = x[0]; }\n",
    );
    match add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &mangled, "k", Geometry::Clamped),
    ) {
        Err(e @ SourceError::EntryMissing { .. }) => {
            assert!(e.to_string().contains("extern \"C\""), "{e}");
            assert!(e.to_string().contains("_Z1k"), "{e}");
        }
        other => panic!("expected a missing entry, got {other:?}"),
    }
    // A compile error carries NVRTC's log.
    let broken = write(
        dir.path(),
        "broken.cu",
        "extern \"C\" __global__ void k( {\n",
    );
    match add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &broken, "k", Geometry::Clamped),
    ) {
        Err(SourceError::Compile(e)) => assert!(e.to_string().contains("broken.cu"), "{e}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
    let op = reg.op("rms_norm").unwrap();
    assert_eq!(
        reg.impls_of(op).len(),
        op.impls().len(),
        "a refused kernel was registered"
    );
}

#[test]
fn bad_requests_are_refused_without_compiling() {
    let reg: Registry = kedge_ops::registry();
    let e = |spec: SourceSpec| SourceImpl::new(&reg, &spec).err().expect("refused");
    match e(SourceSpec::new(
        "cumsum",
        &example(),
        "my_rms_norm",
        Geometry::Ggml,
    )) {
        SourceError::NoAbi { op, known } => {
            assert_eq!(op, "cumsum");
            assert!(
                known.contains("rms_norm") && known.contains("softmax"),
                "{known}"
            );
        }
        other => panic!("expected NoAbi, got {other:?}"),
    }
    assert!(matches!(
        e(SourceSpec::new(
            "rms_norm",
            &example(),
            "my-rms",
            Geometry::Ggml
        )),
        SourceError::BadEntry(_)
    ));
    let mut s = SourceSpec::new("rms_norm", &example(), "my_rms_norm", Geometry::Ggml);
    s.block = 48;
    assert_eq!(e(s), SourceError::BadBlock(48));
    match e(SourceSpec::new(
        "rms_norm",
        Path::new("/nonexistent/k.cu"),
        "k",
        Geometry::Ggml,
    )) {
        SourceError::Read { path, .. } => assert_eq!(path, Path::new("/nonexistent/k.cu")),
        other => panic!("expected Read, got {other:?}"),
    }
}

#[test]
fn row_args_come_from_the_ops_tensors() {
    let reg = kedge_ops::registry();
    let op = reg.op("rms_norm").unwrap();
    // Padded rows: strides in elements include the pad.
    let c = case("ggml", [64, 5, 4, 3]).with_param("row_pad", 3);
    let a = RowArgs::of(&op.tensors(&c).unwrap()).unwrap();
    assert_eq!((a.ncols, a.nrows, a.nchannels, a.nsamples), (64, 5, 4, 3));
    assert_eq!(
        (a.stride_row, a.stride_channel, a.stride_sample),
        (67, 67 * 5, 67 * 5 * 4)
    );
    // A mask (softmax with one) is not in the row ABI.
    let t = |n: &str, r| TensorSpec::dense(n, r, DType::F32, [8, 2, 1, 1]).unwrap();
    let why = RowArgs::of(&[
        t("x", Role::Input),
        t("mask", Role::Input),
        t("dst", Role::Output),
    ])
    .unwrap_err();
    assert!(why.contains("mask"), "{why}");
    // Another dtype is refused.
    let h = TensorSpec::dense("x", Role::Input, DType::F16, [8, 2, 1, 1]).unwrap();
    let why = RowArgs::of(&[h, t("dst", Role::Output)]).unwrap_err();
    assert!(why.contains("f16"), "{why}");
}
