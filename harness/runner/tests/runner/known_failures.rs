//! corpora/known-failures.jsonl, the baseline the README gates on, is exactly the known
//! failures of the default suite: the upstream launch paths at the h200 profile's limits, as
//! the CPU-side checks find them, with the run they are of (profile h200, mode cpu/exact, the
//! default suite's digest). When ops, boundaries or case ids change, regenerate it with the
//! commands in its header (`kedge sweep --cpu` and `kedge gate --update`: the file then names
//! the kedge commit that made it) or `KEDGE_BLESS=1 cargo test -p kedge-runner --test runner
//! known_failures`, and read the diff.

use kedge_core::{LimitsProfile, Verdict};
use kedge_runner::events::Events;
use kedge_runner::gate::{gate, known_failures, Baseline, KNOWN_FAILURES_HEADER};
use kedge_runner::run::{CpuExecutor, Executor};
use kedge_runner::select::{Selection, Suite};
use std::path::PathBuf;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../corpora/known-failures.jsonl")
}

#[test]
fn the_shipped_baseline_is_the_default_suites_known_failures() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let want = known_failures(&reg, &h200, &Events::default()).unwrap();
    if std::env::var("KEDGE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(path(), want.to_jsonl_with(Some(KNOWN_FAILURES_HEADER))).unwrap();
    }
    assert!(!want.entries.is_empty());
    // Every known failure is a plan past a limit of the profile (a launch, or a buffer), and
    // never a fixed impl's.
    for e in want.entries.values() {
        assert!(
            matches!(e.verdict, Verdict::LaunchError | Verdict::ResourceLimit),
            "{e:?}"
        );
        let c = e.case.as_ref().expect("entries carry their case");
        let (_, imp) = reg.resolve(c).expect("a known impl");
        assert_ne!(imp.role(), kedge_core::ImplRole::Fixed, "{e:?}");
        assert!(e.detector.is_some() && e.reason.is_some(), "{e:?}");
    }
    let stale = format!(
        "{} is not current (regenerate it with the commands in its header, or KEDGE_BLESS=1 cargo test -p kedge-runner --test runner known_failures, then read the diff)",
        path().display()
    );
    let have = Baseline::load(&path()).unwrap();
    assert!(have.entries == want.entries, "{stale}");
    // The run it is of; which kedge build wrote it is only said.
    let (mut h, w) = (
        have.run
            .clone()
            .expect("the shipped baseline records its run"),
        want.run.clone().expect("a run"),
    );
    assert_eq!(
        (&h.profile, &h.mode, &h.impls, &h.suite),
        (&w.profile, &w.mode, &w.impls, &w.suite),
        "{stale}"
    );
    assert_eq!((w.profile.as_str(), w.mode.as_str()), ("h200", "cpu/exact"));
    (h.kedge, h.commit) = (w.kedge.clone(), w.commit.clone());
    assert_eq!(h, w);
}

/// The README's `kedge gate --baseline corpora/known-failures.jsonl RESULTS` passes on the
/// default sweep's results (on the CPU here).
#[test]
fn the_default_sweep_passes_the_shipped_gate() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let cases = Selection::default()
        .cases(&reg, Suite::Default, &h200, None, &Events::default())
        .unwrap();
    let mut results = Vec::new();
    CpuExecutor::new(&reg, h200)
        .run(&cases, &mut |r| {
            results.push(r);
            Ok(())
        })
        .unwrap();
    let g = gate(&Baseline::load(&path()).unwrap(), &results);
    assert!(g.passed(), "{}", g.render());
    assert!(!g.still_failing_known.is_empty());
}
