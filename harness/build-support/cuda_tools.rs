// Shared by the build scripts of the crates whose tests need CUDA's compilers: `include!` it
// and call `nvrtc_probe()` (and `nvcc_probe()`) from `main`.
//
// `nvrtc_probe` looks for `libnvrtc.so*` where the dynamic loader would (the directories of
// LD_LIBRARY_PATH, CUDA_HOME/CUDA_PATH and the standard library directories), as cudarc does
// when it loads the library at run time. When found it sets `cfg(kedge_have_nvrtc)`, so the
// NVRTC tests run; when not, they are ignored with the reason. `nvcc_probe` does the same for
// `nvcc` (KEDGE_NVCC, PATH, CUDA_HOME/bin): `cfg(kedge_have_nvcc)`, and the path found in
// the `KEDGE_NVCC_PATH` compile-time variable. With `KEDGE_REQUIRE_NVRTC` set (CI sets it) a
// missing library or compiler fails the build instead.

/// The directories searched, in order.
#[allow(dead_code)]
fn nvrtc_search_dirs() -> Vec<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda/targets/sbsa-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib64",
        "/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The first `libnvrtc.so*` in the search directories.
#[allow(dead_code)]
fn find_nvrtc() -> Option<std::path::PathBuf> {
    for dir in nvrtc_search_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        names.sort();
        if let Some(p) = names.into_iter().find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc.so"))
        }) {
            return Some(p);
        }
    }
    None
}

/// Declare `cfg(kedge_have_nvrtc)` and set it when libnvrtc is found.
#[allow(dead_code)]
fn nvrtc_probe() {
    println!("cargo::rustc-check-cfg=cfg(kedge_have_nvrtc)");
    for var in [
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "KEDGE_REQUIRE_NVRTC",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    match find_nvrtc() {
        Some(p) => {
            println!("cargo::rustc-cfg=kedge_have_nvrtc");
            println!("cargo::rerun-if-changed={}", p.display());
        }
        None if std::env::var_os("KEDGE_REQUIRE_NVRTC").is_some() => {
            panic!(
                "KEDGE_REQUIRE_NVRTC is set but libnvrtc.so* was not found on LD_LIBRARY_PATH, \
                 CUDA_HOME/CUDA_PATH or the standard library directories: \
                 pip install nvidia-cuda-nvrtc==13.0.88 and put its nvidia/cu13/lib on LD_LIBRARY_PATH"
            );
        }
        None => {}
    }
}

/// The `nvcc` a test should use: `KEDGE_NVCC`, else the first on PATH or under CUDA_HOME.
#[allow(dead_code)]
fn find_nvcc() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(p) = std::env::var_os("KEDGE_NVCC") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(PathBuf::from(root).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter().map(|d| d.join("nvcc")).find(|p| p.is_file())
}

/// Declare `cfg(kedge_have_nvcc)` and set it (with `KEDGE_NVCC_PATH`) when nvcc is found.
#[allow(dead_code)]
fn nvcc_probe() {
    println!("cargo::rustc-check-cfg=cfg(kedge_have_nvcc)");
    for var in ["PATH", "KEDGE_NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "KEDGE_REQUIRE_NVRTC"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    match find_nvcc() {
        Some(p) => {
            println!("cargo::rustc-cfg=kedge_have_nvcc");
            println!("cargo::rustc-env=KEDGE_NVCC_PATH={}", p.display());
        }
        None if std::env::var_os("KEDGE_REQUIRE_NVRTC").is_some() => {
            panic!(
                "KEDGE_REQUIRE_NVRTC is set but nvcc was not found (KEDGE_NVCC, PATH, CUDA_HOME/bin): \
                 pip install nvidia-cuda-nvcc==13.0.88 and put its nvidia/cu13/bin on PATH"
            );
        }
        None => {}
    }
}

/// Declare `cfg(kedge_have_ggml)` and `cfg(kedge_have_ggml_dl)` and set them when
/// `KEDGE_GGML_DIR` / `KEDGE_GGML_DL_DIR` name a ggml build (scripts/build-ggml.sh OUTDIR), so
/// the tests that drive a real ggml run; without one they are ignored with the reason. With
/// `KEDGE_REQUIRE_GGML` set (CI sets it) a missing one fails the build instead.
#[allow(dead_code)]
fn ggml_probe() {
    println!("cargo::rustc-check-cfg=cfg(kedge_have_ggml)");
    println!("cargo::rustc-check-cfg=cfg(kedge_have_ggml_dl)");
    for var in ["KEDGE_GGML_DIR", "KEDGE_GGML_DL_DIR", "KEDGE_REQUIRE_GGML"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let required = std::env::var_os("KEDGE_REQUIRE_GGML").is_some();
    for (var, cfg, how) in [
        ("KEDGE_GGML_DIR", "kedge_have_ggml", "scripts/build-ggml.sh target/ggml/cpu"),
        ("KEDGE_GGML_DL_DIR", "kedge_have_ggml_dl", "scripts/build-ggml.sh --dl target/ggml/cpu-dl"),
    ] {
        match std::env::var_os(var).filter(|v| !v.is_empty()) {
            Some(dir) if std::path::Path::new(&dir).is_dir() => {
                println!("cargo::rustc-cfg={cfg}");
            }
            Some(dir) => panic!(
                "{var} is set to {}, which is not a directory: build ggml there ({how}) or unset it",
                std::path::Path::new(&dir).display()
            ),
            None if required => panic!(
                "KEDGE_REQUIRE_GGML is set but {var} is not: build ggml ({how}) and point {var} at it"
            ),
            None => {}
        }
    }
}
