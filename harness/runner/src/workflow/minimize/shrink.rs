//! Shrinking a failing case and finding the exact transition.
//!
//! `Minimizer::minimize` shrinks a failing case while it keeps the same verdict *and* the same
//! detector: parameters toward their defaults (and the seed toward 1), then each dimension
//! toward small canonical values (1, small powers of two, half its value). Nothing here knows
//! a hardware limit: a dimension stays past a limit only because every smaller candidate that
//! was run changed the outcome.
//!
//! `Minimizer::transition` then bisects one axis between a value that was run and passed and
//! the failing value, down to "passes at N, fails at N+1". A transition is only stated from
//! two results that were actually produced by the predicate (`Transition` holds both); when
//! no passing value was ever run, the answer says so instead.
//!
//! The predicate is anything that runs a case and returns its `CaseResult`: the supervisor on
//! a GPU, `engine::check_on_cpu` for launch-contract failures, or a simulation in tests.
//! Every run is logged (`Minimizer::log`) and cached by case id, so no case runs twice.

use kedge_core::{Axis, Boundary, Case, CaseResult, Detector, Params, Verdict};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

/// What a run says about a case, for shrinking: the verdict and the detector that saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Outcome {
    /// The verdict; `skipped` from a CPU-side predicate means the plan fits.
    pub verdict: Verdict,
    /// The detector that gave the verdict (`none` for a pass).
    pub detector: Detector,
}

impl Outcome {
    pub(crate) fn of(r: &CaseResult) -> Outcome {
        Outcome {
            verdict: r.verdict,
            detector: r.detector,
        }
    }
    fn is_failure(&self) -> bool {
        self.verdict.is_failure()
    }
    /// The side of a transition below the failure: the case ran clean (`pass`), or, for a
    /// CPU-only predicate, its plan fits the profile (`skipped`: the device part did not run).
    fn is_passing(&self) -> bool {
        matches!(self.verdict, Verdict::Pass | Verdict::Skipped)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.verdict == Verdict::Skipped {
            // A CPU predicate: the plan fits, nothing ran on a device.
            write!(f, "plan fits (cpu)")
        } else {
            write!(f, "{} ({})", self.verdict, self.detector)
        }
    }
}

/// One run of the predicate.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Why it ran: "initial", "param eps", "`ne[2]`", "bisect `ne[2]`" ...
    step: String,
    /// The case run.
    case: Case,
    /// What it gave.
    outcome: Outcome,
    /// The result's detail line.
    detail: String,
}

/// Why shrinking or bisecting could not start or go on; `E` is the predicate's own error.
#[derive(Debug, thiserror::Error)]
pub enum MinimizeError<E: std::error::Error + 'static> {
    /// The case does not fail when run (or the probe budget was spent before it could run).
    #[error("the case does not fail: {0}")]
    NotFailing(Outcome),
    /// A stored result said one outcome; running the case again gave another.
    #[error(
        "the case did not reproduce: the result given says {given}, running it again gave {got}"
    )]
    DidNotReproduce {
        /// The stored result's outcome.
        given: Outcome,
        /// The outcome of running the case now.
        got: Outcome,
    },
    /// The predicate could not run a probe (a worker that could not start, say).
    #[error("running a probe failed: {0}")]
    Predicate(#[source] E),
}

/// Knobs for shrinking.
#[derive(Debug, Clone)]
pub struct ShrinkConfig {
    /// Each parameter's default (from the op's `ParamSpec`s); params not listed are kept.
    pub param_defaults: Params,
    /// Most predicate runs for minimize and transition together (cache hits are free).
    pub max_probes: usize,
    /// Rounds over all dimensions (a round that changes nothing ends shrinking early).
    pub max_rounds: usize,
}

impl Default for ShrinkConfig {
    fn default() -> Self {
        ShrinkConfig {
            param_defaults: Params::new(),
            max_probes: 400,
            max_rounds: 4,
        }
    }
}

/// The result of shrinking.
#[derive(Debug, Clone, Serialize)]
pub struct Minimized {
    /// The case as given.
    pub(crate) original: Case,
    /// The smallest case found with the same outcome.
    pub case: Case,
    /// The outcome both have.
    pub outcome: Outcome,
    /// The result of running the minimized case (its verdict line).
    pub result: CaseResult,
    /// Dimensions that could not shrink further because a smaller value that was run changed
    /// the outcome, with the largest such value: where a transition lies.
    blocked: Vec<(usize, i64)>,
    /// Shrinking stopped because the probe budget ran out (the case may shrink further).
    pub(crate) budget_exhausted: bool,
}

/// "passes at N, fails at N+1", from two results that were run.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    /// The axis bisected: `ne[2]`, or a parameter's name.
    pub axis: String,
    /// The largest value that passed.
    pub pass_at: i64,
    /// The value above it, which fails: `pass_at + 1`.
    pub fail_at: i64,
    /// The result of the case at `pass_at`.
    pub pass: CaseResult,
    /// The result of the case at `fail_at`.
    pub fail: CaseResult,
}

impl Transition {
    pub(crate) fn pass_outcome(&self) -> Outcome {
        Outcome::of(&self.pass)
    }
    fn fail_outcome(&self) -> Outcome {
        Outcome::of(&self.fail)
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} at {}, {} at {} (both run)",
            self.axis,
            self.pass_outcome(),
            self.pass_at,
            self.fail_outcome(),
            self.fail_at
        )
    }
}

/// What a search for a transition found. Only `Found` states a transition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TransitionFinding {
    /// Both sides were run: pass at N, fail at N+1.
    Found(Box<Transition>),
    /// No value below the failing one that was run passed: no transition can be stated.
    NoPassingValue {
        /// The axis: `ne[2]`, or a parameter's name.
        axis: String,
        /// The values below the failing one that were run, in the order they were.
        tried: Vec<i64>,
    },
    /// Between the passing and the failing value a third outcome appeared (a different
    /// failure): the boundary between pass and this failure is not a single step.
    OtherOutcome {
        /// The axis.
        axis: String,
        /// The value that gave the third outcome.
        value: i64,
        /// That outcome.
        outcome: Outcome,
        /// The largest value known to pass.
        pass_at: i64,
        /// The smallest value known to fail as the case does.
        fail_at: i64,
    },
    /// The probe budget ran out: pass at `pass_at`, fail at `fail_at`, both run, not adjacent.
    Narrowed {
        /// The axis.
        axis: String,
        /// The largest value run that passed.
        pass_at: i64,
        /// The smallest value run that failed.
        fail_at: i64,
    },
    /// The axis cannot be bisected (not an integer, or the failing value is already 1).
    NotBisectable {
        /// The axis.
        axis: String,
        /// Why it cannot be bisected.
        why: String,
    },
}

impl fmt::Display for TransitionFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionFinding::Found(t) => write!(f, "transition {t}"),
            TransitionFinding::NoPassingValue { axis, tried } => write!(
                f,
                "no transition stated on {axis}: no smaller value passed (ran {tried:?})"
            ),
            TransitionFinding::OtherOutcome {
                axis,
                value,
                outcome,
                pass_at,
                fail_at,
            } => write!(
                f,
                "no single transition on {axis}: passes at {pass_at}, fails at {fail_at}, but {value} gave {outcome}"
            ),
            TransitionFinding::Narrowed {
                axis,
                pass_at,
                fail_at,
            } => write!(
                f,
                "probe budget ran out on {axis}: passes at {pass_at}, fails at {fail_at} (both run), transition in between"
            ),
            TransitionFinding::NotBisectable { axis, why } => {
                write!(f, "no transition on {axis}: {why}")
            }
        }
    }
}

fn axis_name(a: &Axis) -> String {
    match a {
        Axis::Ne(d) => format!("ne[{d}]"),
        Axis::Param(p) => (*p).to_string(),
    }
}

fn axis_get(case: &Case, a: &Axis) -> Option<i64> {
    match a {
        Axis::Ne(d) => case.ne.get(*d).copied(),
        Axis::Param(p) => case.params.get(*p).and_then(|v| v.as_i64()),
    }
}

fn axis_set(case: &Case, a: &Axis, v: i64) -> Case {
    let mut c = case.clone();
    match a {
        Axis::Ne(d) => c.ne[*d] = v,
        Axis::Param(p) => {
            c.params.insert((*p).to_string(), v.into());
        }
    }
    c
}

/// Smaller values to try for a dimension of value `v`, smallest first: 1, the powers of two
/// below `v`, and `v / 2`.
fn shrink_candidates(v: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut p = 1i64;
    while p < v {
        out.push(p);
        match p.checked_mul(2) {
            Some(n) => p = n,
            None => break,
        }
    }
    if v / 2 >= 1 {
        out.push(v / 2);
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&c| c < v);
    out
}

/// Shrinks with a predicate, logging and caching every run.
pub struct Minimizer<P> {
    predicate: P,
    cache: HashMap<String, CaseResult>,
    log: Vec<Probe>,
    cfg: ShrinkConfig,
    runs: usize,
}

impl<P, E> Minimizer<P>
where
    P: FnMut(&Case) -> Result<CaseResult, E>,
    E: std::error::Error + 'static,
{
    /// A minimizer that runs cases with `predicate`, nothing run or cached yet.
    pub fn new(predicate: P, cfg: ShrinkConfig) -> Self {
        Minimizer {
            predicate,
            cache: HashMap::new(),
            log: Vec::new(),
            cfg,
            runs: 0,
        }
    }

    /// Predicate runs so far (cache hits not counted).
    pub fn runs(&self) -> usize {
        self.runs
    }

    fn budget_left(&self) -> bool {
        self.runs < self.cfg.max_probes
    }

    /// The result of `case`: from the cache, or by running the predicate (and logging it).
    /// `None` when the budget is spent and the case was never run.
    fn probe(&mut self, step: &str, case: &Case) -> Result<Option<CaseResult>, MinimizeError<E>> {
        let id = case.id();
        if let Some(r) = self.cache.get(&id) {
            return Ok(Some(r.clone()));
        }
        if !self.budget_left() {
            return Ok(None);
        }
        let r = (self.predicate)(case).map_err(MinimizeError::Predicate)?;
        self.runs += 1;
        self.log.push(Probe {
            step: step.to_string(),
            case: case.clone(),
            outcome: Outcome::of(&r),
            detail: r.detail.clone(),
        });
        self.cache.insert(id, r.clone());
        Ok(Some(r))
    }

    /// A result that was run for exactly this case, if any.
    pub fn ran(&self, case: &Case) -> Option<&CaseResult> {
        self.cache.get(&case.id())
    }

    /// Shrink `case` while its outcome stays the same. `given`: the outcome a stored result
    /// says the case had; the case is run again and must reproduce it.
    pub fn minimize(
        &mut self,
        case: &Case,
        given: Option<Outcome>,
    ) -> Result<Minimized, MinimizeError<E>> {
        let (first, target) = self.reproduce(case, given)?;
        let mut cur = Shrinking {
            case: case.clone(),
            result: first,
            exhausted: false,
        };
        self.shrink_params(&mut cur, target)?;
        self.shrink_dims(&mut cur, target)?;
        let blocked = (0..4)
            .filter_map(|d| {
                self.largest_run_below(&cur.case, &Axis::Ne(d), |o| o != target)
                    .map(|v| (d, v))
            })
            .collect();
        Ok(Minimized {
            original: case.clone(),
            outcome: target,
            case: cur.case,
            result: cur.result,
            blocked,
            budget_exhausted: cur.exhausted,
        })
    }

    /// Run `case` first: its result and outcome, which must be a failure, and `given`'s when
    /// a stored result said what it was.
    fn reproduce(
        &mut self,
        case: &Case,
        given: Option<Outcome>,
    ) -> Result<(CaseResult, Outcome), MinimizeError<E>> {
        let Some(first) = self.probe("initial", case)? else {
            return Err(MinimizeError::NotFailing(Outcome {
                verdict: Verdict::Skipped,
                detector: Detector::None,
            }));
        };
        let target = Outcome::of(&first);
        if let Some(g) = given.filter(|g| *g != target) {
            return Err(MinimizeError::DidNotReproduce {
                given: g,
                got: target,
            });
        }
        if !target.is_failure() {
            return Err(MinimizeError::NotFailing(target));
        }
        Ok((first, target))
    }

    /// Try `cand` at `step`: taken when its outcome is still `target`.
    fn try_step(
        &mut self,
        cur: &mut Shrinking,
        step: &str,
        cand: Case,
        target: Outcome,
    ) -> Result<Step, MinimizeError<E>> {
        Ok(match self.probe(step, &cand)? {
            Some(r) if Outcome::of(&r) == target => {
                cur.case = cand;
                cur.result = r;
                Step::Taken
            }
            Some(_) => Step::Other,
            None => {
                cur.exhausted = true;
                Step::OutOfBudget
            }
        })
    }

    /// Parameters toward their defaults, then the seed toward 1.
    fn shrink_params(
        &mut self,
        cur: &mut Shrinking,
        target: Outcome,
    ) -> Result<(), MinimizeError<E>> {
        let names: Vec<String> = cur.case.params.keys().cloned().collect();
        for name in names {
            let Some(def) = self.cfg.param_defaults.get(&name).cloned() else {
                continue;
            };
            if cur.case.params.get(&name) == Some(&def) {
                continue;
            }
            let mut cand = cur.case.clone();
            cand.params.insert(name.clone(), def);
            self.try_step(cur, &format!("param {name} -> default"), cand, target)?;
        }
        if cur.case.seed != 1 {
            let mut cand = cur.case.clone();
            cand.seed = 1;
            self.try_step(cur, "seed -> 1", cand, target)?;
        }
        Ok(())
    }

    /// Dimensions toward small canonical values, round after round until nothing changes.
    fn shrink_dims(
        &mut self,
        cur: &mut Shrinking,
        target: Outcome,
    ) -> Result<(), MinimizeError<E>> {
        for _round in 0..self.cfg.max_rounds.max(1) {
            let mut changed = false;
            for d in 0..4 {
                for cand_v in shrink_candidates(cur.case.ne[d]) {
                    let cand = axis_set(&cur.case, &Axis::Ne(d), cand_v);
                    match self.try_step(cur, &format!("ne[{d}] -> {cand_v}"), cand, target)? {
                        Step::Taken => {
                            changed = true;
                            break;
                        }
                        Step::Other => {}
                        Step::OutOfBudget => break,
                    }
                }
            }
            if !changed || cur.exhausted {
                break;
            }
        }
        Ok(())
    }

    /// The largest value below `case`'s on `axis` that was run (everything else equal to
    /// `case`) and whose outcome satisfies `want`.
    fn largest_run_below(
        &self,
        case: &Case,
        axis: &Axis,
        want: impl Fn(Outcome) -> bool,
    ) -> Option<i64> {
        let v = axis_get(case, axis)?;
        self.log
            .iter()
            .filter_map(|p| {
                let pv = axis_get(&p.case, axis)?;
                (pv < v && axis_set(&p.case, axis, v) == *case && want(p.outcome)).then_some(pv)
            })
            .max()
    }

    /// Bisect `axis` of the failing `case` between a value that passes and the failing one.
    /// A passing value of `axis` below the failing `fail_v`: the largest already run, else
    /// fail-1, then halving to 1; with the values tried.
    fn passing_below(
        &mut self,
        case: &Case,
        axis: &Axis,
        fail_v: i64,
    ) -> Result<(Option<i64>, Vec<i64>), MinimizeError<E>> {
        let name = axis_name(axis);
        let mut lo = self.largest_run_below(case, axis, |o| o.is_passing());
        let mut tried = Vec::new();
        if lo.is_none() {
            let mut cands = vec![fail_v - 1];
            let mut h = fail_v / 2;
            while h >= 1 {
                if h < fail_v - 1 {
                    cands.push(h);
                }
                h /= 2;
            }
            for v in cands {
                match self.probe(
                    &format!("transition {name}: below"),
                    &axis_set(case, axis, v),
                )? {
                    Some(r) => {
                        tried.push(v);
                        if Outcome::of(&r).is_passing() {
                            lo = Some(v);
                            break;
                        }
                    }
                    None => break,
                }
            }
        }
        Ok((lo, tried))
    }

    /// Bisect `axis` of the failing `case` down to "passes at N, fails at N+1", stated only
    /// when both sides were run; values already run (by `minimize`) narrow the search first.
    pub fn transition(
        &mut self,
        case: &Case,
        axis: &Axis,
    ) -> Result<TransitionFinding, MinimizeError<E>> {
        let name = axis_name(axis);
        let Some(fail_v) = axis_get(case, axis) else {
            return Ok(TransitionFinding::NotBisectable {
                axis: name,
                why: "not an integer on this case".into(),
            });
        };
        let fail_r = match self.probe("transition: failing side", case)? {
            Some(r) => r,
            None => {
                return Ok(TransitionFinding::NoPassingValue {
                    axis: name,
                    tried: vec![],
                })
            }
        };
        let target = Outcome::of(&fail_r);
        if !target.is_failure() {
            return Err(MinimizeError::NotFailing(target));
        }
        if fail_v <= 1 {
            return Ok(TransitionFinding::NotBisectable {
                axis: name,
                why: format!("the failing value is {fail_v}; there is nothing below it to pass"),
            });
        }
        let (lo, tried) = self.passing_below(case, axis, fail_v)?;
        let Some(mut lo) = lo else {
            return Ok(TransitionFinding::NoPassingValue { axis: name, tried });
        };
        let mut hi = fail_v;
        (lo, hi) = self.narrowed_by_log(case, axis, target, lo, hi);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let r = match self.probe(&format!("bisect {name}"), &axis_set(case, axis, mid))? {
                Some(r) => r,
                None => {
                    return Ok(TransitionFinding::Narrowed {
                        axis: name,
                        pass_at: lo,
                        fail_at: hi,
                    })
                }
            };
            let o = Outcome::of(&r);
            if o == target {
                hi = mid;
            } else if o.is_passing() {
                lo = mid;
            } else {
                return Ok(TransitionFinding::OtherOutcome {
                    axis: name,
                    value: mid,
                    outcome: o,
                    pass_at: lo,
                    fail_at: hi,
                });
            }
        }
        Ok(self.both_sides(case, axis, name, lo, hi))
    }

    /// The bounds `lo` (passing) and `hi` (failing) tightened by the values already run
    /// between them on `axis`, everything else equal to `case`.
    fn narrowed_by_log(
        &self,
        case: &Case,
        axis: &Axis,
        target: Outcome,
        mut lo: i64,
        mut hi: i64,
    ) -> (i64, i64) {
        let fail_v = hi;
        for p in &self.log {
            if let Some(pv) = axis_get(&p.case, axis) {
                if pv > lo && pv < hi && axis_set(&p.case, axis, fail_v) == *case {
                    if p.outcome == target {
                        hi = pv;
                    } else if p.outcome.is_passing() {
                        lo = pv;
                    }
                }
            }
        }
        (lo, hi)
    }

    /// The transition between `lo` and `hi` when both sides were run (from the cache of
    /// results), else how far it was narrowed.
    fn both_sides(
        &self,
        case: &Case,
        axis: &Axis,
        name: String,
        lo: i64,
        hi: i64,
    ) -> TransitionFinding {
        let (Some(pass), Some(fail)) = (
            self.ran(&axis_set(case, axis, lo)).cloned(),
            self.ran(&axis_set(case, axis, hi)).cloned(),
        ) else {
            return TransitionFinding::Narrowed {
                axis: name,
                pass_at: lo,
                fail_at: hi,
            };
        };
        TransitionFinding::Found(Box::new(Transition {
            axis: name,
            pass_at: lo,
            fail_at: hi,
            pass,
            fail,
        }))
    }
}

/// Which axis to bisect after shrinking: a blocked dimension an op boundary names first,
/// then the blocked dimension with the largest value. `None` when no dimension is blocked.
fn transition_axis(m: &Minimized, boundaries: &[Boundary]) -> Option<Axis> {
    let blocked: Vec<usize> = m.blocked.iter().map(|(d, _)| *d).collect();
    for b in boundaries {
        if let Axis::Ne(d) = b.axis {
            if blocked.contains(&d) {
                return Some(Axis::Ne(d));
            }
        }
    }
    blocked
        .iter()
        .copied()
        .max_by_key(|&d| m.case.ne[d])
        .map(Axis::Ne)
}

/// Everything `kedge minimize` found, for printing and for the JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The shrunk case and its result.
    pub minimized: Minimized,
    /// What bisecting the blocked axis found; `None` when no dimension was blocked.
    pub transition: Option<TransitionFinding>,
    /// Every predicate run, in order.
    pub(crate) probes: Vec<Probe>,
}

/// The case being shrunk: the smallest so far with the target outcome, its result, and
/// whether the probe budget ran out on the way.
struct Shrinking {
    case: Case,
    result: CaseResult,
    exhausted: bool,
}

/// What one shrinking step came to.
enum Step {
    /// The candidate kept the outcome and is the case now.
    Taken,
    /// It ran with another outcome.
    Other,
    /// The probe budget ran out before it could run.
    OutOfBudget,
}

/// Shrink, then look for the transition on the axis `transition_axis` picks.
pub fn minimize_and_transition<P, E>(
    case: &Case,
    given: Option<Outcome>,
    boundaries: &[Boundary],
    cfg: ShrinkConfig,
    predicate: P,
) -> Result<Report, MinimizeError<E>>
where
    P: FnMut(&Case) -> Result<CaseResult, E>,
    E: std::error::Error + 'static,
{
    let mut m = Minimizer::new(predicate, cfg);
    let minimized = m.minimize(case, given)?;
    let transition = match transition_axis(&minimized, boundaries) {
        Some(axis) => Some(m.transition(&minimized.case, &axis)?),
        None => None,
    };
    Ok(Report {
        minimized,
        transition,
        probes: m.log,
    })
}

/// Shrink `case` with `predicate` (a one-shot `Minimizer`); returns the result and the log.
pub fn minimize<P, E>(
    case: &Case,
    given: Option<Outcome>,
    cfg: ShrinkConfig,
    predicate: P,
) -> Result<(Minimized, Vec<Probe>), MinimizeError<E>>
where
    P: FnMut(&Case) -> Result<CaseResult, E>,
    E: std::error::Error + 'static,
{
    let mut m = Minimizer::new(predicate, cfg);
    let r = m.minimize(case, given)?;
    Ok((r, m.log))
}

/// Bisect `axis` of the failing `case` with `predicate` (a one-shot `Minimizer`).
pub fn transition<P, E>(
    case: &Case,
    axis: &Axis,
    cfg: ShrinkConfig,
    predicate: P,
) -> Result<(TransitionFinding, Vec<Probe>), MinimizeError<E>>
where
    P: FnMut(&Case) -> Result<CaseResult, E>,
    E: std::error::Error + 'static,
{
    let mut m = Minimizer::new(predicate, cfg);
    let t = m.transition(case, axis)?;
    Ok((t, m.log))
}

/// The probe log as text, one line per run.
pub(crate) fn render_log(probes: &[Probe]) -> String {
    let mut s = String::new();
    for (i, p) in probes.iter().enumerate() {
        s.push_str(&format!(
            "{:>4}  {:<28} ne={:<28} {}\n",
            i + 1,
            p.step,
            kedge_core::model::shape::fmt_ne(&p.case.ne),
            p.outcome
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::DType;
    use std::convert::Infallible;

    fn case(ne: [i64; 4]) -> Case {
        Case::new("rms_norm", "ggml", DType::F32, ne)
    }

    /// A simulated device: fails (launch-error, driver) iff `fails(case)`.
    fn sim<'a>(
        fails: impl Fn(&Case) -> bool + 'a,
        runs: &'a std::cell::Cell<usize>,
    ) -> impl FnMut(&Case) -> Result<CaseResult, Infallible> + 'a {
        move |c| {
            runs.set(runs.get() + 1);
            Ok(if fails(c) {
                CaseResult::new(c, Verdict::LaunchError, Detector::Driver, "simulated")
            } else {
                CaseResult::new(c, Verdict::Pass, Detector::None, "simulated")
            })
        }
    }

    #[test]
    fn grid_y_limit_shrinks_to_the_minimum_and_finds_65535_65536() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(|c| c.ne[2] > 65535 && c.ne[0] >= 1, &runs);
        let mut m = Minimizer::new(pred, ShrinkConfig::default());
        let min = m.minimize(&case([64, 3, 70000, 2]), None).unwrap();
        // Every dimension that can shrink went to 1; ne[2] stopped at the first canonical
        // value past the limit.
        assert_eq!(min.case.ne, [1, 1, 65536, 1]);
        assert_eq!(min.outcome.verdict, Verdict::LaunchError);
        assert_eq!(min.blocked, vec![(2, 32768)]);
        let axis = transition_axis(&min, &[]).unwrap();
        assert_eq!(axis, Axis::Ne(2));
        let t = m.transition(&min.case, &axis).unwrap();
        let TransitionFinding::Found(t) = t else {
            panic!("{t}")
        };
        assert_eq!((t.pass_at, t.fail_at), (65535, 65536));
        assert_eq!(t.pass.case.ne, [1, 1, 65535, 1]);
        assert_eq!(t.pass.verdict, Verdict::Pass);
        assert_eq!(t.fail.case.ne, [1, 1, 65536, 1]);
        assert_eq!(t.fail.verdict, Verdict::LaunchError);
        // Both sides are in the log: they were run, not inferred.
        for v in [65535, 65536] {
            assert!(
                m.log.iter().any(|p| p.case.ne == [1, 1, v, 1]),
                "{v} not run"
            );
        }
        // Nothing ran twice.
        let mut ids: Vec<_> = m.log.iter().map(|p| p.case.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), m.log.len());
        assert_eq!(runs.get(), m.log.len());
    }

    #[test]
    fn product_limit_finds_a_one_minimal_case_and_the_exact_transition() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(|c| c.ne[0] * c.ne[1] > 1_000_000, &runs);
        let r = minimize_and_transition(
            &case([4096, 4096, 3, 1]),
            None,
            &[],
            ShrinkConfig::default(),
            pred,
        )
        .unwrap();
        // ne[0] shrinks first: 256 is the smallest power of two with 256 * 4096 > 1e6;
        // then ne[1] cannot go to any smaller canonical value (256 * 2048 <= 1e6).
        assert_eq!(r.minimized.case.ne, [256, 4096, 1, 1]);
        // 1-minimal: every next-smaller canonical value of each dimension passes.
        for d in 0..2 {
            for v in shrink_candidates(r.minimized.case.ne[d]) {
                let mut c = r.minimized.case.clone();
                c.ne[d] = v;
                assert!(c.ne[0] * c.ne[1] <= 1_000_000);
            }
        }
        let Some(TransitionFinding::Found(t)) = r.transition else {
            panic!("{:?}", r.transition)
        };
        assert_eq!(t.axis, "ne[1]");
        // 256 * 3906 = 999,936 passes; 256 * 3907 = 1,000,192 fails.
        assert_eq!((t.pass_at, t.fail_at), (3906, 3907));
    }

    #[test]
    fn params_go_to_their_defaults_and_the_seed_to_one() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(|c| c.ne[2] > 65535, &runs);
        let mut cfg = ShrinkConfig::default();
        cfg.param_defaults.insert("eps".into(), 1e-6.into());
        cfg.param_defaults.insert("row_pad".into(), 0.into());
        let mut c = case([64, 1, 65536, 1])
            .with_param("eps", 0.5)
            .with_param("row_pad", 7);
        c.seed = 99;
        let mut m = Minimizer::new(pred, cfg);
        let min = m.minimize(&c, None).unwrap();
        assert_eq!(min.case.params.get("eps"), Some(&1e-6.into()));
        assert_eq!(min.case.params.get("row_pad"), Some(&0.into()));
        assert_eq!(min.case.seed, 1);
    }

    #[test]
    fn a_param_the_failure_needs_is_kept() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(
            |c| c.params.get("row_pad").and_then(|v| v.as_i64()) == Some(7),
            &runs,
        );
        let mut cfg = ShrinkConfig::default();
        cfg.param_defaults.insert("row_pad".into(), 0.into());
        let mut m = Minimizer::new(pred, cfg);
        let min = m
            .minimize(&case([64, 2, 2, 1]).with_param("row_pad", 7), None)
            .unwrap();
        assert_eq!(min.case.params.get("row_pad"), Some(&7.into()));
        assert_eq!(min.case.ne, [1, 1, 1, 1]);
    }

    #[test]
    fn a_different_detector_is_a_different_failure() {
        // Above 100 rows the failure is seen by memcheck; at or below by the reference. The
        // case must keep memcheck, so ne[1] stays above 100.
        let pred = |c: &Case| -> Result<CaseResult, Infallible> {
            Ok(if c.ne[1] > 100 {
                CaseResult::new(c, Verdict::OobRead, Detector::Memcheck, "sim")
            } else {
                CaseResult::new(c, Verdict::WrongValues, Detector::Reference, "sim")
            })
        };
        let mut m = Minimizer::new(pred, ShrinkConfig::default());
        let min = m.minimize(&case([8, 300, 1, 1]), None).unwrap();
        assert_eq!(min.case.ne, [1, 128, 1, 1]);
        assert_eq!(min.outcome.detector, Detector::Memcheck);
        // No passing value exists below: the reference failure is not a pass.
        let t = m.transition(&min.case, &Axis::Ne(1)).unwrap();
        assert!(matches!(t, TransitionFinding::NoPassingValue { .. }), "{t}");
    }

    #[test]
    fn no_transition_is_stated_when_no_passing_side_was_run() {
        // Fails everywhere: there is no passing side, so no transition may be stated.
        let runs = std::cell::Cell::new(0);
        let pred = sim(|_| true, &runs);
        let mut m = Minimizer::new(pred, ShrinkConfig::default());
        let t = m
            .transition(&case([64, 1, 65536, 1]), &Axis::Ne(2))
            .unwrap();
        let TransitionFinding::NoPassingValue { tried, .. } = &t else {
            panic!("{t}")
        };
        // It ran the values below and every one failed.
        assert_eq!(tried[0], 65535);
        assert!(tried.contains(&1));
        assert!(!t.to_string().contains("transition ne"));
    }

    #[test]
    fn a_budget_that_stops_bisection_states_no_transition() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(|c| c.ne[2] > 65535, &runs);
        let cfg = ShrinkConfig {
            max_probes: 8,
            ..ShrinkConfig::default()
        };
        let mut m = Minimizer::new(pred, cfg);
        // 1 run for the failing side, 1 for 65535 (passes) ... here we start far away.
        let t = m.transition(&case([1, 1, 65536, 1]), &Axis::Ne(2)).unwrap();
        // fail-1 passes at once, so this one is found with 2 runs...
        assert!(matches!(t, TransitionFinding::Found(_)), "{t}");
        // ...but from a failing value far above the limit, 8 runs cannot reach adjacency:
        // fail side, 1048575, 524288, 262144, 131072, 65536 (all fail), 32768 (passes),
        // then one bisection step (49152, passes); the ninth run is over budget.
        let runs2 = std::cell::Cell::new(0);
        let pred2 = sim(|c| c.ne[2] > 65535, &runs2);
        let mut m2 = Minimizer::new(
            pred2,
            ShrinkConfig {
                max_probes: 8,
                ..ShrinkConfig::default()
            },
        );
        let t2 = m2
            .transition(&case([1, 1, 1 << 20, 1]), &Axis::Ne(2))
            .unwrap();
        let TransitionFinding::Narrowed {
            pass_at, fail_at, ..
        } = t2
        else {
            panic!("{t2}")
        };
        assert_eq!((pass_at, fail_at), (49152, 65536));
        // Both bounds it reports were run.
        for v in [pass_at, fail_at] {
            assert!(m2.log.iter().any(|p| p.case.ne[2] == v), "{v} not run");
        }
        assert_eq!(runs2.get(), 8);
    }

    #[test]
    fn a_third_outcome_between_the_sides_is_reported_not_hidden() {
        let pred = |c: &Case| -> Result<CaseResult, Infallible> {
            Ok(match c.ne[0] {
                v if v > 1000 => CaseResult::new(c, Verdict::OobRead, Detector::Memcheck, "s"),
                v if v > 600 => CaseResult::new(c, Verdict::WrongValues, Detector::Reference, "s"),
                _ => CaseResult::new(c, Verdict::Pass, Detector::None, "s"),
            })
        };
        let mut m = Minimizer::new(pred, ShrinkConfig::default());
        let t = m.transition(&case([1024, 1, 1, 1]), &Axis::Ne(0)).unwrap();
        assert!(matches!(t, TransitionFinding::OtherOutcome { .. }), "{t}");
    }

    #[test]
    fn a_passing_case_is_not_minimized_and_a_changed_outcome_is_reported() {
        let runs = std::cell::Cell::new(0);
        let pred = sim(|c| c.ne[2] > 65535, &runs);
        let mut m = Minimizer::new(pred, ShrinkConfig::default());
        assert!(matches!(
            m.minimize(&case([64, 1, 100, 1]), None),
            Err(MinimizeError::NotFailing(_))
        ));
        let given = Outcome {
            verdict: Verdict::OobRead,
            detector: Detector::Memcheck,
        };
        assert!(matches!(
            m.minimize(&case([64, 1, 65536, 1]), Some(given)),
            Err(MinimizeError::DidNotReproduce { .. })
        ));
    }

    #[test]
    fn candidates_are_small_canonical_values() {
        assert_eq!(shrink_candidates(1), Vec::<i64>::new());
        assert_eq!(shrink_candidates(2), vec![1]);
        assert_eq!(shrink_candidates(12), vec![1, 2, 4, 6, 8]);
        assert_eq!(shrink_candidates(65536).last(), Some(&32768));
        assert!(shrink_candidates(i64::MAX).len() > 60);
    }
}
