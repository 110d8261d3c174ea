//! What a sweep tells, as data: `--format json` puts every event on stdout, one JSON object a
//! line, beside the console on stderr; a console that cannot be written fails the command
//! once its files are written, instead of going quiet.

use crate::root;
use std::process::{Command, Stdio};

#[test]
fn sweep_format_json_tells_every_event_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let (rc, stdout, stderr) = crate::kedge(&[
        "sweep",
        "smoke",
        "--cpu",
        "-o",
        "rms_norm",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(rc, 4, "{stderr}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        events.iter().filter(|e| e["event"] == kind).collect()
    };
    let plan = of("plan-ready");
    assert_eq!(plan.len(), 1, "{stdout}");
    let cases = plan[0]["cases"].as_u64().expect("a count") as usize;
    assert!(cases > 0);
    assert_eq!(plan[0]["runs"], serde_json::json!(["cpu"]));
    // Every case's verdict, counted in order, each as results.jsonl holds it.
    let done: Vec<u64> = of("case-finished")
        .iter()
        .map(|e| e["done"].as_u64().expect("done"))
        .collect();
    assert_eq!(done, (1..=cases as u64).collect::<Vec<_>>());
    let lines = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), cases);
    let phases: Vec<&str> = of("phase")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(phases, ["plan", "run", "summary", "reports"]);
    let summary = of("summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["results"].as_u64(), Some(cases as u64));
    let ended = of("ended");
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["how"], "gpu-skipped");
    assert_eq!(ended[0]["status"], 4);
    // The console is the same as without --format json.
    assert!(
        stderr.contains("GPU checks skipped") && stderr.contains("Summary"),
        "{stderr}"
    );
}

#[test]
fn a_console_that_cannot_be_written_fails_the_sweep_after_its_files() {
    let full = std::path::Path::new("/dev/full");
    assert!(full.exists(), "this test needs Linux's /dev/full");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let status = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out"])
        .arg(&out)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(std::fs::File::options().write(true).open(full).unwrap())
        .status()
        .expect("run kedge");
    // 5: the environment (a full disk), not 4 (GPU checks skipped) as if all was said.
    assert_eq!(status.code(), Some(5));
    // Nothing lost: every result and report is written before the failure is returned.
    let plan = std::fs::read_to_string(out.join("plan.jsonl")).unwrap();
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert_eq!(plan.lines().count(), results.lines().count());
    assert!(out.join("report.md").is_file());
}

#[test]
fn a_plan_whose_output_cannot_be_written_ends_with_status_5() {
    let full = std::path::Path::new("/dev/full");
    assert!(full.exists(), "this test needs Linux's /dev/full");
    let open = || std::fs::File::options().write(true).open(full).unwrap();
    // stdout full: the plan's lines are lost, and the status says so.
    let status = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(["plan", "-o", "rms_norm", "--suite", "smoke"])
        .current_dir(root())
        .stdout(open())
        .stderr(Stdio::null())
        .status()
        .expect("run kedge");
    assert_eq!(status.code(), Some(5));
    // Only the notes on stderr lost: the same.
    let status = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(["plan", "-o", "rms_norm", "--suite", "smoke"])
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(open())
        .status()
        .expect("run kedge");
    assert_eq!(status.code(), Some(5));
}
