//! `plan` names the broken limit and exits 1, fits exit 0; bad input of every kind exits 2
//! with a message naming the problem; `run` without a driver exits 3.

use crate::kedge;

#[test]
fn plan_names_grid_y_past_65535_and_nothing_at_65535() {
    let (rc, out, _) = kedge(&[
        "plan",
        "--profile",
        "h200",
        "-o",
        "rms_norm",
        "--impl",
        "ggml",
        "--ne",
        "64,1,65536,1",
    ]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains(
            "VIOLATION rms_norm_ggml_256: grid.y = 65536 exceeds the limit 65535 (profile h200)"
        ),
        "{out}"
    );
    let (rc, out, _) = kedge(&[
        "plan",
        "--profile",
        "h200",
        "-o",
        "rms_norm",
        "--impl",
        "ggml",
        "--ne",
        "64,1,65535,1",
    ]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("ok: fits profile h200") && !out.contains("VIOLATION"),
        "{out}"
    );
}

#[test]
fn bad_input_exits_2_and_names_the_problem() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "plan",
                "--case",
                r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,0,1,1]}"#,
            ],
            "ne[1] is 0",
        ),
        (
            &[
                "plan",
                "--case",
                r#"{"op":"rms_nrm","impl":"ggml","dtype":"f32","ne":[64,1,1,1]}"#,
            ],
            "unknown op 'rms_nrm'",
        ),
        (
            &[
                "plan",
                "--case",
                r#"{"op":"rms_norm","impl":"ggm","dtype":"f32","ne":[64,1,1,1]}"#,
            ],
            "no impl 'ggm'",
        ),
        (
            &[
                "plan",
                "--case",
                r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,1,1],"params":{"epz":1}}"#,
            ],
            "no parameter 'epz'",
        ),
        (
            &[
                "plan",
                "--case",
                r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[9223372036854775807,4,1,1]}"#,
            ],
            "more elements than fit",
        ),
        (
            &["plan", "--case", r#"{"op":"rms_norm","impl":"ggml""#],
            "malformed case JSON",
        ),
        (
            &[
                "plan",
                "--profile",
                "nope",
                "-o",
                "rms_norm",
                "--impl",
                "ggml",
                "--ne",
                "4",
            ],
            "unknown profile 'nope'",
        ),
    ];
    for (args, want) in cases {
        let (rc, _, err) = kedge(args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected '{want}' in: {err}");
    }
}

#[test]
fn a_corpus_error_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.jsonl");
    std::fs::write(
        &p,
        "# comment\n{\"op\":\"rms_norm\",\"impl\":\"ggml\",\"dtype\":\"f32\",\"ne\":[64,1,1,1]}\n{\"op\":\"rms_norm\",\"impl\":\"ggml\",\"dtype\":\"f32\",\"ne\":[-3,1,1,1]}\n",
    )
    .unwrap();
    let (rc, _, err) = kedge(&["plan", "--corpus", p.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("line 3") && err.contains("ne[0] is -3"),
        "{err}"
    );
}

#[test]
fn run_without_a_driver_exits_3() {
    if kedge_core::cuda::driver_present() {
        // On a GPU machine `run` runs; its statuses are the GPU tests' business.
        return;
    }
    let (rc, _, err) = kedge(&["run", "-o", "rms_norm", "--impl", "clamped", "--ne", "64"]);
    assert_eq!(rc, 3, "{err}");
    assert!(err.contains("no CUDA driver"), "{err}");
    assert!(
        err.contains("`kedge plan` checks launches without one"),
        "{err}"
    );
}

#[test]
fn ggml_spelling_selects_the_op_and_the_worker_is_hidden() {
    let (rc, out, err) = kedge(&["list", "-o", "RMS_NORM"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("rms_norm — "), "{out}");
    assert!(!out.contains("\nnorm — "), "{out}");
    let (_, help, _) = kedge(&["--help"]);
    assert!(
        help.contains("compare-runs") && !help.contains("  worker"),
        "{help}"
    );
}

/// test-backend-ops' habits: `-o` takes the `OP(vars)` form `kedge repro` prints and selects
/// that case; `-p` is its regex over vars(); `--param` sets a parameter.
#[test]
fn test_backend_ops_flags_mean_what_they_mean_there() {
    let incident = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}"#;
    let (rc, repro, err) = kedge(&["repro", incident]);
    assert_eq!(rc, 0, "{err}");
    let named = repro
        .lines()
        .find_map(|l| l.strip_prefix("# test-backend-ops names it: "))
        .expect("repro names the case as test-backend-ops does");
    assert_eq!(
        named,
        "RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0)"
    );
    let lines = |args: &[&str]| -> Vec<serde_json::Value> {
        let (rc, out, err) = kedge(args);
        assert!(rc == 0 || rc == 1, "{args:?}: {err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let one = lines(&["plan", "--json", "-o", named, "--impl", "ggml"]);
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(one[0]["case"]["ne"], serde_json::json!([64, 1, 65536, 1]));
    // Beside another op, commas and all.
    let two = lines(&["plan", "--json", "-o", &format!("{named},softmax")]);
    assert!(two.iter().any(|r| r["case"]["op"] == "softmax"));
    let norms: Vec<_> = two
        .iter()
        .filter(|r| r["case"]["op"] == "rms_norm")
        .collect();
    assert_eq!(norms.len(), 2, "ggml and clamped: {norms:?}");
    // -p: the regex over vars(), anchored as repro anchors it.
    let p = lines(&[
        "plan",
        "--json",
        "-o",
        "RMS_NORM",
        "--impl",
        "ggml",
        "-p",
        r"^type=f32,ne=\[64,1,65536,1\],v=0,eps=0\.000001,inplace=0$",
    ]);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0]["id"], one[0]["id"]);
    // --param sets a parameter in every case.
    let set = lines(&[
        "plan",
        "--json",
        "-o",
        "rms_norm",
        "--impl",
        "clamped",
        "--param",
        "eps=0.001",
    ]);
    assert!(!set.is_empty());
    assert!(set.iter().all(|r| r["case"]["params"]["eps"] == 0.001));
}
