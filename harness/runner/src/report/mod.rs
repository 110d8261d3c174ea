//! Reports from `results.jsonl`: Markdown a person reads first (`report.md`, failures first),
//! a short `summary.md` for a CI step summary (counts, new failures, fixed known ones,
//! transitions, a boundary matrix per op), JSON for machines and JUnit XML for CI systems.
//! All of them come from the same `Summary`, sorted so that the output does not depend on the
//! order shards finished in.
//!
//! With a baseline (`ReportOptions::baseline`), failures are judged as the gate judges them,
//! case by case: a known one is marked `known` in Markdown and skipped in JUnit with the
//! reason; a new one stays a failure. With the registry, each failure names its op's
//! test-backend-ops line and the command that runs just that case.

mod junit;
mod markdown;
mod matrix;
mod summary_md;

pub use junit::render_junit;
pub use markdown::render_markdown;
pub use matrix::{probe_lines, MatrixRow, ProbeLine};
pub use summary_md::render_summary_md;

use crate::gate::{gate, Baseline};
use crate::results::{rerun_command, shell_quote, ResultSet};
use crate::workflow::repro::vars_filter;
use kedge_core::judge::result::{Finding, FindingKind};
use kedge_core::{AllocMode, CaseResult, Detector, Registry, Under, Verdict};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// A report that cannot be serialized.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// `junit.xml`.
    #[error("JUnit XML: {0}")]
    Junit(#[from] quick_junit::SerializeError),
    /// `report.json`.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// What a report knows besides the results.
#[derive(Clone, Copy, Default)]
pub struct ReportOptions<'a> {
    /// Known failures: failures of their cases are marked known (skipped in JUnit, with the
    /// reason), and known failures that now pass are listed.
    pub baseline: Option<&'a Baseline>,
    /// The ops' declarations: each failure names its op's test-backend-ops line and command.
    pub registry: Option<&'a Registry>,
    /// Where the results ran, one line each ("native: NVIDIA H200 (driver 580.159.04 (CUDA
    /// 13.0); gpus 0)"), from the sweeps' summaries.
    pub devices: &'a [String],
    /// What the results are of and where they (and the baseline) came from, one line each
    /// ("baseline and results: profile h200, mode native/exact, ...; baseline from X,
    /// results from Y").
    pub provenance: &'a [String],
    /// Cases the sweep set out to run and did not start (its time limit ran out).
    pub not_run: Option<&'a NotRun>,
}

/// Cases a sweep set out to run and did not start, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotRun {
    /// Why, in words: "the time limit (--max-time 5m) ran out after 5m 0.2s".
    pub why: String,
    /// The file naming every one of them (`OUT/not-run.jsonl`).
    pub file: String,
    /// Each case as `run kind: label`, in the order they would have run.
    pub cases: Vec<String>,
}

impl NotRun {
    /// "**12 cases not run**: WHY; every one is in FILE, and `kedge sweep --resume` with the
    /// same flags runs them."
    pub(crate) fn sentence(&self) -> String {
        format!(
            "**{} {} not run**: {}. Every one is in `{}`; `kedge sweep --resume` with the same flags and `--out` runs them.",
            self.cases.len(),
            if self.cases.len() == 1 { "case" } else { "cases" },
            self.why,
            self.file
        )
    }
}

/// Counts of one set of results.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Result lines (a case run natively and under memcheck counts twice).
    pub results: usize,
    /// Results that passed.
    pub pass: usize,
    /// Results with a failing verdict, known failures among them.
    pub fail: usize,
    /// Results whose impl refused the shape with a clear error: allowed, not a failure.
    pub unsupported: usize,
    /// Results whose CPU-side checks ran but whose device part was skipped.
    pub skipped: usize,
    /// Failing verdicts only.
    pub failures_by_verdict: BTreeMap<Verdict, usize>,
    /// Results that carry leak records (memory the process never freed): kept apart from
    /// their verdict, which a leak does not change.
    #[serde(skip_serializing_if = "is_zero")]
    pub with_leaks: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
        if has_leaks(r) {
            self.with_leaks += 1;
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

/// Does the result carry leak records?
pub(crate) fn has_leaks(r: &CaseResult) -> bool {
    r.findings.iter().any(|f| f.kind() == FindingKind::Leak)
}

/// Adjacent tested values of one axis, all else equal, where one passes and the next fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// The op.
    pub op: String,
    /// The impl (`impl` in JSON).
    #[serde(rename = "impl")]
    pub imp: String,
    /// The dtype, by name.
    pub dtype: String,
    /// The failing case's allocation mode.
    pub alloc: AllocMode,
    /// The run kind both results are of: `native`, `memcheck`, `cpu` ...
    pub under: String,
    /// `ne[2]` or a parameter name.
    pub axis: String,
    /// The other coordinates: `ne=[64,1,*,1] eps=0.000001 seed=1`.
    pub fixed: String,
    /// The value on the axis where it passes.
    pub pass_at: Value,
    /// The neighbouring value where it fails.
    pub fail_at: Value,
    /// The failing side's verdict.
    pub verdict: Verdict,
    /// What saw the failure.
    pub detector: Detector,
    /// The passing case's id.
    pub pass_id: String,
    /// The failing case's id.
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

/// Where a failure stands against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Standing {
    /// Not in the baseline (or in it with another verdict).
    New,
    /// In the baseline with this verdict.
    Known,
}

/// test-backend-ops' own line for a case and the command that runs just it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamLine {
    /// `test_cases.emplace_back(new test_rms_norm(...));`
    pub line: String,
    /// `test-backend-ops test -b CUDA0 -o RMS_NORM -p '^type=f32,ne=\[64,1,65536,1\],v=0,eps=0\.000001,inplace=0$'`
    pub command: String,
}

/// One sanitizer finding as the report shows it, with its address named by the case's
/// allocations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingSummary {
    /// The finding as the result records it (its fields inline in JSON).
    #[serde(flatten)]
    pub finding: Finding,
    /// "4 bytes past the end of `x` (a 1,048,576-byte allocation)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// One failing result as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureSummary {
    /// The case id.
    pub id: String,
    /// The case's label: op, impl, dtype, shape, parameters, seed, allocation mode.
    pub label: String,
    /// The impl (`impl` in JSON).
    #[serde(rename = "impl")]
    pub imp: String,
    /// The failing verdict.
    pub verdict: Verdict,
    /// What saw it.
    pub detector: Detector,
    /// The run kind: `native`, `memcheck`, `cpu` ...
    pub under: String,
    /// The case's allocation mode.
    pub alloc: AllocMode,
    /// The result's own words: what failed and where.
    pub detail: String,
    /// The command that runs just this case again (with the sanitizer that saw it).
    pub rerun: String,
    /// Against the baseline, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
    /// "first bad element (1024, 0, 0, 0) of `dst`: got 7, expected 0.5 (...)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<String>,
    /// test-backend-ops' line and command for the case, when a registry was given and
    /// upstream has the case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamLine>,
    /// Which real workload reaches this shape, or "synthetic: ...".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reach: Option<String>,
    /// What the allocation mode can and cannot see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_note: Option<String>,
    /// Other detectors that saw something too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Detector>,
    /// The sanitizer findings, leak records left out (those are in `Summary::leaks`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingSummary>,
}

/// A known failure whose case now passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FixedKnown {
    /// The case id.
    pub id: String,
    /// The case's label.
    pub label: String,
    /// The verdict the baseline knows it by.
    pub was: Verdict,
}

/// A result with leak records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeakSummary {
    /// The case id.
    pub id: String,
    /// The case's label.
    pub label: String,
    /// The run kind that recorded the leaks.
    pub under: String,
    /// The result's verdict, which the leaks do not change.
    pub verdict: Verdict,
    /// The leak records only.
    pub findings: Vec<FindingSummary>,
}

/// One op's part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpSummary {
    /// The op.
    pub op: String,
    /// Its results' counts (inline in JSON).
    #[serde(flatten)]
    pub counts: Counts,
    /// Its pass/fail transitions (`find_transitions`).
    pub transitions: Vec<Transition>,
    /// Its failing results, in report order.
    pub failures: Vec<FailureSummary>,
}

/// The machine-readable report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Counts over every result (inline in JSON).
    #[serde(flatten)]
    pub counts: Counts,
    /// Distinct case ids (a case run natively and under memcheck is one case, two results).
    pub cases: usize,
    /// Results per run kind: native, memcheck, cpu ...
    pub by_under: BTreeMap<String, usize>,
    /// Results per allocation mode.
    pub by_alloc: BTreeMap<AllocMode, usize>,
    /// Failing results whose case is not a known failure, when a baseline was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_failures: Option<usize>,
    /// Failing results whose case is a known failure, when a baseline was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_failures: Option<usize>,
    /// Known failures whose case now passes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixed_known: Vec<FixedKnown>,
    /// Results that carry leak records.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaks: Vec<LeakSummary>,
    /// Where the results ran, one line each (`ReportOptions::devices`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// What the results are of and which builds made them (and the baseline).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<String>,
    /// Cases the sweep did not start, when its time limit ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<NotRun>,
    /// Per op, by op name.
    pub ops: Vec<OpSummary>,
}

impl Summary {
    /// Every failure, op by op.
    pub(crate) fn failures(&self) -> impl Iterator<Item = &FailureSummary> {
        self.ops.iter().flat_map(|o| o.failures.iter())
    }
    /// Was a baseline given?
    pub(crate) fn judged(&self) -> bool {
        self.new_failures.is_some()
    }
    /// "5 fail (4 new, 1 known)" or "5 fail".
    fn fail_text(&self) -> String {
        match (self.new_failures, self.known_failures) {
            (Some(n), Some(k)) => format!("{} fail ({n} new, {k} known)", self.counts.fail),
            _ => format!("{} fail", self.counts.fail),
        }
    }
    /// "13 results of 13 cases: 6 pass, 5 fail (4 new, 1 known), 1 unsupported, 1 skipped."
    pub(crate) fn counts_sentence(&self) -> String {
        let c = &self.counts;
        let mut s = format!(
            "{} results of {} cases: {} pass, {}, {} unsupported, {} skipped",
            c.results,
            self.cases,
            c.pass,
            self.fail_text(),
            c.unsupported,
            c.skipped
        );
        if c.with_leaks > 0 {
            s.push_str(&format!("; {} with leak records", c.with_leaks));
        }
        s.push('.');
        s
    }
}

/// Sort key: op, impl, dtype, alloc, shape, params, seed, run kind.
pub(crate) fn order(results: &[CaseResult]) -> Vec<&CaseResult> {
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

pub(crate) fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

pub(crate) fn fmt_ne_masked(ne: &[i64; 4], masked: Option<usize>) -> String {
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

/// The axes a result lies on: for each dimension and numeric parameter, its name, the case's
/// value there and the other coordinates (`ne=[64,1,*,1] eps=1e-6 seed=1`).
pub(crate) fn axes_of(r: &CaseResult) -> Vec<(String, Value, String)> {
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
    axes.into_iter()
        .map(|(axis, value, fixed)| (axis, value, format!("{} seed={}", fixed.trim_end(), c.seed)))
        .collect()
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
        for (axis, value, fixed) in axes_of(r) {
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

/// The failures judged against a baseline, case by case, as the gate judges them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Judgement {
    pub known: HashSet<String>,
    pub judged: bool,
    pub fixed: Vec<FixedKnown>,
}

impl Judgement {
    pub(crate) fn of(results: &[CaseResult], baseline: Option<&Baseline>) -> Judgement {
        let Some(b) = baseline else {
            return Judgement::default();
        };
        let g = gate(b, results);
        Judgement {
            known: g.still_failing_known.iter().map(|r| r.id.clone()).collect(),
            judged: true,
            fixed: g
                .fixed_known
                .iter()
                .map(|e| FixedKnown {
                    id: e.id.clone(),
                    label: e.case.as_ref().map(|c| c.label()).unwrap_or_default(),
                    was: e.verdict,
                })
                .collect(),
        }
    }
    /// A failing result's standing; `None` without a baseline.
    pub(crate) fn standing(&self, r: &CaseResult) -> Option<Standing> {
        self.judged.then(|| {
            if self.known.contains(&r.id) {
                Standing::Known
            } else {
                Standing::New
            }
        })
    }
}

/// The test-backend-ops backend a case's line runs on: the ggml device of a `ggml:DEVICE`
/// impl, else `CUDA0`.
fn upstream_backend(imp: &str) -> &str {
    imp.strip_prefix("ggml:").unwrap_or("CUDA0")
}

/// The op's test-backend-ops line and command for a case, when the registry knows the op
/// and upstream has it.
pub(crate) fn upstream_line(reg: &Registry, r: &CaseResult) -> Option<UpstreamLine> {
    let op = reg.op(&r.case.op).ok()?;
    let up = op.upstream(&r.case)?;
    Some(UpstreamLine {
        line: up.test_case_line,
        command: format!(
            "test-backend-ops test -b {} -o {} -p {}",
            upstream_backend(&r.case.imp),
            up.op_name,
            shell_quote(&vars_filter(&up.vars))
        ),
    })
}

fn finding_summaries(r: &CaseResult, keep: impl Fn(&Finding) -> bool) -> Vec<FindingSummary> {
    r.findings
        .iter()
        .filter(|f| keep(f))
        .map(|f| FindingSummary {
            finding: f.clone(),
            location: f.locate(&r.observed.allocations),
        })
        .collect()
}

/// The summary without a baseline or registry.
pub fn summarize(results: &[CaseResult]) -> Summary {
    summarize_with(results, &ReportOptions::default())
}

/// The summary every report is rendered from.
pub(crate) fn summarize_with(results: &[CaseResult], opts: &ReportOptions<'_>) -> Summary {
    let judgement = Judgement::of(results, opts.baseline);
    let sorted = order(results);
    let mut counts = Counts::default();
    let mut by_under = BTreeMap::new();
    let mut by_alloc = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut ops: BTreeMap<String, OpSummary> = BTreeMap::new();
    let mut leaks = Vec::new();
    let (mut new, mut known) = (0usize, 0usize);
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
        if has_leaks(r) {
            leaks.push(LeakSummary {
                id: r.id.clone(),
                label: r.case.label(),
                under: r.under.to_string(),
                verdict: r.verdict,
                findings: finding_summaries(r, |f| f.kind() == FindingKind::Leak),
            });
        }
        if r.verdict.is_failure() {
            let standing = judgement.standing(r);
            match standing {
                Some(Standing::New) => new += 1,
                Some(Standing::Known) => known += 1,
                None => {}
            }
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
                standing,
                first_bad: r
                    .numbers
                    .as_ref()
                    .filter(|_| {
                        matches!(
                            r.verdict,
                            Verdict::WrongValues | Verdict::Nonfinite | Verdict::UnwrittenOutput
                        )
                    })
                    .and_then(|n| n.first_bad_sentence()),
                upstream: opts.registry.and_then(|reg| upstream_line(reg, r)),
                reach: r.reach.clone(),
                alloc_note: r.alloc_note.clone(),
                also: r.also.clone(),
                findings: finding_summaries(r, |f| f.kind() != FindingKind::Leak),
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
        new_failures: judgement.judged.then_some(new),
        known_failures: judgement.judged.then_some(known),
        fixed_known: judgement.fixed,
        leaks,
        devices: opts.devices.to_vec(),
        provenance: opts.provenance.to_vec(),
        not_run: opts.not_run.cloned(),
        ops: ops.into_values().collect(),
    }
}

/// Text for a Markdown table cell: pipes escaped, one line.
pub(crate) fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Text for one Markdown list line: one line.
pub(crate) fn md_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// One finding in words: tool, verdict (or `leak`), kernel, the tool's text, where.
pub(crate) fn finding_line(f: &FindingSummary) -> String {
    use std::fmt::Write as _;
    let x = &f.finding;
    let what = match x.kind() {
        FindingKind::Leak => "leak".to_string(),
        _ => x.verdict.to_string(),
    };
    let mut s = format!("{} {what}", x.tool);
    if let Some(k) = &x.kernel {
        let _ = write!(s, " in `{k}`");
    }
    let _ = write!(s, ": {}", x.text);
    if let (Some(t), Some(b)) = (x.thread, x.block) {
        let _ = write!(
            s,
            " (thread ({},{},{}) block ({},{},{}))",
            t[0], t[1], t[2], b[0], b[1], b[2]
        );
    }
    if let Some(a) = x.address.as_ref().filter(|a| !x.text.contains(a.as_str())) {
        let _ = write!(s, " at {a}");
    }
    match (&f.location, &x.allocation) {
        (Some(l), _) => {
            let _ = write!(s, ": {l}");
        }
        (None, Some(a)) => {
            let _ = write!(s, "; {a}");
        }
        (None, None) => {}
    }
    if x.count > 1 {
        let _ = write!(s, " (x{})", x.count);
    }
    s
}

/// The JSON summary (pretty, one trailing newline).
pub fn render_json(results: &[CaseResult]) -> Result<String, ReportError> {
    render_json_with(results, &ReportOptions::default())
}

/// The JSON summary with a baseline and the registry.
pub(crate) fn render_json_with(
    results: &[CaseResult],
    opts: &ReportOptions<'_>,
) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(&summarize_with(results, opts))?;
    s.push('\n');
    Ok(s)
}

/// Every report from merged result files.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// `report.md`.
    pub markdown: String,
    /// `summary.md`.
    pub summary: String,
    /// `report.json`.
    pub json: String,
    /// `junit.xml`.
    pub junit: String,
}

/// Every report, without a baseline or registry.
pub fn render_all(set: &ResultSet) -> Result<Rendered, ReportError> {
    render_all_with(set, &ReportOptions::default())
}

/// Every report: report.md, summary.md, report.json, junit.xml.
pub fn render_all_with(set: &ResultSet, opts: &ReportOptions<'_>) -> Result<Rendered, ReportError> {
    let summary = summarize_with(&set.results, opts);
    Ok(Rendered {
        markdown: markdown::render(&set.results, &summary, set),
        summary: summary_md::render(&set.results, &summary, opts),
        json: render_json_with(&set.results, opts)?,
        junit: junit::render(&set.results, opts)?,
    })
}

/// How a result reads in a one-line list: `FAIL [  12ms] rms_norm/ggml f32 ne=[64,1,65536,1]
/// eps=1e-6 seed=1 (exact) launch-error (driver)`, with `[under]` for a sanitizer run.
pub fn result_line(r: &CaseResult, word: &str) -> String {
    let mut s = format!("{word} [{}] {}", ms_text(r.ms), r.case.label());
    if r.under != Under::Native {
        s.push_str(&format!(" [{}]", r.under));
    }
    if r.verdict.is_failure() || matches!(r.verdict, Verdict::Unsupported | Verdict::Skipped) {
        s.push_str(&format!(" {} ({})", r.verdict, r.detector));
    }
    s
}

/// A duration in a fixed width, as cargo-nextest prints it: `  12ms`, ` 1.20s`.
pub(crate) fn ms_text(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "     ?".into();
    }
    if ms < 1000.0 {
        format!("{:>4}ms", ms.round() as u64)
    } else if ms < 100_000.0 {
        format!("{:>5.2}s", ms / 1000.0)
    } else {
        format!("{:>5.0}s", ms / 1000.0)
    }
}
