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
        // ggml computes these ops in f32 only: no other dtype is planned on it.
        assert_eq!(r["case"]["dtype"], "f32", "{line}");
    }
    assert_eq!(ops.len(), 8, "{ops:?}");
}

/// ggml computes kedge's row ops in f32 only (its backends abort on f16 though supports_op
/// accepts it): a suite asking for f16 on ggml says so, and a case line in f16 is answered
/// unsupported, with why, without running ggml.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn kedges_ops_on_ggml_are_not_run_in_dtypes_ggml_does_not_compute() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("tempdir");
    let o = |n: &str| out.path().join(n).display().to_string();
    let (code, _, err) = kedge(&[
        "sweep",
        "smoke",
        "--ggml",
        &dir,
        "--impl",
        "ggml:CPU",
        "-o",
        "rms_norm",
        "--dtype",
        "f16",
        "--out",
        &o("suite"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ggml:CPU computes rms_norm in f32 only"),
        "{err}"
    );
    let case = r#"{"op":"rms_norm","impl":"ggml:CPU","dtype":"f16","ne":[64,5,4,3]}"#;
    let (code, _, err) = kedge(&["sweep", "--case", case, "--ggml", &dir, "--out", &o("line")]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(out.path().join("line/results.jsonl")).expect("results");
    let r: serde_json::Value = serde_json::from_str(text.trim()).expect("one verdict line");
    assert_eq!(r["verdict"], "unsupported", "{text}");
    assert_eq!(
        r["detail"], "ggml:CPU computes rms_norm in f32 only, not f16",
        "{text}"
    );
}

/// `kedge repro` of a ggml case whose layout test-backend-ops' constructor loses (rows padded):
/// it says so, and the C program it writes builds with the command it prints and reports PASS
/// on the CPU backend against the CPU reference.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn repro_of_a_padded_ggml_case_writes_a_c_program_that_builds_and_runs() {
    let dir = build_dir();
    assert!(
        std::process::Command::new("cc")
            .arg("--version")
            .output()
            .is_ok(),
        "this test needs a C compiler (cc)"
    );
    let out = tempfile::tempdir().expect("tempdir");
    let case = r#"{"op":"cumsum","impl":"ggml:CPU","dtype":"f32","ne":[8194,2,1,1],"params":{"row_pad":7}}"#;
    let (code, text, err) = kedge(&[
        "repro",
        case,
        "--ggml",
        &dir,
        "--out",
        &out.path().display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("// this line does not reproduce the case's layout: input `x` is a view"),
        "{text}"
    );
    assert!(
        text.contains("# layout: only this program reproduces it"),
        "{text}"
    );
    assert!(
        text.contains("test_cases.emplace_back(new test_cumsum(GGML_TYPE_F32, {8194, 2, 1, 1}));")
    );
    let build = text
        .lines()
        .find(|l| l.starts_with("cc -std=c11"))
        .unwrap_or_else(|| panic!("no build command in\n{text}"));
    assert!(out.path().join("repro.c").is_file());
    let built = std::process::Command::new("sh")
        .arg("-c")
        .arg(build)
        .current_dir(out.path())
        .output()
        .expect("sh");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = std::process::Command::new(out.path().join("repro"))
        .args(["CPU", "case"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(ran.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("dst: NMSE = 0 (max 1e-07)") && stdout.ends_with("PASS\n"),
        "{stdout}"
    );
}

/// `kedge repro` of a failure memcheck saw (as ssm_conv's long-token kernel reading past its
/// input, which no value shows, was seen on CUDA0): test-backend-ops' line runs clean under
/// compute-sanitizer, as its tensors share one buffer, so the repro says so and runs the C
/// program, each tensor in its own buffer, under compute-sanitizer. On the CPU backend here,
/// with a dense case of one of kedge's ops the build computes.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn repro_of_a_memcheck_failure_runs_the_c_program_under_compute_sanitizer() {
    let dir = build_dir();
    let seen = r#"{"id":"ed66d8f13843","case":{"op":"cumsum","impl":"ggml:CPU","dtype":"f32","ne":[8194,2,1,1],"seed":1,"alloc":"exact"},"verdict":"oob-read","detector":"memcheck","detail":"memcheck: Invalid __global__ read of size 4 bytes is out of bounds in cumsum_kernel (31 records)","under":"memcheck","gpu":0,"ms":1450.06}"#;
    let (code, text, err) = kedge(&["repro", seen, "--ggml", &dir]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "// memcheck saw this, not a value: test-backend-ops puts the case's tensors in one buffer",
        "test_cases.emplace_back(new test_cumsum(GGML_TYPE_F32, {8194, 2, 1, 1}));",
        "# layout: only this program reproduces it, under compute-sanitizer",
        "compute-sanitizer --tool memcheck ./repro CPU case",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    // A value failure of the same case keeps the plain run and says both reproduce it.
    let wrong = seen
        .replace(
            r#""verdict":"oob-read","detector":"memcheck""#,
            r#""verdict":"wrong-values","detector":"reference""#,
        )
        .replace(r#""under":"memcheck""#, r#""under":"native""#);
    let (code, text, err) = kedge(&["repro", &wrong, "--ggml", &dir]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("memcheck saw this"), "{text}");
    assert!(text.contains("# layout: both reproduce it"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("./repro CPU case")),
        "{text}"
    );
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

/// The sampled judge and the whole one give every case of kedge's row ops through ggml's CPU
/// backend the same verdict and detector (small cases, judged both ways), and the sampled
/// sweep did judge them on sampled rows.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn sampled_and_whole_judging_agree_on_every_case() {
    let dir = build_dir();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut verdicts = Vec::new();
    for j in ["full", "sampled"] {
        let out = tmp.path().join(j);
        let (code, _, err) = kedge(&[
            "sweep",
            "default",
            "--ggml",
            &dir,
            "-b",
            "CPU",
            "-o",
            "rms_norm,cumsum,softmax,rms_norm_mul_add",
            "--dtype",
            "f32",
            "--judge",
            j,
            "--max-elements",
            "1048576",
            "--force",
            "--out",
            &out.display().to_string(),
        ]);
        assert!(code == 0 || code == 1, "{err}");
        let text = std::fs::read_to_string(out.join("results.jsonl")).expect("results");
        let mut by_id = std::collections::BTreeMap::new();
        let (mut sampled, mut broadcast) = (0, 0);
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("a result line");
            if v["facts"]["judged_on"].is_string() {
                sampled += 1;
                // A row-broadcast weight and bias, read whole by the sampled rows' reference.
                if v["case"]["params"]["broadcast"] == "row" && v["case"]["ne"][1] != 1 {
                    broadcast += 1;
                }
            }
            by_id.insert(
                v["id"].as_str().expect("id").to_string(),
                (v["verdict"].to_string(), v["detector"].to_string()),
            );
        }
        if j == "sampled" {
            assert!(sampled > 100, "{sampled} cases judged on sampled rows");
            assert!(
                broadcast > 10,
                "{broadcast} broadcast-weight cases judged on sampled rows"
            );
        } else {
            assert_eq!(sampled, 0);
        }
        verdicts.push(by_id);
    }
    assert_eq!(verdicts[0].len(), verdicts[1].len());
    assert_eq!(verdicts[0], verdicts[1]);
}
