//! The workflows through the real binary, on the CPU: `minimize --cpu`, `repro` (from a case
//! and from a verdict line), `selftest --cpu`, `fuzz --cpu`.

use crate::kedge;

const INCIDENT: &str = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}"#;

#[test]
fn minimize_on_the_cpu_prints_the_minimum_the_transition_and_the_repro() {
    let (rc, out, err) = kedge(&["minimize", "--cpu", INCIDENT]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("# minimized: [64,1,65536,1] -> [1,1,65536,1]"),
        "{out}"
    );
    assert!(out.contains(
        "transition ne[2]: plan fits (cpu) at 65535, launch-error (launch-contract) at 65536 (both run)"
    ));
    assert!(out.contains("// ne[2] = 65536 > grid.y limit 65535 (h200)"));
    assert!(out.contains(
        "test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {1, 1, 65536, 1}, false, 1e-6f));"
    ));
    assert!(out.contains(
        "test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {1, 1, 65535, 1}, false, 1e-6f));"
    ));
}

#[test]
fn repro_takes_a_case_or_a_verdict_line_and_rejects_garbage() {
    let (rc, out, _) = kedge(&["repro", INCIDENT]);
    assert_eq!(rc, 0);
    assert!(out.contains(r"test-backend-ops test -b CUDA0 -o RMS_NORM -p '^type=f32,ne=\[64,1,65536,1\],v=0,eps=0\.000001,inplace=0$'"));
    assert!(out.contains("nvcc -arch=sm_90 -o repro repro.cu"));
    assert!(out.contains("extern \"C\" __global__ void rms_norm_ggml_256("));
    // A verdict line with no launch limit involved: the comment names the verdict.
    let verdict = r#"{"id":"x","case":{"op":"rms_norm","impl":"clamped","dtype":"f32","ne":[1000,3,1,1]},"verdict":"wrong-values","detector":"reference","detail":"nmse 1.5e-3","under":"native","ms":1.0}"#;
    let (rc, out, err) = kedge(&["repro", verdict]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("// kedge: wrong-values (reference) with impl clamped: nmse 1.5e-3"),
        "{out}"
    );
    assert!(out.contains("rms_norm_clamped_256"));
    assert!(out.contains("# kedge saw: wrong-values (reference) under native: nmse 1.5e-3"));
    let (rc, _, err) = kedge(&["repro", "{not json"]);
    assert_eq!(rc, 2, "{err}");
}

#[test]
fn selftest_on_the_cpu_checks_the_incidents_and_says_what_did_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("st");
    let (rc, out, err) = kedge(&["selftest", "--cpu", "--out", out_dir.to_str().unwrap()]);
    // Nothing failed, but the GPU part did not run: exit 4 (GPU checks skipped).
    assert_eq!(rc, 4, "{out}\n{err}");
    assert!(out.contains("| ggml-norm-grid-y-limit |"));
    assert!(out.contains(
        "| cpu | launch-error (launch-contract) | launch-error (launch-contract) | PASS |"
    ));
    assert!(
        out.contains("| rms_norm | planted-read-past-end |"),
        "{out}"
    );
    assert!(out.contains("NOT RUN"));
    assert!(out.contains("not run:"));
    assert!(out_dir.join("selftest.md").exists());
}

#[test]
fn fuzz_on_the_cpu_appends_shrunk_finds_once() {
    let dir = tempfile::tempdir().unwrap();
    let finds = dir.path().join("finds.jsonl");
    let f = finds.to_str().unwrap();
    let (rc, out, err) = kedge(&[
        "fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", f,
    ]);
    assert_eq!(rc, 1, "{out}\n{err}");
    let text = std::fs::read_to_string(&finds).unwrap();
    // The grid.y or grid.z limit, shrunk to its transition (which one the sample reaches
    // first depends on the generator).
    assert!(
        text.contains(r#""ne":[1,1,65536,1]"#) || text.contains(r#""ne":[1,1,1,65536]"#),
        "{text}"
    );
    let n = text.lines().count();
    // The same run again finds nothing new.
    let (rc, _, _) = kedge(&[
        "fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", f,
    ]);
    assert_eq!(rc, 0);
    assert_eq!(std::fs::read_to_string(&finds).unwrap().lines().count(), n);
}

#[test]
fn a_cpu_sweep_ends_with_its_failures_and_writes_a_summary_with_the_boundary_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let (rc, _, err) = kedge(&[
        "sweep",
        "boundary",
        "--cpu",
        "-o",
        "rms_norm",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(rc, 4, "{err}");
    // The closing lines, as a test runner ends: the summary, then each failure on one line.
    assert!(err.contains("    Summary "), "{err}");
    assert!(err.contains("       FAIL ["), "{err}");
    assert!(err.contains("launch-error (launch-contract)"), "{err}");
    // Not a terminal: no colour.
    assert!(!err.contains('\u{1b}'), "{err}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.starts_with("# kedge summary"), "{summary}");
    assert!(summary.contains("## Boundary matrix"), "{summary}");
    assert!(summary.contains("| ggml · exact · cpu |"), "{summary}");
    assert!(summary.contains("## Transitions ("), "{summary}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let failures = report.find("## Failures").unwrap();
    let every = report.find("<details>").unwrap();
    assert!(failures < every, "{report}");
    assert!(
        report.contains("- test-backend-ops command: `test-backend-ops test -b CUDA0 -o RMS_NORM"),
        "{report}"
    );
}

#[test]
fn report_with_a_baseline_marks_known_failures_and_skips_them_in_junit() {
    let dir = tempfile::tempdir().unwrap();
    let results = crate::cpu_results(&dir.path().join("sweep"));
    let known = dir.path().join("known.jsonl");
    let (rc, _, err) = kedge(&[
        "gate",
        "--write-baseline",
        known.to_str().unwrap(),
        results.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let out = dir.path().join("merged");
    let (rc, _, err) = kedge(&[
        "report",
        results.to_str().unwrap(),
        "--baseline",
        known.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(!junit.contains("<failure"), "{junit}");
    assert!(
        junit.contains("known failure: launch-error (launch-contract)"),
        "{junit}"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## New failures (0)"), "{summary}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("· known failure"), "{report}");
    // The sweep's summary beside the results names where it ran.
    assert!(
        report.contains("Ran on: cpu: profile h200 (no GPU used)."),
        "{report}"
    );
}

#[test]
fn a_time_limited_sweep_names_what_did_not_run_the_gate_misses_them_and_resume_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let sweep = |extra: &[&str]| {
        let mut a = vec!["sweep", "boundary", "--cpu", "-o", "rms_norm", "--out", d];
        a.extend_from_slice(extra);
        kedge(&a)
    };
    // No time at all: the first case runs, the rest are named, exit 6.
    let (rc, _, err) = sweep(&["--max-time", "0s"]);
    assert_eq!(rc, 6, "{err}");
    assert!(
        err.contains("--max-time 0s is too small for one case"),
        "{err}"
    );
    assert!(err.contains("cases not run, named in"), "{err}");
    let plan = std::fs::read_to_string(dir.path().join("plan.jsonl")).unwrap();
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    let not_run = std::fs::read_to_string(dir.path().join("not-run.jsonl")).unwrap();
    assert_eq!(results.lines().count(), 1);
    assert_eq!(not_run.lines().count(), plan.lines().count() - 1);
    // The gate expecting the plan fails, each case not run named as missing, and says why.
    let baseline = dir.path().join("none.jsonl");
    std::fs::write(&baseline, "# none\n").unwrap();
    let res = dir.path().join("results.jsonl");
    let (rc, out, err) = kedge(&[
        "gate",
        "--baseline",
        baseline.to_str().unwrap(),
        res.to_str().unwrap(),
        "--expect",
        dir.path().join("plan.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(rc, 1, "{out}{err}");
    let missing: Vec<&str> = out.lines().filter(|l| l.starts_with("MISSING ")).collect();
    assert_eq!(missing.len(), not_run.lines().count(), "{out}");
    for line in not_run.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let c: kedge_core::Case = serde_json::from_value(v["case"].clone()).unwrap();
        assert!(out.contains(&format!("MISSING {}", c.id())), "{out}");
    }
    assert!(
        err.contains("the sweep's --max-time ran out before they started"),
        "{err}"
    );
    // --resume runs exactly those, and the sweep is whole again.
    let (rc, _, err) = sweep(&["--resume"]);
    assert_eq!(rc, 4, "{err}");
    assert!(
        err.contains(&format!(
            "1 cases already finished, {} to run",
            not_run.lines().count()
        )),
        "{err}"
    );
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    assert_eq!(results.lines().count(), plan.lines().count());
    assert!(!dir.path().join("not-run.jsonl").exists());
}
