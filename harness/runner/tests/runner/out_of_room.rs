//! A case that runs out of device memory while it shares the GPU with other cases is run again
//! alone, and only that run's verdict is reported, with real worker processes and no GPU: a
//! fake worker (a shell script speaking the worker protocol) answers `resource-limit` the first
//! time it is sent the case `[64,7,1,1]` and `pass` after. Shown: with two cases at a time the
//! case goes out again after every other case, one at a time, and its one verdict is the second
//! run's, saying so; with one case at a time, or as the only case, its `resource-limit` is its
//! verdict; with the time up before the run alone it gets no verdict (`--resume` runs it)
//! rather than one the other cases caused. A `resource-limit` past a limit of the device's
//! (`fixed_limit`) is not run again; one that comes again alone says the others were not the
//! cause.

use crate::common::{self, seen, Answered};
use kedge_core::{Case, CaseResult, DType, Verdict};
use kedge_runner::events::{Collect, Event, Events};
use kedge_runner::run::{EngineOptions, Executor, Gpus, RunEngine, TimeBudget};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const FAKE_WORKER: &str = r#"#!/usr/bin/env bash
IFS= read -r spec
dir="$(dirname "$0")"
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"device_count":1,"limits":%s}}\n' "$$" "$(cat "$dir/limits.json")"
while IFS= read -r line; do
  case "$line" in *'"warm_up"'*) continue ;; esac
  echo "$line" >> "$dir/seen"
  case "$line" in
    *'"ne":[64,7,1,1]'*)
      if [ ! -e "$dir/ran-out" ]; then
        touch "$dir/ran-out"
        echo '{"result":{"id":"x","case":'"$line"',"verdict":"resource-limit","detector":"driver","detail":"resource limit: allocating tensor dst on CUDA0 failed: out of memory","under":"native","ms":0.0}}'
        continue
      fi ;;
    *'"ne":[64,8,1,1]'*)
      # Past a limit of the device's whatever runs beside it (the impl says so).
      echo '{"result":{"id":"x","case":'"$line"',"verdict":"resource-limit","detector":"driver","detail":"resource limit: score buffer exceeds max_buffer_bytes","under":"native","ms":0.0,"facts":{"fixed_limit":true}}}'
      continue ;;
    *'"ne":[64,9,1,1]'*)
      # Too big for the device even alone.
      echo '{"result":{"id":"x","case":'"$line"',"verdict":"resource-limit","detector":"driver","detail":"resource limit: out of memory","under":"native","ms":0.0}}'
      continue ;;
  esac
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
"#;

fn cases() -> Vec<Case> {
    (1..=7)
        .map(|i| Case::new("rms_norm", "clamped", DType::F32, [64, i, 1, 1]))
        .collect()
}

/// Run `cases` on a fake GPU with `jobs` workers and, where given, `seconds` of budget.
fn run(
    dir: &Path,
    cases: &[Case],
    jobs: usize,
    seconds: Option<u64>,
) -> (Vec<CaseResult>, Vec<Event>) {
    let exe = common::install_fake_worker(dir, FAKE_WORKER);
    let budget = seconds.map(|s| {
        Arc::new(TimeBudget::with_clock(
            Duration::from_secs(s),
            Arc::new(Answered(dir.join("seen"))),
        ))
    });
    let collect = Arc::new(Collect::default());
    let engine = RunEngine::builder("sweep")
        .exe(&exe)
        .without_driver_check()
        .work_dir(dir.join("w"))
        .gpus(Gpus::One(0))
        .options(EngineOptions {
            jobs,
            events: Events::new(collect.clone()),
            budget,
            ..EngineOptions::default()
        })
        .build()
        .unwrap();
    let mut ex = engine.executor(None).unwrap();
    let mut got = Vec::new();
    ex.run(cases, &mut |r| {
        got.push(r);
        Ok(())
    })
    .unwrap();
    (got, collect.events())
}

fn again(events: &[Event]) -> Vec<usize> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::AloneAgain { cases, .. } => Some(*cases),
            _ => None,
        })
        .collect()
}

#[test]
fn a_case_out_of_memory_beside_others_runs_again_alone_and_only_that_verdict_counts() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let (got, events) = run(dir.path(), &cases, 2, None);

    assert_eq!(got.len(), cases.len(), "one verdict a case");
    assert!(got.iter().all(|r| r.verdict == Verdict::Pass), "{got:?}");
    let oom = got.iter().find(|r| r.case.ne[1] == 7).unwrap();
    assert!(
        oom.detail.contains("run alone on its GPU"),
        "{}",
        oom.detail
    );
    assert!(got
        .iter()
        .filter(|r| r.case.ne[1] != 7)
        .all(|r| !r.detail.contains("alone")));
    assert_eq!(again(&events), [1]);
    // Sent twice, the second time after every other case.
    let sent = seen(dir.path());
    assert_eq!(sent.len(), cases.len() + 1);
    assert_eq!(sent.last(), Some(&cases[6]));
    assert_eq!(sent.iter().filter(|c| **c == cases[6]).count(), 2);
}

#[test]
fn a_case_out_of_memory_one_at_a_time_keeps_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let (got, events) = run(dir.path(), &cases, 1, None);

    assert_eq!(got.len(), cases.len());
    let oom = got.iter().find(|r| r.case.ne[1] == 7).unwrap();
    assert_eq!(oom.verdict, Verdict::ResourceLimit);
    assert!(!oom.detail.contains("alone"), "{}", oom.detail);
    assert!(again(&events).is_empty());
    assert_eq!(seen(dir.path()).len(), cases.len(), "each case sent once");
}

#[test]
fn a_case_out_of_memory_as_the_only_case_keeps_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let case = cases().pop().unwrap();
    let (got, events) = run(dir.path(), std::slice::from_ref(&case), 2, None);

    assert_eq!(got.len(), 1);
    assert_eq!(got[0].verdict, Verdict::ResourceLimit);
    assert!(again(&events).is_empty());
    assert_eq!(seen(dir.path()), [case], "sent once");
}

#[test]
fn with_the_time_up_before_the_run_alone_the_case_gets_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    // Seven seconds: one per case answered, so the time is up when the last first run ends.
    let (got, events) = run(dir.path(), &cases, 2, Some(cases.len() as u64));

    assert_eq!(got.len(), cases.len() - 1, "{got:?}");
    assert!(got
        .iter()
        .all(|r| r.case.ne[1] != 7 && r.verdict == Verdict::Pass));
    assert!(again(&events).is_empty());
    assert_eq!(seen(dir.path()).len(), cases.len(), "nothing ran alone");
}

#[test]
fn a_limit_of_the_device_is_not_run_again_and_a_second_refusal_alone_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases = cases();
    cases.push(Case::new("rms_norm", "clamped", DType::F32, [64, 8, 1, 1]));
    cases.push(Case::new("rms_norm", "clamped", DType::F32, [64, 9, 1, 1]));
    let (got, events) = run(dir.path(), &cases, 2, None);

    assert_eq!(got.len(), cases.len(), "one verdict a case");
    let fixed = got.iter().find(|r| r.case.ne[1] == 8).unwrap();
    assert_eq!(fixed.verdict, Verdict::ResourceLimit);
    assert!(!fixed.detail.contains("alone"), "{}", fixed.detail);
    let big = got.iter().find(|r| r.case.ne[1] == 9).unwrap();
    assert_eq!(big.verdict, Verdict::ResourceLimit);
    assert!(
        big.detail
            .ends_with("(run again alone on its GPU, with the same verdict: the cases beside it were not the cause)"),
        "{}",
        big.detail
    );
    let oom = got.iter().find(|r| r.case.ne[1] == 7).unwrap();
    assert_eq!(oom.verdict, Verdict::Pass);
    assert!(oom
        .detail
        .contains("it had run out of device memory beside other cases"));
    // [64,7] and [64,9] ran again alone; [64,8] was sent once.
    assert_eq!(again(&events), [2]);
    let sent = seen(dir.path());
    assert_eq!(sent.iter().filter(|c| **c == cases[7]).count(), 1);
    assert_eq!(sent.iter().filter(|c| **c == cases[8]).count(), 2);
}
