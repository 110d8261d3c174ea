//! Loading what is not a (complete) ggml build: no ggml needed, only a C compiler to make stand-in
//! libraries. A process loads one ggml build, so these live in their own test binary; none of
//! these loads succeeds, so none stays loaded.

use std::path::{Path, PathBuf};
use std::process::Command;

use kedge_ggml::{required_symbols, Ggml, LoadError};

/// Compiles `src` into a shared library at `out` with `extra` linker arguments, with the C
/// compiler (`CC`, else `cc`: the one that built kedge-ops' C shim, so it is there).
fn cc(out: &Path, src: &str, extra: &[&str]) {
    let dir = out.parent().unwrap();
    let c = dir.join(format!("{}.c", out.file_name().unwrap().to_string_lossy()));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&c)
        .args(extra);
    match cmd.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("{cc} failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("these tests build stand-in libraries with a C compiler; {cc}: {e}"),
    }
}

/// C source defining every required symbol of `library` except `missing`.
fn stubs(library: &str, missing: &str) -> String {
    required_symbols()
        .into_iter()
        .filter(|(s, l)| *l == library && *s != missing)
        .map(|(s, _)| format!("void {s}(void) {{}}\n"))
        .collect()
}

struct Fake {
    _dir: tempfile::TempDir,
    root: PathBuf,
    lib: PathBuf,
}

/// A stand-in build in `root/lib`: libggml-base.so (soname libggml-base.so.0, no file by that
/// name) and libggml.so linked against it without a run path, so libggml.so opens only if the
/// loader opened libggml-base.so first. `backend`: a soname libggml.so also needs, and whether
/// a file of that name is there.
fn fake(base_missing: &str, main_missing: &str, backend: Option<(&str, bool)>) -> Fake {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let lib = root.join("lib");
    std::fs::create_dir(&lib).unwrap();
    let base = lib.join("libggml-base.so");
    cc(
        &base,
        &stubs("libggml-base.so", base_missing),
        &["-Wl,-soname,libggml-base.so.0"],
    );
    // Debian's gcc links --as-needed, which would drop the unused dependencies this is about.
    let mut extra = vec![
        "-Wl,--no-as-needed".to_string(),
        base.to_string_lossy().into_owned(),
    ];
    let stage = root.join("stage");
    if let Some((soname, present)) = backend {
        std::fs::create_dir(&stage).unwrap();
        let be = stage.join(soname);
        cc(
            &be,
            "void ggml_backend_fake_reg(void) {}\n",
            &[&format!("-Wl,-soname,{soname}")],
        );
        extra.push(be.to_string_lossy().into_owned());
        if present {
            std::fs::copy(&be, lib.join(soname)).unwrap();
        }
    }
    let extra: Vec<&str> = extra.iter().map(|s| s.as_str()).collect();
    cc(
        &lib.join("libggml.so"),
        &stubs("libggml.so", main_missing),
        &extra,
    );
    let _ = std::fs::remove_dir_all(&stage);
    Fake {
        _dir: dir,
        root,
        lib,
    }
}

#[test]
fn a_missing_directory_says_so() {
    let e = Ggml::load(Path::new("/nonexistent/ggml-build")).unwrap_err();
    assert!(
        matches!(e, LoadError::DirMissing(ref d) if d == Path::new("/nonexistent/ggml-build")),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "ggml build directory /nonexistent/ggml-build does not exist"
    );
}

#[test]
fn an_empty_directory_is_not_a_ggml_build() {
    let d = tempfile::tempdir().unwrap();
    let e = Ggml::load(d.path()).unwrap_err();
    assert!(matches!(e, LoadError::NotGgmlBuild(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("not a ggml build: expected libggml-base.so and libggml.so in "),
        "{e}"
    );
    // One of the two is not enough either.
    std::fs::write(d.path().join("libggml-base.so"), b"").unwrap();
    assert!(matches!(
        Ggml::load(d.path()),
        Err(LoadError::NotGgmlBuild(_))
    ));
}

#[test]
fn a_missing_core_symbol_is_named_with_its_library() {
    let f = fake("ggml_backend_tensor_alloc", "", None);
    let e = Ggml::load(&f.root).unwrap_err();
    match &e {
        LoadError::MissingSymbol { symbol, library } => {
            assert_eq!(symbol, "ggml_backend_tensor_alloc");
            assert_eq!(
                library,
                &f.lib.canonicalize().unwrap().join("libggml-base.so")
            );
        }
        other => panic!("expected MissingSymbol, got {other}"),
    }
    assert!(
        e.to_string()
            .contains("has no symbol ggml_backend_tensor_alloc"),
        "{e}"
    );
}

#[test]
fn a_registry_symbol_is_looked_up_in_libggml_and_linked_backends_load_first() {
    // libggml.so needs libggml-cpu.so.0 by soname, with no run path: it opens only because
    // the loader opens that file from the build directory first.
    let f = fake(
        "",
        "ggml_backend_load_all_from_path",
        Some(("libggml-cpu.so.0", true)),
    );
    match Ggml::load(&f.lib).unwrap_err() {
        LoadError::MissingSymbol { symbol, library } => {
            assert_eq!(symbol, "ggml_backend_load_all_from_path");
            assert!(library.ends_with("libggml.so"), "{}", library.display());
        }
        other => panic!("expected MissingSymbol, got {other}"),
    }
}

#[test]
fn a_library_that_cannot_be_opened_is_named_with_the_linker_words() {
    // A symbol is left out too, so that were the library to open after all, nothing of it
    // would be called.
    let f = fake(
        "",
        "ggml_backend_load",
        Some(("libggml-absent.so.0", false)),
    );
    match Ggml::load(&f.root).unwrap_err() {
        LoadError::Open { library, reason } => {
            assert!(library.ends_with("libggml.so"), "{}", library.display());
            assert!(reason.contains("libggml-absent.so.0"), "{reason}");
        }
        other => panic!("expected Open, got {other}"),
    }
}

#[test]
fn a_file_that_is_not_a_library_is_an_open_error() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("libggml-base.so"), b"not an ELF file").unwrap();
    std::fs::write(d.path().join("libggml.so"), b"not an ELF file").unwrap();
    match Ggml::load(d.path()).unwrap_err() {
        LoadError::Open { library, reason } => {
            assert!(library.ends_with("libggml-base.so"));
            assert!(!reason.is_empty());
        }
        other => panic!("expected Open, got {other}"),
    }
    assert!(Ggml::loaded().is_none(), "no failed load stays loaded");
}
