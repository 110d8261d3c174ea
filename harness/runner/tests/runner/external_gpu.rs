//! External kernels on a real GPU, through the engine (no CLI needed): the example plugin
//! (built here with nvcc) and the example NVRTC source kernel pass every smoke shape in every
//! allocation mode; the ggml geometry is refused by the driver past 65535 on grid.y; the
//! planted-OOB calibration plugin passes in exact mode (values are right) and is caught by
//! the guard page and by compute-sanitizer memcheck.
//!
//! Ignored unless asked for (they need a GPU). On the H200:
//!   cargo test --release -p kedge-runner --test runner external_gpu -- --ignored --nocapture --test-threads 1
//!
//! A case that faults kills its CUDA context for good, so each OOB case runs in a child
//! process (this test binary again, one test selected), as kedge's workers do.

use kedge_core::cuda::driver_present;
use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
use kedge_core::{AllocMode, Case, DType, Detector, Registry, Verdict};
use kedge_runner::external::plugin;
use kedge_runner::external::source::{add_source_impl, Geometry, SourceSpec};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD_ENV: &str = "KEDGE_EXTERNAL_GPU_CHILD";

/// One GPU test at a time in this process: they share the device's primary context.
static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn gpu_lock() -> std::sync::MutexGuard<'static, ()> {
    // A test that panicked while holding the lock leaves it poisoned; the device is still
    // usable by the next test (each opens its own Device), so take the guard anyway.
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The GPU these tests need.
fn device() -> DeviceSlot {
    assert!(
        driver_present(),
        "these tests need a GPU: no CUDA driver here"
    );
    DeviceSlot::open(0).unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

/// Build an example plugin with the README's nvcc command into `dir`.
fn nvcc_build(src: &str, out: &str, dir: &Path) -> PathBuf {
    let nvcc = std::env::var("NVCC")
        .ok()
        .or_else(|| option_env!("KEDGE_NVCC_PATH").map(String::from))
        .unwrap_or_else(|| "nvcc".into());
    let arch = std::env::var("KEDGE_NVCC_ARCH").unwrap_or_else(|_| "sm_90".into());
    let lib = dir.join(out);
    let r = Command::new(&nvcc)
        .current_dir(root().join("examples/plugin-rmsnorm"))
        .args([
            "-O2",
            &format!("-arch={arch}"),
            "-Xcompiler",
            "-fPIC",
            "-shared",
        ])
        .arg(format!("-I{}", root().join("harness/include").display()))
        .arg(src)
        .arg("-o")
        .arg(&lib)
        .output();
    let o =
        r.unwrap_or_else(|e| panic!("{nvcc} could not be run ({e}): set NVCC or put nvcc on PATH"));
    assert!(
        o.status.success(),
        "nvcc failed on {src}:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    lib
}

fn smoke_shapes() -> Vec<([i64; 4], i64)> {
    // (ne, row_pad): the op's smoke shapes plus the incident's ne[2] = 65536.
    vec![
        ([64, 5, 4, 3], 0),
        ([1, 1, 1, 1], 0),
        ([31, 7, 3, 2], 0),
        ([1023, 2, 1, 1], 0),
        ([1024, 2, 1, 1], 0),
        ([4096, 3, 2, 1], 0),
        ([100, 4, 2, 2], 3),
        ([64, 1, 65536, 1], 0),
    ]
}

fn run_case(
    reg: &Registry,
    dev: &mut DeviceSlot,
    imp: &str,
    ne: [i64; 4],
    pad: i64,
    alloc: AllocMode,
) -> kedge_core::CaseResult {
    let case = reg
        .validate(
            &Case::new("rms_norm", imp, DType::F32, ne)
                .with_param("row_pad", pad)
                .with_alloc(alloc),
        )
        .expect("valid case");
    let ex = execute(reg, dev, &case, &mut ReferenceCache::default());
    eprintln!(
        "{} -> {} ({:?}) {}",
        case.label(),
        ex.result.verdict,
        ex.result.detector,
        ex.result.detail
    );
    ex.result
}

#[test]
#[ignore = "needs a GPU"]
fn example_plugin_passes_every_shape_in_every_mode() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _g = gpu_lock();
    let mut dev = device();
    let dir = tempfile::tempdir().unwrap();
    let lib = nvcc_build("rmsnorm_plugin.cu", "libkedge_rmsnorm.so", dir.path());
    let mut reg = kedge_ops::registry();
    let added = plugin::register(&mut reg, &lib, None).expect("example plugin registers");
    assert_eq!(
        added,
        vec![("rms_norm".into(), "plugin:example-rmsnorm".into())]
    );
    let mut bad = Vec::new();
    for (ne, pad) in smoke_shapes() {
        for alloc in AllocMode::ALL {
            let r = run_case(&reg, &mut dev, "plugin:example-rmsnorm", ne, pad, alloc);
            if r.verdict != Verdict::Pass {
                bad.push(format!("{}: {} {}", r.case.label(), r.verdict, r.detail));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
#[ignore = "needs a GPU"]
fn source_kernel_passes_clamped_and_ggml_breaks_at_65536() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _g = gpu_lock();
    let mut dev = device();
    let mut reg = kedge_ops::registry();
    let file = root().join("examples/source-kernel/my_rms_norm.cu");
    let clamped = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &file, "my_rms_norm", Geometry::Clamped),
    )
    .expect("clamped source impl");
    let ggml = add_source_impl(
        &mut reg,
        &SourceSpec::new("rms_norm", &file, "my_rms_norm", Geometry::Ggml),
    )
    .expect("ggml source impl");
    let mut bad = Vec::new();
    for (ne, pad) in smoke_shapes() {
        for alloc in AllocMode::ALL {
            let r = run_case(&reg, &mut dev, &clamped.name, ne, pad, alloc);
            if r.verdict != Verdict::Pass {
                bad.push(format!("{}: {} {}", r.case.label(), r.verdict, r.detail));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let ok = run_case(
        &reg,
        &mut dev,
        &ggml.name,
        [64, 1, 65535, 1],
        0,
        AllocMode::Exact,
    );
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.detail);
    let refused = run_case(
        &reg,
        &mut dev,
        &ggml.name,
        [64, 1, 65536, 1],
        0,
        AllocMode::Exact,
    );
    // Refused by the driver, or before it by the engine's launch-contract check.
    assert_eq!(refused.verdict, Verdict::LaunchError, "{}", refused.detail);
    assert!(
        matches!(
            refused.detector,
            Detector::Driver | Detector::LaunchContract
        ),
        "{:?}: {}",
        refused.detector,
        refused.detail
    );
}

/// Child side: run the OOB plugin once in the mode named by the environment and print the
/// verdict on a line the parent looks for.
#[test]
#[ignore = "needs a GPU"]
fn oob_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lib = PathBuf::from(std::env::var("KEDGE_OOB_PLUGIN").expect("KEDGE_OOB_PLUGIN"));
    let mut dev = device();
    let mut reg = kedge_ops::registry();
    plugin::register(&mut reg, &lib, None).expect("oob plugin registers");
    let alloc: AllocMode = mode.parse().expect("alloc mode");
    let r = run_case(
        &reg,
        &mut dev,
        "plugin:example-rmsnorm-oob",
        [64, 5, 4, 3],
        0,
        alloc,
    );
    println!("KEDGE-VERDICT {} {:?}", r.verdict, r.detector);
}

fn child(lib: &Path, mode: &str, sanitizer: Option<&str>) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match sanitizer {
        Some(cs) => {
            let mut c = Command::new(cs);
            c.args(["--tool", "memcheck", "--error-exitcode", "0"])
                .arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let out = cmd
        .args([
            "--exact",
            "external_gpu::oob_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, mode)
        .env("KEDGE_OOB_PLUGIN", lib)
        .output()
        .expect("run child");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("--- child ({mode}, sanitizer {sanitizer:?}) ---\n{text}");
    text
}

#[test]
#[ignore = "needs a GPU"]
fn oob_plugin_is_caught_by_guard_page() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _g = gpu_lock();
    drop(device());
    let dir = tempfile::tempdir().unwrap();
    let lib = nvcc_build(
        "rmsnorm_plugin_oob.cu",
        "libkedge_rmsnorm_oob.so",
        dir.path(),
    );
    // Exact allocations: every value is right, so without a memory detector it passes.
    let exact = child(&lib, "exact", None);
    assert!(exact.contains("KEDGE-VERDICT pass None"), "{exact}");
    // Guard page: the read past the end faults natively.
    let guard = child(&lib, "guard", None);
    assert!(
        guard.contains("KEDGE-VERDICT device-fault GuardPage"),
        "{guard}"
    );
}

/// memcheck on exact allocations names the invalid read. A machine whose sanitizer is missing
/// or cannot attach (seen on gVisor machines: "Device not supported") fails this test rather
/// than passing it unchecked.
#[test]
#[ignore = "needs a GPU and compute-sanitizer (COMPUTE_SANITIZER names it)"]
fn oob_plugin_is_caught_by_memcheck() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _g = gpu_lock();
    drop(device());
    let cs = std::env::var("COMPUTE_SANITIZER").unwrap_or_else(|_| "compute-sanitizer".into());
    assert!(
        Command::new(&cs).arg("--version").output().is_ok(),
        "{cs} not found: this test needs compute-sanitizer (set COMPUTE_SANITIZER)"
    );
    let dir = tempfile::tempdir().unwrap();
    let lib = nvcc_build(
        "rmsnorm_plugin_oob.cu",
        "libkedge_rmsnorm_oob.so",
        dir.path(),
    );
    let mc = child(&lib, "exact", Some(&cs));
    assert!(
        !mc.contains("Device not supported"),
        "compute-sanitizer does not support this device or runtime: memcheck could not run\n{mc}"
    );
    assert!(
        mc.contains("Invalid __global__ read of size 4"),
        "memcheck did not report the planted read:\n{mc}"
    );
}
