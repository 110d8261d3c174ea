//! The sweep workflow on the CPU (this machine has no GPU): what it writes, one writer per
//! output directory, results never overwritten unasked, and a sweep killed mid-write resumed
//! with counts that come from the results file.

use kedge_core::{LimitsProfile, Under};
use kedge_runner::errors::OutputError;
use kedge_runner::events::{Events, Progress};
use kedge_runner::results::{OutDir, OutMode, ResultSet};
use kedge_runner::run::{EngineOptions, Gpus};
use kedge_runner::select::{Selection, Suite};
use kedge_runner::workflow::sweep::{sweep, SweepRequest, SweepSummary};
use kedge_runner::{Error, Status};
use std::path::Path;

fn request(out: &Path, mode: OutMode) -> SweepRequest {
    SweepRequest {
        suite: Suite::Smoke,
        selection: Selection {
            ops: vec!["rms_norm".into(), "norm".into()],
            ..Selection::default()
        },
        profile: LimitsProfile::builtin("h200").unwrap(),
        shard: None,
        max_elements: None,
        over_elements: None,
        tools: Vec::new(),
        cpu: true,
        gpus: Gpus::All,
        external: Default::default(),
        engine: EngineOptions {
            events: Events::console(Progress::Off),
            ..EngineOptions::default()
        },
        out: out.to_path_buf(),
        mode,
        exe: None,
    }
}

/// A reporter of its own: what a program embedding the runner would plug in.
#[test]
fn a_sweep_tells_its_events_to_the_reporter_it_is_given() {
    use kedge_runner::events::{Collect, Ending, Event};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let got = Arc::new(Collect::default());
    let mut req = request(dir.path(), OutMode::Fresh);
    req.engine.events = Events::new(got.clone());
    let o = sweep(&req).unwrap();
    let events = got.events();
    let planned = events.iter().find_map(|e| match e {
        Event::PlanReady { cases, runs } => Some((*cases, runs.clone())),
        _ => None,
    });
    assert_eq!(planned, Some((o.cases, vec![Under::Cpu])));
    // Every verdict, counted in order, the same as results.jsonl holds.
    let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
    let told: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::CaseFinished { result, .. } => Some(result.case.id()),
            _ => None,
        })
        .collect();
    let written: Vec<String> = set.results.iter().map(|r| r.case.id()).collect();
    assert_eq!(told, written);
    let phases: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Phase { name, .. } => Some(*name),
            _ => None,
        })
        .collect();
    assert_eq!(phases, ["plan", "run", "summary", "reports"]);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Summary { results, .. } if *results == o.cases
    )));
    // The last thing said is how it ended: the CPU side only, exit status 4.
    assert!(
        matches!(
            events.last(),
            Some(Event::Ended {
                how: Ending::GpuSkipped,
                status: 4
            })
        ),
        "{:?}",
        events.last()
    );
}

#[test]
fn a_cpu_sweep_writes_its_plan_results_summary_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&request(dir.path(), OutMode::Fresh)).unwrap();
    assert_eq!(o.status, Status::GpuSkipped);
    assert_eq!(o.status.exit_code(), 4);
    assert!(o.cases > 0);
    let plan = std::fs::read_to_string(dir.path().join("plan.jsonl")).unwrap();
    assert_eq!(plan.lines().count(), o.cases);
    let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
    assert_eq!(set.results.len(), o.cases);
    assert!(set.results.iter().all(|r| r.under == Under::Cpu));
    let text = std::fs::read_to_string(dir.path().join("sweep-summary.json")).unwrap();
    let s: SweepSummary = serde_json::from_str(&text).unwrap();
    assert_eq!(s, o.summary);
    assert_eq!(s.runs.len(), 1);
    assert_eq!((s.runs[0].under, s.runs[0].cases), (Under::Cpu, o.cases));
    assert_eq!(s.runs[0].missing, 0);
    for f in ["report.md", "report.json", "junit.xml"] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
}

#[test]
fn results_are_never_overwritten_unasked_and_one_kedge_writes_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = sweep(&request(dir.path(), OutMode::Fresh)).unwrap();
    let before = std::fs::read_to_string(&first.results).unwrap();
    let e = sweep(&request(dir.path(), OutMode::Fresh)).unwrap_err();
    assert!(
        matches!(e, Error::Output(OutputError::ResultsExist { .. })),
        "{e}"
    );
    assert_eq!(e.exit_code(), 2);
    assert_eq!(std::fs::read_to_string(&first.results).unwrap(), before);
    // Another kedge holding the directory: refused, with who holds it.
    let held = OutDir::open(dir.path()).unwrap();
    let e = sweep(&request(dir.path(), OutMode::Force)).unwrap_err();
    assert!(
        matches!(e, Error::Output(OutputError::Locked { .. })),
        "{e}"
    );
    assert_eq!(e.exit_code(), 5);
    drop(held);
    let again = sweep(&request(dir.path(), OutMode::Force)).unwrap();
    assert_eq!(again.cases, first.cases);
}

#[test]
fn a_killed_sweep_resumes_and_counts_what_the_results_file_holds() {
    let dir = tempfile::tempdir().unwrap();
    let full = sweep(&request(dir.path(), OutMode::Fresh)).unwrap();
    let text = std::fs::read_to_string(&full.results).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 4);
    // kill -9 after three results and half of the fourth.
    let cut = format!(
        "{}\n{}",
        lines[..3].join("\n"),
        &lines[3][..lines[3].len() / 2]
    );
    std::fs::write(&full.results, cut).unwrap();
    let resumed = sweep(&request(dir.path(), OutMode::Resume)).unwrap();
    let row = &resumed.summary.runs[0];
    assert_eq!(row.cases, full.cases, "counted from the results file");
    assert_eq!(row.ran_now, full.cases - 3, "only the unfinished cases ran");
    assert_eq!(row.missing, 0);
    let set = ResultSet::load(&[resumed.results]).unwrap();
    assert!(set.torn.is_empty());
    assert_eq!(set.results.len(), full.cases);
}

/// A clock reading one second per line of a results file: it moves only when a case has its
/// result, so where a sweep stops does not depend on how fast this machine is.
struct ResultsClock(std::path::PathBuf);

impl kedge_runner::run::budget::Clock for ResultsClock {
    fn elapsed(&self) -> std::time::Duration {
        let n = std::fs::read_to_string(&self.0)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        std::time::Duration::from_secs(n as u64)
    }
}

fn budgeted(out: &Path, mode: OutMode, limit_s: u64) -> SweepRequest {
    use kedge_runner::run::TimeBudget;
    let mut r = request(out, mode);
    // The boundary suite of rms_norm and softmax: crossings to put first.
    r.suite = Suite::Default;
    r.selection.ops = vec!["rms_norm".into(), "softmax".into()];
    let clock = ResultsClock(out.join("results.jsonl"));
    let before = std::fs::read_to_string(out.join("results.jsonl"))
        .map(|t| t.lines().count() as u64)
        .unwrap_or(0);
    r.engine.budget = Some(std::sync::Arc::new(TimeBudget::with_clock(
        std::time::Duration::from_secs(before + limit_s),
        std::sync::Arc::new(clock),
    )));
    r
}

#[test]
fn a_time_limited_sweep_runs_crossings_first_names_the_rest_and_resume_runs_exactly_them() {
    use kedge_runner::select::order;
    let dir = tempfile::tempdir().unwrap();
    // Five "seconds": five cases start, then nothing more.
    let o = sweep(&budgeted(dir.path(), OutMode::Fresh, 5)).unwrap();
    assert_eq!(o.status, Status::OutOfTime);
    assert_eq!(o.status.exit_code(), 6);
    let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
    assert_eq!(set.results.len(), 5);
    assert_eq!(o.not_run.len(), o.cases - 5);
    // What ran is the front of the yield order: both sides of boundary crossings.
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let plan: Vec<kedge_core::Case> = kedge_core::model::case::parse_corpus(
        &std::fs::read_to_string(dir.path().join("plan.jsonl")).unwrap(),
    )
    .unwrap()
    .into_iter()
    .map(|(_, c)| c)
    .collect();
    let (ordered, ranks) = order::by_yield(
        &reg,
        &h200,
        &plan,
        kedge_core::judge::sample::Judging::Auto,
        false,
    );
    let ran: Vec<&kedge_core::Case> = set.results.iter().map(|r| &r.case).collect();
    assert_eq!(ran, ordered.iter().take(5).collect::<Vec<_>>());
    assert!(ran.iter().all(|c| ranks.rank(c).class == order::CROSSING));
    // The rest are named: in not-run.jsonl (a corpus), in the summary and in the reports.
    let text = std::fs::read_to_string(dir.path().join("not-run.jsonl")).unwrap();
    let named: Vec<kedge_core::Case> = kedge_core::model::case::parse_corpus(&text)
        .unwrap()
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    assert_eq!(named, ordered[5..].to_vec());
    assert!(
        text.lines()
            .all(|l| l.starts_with("{\"case\":") && l.contains("\"under\":\"cpu\"")),
        "{text}"
    );
    let row = &o.summary.runs[0];
    assert_eq!(
        (row.cases, row.missing, row.not_run),
        (5, o.cases - 5, o.cases - 5)
    );
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains(&format!(
            "**{} cases not run**: the time limit (--max-time 5s) ran out",
            o.cases - 5
        )),
        "{md}"
    );
    assert!(md.contains(&ordered[5].label()), "{md}");
    let summary_md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(summary_md.contains("cases not run"), "{summary_md}");
    let json = std::fs::read_to_string(dir.path().join("report.json")).unwrap();
    assert!(json.contains("\"not_run\""), "{json}");

    // --resume with more time: exactly the cases named, nothing again; not-run.jsonl goes.
    let again = sweep(&budgeted(dir.path(), OutMode::Resume, 10_000)).unwrap();
    assert_eq!(again.status, Status::GpuSkipped);
    assert!(again.not_run.is_empty());
    let row = &again.summary.runs[0];
    assert_eq!(row.ran_now, o.cases - 5);
    assert_eq!((row.cases, row.missing, row.not_run), (o.cases, 0, 0));
    let set = ResultSet::load(&[again.results]).unwrap();
    let after: Vec<&kedge_core::Case> = set.results[5..].iter().map(|r| &r.case).collect();
    assert_eq!(after, named.iter().collect::<Vec<_>>());
    assert!(!dir.path().join("not-run.jsonl").exists());
}

#[test]
fn a_limit_too_small_for_one_case_runs_that_one_case() {
    let dir = tempfile::tempdir().unwrap();
    let o = sweep(&budgeted(dir.path(), OutMode::Fresh, 0)).unwrap();
    assert_eq!(o.status, Status::OutOfTime);
    let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
    assert_eq!(set.results.len(), 1);
    assert_eq!(o.not_run.len(), o.cases - 1);
}

/// One suite on every machine: the cases come from the profile, so a GPU that matches it adds
/// nothing, and one that differs (another buffer limit, another shared-memory size) keeps the
/// profile's cases with their ids and adds its own, each with an id of its own.
#[test]
fn a_suite_is_the_profiles_on_every_machine_and_a_differing_gpu_only_adds() {
    use kedge_core::Case;
    use kedge_runner::workflow::sweep::planned_cases;
    use std::collections::HashSet;
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let sel = Selection {
        ops: vec!["sdpa_prefill".into(), "softmax".into()],
        ..Selection::default()
    };
    let cpu = planned_cases(&reg, Suite::Default, &sel, &h200, None, &Events::default()).unwrap();
    assert!(cpu.extra.is_empty() && cpu.differences.is_empty());
    let ids = |cs: &[Case]| cs.iter().map(Case::id).collect::<Vec<_>>();
    // A live H200 as kedge reads it: the same values (another name, other sources).
    let mut live = h200.clone();
    live.name = "live".into();
    live.device = "NVIDIA H200".into();
    live.max_alloc_bytes.source = "cuDeviceTotalMem".into();
    let same = planned_cases(
        &reg,
        Suite::Default,
        &sel,
        &h200,
        Some(&live),
        &Events::default(),
    )
    .unwrap();
    assert_eq!(ids(&same.cases), ids(&cpu.cases));
    assert!(same.extra.is_empty(), "{:?}", same.extra);
    // A card with less memory and less shared memory than the profile.
    live.max_alloc_bytes.value = 80_000_000_000;
    live.device_memory_bytes.value = 80_000_000_000;
    live.shared_per_block_optin.value = 101_376;
    let other = planned_cases(
        &reg,
        Suite::Default,
        &sel,
        &h200,
        Some(&live),
        &Events::default(),
    )
    .unwrap();
    assert_eq!(
        ids(&other.cases),
        ids(&cpu.cases),
        "the shared ids do not move"
    );
    assert_eq!(other.differences.len(), 3, "{:?}", other.differences);
    assert!(
        other.differences[0].starts_with("shared mem/block opt-in 101376 (profile h200: 232448)"),
        "{:?}",
        other.differences
    );
    let shared: HashSet<String> = ids(&cpu.cases).into_iter().collect();
    assert!(!other.extra.is_empty());
    assert!(other.extra.iter().all(|c| !shared.contains(&c.id())));
    // Its own sdpa probes and its own softmax threshold.
    assert!(other.extra.iter().any(|c| c.op == "sdpa_prefill"));
    assert!(other.extra.iter().any(|c| c.op == "softmax"));
    // Cases given explicitly are what they are.
    let given = Selection {
        cases: vec![r#"{"op":"softmax","impl":"ggml","dtype":"f32","ne":[64,2,2,1]}"#.into()],
        ..Selection::default()
    };
    let g = planned_cases(
        &reg,
        Suite::Default,
        &given,
        &h200,
        Some(&live),
        &Events::default(),
    )
    .unwrap();
    assert_eq!(g.cases.len(), 1);
    assert!(g.extra.is_empty());
}

/// A sweep's verdicts carry its run, and the suite's digest is the same in every shard.
#[test]
fn every_verdict_carries_the_run_and_shards_share_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut infos = Vec::new();
    for k in 1..=2 {
        let mut req = request(&dir.path().join(format!("s{k}")), OutMode::Fresh);
        req.shard = Some(kedge_runner::select::Shard::new(k, 2).unwrap());
        let o = sweep(&req).unwrap();
        let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
        for r in &set.results {
            infos.push(r.run.clone().expect("every verdict carries its run"));
        }
    }
    let first = &infos[0];
    assert!(infos.iter().all(|i| i == first));
    assert_eq!(first.profile, "h200");
    assert_eq!(first.mode, "cpu/exact");
    let suite = first.suite.as_ref().unwrap();
    assert_eq!(suite.name, "smoke -o rms_norm,norm");
    assert_eq!(
        suite.cases,
        infos.len(),
        "the suite counts every shard's cases"
    );
}

/// `--max-elements N` and `--over-elements N` split the suite: every case in exactly one tier,
/// each tier a suite of its own name (a baseline knows which it gates).
#[test]
fn the_pull_request_tier_and_the_scheduled_tier_split_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    let plan = |name: &str, max: Option<u64>, over: Option<u64>| {
        let mut req = request(&dir.path().join(name), OutMode::Fresh);
        req.suite = Suite::Default;
        req.selection.ops = vec!["rms_norm".into()];
        req.selection.dtype = Some("f32".into());
        req.max_elements = max;
        req.over_elements = over;
        let o = sweep(&req).unwrap();
        let set = ResultSet::load(std::slice::from_ref(&o.results)).unwrap();
        let ids: std::collections::BTreeSet<String> =
            set.results.iter().map(|r| r.id.clone()).collect();
        let suite = set.results[0].run.clone().unwrap().suite.unwrap().name;
        (ids, suite)
    };
    let n = 1u64 << 28;
    let (all, _) = plan("all", Some(0), None);
    let (small, small_suite) = plan("pr", Some(n), None);
    let (big, big_suite) = plan("scheduled", None, Some(n));
    assert!(!small.is_empty() && !big.is_empty());
    assert!(small.is_disjoint(&big));
    assert_eq!(
        small
            .union(&big)
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        all
    );
    assert_eq!(
        small_suite,
        format!("default -o rms_norm --dtype f32 --max-elements {n}")
    );
    assert_eq!(
        big_suite,
        format!("default -o rms_norm --dtype f32 --over-elements {n}")
    );
}
