//! `--ggml DIR`: a ggml build's backends as impls, from the command line. Bad builds are bad
//! input; kedge's ops through ggml's CPU backend pass against kedge's f64 references (with no
//! GPU: the host backend runs for real, in workers).

use crate::kedge;

/// A CPU-only build of the pinned ggml (`scripts/build-ggml.sh`), from `KEDGE_GGML_DIR`. The
/// tests that call this are ignored unless the build script saw the variable.
pub fn build_dir() -> String {
    match std::env::var("KEDGE_GGML_DIR") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!("this test needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"),
    }
}

#[test]
fn a_missing_or_foreign_ggml_dir_is_bad_input() {
    let (code, _, err) = kedge(&["list", "--ggml", "/nonexistent/ggml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("/nonexistent/ggml") && err.contains("does not exist"),
        "{err}"
    );
    let d = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = kedge(&["list", "--ggml", &d.path().display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a ggml build"), "{err}");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn an_unknown_ggml_device_names_the_ones_the_build_has() {
    let dir = build_dir();
    let (code, _, err) = kedge(&["list", "--ggml", &dir, "--ggml-device", "CUDA7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CUDA7") && err.contains("CPU"), "{err}");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn kedges_ops_on_ggml_cpu_pass_against_the_f64_references() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("tempdir");
    let out_dir = out.path().join("sweep");
    let (code, _, err) = kedge(&[
        "sweep",
        "smoke",
        "--ggml",
        &dir,
        "--impl",
        "ggml:CPU",
        "-o",
        "rms_norm,rms_norm_mul_add,norm,l2_norm,softmax,cumsum,tri,add_id",
        "--out",
        &out_dir.display().to_string(),
    ]);
    // Every case ran for real, on the host backend: no failure, status 0 (not 4: no GPU
    // check was skipped, there was none to make).
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("GPU checks skipped"), "{err}");
    let text = std::fs::read_to_string(out_dir.join("results.jsonl")).expect("results");
    let mut ops = std::collections::BTreeSet::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("a verdict line");
        let verdict = r["verdict"].as_str().unwrap_or("?");
        assert!(
            verdict == "pass"
                || (verdict == "unsupported" && !r["detail"].as_str().unwrap_or("").is_empty()),
            "{line}"
        );
        assert_eq!(r["under"], "native", "{line}");
        if verdict == "pass" {
            // Each output's digest, named: `dst:` and 16 hex digits.
            let digests = r["observed"]["output_digests"].as_array().cloned();
            let named = |d: &serde_json::Value| {
                d.as_str()
                    .and_then(|d| d.split_once(':'))
                    .is_some_and(|(name, hex)| {
                        !name.is_empty()
                            && hex.len() == 16
                            && hex.bytes().all(|b| b.is_ascii_hexdigit())
                    })
            };
            assert!(
                digests.is_some_and(|ds| !ds.is_empty() && ds.iter().all(named)),
                "{line}"
            );
        }
        assert_eq!(r["observed"]["library"]["name"], "ggml", "{line}");
        assert_eq!(r["observed"]["library"]["commit"], "d99724f", "{line}");
        // Every verdict says what run wrote it, the ggml build among its impls.
        assert_eq!(r["run"]["mode"], "native/exact", "{line}");
        assert_eq!(r["run"]["impls"][0], "ggml 0.21.0 (d99724f)", "{line}");
        ops.insert(r["case"]["op"].as_str().unwrap_or("?").to_string());
    }
    assert_eq!(ops.len(), 8, "{ops:?}");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn b_selects_the_backend_as_test_backend_ops_does() {
    let dir = build_dir();
    let (code, out, err) = kedge(&[
        "plan",
        "--json",
        "--ggml",
        &dir,
        "-b",
        "CPU",
        "-o",
        "rms_norm,softmax",
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let impls: std::collections::BTreeSet<String> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["case"]["impl"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(impls.into_iter().collect::<Vec<_>>(), ["ggml:CPU"]);
    let (code, _, err) = kedge(&["plan", "--ggml", &dir, "-b", "CUDA7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CUDA7") && err.contains("CPU"), "{err}");
}
