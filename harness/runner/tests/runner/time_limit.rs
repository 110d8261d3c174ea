//! `sweep --max-time` on the GPU executor, with real worker processes and no GPU: a fake worker
//! (a shell script speaking the worker protocol) records every case it is sent. The budget's
//! clock reads one second per case the worker has answered, so where the run stops does not
//! depend on this machine's speed. Shown: the cases go out in the order of expected yield
//! (both sides of each crossing first), nothing starts once the time is up, what did not run
//! is exactly the rest, and a second run with more time runs exactly those, in the same order.

use crate::common::{self, seen, Answered};
use kedge_core::{Case, LimitsProfile};
use kedge_runner::events::{Events, Progress};
use kedge_runner::run::{EngineOptions, Executor, Gpus, RunEngine, TimeBudget};
use kedge_runner::select::{order, Selection, Suite};
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
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
"#;

/// Run `cases` on a fake GPU with `seconds` of budget beyond what the worker has answered.
fn run(
    dir: &Path,
    cases: &[Case],
    order: &kedge_runner::run::YieldOrder,
    seconds: u64,
) -> Vec<Case> {
    let exe = dir.join("fake-worker.sh");
    let before = seen(dir).len() as u64;
    let budget = Arc::new(TimeBudget::with_clock(
        Duration::from_secs(before + seconds),
        Arc::new(Answered(dir.join("seen"))),
    ));
    let engine = RunEngine::builder("sweep")
        .exe(&exe)
        .without_driver_check()
        .work_dir(dir.join("w"))
        .gpus(Gpus::One(0))
        .options(EngineOptions {
            jobs: 1,
            events: Events::console(Progress::Off),
            budget: Some(budget),
            ..EngineOptions::default()
        })
        .build()
        .unwrap();
    let mut ex = engine.executor(None).unwrap();
    ex.set_order(Arc::new(order.clone()));
    let mut got = Vec::new();
    ex.run(cases, &mut |r| {
        got.push(r.case);
        Ok(())
    })
    .unwrap();
    got
}

#[test]
fn the_yield_order_goes_out_first_nothing_starts_after_the_time_and_the_rest_runs_next() {
    let dir = tempfile::tempdir().unwrap();
    common::install_fake_worker(dir.path(), FAKE_WORKER);
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let cases = Selection {
        ops: vec!["rms_norm".into(), "cumsum".into()],
        ..Selection::default()
    }
    .cases(&reg, Suite::Default, &h200, None, &Events::default())
    .unwrap();
    let (ordered, yields) = order::by_yield(
        &reg,
        &h200,
        &cases,
        kedge_core::judge::sample::Judging::Auto,
        false,
    );
    assert!(ordered[..7]
        .iter()
        .all(|c| yields.rank(c).class == order::CROSSING));

    // Seven seconds: seven cases start (the front of the order), none after.
    let first = run(dir.path(), &cases, &yields, 7);
    assert_eq!(first, ordered[..7].to_vec());
    assert_eq!(seen(dir.path()), first, "the worker was sent nothing more");

    // What did not run, given in the suite's order (as `--resume` selects it): exactly the
    // rest runs, in the yield order.
    let rest: Vec<Case> = cases
        .iter()
        .filter(|c| !first.contains(c))
        .cloned()
        .collect();
    assert_ne!(rest, ordered[7..].to_vec());
    let second = run(dir.path(), &rest, &yields, 1_000_000);
    assert_eq!(second, ordered[7..].to_vec());
    assert_eq!(
        seen(dir.path()).len(),
        cases.len(),
        "every case exactly once"
    );
}

#[test]
fn a_limit_spent_before_the_first_case_runs_that_one_case() {
    let dir = tempfile::tempdir().unwrap();
    common::install_fake_worker(dir.path(), FAKE_WORKER);
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let cases = Selection {
        ops: vec!["rms_norm".into()],
        ..Selection::default()
    }
    .cases(&reg, Suite::Boundary, &h200, None, &Events::default())
    .unwrap();
    let (ordered, yields) = order::by_yield(
        &reg,
        &h200,
        &cases,
        kedge_core::judge::sample::Judging::Auto,
        false,
    );
    let got = run(dir.path(), &cases, &yields, 0);
    assert_eq!(got, vec![ordered[0].clone()]);
}
