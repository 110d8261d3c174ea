//! Every exit status of the README's table, for every subcommand that takes the flag or the
//! input in question: 0 ok, 1 failures, 2 bad input, 3 no GPU where one is needed, 4 sweep
//! or selftest without a GPU, 5 the environment, 6 a sweep's time limit ran out. Arguments starting with `@` name fixtures:
//! `@results` (a CPU sweep's results), `@plan` (its plan.jsonl), `@summary`, `@known` (a
//! baseline of its failures), `@none` (an empty baseline), `@fixed` (a known failure now
//! passing), `@torn` (a cut-off results file), `@extra` (a plan with a case not run),
//! `@empty`, `@comments`, `@garbage` (binary bytes), `@missing`, `@new` (a fresh directory).

use crate::{cpu_results, kedge};
use rstest::rstest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const INCIDENT: &str = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}"#;
const PASSING: &str = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1]}"#;

fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("exit-status-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let results = cpu_results(&d.join("sweep"));
        let text = std::fs::read_to_string(&results).unwrap();
        std::fs::copy(&results, d.join("results.jsonl")).unwrap();
        std::fs::copy(d.join("sweep/plan.jsonl"), d.join("plan.jsonl")).unwrap();
        std::fs::copy(d.join("sweep/sweep-summary.json"), d.join("summary.json")).unwrap();
        let (rc, _, err) = kedge(&[
            "gate",
            "--write-baseline",
            d.join("known.jsonl").to_str().unwrap(),
            results.to_str().unwrap(),
        ]);
        assert_eq!(rc, 0, "{err}");
        std::fs::write(d.join("none.jsonl"), "# no known failures\n").unwrap();
        // One known failure now passes.
        let mut fixed = Vec::new();
        let mut done = false;
        for line in text.lines() {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if !done && v["verdict"] == "launch-error" {
                v["verdict"] = "pass".into();
                v["detector"] = "none".into();
                done = true;
            }
            fixed.push(v.to_string());
        }
        assert!(done, "the fixture sweep has a launch-error");
        std::fs::write(d.join("fixed.jsonl"), fixed.join("\n") + "\n").unwrap();
        let first = text.lines().next().unwrap();
        std::fs::write(
            d.join("torn.jsonl"),
            format!("{text}{}", &first[..first.len() / 2]),
        )
        .unwrap();
        let plan = std::fs::read_to_string(d.join("plan.jsonl")).unwrap();
        std::fs::write(d.join("extra.jsonl"), format!("{plan}{PASSING}\n")).unwrap();
        std::fs::write(d.join("empty.jsonl"), "").unwrap();
        std::fs::write(
            d.join("comments.jsonl"),
            "# nothing here\n\n# still nothing\n",
        )
        .unwrap();
        std::fs::write(d.join("garbage.bin"), [0xff, 0xfe, 0x00, 0x9c, 0x80, 0x81]).unwrap();
        d
    })
}

/// `@name` → the fixture's path; `@new` → a fresh path; `@garbage/x` → a path under a file.
fn arg(a: &str) -> String {
    static NEW: AtomicUsize = AtomicUsize::new(0);
    let Some(name) = a.strip_prefix('@') else {
        return a.to_string();
    };
    let d = fixtures();
    let (head, tail) = name.split_once('/').unwrap_or((name, ""));
    let p = match head {
        "new" => d.join(format!("new-{}", NEW.fetch_add(1, Ordering::SeqCst))),
        "garbage" => d.join("garbage.bin"),
        "missing" => d.join("does-not-exist.jsonl"),
        "summary" => d.join("summary.json"),
        other => d.join(format!("{other}.jsonl")),
    };
    let p = if tail.is_empty() { p } else { p.join(tail) };
    p.display().to_string()
}

#[rstest]
// 0: ran, nothing failed.
#[case::plan_fits(&["plan", "-o", "rms_norm", "--impl", "ggml", "--ne", "64,1,65535,1"], 0, "fits profile h200")]
#[case::list(&["list"], 0, "")]
#[case::limits_profile(&["limits", "--profile", "h200"], 0, "")]
#[case::repro(&["repro", INCIDENT], 0, "")]
#[case::minimize_cpu(&["minimize", "--cpu", INCIDENT], 0, "")]
#[case::report(&["report", "@results", "--out", "@new"], 0, "report.md")]
#[case::report_baseline(&["report", "@results", "--baseline", "@known", "--out", "@new"], 0, "summary.md")]
#[case::gate_github(&["gate", "--baseline", "@known", "@results", "--format", "github"], 0, "::notice title=kedge gate PASS::gate: PASS")]
#[case::gate_known(&["gate", "--baseline", "@known", "@results"], 0, "gate: PASS")]
#[case::gate_expect_plan(&["gate", "--baseline", "@known", "@results", "--expect", "@plan"], 0, "gate: PASS")]
#[case::gate_write_baseline(&["gate", "--write-baseline", "@new", "@results"], 0, "written")]
#[case::compare_runs(&["compare-runs", "@summary"], 0, "| cpu |")]
// 1: failures.
#[case::plan_violation(&["plan", "-o", "rms_norm", "--impl", "ggml", "--ne", "64,1,65536,1"], 1, "VIOLATION")]
#[case::gate_new(&["gate", "--baseline", "@none", "@results"], 1, "new failure")]
#[case::gate_new_github(&["gate", "--baseline", "@none", "@results", "--format", "github"], 1, "::error title=kedge%3A new failure rms_norm/ggml")]
#[case::gate_fixed_github(&["gate", "--baseline", "@known", "@fixed", "--format", "github"], 1, "::error title=kedge%3A known failure now passes")]
#[case::gate_fixed(&["gate", "--baseline", "@known", "@fixed"], 1, "now pass: remove them from the baseline")]
#[case::gate_no_results(&["gate", "--baseline", "@known", "@empty"], 1, "no results")]
#[case::gate_torn(&["gate", "--baseline", "@known", "@torn"], 1, "cut off")]
#[case::gate_missing(&["gate", "--baseline", "@known", "@results", "--expect", "@extra"], 1, "1 of")]
#[case::gate_expect_smoke(&["gate", "--baseline", "@known", "@results", "--expect", "smoke"], 1, "expected cases have no result")]
#[case::fuzz_finds(&["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", "@new/f.jsonl"], 1, "find:")]
#[case::fuzz_no_shrinks(&["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--max-shrinks", "0", "--finds", "@new/f.jsonl"], 1, "not shrunk (--max-shrinks 0)")]
#[case::fuzz_no_limit(&["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--max-elements", "0", "--max-shrinks", "0", "--finds", "@new/f.jsonl"], 1, "fuzz: 60 cases")]
// 2: bad input.
#[case::plan_alloc(&["plan", "--alloc", "bogus"], 2, "unknown allocation mode 'bogus'")]
#[case::run_alloc(&["run", "--alloc", "bogus"], 2, "unknown allocation mode 'bogus'")]
#[case::sweep_alloc(&["sweep", "--cpu", "--out", "@new", "--alloc", "bogus"], 2, "unknown allocation mode 'bogus'")]
#[case::fuzz_alloc(&["fuzz", "--cpu", "--alloc", "bogus", "--finds", "@new/f.jsonl"], 2, "unknown allocation mode 'bogus'")]
#[case::list_op(&["list", "-o", "nosuch"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::plan_op(&["plan", "-o", "nosuch"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::run_op(&["run", "-o", "nosuch"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::sweep_op(&["sweep", "--cpu", "--out", "@new", "-o", "nosuch"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::fuzz_op(&["fuzz", "--cpu", "-o", "nosuch", "--finds", "@new/f.jsonl"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::selftest_op(&["selftest", "--cpu", "-o", "nosuch", "--out", "@new"], 2, "unknown op 'nosuch' (known: rms_norm")]
#[case::plan_impl(&["plan", "--impl", "nosuch"], 2, "no selected op has an impl 'nosuch'")]
#[case::run_impl(&["run", "--impl", "nosuch"], 2, "no selected op has an impl 'nosuch'")]
#[case::sweep_impl(&["sweep", "smoke", "--cpu", "--out", "@new", "--impl", "nosuch"], 2, "no selected op has an impl 'nosuch'")]
#[case::fuzz_impl(&["fuzz", "--cpu", "--impl", "nosuch", "--finds", "@new/f.jsonl"], 2, "no selected op has an impl 'nosuch'")]
#[case::plan_dtype(&["plan", "-o", "sdpa_prefill", "--dtype", "f16"], 2, "does not support dtype f16")]
#[case::run_dtype(&["run", "-o", "sdpa_prefill", "--dtype", "f16"], 2, "does not support dtype f16")]
#[case::sweep_dtype(&["sweep", "--cpu", "--out", "@new", "-o", "sdpa_prefill", "--dtype", "f16"], 2, "does not support dtype f16")]
#[case::fuzz_dtype(&["fuzz", "--cpu", "-o", "sdpa_prefill", "--dtype", "f16", "--finds", "@new/f.jsonl"], 2, "does not support dtype f16")]
#[case::plan_dtype_unknown(&["plan", "--dtype", "f64"], 2, "unknown dtype 'f64'")]
#[case::plan_param(&["plan", "-o", "rms_norm", "--param", "epz=1"], 2, "no parameter 'epz'")]
#[case::run_param(&["run", "-o", "rms_norm", "--param", "epz=1"], 2, "no parameter 'epz'")]
#[case::sweep_param(&["sweep", "--cpu", "--out", "@new", "-o", "rms_norm", "--param", "epz=1"], 2, "no parameter 'epz'")]
#[case::fuzz_param(&["fuzz", "--cpu", "-o", "rms_norm", "--param", "epz=1", "--finds", "@new/f.jsonl"], 2, "no parameter 'epz'")]
#[case::plan_param_value(&["plan", "-o", "rms_norm", "--param", "row_pad=-1"], 2, "is outside [0, 4096]")]
#[case::plan_param_syntax(&["plan", "--param", "eps"], 2, "takes NAME=VALUE")]
#[case::plan_filter_bad(&["plan", "--filter", "("], 2, "is not a regular expression")]
#[case::plan_p_bad(&["plan", "-p", "("], 2, "is not a regular expression")]
#[case::plan_p_old_param_form(&["plan", "-o", "rms_norm", "-p", "row_pad=3"], 2, "to set parameter row_pad in every case, use --param row_pad=3")]
#[case::sweep_p_old_param_form(&["sweep", "--cpu", "--out", "@new", "-o", "rms_norm", "-p", "eps=1e-3"], 2, "use --param eps=1e-3")]
#[case::plan_vars_no_case(&["plan", "-o", "RMS_NORM(type=f32,ne=[1,2,3,4],v=0,eps=0.000001,inplace=0)"], 2, "left none of the")]
#[case::plan_op_without_impl(&["plan", "-o", "xielu"], 2, "no impl of xielu is loaded")]
#[case::plan_vars_unknown_op(&["plan", "-o", "NO_SUCH_OP(type=f32)"], 2, "unknown op 'NO_SUCH_OP'")]
#[case::plan_backend_without_ggml(&["plan", "-b", "CUDA0"], 2, "--ggml")]
#[case::sweep_backend_without_ggml(&["sweep", "--cpu", "--out", "@new", "-b", "CUDA0"], 2, "--ggml")]
#[case::run_filter_bad(&["run", "--filter", "("], 2, "is not a regular expression")]
#[case::sweep_filter_bad(&["sweep", "--cpu", "--out", "@new", "--filter", "("], 2, "is not a regular expression")]
#[case::fuzz_filter_bad(&["fuzz", "--cpu", "--filter", "(", "--finds", "@new/f.jsonl"], 2, "is not a regular expression")]
#[case::plan_filter_empty(&["plan", "--filter", "nothing-matches"], 2, "no case selected")]
#[case::run_filter_empty(&["run", "--filter", "nothing-matches"], 2, "no case selected")]
#[case::sweep_filter_empty(&["sweep", "--cpu", "--out", "@new", "--filter", "nothing-matches"], 2, "no case selected")]
#[case::fuzz_filter_empty(&["fuzz", "--cpu", "--filter", "nothing-matches", "--finds", "@new/f.jsonl"], 2, "no case selected")]
#[case::plan_corpus_empty(&["plan", "--corpus", "@empty"], 2, "no case in it")]
#[case::run_corpus_empty(&["run", "--corpus", "@empty"], 2, "no case in it")]
#[case::sweep_corpus_empty(&["sweep", "--cpu", "--out", "@new", "--corpus", "@empty"], 2, "no case in it")]
#[case::plan_corpus_comments(&["plan", "--corpus", "@comments"], 2, "no case in it")]
#[case::sweep_corpus_comments(&["sweep", "--cpu", "--out", "@new", "--corpus", "@comments"], 2, "no case in it")]
#[case::plan_corpus_missing(&["plan", "--corpus", "@missing"], 2, "cannot read corpus")]
#[case::list_profile(&["list", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::plan_profile(&["plan", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::sweep_profile(&["sweep", "--cpu", "--out", "@new", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::minimize_profile(&["minimize", "--cpu", INCIDENT, "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::repro_profile(&["repro", INCIDENT, "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::selftest_profile(&["selftest", "--cpu", "--out", "@new", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::fuzz_profile(&["fuzz", "--cpu", "--profile", "nope", "--finds", "@new/f.jsonl"], 2, "unknown profile 'nope'")]
#[case::gate_profile(&["gate", "--baseline", "@known", "@results", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::limits_profile_unknown(&["limits", "--profile", "nope"], 2, "unknown profile 'nope'")]
#[case::sweep_shard(&["sweep", "--cpu", "--out", "@new", "--shard", "0/2"], 2, "1-based")]
#[case::sweep_tool(&["sweep", "--cpu", "--out", "@new", "--sanitize", "asan"], 2, "unknown sanitizer tool")]
#[case::sweep_max_time(&["sweep", "--cpu", "--out", "@new", "--max-time", "5 minutes"], 2, "is not a duration (expected e.g. 90s, 5m, 1h")]
#[case::run_tool(&["run", "-o", "rms_norm", "--sanitize", "asan"], 2, "unknown sanitizer tool")]
#[case::selftest_incidents_empty(&["selftest", "--cpu", "--out", "@new", "--incidents", "@empty"], 2, "no case in it")]
#[case::selftest_incidents_missing(&["selftest", "--cpu", "--out", "@new", "--incidents", "@missing"], 2, "cannot read corpus")]
#[case::selftest_tool(&["selftest", "--cpu", "--out", "@new", "--sanitize", "asan"], 2, "unknown sanitizer tool")]
#[case::plan_kernel_op(&["plan", "--kernel", "examples/source-kernel/my_rms_norm.cu", "--entry", "my_rms_norm"], 2, "--kernel needs the op")]
#[case::plan_plugin(&["plan", "--plugin", "@missing"], 2, "file not found")]
#[case::repro_garbage(&["repro", "@garbage"], 2, "cannot read")]
#[case::minimize_garbage(&["minimize", "--cpu", "@garbage"], 2, "cannot read")]
#[case::report_garbage(&["report", "@garbage", "--out", "@new"], 2, "cannot read results")]
#[case::report_baseline_garbage(&["report", "@results", "--baseline", "@plan", "--out", "@new"], 2, "not a baseline line")]
#[case::report_baseline_missing(&["report", "@results", "--baseline", "@missing", "--out", "@new"], 2, "")]
#[case::gate_format(&["gate", "--baseline", "@known", "@results", "--format", "xml"], 2, "invalid value 'xml'")]
#[case::run_format(&["run", "-o", "rms_norm", "--format", "yaml"], 2, "invalid value 'yaml'")]
#[case::gate_garbage(&["gate", "--baseline", "@known", "@garbage"], 2, "cannot read results")]
#[case::compare_runs_garbage(&["compare-runs", "@garbage"], 2, "cannot read")]
#[case::repro_missing(&["repro", "@missing"], 2, "cannot read")]
#[case::minimize_missing(&["minimize", "--cpu", "@missing"], 2, "cannot read")]
#[case::report_missing(&["report", "@missing", "--out", "@new"], 2, "cannot read results")]
#[case::gate_missing_results(&["gate", "--baseline", "@known", "@missing"], 2, "cannot read results")]
#[case::gate_missing_baseline(&["gate", "--baseline", "@missing", "@results"], 2, "")]
#[case::compare_runs_missing(&["compare-runs", "/nonexistent"], 2, "cannot read")]
#[case::report_not_results(&["report", "@plan", "--out", "@new"], 2, "not a kedge result line")]
#[case::compare_runs_not_summary(&["compare-runs", "@results"], 2, "not a sweep-summary.json")]
#[case::minimize_passing(&["minimize", "--cpu", PASSING], 2, "minimize needs a failing case: this one passes")]
#[case::minimize_not_json(&["minimize", "--cpu", "{nope"], 2, "not a case or verdict line")]
#[case::repro_not_json(&["repro", "{nope"], 2, "not a case or verdict line")]
// 3: a GPU was needed.
#[case::run_no_gpu(&["run", "-o", "rms_norm", "--impl", "clamped", "--ne", "64"], 3, "kedge run needs a GPU")]
#[case::minimize_no_gpu(&["minimize", INCIDENT], 3, "kedge minimize needs a GPU")]
#[case::fuzz_no_gpu(&["fuzz", "-o", "rms_norm", "--finds", "@new/f.jsonl"], 3, "kedge fuzz needs a GPU")]
#[case::limits_no_gpu(&["limits"], 3, "kedge limits needs a GPU")]
// 4: no GPU, the CPU side ran.
#[case::sweep_cpu(&["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "@new"], 4, "GPU checks skipped")]
#[case::sweep_no_gpu(&["sweep", "smoke", "-o", "rms_norm", "--out", "@new"], 4, "no CUDA driver on this machine")]
#[case::selftest_cpu(&["selftest", "--cpu", "-o", "rms_norm", "--out", "@new"], 4, "")]
// 6: the time limit ran out (a limit too small for one case runs that one).
#[case::sweep_max_time_zero(&["sweep", "smoke", "--cpu", "-o", "rms_norm", "--max-time", "0s", "--out", "@new"], 6, "is too small for one case")]
// 5: the environment.
#[case::sweep_unwritable(&["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "@garbage/out"], 5, "cannot write")]
#[case::selftest_unwritable(&["selftest", "--cpu", "-o", "rms_norm", "--out", "@garbage/out"], 5, "cannot write")]
#[case::report_unwritable(&["report", "@results", "--out", "@garbage/out"], 5, "cannot write")]
#[case::fuzz_unwritable(&["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", "@garbage/f.jsonl"], 5, "cannot write")]
#[case::gate_unwritable(&["gate", "--write-baseline", "@garbage/b.jsonl", "@results"], 5, "cannot write")]
#[case::repro_unwritable(&["repro", INCIDENT, "--out", "@garbage/out"], 5, "cannot write")]
#[case::minimize_unwritable(&["minimize", "--cpu", INCIDENT, "--out", "@garbage/out"], 5, "cannot write")]
fn exit_status(#[case] args: &[&str], #[case] want: i32, #[case] says: &str) {
    if want == 3 && kedge_core::cuda::driver_present() {
        // This machine has the GPU those commands need.
        return;
    }
    let args: Vec<String> = args.iter().map(|a| arg(a)).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (rc, out, err) = kedge(&refs);
    assert_eq!(
        rc,
        want,
        "kedge {}\nstdout: {out}\nstderr: {err}",
        args.join(" ")
    );
    assert!(
        out.contains(says) || err.contains(says),
        "kedge {}: expected '{says}' in\nstdout: {out}\nstderr: {err}",
        args.join(" ")
    );
    assert!(!err.contains("panicked"), "{err}");
}
