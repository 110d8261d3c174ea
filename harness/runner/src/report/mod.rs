//! Reports from `results.jsonl`: Markdown a person reads first, JSON for machines, JUnit XML
//! for CI systems. All three come from the same `Summary`, sorted so that the output does
//! not depend on the order shards finished in.

use crate::results::{rerun_command, ResultSet};
use kedge_core::judge::result::Finding;
use kedge_core::{AllocMode, CaseResult, Detector, Under, Verdict};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("JUnit XML: {0}")]
    Junit(#[from] quick_junit::SerializeError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Counts of one set of results.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    pub results: usize,
    pub pass: usize,
    pub fail: usize,
    pub unsupported: usize,
    pub skipped: usize,
    /// Failing verdicts only.
    pub failures_by_verdict: BTreeMap<Verdict, usize>,
}

impl Counts {
    fn add(&mut self, r: &CaseResult) {
        self.results += 1;
        match r.verdict {
            Verdict::Pass => self.pass += 1,
            Verdict::Unsupported => self.unsupported += 1,
            Verdict::Skipped => self.skipped += 1,
            v => {
                self.fail += 1;
                *self.failures_by_verdict.entry(v).or_default() += 1;
            }
        }
    }
    fn by_verdict_text(&self) -> String {
        if self.failures_by_verdict.is_empty() {
            return "none".into();
        }
        self.failures_by_verdict
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Adjacent tested values of one axis, all else equal, where one passes and the next fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub op: String,
    #[serde(rename = "impl")]
    pub imp: String,
    pub dtype: String,
    pub alloc: AllocMode,
    pub under: String,
    /// `ne[2]` or a parameter name.
    pub axis: String,
    /// The other coordinates: `ne=[64,1,*,1] eps=0.000001 seed=1`.
    pub fixed: String,
    pub pass_at: Value,
    pub fail_at: Value,
    pub verdict: Verdict,
    pub detector: Detector,
    pub pass_id: String,
    pub fail_id: String,
}

impl Transition {
    /// "passes at 65535, fails at 65536 (launch-error, driver)", lower value first.
    pub fn sentence(&self) -> String {
        let fail = format!(
            "fails at {} ({}, {})",
            self.fail_at, self.verdict, self.detector
        );
        let pass = format!("passes at {}", self.pass_at);
        if num(&self.pass_at) < num(&self.fail_at) {
            format!("{pass}, {fail}")
        } else {
            format!("{fail}, {pass}")
        }
    }
}

/// One failing result as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureSummary {
    pub id: String,
    pub label: String,
    #[serde(rename = "impl")]
    pub imp: String,
    pub verdict: Verdict,
    pub detector: Detector,
    pub under: String,
    pub alloc: AllocMode,
    pub detail: String,
    pub rerun: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reach: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_note: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Detector>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpSummary {
    pub op: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub transitions: Vec<Transition>,
    pub failures: Vec<FailureSummary>,
}

/// The machine-readable report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    #[serde(flatten)]
    pub counts: Counts,
    /// Distinct case ids (a case run natively and under memcheck is one case, two results).
    pub cases: usize,
    /// Results per run kind: native, memcheck, cpu ...
    pub by_under: BTreeMap<String, usize>,
    pub by_alloc: BTreeMap<AllocMode, usize>,
    pub ops: Vec<OpSummary>,
}

/// Sort key: op, impl, dtype, alloc, shape, params, seed, run kind.
fn order(results: &[CaseResult]) -> Vec<&CaseResult> {
    let mut v: Vec<&CaseResult> = results.iter().collect();
    v.sort_by(|a, b| {
        let key = |r: &CaseResult| {
            (
                r.case.op.clone(),
                r.case.imp.clone(),
                r.case.dtype,
                r.case.alloc,
                r.case.ne,
                serde_json::to_string(&r.case.params).unwrap_or_default(),
                r.case.seed,
                r.under.to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    v
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn fmt_ne_masked(ne: &[i64; 4], masked: Option<usize>) -> String {
    let parts: Vec<String> = ne
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if Some(i) == masked {
                "*".to_string()
            } else {
                n.to_string()
            }
        })
        .collect();
    format!("[{}]", parts.join(","))
}

/// Every pass/fail transition in the results. Skipped results are left out (they say
/// nothing about the device); `unsupported` sits between values and breaks adjacency.
pub fn find_transitions(results: &[CaseResult]) -> Vec<Transition> {
    // group key → [(value, result)]
    type Key = (String, String, String, String, String, String, String);
    let mut groups: BTreeMap<Key, Vec<(Value, &CaseResult)>> = BTreeMap::new();
    for r in order(results) {
        if r.verdict == Verdict::Skipped {
            continue;
        }
        let c = &r.case;
        let mut axes: Vec<(String, Value, String)> = Vec::new();
        for i in 0..4 {
            let rest: Vec<String> = c.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let fixed = format!("ne={} {}", fmt_ne_masked(&c.ne, Some(i)), rest.join(" "));
            axes.push((format!("ne[{i}]"), Value::from(c.ne[i]), fixed));
        }
        for (name, v) in &c.params {
            if !v.is_number() {
                continue;
            }
            let rest: Vec<String> = c
                .params
                .iter()
                .filter(|(k, _)| *k != name)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let fixed = format!("ne={} {}", fmt_ne_masked(&c.ne, None), rest.join(" "));
            axes.push((name.clone(), v.clone(), fixed));
        }
        for (axis, value, fixed) in axes {
            let fixed = format!("{} seed={}", fixed.trim_end(), c.seed);
            let key = (
                c.op.clone(),
                c.imp.clone(),
                c.dtype.name().to_string(),
                c.alloc.name().to_string(),
                r.under.to_string(),
                axis,
                fixed,
            );
            groups.entry(key).or_default().push((value, r));
        }
    }
    let mut out = Vec::new();
    for ((op, imp, dtype, _, under, axis, fixed), mut members) in groups {
        members.sort_by(|a, b| num(&a.0).total_cmp(&num(&b.0)));
        for w in members.windows(2) {
            let (lo, hi) = (&w[0], &w[1]);
            let (pass, fail) = match (lo.1.verdict, hi.1.verdict) {
                (Verdict::Pass, v) if v.is_failure() => (lo, hi),
                (v, Verdict::Pass) if v.is_failure() => (hi, lo),
                _ => continue,
            };
            out.push(Transition {
                op: op.clone(),
                imp: imp.clone(),
                dtype: dtype.clone(),
                alloc: fail.1.case.alloc,
                under: under.clone(),
                axis: axis.clone(),
                fixed: fixed.clone(),
                pass_at: pass.0.clone(),
                fail_at: fail.0.clone(),
                verdict: fail.1.verdict,
                detector: fail.1.detector,
                pass_id: pass.1.id.clone(),
                fail_id: fail.1.id.clone(),
            });
        }
    }
    out
}

pub fn summarize(results: &[CaseResult]) -> Summary {
    let sorted = order(results);
    let mut counts = Counts::default();
    let mut by_under = BTreeMap::new();
    let mut by_alloc = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut ops: BTreeMap<String, OpSummary> = BTreeMap::new();
    for r in &sorted {
        counts.add(r);
        ids.insert(r.id.as_str());
        *by_under.entry(r.under.to_string()).or_default() += 1;
        *by_alloc.entry(r.case.alloc).or_default() += 1;
        let op = ops.entry(r.case.op.clone()).or_insert_with(|| OpSummary {
            op: r.case.op.clone(),
            counts: Counts::default(),
            transitions: Vec::new(),
            failures: Vec::new(),
        });
        op.counts.add(r);
        if r.verdict.is_failure() {
            op.failures.push(FailureSummary {
                id: r.id.clone(),
                label: r.case.label(),
                imp: r.case.imp.clone(),
                verdict: r.verdict,
                detector: r.detector,
                under: r.under.to_string(),
                alloc: r.case.alloc,
                detail: r.detail.clone(),
                rerun: rerun_command(r),
                reach: r.reach.clone(),
                alloc_note: r.alloc_note.clone(),
                also: r.also.clone(),
                findings: r.findings.clone(),
            });
        }
    }
    for t in find_transitions(results) {
        if let Some(op) = ops.get_mut(&t.op) {
            op.transitions.push(t);
        }
    }
    Summary {
        counts,
        cases: ids.len(),
        by_under,
        by_alloc,
        ops: ops.into_values().collect(),
    }
}

/// What each allocation mode can and cannot see.
pub fn alloc_mode_note(mode: AllocMode) -> &'static str {
    match mode {
        AllocMode::Exact => {
            "each tensor and staging buffer is its own allocation of exactly its bytes, so \
             memcheck's bounds are the tensor's bounds and a read one byte past a tensor is \
             reported (test-backend-ops puts all of a case's tensors in one buffer, so memcheck \
             cannot see a read into the neighbour). Natively an overrun is usually silent: it \
             lands in allocator rounding or another allocation."
        }
        AllocMode::Guard => {
            "the tensor's last byte is the last mapped byte before an unmapped page: any read or \
             write past the end faults natively. It cannot see an access before the start (that \
             lands in the mapped granule), and memcheck's --padding does not cover these driver \
             virtual-memory mappings, so under memcheck guard mode and padding complement each \
             other."
        }
        AllocMode::GuardFront => {
            "the tensor's first byte follows an unmapped page: an access before the start faults \
             natively; an access past the end lands in the mapped granule and is not seen."
        }
        AllocMode::Canary => {
            "red zones around each tensor are filled with a pattern and checked after the run: \
             stray writes into them are caught without a sanitizer, but reads past the end are \
             invisible, and so is a write that jumps over the red zone."
        }
    }
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn finding_line(f: &Finding) -> String {
    let mut s = format!("{} {}", f.tool, f.verdict);
    if let Some(k) = &f.kernel {
        let _ = write!(s, " in `{k}`");
    }
    let _ = write!(s, ": {}", f.text);
    if let (Some(t), Some(b)) = (f.thread, f.block) {
        let _ = write!(
            s,
            " (thread ({},{},{}) block ({},{},{}))",
            t[0], t[1], t[2], b[0], b[1], b[2]
        );
    }
    if let Some(a) = &f.address {
        let _ = write!(s, " at {a}");
    }
    if let Some(a) = &f.allocation {
        let _ = write!(s, "; {a}");
    }
    if f.count > 1 {
        let _ = write!(s, " (x{})", f.count);
    }
    s
}

/// The Markdown report.
pub fn render_markdown(results: &[CaseResult]) -> String {
    let s = summarize(results);
    let mut md = String::new();
    let c = &s.counts;
    let _ = writeln!(md, "# kedge report\n");
    let _ = writeln!(
        md,
        "{} results of {} cases: {} pass, {} fail, {} unsupported, {} skipped.",
        c.results, s.cases, c.pass, c.fail, c.unsupported, c.skipped
    );
    let runs: Vec<String> = s.by_under.iter().map(|(u, n)| format!("{u} {n}")).collect();
    let allocs: Vec<String> = s.by_alloc.iter().map(|(a, n)| format!("{a} {n}")).collect();
    let _ = writeln!(
        md,
        "Runs: {}. Allocation modes: {}.\n",
        runs.join(", "),
        allocs.join(", ")
    );
    let _ = writeln!(
        md,
        "| op | results | pass | fail | unsupported | skipped | failures by verdict | transitions |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---|---:|");
    for op in &s.ops {
        let k = &op.counts;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            op.op,
            k.results,
            k.pass,
            k.fail,
            k.unsupported,
            k.skipped,
            k.by_verdict_text(),
            op.transitions.len()
        );
    }
    let sorted = order(results);
    for op in &s.ops {
        let k = &op.counts;
        let _ = writeln!(md, "\n## {}\n", op.op);
        let _ = writeln!(
            md,
            "{} results: {} pass, {} fail, {} unsupported, {} skipped. Failures by verdict: {}.",
            k.results,
            k.pass,
            k.fail,
            k.unsupported,
            k.skipped,
            k.by_verdict_text()
        );
        let _ = writeln!(md, "\n### Transitions\n");
        if op.transitions.is_empty() {
            let _ = writeln!(md, "None among the values tested.");
        }
        for t in &op.transitions {
            let _ = writeln!(
                md,
                "- `{}` {} {}, {}, {}: `{}` {}",
                t.imp,
                t.dtype,
                t.fixed,
                t.alloc,
                t.under,
                t.axis,
                t.sentence()
            );
        }
        let _ = writeln!(md, "\n### Failures\n");
        if op.failures.is_empty() {
            let _ = writeln!(md, "None.");
        }
        for f in &op.failures {
            let _ = writeln!(
                md,
                "**{}** `{}`: {} ({}), under {}, allocation {}",
                f.label, f.id, f.verdict, f.detector, f.under, f.alloc
            );
            let _ = writeln!(md, "- {}", md_cell(&f.detail));
            for x in &f.findings {
                let _ = writeln!(md, "- finding: {}", md_cell(&finding_line(x)));
            }
            if !f.also.is_empty() {
                let also: Vec<&str> = f.also.iter().map(|d| d.name()).collect();
                let _ = writeln!(md, "- also seen by: {}", also.join(", "));
            }
            if let Some(r) = &f.reach {
                let _ = writeln!(md, "- reach: {}", md_cell(r));
            }
            if let Some(n) = &f.alloc_note {
                let _ = writeln!(md, "- allocation note: {}", md_cell(n));
            }
            let _ = writeln!(md, "- re-run: `{}`\n", f.rerun);
        }
        let _ = writeln!(md, "### Cases\n");
        let _ = writeln!(
            md,
            "| id | case | allocation | under | verdict | detector | ms |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---:|");
        for r in sorted.iter().filter(|r| r.case.op == op.op) {
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {} | {} | {:.3} |",
                r.id,
                md_cell(&r.case.label()),
                r.case.alloc,
                r.under,
                r.verdict,
                r.detector,
                r.ms
            );
        }
    }
    let _ = writeln!(md, "\n## What each allocation mode can hide\n");
    for mode in s.by_alloc.keys() {
        let _ = writeln!(md, "- **{mode}**: {}", alloc_mode_note(*mode));
    }
    let notes: BTreeSet<&str> = results
        .iter()
        .filter_map(|r| r.alloc_note.as_deref())
        .collect();
    for n in notes {
        let _ = writeln!(md, "- case note: {}", md_cell(n));
    }
    md
}

/// The JSON summary (pretty, one trailing newline).
pub fn render_json(results: &[CaseResult]) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(&summarize(results))?;
    s.push('\n');
    Ok(s)
}

/// JUnit XML: one testsuite per op, one testcase per result (classname `op/impl`, name the
/// case label, plus `[under]` when not native so a case run twice has two names).
pub fn render_junit(results: &[CaseResult]) -> Result<String, ReportError> {
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
            v => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(r.detail.clone());
                s.set_type(format!("{v} ({})", r.detector));
                let mut desc = format!("re-run: {}\n", rerun_command(r));
                for f in &r.findings {
                    desc.push_str(&finding_line(f));
                    desc.push('\n');
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
        suites
            .entry(r.case.op.clone())
            .or_insert_with(|| TestSuite::new(r.case.op.clone()))
            .add_test_case(tc);
    }
    report.add_test_suites(suites.into_values());
    Ok(report.to_string()?)
}

/// All three reports from merged result files.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub markdown: String,
    pub json: String,
    pub junit: String,
}

pub fn render_all(set: &ResultSet) -> Result<Rendered, ReportError> {
    let mut markdown = render_markdown(&set.results);
    if !set.torn.is_empty() || set.replaced > 0 {
        let _ = writeln!(markdown, "\n## Merge notes\n");
        if set.replaced > 0 {
            let _ = writeln!(
                markdown,
                "- {} result line(s) replaced by a later line of the same case and run.",
                set.replaced
            );
        }
        for t in &set.torn {
            let _ = writeln!(markdown, "- {}", md_cell(&t.to_string()));
        }
    }
    Ok(Rendered {
        markdown,
        json: render_json(&set.results)?,
        junit: render_junit(&set.results)?,
    })
}
