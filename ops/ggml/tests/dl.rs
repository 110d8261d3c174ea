//! A `GGML_BACKEND_DL` build (backends as modules, the llama.cpp release layout), from
//! KEDGE_GGML_DL_DIR (scripts/build-ggml.sh --dl OUTDIR). Its own test binary: a process loads
//! one ggml build.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_close, build_dir, values, POISON};
use kedge_ggml::{BackendError, DeviceKind, Ggml, GraphOptions, Layout, Type};

fn dl_dir(test: &str) -> PathBuf {
    build_dir("KEDGE_GGML_DL_DIR", test)
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml_dl),
    ignore = "needs a ggml build: set KEDGE_GGML_DL_DIR (scripts/build-ggml.sh --dl)"
)]
fn modules_load_and_run_rms_norm() {
    let dir = dl_dir("modules_load_and_run_rms_norm");
    let ggml = Ggml::load(&dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()));
    assert_eq!(ggml.layout(), Layout::Modules);
    assert_eq!(
        ggml.module_problems(),
        &[] as &[String],
        "every module of the build registered"
    );
    // This crate opened the two core libraries; ggml opened the CPU module itself.
    let libs: Vec<String> = ggml
        .libraries()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(libs, ["libggml-base.so", "libggml.so"]);
    assert!(
        ggml.devices()
            .iter()
            .any(|d| d.name == "CPU" && d.kind == DeviceKind::Cpu),
        "{:?}",
        ggml.devices()
    );
    assert!(!ggml.version().is_empty() && !ggml.commit().is_empty());

    let be = ggml.backend("CPU").unwrap();
    // The thread setting comes through the CPU module's registry here.
    assert!(be.set_n_threads(2));
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[32, 5]).unwrap();
    let y = g.rms_norm(x, 1e-5).unwrap();
    g.build(&[y]).unwrap();
    assert!(g.unsupported(&be).is_empty());
    g.alloc(&be).unwrap();
    let xs = values(160, 11);
    g.set_f32(x, &xs).unwrap();
    g.fill(y, &POISON.to_le_bytes()).unwrap();
    g.compute(&be).unwrap();
    let want: Vec<f32> = xs
        .chunks(32)
        .flat_map(|r| {
            let s = 1.0 / ((r.iter().map(|v| (v * v) as f64).sum::<f64>() / 32.0) + 1e-5).sqrt();
            r.iter().map(move |v| (*v as f64 * s) as f32)
        })
        .collect();
    assert_close(&g.get_f32(y).unwrap(), &want, 1e-5, "rms_norm");
    // The CPU module's row writers are out of this crate's reach: callers fall back to the
    // CPU backend itself.
    assert!(!ggml.has_cpu_row_writer(Type::Q4_0));
    assert_eq!(ggml.cpu_write_rows(Type::Q4_0, &xs, 32).unwrap(), None);
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml_dl),
    ignore = "needs a ggml build: set KEDGE_GGML_DL_DIR (scripts/build-ggml.sh --dl)"
)]
fn a_module_that_cannot_load_is_reported_in_ggml_words() {
    let _ = dl_dir("a_module_that_cannot_load_is_reported_in_ggml_words");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "broken_module_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KEDGE_GGML_BROKEN_MODULE_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{:?} {:?}\n{stderr}",
        out.status,
        out.status.signal()
    );
    assert!(stderr.contains("broken module checked"), "{stderr}");
}

/// Links `dir`'s files into a new directory, with a CUDA module next to them that needs a
/// library this machine does not have (as a CUDA build does on a machine without CUDA).
fn build_with_broken_module(dir: &Path) -> tempfile::TempDir {
    let src = if dir.join("lib").is_dir() {
        dir.join("lib")
    } else {
        dir.to_path_buf()
    };
    let t = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), t.path().join(e.file_name())).unwrap();
    }
    let stage = tempfile::tempdir().unwrap();
    let dep = stage.path().join("libkedge-missing-cudart.so.13");
    let c = stage.path().join("x.c");
    std::fs::write(&c, "void kedge_stub(void) {}\nvoid * ggml_backend_init(void) { return 0; }\nint ggml_backend_score(void) { return 1; }\n").unwrap();
    let run = |args: Vec<String>| {
        let o = Command::new(common::c_compiler())
            .args(&args)
            .output()
            .expect("the C compiler (CC, else cc) runs");
        assert!(
            o.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let s = |p: &Path| p.to_string_lossy().into_owned();
    run(vec![
        "-shared".into(),
        "-fPIC".into(),
        "-o".into(),
        s(&dep),
        s(&c),
        "-Wl,-soname,libkedge-missing-cudart.so.13".into(),
    ]);
    run(vec![
        "-shared".into(),
        "-fPIC".into(),
        "-o".into(),
        s(&t.path().join("libggml-cuda.so")),
        s(&c),
        "-Wl,--no-as-needed".into(),
        s(&dep),
    ]);
    t
}

/// Not a test on its own: the child of `a_module_that_cannot_load_is_reported_in_ggml_words`
/// (it loads a different directory than the other tests of this binary).
#[test]
#[ignore = "the child process of `a_module_that_cannot_load_is_reported_in_ggml_words`, which runs it"]
fn broken_module_child() {
    assert!(
        std::env::var_os("KEDGE_GGML_BROKEN_MODULE_CHILD").is_some(),
        "run by a_module_that_cannot_load_is_reported_in_ggml_words, which sets KEDGE_GGML_BROKEN_MODULE_CHILD"
    );
    let dir = dl_dir("broken_module_child");
    let t = build_with_broken_module(&dir);
    let ggml = Ggml::load(t.path()).unwrap();
    assert_eq!(ggml.layout(), Layout::Modules);
    let p = ggml.module_problems();
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("libggml-cuda.so: ") && p[0].contains("libkedge-missing-cudart.so.13"),
        "{p:?}"
    );
    // The CPU module still works, and asking for the GPU says why there is none.
    assert!(ggml.backend("CPU").is_ok());
    let e = ggml.backend("CUDA0").unwrap_err();
    assert!(matches!(e, BackendError::Unknown { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("it has: CPU") && msg.contains("libkedge-missing-cudart.so.13"),
        "{msg}"
    );
    eprintln!("{msg}");
    eprintln!("broken module checked");
}
