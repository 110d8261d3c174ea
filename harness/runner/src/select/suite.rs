//! Suites: the cases kedge builds from the ops' declarations. `smoke` is each op's small
//! shapes; `boundary` each op's own boundaries plus the ones kedge generates from the device's
//! limits (`contract::boundary::generated`), both sides of each; `default` both; `selftest`
//! both with the calibration impls; `incidents` the incidents corpus (those of ops this build
//! has).

use super::corpus::Corpus;
use super::{Filters, SelectError};
use crate::events::{Event, Events, LeftOutWhy};
use kedge_core::contract::boundary::generated;
use kedge_core::contract::boundary::{whole_blocks, Reach};
use kedge_core::{Axis, Boundary, Case, DType, Impl, LimitsProfile, Op, Registry};
use std::collections::HashSet;
use std::fmt;

/// A built-in set of cases (`--suite`), generated from the ops' declarations for a limits
/// profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// Each op's small shapes: quick, and far from any limit.
    Smoke,
    /// Both sides of every boundary: the op's own and those generated from the profile's
    /// limits.
    Boundary,
    /// The incidents corpus: the cases of known real-world failures, for this build's ops.
    Incidents,
    /// Smoke + boundary of every impl, planted calibration impls included.
    Selftest,
    /// Smoke + boundary.
    Default,
}

impl Suite {
    /// Every suite, in the order `--suite`'s message lists them.
    const ALL: [Suite; 5] = [
        Suite::Smoke,
        Suite::Boundary,
        Suite::Incidents,
        Suite::Selftest,
        Suite::Default,
    ];
    /// What `--suite` calls it.
    fn name(self) -> &'static str {
        match self {
            Suite::Smoke => "smoke",
            Suite::Boundary => "boundary",
            Suite::Incidents => "incidents",
            Suite::Selftest => "selftest",
            Suite::Default => "default",
        }
    }
    fn smoke(self) -> bool {
        matches!(self, Suite::Smoke | Suite::Default | Suite::Selftest)
    }
    fn boundary(self) -> bool {
        matches!(self, Suite::Boundary | Suite::Default | Suite::Selftest)
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Suite {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Suite::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown suite '{s}' (known: smoke, boundary, incidents, selftest, default)"
                )
            })
    }
}

/// Every boundary of an op for a profile in `dtype`: its own (those that fix another dtype
/// left out), then the generated ones in `dtype` (when the op declares a probe base).
pub fn boundaries(op: &dyn Op, limits: &LimitsProfile, dtype: DType) -> Vec<Boundary> {
    let mut v: Vec<Boundary> = op
        .boundaries(limits)
        .into_iter()
        .filter(|b| b.dtype.is_none_or(|d| d == dtype))
        .collect();
    if let Some(base) = op.probe_base() {
        v.extend(generated(&base, limits, dtype));
    }
    v
}

/// The dtypes a suite spans for an op: `dtype` when one is asked for, else every dtype the op
/// declares (the op's first is its default; the others are as much the kernels users ship).
fn dtypes_of(op: &dyn Op, dtype: Option<DType>) -> Vec<DType> {
    match dtype {
        Some(d) => vec![d],
        None => op.dtypes().to_vec(),
    }
}

/// The raw (unvalidated) cases of one impl of an op in a suite, in every dtype of
/// [`dtypes_of`]: the smoke shapes and every boundary in each. In a block format a case's row
/// is rounded up to whole blocks (a probe of `ne[0]` itself keeps only its whole-block
/// values). Each case says whether the op may refuse it: a generated probe (the generator does
/// not know the op's shape rules), or any case outside the op's first dtype (declarations are
/// checked in that one; a shape declared for f32 may not exist in q4_K). Those are left out
/// and counted; a refused case of the first dtype is a declaration error. Dtypes the impl
/// does not compute (`Impl::dtypes`) are not generated for it.
fn raw_cases(
    op: &dyn Op,
    imp: &dyn Impl,
    suite: Suite,
    limits: &LimitsProfile,
    dtype: Option<DType>,
) -> Vec<(Case, bool)> {
    let mut raw = Vec::new();
    let first = op.dtypes().first().copied();
    let of_impl = imp.dtypes();
    for d in dtypes_of(op, dtype) {
        if of_impl.is_some_and(|ds| !ds.contains(&d)) {
            continue;
        }
        let other = Some(d) != first;
        if suite.smoke() {
            for (ne, params) in op.smoke_for(d) {
                let mut c = Case::new(op.name(), imp.name(), d, whole_blocks(ne, d));
                c.params = params;
                raw.push((c, other));
            }
        }
        if suite.boundary() {
            for b in boundaries(op, limits, d) {
                let refusable = other || b.reach == Reach::GENERATED;
                let row_probe = b.axis == Axis::Ne(0);
                for mut c in b.cases(op.name(), imp.name(), d) {
                    if d.is_block() {
                        if row_probe {
                            if !(c.ne[0] as u64).is_multiple_of(d.block()) {
                                continue;
                            }
                        } else {
                            c.ne = whole_blocks(c.ne, d);
                        }
                    }
                    raw.push((c, refusable));
                }
            }
        }
    }
    raw
}

/// Build the cases of a suite for a limits profile, filtered and validated.
pub(crate) fn generate(
    reg: &Registry,
    suite: Suite,
    limits: &LimitsProfile,
    f: &Filters,
    incidents: Option<&std::path::Path>,
    events: &Events,
) -> Result<Vec<Case>, SelectError> {
    if suite == Suite::Incidents {
        let corpus = Corpus::incidents(incidents)?;
        // The incidents of ops this build does not have are left out, and said so: the
        // corpus records every incident kedge knows, not only this build's.
        let (known, other): (Vec<_>, Vec<_>) = corpus
            .cases()?
            .into_iter()
            .partition(|(_, c)| reg.op(&c.op).is_ok());
        if !other.is_empty() {
            let mut ops: Vec<&str> = other.iter().map(|(_, c)| c.op.as_str()).collect();
            ops.sort_unstable();
            ops.dedup();
            events.emit(Event::LeftOut {
                cases: other.len(),
                why: LeftOutWhy::OtherOps {
                    ops: ops.iter().map(|o| o.to_string()).collect(),
                },
            });
        }
        return f.explicit(reg, known, &corpus.source.to_string(), false);
    }
    let planted = f.include_planted || suite == Suite::Selftest;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    // The suite's distinct cases before the filters (a generator may give one case twice).
    let mut all = HashSet::new();
    let mut refused = 0usize;
    for op in &f.ops {
        for imp in reg.impls_of(*op) {
            if !f.impl_selected(imp, planted) {
                continue;
            }
            for (raw, refusable) in raw_cases(*op, imp, suite, limits, f.dtype) {
                for c in f.expand(raw) {
                    let c = match reg.validate(&c) {
                        Ok(c) => c,
                        // A case the op may refuse (see raw_cases): left out, counted.
                        Err(_) if refusable => {
                            refused += 1;
                            continue;
                        }
                        Err(error) => {
                            return Err(SelectError::Declared {
                                op: op.name().to_string(),
                                case: c.label(),
                                error: Box::new(error),
                            })
                        }
                    };
                    let id = c.id();
                    all.insert(id.clone());
                    if f.matches(*op, &c) && seen.insert(id) {
                        out.push(c);
                    }
                }
            }
        }
    }
    if refused > 0 {
        events.emit(Event::LeftOut {
            cases: refused,
            why: LeftOutWhy::Refused,
        });
    }
    if out.is_empty() {
        let mut why = f.why_empty(&format!("suite {suite}"), all.len());
        // Ops that have no impl here at all: say so, and where impls come from.
        let bare: Vec<&str> = f
            .ops
            .iter()
            .filter(|op| reg.impls_of(**op).is_empty())
            .map(|op| op.name())
            .collect();
        if !bare.is_empty() {
            why.push_str(&format!(
                "; no impl of {} is loaded: ggml's ops get one per device of the build --ggml loads, but its CPU backend, which is their reference (`kedge list --ggml DIR` names each op's impls)",
                bare.join(", ")
            ));
        }
        // The impls that do not compute the dtype asked for, each with those it does.
        if let Some(d) = f.dtype {
            for op in &f.ops {
                for imp in reg.impls_of(*op) {
                    if let Some(ds) = imp.dtypes().filter(|ds| !ds.contains(&d)) {
                        if f.impl_selected(imp, planted) {
                            let only: Vec<String> = ds.iter().map(|d| d.to_string()).collect();
                            why.push_str(&format!(
                                "; {} computes {} in {} only",
                                imp.name(),
                                op.name(),
                                only.join(", ")
                            ));
                        }
                    }
                }
            }
        }
        return Err(SelectError::Empty { why });
    }
    Ok(out)
}
