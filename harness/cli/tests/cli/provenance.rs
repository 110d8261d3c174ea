//! Results and baselines that know what they are of: every verdict carries its run (kedge's
//! build, the profile, the mode, the suite); `gate` and `report` refuse a baseline of another
//! profile, mode or suite, and results that mix them (exit 2, both sides named);
//! `gate --update` says what changed; `sweep --resume` continues only the same run.

use crate::kedge;
use std::path::{Path, PathBuf};

/// A CPU sweep of rms_norm's cases with `extra` flags into `dir`: its results.jsonl.
fn sweep(dir: &Path, suite: &str, extra: &[&str]) -> PathBuf {
    let out = dir.to_str().unwrap();
    let mut args = vec!["sweep", suite, "--cpu", "-o", "rms_norm", "--out", out];
    args.extend_from_slice(extra);
    let (rc, _, err) = kedge(&args);
    assert_eq!(rc, 4, "{err}");
    dir.join("results.jsonl")
}

fn baseline_of(results: &Path, at: &Path) -> PathBuf {
    let (rc, _, err) = kedge(&[
        "gate",
        "--write-baseline",
        at.to_str().unwrap(),
        results.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    at.to_path_buf()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_verdict_and_the_baseline_record_the_run() {
    let d = tempfile::tempdir().unwrap();
    let results = sweep(&d.path().join("a"), "boundary", &[]);
    let text = std::fs::read_to_string(&results).unwrap();
    let (_, version, _) = kedge(&["--version"]);
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let run = &r["run"];
        assert_eq!(run["profile"], "h200", "{line}");
        assert_eq!(run["mode"], "cpu/exact", "{line}");
        assert_eq!(run["impls"], serde_json::json!(["kedge"]), "{line}");
        assert_eq!(run["suite"]["name"], "boundary -o rms_norm", "{line}");
        assert_eq!(run["kedge"], env!("CARGO_PKG_VERSION"), "{line}");
        // `kedge --version` names the same commit.
        let commit = run["commit"].as_str().unwrap();
        assert!(version.contains(&format!("(commit {commit})")), "{version}");
    }
    let b = baseline_of(&results, &d.path().join("known.jsonl"));
    let base = std::fs::read_to_string(&b).unwrap();
    let run_line = base.lines().find(|l| !l.starts_with('#')).unwrap();
    let v: serde_json::Value = serde_json::from_str(run_line).unwrap();
    assert_eq!(v["run"]["mode"], "cpu/exact", "{base}");
    let entry = base.lines().filter(|l| !l.starts_with('#')).nth(1).unwrap();
    let e: serde_json::Value = serde_json::from_str(entry).unwrap();
    assert_eq!(e["detector"], "launch-contract", "{entry}");
    assert!(e["reason"].as_str().unwrap().contains("grid"), "{entry}");
    // The same run gates, and says what it compared.
    let (rc, out, err) = kedge(&["gate", "--baseline", s(&b), s(&results)]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.starts_with(
            "baseline and results: profile h200, mode cpu/exact, suite boundary -o rms_norm ("
        ),
        "{out}"
    );
    assert!(out.contains("; both from kedge "), "{out}");
}

#[test]
fn a_baseline_of_another_profile_mode_or_suite_is_refused_naming_both() {
    let d = tempfile::tempdir().unwrap();
    let results = sweep(&d.path().join("a"), "boundary", &[]);
    let b = baseline_of(&results, &d.path().join("known.jsonl"));
    let guard = sweep(&d.path().join("guard"), "boundary", &["--alloc", "guard"]);
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&guard)]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("the baseline is of mode cpu/exact, the results of mode cpu/guard"),
        "{err}"
    );
    let other = sweep(&d.path().join("rtx"), "boundary", &["--profile", "rtx3090"]);
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&other)]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("the baseline is of profile h200, the results of profile rtx3090"),
        "{err}"
    );
    let smoke = sweep(&d.path().join("smoke"), "smoke", &[]);
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&smoke)]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("the baseline is of suite boundary -o rms_norm (")
            && err.contains("the results of suite smoke -o rms_norm ("),
        "{err}"
    );
    // kedge report with the baseline refuses the same way.
    let (rc, _, err) = kedge(&[
        "report",
        s(&guard),
        "--baseline",
        s(&b),
        "--out",
        s(&d.path().join("r")),
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("mode cpu/exact") && err.contains("mode cpu/guard"),
        "{err}"
    );
}

#[test]
fn results_that_mix_modes_or_suites_are_refused_naming_both() {
    let d = tempfile::tempdir().unwrap();
    let exact = sweep(&d.path().join("a"), "boundary", &["--shard", "1/2"]);
    let b = baseline_of(&exact, &d.path().join("known.jsonl"));
    let guard = sweep(
        &d.path().join("g"),
        "boundary",
        &["--shard", "2/2", "--alloc", "guard"],
    );
    for args in [
        vec!["gate", "--baseline", s(&b), s(&exact), s(&guard)],
        vec![
            "report",
            s(&exact),
            s(&guard),
            "--out",
            s(&d.path().join("r")),
        ],
    ] {
        let (rc, _, err) = kedge(&args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "the results mix two modes: cpu/exact ({}:1) and cpu/guard ({}:1)",
                exact.display(),
                guard.display()
            )),
            "{err}"
        );
    }
    // A shard of another suite.
    let smoke = sweep(&d.path().join("s"), "smoke", &["--shard", "2/2"]);
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&exact), s(&smoke)]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("the results mix two suites: boundary -o rms_norm (")
            && err.contains("smoke -o rms_norm ("),
        "{err}"
    );
    // The two shards of one suite merge and gate.
    let other = sweep(&d.path().join("b"), "boundary", &["--shard", "2/2"]);
    let all = baseline_of(&exact, &d.path().join("all.jsonl"));
    let (rc, out, err) = kedge(&["gate", "--baseline", s(&all), s(&exact), s(&other)]);
    assert!(rc == 0 || rc == 1, "{out}{err}");
    assert!(out.starts_with("baseline and results:"), "{out}");
}

#[test]
fn results_or_baselines_without_metadata_are_read_and_the_missing_check_is_said() {
    let d = tempfile::tempdir().unwrap();
    let results = sweep(&d.path().join("a"), "boundary", &[]);
    let b = baseline_of(&results, &d.path().join("known.jsonl"));
    // An older baseline: no run line.
    let text = std::fs::read_to_string(&b).unwrap();
    let old_b = d.path().join("old-known.jsonl");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("{\"run\""))
        .collect();
    std::fs::write(&old_b, kept.join("\n") + "\n").unwrap();
    let (rc, out, err) = kedge(&["gate", "--baseline", s(&old_b), s(&results)]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("records no profile, mode or suite (a baseline of an older kedge)"),
        "{out}"
    );
    // Older results: no run on any line.
    let strip = |text: &str| -> String {
        text.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("run");
                v.to_string() + "\n"
            })
            .collect()
    };
    let old_r = d.path().join("old.jsonl");
    std::fs::write(&old_r, strip(&std::fs::read_to_string(&results).unwrap())).unwrap();
    let (rc, out, err) = kedge(&["gate", "--baseline", s(&b), s(&old_r)]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("the results carry no run metadata"), "{out}");
    // Old and new lines together are not one run.
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&results), s(&old_r)]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("carries run metadata and"), "{err}");
}

#[test]
fn update_rewrites_the_baseline_and_says_what_changed() {
    let d = tempfile::tempdir().unwrap();
    let results = sweep(&d.path().join("a"), "boundary", &[]);
    let b = baseline_of(&results, &d.path().join("known.jsonl"));
    let before = std::fs::read_to_string(&b).unwrap();
    // Nothing changed: nothing to say but the counts.
    let (rc, out, err) = kedge(&["gate", "--update", s(&b), s(&results)]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains(": 0 added, 0 removed, 0 changed, "), "{out}");
    assert_eq!(std::fs::read_to_string(&b).unwrap(), before);
    // One known failure passes now, one case fails differently: both said.
    let text = std::fs::read_to_string(&results).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failing: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i]["verdict"] == "launch-error")
        .collect();
    assert!(failing.len() >= 2);
    let (fixed_id, changed_id) = (
        lines[failing[0]]["id"].as_str().unwrap().to_string(),
        lines[failing[1]]["id"].as_str().unwrap().to_string(),
    );
    lines[failing[0]]["verdict"] = "pass".into();
    lines[failing[1]]["verdict"] = "wrong-values".into();
    let now = d.path().join("now.jsonl");
    let body: String = lines.iter().map(|v| v.to_string() + "\n").collect();
    std::fs::write(&now, body).unwrap();
    let (rc, out, err) = kedge(&["gate", "--update", s(&b), s(&now)]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains(": 0 added, 1 removed, 1 changed, "), "{out}");
    assert!(out.contains(&format!("REMOVED {fixed_id} ")), "{out}");
    assert!(out.contains("passes now"), "{out}");
    assert!(
        out.contains(&format!("CHANGED {changed_id} ")) && out.contains("-> wrong-values"),
        "{out}"
    );
    // The comment header is kept.
    let after = std::fs::read_to_string(&b).unwrap();
    assert_eq!(
        after.lines().next(),
        before.lines().next(),
        "the header stays"
    );
    let (rc, _, err) = kedge(&["gate", "--baseline", s(&b), s(&now)]);
    assert_eq!(rc, 0, "{err}");
    // Nothing to make a baseline of.
    let empty = d.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let (rc, _, err) = kedge(&["gate", "--update", s(&b), s(&empty)]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("no baseline written") && err.contains("no results in them"),
        "{err}"
    );
}

#[test]
fn a_baseline_of_two_runs_that_disagree_on_a_case_knows_it_is_intermittent() {
    let d = tempfile::tempdir().unwrap();
    let first = sweep(&d.path().join("a"), "boundary", &[]);
    // The second run: one case that failed in the first passes (a read past a buffer that
    // faults only when the page after it is unmapped does that).
    let mut lines: Vec<serde_json::Value> = std::fs::read_to_string(&first)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let i = (0..lines.len())
        .find(|&i| lines[i]["verdict"] == "launch-error")
        .unwrap();
    let id = lines[i]["id"].as_str().unwrap().to_string();
    lines[i]["verdict"] = "pass".into();
    let second = d.path().join("second.jsonl");
    let body: String = lines.iter().map(|v| v.to_string() + "\n").collect();
    std::fs::write(&second, body).unwrap();

    // Each run's own baseline: the second fails the first's gate (a known failure passes).
    let one = baseline_of(&first, &d.path().join("one.jsonl"));
    let (rc, out, _) = kedge(&["gate", "--baseline", s(&one), s(&second)]);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains(&format!("FIXED   {id} ")), "{out}");
    // Both runs' baseline: the case is intermittent, and both runs pass the gate.
    let both = d.path().join("both.jsonl");
    let (rc, _, err) = kedge(&["gate", "--write-baseline", s(&both), s(&first), s(&second)]);
    assert_eq!(rc, 0, "{err}");
    let text = std::fs::read_to_string(&both).unwrap();
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"intermittent\":true"))
        .collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].contains(&id), "{text}");
    for run in [&first, &second] {
        let (rc, out, err) = kedge(&["gate", "--baseline", s(&both), s(run)]);
        assert_eq!(rc, 0, "{out}{err}");
    }
    let (_, out, _) = kedge(&["gate", "--baseline", s(&both), s(&second)]);
    assert!(out.contains("1 known intermittent passing"), "{out}");
    assert!(out.contains(&format!("INTERMITTENT {id} ")), "{out}");
    // An update from the run that passed it keeps it.
    let (rc, out, err) = kedge(&["gate", "--update", s(&both), s(&second)]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains(": 0 added, 0 removed, 0 changed, "), "{out}");
    assert_eq!(std::fs::read_to_string(&both).unwrap(), text);
}

#[test]
fn resume_refuses_results_of_another_run() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("a");
    sweep(&out, "boundary", &[]);
    // The same run continues.
    sweep(&out, "boundary", &["--resume"]);
    let (rc, _, err) = kedge(&[
        "sweep",
        "boundary",
        "--cpu",
        "-o",
        "rms_norm",
        "--profile",
        "rtx3090",
        "--resume",
        "--out",
        s(&out),
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("profile h200 here, rtx3090 now"), "{err}");
    assert!(err.contains("pass --force to start over"), "{err}");
    let (rc, _, err) = kedge(&[
        "sweep",
        "smoke",
        "--cpu",
        "-o",
        "rms_norm",
        "--resume",
        "--out",
        s(&out),
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("suite boundary -o rms_norm (") && err.contains("here, smoke -o rms_norm ("),
        "{err}"
    );
    // --force starts over.
    let (rc, _, err) = kedge(&[
        "sweep",
        "smoke",
        "--cpu",
        "-o",
        "rms_norm",
        "--force",
        "--out",
        s(&out),
    ]);
    assert_eq!(rc, 4, "{err}");
}

/// scripts/compare-case-ids.sh: a plan against results lists the same ids; a difference is
/// listed id by id, exit 1.
#[test]
fn compare_case_ids_lists_the_difference() {
    let d = tempfile::tempdir().unwrap();
    let results = sweep(&d.path().join("a"), "boundary", &[]);
    let plan = d.path().join("a/plan.jsonl");
    let script = crate::root().join("scripts/compare-case-ids.sh");
    let run = |a: &Path, b: &Path| {
        let o = std::process::Command::new("bash")
            .arg(&script)
            .arg(a)
            .arg(b)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (rc, out) = run(&plan, &results);
    assert_eq!(rc, 0, "{out}");
    let n = std::fs::read_to_string(&plan).unwrap().lines().count();
    assert!(out.contains(&format!("the same {n} case ids")), "{out}");
    // The plan without its first case: that case is only in the results.
    let text = std::fs::read_to_string(&plan).unwrap();
    let first = text.lines().next().unwrap();
    let fewer = d.path().join("fewer.jsonl");
    std::fs::write(
        &fewer,
        text.lines().skip(1).collect::<Vec<_>>().join("\n") + "\n",
    )
    .unwrap();
    let c: kedge_core::Case = serde_json::from_str(first).unwrap();
    let (rc, out) = run(&fewer, &results);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("only in B (1):"), "{out}");
    assert!(
        out.contains(&format!("  {}\t{{\"op\":\"rms_norm\"", c.id())),
        "{out}"
    );
}
