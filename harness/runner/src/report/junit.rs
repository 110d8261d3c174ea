//! `junit.xml`: one testsuite per op, one testcase per result (classname `op/impl`, name the
//! case label, plus `[under]` when not native so a case run twice has two names). A known
//! failure (with a baseline) is skipped with the reason, so a CI system's test view shows
//! only the new ones as failed.

use super::{
    finding_line, has_leaks, order, FindingSummary, Judgement, ReportError, ReportOptions, Standing,
};
use crate::results::rerun_command;
use kedge_core::judge::result::FindingKind;
use kedge_core::{CaseResult, Under, Verdict};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// JUnit XML without a baseline.
pub fn render_junit(results: &[CaseResult]) -> Result<String, ReportError> {
    render(results, &ReportOptions::default())
}

fn lines(r: &CaseResult, kind: impl Fn(FindingKind) -> bool) -> String {
    let mut s = String::new();
    for f in r.findings.iter().filter(|f| kind(f.kind())) {
        let fs = FindingSummary {
            finding: f.clone(),
            location: f.locate(&r.observed.allocations),
        };
        s.push_str(&finding_line(&fs));
        s.push('\n');
    }
    s
}

pub(super) fn render(
    results: &[CaseResult],
    opts: &ReportOptions<'_>,
) -> Result<String, ReportError> {
    let judgement = Judgement::of(results, opts.baseline);
    let mut report = Report::new("kedge");
    let mut suites: BTreeMap<String, TestSuite> = BTreeMap::new();
    for r in order(results) {
        let status = match r.verdict {
            Verdict::Pass => TestCaseStatus::success(),
            Verdict::Skipped | Verdict::Unsupported => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("{}: {}", r.verdict, r.detail));
                s
            }
            v if judgement.standing(r) == Some(Standing::Known) => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("known failure: {v} ({}): {}", r.detector, r.detail));
                s
            }
            v => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(r.detail.clone());
                s.set_type(format!("{v} ({})", r.detector));
                let mut desc = format!("re-run: {}\n", rerun_command(r));
                if let Some(b) = r.numbers.as_ref().and_then(|n| {
                    matches!(
                        v,
                        Verdict::WrongValues | Verdict::Nonfinite | Verdict::UnwrittenOutput
                    )
                    .then(|| n.first_bad_sentence())
                    .flatten()
                }) {
                    let _ = writeln!(desc, "{b}");
                }
                desc.push_str(&lines(r, |k| k != FindingKind::Leak));
                if let Some(reg) = opts.registry {
                    if let Some(u) = super::upstream_line(reg, r) {
                        let _ = writeln!(desc, "test-backend-ops: {}", u.line);
                        let _ = writeln!(desc, "test-backend-ops command: {}", u.command);
                    }
                }
                if let Some(reach) = &r.reach {
                    let _ = writeln!(desc, "reach: {reach}");
                }
                s.set_description(desc);
                s
            }
        };
        let mut name = r.case.label();
        if r.under != Under::Native {
            let _ = write!(name, " [{}]", r.under);
        }
        let mut tc = TestCase::new(name, status);
        tc.set_classname(format!("{}/{}", r.case.op, r.case.imp));
        if r.ms.is_finite() && r.ms >= 0.0 {
            tc.set_time(Duration::from_secs_f64(r.ms / 1000.0));
        }
        tc.add_property(Property::new("id", r.id.as_str()));
        tc.add_property(Property::new("alloc", r.case.alloc.name()));
        tc.add_property(Property::new("under", r.under.name()));
        tc.add_property(Property::new("verdict", r.verdict.name()));
        if has_leaks(r) {
            tc.add_property(Property::new("leaks", "yes"));
            tc.set_system_out(lines(r, |k| k == FindingKind::Leak));
        }
        suites
            .entry(r.case.op.clone())
            .or_insert_with(|| TestSuite::new(r.case.op.clone()))
            .add_test_case(tc);
    }
    report.add_test_suites(suites.into_values());
    Ok(report.to_string()?)
}
