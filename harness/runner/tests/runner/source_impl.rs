//! NVRTC source impls on the CPU: the example kernel compiles and matches the published row
//! ABI, wrong kernels are refused at load with both signatures, and the planned launches
//! follow the chosen geometry (ggml breaks grid.y past 65535; clamped never does).
//!
//! The compile checks need libnvrtc: without it (at build time) they are ignored, with the
//! reason; CI sets KEDGE_REQUIRE_NVRTC, which makes a missing libnvrtc a build error.

use kedge_core::{Case, DType, ImplRole, LimitsProfile, Registry, Role, TensorSpec};
use kedge_runner::external::source::{
    add_source_impl, Geometry, RowArgs, SourceError, SourceImpl, SourceSpec,
};
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/source-kernel/my_rms_norm.cu")
}

/// An op with no external ABI.
struct Bare;

impl kedge_core::Op for Bare {
    fn name(&self) -> &'static str {
        "bare"
    }
    fn about(&self) -> &'static str {
        "an op with no external ABI"
    }
    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32]
    }
    fn params(&self) -> &'static [kedge_core::ParamSpec] {
        &[]
    }
    fn impls(&self) -> Vec<&'static dyn kedge_core::Impl> {
        Vec::new()
    }
    fn tensors(&self, _: &Case) -> Result<Vec<TensorSpec>, kedge_core::CaseError> {
        Ok(Vec::new())
    }
    fn reference(
        &self,
        _: &Case,
        _: &[kedge_core::HostTensor],
    ) -> Result<Vec<Vec<f64>>, kedge_core::CaseError> {
        Ok(Vec::new())
    }
    fn boundaries(&self, _: &LimitsProfile) -> Vec<kedge_core::Boundary> {
        Vec::new()
    }
    fn smoke(&self) -> Vec<(kedge_core::Ne, kedge_core::Params)> {
        Vec::new()
    }
    fn upstream(&self, _: &Case) -> Option<kedge_core::UpstreamRepro> {
        None
    }
}

static BARE: Bare = Bare;

fn case(imp: &str, ne: [i64; 4]) -> Case {
    case_of(imp, ne, DType::F32)
}

fn case_of(imp: &str, ne: [i64; 4], dtype: DType) -> Case {
    Case::new("rms_norm", imp, dtype, ne)
        .with_param("eps", 1e-6)
        .with_param("row_pad", 0)
}

#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn example_kernel_is_checked_and_planned_per_geometry() {
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
    assert_eq!(c.launches[0].name(), "my_rms_norm");
    // kedge plans its arguments, so the plan is standalone: `kedge repro` writes its .cu.
    assert!(c.standalone().is_ok());
    assert_eq!(c.launches[0].args.len(), 10);
    // One below the limit, both fit and agree.
    let below = [64, 1, 65535, 1];
    let gb = g_imp.plan(&case(&ggml.name, below), &h200).unwrap();
    assert!(gb.violations(&h200).is_empty());
    assert_eq!(gb.launches[0].grid, [1, 65535, 1]);
    // The planned kernel carries the file's text, so the device compiles exactly it.
    let k = c.launches[0].kernel;
    assert!(k
        .source
        .contains("extern \"C\" __global__ void my_rms_norm"));
    // The engine's CPU check passes the validated case through the registry.
    let vc = reg.validate(&case(&clamped.name, [4096, 3, 2, 1])).unwrap();
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
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn wrong_kernels_are_refused_at_load() {
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
    // An op kedge does not know, and one without a published row ABI: the refusal names
    // the ops that have one.
    assert!(matches!(
        e(SourceSpec::new("cumsun", &example(), "k", Geometry::Ggml)),
        SourceError::Registry(_)
    ));
    let mut ops = kedge_ops::all_ops();
    ops.push(&BARE);
    let with_bare = Registry::new(ops);
    match SourceImpl::new(
        &with_bare,
        &SourceSpec::new("bare", &example(), "my_rms_norm", Geometry::Ggml),
    )
    .err()
    .expect("refused")
    {
        SourceError::NoAbi { op, known } => {
            assert_eq!(op, "bare");
            assert!(
                known.contains("rms_norm") && known.contains("l2_norm"),
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
    // x and dst of two types, or of a type the ABI does not pass, are refused.
    let h = |n: &str, r, d| TensorSpec::dense(n, r, d, [8, 2, 1, 1]).unwrap();
    let why = RowArgs::of(&[h("x", Role::Input, DType::F16), t("dst", Role::Output)]).unwrap_err();
    assert!(why.contains("f16") && why.contains("f32"), "{why}");
    let why = RowArgs::of(&[
        h("x", Role::Input, DType::I32),
        h("dst", Role::Output, DType::I32),
    ])
    .unwrap_err();
    assert!(why.contains("i32"), "{why}");
    // A bf16 case, padded: strides in elements of two bytes.
    for d in [DType::F16, DType::Bf16] {
        let c = case_of("ggml", [64, 5, 4, 3], d).with_param("row_pad", 3);
        let a = RowArgs::of(&op.tensors(&c).unwrap()).unwrap();
        assert_eq!(
            (a.stride_row, a.stride_channel, a.stride_sample),
            (67, 67 * 5, 67 * 5 * 4),
            "{d}"
        );
    }
}

/// A file declares its element types by its entries: `k` (f32), `k_f16`, `k_bf16`. The impl
/// plans the entry of the case's type and refuses a type the file has no entry for, naming
/// the entry to define.
fn typed_kernel_file(dir: &Path, entries: &[(&str, &str)]) -> PathBuf {
    let mut text = String::new();
    for (name, t) in entries {
        text.push_str(&format!(
            "extern \"C\" __global__ void {name}(const {t}* x, {t}* dst, int ncols, long long nrows, long long nchannels, long long nsamples, long long stride_row, long long stride_channel, long long stride_sample, float eps) {{ if (ncols > 0) dst[0] = x[0]; }}\n"
        ));
    }
    write(dir, "typed.cu", &text)
}

fn check_typed_impl(reg: &Registry, imp_name: &str, have: &[DType]) {
    let op = reg.op("rms_norm").unwrap();
    let imp = reg.imp(op, imp_name).unwrap();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    for d in [DType::F32, DType::F16, DType::Bf16] {
        let c = case_of(imp_name, [64, 2, 3, 1], d);
        let suffix = match d {
            DType::F16 => "_f16",
            DType::Bf16 => "_bf16",
            _ => "",
        };
        match imp.plan(&c, &h200) {
            Ok(p) => {
                assert!(have.contains(&d), "{d} planned without an entry");
                assert_eq!(p.launches[0].name(), format!("k{suffix}"));
                assert_eq!(p.launches[0].args.len(), 10);
            }
            Err(why) => {
                assert!(!have.contains(&d), "{d}: {why}");
                assert!(why.0.contains(&format!("define k{suffix}")), "{why}");
            }
        }
    }
}

#[test]
fn the_files_entries_are_its_dtypes_by_text() {
    let dir = tempfile::tempdir().unwrap();
    let reg = kedge_ops::registry();
    let f = typed_kernel_file(dir.path(), &[("k", "float"), ("k_bf16", "unsigned short")]);
    let imp = SourceImpl::new(
        &reg,
        &SourceSpec::new("rms_norm", &f, "k", Geometry::Clamped),
    )
    .expect("builds without compiling");
    assert_eq!(imp.dtypes(), vec![DType::F32, DType::Bf16]);
    // Whole words and __global__ declarations only.
    use kedge_runner::external::source::declares_kernel;
    let text = "__device__ void k_f16(int a);\nextern \"C\" __global__ void kk(int a) {}\n__global__ void k (int a) {}";
    assert!(!declares_kernel(text, "k_f16"));
    assert!(!declares_kernel(text, "k_bf16"));
    assert!(declares_kernel(text, "kk"));
    assert!(declares_kernel(text, "k"));
}

#[test]
#[cfg_attr(
    not(kedge_have_nvrtc),
    ignore = "libnvrtc not found at build time: pip install nvidia-cuda-nvrtc==13.0.88 and set LD_LIBRARY_PATH"
)]
fn the_files_entries_are_its_dtypes_by_ptx() {
    let dir = tempfile::tempdir().unwrap();
    let mut reg = kedge_ops::registry();
    // f32 and f16 only.
    let f = typed_kernel_file(dir.path(), &[("k", "float"), ("k_f16", "unsigned short")]);
    let a = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &f, "k", Geometry::Clamped),
    )
    .expect("both entries match the row ABI");
    assert!(a.checked);
    assert_eq!(a.dtypes, vec![DType::F32, DType::F16]);
    check_typed_impl(&reg, &a.name, &a.dtypes);
    // bf16 only: `--entry k` names the family, though k itself is absent.
    let dir2 = tempfile::tempdir().unwrap();
    let f = typed_kernel_file(dir2.path(), &[("k_bf16", "unsigned short")]);
    let a = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &f, "k", Geometry::Ggml),
    )
    .expect("a bf16-only file");
    assert_eq!(a.dtypes, vec![DType::Bf16]);
    check_typed_impl(&reg, &a.name, &a.dtypes);
    // A twin with the wrong parameters is refused at load, named.
    let dir3 = tempfile::tempdir().unwrap();
    let bad = write(
        dir3.path(),
        "bad.cu",
        "extern \"C\" __global__ void k(const float* x, float* dst, int ncols, long long nrows, long long nchannels, long long nsamples, long long stride_row, long long stride_channel, long long stride_sample, float eps) {}\nextern \"C\" __global__ void k_f16(const unsigned short* x, unsigned short* dst, int ncols) {}\n",
    );
    match add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &bad, "k", Geometry::Ggml),
    ) {
        Err(SourceError::Signature { entry, .. }) => assert_eq!(entry, "k_f16"),
        other => panic!("expected the f16 twin's signature refused, got {other:?}"),
    }
    // The example has all three.
    let a = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &example(), "my_rms_norm", Geometry::Clamped),
    )
    .expect("the example");
    assert_eq!(a.dtypes, vec![DType::F32, DType::F16, DType::Bf16]);
}
