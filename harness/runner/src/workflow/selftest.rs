//! `kedge selftest`: calibration for kedge itself.
//!
//! Planning: every planted impl (`ImplRole::Planted { bug, expect }`) runs its op's smoke
//! cases in the allocation mode or under the sanitizer each expected detector needs (guard
//! page: `guard` and `guard-front` natively; canary: `canary` natively; memcheck, initcheck,
//! racecheck, synccheck: `exact` under that tool; reference and poison: `exact` natively;
//! launch contract: on the CPU). Every fixed impl runs its smoke and boundary cases natively
//! in `exact` and `guard`, and its smoke cases under each sanitizer tool asked for. The
//! incident replicas (corpora/incidents.jsonl) run natively and on the CPU.
//!
//! Judging: a planted bug is FOUND for a detector when a run planned for that detector names
//! it (as the verdict's detector, in `also`, or as a sanitizer finding's tool); MISSED when
//! those runs came back and none did; NOT RUN when they never came back. A fixed impl PASSES
//! when every result is `pass` (or a clear `unsupported` refusal). Missed rows stay in the
//! table: "not detected" is a result.
//!
//! Execution is the caller's: `SelftestPlan::groups` gives the cases per run kind (CPU,
//! native, each tool), and `judge` takes whatever results came back.

use crate::select::{Expectation, Expected, MaxElements};
use kedge_core::{
    AllocMode, Case, CaseResult, Detector, ImplRole, LimitsProfile, Registry, Tool, Under, Verdict,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// The tools fixed impls run under unless told otherwise.
pub const DEFAULT_TOOLS: [Tool; 3] = [Tool::Memcheck, Tool::Initcheck, Tool::Racecheck];

/// Where a detector can see a bug: how to run and in which allocation mode.
fn runs_for_detector(d: Detector) -> Vec<(Under, AllocMode)> {
    match d {
        Detector::GuardPage => vec![
            (Under::Native, AllocMode::Guard),
            (Under::Native, AllocMode::GuardFront),
        ],
        Detector::Canary => vec![(Under::Native, AllocMode::Canary)],
        Detector::Memcheck | Detector::Initcheck | Detector::Racecheck | Detector::Synccheck => {
            Tool::of_detector(d)
                .map(|t| vec![(Under::Tool(t), AllocMode::Exact)])
                .unwrap_or_default()
        }
        Detector::LaunchContract | Detector::AllocContract => vec![(Under::Cpu, AllocMode::Exact)],
        Detector::Reference
        | Detector::Poison
        | Detector::Driver
        | Detector::DeviceSync
        | Detector::Supervisor
        | Detector::Impl
        | Detector::Abort
        | Detector::None => vec![(Under::Native, AllocMode::Exact)],
    }
}

/// Why a run is in the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
enum Purpose {
    Planted {
        op: String,
        imp: String,
        bug: String,
        expect: Detector,
    },
    Fixed {
        op: String,
        imp: String,
    },
    Incident {
        incident: String,
        expect: Expected,
    },
}

#[derive(Debug, Clone, Serialize)]
struct PlannedRun {
    under: Under,
    case: Case,
    purpose: Purpose,
}

/// What the selftest plan covers.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Sanitizer tools fixed impls are also run under (their smoke cases).
    pub fixed_tools: Vec<Tool>,
    /// Only these ops (empty: all).
    pub ops: Vec<String>,
    /// The seed of every planned case.
    pub seed: u64,
    /// Fixed impls' cases whose largest tensor is over this are left out (the sweeps run
    /// them); planted impls keep theirs, since some bugs live only past a size.
    pub max_fixed_elements: MaxElements,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            fixed_tools: vec![Tool::Memcheck],
            ops: Vec::new(),
            seed: 1,
            max_fixed_elements: MaxElements::NONE,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct SelftestPlan {
    runs: Vec<PlannedRun>,
    #[serde(skip)]
    max_fixed_elements: MaxElements,
    /// Incidents whose op is not in the registry (a row each, never run).
    missing_ops: Vec<(String, String)>,
    /// Cases an op declared that it then rejects (a broken declaration; reported).
    rejected: Vec<String>,
}

/// A case of an op's first dtype for a selftest run.
fn case_of(
    op: &dyn kedge_core::Op,
    imp: &str,
    ne: kedge_core::Ne,
    params: &kedge_core::Params,
    seed: u64,
) -> Case {
    let mut c = Case::new(op.name(), imp, op.dtypes()[0], ne);
    c.params = params.clone();
    c.seed = seed;
    c
}

impl SelftestPlan {
    /// Build the plan. `limits`: the profile boundary cases are generated for (the live
    /// device's on a GPU).
    fn build(
        reg: &Registry,
        limits: &LimitsProfile,
        incidents: &[Expectation],
        opts: &PlanOptions,
    ) -> SelftestPlan {
        let mut plan = SelftestPlan {
            runs: Vec::new(),
            max_fixed_elements: opts.max_fixed_elements,
            missing_ops: Vec::new(),
            rejected: Vec::new(),
        };
        let op_ok = |name: &str| opts.ops.is_empty() || opts.ops.iter().any(|o| o == name);
        for op in reg.ops() {
            if !op_ok(op.name()) {
                continue;
            }
            for imp in reg.impls_of(*op) {
                match imp.role() {
                    ImplRole::Planted { bug, expect } => {
                        plan.push_planted(reg, limits, *op, imp, (bug, expect), opts.seed)
                    }
                    ImplRole::Fixed => plan.push_fixed(reg, limits, *op, imp, opts),
                    // Upstream launch paths are judged by the incidents; external impls by their own sweeps.
                    ImplRole::Upstream | ImplRole::External => {}
                }
            }
        }
        for e in incidents.iter().filter(|e| op_ok(&e.case.op)) {
            plan.push_incident(reg, e);
        }
        plan
    }

    /// A planted impl: the smoke shapes, plus the boundaries declared for this impl alone (a
    /// bug planted past a size shows only there), each where every expected detector looks.
    fn push_planted(
        &mut self,
        reg: &Registry,
        limits: &LimitsProfile,
        op: &dyn kedge_core::Op,
        imp: &dyn kedge_core::contract::imp::Impl,
        (bug, expect): (&str, &[Detector]),
        seed: u64,
    ) {
        let dtype = op.dtypes()[0];
        let mut shapes = op.smoke();
        for b in op.boundaries(limits) {
            if !b.impls.contains(&imp.name()) {
                continue;
            }
            for c in b.cases(op.name(), imp.name(), dtype) {
                shapes.push((c.ne, c.params));
            }
        }
        for (ne, params) in shapes {
            for &d in expect {
                for (under, alloc) in runs_for_detector(d) {
                    self.push(
                        reg,
                        under,
                        case_of(op, imp.name(), ne, &params, seed).with_alloc(alloc),
                        Purpose::Planted {
                            op: op.name().into(),
                            imp: imp.name().into(),
                            bug: bug.into(),
                            expect: d,
                        },
                    );
                }
            }
        }
    }

    /// A fixed impl: the smoke shapes and every boundary natively in exact and guard mode, the
    /// smoke shapes under each fixed tool.
    fn push_fixed(
        &mut self,
        reg: &Registry,
        limits: &LimitsProfile,
        op: &dyn kedge_core::Op,
        imp: &dyn kedge_core::contract::imp::Impl,
        opts: &PlanOptions,
    ) {
        let dtype = op.dtypes()[0];
        let purpose = Purpose::Fixed {
            op: op.name().into(),
            imp: imp.name().into(),
        };
        let mut shapes = op.smoke();
        for b in crate::select::suite::boundaries(op, limits, dtype) {
            for c in b.cases(op.name(), imp.name(), dtype) {
                shapes.push((c.ne, c.params));
            }
        }
        for (ne, params) in &shapes {
            for alloc in [AllocMode::Exact, AllocMode::Guard] {
                let c = case_of(op, imp.name(), *ne, params, opts.seed).with_alloc(alloc);
                self.push(reg, Under::Native, c, purpose.clone());
            }
        }
        for (ne, params) in op.smoke() {
            for &t in &opts.fixed_tools {
                let c = case_of(op, imp.name(), ne, &params, opts.seed);
                self.push(reg, Under::Tool(t), c, purpose.clone());
            }
        }
    }

    /// An incident natively, and on the CPU side where it says what the CPU sees; an op this
    /// build does not have is named.
    fn push_incident(&mut self, reg: &Registry, e: &Expectation) {
        if reg.op(&e.case.op).is_err() {
            self.missing_ops
                .push((e.incident.clone(), e.case.op.clone()));
            return;
        }
        let purpose = |expect: &Expected| Purpose::Incident {
            incident: e.incident.clone(),
            expect: expect.clone(),
        };
        self.push(reg, Under::Native, e.case.clone(), purpose(&e.expect));
        if let Some(cpu) = &e.expect_cpu {
            self.push(reg, Under::Cpu, e.case.clone(), purpose(cpu));
        }
    }

    fn push(&mut self, reg: &Registry, under: Under, case: Case, purpose: Purpose) {
        if matches!(purpose, Purpose::Fixed { .. }) && !self.max_fixed_elements.allows(reg, &case) {
            return;
        }
        match reg.validate(&case) {
            Ok(case) => self.runs.push(PlannedRun {
                under,
                case,
                purpose,
            }),
            Err(e) => self.rejected.push(format!("{}: {e}", case.label())),
        }
    }

    /// The cases to run, per run kind, each case once.
    fn groups(&self) -> BTreeMap<Under, Vec<Case>> {
        let mut out: BTreeMap<Under, Vec<Case>> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for r in &self.runs {
            if seen.insert((r.under, r.case.id())) {
                out.entry(r.under).or_default().push(r.case.clone());
            }
        }
        out
    }
}

/// Every detector a result names: its own, `also`, and each sanitizer finding's tool.
fn detectors_seen(r: &CaseResult) -> BTreeSet<Detector> {
    let mut s = BTreeSet::new();
    if r.verdict.is_failure() {
        s.insert(r.detector);
    }
    s.extend(r.also.iter().copied());
    s.extend(r.findings.iter().map(|f| f.tool));
    s.remove(&Detector::None);
    s
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Status {
    Found,
    Missed,
    NotRun,
    Pass,
    Fail,
    /// An incident's op is not in this build.
    NotInRegistry,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Found => "FOUND",
            Status::Missed => "MISSED",
            Status::NotRun => "NOT RUN",
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotInRegistry => "NOT IN REGISTRY",
        }
    }
    /// Does this row fail the selftest?
    fn is_bad(self) -> bool {
        matches!(self, Status::Missed | Status::Fail)
    }
}

#[derive(Debug, Clone, Serialize)]
struct PlantedRow {
    op: String,
    imp: String,
    bug: String,
    /// Each expected detector and whether a run planned for it saw the bug.
    expect: Vec<(Detector, Status)>,
    /// Every detector that saw something in any of this impl's runs.
    saw: BTreeSet<Detector>,
    /// One case that showed it, per expected detector that found it.
    evidence: Vec<String>,
    status: Status,
}

#[derive(Debug, Clone, Serialize)]
struct FixedRow {
    op: String,
    imp: String,
    runs: usize,
    failures: Vec<String>,
    status: Status,
}

#[derive(Debug, Clone, Serialize)]
struct IncidentRow {
    incident: String,
    case: String,
    under: String,
    expect: Option<Expected>,
    got: Option<Expected>,
    status: Status,
}

/// The selftest's verdict, row by row: what `render` prints as selftest.md's tables.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// A row per planted impl: each expected detector FOUND, MISSED or NOT RUN.
    planted: Vec<PlantedRow>,
    /// A row per fixed impl: PASS or FAIL.
    fixed: Vec<FixedRow>,
    /// A row per incident replica and way it ran: what it gave against what it should.
    incidents: Vec<IncidentRow>,
    /// Results that no planned run asked for (ignored, counted).
    unmatched_results: usize,
}

impl Table {
    /// Every planted bug found, every fixed impl passing, every incident as expected
    /// (NOT RUN rows do not fail; `complete` says whether everything ran).
    fn ok(&self) -> bool {
        self.planted.iter().all(|r| !r.status.is_bad())
            && self.fixed.iter().all(|r| !r.status.is_bad())
            && self.incidents.iter().all(|r| !r.status.is_bad())
    }
    fn complete(&self) -> bool {
        self.planted.iter().all(|r| r.status != Status::NotRun)
            && self.fixed.iter().all(|r| r.status != Status::NotRun)
            && self.incidents.iter().all(|r| r.status != Status::NotRun)
    }
}

/// Judge the results that came back against the plan.
fn judge(plan: &SelftestPlan, results: &[CaseResult]) -> Table {
    let mut by_key: HashMap<(Under, String), &CaseResult> = HashMap::new();
    for r in results {
        by_key.insert((r.under, r.case.id()), r);
    }
    let planned: std::collections::HashSet<(Under, String)> =
        plan.runs.iter().map(|r| (r.under, r.case.id())).collect();
    let unmatched_results = by_key.keys().filter(|k| !planned.contains(*k)).count();

    Table {
        planted: planted_rows(plan, &by_key),
        fixed: fixed_rows(plan, &by_key),
        incidents: incident_rows(plan, &by_key),
        unmatched_results,
    }
}

/// Results by (how it ran, case id).
type ByKey<'a> = HashMap<(Under, String), &'a CaseResult>;

/// The result of a planned run, if it has one.
fn lookup<'a>(by_key: &ByKey<'a>, run: &PlannedRun) -> Option<&'a CaseResult> {
    by_key.get(&(run.under, run.case.id())).copied()
}

/// A row per planted impl, in plan order: which of its expected detectors saw it.
fn planted_rows(plan: &SelftestPlan, by_key: &ByKey<'_>) -> Vec<PlantedRow> {
    let mut planted: Vec<PlantedRow> = Vec::new();
    for run in &plan.runs {
        let Purpose::Planted {
            op,
            imp,
            bug,
            expect,
        } = &run.purpose
        else {
            continue;
        };
        let idx = match planted.iter().position(|r| &r.op == op && &r.imp == imp) {
            Some(i) => i,
            None => {
                planted.push(PlantedRow {
                    op: op.clone(),
                    imp: imp.clone(),
                    bug: bug.clone(),
                    expect: Vec::new(),
                    saw: BTreeSet::new(),
                    evidence: Vec::new(),
                    status: Status::NotRun,
                });
                planted.len() - 1
            }
        };
        let row = &mut planted[idx];
        let pos = match row.expect.iter().position(|(d, _)| d == expect) {
            Some(p) => p,
            None => {
                row.expect.push((*expect, Status::NotRun));
                row.expect.len() - 1
            }
        };
        if let Some(r) = lookup(by_key, run) {
            let seen = detectors_seen(r);
            row.saw.extend(seen.iter().copied());
            let st = &mut row.expect[pos].1;
            if seen.contains(expect) {
                if *st != Status::Found {
                    row.evidence.push(format!(
                        "{expect}: {} under {}: {} ({})",
                        r.case.label(),
                        r.under,
                        r.verdict,
                        r.detector
                    ));
                }
                *st = Status::Found;
            } else if *st == Status::NotRun {
                *st = Status::Missed;
            }
        }
    }
    for row in &mut planted {
        row.status = if row.expect.iter().all(|(_, s)| *s == Status::Found) {
            Status::Found
        } else if row.expect.iter().any(|(_, s)| *s == Status::Missed) {
            Status::Missed
        } else {
            Status::NotRun
        };
    }

    planted
}

/// A row per fixed impl: every run of it passes (or is unsupported).
fn fixed_rows(plan: &SelftestPlan, by_key: &ByKey<'_>) -> Vec<FixedRow> {
    let mut fixed: Vec<FixedRow> = Vec::new();
    for run in &plan.runs {
        let Purpose::Fixed { op, imp } = &run.purpose else {
            continue;
        };
        let idx = match fixed.iter().position(|r| &r.op == op && &r.imp == imp) {
            Some(i) => i,
            None => {
                fixed.push(FixedRow {
                    op: op.clone(),
                    imp: imp.clone(),
                    runs: 0,
                    failures: Vec::new(),
                    status: Status::NotRun,
                });
                fixed.len() - 1
            }
        };
        let row = &mut fixed[idx];
        if let Some(r) = lookup(by_key, run) {
            row.runs += 1;
            let ok = matches!(r.verdict, Verdict::Pass | Verdict::Unsupported);
            if !ok {
                row.failures.push(format!(
                    "{} under {}: {} ({}): {}",
                    r.case.label(),
                    r.under,
                    r.verdict,
                    r.detector,
                    r.detail
                ));
            }
        }
    }
    for row in &mut fixed {
        row.status = if !row.failures.is_empty() {
            Status::Fail
        } else if row.runs == 0 {
            Status::NotRun
        } else {
            Status::Pass
        };
    }

    fixed
}

/// A row per incident: its verdict and detector as expected, or not run, or not in the
/// registry.
fn incident_rows(plan: &SelftestPlan, by_key: &ByKey<'_>) -> Vec<IncidentRow> {
    let mut incidents: Vec<IncidentRow> = Vec::new();
    for run in &plan.runs {
        let Purpose::Incident { incident, expect } = &run.purpose else {
            continue;
        };
        let got = lookup(by_key, run).map(|r| Expected {
            verdict: r.verdict,
            detector: r.detector,
        });
        let status = match &got {
            None => Status::NotRun,
            Some(g) if g == expect => Status::Pass,
            Some(_) => Status::Fail,
        };
        incidents.push(IncidentRow {
            incident: incident.clone(),
            case: run.case.label(),
            under: run.under.name().into(),
            expect: Some(expect.clone()),
            got,
            status,
        });
    }
    for (incident, op) in &plan.missing_ops {
        incidents.push(IncidentRow {
            incident: incident.clone(),
            case: format!("op {op}"),
            under: "-".into(),
            expect: None,
            got: None,
            status: Status::NotInRegistry,
        });
    }
    incidents
}

fn dets(d: impl IntoIterator<Item = Detector>) -> String {
    let v: Vec<&str> = d.into_iter().map(|d| d.name()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn expected(e: &Option<Expected>) -> String {
    match e {
        Some(e) => format!("{} ({})", e.verdict, e.detector),
        None => "-".into(),
    }
}

/// The table as Markdown.
fn render(t: &Table) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Planted bugs");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| op | impl | bug | expected detectors | detectors that saw it | result |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for r in &t.planted {
        let exp: Vec<String> = r
            .expect
            .iter()
            .map(|(d, st)| format!("{d}: {}", st.name()))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r.op,
            r.imp,
            r.bug,
            exp.join(", "),
            dets(r.saw.iter().copied()),
            r.status.name()
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "## Fixed impls (must pass)");
    let _ = writeln!(s);
    let _ = writeln!(s, "| op | impl | runs | failures | result |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in &t.fixed {
        let f = match r.failures.first() {
            None => "0".to_string(),
            Some(first) => format!("{} (first: {first})", r.failures.len()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.op,
            r.imp,
            r.runs,
            f,
            r.status.name()
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "## Incident replicas");
    let _ = writeln!(s);
    let _ = writeln!(s, "| incident | case | run | expected | got | result |");
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for r in &t.incidents {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r.incident,
            r.case,
            r.under,
            expected(&r.expect),
            expected(&r.got),
            r.status.name()
        );
    }
    let evidence: Vec<&String> = t.planted.iter().flat_map(|r| r.evidence.iter()).collect();
    if !evidence.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "## Evidence (one case per detector that found its bug)");
        let _ = writeln!(s);
        for e in evidence {
            let _ = writeln!(s, "- {e}");
        }
    }
    s
}

/// What `kedge selftest` runs.
#[derive(Debug, Clone)]
pub struct SelftestRequest {
    /// What the plan covers.
    pub opts: PlanOptions,
    /// The profile boundary cases are generated for without a GPU.
    pub profile: LimitsProfile,
    /// The CPU part only.
    pub cpu: bool,
    /// The GPU to run on.
    pub device: u32,
    /// Worker options, and where events go.
    pub engine: crate::run::EngineOptions,
    /// The output directory: results.jsonl, selftest.md, workers' logs.
    pub out: std::path::PathBuf,
    /// What to do with a results.jsonl already there: refuse, resume it, or start over.
    pub mode: crate::results::OutMode,
    /// The incidents corpus (default: the built-in one).
    pub incidents: Option<std::path::PathBuf>,
    /// The kedge binary workers start from (default: this process's).
    pub exe: Option<std::path::PathBuf>,
}

/// How a selftest ended.
#[derive(Debug, Clone)]
pub struct SelftestOutcome {
    /// Every row, judged.
    pub table: Table,
    /// selftest.md's text.
    pub text: String,
    /// 1 when a planted bug was missed or a fixed impl or incident failed; else 4 when a
    /// part could not run here (no GPU, a tool missing); else 0.
    pub status: crate::errors::Status,
}

/// Plan, run what can run here (the CPU part always; the native and sanitized parts on a
/// GPU), and judge what came back.
pub fn selftest(req: &SelftestRequest) -> Result<SelftestOutcome, crate::Error> {
    use crate::errors::Status as Ending;
    use crate::results::{finished_ids, OutDir, OutMode, ResultSet};
    use crate::run::RunEngine;
    let out = OutDir::open(&req.out)?
        .reading(req.incidents.as_deref())
        .writes(&["results.jsonl", "selftest.md"])?;
    out.check_results(req.mode)?;
    out.subdir("workers")?;
    let reg = kedge_ops::registry();
    let incidents = crate::select::Corpus::incidents(req.incidents.as_deref())?.expectations()?;
    let (engine, limits) = super::engine_or_profile(super::on_gpu(req.cpu), &req.profile, || {
        let mut b = RunEngine::builder("selftest")
            .options(req.engine.clone())
            .work_dir(out.join("workers"))
            .gpus(crate::run::Gpus::One(req.device));
        if let Some(e) = &req.exe {
            b = b.exe(e);
        }
        Ok(b.build()?)
    })?;
    let gpu = engine.is_some();
    let plan = SelftestPlan::build(&reg, &limits, &incidents, &req.opts);
    for r in &plan.rejected {
        req.engine
            .events
            .emit(crate::events::Event::DeclaredRejected {
                detail: r.to_string(),
            });
    }
    let mut writer = out.results(req.mode)?;
    let results_path = out.results_path();
    let mut not_run: Vec<String> = Vec::new();
    for (under, cases) in plan.groups() {
        let (done, _) = if req.mode == OutMode::Resume {
            finished_ids(&results_path, under)?
        } else {
            Default::default()
        };
        let cases: Vec<Case> = cases
            .into_iter()
            .filter(|c| !done.contains(&c.id()))
            .collect();
        match executor_for(under, engine.as_ref(), &reg, &limits, &req.engine.events)? {
            Ok(mut exec) => {
                exec.run(&cases, &mut |r| writer.write(&r))?;
            }
            Err(why) => not_run.push(format!("{} {under} cases ({why})", cases.len())),
        }
    }
    drop(writer);
    let results = ResultSet::load(std::slice::from_ref(&results_path))?.results;
    let table = judge(&plan, &results);
    let profile = (!gpu).then_some(limits.name.as_str());
    let text = report_text(&limits.device, profile, &results, &plan, &not_run, &table);
    out.write("selftest.md", &text)?;
    req.engine.events.finish()?;
    let status = if !table.ok() {
        Ending::Failures
    } else if !table.complete() {
        Ending::GpuSkipped
    } else {
        Ending::Ok
    };
    Ok(SelftestOutcome {
        table,
        text,
        status,
    })
}

/// What runs a group of the plan: the CPU side on any machine, the GPU natively or under a
/// tool when there is one. `Err(why)` when it cannot run here (no GPU, the tool missing): the
/// group is named as not run, and the selftest goes on.
fn executor_for<'a>(
    under: Under,
    engine: Option<&'a crate::run::RunEngine>,
    reg: &'a kedge_core::Registry,
    limits: &LimitsProfile,
    events: &crate::events::Events,
) -> Result<Result<Box<dyn crate::run::Executor + 'a>, String>, crate::Error> {
    use crate::run::{CpuExecutor, EngineError};
    use crate::sanitizer::SanitizerError;
    Ok(match (under, engine) {
        (Under::Cpu, _) => {
            let mut cpu = CpuExecutor::new(reg, limits.clone()).with_references(u64::MAX);
            cpu.events = events.clone();
            Ok(Box::new(cpu))
        }
        (_, None) => Err("no GPU".into()),
        (Under::Native, Some(e)) => Ok(Box::new(e.executor(None)?)),
        (Under::Tool(t), Some(e)) => match e.executor(Some(t)) {
            Ok(x) => Ok(Box::new(x)),
            Err(err @ EngineError::Sanitizer(SanitizerError::NotFound { .. })) => {
                Err(err.to_string())
            }
            Err(err) => return Err(err.into()),
        },
    })
}

/// `selftest.md`: the device (or the profile, without a GPU), the runs, what did not run and
/// the table.
fn report_text(
    device: &str,
    profile: Option<&str>,
    results: &[CaseResult],
    plan: &SelftestPlan,
    not_run: &[String],
    table: &Table,
) -> String {
    format!(
        "# kedge selftest\n\ndevice: {device}{}\nruns: {} results ({} planned case runs)\n{}\n{}",
        profile
            .map(|p| format!(" (profile {p}; no GPU used)"))
            .unwrap_or_default(),
        results.len(),
        plan.runs.len(),
        if not_run.is_empty() {
            String::new()
        } else {
            format!("not run: {}\n", not_run.join("; "))
        },
        render(table)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::judge::result::Finding;

    fn plan() -> SelftestPlan {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        SelftestPlan::build(&reg, &h200, &[], &PlanOptions::default())
    }

    fn pass(r: &PlannedRun) -> CaseResult {
        let mut c = CaseResult::new(&r.case, Verdict::Pass, Detector::None, "ok");
        c.under = r.under;
        c
    }

    fn runs_of(p: &SelftestPlan, imp: &str) -> Vec<(Under, AllocMode)> {
        let mut v: Vec<_> = p
            .runs
            .iter()
            .filter(|r| r.case.imp == imp)
            .map(|r| (r.under, r.case.alloc))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    const MEMCHECK: Under = Under::Tool(Tool::Memcheck);

    #[test]
    fn planted_runs_go_where_their_detectors_look() {
        let p = plan();
        // rms_norm's planted read past the end: guard pages (both ends) and memcheck.
        assert_eq!(
            runs_of(&p, "planted-read-past-end"),
            vec![
                (Under::Native, AllocMode::Guard),
                (Under::Native, AllocMode::GuardFront),
                (MEMCHECK, AllocMode::Exact),
            ]
        );
        // Fixed impls: natively in exact and guard, and under memcheck by default.
        assert_eq!(
            runs_of(&p, "clamped"),
            vec![
                (Under::Native, AllocMode::Exact),
                (Under::Native, AllocMode::Guard),
                (MEMCHECK, AllocMode::Exact),
            ]
        );
        // The fix runs past the grid limit (a generated boundary) too.
        assert!(p
            .runs
            .iter()
            .any(|r| r.case.imp == "clamped" && r.case.ne[2] == 65536));
        // The upstream launch (ggml) is not a calibration impl.
        assert!(runs_of(&p, "ggml").is_empty());
        assert!(p.rejected.is_empty(), "{:?}", p.rejected);
        // Every case appears once per run kind.
        for cases in p.groups().values() {
            let mut ids: Vec<_> = cases.iter().map(|c| c.id()).collect();
            let n = ids.len();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), n);
        }
        assert_eq!(
            runs_for_detector(Detector::Initcheck),
            vec![(Under::Tool(Tool::Initcheck), AllocMode::Exact)]
        );
        assert_eq!(
            runs_for_detector(Detector::Canary),
            vec![(Under::Native, AllocMode::Canary)]
        );
        assert_eq!(
            runs_for_detector(Detector::LaunchContract),
            vec![(Under::Cpu, AllocMode::Exact)]
        );
    }

    #[test]
    fn fixed_cases_over_the_element_limit_are_left_out() {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let capped = SelftestPlan::build(
            &reg,
            &h200,
            &[],
            &PlanOptions {
                max_fixed_elements: MaxElements::from_flag(Some(1 << 28), None),
                ..PlanOptions::default()
            },
        );
        let all = plan();
        assert!(capped.runs.len() < all.runs.len());
        assert!(capped.runs.iter().all(|r| {
            !matches!(r.purpose, Purpose::Fixed { .. })
                || crate::select::largest_tensor_elements(&reg, &r.case) <= 1 << 28
        }));
    }

    /// A plan of the calibration zoo's planted impls, each run where its detectors look.
    fn zoo_plan() -> SelftestPlan {
        let planted: [(&str, &[Detector]); 8] = [
            (
                "planted-read-past-row-end-last-block",
                &[Detector::GuardPage, Detector::Memcheck],
            ),
            (
                "planted-read-before-start",
                &[Detector::GuardPage, Detector::Memcheck],
            ),
            ("planted-uninit-global-read", &[Detector::Initcheck]),
            ("planted-missing-syncthreads", &[Detector::Racecheck]),
            ("planted-unwritten-tail", &[Detector::Poison]),
            ("planted-wrong-at-one-size", &[Detector::Reference]),
            (
                "planted-write-past-end",
                &[Detector::Canary, Detector::Memcheck],
            ),
            (
                "planted-read-past-end",
                &[Detector::GuardPage, Detector::Memcheck],
            ),
        ];
        let mut runs = Vec::new();
        for (imp, expect) in planted {
            for ne0 in [64, 1000] {
                for &d in expect {
                    for (under, alloc) in runs_for_detector(d) {
                        runs.push(PlannedRun {
                            under,
                            case: Case::new(
                                "zoo_rows",
                                imp,
                                kedge_core::DType::F32,
                                [ne0, 3, 1, 1],
                            )
                            .with_alloc(alloc),
                            purpose: Purpose::Planted {
                                op: "zoo_rows".into(),
                                imp: imp.into(),
                                bug: format!("{imp} bug"),
                                expect: d,
                            },
                        });
                    }
                }
            }
        }
        for (imp, ne2) in [("clamped", 65535), ("clamped", 65536), ("clean", 1)] {
            for alloc in [AllocMode::Exact, AllocMode::Guard] {
                runs.push(PlannedRun {
                    under: Under::Native,
                    case: Case::new("zoo_rows", imp, kedge_core::DType::F32, [64, 1, ne2, 1])
                        .with_alloc(alloc),
                    purpose: Purpose::Fixed {
                        op: "zoo_rows".into(),
                        imp: imp.into(),
                    },
                });
            }
        }
        SelftestPlan {
            runs,
            max_fixed_elements: MaxElements::NONE,
            missing_ops: Vec::new(),
            rejected: Vec::new(),
        }
    }

    /// Synthetic results: each planted impl is seen by exactly what a real run would report
    /// for its bug, except one memcheck run that came back clean.
    #[test]
    fn judging_finds_misses_and_failures_honestly() {
        let p = zoo_plan();
        let mut results = Vec::new();
        for r in &p.runs {
            let mut res = pass(r);
            let tool_finding = |tool: Detector, verdict: Verdict| Finding {
                tool,
                verdict,
                kind: None,
                text: "synthetic".into(),
                kernel: None,
                size: Some(4),
                address: None,
                thread: None,
                block: None,
                allocation: None,
                count: 1,
            };
            match (r.case.imp.as_str(), r.under, r.case.alloc) {
                ("planted-read-past-row-end-last-block", Under::Native, AllocMode::Guard) => {
                    res.verdict = Verdict::DeviceFault;
                    res.detector = Detector::GuardPage;
                }
                ("planted-read-before-start", Under::Native, AllocMode::GuardFront) => {
                    res.verdict = Verdict::DeviceFault;
                    res.detector = Detector::GuardPage;
                }
                ("planted-read-past-row-end-last-block", MEMCHECK, _) => {
                    res.findings = vec![tool_finding(Detector::Memcheck, Verdict::OobRead)];
                    res.verdict = Verdict::OobRead;
                    res.detector = Detector::Memcheck;
                }
                // read-before-start under memcheck: comes back clean (a MISS).
                ("planted-uninit-global-read", Under::Tool(Tool::Initcheck), _) => {
                    res.findings = vec![tool_finding(Detector::Initcheck, Verdict::UninitRead)];
                    res.verdict = Verdict::UninitRead;
                    res.detector = Detector::Initcheck;
                }
                ("planted-missing-syncthreads", Under::Tool(Tool::Racecheck), _) => {
                    res.findings = vec![tool_finding(Detector::Racecheck, Verdict::Race)];
                    res.verdict = Verdict::Race;
                    res.detector = Detector::Racecheck;
                }
                ("planted-unwritten-tail", Under::Native, _) => {
                    res.verdict = Verdict::UnwrittenOutput;
                    res.detector = Detector::Poison;
                }
                ("planted-wrong-at-one-size", Under::Native, _) if r.case.ne[0] == 1000 => {
                    res.verdict = Verdict::WrongValues;
                    res.detector = Detector::Reference;
                }
                ("planted-write-past-end", Under::Native, AllocMode::Canary) => {
                    res.verdict = Verdict::OobWrite;
                    res.detector = Detector::Canary;
                }
                ("planted-write-past-end", MEMCHECK, _) => {
                    res.findings = vec![tool_finding(Detector::Memcheck, Verdict::OobWrite)];
                    res.verdict = Verdict::OobWrite;
                    res.detector = Detector::Memcheck;
                }
                ("planted-read-past-end", Under::Native, AllocMode::Guard) => {
                    res.verdict = Verdict::DeviceFault;
                    res.detector = Detector::GuardPage;
                }
                // The planted read under memcheck: not returned at all (NOT RUN).
                ("planted-read-past-end", Under::Tool(_), _) => continue,
                // One fixed-impl boundary case fails.
                ("clamped", Under::Native, AllocMode::Guard) if r.case.ne[2] == 65536 => {
                    res.verdict = Verdict::DeviceFault;
                    res.detector = Detector::GuardPage;
                }
                _ => {}
            }
            results.push(res);
        }
        let t = judge(&p, &results);
        let row = |imp: &str| t.planted.iter().find(|r| r.imp == imp).unwrap();
        assert_eq!(
            row("planted-read-past-row-end-last-block").status,
            Status::Found
        );
        assert_eq!(row("planted-uninit-global-read").status, Status::Found);
        assert_eq!(row("planted-missing-syncthreads").status, Status::Found);
        assert_eq!(row("planted-unwritten-tail").status, Status::Found);
        assert_eq!(row("planted-wrong-at-one-size").status, Status::Found);
        assert_eq!(row("planted-write-past-end").status, Status::Found);
        // Guard page saw it, memcheck did not: the row is MISSED and says which.
        let before = row("planted-read-before-start");
        assert_eq!(before.status, Status::Missed);
        assert_eq!(
            before.expect,
            vec![
                (Detector::GuardPage, Status::Found),
                (Detector::Memcheck, Status::Missed)
            ]
        );
        assert_eq!(before.saw, [Detector::GuardPage].into_iter().collect());
        // Memcheck never came back for the planted read: NOT RUN, not MISSED.
        let rp = row("planted-read-past-end");
        assert_eq!(
            rp.expect,
            vec![
                (Detector::GuardPage, Status::Found),
                (Detector::Memcheck, Status::NotRun)
            ]
        );
        assert_eq!(rp.status, Status::NotRun);
        let clamped = t.fixed.iter().find(|r| r.imp == "clamped").unwrap();
        assert_eq!(clamped.status, Status::Fail);
        assert_eq!(clamped.failures.len(), 1);
        let clean = t.fixed.iter().find(|r| r.imp == "clean").unwrap();
        assert_eq!(clean.status, Status::Pass);
        assert!(!t.ok());
        let text = render(&t);
        assert!(text.contains("| zoo_rows | planted-read-before-start |"));
        assert!(text.contains("guard-page: FOUND, memcheck: MISSED"));
        assert!(text.contains("| MISSED |"));
    }

    #[test]
    fn nothing_returned_is_not_run_and_not_ok_to_call_complete() {
        let p = plan();
        let t = judge(&p, &[]);
        assert!(t.planted.iter().all(|r| r.status == Status::NotRun));
        assert!(t.fixed.iter().all(|r| r.status == Status::NotRun));
        assert!(t.ok());
        assert!(!t.complete());
    }

    #[test]
    fn incidents_are_judged_and_missing_ops_listed() {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let inc = |op: &str| Expectation {
            case: Case::new(op, "ggml", kedge_core::DType::F32, [64, 1, 65536, 1]),
            incident: format!("inc-{op}"),
            expect: Expected {
                verdict: Verdict::LaunchError,
                detector: Detector::Driver,
            },
            expect_cpu: Some(Expected {
                verdict: Verdict::LaunchError,
                detector: Detector::LaunchContract,
            }),
            note: String::new(),
        };
        let p = SelftestPlan::build(
            &reg,
            &h200,
            &[inc("rms_norm"), inc("not_an_op")],
            &PlanOptions {
                ops: vec!["rms_norm".into(), "not_an_op".into()],
                ..PlanOptions::default()
            },
        );
        assert_eq!(
            p.missing_ops,
            vec![("inc-not_an_op".into(), "not_an_op".into())]
        );
        let cpu_run = p
            .runs
            .iter()
            .find(|r| r.under == Under::Cpu)
            .expect("the CPU run of the incident");
        let cpu = kedge_core::engine::check_on_cpu(&reg, &cpu_run.case, &h200, false);
        let t = judge(&p, &[cpu]);
        let rows: Vec<_> = t
            .incidents
            .iter()
            .map(|r| (r.under.as_str(), r.status))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("native", Status::NotRun),
                ("cpu", Status::Pass),
                ("-", Status::NotInRegistry)
            ]
        );
    }
}
