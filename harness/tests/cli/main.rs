//! The `kedge` binary's contract on a machine without a GPU: `plan` names the broken limit and
//! exits 1, fits exit 0; bad input of every kind exits 2 with a message naming the problem;
//! `run` without a driver exits 3.

use std::process::Command;

fn kedge(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(args)
        .output()
        .expect("run kedge");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
    if kedge_core::device::driver_present() {
        eprintln!("SKIPPED: this machine has a CUDA driver");
        return;
    }
    let (rc, _, err) = kedge(&["run", "-o", "rms_norm", "--impl", "clamped", "--ne", "64"]);
    assert_eq!(rc, 3, "{err}");
    assert!(err.contains("no CUDA driver"), "{err}");
}
