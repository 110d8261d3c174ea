//! The order of expected yield, for a sweep with a time limit (`kedge sweep --max-time`).
//!
//! Where failures are likely comes first, so a sweep cut short has run those:
//!
//! 0. both sides of each boundary crossing: every probe of a boundary (the op's own and the
//!    generated ones: grid limits, 2^31 and 2^32 elements, the shared-memory row), its probe
//!    values next to each other, so a crossing is run as a pair (or not at all);
//! 1. both sides of the crossings whose cases are big and judged whole (a CPU reference of the
//!    whole case: seconds to minutes each, where a sampled big case takes well under one), so
//!    a sweep cut short has run as many crossings as it could;
//! 2. the other cases in a dtype other than the op's first (its kernels' other vector widths
//!    and tails);
//! 3. the rest (smoke shapes, corpus lines).
//!
//! Within a class each op's groups are spread over the class as `run::units_by_reference`
//! spreads units, and a key's impls stay one unit. The order depends on the cases (and their
//! order in the suite) alone, so it is the same in every run of the same selection.

use crate::run::{Rank, YieldOrder};
use crate::select::suite;
use kedge_core::engine::ReferenceKey;
use kedge_core::judge::sample::{big_and_whole, Judging};
use kedge_core::model::params::check_params;
use kedge_core::{Boundary, Case, DType, LimitsProfile, Params, Registry};
use std::collections::HashMap;

/// Both sides of a boundary crossing.
pub const CROSSING: u8 = 0;
/// Both sides of a crossing with a big case judged whole.
pub const WHOLE_CROSSING: u8 = 1;
/// A dtype other than the op's first.
pub(crate) const OTHER_DTYPE: u8 = 2;
/// Everything else.
pub(crate) const REST: u8 = 3;

/// What each class is, as the sweep says it.
pub(crate) const CLASSES: &str = "both sides of each boundary crossing first (those with a big case judged whole after the others), then dtypes other than each op's first, then the rest";

/// The rank of every case's key. A case is a boundary's probe when its op, dtype and shape are
/// those of one of the boundary's probes and it has the boundary's parameters that are not
/// at their defaults (other parameters, `--param` overrides among them, do not matter:
/// `Boundary::probes`).
fn ranks(
    reg: &Registry,
    limits: &LimitsProfile,
    cases: &[Case],
    judging: Judging,
) -> HashMap<ReferenceKey, Rank> {
    let mut out: HashMap<ReferenceKey, Rank> = HashMap::new();
    // The groups with a big case judged whole: the whole group (both sides) goes after the
    // other crossings.
    let mut whole_groups: std::collections::HashSet<u32> = Default::default();
    // Each (op, dtype)'s boundaries, computed once.
    let mut bounds: HashMap<(String, DType), Vec<Boundary>> = HashMap::new();
    // Each op's parameters at their defaults.
    let mut defaults: HashMap<String, Params> = HashMap::new();
    // Group numbers, in the order groups are first met.
    let mut groups: HashMap<(String, DType, usize), u32> = HashMap::new();
    for c in cases {
        let key = ReferenceKey::of(c);
        if out.contains_key(&key) {
            continue;
        }
        let Ok(op) = reg.op(&c.op) else {
            out.insert(
                key,
                Rank {
                    class: REST,
                    group: None,
                },
            );
            continue;
        };
        let first = op.dtypes().first().copied().unwrap_or(c.dtype);
        let bs = bounds
            .entry((c.op.clone(), c.dtype))
            .or_insert_with(|| suite::boundaries(op, limits, c.dtype));
        let defaults = defaults.entry(c.op.clone()).or_insert_with(|| {
            check_params(op.name(), op.params(), &Params::new()).unwrap_or_default()
        });
        let probe = bs.iter().position(|b| b.probes(c, defaults));
        let rank = match probe {
            Some(b) => {
                let n = groups.len() as u32;
                let g = *groups.entry((c.op.clone(), c.dtype, b)).or_insert(n);
                if big_and_whole(op, c, judging) {
                    whole_groups.insert(g);
                }
                Rank {
                    class: CROSSING,
                    group: Some(g),
                }
            }
            None if c.dtype != first => Rank {
                class: OTHER_DTYPE,
                group: None,
            },
            None => Rank {
                class: REST,
                group: None,
            },
        };
        out.insert(key, rank);
    }
    for r in out.values_mut() {
        if r.group.is_some_and(|g| whole_groups.contains(&g)) {
            r.class = WHOLE_CROSSING;
        }
    }
    out
}

/// `cases` in the order of expected yield (each key's cases together, in their order), and the
/// order itself, for executors and for a resumed sweep to keep.
pub fn by_yield(
    reg: &Registry,
    limits: &LimitsProfile,
    cases: &[Case],
    judging: Judging,
) -> (Vec<Case>, YieldOrder) {
    let ranks = ranks(reg, limits, cases, judging);
    let rank = |c: &Case| ranks.get(&ReferenceKey::of(c)).copied().unwrap_or_default();
    let ordered = crate::run::units_ranked(cases, rank).0;
    let mut positions = HashMap::new();
    for c in &ordered {
        let n = positions.len();
        positions.entry(ReferenceKey::of(c)).or_insert(n);
    }
    (ordered, YieldOrder { ranks, positions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::{Selection, Suite};

    /// The registry, the h200 profile, and the default suite of `ops` on it.
    fn default_suite_of(ops: &[&str]) -> (Registry, LimitsProfile, Vec<Case>) {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let sel = Selection {
            ops: ops.iter().map(|o| o.to_string()).collect(),
            ..Selection::default()
        };
        let cases = sel
            .cases(
                &reg,
                Suite::Default,
                &h200,
                None,
                &crate::events::Events::default(),
            )
            .unwrap();
        (reg, h200, cases)
    }

    #[test]
    fn crossings_come_first_as_pairs_then_other_dtypes_then_the_rest() {
        let (reg, h200, mut cases) = default_suite_of(&["rms_norm", "softmax"]);
        // A case in an op's second dtype that probes no boundary, as a corpus line would add.
        let op = reg.op("sdpa_prefill").unwrap();
        let d1 = op.dtypes()[1];
        let imp = reg.impls_of(op)[0].name().to_string();
        let (ne, params) = op.smoke()[0].clone();
        let mut other = Case::new("sdpa_prefill", &imp, d1, ne);
        other.params = params;
        let other = reg.validate(&other).unwrap_or_else(|e| panic!("{e}"));
        cases.push(other.clone());
        let (ordered, r) = by_yield(&reg, &h200, &cases, Judging::Auto);
        assert_eq!(ordered.len(), cases.len());
        let classes: Vec<u8> = ordered.iter().map(|c| r.rank(c).class).collect();
        assert!(classes.windows(2).all(|w| w[0] <= w[1]), "{classes:?}");
        assert!(classes.contains(&CROSSING) && classes.contains(&REST));
        // The grid.y probes of rms_norm ne[2] (65535 and 65536) are one group, next to each
        // other (with every impl of each shape between them).
        let at = |n2: i64| {
            ordered
                .iter()
                .position(|c| c.op == "rms_norm" && c.ne == [64, 1, n2, 1] && c.dtype == DType::F32)
                .unwrap_or_else(|| panic!("ne[2] = {n2} not in the suite"))
        };
        let (lo, hi) = (at(65535), at(65536));
        let g = r.rank(&ordered[lo]).group;
        assert!(g.is_some());
        assert_eq!(r.rank(&ordered[hi]).group, g);
        assert!(ordered[lo.min(hi)..=lo.max(hi)]
            .iter()
            .all(|c| r.rank(c).group == g));
        // The smoke shapes are the rest; the other dtype's case sits between.
        let smoke = reg.op("rms_norm").unwrap().smoke()[0].0;
        let s = ordered
            .iter()
            .position(|c| c.op == "rms_norm" && c.ne == smoke && c.dtype == DType::F32)
            .unwrap();
        assert_eq!(r.rank(&ordered[s]).class, REST);
        let o = ordered.iter().position(|c| c == &other).unwrap();
        assert_eq!(r.rank(&ordered[o]).class, OTHER_DTYPE);
        assert!(classes[..o].iter().all(|&k| k != REST));
        // Deterministic: the same cases give the same order.
        assert_eq!(by_yield(&reg, &h200, &cases, Judging::Auto).0, ordered);
    }

    /// Judged whole (`--judge full`), a crossing with a case of 2^26 elements or more comes
    /// after every crossing of small cases, both of its sides together, and before the other
    /// classes; judged on samples (`auto`), the same crossing is an ordinary one.
    #[test]
    fn crossings_with_big_cases_judged_whole_come_after_the_others_as_pairs() {
        let (reg, h200, cases) = default_suite_of(&["rms_norm"]);
        let op = reg.op("rms_norm").unwrap();
        let big = |c: &Case| {
            op.tensors(c)
                .map(|v| v.iter().map(|s| s.nelements()).max().unwrap_or(0))
                .unwrap_or(0)
                >= kedge_core::judge::sample::SAMPLED_FROM
        };
        let (ordered, r) = by_yield(&reg, &h200, &cases, Judging::Full);
        let classes: Vec<u8> = ordered.iter().map(|c| r.rank(c).class).collect();
        assert!(classes.windows(2).all(|w| w[0] <= w[1]), "{classes:?}");
        let whole: Vec<&Case> = ordered
            .iter()
            .filter(|c| r.rank(c).class == WHOLE_CROSSING)
            .collect();
        assert!(whole.len() > 10, "{} whole crossings' cases", whole.len());
        // Each such group has a big case, and no group is split across the two classes.
        let mut groups: HashMap<u32, (bool, std::collections::BTreeSet<u8>)> = HashMap::new();
        for c in &ordered {
            let rk = r.rank(c);
            if let Some(g) = rk.group {
                let e = groups.entry(g).or_default();
                e.0 |= big(c);
                e.1.insert(rk.class);
            }
        }
        for (g, (has_big, classes)) in &groups {
            assert_eq!(classes.len(), 1, "group {g} split: {classes:?}");
            let whole_group = classes.contains(&WHOLE_CROSSING);
            assert_eq!(whole_group, *has_big, "group {g}");
        }
        // The grid.y pair of 65535 and 65536 rows (4M elements) stays an ordinary crossing.
        let grid = ordered
            .iter()
            .find(|c| c.ne == [64, 1, 65536, 1] && c.dtype == DType::F32)
            .unwrap();
        assert_eq!(r.rank(grid).class, CROSSING);
        // Judged on samples, no crossing of rms_norm's is costly.
        let (_, auto) = by_yield(&reg, &h200, &cases, Judging::Auto);
        assert!(cases.iter().all(|c| auto.rank(c).class != WHOLE_CROSSING));
    }
}
