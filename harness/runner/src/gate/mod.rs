//! `kedge gate --baseline FILE results.jsonl`: pass only when every failure is a known one,
//! and never on nothing: no results, a cut-off results file, or (with `--expect`) a case
//! expected but without a result all fail the gate. A known failure that now passes fails it
//! too (trim the baseline), as the README says.
//!
//! Baseline format: JSON lines. First (optionally) the run the baseline was made from,
//! `{"run":{"kedge":...,"profile":"h200","mode":"native/exact","suite":{...}}}` (a
//! `RunInfo`: a baseline judges only results of its profile, mode and suite), then one known
//! failure a line, `{"id":"3fa2c1d4e5f6","verdict":"launch-error","detector":"driver",
//! "reason":"...","case":{...}}` (`detector`, `reason` and `case` optional, for people and for
//! re-running; `"intermittent":true` for a failure that has also passed in the same mode,
//! whose pass is no news); blank lines and `#` comments allowed. `Baseline::from_results` writes one
//! from a results file; `known_failures` computes the one kedge ships
//! (corpora/known-failures.jsonl); `BaselineChanges` says what an update changed.

use crate::results::TornLine;
use kedge_core::{Case, CaseResult, Detector, LimitsProfile, Registry, RunInfo, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A baseline that cannot be read (bad input: exit 2). `path` is the baseline file, `line`
/// a line of it, from 1.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The baseline file.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A line that is neither a run line nor a known failure.
    #[error("{path}:{line}: not a baseline line (expected {{\"id\":...,\"verdict\":...}}): {msg}")]
    Malformed {
        /// The baseline file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// Why it does not parse.
        msg: String,
    },
    /// An entry whose verdict is not a failure (`pass`, `skipped`, `unsupported`).
    #[error("{path}:{line}: verdict '{verdict}' is not a failure; a baseline lists failures")]
    NotAFailure {
        /// The baseline file.
        path: PathBuf,
        /// The line.
        line: usize,
        /// The verdict it gives.
        verdict: Verdict,
    },
    /// A case id with two entries.
    #[error("{path}:{line}: case id {id} listed twice")]
    Duplicate {
        /// The baseline file.
        path: PathBuf,
        /// The second entry's line.
        line: usize,
        /// The case id.
        id: String,
    },
    /// More than one run line.
    #[error("{path}:{line}: a second run line (a baseline is made from one run)")]
    SecondRun {
        /// The baseline file.
        path: PathBuf,
        /// The second run line.
        line: usize,
    },
}

/// One known failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineEntry {
    /// The case's id: what results are matched by.
    pub id: String,
    /// The failing verdict that is known; the same case failing with another verdict is a
    /// new failure.
    pub verdict: Verdict,
    /// The detector that saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<Detector>,
    /// What failed, in the result's words (its detail's first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The case itself, to name it in messages and re-run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<Case>,
    /// The case has also passed in the same mode: a failure that depends on what lies past
    /// a buffer or on timing. Its pass is no news (the gate neither fails nor asks to trim
    /// it); failing with another verdict is still new. Set when a baseline is written from
    /// several runs that disagree on the case.
    #[serde(default, skip_serializing_if = "is_false")]
    pub intermittent: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The run line of a baseline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunLine {
    run: RunInfo,
}

/// The longest reason a baseline keeps (the result's detail can list many launches).
const REASON_CHARS: usize = 240;

/// A result's detail as a baseline's reason: its first line, cut at `REASON_CHARS`.
fn reason_of(detail: &str) -> Option<String> {
    let first = detail.lines().next().unwrap_or("").trim();
    if first.is_empty() {
        return None;
    }
    let mut r: String = first.chars().take(REASON_CHARS).collect();
    if first.chars().count() > REASON_CHARS {
        r.push_str(" ...");
    }
    Some(r)
}

/// Known failures, with the run they are of: what `kedge gate` judges results against.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Baseline {
    /// The run the baseline was made from; absent in baselines of older kedges.
    pub run: Option<RunInfo>,
    /// By case id.
    pub entries: BTreeMap<String, BaselineEntry>,
}

impl Baseline {
    /// Read and parse the baseline file at `path`.
    pub fn load(path: &Path) -> Result<Baseline, GateError> {
        let text = std::fs::read_to_string(path).map_err(|source| GateError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Baseline::parse(path, &text)
    }

    /// Parse baseline text; `path` is used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Baseline, GateError> {
        let mut entries = BTreeMap::new();
        let mut run = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let malformed = |msg: String| GateError::Malformed {
                path: path.to_path_buf(),
                line: i + 1,
                msg,
            };
            let value: serde_json::Value =
                serde_json::from_str(t).map_err(|e| malformed(e.to_string()))?;
            if value.get("run").is_some() {
                let r: RunLine =
                    serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
                if run.is_some() {
                    return Err(GateError::SecondRun {
                        path: path.to_path_buf(),
                        line: i + 1,
                    });
                }
                run = Some(r.run);
                continue;
            }
            let e: BaselineEntry =
                serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
            if !e.verdict.is_failure() {
                return Err(GateError::NotAFailure {
                    path: path.to_path_buf(),
                    line: i + 1,
                    verdict: e.verdict,
                });
            }
            if entries.contains_key(&e.id) {
                return Err(GateError::Duplicate {
                    path: path.to_path_buf(),
                    line: i + 1,
                    id: e.id,
                });
            }
            entries.insert(e.id.clone(), e);
        }
        Ok(Baseline { run, entries })
    }

    /// Every failing case of `results` as a known failure (the worst verdict when a case
    /// has several results, e.g. native and memcheck), and the results' run. A case that
    /// fails in one result and passes in another of the same mode (several runs of one
    /// suite) is `intermittent`.
    pub fn from_results(results: &[CaseResult]) -> Baseline {
        let mut entries: BTreeMap<String, BaselineEntry> = BTreeMap::new();
        for r in results.iter().filter(|r| r.verdict.is_failure()) {
            let worse = entries
                .get(&r.id)
                .is_none_or(|e| r.verdict.severity() > e.verdict.severity());
            if worse {
                entries.insert(
                    r.id.clone(),
                    BaselineEntry {
                        id: r.id.clone(),
                        verdict: r.verdict,
                        detector: Some(r.detector),
                        reason: reason_of(&r.detail),
                        case: Some(r.case.clone()),
                        intermittent: false,
                    },
                );
            }
        }
        let passed: std::collections::HashSet<(&str, String)> = results
            .iter()
            .filter(|r| r.verdict == Verdict::Pass)
            .map(|r| (r.id.as_str(), r.under.to_string()))
            .collect();
        for r in results.iter().filter(|r| r.verdict.is_failure()) {
            if passed.contains(&(r.id.as_str(), r.under.to_string())) {
                if let Some(e) = entries.get_mut(&r.id) {
                    e.intermittent = true;
                }
            }
        }
        Baseline {
            run: results.iter().find_map(|r| r.run.clone()),
            entries,
        }
    }

    /// `self`, the baseline written from new results, as an update of `old`: a known
    /// intermittent failure stays known when the new results pass it (a pass says nothing
    /// about it) and stays intermittent when they fail it the same way.
    pub fn keeping_intermittent(mut self, old: &Baseline, results: &[CaseResult]) -> Baseline {
        for (id, o) in old.entries.iter().filter(|(_, o)| o.intermittent) {
            match self.entries.get_mut(id) {
                Some(e) if e.verdict == o.verdict => e.intermittent = true,
                Some(_) => {}
                None if results
                    .iter()
                    .any(|r| &r.id == id && r.verdict == Verdict::Pass) =>
                {
                    self.entries.insert(id.clone(), o.clone());
                }
                None => {}
            }
        }
        self
    }

    /// The file form: the run line, then one JSON line per entry, sorted by id.
    pub fn to_jsonl(&self) -> String {
        self.to_jsonl_with(None)
    }

    /// The file form after a `#` comment header (each line of `header` commented).
    pub fn to_jsonl_with(&self, header: Option<&str>) -> String {
        let mut s = String::new();
        for l in header.into_iter().flat_map(str::lines) {
            s.push_str(&format!("# {l}\n"));
        }
        if let Some(run) = &self.run {
            // Serializing these plain structs cannot fail.
            let line = RunLine { run: run.clone() };
            s.push_str(&serde_json::to_string(&line).unwrap_or_default());
            s.push('\n');
        }
        for e in self.entries.values() {
            s.push_str(&serde_json::to_string(e).unwrap_or_default());
            s.push('\n');
        }
        s
    }
}

/// The leading `#` comment lines of a baseline file, without their `# `: what an update keeps.
pub fn comment_header(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| {
            let l = l.trim_start().trim_start_matches('#');
            l.strip_prefix(' ').unwrap_or(l)
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// What rewriting a baseline changed (`kedge gate --update`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BaselineChanges {
    /// The run's fields that changed: (field, before, after).
    pub run: Vec<(String, String, String)>,
    /// Failures that were not known.
    pub added: Vec<BaselineEntry>,
    /// Known failures that are gone, and why (`passes now`, `no result`).
    pub removed: Vec<(BaselineEntry, String)>,
    /// Known failures that fail differently: (before, after).
    pub changed: Vec<(BaselineEntry, BaselineEntry)>,
    /// Known failures that fail as before.
    pub unchanged: usize,
}

impl BaselineChanges {
    /// `old` rewritten as `new`, which `results` made.
    pub fn between(old: &Baseline, new: &Baseline, results: &[CaseResult]) -> BaselineChanges {
        let mut c = BaselineChanges::default();
        let field = |r: &Option<RunInfo>, f: fn(&RunInfo) -> String| {
            r.as_ref().map(f).unwrap_or_else(|| "(not recorded)".into())
        };
        type Field = (&'static str, fn(&RunInfo) -> String);
        let fields: [Field; 4] = [
            ("profile", |r| r.profile.clone()),
            ("mode", |r| r.mode.clone()),
            ("suite", |r| {
                r.suite
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "none".into())
            }),
            ("made by", RunInfo::build),
        ];
        for (name, f) in fields {
            let (a, b) = (field(&old.run, f), field(&new.run, f));
            if a != b {
                c.run.push((name.to_string(), a, b));
            }
        }
        for (id, e) in &new.entries {
            match old.entries.get(id) {
                None => c.added.push(e.clone()),
                // A detector the old baseline did not record is no change.
                Some(o)
                    if o.verdict != e.verdict
                        || (o.detector.is_some() && o.detector != e.detector) =>
                {
                    c.changed.push((o.clone(), e.clone()))
                }
                Some(_) => c.unchanged += 1,
            }
        }
        for (id, o) in &old.entries {
            if new.entries.contains_key(id) {
                continue;
            }
            let why = if results.iter().any(|r| &r.id == id) {
                "passes now"
            } else {
                "no result in these results"
            };
            c.removed.push((o.clone(), why.to_string()));
        }
        c
    }

    /// Did nothing change (the count of unchanged entries aside)?
    pub fn is_empty(&self) -> bool {
        self.run.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
    }

    /// What a person reads: a count line, then each change.
    pub fn render(&self, path: &Path) -> String {
        let label = |e: &BaselineEntry| e.case.as_ref().map(Case::label).unwrap_or_default();
        let det = |e: &BaselineEntry| e.detector.map(|d| format!(" ({d})")).unwrap_or_default();
        let mut s = format!(
            "{}: {} added, {} removed, {} changed, {} unchanged\n",
            path.display(),
            self.added.len(),
            self.removed.len(),
            self.changed.len(),
            self.unchanged
        );
        for (f, a, b) in &self.run {
            s.push_str(&format!("RUN     {f}: {a} -> {b}\n"));
        }
        for e in &self.added {
            s.push_str(&format!(
                "ADDED   {} {} {}{}: {}\n",
                e.id,
                label(e),
                e.verdict,
                det(e),
                e.reason.as_deref().unwrap_or("")
            ));
        }
        for (e, why) in &self.removed {
            s.push_str(&format!(
                "REMOVED {} {} (was {}{}): {why}\n",
                e.id,
                label(e),
                e.verdict,
                det(e)
            ));
        }
        for (a, b) in &self.changed {
            s.push_str(&format!(
                "CHANGED {} {} {}{} -> {}{}\n",
                b.id,
                label(b),
                a.verdict,
                det(a),
                b.verdict,
                det(b)
            ));
        }
        s
    }
}

/// A failure the baseline does not excuse.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFailure {
    /// The case's worst failing result.
    pub result: CaseResult,
    /// Set when the case is in the baseline with another verdict (it fails differently now).
    pub known_as: Option<Verdict>,
}

/// The gate's verdict on a set of results, with everything it counted: what `gate` returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateOutcome {
    /// Failing cases the baseline does not excuse, in the order of the results.
    pub new_failures: Vec<NewFailure>,
    /// Failing results whose case and verdict are in the baseline.
    pub still_failing_known: Vec<CaseResult>,
    /// Known failures whose every result now passes: trim them from the baseline.
    pub fixed_known: Vec<BaselineEntry>,
    /// Known intermittent failures that passed this time: no news.
    pub intermittent_passing: Vec<BaselineEntry>,
    /// Known failures with no result here (another shard, or not run this time).
    pub not_run_known: Vec<BaselineEntry>,
    /// Results that did not fail (pass, unsupported, skipped).
    pub not_failing: usize,
    /// Results gated.
    pub results: usize,
    /// Cut-off last lines of the results files: those cases have no result.
    pub torn: Vec<TornLine>,
    /// Cases expected (`--expect`) with no result.
    pub missing: Vec<Case>,
    /// How many cases were expected, when an expectation was given.
    pub expected: Option<usize>,
}

impl GateOutcome {
    /// Also fail on cut-off results files.
    pub fn with_torn(mut self, torn: Vec<TornLine>) -> Self {
        self.torn = torn;
        self
    }

    /// Also fail on every expected case without a result.
    pub fn expecting(mut self, expected: &[Case], results: &[CaseResult]) -> Self {
        let have: std::collections::HashSet<&str> = results.iter().map(|r| r.id.as_str()).collect();
        self.missing = expected
            .iter()
            .filter(|c| !have.contains(c.id().as_str()))
            .cloned()
            .collect();
        self.expected = Some(expected.len());
        self
    }

    /// Why the gate fails, one reason each; empty when it passes.
    fn reasons(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.results == 0 {
            v.push("no results: there is nothing to gate (did the sweep run?)".to_string());
        }
        for t in &self.torn {
            v.push(format!("incomplete results: {t}"));
        }
        if !self.missing.is_empty() {
            v.push(format!(
                "{} of {} expected cases have no result",
                self.missing.len(),
                self.expected.unwrap_or(self.missing.len())
            ));
        }
        if !self.new_failures.is_empty() {
            v.push(format!("{} new failure(s)", self.new_failures.len()));
        }
        if !self.fixed_known.is_empty() {
            v.push(format!(
                "{} known failure(s) now pass: remove them from the baseline",
                self.fixed_known.len()
            ));
        }
        v
    }

    /// 0 only when there were results, all of them complete, every expected case has one,
    /// every failure is in the baseline and every known failure still fails.
    pub fn exit_code(&self) -> i32 {
        i32::from(!self.reasons().is_empty())
    }
    /// Does the gate pass (`exit_code` 0)?
    pub fn passed(&self) -> bool {
        self.exit_code() == 0
    }

    /// What a CI log shows.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let intermittent = match self.intermittent_passing.len() {
            0 => String::new(),
            n => format!(", {n} known intermittent passing"),
        };
        s.push_str(&format!(
            "gate: {} ({} new failure(s), {} known still failing, {} known now passing{intermittent}, {} known not run, {} not failing)\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.new_failures.len(),
            self.still_failing_known.len(),
            self.fixed_known.len(),
            self.not_run_known.len(),
            self.not_failing,
        ));
        for r in self.reasons() {
            s.push_str(&format!("REASON  {r}\n"));
        }
        for c in &self.missing {
            s.push_str(&format!("MISSING {} {}\n", c.id(), c.label()));
        }
        for n in &self.new_failures {
            let r = &n.result;
            let known = match n.known_as {
                Some(v) => format!(" (known as {v}, now {})", r.verdict),
                None => String::new(),
            };
            s.push_str(&format!(
                "NEW     {} {} {} ({}, {}){}: {}\n        re-run: {}\n",
                r.id,
                r.case.label(),
                r.verdict,
                r.detector,
                r.under,
                known,
                r.detail,
                crate::results::rerun_command(r)
            ));
        }
        for e in &self.fixed_known {
            let label = e.case.as_ref().map(Case::label).unwrap_or_default();
            s.push_str(&format!(
                "FIXED   {} {} (was {}): remove it from the baseline\n",
                e.id, label, e.verdict
            ));
        }
        for e in &self.intermittent_passing {
            let label = e.case.as_ref().map(Case::label).unwrap_or_default();
            s.push_str(&format!(
                "INTERMITTENT {} {} (known {}, intermittent): passed this time\n",
                e.id, label, e.verdict
            ));
        }
        for r in &self.still_failing_known {
            s.push_str(&format!(
                "KNOWN   {} {} {}\n",
                r.id,
                r.case.label(),
                r.verdict
            ));
        }
        s
    }
}

/// GitHub Actions workflow commands: `%`, CR and LF escaped in a message (and `:` and `,` in
/// a property such as `title`), as the runner reads them.
fn gh_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn gh_property(s: &str) -> String {
    gh_data(s).replace(':', "%3A").replace(',', "%2C")
}

impl GateOutcome {
    /// GitHub Actions annotations: `::error` for each new failure, each known failure that
    /// now passes and each other reason the gate fails (no results, a cut-off file, expected
    /// cases without a result), a `::notice` for each known intermittent failure that passed,
    /// then one `::notice` with the gate's summary line.
    pub fn render_github(&self) -> String {
        let mut s = String::new();
        let mut error = |title: String, msg: String| {
            s.push_str(&format!(
                "::error title={}::{}\n",
                gh_property(&title),
                gh_data(&msg)
            ));
        };
        for n in &self.new_failures {
            let r = &n.result;
            let known = match n.known_as {
                Some(v) => format!(" (known as {v})"),
                None => String::new(),
            };
            error(
                format!("kedge: new failure {} {}{known}", r.case.label(), r.verdict),
                format!(
                    "{} ({}, {}): {}\nre-run: {}",
                    r.verdict,
                    r.detector,
                    r.under,
                    r.detail,
                    crate::results::rerun_command(r)
                ),
            );
        }
        for e in &self.fixed_known {
            let label = e.case.as_ref().map(Case::label).unwrap_or_default();
            error(
                format!("kedge: known failure now passes {label}"),
                format!(
                    "{} was {}; it passes now: remove it from the baseline",
                    e.id, e.verdict
                ),
            );
        }
        if self.results == 0 || !self.torn.is_empty() || !self.missing.is_empty() {
            for r in self
                .reasons()
                .into_iter()
                .filter(|r| !r.ends_with("new failure(s)") && !r.contains("now pass: remove them"))
            {
                error("kedge gate".into(), r);
            }
        }
        for e in &self.intermittent_passing {
            let label = e.case.as_ref().map(Case::label).unwrap_or_default();
            s.push_str(&format!(
                "::notice title={}::{}\n",
                gh_property(&format!("kedge: intermittent failure passed {label}")),
                gh_data(&format!(
                    "{} is known to fail intermittently ({}); it passed this time",
                    e.id, e.verdict
                ))
            ));
        }
        let head = self.render();
        let first = head.lines().next().unwrap_or("gate");
        s.push_str(&format!(
            "::notice title={}::{}\n",
            gh_property(&format!(
                "kedge gate {}",
                if self.passed() { "PASS" } else { "FAIL" }
            )),
            gh_data(first)
        ));
        s
    }
}

/// The failing result that stands for a case: the most severe (first on ties), the same
/// choice `Baseline::from_results` makes, so a baseline written from results passes them.
fn worst_failure<'a>(results: impl Iterator<Item = &'a CaseResult>) -> Option<&'a CaseResult> {
    let mut best: Option<&CaseResult> = None;
    for r in results.filter(|r| r.verdict.is_failure()) {
        if best.is_none_or(|b| r.verdict.severity() > b.verdict.severity()) {
            best = Some(r);
        }
    }
    best
}

/// Compare results with the baseline, case by case: a case with several results (native and
/// memcheck) is judged by its worst failure.
pub fn gate(baseline: &Baseline, results: &[CaseResult]) -> GateOutcome {
    let mut out = GateOutcome {
        not_failing: results.iter().filter(|r| !r.verdict.is_failure()).count(),
        results: results.len(),
        ..GateOutcome::default()
    };
    let mut ids: Vec<&str> = Vec::new();
    for r in results {
        if !ids.contains(&r.id.as_str()) {
            ids.push(&r.id);
        }
    }
    for id in &ids {
        let of_case = || results.iter().filter(move |r| r.id == *id);
        match (worst_failure(of_case()), baseline.entries.get(*id)) {
            (Some(r), Some(e)) if e.verdict == r.verdict => out.still_failing_known.push(r.clone()),
            (Some(r), known) => out.new_failures.push(NewFailure {
                result: r.clone(),
                known_as: known.map(|e| e.verdict),
            }),
            // Only a pass counts as fixed; a case that was only skipped said nothing.
            (None, Some(e)) if of_case().any(|r| r.verdict == Verdict::Pass) => {
                let mut e = e.clone();
                if e.case.is_none() {
                    // An id-only baseline line: name the case from its result.
                    e.case = of_case().next().map(|r| r.case.clone());
                }
                if e.intermittent {
                    out.intermittent_passing.push(e)
                } else {
                    out.fixed_known.push(e)
                }
            }
            (None, Some(e)) => out.not_run_known.push(e.clone()),
            (None, None) => {}
        }
    }
    for e in baseline.entries.values() {
        if !ids.contains(&e.id.as_str()) {
            out.not_run_known.push(e.clone());
        }
    }
    out
}

/// The header of the baseline kedge ships.
pub const KNOWN_FAILURES_HEADER: &str = "Known failures: the default suite's cases at the limits of the h200 profile whose
CPU-side checks fail (the upstream launch paths past the grid limits, buffers past the
device's memory). It gates the CPU-side sweep (mode cpu/exact); a GPU sweep needs a baseline
of its own mode, made from a GPU run. Usage: kedge gate --baseline corpora/known-failures.jsonl RESULTS
Regenerate: kedge sweep --cpu --out DIR && kedge gate --update corpora/known-failures.jsonl DIR/results.jsonl";

/// The header of a baseline `kedge gate --write-baseline` or `--update` writes.
pub const KNOWN_FAILURES_HEADER_GENERIC: &str =
    "Known failures for kedge gate: the run line says which profile, mode and suite they are of;
a baseline judges only results of those. Gate: kedge gate --baseline THIS-FILE RESULTS...
Rewrite from new results (prints what changed): kedge gate --update THIS-FILE RESULTS...";

/// The known failures of the default suite on the CPU against `limits`: every case whose
/// CPU-side check fails (the upstream launch paths past the grid limits), with the run a
/// `kedge sweep --cpu --profile NAME` of the default suite records.
pub fn known_failures(
    reg: &Registry,
    limits: &LimitsProfile,
    events: &crate::events::Events,
) -> Result<Baseline, crate::select::SelectError> {
    let cases = crate::select::Selection::default().cases(
        reg,
        crate::select::Suite::Default,
        limits,
        None,
        events,
    )?;
    let suite = kedge_core::SuiteInfo::of(
        crate::provenance::suite_name(
            crate::select::Suite::Default,
            &crate::select::Selection::default(),
            crate::select::MaxElements::NONE,
            None,
        ),
        cases
            .iter()
            .map(|c| c.id())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    let run = crate::provenance::sweep_info(
        &limits.name,
        crate::provenance::mode(&[kedge_core::Under::Cpu], None),
        crate::provenance::impl_sources(reg, &cases, &crate::external::ExternalSpec::default()),
        suite,
    );
    let results: Vec<CaseResult> = cases
        .iter()
        .map(|c| {
            let mut r = kedge_core::engine::check_on_cpu(reg, c, limits, false);
            r.run = Some(run.clone());
            r
        })
        .collect();
    Ok(Baseline::from_results(&results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{DType, Detector};

    fn res(ne2: i64, v: Verdict) -> CaseResult {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]);
        CaseResult::new(&c, v, Detector::Driver, format!("{v} at {ne2}"))
    }

    #[test]
    fn new_known_and_fixed_are_told_apart() {
        let old = vec![
            res(65536, Verdict::LaunchError),
            res(70000, Verdict::LaunchError),
            res(1, Verdict::Pass),
        ];
        let baseline = Baseline::from_results(&old);
        assert_eq!(baseline.entries.len(), 2);
        let now = vec![
            res(65536, Verdict::LaunchError), // known, still failing
            res(70000, Verdict::Pass),        // known, fixed
            res(1, Verdict::WrongValues),     // new
        ];
        let g = gate(&baseline, &now);
        assert_eq!(g.new_failures.len(), 1);
        assert_eq!(g.new_failures[0].result.id, now[2].id);
        assert_eq!(g.new_failures[0].known_as, None);
        assert_eq!(g.still_failing_known.len(), 1);
        assert_eq!(g.still_failing_known[0].id, now[0].id);
        assert_eq!(g.fixed_known.len(), 1);
        assert_eq!(g.fixed_known[0].id, now[1].id);
        assert_eq!(g.exit_code(), 1);
        // Fixed alone fails too (the README's contract).
        let fixed_only = gate(
            &baseline,
            &[res(65536, Verdict::LaunchError), res(70000, Verdict::Pass)],
        );
        assert!(fixed_only.new_failures.is_empty());
        assert_eq!(fixed_only.exit_code(), 1);
        assert!(fixed_only
            .render()
            .contains("now pass: remove them from the baseline"));
        let text = g.render();
        assert!(text.starts_with("gate: FAIL"), "{text}");
        assert!(text.contains(&format!("NEW     {}", now[2].id)), "{text}");
        assert!(text.contains("kedge run --case '"), "{text}");
        assert!(text.contains(&format!("FIXED   {}", now[1].id)), "{text}");
    }

    #[test]
    fn github_annotations_name_new_and_fixed_failures() {
        let baseline = Baseline::from_results(&[
            res(65536, Verdict::LaunchError),
            res(70000, Verdict::LaunchError),
        ]);
        let mut new = res(1, Verdict::WrongValues);
        new.detail = "dst: NMSE 1e-2 > 1e-7, 50% off\nsecond line".into();
        let g = gate(
            &baseline,
            &[
                res(65536, Verdict::LaunchError),
                res(70000, Verdict::Pass),
                new,
            ],
        );
        let gh = g.render_github();
        let lines: Vec<&str> = gh.lines().collect();
        assert_eq!(lines.len(), 3, "{gh}");
        assert!(
            lines[0].starts_with(
                "::error title=kedge%3A new failure rms_norm/ggml f32 ne=[64%2C1%2C1%2C1] seed=1 (exact) wrong-values::wrong-values (driver, native): dst: NMSE 1e-2 > 1e-7, 50%25 off%0Asecond line%0Are-run: kedge run --case '"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("::error title=kedge%3A known failure now passes rms_norm/ggml f32 ne=[64%2C1%2C70000%2C1]"),
            "{}",
            lines[1]
        );
        assert!(
            lines[1].ends_with("remove it from the baseline"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("::notice title=kedge gate FAIL::gate: FAIL (1 new failure(s)"),
            "{}",
            lines[2]
        );
        // A gate that passes says so in one notice; no results is an error of its own.
        let ok = gate(&baseline, &[res(65536, Verdict::LaunchError)]);
        assert!(ok
            .render_github()
            .starts_with("::notice title=kedge gate PASS::gate: PASS"));
        let none = gate(&Baseline::default(), &[]).render_github();
        assert!(
            none.starts_with("::error title=kedge gate::no results"),
            "{none}"
        );
    }

    #[test]
    fn only_known_failures_pass_the_gate() {
        let now = vec![res(65536, Verdict::LaunchError), res(1, Verdict::Pass)];
        let g = gate(&Baseline::from_results(&now), &now);
        assert!(g.passed(), "{}", g.render());
        assert_eq!(g.exit_code(), 0);
        assert_eq!(g.not_failing, 1);
        // An empty baseline and one failure: exit 1.
        assert_eq!(gate(&Baseline::default(), &now).exit_code(), 1);
        // Unsupported and skipped never fail a gate.
        let g = gate(
            &Baseline::default(),
            &[res(2, Verdict::Unsupported), res(3, Verdict::Skipped)],
        );
        assert!(g.passed());
    }

    #[test]
    fn a_known_case_failing_differently_is_new() {
        let base = Baseline::from_results(&[res(65536, Verdict::LaunchError)]);
        let g = gate(&base, &[res(65536, Verdict::OobRead)]);
        assert_eq!(g.exit_code(), 1);
        assert_eq!(g.new_failures[0].known_as, Some(Verdict::LaunchError));
        assert!(g.render().contains("known as launch-error, now oob-read"));
    }

    #[test]
    fn known_but_absent_or_only_skipped_is_not_fixed() {
        let base = Baseline::from_results(&[
            res(65536, Verdict::LaunchError),
            res(70000, Verdict::LaunchError),
        ]);
        let g = gate(&base, &[res(70000, Verdict::Skipped)]);
        assert!(g.passed(), "{}", g.render());
        assert!(g.fixed_known.is_empty());
        assert_eq!(g.not_run_known.len(), 2);
    }

    #[test]
    fn baseline_file_round_trips_and_rejects_bad_lines() {
        let base =
            Baseline::from_results(&[res(65536, Verdict::LaunchError), res(1, Verdict::Pass)]);
        let text = base.to_jsonl();
        assert_eq!(text.lines().count(), 1);
        assert!(text.contains("\"verdict\":\"launch-error\""), "{text}");
        let p = Path::new("baseline.jsonl");
        let back = Baseline::parse(p, &format!("# known\n\n{text}")).unwrap();
        assert_eq!(back, base);
        // Without the case: id and verdict are enough.
        let id = res(65536, Verdict::Pass).id;
        let min = format!("{{\"id\":\"{id}\",\"verdict\":\"launch-error\"}}\n");
        assert_eq!(Baseline::parse(p, &min).unwrap().entries.len(), 1);
        let e = Baseline::parse(p, "{\"id\":\"x\"}")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("baseline.jsonl:1:"), "{e}");
        let e = Baseline::parse(p, "{\"id\":\"x\",\"verdict\":\"pass\"}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a failure"), "{e}");
        let two = format!("{min}{min}");
        assert!(matches!(
            Baseline::parse(p, &two),
            Err(GateError::Duplicate { line: 2, .. })
        ));
    }

    #[test]
    fn baseline_from_results_keeps_the_worst_verdict_of_a_case() {
        let mut native = res(5, Verdict::WrongValues);
        native.under = kedge_core::Under::Native;
        let mut mem = res(5, Verdict::OobRead);
        mem.under = kedge_core::Under::Tool(kedge_core::Tool::Memcheck);
        let both = [native.clone(), mem.clone()];
        let b = Baseline::from_results(&both);
        assert_eq!(b.entries[&native.id].verdict, Verdict::OobRead);
        // A baseline written from results passes those results.
        let g = gate(&b, &both);
        assert!(g.passed(), "{}", g.render());
        assert_eq!(g.still_failing_known.len(), 1);
        assert_eq!(
            g.still_failing_known[0].under,
            kedge_core::Under::Tool(kedge_core::Tool::Memcheck)
        );
    }

    #[test]
    fn a_case_that_failed_in_one_run_and_passed_in_another_is_intermittent() {
        // ssm_conv's read past its input faults natively only when the page after the
        // buffer is unmapped: the same build failed it in one run and passed it in the next.
        let fault = res(12288, Verdict::DeviceFault);
        let passed = res(12288, Verdict::Pass);
        let steady = res(65536, Verdict::LaunchError);
        let b = Baseline::from_results(&[fault.clone(), steady.clone(), passed.clone()]);
        assert!(b.entries[&fault.id].intermittent);
        assert!(!b.entries[&steady.id].intermittent);
        assert_eq!(b.entries[&fault.id].verdict, Verdict::DeviceFault);
        // The flag is written only where it is set, and read back.
        let text = b.to_jsonl();
        assert_eq!(text.matches("\"intermittent\":true").count(), 1, "{text}");
        assert!(!text.contains("\"intermittent\":false"), "{text}");
        assert_eq!(
            Baseline::parse(Path::new("b"), &text).unwrap_or_default(),
            b
        );

        // Its pass neither fails the gate nor asks to trim it; its known failure is known.
        let g = gate(&b, &[passed.clone(), steady.clone()]);
        assert!(g.passed(), "{}", g.render());
        assert!(g.fixed_known.is_empty());
        assert_eq!(g.intermittent_passing.len(), 1);
        let text = g.render();
        assert!(text.contains("1 known intermittent passing"), "{text}");
        let gh = g.render_github();
        assert!(!gh.contains("::error"), "{gh}");
        assert!(
            gh.contains("::notice title=kedge%3A intermittent failure passed"),
            "{gh}"
        );
        assert!(
            text.contains(&format!("INTERMITTENT {}", fault.id)),
            "{text}"
        );
        let g = gate(&b, &[fault.clone(), steady.clone()]);
        assert!(g.passed(), "{}", g.render());
        assert_eq!(g.still_failing_known.len(), 2);
        // Failing another way is new, and a steady known failure that passes still fails.
        let g = gate(&b, &[res(12288, Verdict::OobRead), steady.clone()]);
        assert_eq!(g.new_failures.len(), 1);
        assert_eq!(g.new_failures[0].known_as, Some(Verdict::DeviceFault));
        let g = gate(&b, &[passed.clone(), res(65536, Verdict::Pass)]);
        assert_eq!(g.fixed_known.len(), 1);
        assert!(!g.passed());

        // A pass under another tool says nothing about the native failure.
        let mut mem = res(12288, Verdict::Pass);
        mem.under = kedge_core::Under::Tool(kedge_core::Tool::Memcheck);
        let b2 = Baseline::from_results(&[fault.clone(), mem]);
        assert!(!b2.entries[&fault.id].intermittent);

        // An update from a run that passes it keeps it; one that fails it keeps the flag.
        let kept = Baseline::from_results(&[passed.clone(), steady.clone()])
            .keeping_intermittent(&b, &[passed.clone(), steady.clone()]);
        assert_eq!(kept.entries.get(&fault.id), b.entries.get(&fault.id));
        let refailed = Baseline::from_results(&[fault.clone(), steady.clone()])
            .keeping_intermittent(&b, &[fault.clone(), steady.clone()]);
        assert!(refailed.entries[&fault.id].intermittent);
        // One not run at all is dropped, as an update drops any known failure with no result.
        let unrun = Baseline::from_results(std::slice::from_ref(&steady))
            .keeping_intermittent(&b, std::slice::from_ref(&steady));
        assert!(!unrun.entries.contains_key(&fault.id));
    }

    #[test]
    fn no_results_a_torn_file_or_a_missing_case_fail_the_gate() {
        let g = gate(&Baseline::default(), &[]);
        assert_eq!(g.exit_code(), 1);
        assert!(g.render().contains("no results"), "{}", g.render());
        let ok = vec![res(1, Verdict::Pass)];
        let torn = TornLine {
            path: "r.jsonl".into(),
            line: 2,
            msg: "EOF".into(),
        };
        let g = gate(&Baseline::default(), &ok).with_torn(vec![torn]);
        assert_eq!(g.exit_code(), 1);
        assert!(g.render().contains("r.jsonl:2"), "{}", g.render());
        let expected = vec![ok[0].case.clone(), res(2, Verdict::Pass).case];
        let g = gate(&Baseline::default(), &ok).expecting(&expected, &ok);
        assert_eq!(g.exit_code(), 1);
        assert_eq!(g.missing.len(), 1);
        assert!(g.render().contains("1 of 2 expected cases have no result"));
        assert!(g
            .render()
            .contains(&format!("MISSING {}", expected[1].id())));
        let g = gate(&Baseline::default(), &ok).expecting(&expected[..1], &ok);
        assert!(g.passed(), "{}", g.render());
    }
}
