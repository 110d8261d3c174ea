//! Boundaries: values of a dimension or parameter where behaviour may change, each with the
//! workload that reaches it. An op declares its own (implementation thresholds); kedge
//! generates the ones that come from the hardware and the data (`generated`). Both expand to
//! cases the same way (`Boundary::cases`).

use crate::model::case::Case;
use crate::model::dtype::DType;
use crate::model::limits::LimitsProfile;
use crate::model::params::Params;
use crate::model::shape::Ne;

/// Which real workload puts a boundary value there, or that none is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach(pub &'static str);

impl Reach {
    /// A boundary no known workload reaches.
    pub const SYNTHETIC: Reach = Reach("synthetic: no known model reaches it");
    /// A boundary kedge derived from the device's limits, not from the op's code.
    pub const GENERATED: Reach = Reach(
        "generated from the device's limits: no known workload named (see the case's reach note)",
    );
}

/// The axis a boundary moves.
#[derive(Debug, Clone, PartialEq)]
pub enum Axis {
    /// Dimension `ne[i]`.
    Ne(usize),
    /// A numeric parameter of the op.
    Param(&'static str),
}

/// A value where behaviour may change. The generator probes `at - 1`, `at`, `at + 1`
/// (or the explicit `values`), on `base` for the other dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Boundary {
    /// What the boundary is, as reports name it (`grid.y limit`).
    pub label: String,
    /// The dimension or parameter it moves.
    pub axis: Axis,
    /// The value where behaviour may change.
    pub at: i64,
    /// Explicit probe values instead of at-1, at, at+1 (still both sides of `at`).
    pub values: Vec<i64>,
    /// The shape of the other dimensions.
    pub base: Ne,
    /// The op's parameters in every probe.
    pub params: Params,
    /// Only this dtype (`None`: the op's default).
    pub dtype: Option<DType>,
    /// Only these impls (empty: all impls of the op).
    pub impls: Vec<&'static str>,
    /// The workload that reaches it.
    pub reach: Reach,
}

impl Boundary {
    /// A boundary of dimension `ne[dim]` at `at`, on `base`.
    pub fn ne(label: impl Into<String>, dim: usize, at: i64, base: Ne, reach: Reach) -> Self {
        Boundary {
            label: label.into(),
            axis: Axis::Ne(dim),
            at,
            values: Vec::new(),
            base,
            params: Params::new(),
            dtype: None,
            impls: Vec::new(),
            reach,
        }
    }
    /// A boundary of parameter `name` at `at`, on `base`.
    pub fn param(
        label: impl Into<String>,
        name: &'static str,
        at: i64,
        base: Ne,
        reach: Reach,
    ) -> Self {
        Boundary {
            axis: Axis::Param(name),
            ..Boundary::ne(label, 0, at, base, reach)
        }
    }
    /// The same boundary with parameter `name` set in every probe.
    pub fn with_param(mut self, name: &str, v: impl Into<serde_json::Value>) -> Self {
        self.params.insert(name.to_string(), v.into());
        self
    }
    /// The same boundary (in every probe) with some of the op's parameters set, typed: `set` gets them as they
    /// are (unset ones at their defaults) and changes what it names, e.g.
    /// `.with_params(|p: &mut SoftmaxParams| p.mask = true)`.
    pub fn with_params<P: crate::model::params::OpParams>(
        mut self,
        set: impl FnOnce(&mut P),
    ) -> Self {
        self.params = P::set_in(&self.params, set);
        self
    }
    /// Probe these values instead of `at - 1`, `at`, `at + 1`.
    pub fn with_values(mut self, values: Vec<i64>) -> Self {
        self.values = values;
        self
    }
    /// Probe only these impls.
    pub fn only(mut self, impls: &[&'static str]) -> Self {
        self.impls = impls.to_vec();
        self
    }
    /// Probe in this dtype.
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = Some(d);
        self
    }
    /// The values probed: `values`, or `at - 1`, `at`, `at + 1`.
    pub fn probe_values(&self) -> Vec<i64> {
        if self.values.is_empty() {
            vec![self.at - 1, self.at, self.at + 1]
        } else {
            self.values.clone()
        }
    }
    /// The boundary's cases for one impl (none when the boundary names other impls): one per
    /// probe value of at least 1, on `base` for the other dimensions. Not yet validated.
    pub fn cases(&self, op: &str, imp: &str, default_dtype: DType) -> Vec<Case> {
        if !self.impls.is_empty() && !self.impls.contains(&imp) {
            return Vec::new();
        }
        self.probe_values()
            .into_iter()
            .filter(|&v| v >= 1)
            .map(|v| {
                let mut c = Case::new(op, imp, self.dtype.unwrap_or(default_dtype), self.base);
                c.params = self.params.clone();
                match self.axis {
                    Axis::Ne(d) => c.ne[d] = v,
                    Axis::Param(p) => {
                        c.params.insert(p.to_string(), v.into());
                    }
                }
                c
            })
            .collect()
    }
}

impl Boundary {
    /// Whether `case` is one of this boundary's probes: its dtype, its shape (rounded to
    /// whole blocks, as suites make them) and the boundary's parameters, other than those at
    /// their defaults (`defaults`: the op's parameters filled in). A typed declaration writes
    /// every parameter; one left at its default says nothing about the boundary, so a case
    /// with another value there (a `--param` override) is still its probe.
    pub fn probes(&self, case: &Case, defaults: &Params) -> bool {
        self.cases(&case.op, &case.imp, case.dtype).iter().any(|p| {
            p.dtype == case.dtype
                && whole_blocks(p.ne, case.dtype) == case.ne
                && p.params
                    .iter()
                    .filter(|(k, v)| defaults.get(*k) != Some(*v))
                    .all(|(k, v)| case.params.get(k) == Some(v))
        })
    }
}

/// Where the generated boundaries of an op start (`Op::probe_base`): a small valid shape and
/// which of its dimensions may move.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeBase {
    /// The base shape.
    pub ne: Ne,
    /// The parameters of every generated probe.
    pub params: Params,
    /// Dimensions (1..=3) probed at the grid.y/z limits, both sides.
    pub grid_dims: &'static [usize],
    /// The dimension moved to take the element count across 2^31 and 2^32 (and the byte
    /// count across 2^31); `None` leaves those out.
    pub count_dim: Option<usize>,
    /// Probe `ne[0]` as a row staged in shared memory (across the shared-memory limits).
    pub row_dim: bool,
    /// `ne[0]` is free: probed around the dtype's vector widths or blocks, and at the
    /// threads-per-block limit (false where the op ties `ne[0]` to another dimension).
    pub vec_dim: bool,
    /// Free dimensions the impl walks on the host, one launch per index (concat.cu:149 launches
    /// a kernel per `ne[3]` slice): probed at the grid, shared-memory and thread limits like
    /// the others, but not across 2^31 elements, which would be tens of millions of launches
    /// and minutes a case, upstream's harness included. The op declares one such case itself
    /// where it wants the loop's cost seen.
    pub launch_loop_dims: &'static [usize],
}

impl ProbeBase {
    /// A row op: every dimension above `ne[0]` free, `ne[1]` carries the element count, `ne[0]` is
    /// the row.
    pub fn rows(ne: Ne) -> ProbeBase {
        ProbeBase {
            ne,
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(1),
            row_dim: true,
            vec_dim: true,
            launch_loop_dims: &[],
        }
    }
}

/// `ne` with `ne[0]` rounded up to whole blocks of `dtype` (unchanged for a plain type).
pub fn whole_blocks(mut ne: Ne, dtype: DType) -> Ne {
    let b = dtype.block() as i64;
    if b > 1 && ne[0] > 0 {
        ne[0] = (ne[0] + b - 1) / b * b;
    }
    ne
}

/// The boundaries kedge derives from the hardware and the data, for kernels whose grid it
/// cannot read, in `dtype` (element sizes, vector widths and block sizes are the dtype's). Each
/// probe keeps the other dimensions at the small base, and every one is both sides of its
/// value:
/// - each free dimension at the grid.y and grid.z limits (the value that fits and one past it);
/// - the element count across 2^31 on every free dimension (signed 32-bit indices), with one
///   more row so the last row *starts* past 2^31 (`row * ncols` in 32 bits, at half the memory
///   of a 2^32 case); across 2^32 on the count dimension (unsigned counts), likewise; the byte
///   count across 2^31 (signed byte offsets);
/// - the shared-memory opt-in and default limits divided by the element size, and those by 2,
///   4 and 8, on `ne[0]` (a row staged in shared memory) and on every free dimension;
/// - the threads-per-block limit on `ne[0]` and every free dimension;
/// - `ne[0]` around each vector width (2, 4, 8 elements: one vector, and 256 threads' worth),
///   or for a block format around whole blocks (1 to 3, 7 to 9 and 31 to 33 blocks).
///
/// The generator does not know each op's shape rules: a probe the op refuses (an odd row
/// where it needs an even one) is left out when the suite is built, and counted.
pub fn generated(base: &ProbeBase, limits: &LimitsProfile, dtype: DType) -> Vec<Boundary> {
    let mut g = Generated {
        base,
        limits,
        dtype,
        // A block format's rows are whole blocks: the base row rounded up to one.
        base_ne: whole_blocks(base.ne, dtype),
        out: Vec::new(),
    };
    g.grid_limits();
    g.counts();
    g.shared_memory_and_threads();
    g.vector_widths();
    g.out
}

/// The boundaries `generated` derives, as it adds them: each kind of limit is a method, in
/// the order the boundaries are listed.
struct Generated<'a> {
    base: &'a ProbeBase,
    limits: &'a LimitsProfile,
    dtype: DType,
    /// The shape every probe starts from (`base.ne` in whole blocks).
    base_ne: Ne,
    out: Vec<Boundary>,
}

impl Generated<'_> {
    /// A boundary on `ne[dim]` probing `values` (sorted, each once, at least 1), at the
    /// largest of them, with the base's parameters, in the dtype.
    fn push(&mut self, label: String, dim: usize, mut values: Vec<i64>) {
        values.sort_unstable();
        values.dedup();
        values.retain(|&v| v >= 1);
        let at = values.last().copied().unwrap_or(1);
        let mut b =
            Boundary::ne(label, dim, at, self.base_ne, Reach::GENERATED).with_values(values);
        b.params = self.base.params.clone();
        b.dtype = Some(self.dtype);
        self.out.push(b);
    }

    /// Each free dimension at the grid.y and grid.z limits (one boundary when they are equal).
    fn grid_limits(&mut self) {
        let gy = self.limits.grid_limit(1) as i64;
        let gz = self.limits.grid_limit(2) as i64;
        for &d in self.base.grid_dims {
            if gy == gz {
                self.push(
                    format!("ne[{d}] at the grid.y/z limit {gy} (generated)"),
                    d,
                    vec![gy, gy + 1],
                );
            } else {
                for (axis, lim) in [("y", gy), ("z", gz)] {
                    self.push(
                        format!("ne[{d}] at the grid.{axis} limit {lim} (generated)"),
                        d,
                        vec![lim, lim + 1],
                    );
                }
            }
        }
    }

    /// The element and byte counts across their 32-bit limits: on the count dimension first,
    /// then on every other free dimension.
    fn counts(&mut self) {
        let base = self.base;
        let mut count_dims: Vec<usize> = base.count_dim.into_iter().collect();
        count_dims.extend(
            base.grid_dims
                .iter()
                .copied()
                .filter(|d| Some(*d) != base.count_dim),
        );
        count_dims.retain(|d| !base.launch_loop_dims.contains(d));
        for d in count_dims {
            let others: i64 = (0..4)
                .filter(|&i| i != d)
                .map(|i| self.base_ne[i].max(1))
                .product();
            // Elements in one step of `d` below it: where a row of the dimension starts.
            let below: i64 = (0..d).map(|i| self.base_ne[i].max(1)).product();
            for (what, t, row_start) in self.count_thresholds(d) {
                // The largest value whose count stays below the threshold, the next, and (for
                // an element threshold) the first whose last step of `d` starts at or past it.
                let lo = (t - 1) / others;
                if lo < 1 {
                    continue;
                }
                let mut values = vec![lo, lo + 1];
                if row_start && below > 0 && others / below.max(1) == 1 {
                    // The last row along `d` starts at (v - 1) * below.
                    let first_past = t / below + 1;
                    values.push(first_past);
                }
                self.push(format!("ne[{d}]: {what} (generated)"), d, values);
            }
        }
    }

    /// The counts dimension `d` is probed across: what each is, its value, and whether it is
    /// an element count (whose last row is also probed starting past it).
    fn count_thresholds(&self, d: usize) -> Vec<(&'static str, i64, bool)> {
        let dtype = self.dtype;
        // Elements and bytes: a block format's element count is its blocks' (bytes_of).
        let bytes_of = |n: i64| dtype.bytes_of(n.max(0) as u64) as i64;
        let mut thresholds = vec![(
            "elements across 2^31 (signed 32-bit index)",
            1i64 << 31,
            true,
        )];
        if Some(d) == self.base.count_dim {
            thresholds.push((
                "elements across 2^32 (unsigned 32-bit count)",
                1i64 << 32,
                true,
            ));
            if dtype.size() > 1 || dtype.is_block() {
                // The most elements whose bytes stay below 2^31.
                let mut n = (1i64 << 31) * dtype.block() as i64 / dtype.size() as i64;
                while n > 0 && bytes_of(n) >= 1 << 31 {
                    n -= 1;
                }
                thresholds.push((
                    "bytes across 2^31 (signed 32-bit byte offset)",
                    n + 1,
                    false,
                ));
            }
        }
        thresholds
    }

    /// Shared memory and threads: on ne[0] when it is a row, and on every free dimension. Not
    /// for a block format: a kernel stages its dequantized values, whose sizes the plain types'
    /// ladders probe already; its own probes are whole blocks on ne[0] (`vector_widths`).
    fn shared_memory_and_threads(&mut self) {
        let mut smem_dims: Vec<usize> = Vec::new();
        if !self.dtype.is_block() {
            if self.base.row_dim || self.base.vec_dim {
                smem_dims.push(0);
            }
            smem_dims.extend(self.base.grid_dims.iter().copied());
        }
        for d in smem_dims {
            self.shared_memory(d);
            self.threads(d);
        }
    }

    /// `ne[d]` at the shared-memory opt-in and default limits in elements, and those halved,
    /// quartered and eighthed.
    fn shared_memory(&mut self, d: usize) {
        let dtype = self.dtype;
        let per_elem = |bytes: u64| (bytes * dtype.block() / dtype.size().max(1)) as i64;
        for (which, limit) in [
            ("opt-in", self.limits.shared_per_block_optin.value),
            ("default", self.limits.shared_per_block.value),
        ] {
            let n = per_elem(limit);
            let mut values = Vec::new();
            for div in [1, 2, 4, 8] {
                let v = n / div;
                values.extend([v, v + 1]);
            }
            if dtype.is_block() && d == 0 {
                let b = dtype.block() as i64;
                values = values.into_iter().map(|v| (v + b - 1) / b * b).collect();
                values.extend(values.clone().into_iter().map(|v| v + b));
            }
            self.push(
                format!(
                    "ne[{d}]: the {limit}-byte shared-memory {which} limit in {dtype} elements ({n}), halves, quarters, eighths (generated)"
                ),
                d,
                values,
            );
        }
    }

    /// `ne[d]` at the threads-per-block limit.
    fn threads(&mut self, d: usize) {
        let t = self.limits.max_threads_per_block.value as i64;
        let values = if self.dtype.is_block() && d == 0 {
            let b = self.dtype.block() as i64;
            let w = (t + b - 1) / b * b;
            vec![w, w + b]
        } else {
            vec![t, t + 1]
        };
        self.push(
            format!("ne[{d}] at the {t}-threads-per-block limit (generated)"),
            d,
            values,
        );
    }

    /// `ne[0]` around whole blocks of a block format, or around each vector width of a plain
    /// type; nothing when `ne[0]` is not free.
    fn vector_widths(&mut self) {
        let dtype = self.dtype;
        if !self.base.vec_dim {
        } else if dtype.is_block() {
            let b = dtype.block() as i64;
            self.push(
                format!("ne[0] around whole {dtype} blocks of {b} (generated)"),
                0,
                [1, 2, 3, 7, 8, 9, 31, 32, 33]
                    .iter()
                    .map(|m| m * b)
                    .collect(),
            );
        } else {
            for w in [2i64, 4, 8] {
                self.push(
                    format!("ne[0] around the {w}-element vector width (generated)"),
                    0,
                    vec![w - 1, w, w + 1, 256 * w - 1, 256 * w, 256 * w + 1],
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> LimitsProfile {
        LimitsProfile::builtin("h200").expect("h200 profile")
    }

    /// A probe is recognised by its shape rounded to whole blocks and by the parameters the
    /// boundary sets away from their defaults; a parameter it leaves at its default may differ.
    #[test]
    fn a_case_probes_a_boundary_by_shape_and_its_own_parameters() {
        let mut b = Boundary::ne(
            "ne[1] across 65535",
            1,
            65536,
            [16, 1, 1, 1],
            Reach::SYNTHETIC,
        );
        // As a typed declaration writes them: every parameter, `dim` its own, `v` at default.
        b.params.insert("dim".into(), 1.into());
        b.params.insert("v".into(), 0.into());
        let defaults: Params = [("dim".to_string(), 0.into()), ("v".to_string(), 0.into())]
            .into_iter()
            .collect();
        let case = |dtype: DType, ne: Ne, dim: i64, v: i64| {
            let mut c = Case::new("op", "imp", dtype, ne);
            c.params.insert("dim".into(), dim.into());
            c.params.insert("v".into(), v.into());
            c
        };
        assert!(b.probes(&case(DType::F32, [16, 65536, 1, 1], 1, 0), &defaults));
        assert!(b.probes(&case(DType::F32, [16, 65535, 1, 1], 1, 0), &defaults));
        // `v` overridden: still the probe; `dim` not the boundary's: not.
        assert!(b.probes(&case(DType::F32, [16, 65536, 1, 1], 1, 1), &defaults));
        assert!(!b.probes(&case(DType::F32, [16, 65536, 1, 1], 0, 0), &defaults));
        // A block format's probe has whole blocks: ne[0] 16 becomes 32 in q4_0.
        assert!(b.probes(&case(DType::Q4_0, [32, 65536, 1, 1], 1, 0), &defaults));
        assert!(!b.probes(&case(DType::Q4_0, [16, 65536, 1, 1], 1, 0), &defaults));
        assert!(!b.probes(&case(DType::F32, [16, 65534, 1, 1], 1, 0), &defaults));
    }

    fn values_of<'a>(bs: &'a [Boundary], label: &str) -> Vec<&'a Boundary> {
        bs.iter().filter(|b| b.label.contains(label)).collect()
    }

    #[test]
    fn every_probe_is_both_sides_and_in_the_dtype() {
        let base = ProbeBase::rows([64, 1, 1, 1]);
        for d in [DType::F32, DType::F16, DType::Q4_0, DType::Q4K] {
            let bs = generated(&base, &h200(), d);
            assert!(!bs.is_empty());
            for b in &bs {
                assert_eq!(b.dtype, Some(d), "{}", b.label);
                assert!(b.values.len() >= 2, "{}: one side only", b.label);
                assert!(b.values.iter().all(|&v| v >= 1), "{}", b.label);
            }
        }
    }

    #[test]
    fn index_width_probes_cross_2_31_and_start_a_row_past_it() {
        let base = ProbeBase::rows([64, 1, 1, 1]);
        let bs = generated(&base, &h200(), DType::F32);
        let c = values_of(&bs, "ne[1]: elements across 2^31");
        assert_eq!(c.len(), 1);
        // 2^31 - 64 and 2^31 elements, then a row starting at 2^31.
        assert_eq!(c[0].values, vec![(1 << 25) - 1, 1 << 25, (1 << 25) + 1]);
        // Every free dimension crosses 2^31, only the count dimension 2^32.
        assert_eq!(values_of(&bs, "elements across 2^31").len(), 3);
        assert_eq!(values_of(&bs, "elements across 2^32").len(), 1);
        let bytes = values_of(&bs, "bytes across 2^31");
        assert_eq!(bytes[0].values, vec![(1 << 23) - 1, 1 << 23]);
        // f16: the byte boundary is at 2^30 elements.
        let bs = generated(&base, &h200(), DType::F16);
        let bytes = values_of(&bs, "bytes across 2^31");
        assert_eq!(bytes[0].values, vec![(1 << 24) - 1, 1 << 24]);
    }

    /// A dimension the impl walks one launch per index keeps its grid, shared-memory and
    /// thread probes and loses only its 2^31 crossing.
    #[test]
    fn a_launch_loop_dimension_is_not_taken_across_2_31() {
        let all = ProbeBase::rows([64, 1, 1, 1]);
        let looped = ProbeBase {
            launch_loop_dims: &[3],
            ..ProbeBase::rows([64, 1, 1, 1])
        };
        let (a, l) = (
            generated(&all, &h200(), DType::F32),
            generated(&looped, &h200(), DType::F32),
        );
        assert_eq!(values_of(&a, "ne[3]: elements across 2^31").len(), 1);
        assert!(values_of(&l, "ne[3]: elements across 2^31").is_empty());
        assert_eq!(values_of(&l, "elements across 2^31").len(), 2);
        for label in [
            "ne[3] at the grid",
            "ne[3]: the",
            "ne[3] at the 1024-threads",
        ] {
            assert_eq!(
                values_of(&a, label).len(),
                values_of(&l, label).len(),
                "{label}"
            );
            assert!(!values_of(&l, label).is_empty(), "{label}");
        }
        assert_eq!(a.len(), l.len() + 1);
    }

    #[test]
    fn shared_memory_ladders_are_in_elements_of_the_dtype_on_every_free_dimension() {
        let base = ProbeBase::rows([64, 1, 1, 1]);
        let bs = generated(&base, &h200(), DType::F32);
        let optin = values_of(&bs, "shared-memory opt-in");
        // ne[0] and the three free dimensions.
        assert_eq!(optin.len(), 4);
        let row = optin.iter().find(|b| b.axis == Axis::Ne(0)).expect("row");
        assert!(row.values.contains(&58112) && row.values.contains(&58113));
        assert!(row.values.contains(&7264) && row.values.contains(&7265));
        let bs = generated(&base, &h200(), DType::F16);
        let row = values_of(&bs, "shared-memory default")
            .into_iter()
            .find(|b| b.axis == Axis::Ne(0))
            .expect("row");
        assert!(row.values.contains(&24576) && row.values.contains(&24577));
        // A block format's rows stay whole blocks, and it has no ladders of its own.
        let bs = generated(&base, &h200(), DType::Q4_0);
        for b in bs.iter().filter(|b| b.axis == Axis::Ne(0)) {
            assert!(
                b.values.iter().all(|v| v % 32 == 0),
                "{}: {:?}",
                b.label,
                b.values
            );
        }
        assert!(values_of(&bs, "shared-memory").is_empty());
        assert!(bs.iter().all(|b| b.base[0] % 32 == 0));
    }

    #[test]
    fn vector_widths_are_probed_around_each_width() {
        let base = ProbeBase::rows([64, 1, 1, 1]);
        let bs = generated(&base, &h200(), DType::F16);
        let v = values_of(&bs, "4-element vector width");
        assert_eq!(v[0].values, vec![3, 4, 5, 1023, 1024, 1025]);
        let bs = generated(&base, &h200(), DType::Q4K);
        let v = values_of(&bs, "whole q4_K blocks");
        assert_eq!(v[0].values[..3], [256, 512, 768]);
    }
}
