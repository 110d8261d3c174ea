//! The order of expected yield, for a sweep with a time limit (`kedge sweep --max-time`).
//!
//! Where failures are likely comes first, so a sweep cut short has run those:
//!
//! 0. both sides of each boundary crossing: every probe of a boundary (the op's own and the
//!    generated ones: grid limits, 2^31 and 2^32 elements, the shared-memory row), its probe
//!    values next to each other, so a crossing is run as a pair (or not at all);
//! 1. both sides of the costly crossings, so a sweep cut short has run as many crossings as it
//!    could: those whose cases are big and judged whole (a CPU reference of the whole case:
//!    seconds to minutes each, where a sampled big case takes well under one), and under a
//!    sanitizer those that launch a kernel per index of a dimension the impl walks on the host
//!    (`ProbeBase::launch_loop_dims`) at least `SANITIZED_COSTLY_LAUNCHES` times: the tool
//!    checks every launch, and ggml's concat walking 65,535 slices of `ne[3]` took 34 to 267 s
//!    under memcheck on an H100 (half a second natively);
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
/// Both sides of a costly crossing: a big case judged whole, or under a sanitizer a case of many
/// host-side launches.
pub const COSTLY_CROSSING: u8 = 1;
/// A dtype other than the op's first.
pub(crate) const OTHER_DTYPE: u8 = 2;
/// Everything else.
pub(crate) const REST: u8 = 3;

/// Under a sanitizer, a crossing whose case launches a kernel this many times or more (one per
/// index of a dimension walked on the host) is costly: at 0.5 to 4 ms a checked launch (memcheck
/// on an H100), a second or more a case.
pub const SANITIZED_COSTLY_LAUNCHES: i64 = 1024;

/// What each class is, as the sweep says it.
pub(crate) fn classes(sanitized: bool) -> String {
    let costly = if sanitized {
        format!("those with a big case judged whole or with {SANITIZED_COSTLY_LAUNCHES} host-side launches or more after the others")
    } else {
        "those with a big case judged whole after the others".to_string()
    };
    format!("both sides of each boundary crossing first ({costly}), then dtypes other than each op's first, then the rest")
}

/// How many launches `c` makes on the host's loops: the product of its sizes on the dimensions
/// the op's probe base walks on the host, for a case with the base's parameters; 1 otherwise.
/// The declaration is of the base's layout alone: another may take one launch (a view on the
/// kernel's grid) or loop as well (ggml's concat loops over a view whose first three dimensions
/// are contiguous, as a view of `ne[1] = ne[2] = 1` is), and is counted as one launch.
fn host_loop_launches(op: &dyn kedge_core::Op, c: &Case, filled: &Params) -> i64 {
    let Some(base) = op.probe_base() else {
        return 1;
    };
    if base.launch_loop_dims.is_empty() {
        return 1;
    }
    let base_params = check_params(op.name(), op.params(), &base.params).unwrap_or_default();
    if &base_params != filled {
        return 1;
    }
    base.launch_loop_dims
        .iter()
        .map(|&d| c.ne.get(d).copied().unwrap_or(1).max(1))
        .product()
}

/// The rank of every case's key. A case is a boundary's probe when its op, dtype and shape are
/// those of one of the boundary's probes and it has the boundary's parameters that are not
/// at their defaults (other parameters, `--param` overrides among them, do not matter:
/// `Boundary::probes`).
fn ranks(
    reg: &Registry,
    limits: &LimitsProfile,
    cases: &[Case],
    judging: Judging,
    sanitized: bool,
) -> HashMap<ReferenceKey, Rank> {
    let mut out: HashMap<ReferenceKey, Rank> = HashMap::new();
    // The costly groups (a big case judged whole; many checked launches): the whole group
    // (both sides) goes after the other crossings.
    let mut costly_groups: std::collections::HashSet<u32> = Default::default();
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
                let costly = big_and_whole(op, c, judging)
                    || (sanitized && {
                        let filled =
                            check_params(op.name(), op.params(), &c.params).unwrap_or_default();
                        host_loop_launches(op, c, &filled) >= SANITIZED_COSTLY_LAUNCHES
                    });
                if costly {
                    costly_groups.insert(g);
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
        if r.group.is_some_and(|g| costly_groups.contains(&g)) {
            r.class = COSTLY_CROSSING;
        }
    }
    out
}

/// `cases` in the order of expected yield (each key's cases together, in their order), and the
/// order itself, for executors and for a resumed sweep to keep (the same cases and the same
/// `sanitized` give the same order). `sanitized`: the sweep runs under a sanitizer.
pub fn by_yield(
    reg: &Registry,
    limits: &LimitsProfile,
    cases: &[Case],
    judging: Judging,
    sanitized: bool,
) -> (Vec<Case>, YieldOrder) {
    let ranks = ranks(reg, limits, cases, judging, sanitized);
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
    use kedge_core::OpParams;

    /// The registry, the h200 profile, and the default suite of `ops` on it.
    fn default_suite_of(ops: &[&str]) -> (Registry, LimitsProfile, Vec<Case>) {
        default_suite_in(kedge_ops::registry(), ops)
    }

    /// `reg`, the h200 profile, and the default suite of `ops` in `reg`.
    fn default_suite_in(reg: Registry, ops: &[&str]) -> (Registry, LimitsProfile, Vec<Case>) {
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
        let (ordered, r) = by_yield(&reg, &h200, &cases, Judging::Auto, false);
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
        assert_eq!(
            by_yield(&reg, &h200, &cases, Judging::Auto, false).0,
            ordered
        );
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
                >= kedge_core::judge::sample::BIG_FROM
        };
        let (ordered, r) = by_yield(&reg, &h200, &cases, Judging::Full, false);
        let classes: Vec<u8> = ordered.iter().map(|c| r.rank(c).class).collect();
        assert!(classes.windows(2).all(|w| w[0] <= w[1]), "{classes:?}");
        let whole: Vec<&Case> = ordered
            .iter()
            .filter(|c| r.rank(c).class == COSTLY_CROSSING)
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
            let whole_group = classes.contains(&COSTLY_CROSSING);
            assert_eq!(whole_group, *has_big, "group {g}");
        }
        // The grid.y pair of 65535 and 65536 rows (4M elements) stays an ordinary crossing.
        let grid = ordered
            .iter()
            .find(|c| c.ne == [64, 1, 65536, 1] && c.dtype == DType::F32)
            .unwrap();
        assert_eq!(r.rank(grid).class, CROSSING);
        // Judged on samples, no crossing of rms_norm's is costly.
        let (_, auto) = by_yield(&reg, &h200, &cases, Judging::Auto, false);
        assert!(cases.iter().all(|c| auto.rank(c).class != COSTLY_CROSSING));
    }

    kedge_core::params! {
        /// The looping op's one parameter: a view that takes the kernel's own grid.
        pub(crate) struct LoopParams {
            v: int(0..=1) = 0, "1: a view, one launch";
        }
    }

    /// An op whose impl walks `ne[3]` on the host, one launch per index (as ggml's concat
    /// does), with a boundary of its own on `ne[3]` in a layout of one launch (`v` = 1).
    struct Looping;
    static LOOPING: Looping = Looping;

    fn no_launches(_c: &Case, _l: &LimitsProfile) -> Result<kedge_core::Plan, kedge_core::Refusal> {
        Ok(kedge_core::Plan::default())
    }

    static LOOPING_IMPL: kedge_core::KernelImpl = kedge_core::KernelImpl {
        name: "only",
        role: kedge_core::ImplRole::Fixed,
        about: "a plan that launches nothing",
        plan: no_launches,
    };

    impl kedge_core::Op for Looping {
        fn name(&self) -> &'static str {
            "looping"
        }
        fn about(&self) -> &'static str {
            "an op walking ne[3] on the host"
        }
        fn dtypes(&self) -> &'static [DType] {
            &[DType::F32]
        }
        fn params(&self) -> &'static [kedge_core::ParamSpec] {
            LoopParams::SPECS
        }
        fn impls(&self) -> Vec<&'static dyn kedge_core::Impl> {
            vec![&LOOPING_IMPL]
        }
        fn tensors(&self, c: &Case) -> Result<Vec<kedge_core::TensorSpec>, kedge_core::CaseError> {
            use kedge_core::{Role, TensorSpec};
            Ok(vec![
                TensorSpec::dense("x", Role::Input, c.dtype, c.ne)?,
                TensorSpec::dense("dst", Role::Output, c.dtype, c.ne)?,
            ])
        }
        fn reference(
            &self,
            _c: &Case,
            inputs: &[kedge_core::HostTensor],
        ) -> Result<Vec<Vec<f64>>, kedge_core::CaseError> {
            Ok(vec![inputs[0].to_f64()])
        }
        fn boundaries(&self, _l: &LimitsProfile) -> Vec<Boundary> {
            vec![Boundary::ne(
                "ne[3] on grid.z in the view's layout",
                3,
                65536,
                [64, 1, 1, 0],
                kedge_core::Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536])
            .with_params(|p: &mut LoopParams| p.v = 1)]
        }
        fn probe_base(&self) -> Option<kedge_core::ProbeBase> {
            Some(kedge_core::ProbeBase {
                launch_loop_dims: &[3],
                ..kedge_core::ProbeBase::rows([64, 1, 1, 1])
            })
        }
        fn smoke(&self) -> Vec<(kedge_core::Ne, Params)> {
            vec![([8, 2, 1, 1], Params::new())]
        }
        fn upstream(&self, _c: &Case) -> Option<kedge_core::UpstreamRepro> {
            None
        }
    }

    /// Under a sanitizer, a crossing of 1,024 host-side launches or more goes after the other
    /// crossings, both sides together; natively it is an ordinary crossing, and so is the same
    /// size in a layout of one launch and a crossing on a dimension on the kernel's grid.
    #[test]
    fn under_a_sanitizer_crossings_of_many_host_launches_come_after_the_others() {
        let (reg, h200, cases) = default_suite_in(Registry::new(vec![&LOOPING]), &["looping"]);
        let find = |ne: [i64; 4], v: i64| {
            cases
                .iter()
                .find(|c| c.ne == ne && LoopParams::of(*c).v == v)
                .unwrap_or_else(|| panic!("{ne:?} v={v} not in the suite"))
        };
        let looped = [find([64, 1, 1, 65535], 0), find([64, 1, 1, 65536], 0)];
        let threads = [find([64, 1, 1, 1024], 0), find([64, 1, 1, 1025], 0)];
        let view = find([64, 1, 1, 65536], 1);
        let grid_y = find([64, 1, 65536, 1], 0);

        let (_, native) = by_yield(&reg, &h200, &cases, Judging::Auto, false);
        for c in looped.iter().chain(&threads) {
            assert_eq!(native.rank(c).class, CROSSING, "{:?}", c.ne);
        }

        let (ordered, sanitized) = by_yield(&reg, &h200, &cases, Judging::Auto, true);
        let classes: Vec<u8> = ordered.iter().map(|c| sanitized.rank(c).class).collect();
        assert!(classes.windows(2).all(|w| w[0] <= w[1]), "{classes:?}");
        for c in looped.iter().chain(&threads) {
            assert_eq!(sanitized.rank(c).class, COSTLY_CROSSING, "{:?}", c.ne);
        }
        // Both sides of each costly crossing are one group.
        assert_eq!(
            sanitized.rank(looped[0]).group,
            sanitized.rank(looped[1]).group
        );
        assert_eq!(sanitized.rank(view).class, CROSSING);
        assert_eq!(sanitized.rank(grid_y).class, CROSSING);
        // The cheap crossings come first, the costly ones before the other classes.
        let pos = |c: &Case| ordered.iter().position(|o| o == c).unwrap();
        assert!(pos(grid_y) < pos(looped[0]) && pos(view) < pos(looped[0]));
    }
}
