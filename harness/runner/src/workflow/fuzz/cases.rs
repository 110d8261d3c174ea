//! Boundary-biased random cases for `kedge fuzz` (proptest strategies), and the
//! `corpora/fuzz-finds.jsonl` record of what fuzzing found.
//!
//! Most cases sit on or next to a boundary the op declares (at - 2 ..= at + 2 on the
//! boundary's axis, on its base shape); some mix edge values (warp and block multiples, the
//! grid limit) into random small shapes; the rest are plain small shapes. Cases whose largest
//! tensor exceeds `--max-elements` are dropped, so a GPU run stays bounded. The selection's
//! filters apply as everywhere: ops, impls, dtype, `-p` overrides, `--filter`.

use super::targets::EDGE_VALUES;
use crate::select::{Filters, MaxElements};
use crate::workflow::minimize::{Outcome, TransitionFinding};
use kedge_core::contract::boundary::Reach;
use kedge_core::{AllocMode, Axis, Boundary, Case, DType, Op, Params, Registry, Under};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::{Deserialize, Serialize};

/// What to generate.
#[derive(Clone)]
pub struct FuzzSpec {
    /// The ops and impls drawn from, and what every case keeps (dtype, `--param`, seed,
    /// `-p` filter).
    pub filters: Filters,
    /// The allocation modes, one drawn per case.
    pub allocs: Vec<AllocMode>,
    /// Cases with a larger tensor are drawn again.
    pub max_elements: MaxElements,
}

fn shape_strategy(
    op: &dyn Op,
    limits: &kedge_core::LimitsProfile,
    dtype: DType,
) -> BoxedStrategy<(kedge_core::Ne, Params)> {
    let small_edges: Vec<i64> = EDGE_VALUES
        .iter()
        .copied()
        .filter(|&v| v <= 65_537)
        .collect();
    let mut arms: Vec<(u32, BoxedStrategy<(kedge_core::Ne, Params)>)> = Vec::new();
    // The op's own boundaries and the grid limits weigh as much as every generated ladder
    // together (shared memory, vector widths, index widths): a uniform pick over all of them
    // would rarely reach the grid, where the seeds' incidents are.
    let (first, rest): (Vec<Boundary>, Vec<Boundary>) =
        crate::select::suite::boundaries(op, limits, dtype)
            .into_iter()
            .partition(|b| b.reach != Reach::GENERATED || b.label.contains("grid."));
    for (weight, set) in [(3, first), (2, rest)] {
        if set.is_empty() {
            continue;
        }
        let b = proptest::sample::select(set);
        arms.push((
            weight,
            (b, -2i64..=2, any::<proptest::sample::Index>())
                .prop_map(|(b, jitter, which)| {
                    let mut ne = b.base;
                    for d in ne.iter_mut() {
                        if *d < 1 {
                            *d = 1;
                        }
                    }
                    let mut params = b.params.clone();
                    // Any of the boundary's probe values (a ladder has several), jittered.
                    let values = b.probe_values();
                    let at = values
                        .get(which.index(values.len()))
                        .copied()
                        .unwrap_or(b.at);
                    let v = (at + jitter).max(1);
                    match b.axis {
                        Axis::Ne(d) => ne[d] = v,
                        Axis::Param(p) => {
                            params.insert(p.to_string(), v.into());
                        }
                    }
                    (ne, params)
                })
                .boxed(),
        ));
    }
    let edge = proptest::sample::select(small_edges);
    arms.push((
        2,
        (edge.clone(), 1i64..=64, 1i64..=8, 1i64..=4, 0usize..4)
            .prop_map(|(e, a, b, c, at)| {
                let mut ne = [a, b, c, 1];
                ne[at] = e;
                (ne, Params::new())
            })
            .boxed(),
    ));
    arms.push((
        1,
        (1i64..=4096, 1i64..=64, 1i64..=8, 1i64..=4)
            .prop_map(|(a, b, c, d)| ([a, b, c, d], Params::new()))
            .boxed(),
    ));
    proptest::strategy::Union::new_weighted(arms).boxed()
}

/// `n` validated cases, deterministic for a seed (the first `n` of `CaseStream`).
pub fn generate(
    reg: &Registry,
    limits: &kedge_core::LimitsProfile,
    spec: &FuzzSpec,
    n: usize,
    seed: u64,
) -> Vec<Case> {
    CaseStream::new(reg, limits, spec, n, seed).collect()
}

/// Draws without a case in a row after which a stream gives up: its filters keep almost
/// nothing of what the generator makes.
const DROUGHT: u64 = 20_000;

/// Validated cases one at a time, deterministic for a seed: a fuzz run of any length holds
/// one case at a time, not all of them. Ends after `n` cases, after `20 n` draws, or after
/// `DROUGHT` draws in a row that the filters and `--max-elements` all refuse.
pub struct CaseStream<'a> {
    reg: &'a Registry,
    spec: &'a FuzzSpec,
    runner: TestRunner,
    targets: Vec<(&'static dyn Op, Vec<String>)>,
    strategies: Vec<BoxedStrategy<(kedge_core::Ne, Params)>>,
    n: u64,
    yielded: u64,
    attempts: u64,
    since_last: u64,
}

impl<'a> CaseStream<'a> {
    /// At most `n` cases of `spec`'s ops, shapes biased toward their boundaries for `limits`;
    /// the same `seed` gives the same cases.
    pub fn new(
        reg: &'a Registry,
        limits: &kedge_core::LimitsProfile,
        spec: &'a FuzzSpec,
        n: usize,
        seed: u64,
    ) -> Self {
        let f = &spec.filters;
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &key),
        );
        // Planted calibration impls would only refind their planted bugs.
        let targets: Vec<(&'static dyn Op, Vec<String>)> = f
            .ops
            .iter()
            .map(|op| {
                let imps: Vec<String> = reg
                    .impls_of(*op)
                    .into_iter()
                    .filter(|i| f.impl_selected(*i, false))
                    .map(|i| i.name().to_string())
                    .collect();
                (*op, imps)
            })
            .filter(|(_, imps)| !imps.is_empty())
            .collect();
        let strategies: Vec<_> = targets
            .iter()
            .map(|(op, _)| shape_strategy(*op, limits, f.dtype.unwrap_or(op.dtypes()[0])))
            .collect();
        CaseStream {
            reg,
            spec,
            runner,
            targets,
            strategies,
            n: n as u64,
            yielded: 0,
            attempts: 0,
            since_last: 0,
        }
    }

    /// Draws so far (cases made, valid or not).
    pub fn attempts(&self) -> u64 {
        self.attempts
    }
}

impl Iterator for CaseStream<'_> {
    type Item = Case;

    fn next(&mut self) -> Option<Case> {
        let f = &self.spec.filters;
        if self.targets.is_empty() {
            return None;
        }
        while self.yielded < self.n
            && self.attempts < self.n.saturating_mul(20)
            && self.since_last < DROUGHT
        {
            self.attempts += 1;
            self.since_last += 1;
            let runner = &mut self.runner;
            let k = (runner.rng().next_u32() as usize) % self.targets.len();
            let (op, imps) = &self.targets[k];
            let Ok(tree) = self.strategies[k].new_tree(runner) else {
                continue;
            };
            let (ne, params) = tree.current();
            let imp = &imps[(runner.rng().next_u32() as usize) % imps.len()];
            let allocs = &self.spec.allocs;
            let alloc = allocs[(runner.rng().next_u32() as usize) % allocs.len().max(1)];
            let mut c = Case::new(op.name(), imp, f.dtype.unwrap_or(op.dtypes()[0]), ne);
            c.params = params;
            for (k, v) in &f.params {
                c.params.insert(k.clone(), v.clone());
            }
            c.seed = f
                .seed
                .unwrap_or((runner.rng().next_u32() % 1000) as u64 + 1);
            c.alloc = alloc;
            let Ok(c) = self.reg.validate(&c) else {
                continue;
            };
            if !self.spec.max_elements.allows(self.reg, &c) || !f.matches(*op, &c) {
                continue;
            }
            self.yielded += 1;
            self.since_last = 0;
            return Some(c);
        }
        None
    }
}

/// One line of `corpora/fuzz-finds.jsonl`. The `case` field makes the file a corpus:
/// `kedge run --corpus corpora/fuzz-finds.jsonl` replays every find.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FuzzFind {
    /// The minimized case.
    pub case: Case,
    /// The verdict it fails with, the generated case's too (shrinking keeps it).
    pub verdict: kedge_core::Verdict,
    /// The detector that saw the failure, kept as the verdict is.
    pub detector: kedge_core::Detector,
    /// "native", "cpu", or a sanitizer tool.
    under: Under,
    /// The case as generated, before shrinking.
    original: Case,
    /// The transition, when one was found from both sides ("`ne[2]`: pass at 65535, ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    detail: String,
}

impl FuzzFind {
    pub(crate) fn new(
        original: &Case,
        minimized: &Case,
        outcome: Outcome,
        under: Under,
        transition: Option<&TransitionFinding>,
        detail: &str,
    ) -> Self {
        FuzzFind {
            case: minimized.clone(),
            verdict: outcome.verdict,
            detector: outcome.detector,
            under,
            original: original.clone(),
            transition: match transition {
                Some(TransitionFinding::Found(t)) => Some(t.to_string()),
                _ => None,
            },
            detail: detail.to_string(),
        }
    }
    /// Finds are the same when the minimized case and the outcome are.
    pub(crate) fn key(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.case.id(),
            self.verdict,
            self.detector,
            self.under
        )
    }
}

/// Keys of the finds already in a file (missing file: none).
pub(crate) fn known_finds(path: &std::path::Path) -> std::collections::HashSet<String> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<FuzzFind>(l).ok())
                .map(|f| f.key())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_bounded_and_boundary_biased() {
        let reg = kedge_ops::registry();
        let h200 = kedge_core::LimitsProfile::builtin("h200").unwrap();
        let sel = crate::select::Selection {
            ops: vec!["rms_norm".into()],
            ..Default::default()
        };
        let spec = FuzzSpec {
            filters: Filters::resolve(&reg, &sel).unwrap(),
            allocs: vec![AllocMode::Exact, AllocMode::Guard],
            max_elements: MaxElements::from_flag(Some(1 << 24), None),
        };
        let a = generate(&reg, &h200, &spec, 2000, 7);
        let b = generate(&reg, &h200, &spec, 2000, 7);
        assert_eq!(a, b);
        assert_eq!(a.len(), 2000);
        assert!(a
            .iter()
            .all(|c| crate::select::largest_tensor_elements(&reg, c) <= 1 << 24));
        // Both sides of the grid.y boundary show up.
        assert!(a.iter().any(|c| c.ne[2] == 65535));
        assert!(a.iter().any(|c| c.ne[2] >= 65536));
        assert!(a.iter().any(|c| c.alloc == AllocMode::Guard));
        assert!(a.iter().all(|c| !c.imp.starts_with("planted")));
        let c = generate(&reg, &h200, &spec, 2000, 8);
        assert_ne!(a, c);
    }

    #[test]
    fn finds_round_trip_as_a_corpus() {
        let c = Case::new("rms_norm", "ggml", kedge_core::DType::F32, [1, 1, 65536, 1]);
        let f = FuzzFind::new(
            &c,
            &c,
            Outcome {
                verdict: kedge_core::Verdict::LaunchError,
                detector: kedge_core::Detector::Driver,
            },
            Under::Native,
            None,
            "x",
        );
        let line = serde_json::to_string(&f).unwrap();
        let parsed = kedge_core::model::case::parse_corpus(&line).unwrap();
        assert_eq!(parsed[0].1, c);
    }
}
