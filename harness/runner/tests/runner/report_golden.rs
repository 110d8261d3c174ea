//! Reports and gate on a fixture sweep split over two shards, against committed golden files.
//! `KEDGE_BLESS=1 cargo test -p kedge-runner --test runner report_golden` rewrites the golden
//! files; review the diff before committing it.

use kedge_core::{AllocMode, Verdict};
use kedge_runner::gate::{gate, Baseline};
use kedge_runner::report::{
    find_transitions, probe_lines, render_all, render_all_with, summarize, ReportOptions,
};
use kedge_runner::results::ResultSet;
use std::path::PathBuf;

fn dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(sub)
}

fn shards() -> ResultSet {
    let d = dir("fixtures/results");
    ResultSet::load(&[d.join("shard-1.jsonl"), d.join("shard-2.jsonl")]).unwrap()
}

fn check_golden(name: &str, got: &str) {
    let path = dir("golden").join(name);
    if std::env::var("KEDGE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with KEDGE_BLESS=1 to create it)",
            path.display()
        )
    });
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n want: {:?}\n  got: {:?}\n(KEDGE_BLESS=1 rewrites it)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

#[test]
fn shards_merge_with_the_rerun_replacing_the_first_attempt() {
    let s = shards();
    assert_eq!(s.results.len(), 13);
    assert_eq!(s.replaced, 1);
    let rerun = s
        .results
        .iter()
        .find(|r| r.case.ne == [1025, 1, 1, 1])
        .unwrap();
    assert_eq!(rerun.verdict, Verdict::WrongValues);
}

#[test]
fn merged_shards_give_the_same_report_in_any_order() {
    let d = dir("fixtures/results");
    let a = ResultSet::load(&[d.join("shard-1.jsonl"), d.join("shard-2.jsonl")]).unwrap();
    let b = ResultSet::load(&[d.join("shard-2.jsonl"), d.join("shard-1.jsonl")]).unwrap();
    // Only the duplicated case differs (last wins); drop it and the reports must agree.
    let strip = |s: &ResultSet| {
        let mut v = s.results.clone();
        v.retain(|r| r.case.ne != [1025, 1, 1, 1]);
        v
    };
    assert_eq!(
        kedge_runner::report::render_markdown(&strip(&a)),
        kedge_runner::report::render_markdown(&strip(&b))
    );
}

#[test]
fn transitions_are_found_on_both_sides() {
    let s = shards();
    let t = find_transitions(&s.results);
    let sentences: Vec<String> = t
        .iter()
        .map(|t| format!("{}/{} {} {}", t.op, t.imp, t.axis, t.sentence()))
        .collect();
    assert!(
        sentences.contains(
            &"rms_norm/ggml ne[2] passes at 65535, fails at 65536 (launch-error, driver)"
                .to_string()
        ),
        "{sentences:#?}"
    );
    assert!(
        sentences.contains(
            &"rms_norm/ggml ne[0] passes at 1024, fails at 1025 (wrong-values, reference)"
                .to_string()
        ),
        "{sentences:#?}"
    );
    assert!(
        sentences.contains(
            &"rms_norm/ggml ne[0] fails at 1025 (wrong-values, reference), passes at 1026"
                .to_string()
        ),
        "{sentences:#?}"
    );
    assert!(
        sentences.contains(
            &"sdpa_prefill/unfused ne[1] passes at 4096, fails at 8192 (silent-failure, poison)"
                .to_string()
        ),
        "{sentences:#?}"
    );
    // Different impls, allocation modes or run kinds are never compared with each other.
    assert_eq!(t.len(), 4, "{sentences:#?}");
}

#[test]
fn summary_counts_and_alloc_modes() {
    let s = summarize(&shards().results);
    assert_eq!(s.counts.results, 13);
    assert_eq!(s.cases, 13);
    assert_eq!(s.counts.pass, 6);
    assert_eq!(s.counts.fail, 5);
    assert_eq!(s.counts.unsupported, 1);
    assert_eq!(s.counts.skipped, 1);
    assert_eq!(s.by_alloc[&AllocMode::Guard], 1);
    let fp8 = s.ops.iter().find(|o| o.op == "fp8_gemm").unwrap();
    assert_eq!(fp8.counts.failures_by_verdict[&Verdict::OobRead], 1);
    assert_eq!(fp8.counts.failures_by_verdict[&Verdict::DeviceFault], 1);
    let oob = fp8
        .failures
        .iter()
        .find(|f| f.verdict == Verdict::OobRead)
        .unwrap();
    assert!(oob.rerun.ends_with(" --sanitize memcheck"), "{}", oob.rerun);
    assert_eq!(oob.alloc, AllocMode::Exact);
}

fn baseline() -> Baseline {
    Baseline::load(&dir("fixtures/results").join("baseline.jsonl")).unwrap()
}

const DEVICES: &[&str] = &["native: NVIDIA H200, driver 580.159.04 (CUDA 13.0), gpus 0"];

/// The reports as `kedge report --baseline` writes them: judged against the fixture baseline,
/// with the registry's upstream lines.
fn judged() -> kedge_runner::report::Rendered {
    let reg = kedge_ops::registry();
    let b = baseline();
    let devices: Vec<String> = DEVICES.iter().map(|s| s.to_string()).collect();
    render_all_with(
        &shards(),
        &ReportOptions {
            baseline: Some(&b),
            registry: Some(&reg),
            devices: &devices,
            ..ReportOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn reports_match_golden_files() {
    let r = judged();
    check_golden("report.md", &r.markdown);
    check_golden("summary.md", &r.summary);
    check_golden("report.json", &r.json);
    check_golden("report.junit.xml", &r.junit);
    // Without a baseline every failure is listed as a failure, none as new or known.
    let plain = render_all(&shards()).unwrap();
    check_golden("summary-no-baseline.md", &plain.summary);
}

#[test]
fn report_md_leads_with_failures_and_keeps_the_pass_tables_collapsed() {
    let md = judged().markdown;
    let failures = md.find("## Failures").unwrap();
    let by_op = md.find("## By op").unwrap();
    let every = md.find("<details>").unwrap();
    assert!(failures < by_op && by_op < every, "{md}");
    // Every per-case table row comes after the collapsed section opens.
    let first_row = md.find("| `").unwrap();
    assert!(first_row > every, "{md}");
}

#[test]
fn known_failures_are_marked_and_skipped_with_the_reason() {
    let r = judged();
    // The fixture baseline knows the rms_norm ne[2]=65536 launch error (still failing) and
    // the ne[0]=1026 wrong values (now passing).
    assert!(r.markdown.contains(
        "`262d36b6b515`: launch-error (driver), under native, allocation exact · known failure"
    ));
    assert!(r.markdown.contains("· **new failure**"));
    assert!(r
        .markdown
        .contains("- `e91fb62496d2` rms_norm/ggml f32 ne=[1026,1,1,1] eps=1e-6 seed=1 (exact) (known as wrong-values): remove it from the baseline"));
    let x = &r.junit;
    assert_eq!(x.matches("<failure").count(), 4, "{x}");
    assert_eq!(x.matches("<skipped").count(), 3, "{x}");
    assert!(
        x.contains("known failure: launch-error (driver): launch of rms_norm_f32"),
        "{x}"
    );
    let s = &r.summary;
    assert!(s.contains("## New failures (4)"), "{s}");
    assert!(s.contains("## Known failures that now pass (1)"), "{s}");
    assert!(s.contains("5 fail (4 new, 1 known)"), "{s}");
}

#[test]
fn failures_say_where_and_what_and_how_to_run_them_upstream() {
    let md = judged().markdown;
    // A memcheck address named by the tensor it falls past.
    assert!(
        md.contains("at 0x7f4c0012c000: 0 bytes past the end of `a_staging` (a 1,228,800-byte allocation) (x212)"),
        "{md}"
    );
    // Wrong values: the first bad element as coordinates, with both values and the tolerance.
    assert!(
        md.contains("- first bad element (1024, 0, 0, 0) of `dst`: got 0.5, expected 1.25 (element tolerance 1e-5 + 1e-3 * |expected|"),
        "{md}"
    );
    // The op's test-backend-ops line and command under each failure of an op upstream has.
    assert!(md.contains(
        "- test-backend-ops: `test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-6f));`"
    ), "{md}");
    assert!(md.contains(
        "- test-backend-ops command: `test-backend-ops test -b CUDA0 -o RMS_NORM -p '^type=f32,ne=\\[64,1,65536,1\\],v=0,eps=0\\.000001,inplace=0$'`"
    ), "{md}");
    // A leak record is its own kind, not a pass.
    assert!(md.contains("## Leak records"), "{md}");
    assert!(
        md.contains("- memcheck leak: Leaked 1024 bytes at 0x7f4c20000000"),
        "{md}"
    );
    assert!(md.contains("| pass (leak) |"), "{md}");
}

#[test]
fn the_boundary_matrix_puts_probe_values_across_and_runs_down() {
    let lines = probe_lines(&shards().results);
    let ne2 = lines
        .iter()
        .find(|l| l.op == "rms_norm" && l.axis == "ne[2]")
        .unwrap();
    assert_eq!(
        ne2.values,
        vec![serde_json::json!(65535), serde_json::json!(65536)]
    );
    let rows: Vec<String> = ne2
        .rows
        .iter()
        .map(|r| {
            let cells: Vec<String> = r
                .cells
                .iter()
                .map(|c| c.as_ref().map_or("-".into(), |c| c.verdict.to_string()))
                .collect();
            format!("{} {} {}: {}", r.imp, r.alloc, r.under, cells.join(" "))
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            "clamped exact native: - pass",
            "ggml exact native: pass launch-error"
        ]
    );
    let s = judged().summary;
    assert!(
        s.contains("| impl · allocation · run | 65535 | 65536 |"),
        "{s}"
    );
    assert!(
        s.contains("| ggml · exact · native | pass | launch-error |"),
        "{s}"
    );
    assert!(
        s.contains("| ggml · exact · native | pass | **wrong-values** | pass |"),
        "{s}"
    );
}

#[test]
fn markdown_states_allocation_mode_and_rerun_per_failure() {
    let r = render_all(&shards()).unwrap();
    let md = &r.markdown;
    for res in shards().results.iter().filter(|r| r.verdict.is_failure()) {
        let rerun = kedge_runner::results::rerun_command(res);
        assert!(md.contains(&format!("`{rerun}`")), "missing {rerun}");
        assert!(
            md.contains(&format!(
                "`{}`: {} ({}), under {}, allocation {}",
                res.id, res.verdict, res.detector, res.under, res.case.alloc
            )),
            "missing header of {}",
            res.id
        );
    }
    assert!(md.contains("test-backend-ops puts all of a case's tensors in one buffer"));
    assert!(md.contains("--padding does not cover"));
}

#[test]
fn junit_has_one_testcase_per_result_with_failures_and_skips() {
    let r = render_all(&shards()).unwrap();
    let x = &r.junit;
    assert_eq!(x.matches("<testcase ").count(), 13);
    assert_eq!(x.matches("<failure").count(), 5);
    assert_eq!(x.matches("<skipped").count(), 2);
    assert!(
        x.contains("<property name=\"leaks\" value=\"yes\"/>"),
        "{x}"
    );
    assert!(x.contains("classname=\"rms_norm/ggml\""));
    assert!(x.contains("[memcheck]"));
}

#[test]
fn gate_on_the_fixture_names_new_known_and_fixed() {
    let s = shards();
    let base = baseline();
    let g = gate(&base, &s.results);
    assert_eq!(g.exit_code(), 1);
    assert_eq!(g.still_failing_known.len(), 1);
    assert_eq!(g.still_failing_known[0].verdict, Verdict::LaunchError);
    assert_eq!(g.fixed_known.len(), 1);
    assert_eq!(g.new_failures.len(), 4);
    check_golden("gate.txt", &g.render());
    // A baseline written from these results lets them through.
    let all = Baseline::from_results(&s.results);
    assert_eq!(gate(&all, &s.results).exit_code(), 0);
    check_golden("baseline-from-results.jsonl", &all.to_jsonl());
}
