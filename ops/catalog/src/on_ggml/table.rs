//! ggml's ops beyond kedge's own, declared as data, one entry each: their tensors, parameters,
//! graph, test-backend-ops line and the small base the generated boundaries start from. Their
//! reference is ggml's CPU backend from the same build (test-backend-ops' method), so they run
//! only when a ggml build is loaded (`--ggml DIR`), and never on the CPU backend itself.
//!
//! Case model: `case.ne` is the shape test-backend-ops' constructor takes (`ne`, `ne_a`, or the
//! op's own numbers where the constructor takes scalars, e.g. `[k, m, n, 1]` for a matrix
//! product), `case.dtype` its `type`, and the rest are typed parameters, so every case prints
//! as one constructor line and the `vars()` string upstream prints for it
//! (`scripts/check-upstream-lines.sh` compares the two with upstream's own build).
//!
//! Each entry's own boundaries carry the CUDA failure predicted from ggml's source that a case on
//! the failing side reproduces, by tag: A and B a grid.y/z limit, C a 32-bit index or size, D
//! something else (an assert, a memcpy pitch, ignored strides), with the `file:line` it comes
//! from beside it. The generated boundaries (`ProbeBase`) cover the grid.y/z limits and the
//! 2^31/2^32 element counts on every free dimension. `tests.rs` lists each prediction with the
//! case that reproduces it.

/// A smoke case with parameters, set typed on the op's parameters at their defaults:
/// `sp!([64, 3, 1, 1], |p: &mut ClampParams| { p.min = -0.1; p.max = 0.9 })`. The setter is a
/// closure that captures nothing (or a function), so the case is const data; a field the struct
/// does not have, or a value of another type, does not compile.
macro_rules! sp {
    ($ne:expr, $set:expr $(,)?) => {
        $crate::on_ggml::table::Smoke {
            ne: $ne,
            params: || $crate::params_with($set),
            dtype: None,
        }
    };
}

/// A smoke case with parameters, in one dtype: `spd!(ne, |p: &mut CpyParams| p.dst = "bf16",
/// DType::F32)`.
macro_rules! spd {
    ($ne:expr, $set:expr, $dtype:expr $(,)?) => {
        $crate::on_ggml::table::Smoke {
            ne: $ne,
            params: || $crate::params_with($set),
            dtype: Some($dtype),
        }
    };
}

mod conv;
mod elementwise;
mod layout;
mod matmul;
mod nn;
mod recurrent;
mod reduce;
mod train;

use super::exec::cpu_reference;
use super::GraphFn;
#[cfg(test)]
use kedge_core::contract::op::distinct_value;
use kedge_core::contract::op::{distinct_rows, permute_into};
use kedge_core::contract::upstream::ggml_float;
use kedge_core::model::rng::Rng;
use kedge_core::*;
use std::sync::OnceLock;

/// The block formats ggml quantizes only with an importance matrix: its CPU backend has no
/// `from_float` for them, so no copy or row write produces them there and nothing kedge can use
/// as a reference writes them (test-backend-ops skips those cases as unsupported on its CPU
/// side). They are read (dequantized) like every other format.
pub(crate) const IMATRIX_ONLY: &[DType] = &[
    DType::Iq2Xxs,
    DType::Iq2Xs,
    DType::Iq2S,
    DType::Iq3Xxs,
    DType::Iq1S,
    DType::Iq1M,
    DType::Iq3S,
];

const fn imatrix_only(d: DType) -> bool {
    let mut i = 0;
    while i < IMATRIX_ONLY.len() {
        if IMATRIX_ONLY[i] as u8 == d as u8 {
            return true;
        }
        i += 1;
    }
    false
}

const WRITABLE_LEN: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < matmul::WEIGHT_TYPE_LIST.len() {
        if !imatrix_only(matmul::WEIGHT_TYPE_LIST[i]) {
            n += 1;
        }
        i += 1;
    }
    n
};

const WRITABLE_LIST: [DType; WRITABLE_LEN] = {
    let mut out = [DType::F32; WRITABLE_LEN];
    let (mut i, mut j) = (0, 0);
    while i < matmul::WEIGHT_TYPE_LIST.len() {
        if !imatrix_only(matmul::WEIGHT_TYPE_LIST[i]) {
            out[j] = matmul::WEIGHT_TYPE_LIST[i];
            j += 1;
        }
        i += 1;
    }
    out
};

/// The types a kernel writes (SET_ROWS' destinations): test-backend-ops' `all_types`
/// (`matmul::WEIGHT_TYPES`: the float types and every block format of the pinned snapshot but
/// tq1_0) but `IMATRIX_ONLY`.
pub(crate) const WRITABLE_TYPES: &[DType] = &WRITABLE_LIST;

/// `matmul::WEIGHT_TYPES` and i32 (a copy or a gather of indices), i32 after the float types.
pub(crate) const ALL_TYPES_I32: &[DType] = &ALL_TYPES_I32_LIST;

const ALL_TYPES_I32_LIST: [DType; matmul::WEIGHT_TYPE_LIST.len() + 1] = {
    const FLOATS: usize = 3;
    let from = matmul::WEIGHT_TYPE_LIST;
    let mut out = [DType::I32; matmul::WEIGHT_TYPE_LIST.len() + 1];
    let mut i = 0;
    while i < from.len() {
        out[if i < FLOATS { i } else { i + 1 }] = from[i];
        i += 1;
    }
    out
};

/// GET_ROWS' tables: every type test-backend-ops gathers from.
pub(crate) const GET_ROWS_TYPES: &[DType] = ALL_TYPES_I32;

/// Inputs an entry makes itself (indices, positions, distinct rows).
pub(crate) type InputsFn = fn(&Case, &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError>;

/// How an entry's inputs are drawn. Drawn inputs (`Default`, `Uniform`) are what the device
/// draws too; inputs an entry makes are made whole on the host and uploaded, so a big case of
/// either is judged on sampled slices where its `Rows` allow.
#[derive(Clone, Copy)]
pub(crate) enum Inputs {
    /// Every input uniform in [-1, 1) (`random_inputs`).
    Default,
    /// Every input uniform in [lo, hi): the op's domain, as test-backend-ops draws it.
    Uniform(f32, f32),
    /// Every input uniform in the range this gives for the case: a domain that depends on the
    /// op or the dtype (test_unary's [-150, 150), f16 exp's [-10, 10)).
    UniformBy(fn(&Case) -> (f32, f32)),
    /// Every input of distinct rows (`contract::op::distinct_rows`: shuffled distinct values, so
    /// a sort or a maximum has one right answer), which a big case's device makes as the host
    /// does.
    Distinct,
    /// Made by the entry.
    Made(InputsFn),
    /// Some made by the entry (indices, positions: by spec index, the ones listed), the rest
    /// drawn as `Default` draws them, so a big case's device draws its big inputs and the host
    /// makes only these.
    Partly(&'static [usize], PartlyFn),
}

/// The inputs an entry makes itself, by spec index (`Inputs::Partly`).
pub(crate) type PartlyFn = fn(&Case, &[TensorSpec]) -> Result<Vec<(usize, HostTensor)>, CaseError>;

/// A smoke case: a shape, its parameters, and the one dtype it is for (`None`: every dtype of
/// the op). `params` makes the case's parameter map: the op's typed parameters at their
/// defaults, changed by the declaration (`sp!`, `spd!`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Smoke {
    pub(crate) ne: Ne,
    pub(crate) params: fn() -> Params,
    pub(crate) dtype: Option<DType>,
}

/// A smoke case with default parameters.
pub(crate) const fn s(ne: Ne) -> Smoke {
    Smoke {
        ne,
        params: Params::new,
        dtype: None,
    }
}

/// test-backend-ops' `max_nmse_err()`: one value, or one per case where upstream's depends
/// on the case (a copy between equal types is exact, between types 1e-6).
#[derive(Clone, Copy)]
pub(crate) enum Nmse {
    Fixed(f64),
    PerCase(fn(&Case) -> f64),
    /// An allowance over the whole output where the first function gives one (upstream's
    /// bound for values written into a block format: one quantized value off by one step over
    /// all `n` of them), else the second's bound. An allowance is a count, not a rate: a
    /// sample of rows holds the few values off by a step only by chance (a q8_0 `set_rows` of
    /// 4.2M values, NMSE 8.7e-10 against 2.3e-10 judged whole, passed on 68 sampled rows), so
    /// cases under one are judged whole.
    Allowance(fn(&Case) -> Option<f64>, fn(&Case) -> f64),
}

impl Nmse {
    /// The case's bound.
    fn of(self, case: &Case) -> f64 {
        match self {
            Nmse::Fixed(x) => x,
            Nmse::PerCase(f) => f(case),
            Nmse::Allowance(f, otherwise) => f(case).unwrap_or_else(|| otherwise(case)),
        }
    }

    /// Whether the case's bound is an allowance over its whole output (judged whole).
    fn is_allowance(self, case: &Case) -> bool {
        matches!(self, Nmse::Allowance(f, _) if f(case).is_some())
    }
}

/// One ggml op as data.
pub struct GgmlOpEntry {
    /// kedge's name: ggml's, in lower case (`gelu`, `sum_rows`).
    pub(crate) name: &'static str,
    /// ggml's op name as test-backend-ops' `-o` takes it (`GELU`, `SUM_ROWS`).
    pub(crate) upstream: &'static str,
    pub(crate) about: &'static str,
    /// The dtypes its cases run in (`case.dtype`, the constructor's `type`), in test-backend-ops'
    /// order; the first is the one a case defaults to.
    pub dtypes: &'static [DType],
    /// Declared with `kedge_core::params!` (`XParams::SPECS`).
    pub(crate) params: &'static [ParamSpec],
    /// The case's tensors: inputs (in the graph's argument order), then outputs.
    pub(crate) tensors: fn(&Case) -> Result<Vec<TensorSpec>, CaseError>,
    /// How its inputs are drawn (uniform in [-1, 1) unless the op needs a domain: positive
    /// values, indices in range), never all zero.
    pub(crate) inputs: Inputs,
    pub(crate) graph: GraphFn,
    /// Where the generated boundaries start (`None`: the op's dimensions are not free).
    pub(crate) probe: fn() -> Option<ProbeBase>,
    /// Small cases every backend must pass.
    pub(crate) smoke: &'static [Smoke],
    /// The op's own documented thresholds (beyond the generated boundaries).
    pub(crate) boundaries: fn(&LimitsProfile) -> Vec<Boundary>,
    /// test-backend-ops' constructor line and `vars()` for the case.
    pub(crate) upstream_line: fn(&Case) -> UpstreamRepro,
    /// test-backend-ops' `max_nmse_err()` for the op (0: exact).
    pub(crate) nmse: Nmse,
    /// What the results are judged against.
    pub(crate) reference: Reference,
    /// Whether a big case may be judged on sampled slices (`Op::row_sampling`).
    pub(crate) rows: Rows,
    /// Which workload reaches the case's shape, where one is known.
    pub(crate) reach: fn(&Case) -> Option<String>,
}

/// Whether every entry is judged against ggml's CPU backend, as test-backend-ops judges it
/// (`KEDGE_GGML_REFERENCE=cpu`), kedge's host references (`Reference::F64`) left aside: to
/// see a verdict on upstream's own reference, or what a host reference saves.
fn cpu_backend_everywhere() -> bool {
    static CPU: OnceLock<bool> = OnceLock::new();
    *CPU.get_or_init(|| std::env::var("KEDGE_GGML_REFERENCE").is_ok_and(|v| v == "cpu"))
}

/// What an entry's results are judged against.
pub(crate) enum Reference {
    /// The same graph on ggml's CPU backend from the same build: test-backend-ops' reference.
    CpuBackend,
    /// kedge's own on the host, in f64, for the cases `applies` accepts (ggml's CPU backend
    /// for the rest): where the CPU backend's own rounding is not small beside the tolerance
    /// or depends on the host (its thread count), or where the CPU backend computes the op on
    /// one thread and a big case waits seconds for it (SUM; SET_ROWS into a block format, with
    /// the CPU backend's own row writer on every core, bit for bit). `source` names it in each
    /// result.
    F64 {
        applies: fn(&Case) -> bool,
        compute: F64Reference,
        source: &'static str,
    },
}

/// An entry's f64 reference: the case, its tensors and its inputs to its outputs, each in
/// logical order.
pub(crate) type F64Reference =
    fn(&Case, &[TensorSpec], &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError>;

/// How an entry's rows relate, for judging a big case on sampled slices (`judge::sample`).
pub(crate) enum Rows {
    /// Each output row depends only on the same row of each input, not on where the row is
    /// (element-wise ops, row reductions): a case of just some rows computes just those.
    Independent,
    /// Independent in the cases this accepts (a copy without a permutation), whole otherwise.
    IndependentWhen(fn(&Case) -> bool),
    /// Rows are not, but each slice along the case's dimensions `k..3` is: each output's
    /// slice depends only on the same slice of each input and on inputs every slice reads
    /// whole (a gather within a batch: planes, 2; a convolution per image: 3).
    Slices(usize),
    /// Slices along the dimensions from the one this gives, where it gives one (concat along
    /// `dim`: the slices after it).
    SlicesWhen(fn(&Case) -> Option<usize>),
    /// Slices along the dimensions after the last one whose size the op changes between its
    /// first input and its last output (a pad, repeat or upscale that leaves the dimensions
    /// after it alone copies each slice there from the same slice of its input).
    SlicesPastChanged,
    /// The outputs' rows read the input rows the entry's indices choose (a gather, a
    /// scatter): this builds the case of some output rows alone (`Op::gathered_case`).
    Gathered(GatherFn),
    /// A scatter: `Gathered`'s case of some output rows (the first), and the output rows its
    /// input rows at their crossings are written to (the second, `Op::scattered_rows`), so
    /// those are read as well.
    Scattered(GatherFn, ScatterFn),
    /// A gather whose output rows are too long to sample whole: its slices are runs of its
    /// flat outputs, as wide as the second fn says for the case's tensors (`None`: judged
    /// whole), and the first builds the case of the sampled runs alone.
    GatheredRuns(GatherFn, fn(&[TensorSpec]) -> Option<u64>),
    /// Judged whole.
    Whole,
    /// One of these, by the case (a view copied by rows, a transpose by planes).
    Choose(fn(&Case) -> &'static Rows),
}

/// The width of the runs a gather of `elements` output values is sampled in
/// (`Rows::GatheredRuns`): the largest divisor of `elements` up to 4,096 and a sixteenth of
/// them (so there are 16 runs or more to pick from), 1 for a prime count.
pub(crate) fn run_width(elements: u64) -> u64 {
    let most = (elements / 16).clamp(1, 4096);
    (1..=most)
        .rev()
        .find(|d| elements.is_multiple_of(*d))
        .unwrap_or(1)
}

/// The output rows a scatter's input rows at their crossings are written to
/// (`Op::scattered_rows`), from its tensors and the inputs it made.
pub(crate) type ScatterFn = fn(&Case, &[TensorSpec], &[(usize, HostTensor)]) -> Vec<u64>;

/// The case of some output rows of a gather and its inputs (`Op::gathered_case`).
pub(crate) type GatherFn = fn(
    &Case,
    &[TensorSpec],
    &[u64],
    &[(usize, HostTensor)],
    &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError>;

impl Rows {
    /// What the case's rows are: the entry's, or what its `Choose` picks for the case.
    fn of(&self, case: &Case) -> &Rows {
        match self {
            Rows::Choose(f) => f(case).of(case),
            other => other,
        }
    }

    /// The first dimension a case's slices run along, where the case may be sampled.
    fn first_sliced_dim(&self, case: &Case, specs: &[TensorSpec]) -> Option<usize> {
        match self.of(case) {
            Rows::Independent => Some(1),
            Rows::IndependentWhen(f) => f(case).then_some(1),
            Rows::Slices(k) => Some(*k),
            Rows::SlicesWhen(f) => f(case),
            Rows::SlicesPastChanged => {
                let x = specs.iter().find(|s| s.role == Role::Input)?;
                let y = specs.iter().rev().find(|s| s.role == Role::Output)?;
                let k = (0..4)
                    .rev()
                    .find(|&d| x.ne[d] != y.ne[d])
                    .map_or(1, |d| d + 1);
                (k <= 3).then_some(k)
            }
            Rows::Gathered(_) | Rows::Scattered(..) | Rows::GatheredRuns(..) => Some(1),
            Rows::Whole | Rows::Choose(_) => None,
        }
    }
}

impl GgmlOpEntry {
    /// Whether every input is drawn from kedge's stream (none made by the entry).
    pub(crate) fn draws_every_input(&self) -> bool {
        matches!(
            self.inputs,
            Inputs::Default | Inputs::Uniform(..) | Inputs::UniformBy(_)
        )
    }
    /// The range the entry's drawn inputs are uniform in for the case (integers are drawn in
    /// [0, 16) whatever it is); `None` where the entry makes every input itself.
    pub(crate) fn drawn_range(&self, case: &Case) -> Option<(f32, f32)> {
        match self.inputs {
            Inputs::Default | Inputs::Partly(..) => Some((-1.0, 1.0)),
            Inputs::Uniform(lo, hi) => Some((lo, hi)),
            Inputs::UniformBy(f) => Some(f(case)),
            Inputs::Made(_) | Inputs::Distinct => None,
        }
    }
}

impl Op for GgmlOpEntry {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some(self.upstream)
    }
    fn dtypes(&self) -> &'static [DType] {
        self.dtypes
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
    /// Added at run time, one per backend device of the loaded build.
    fn impls(&self) -> Vec<&'static dyn Impl> {
        Vec::new()
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        (self.tensors)(case)
    }
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        match self.inputs {
            // A big block-format input from a pool of quantized rows (`block_input`), the
            // rest as `random_inputs` draws them.
            Inputs::Default => specs
                .iter()
                .enumerate()
                .filter(|(_, s)| s.role == Role::Input)
                .map(|(i, _)| block_input(case, specs, i))
                .collect(),
            Inputs::Uniform(lo, hi) => Ok(uniform_inputs(case, specs, lo, hi)),
            Inputs::UniformBy(f) => {
                let (lo, hi) = f(case);
                Ok(uniform_inputs(case, specs, lo, hi))
            }
            Inputs::Distinct => Ok(specs
                .iter()
                .enumerate()
                .filter(|(_, s)| s.role == Role::Input)
                .map(|(i, s)| distinct_rows(case, s, i))
                .collect()),
            Inputs::Made(f) => f(case, specs),
            Inputs::Partly(_, f) => {
                let mut made = f(case, specs)?;
                specs
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.role == Role::Input)
                    .map(|(i, _)| match made.iter().position(|(k, _)| *k == i) {
                        Some(at) => Ok(made.swap_remove(at).1),
                        None => block_input(case, specs, i),
                    })
                    .collect()
            }
        }
    }
    fn gathered_case(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        rows: &[u64],
        made: &[(usize, HostTensor)],
        ranges: &[(f32, f32)],
    ) -> Result<(Case, Vec<HostTensor>), CaseError> {
        match self.rows.of(case) {
            Rows::Gathered(f) | Rows::Scattered(f, _) | Rows::GatheredRuns(f, _) => {
                f(case, specs, rows, made, ranges)
            }
            _ => Err(bad(case, "its rows are not gathered")),
        }
    }
    fn scattered_rows(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        made: &[(usize, HostTensor)],
    ) -> Vec<u64> {
        match self.rows.of(case) {
            Rows::Scattered(_, f) => f(case, specs, made),
            _ => Vec::new(),
        }
    }
    /// What `Inputs::Partly` makes; every input for `Made`; none for drawn inputs.
    fn made_inputs(
        &self,
        case: &Case,
        specs: &[TensorSpec],
    ) -> Result<Vec<(usize, HostTensor)>, CaseError> {
        match self.inputs {
            Inputs::Default | Inputs::Uniform(..) | Inputs::UniformBy(_) | Inputs::Distinct => {
                Ok(Vec::new())
            }
            Inputs::Partly(_, f) => f(case, specs),
            Inputs::Made(f) => Ok(kedge_core::contract::op::by_spec_index(
                specs,
                f(case, specs)?,
            )),
        }
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let specs = (self.tensors)(case)?;
        match self.reference {
            Reference::F64 {
                applies, compute, ..
            } if applies(case) && !cpu_backend_everywhere() => compute(case, &specs, inputs),
            _ => cpu_reference(case, &specs, inputs, self.graph),
        }
    }
    fn reference_source(&self) -> &'static str {
        match self.reference {
            Reference::F64 { source, .. } if !cpu_backend_everywhere() => source,
            _ => "ggml's CPU backend from the same build (test-backend-ops' reference)",
        }
    }
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::for_dtype(case.dtype).with_nmse(self.nmse.of(case))
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        (self.boundaries)(limits)
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        (self.probe)()
    }
    /// The smoke cases of the op's first dtype (the one cases default to).
    fn smoke(&self) -> Vec<(Ne, Params)> {
        self.smoke_for(self.dtypes[0])
    }
    /// The smoke cases for every dtype and those for `dtype` alone.
    fn smoke_for(&self, dtype: DType) -> Vec<(Ne, Params)> {
        self.smoke
            .iter()
            .filter(|s| s.dtype.is_none_or(|d| d == dtype))
            .map(|s| (s.ne, (s.params)()))
            .collect()
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        Some((self.upstream_line)(case))
    }
    /// Slices (rows, or the entry's `Rows::Slices`) independent of each other; inputs drawn in
    /// [-1, 1) or the op's domain, or made by the entry on the host.
    fn row_sampling(&self, case: &Case) -> Option<RowSampling> {
        if self.nmse.is_allowance(case) {
            return None;
        }
        let specs = (self.tensors)(case).ok()?;
        let from = self.rows.first_sliced_dim(case, &specs)?;
        let n = specs.len();
        let s = match self.inputs {
            Inputs::Default => RowSampling::uniform(n),
            Inputs::Uniform(lo, hi) => RowSampling::uniform_in(n, lo, hi),
            Inputs::UniformBy(f) => {
                let (lo, hi) = f(case);
                RowSampling::uniform_in(n, lo, hi)
            }
            Inputs::Distinct => RowSampling::distinct(n),
            Inputs::Made(_) => RowSampling::made(n),
            Inputs::Partly(which, _) => RowSampling::uniform(n).made_only(which),
        };
        // A gather builds the case of its sampled rows itself: from the indices it made on the
        // host and the input rows they pick (get_rows), or from the windows of drawn inputs
        // those rows read (im2col). The host draws a drawn input's rows where the device drew
        // them only if the input is dense: the device draws element after element.
        let gather = match self.rows.of(case) {
            Rows::Gathered(_) | Rows::Scattered(..) => Some(None),
            Rows::GatheredRuns(_, width) => Some(Some(width(&specs)?)),
            _ => None,
        };
        if let Some(runs) = gather {
            let drawn_dense = specs
                .iter()
                .enumerate()
                .filter(|(i, x)| x.role == Role::Input && !s.makes(*i))
                .all(|(_, x)| x.nb == kedge_core::model::shape::dense_strides(&x.ne, x.dtype));
            return drawn_dense.then(|| match runs {
                Some(w) => s.gathered_in_runs(w),
                None => s.gathered(),
            });
        }
        Some(s.along(from))
    }
    /// The entry's own note, else the note of the declared boundary the case is a probe of.
    fn reach(&self, case: &Case) -> Option<String> {
        (self.reach)(case).or_else(|| boundary_reach(self, case))
    }
}

/// The reach note of a declared boundary whose probe is this case (same dtype where the
/// boundary fixes one, same shape, the boundary's parameters), unless it names no workload.
fn boundary_reach(e: &GgmlOpEntry, case: &Case) -> Option<String> {
    let limits = LimitsProfile::builtin("h200")?;
    let defaults =
        kedge_core::model::params::check_params(e.name, e.params, &Params::new()).ok()?;
    (e.boundaries)(&limits)
        .into_iter()
        .filter(|b| b.reach != Reach::SYNTHETIC && b.dtype.is_none_or(|d| d == case.dtype))
        .find(|b| b.probes(case, &defaults))
        .map(|b| format!("{}: {}", b.label, b.reach.0))
}

/// Every declared op.
pub static TABLE: &[GgmlOpEntry] = &[
    // elementwise
    elementwise::ABS,
    elementwise::SGN,
    elementwise::NEG,
    elementwise::STEP,
    elementwise::TANH,
    elementwise::ELU,
    elementwise::RELU,
    elementwise::SIGMOID,
    elementwise::GELU,
    elementwise::GELU_QUICK,
    elementwise::GELU_ERF,
    elementwise::SILU,
    elementwise::HARDSWISH,
    elementwise::HARDSIGMOID,
    elementwise::EXP,
    elementwise::EXPM1,
    elementwise::SOFTPLUS,
    elementwise::FLOOR,
    elementwise::CEIL,
    elementwise::ROUND,
    elementwise::TRUNC,
    elementwise::SQR,
    elementwise::SQRT,
    elementwise::LOG,
    elementwise::SIN,
    elementwise::COS,
    elementwise::CLAMP,
    elementwise::LEAKY_RELU,
    elementwise::SCALE,
    elementwise::REGLU,
    elementwise::GEGLU,
    elementwise::SWIGLU,
    elementwise::GEGLU_ERF,
    elementwise::GEGLU_QUICK,
    elementwise::SWIGLU_OAI,
    elementwise::XIELU,
    elementwise::SILU_BACK,
    elementwise::ADD,
    elementwise::SUB,
    elementwise::MUL,
    elementwise::DIV,
    // reductions, sorting, normalization
    reduce::SUM,
    reduce::SUM_ROWS,
    reduce::MEAN,
    reduce::ARGMAX,
    reduce::COUNT_EQUAL,
    reduce::ARGSORT,
    reduce::TOP_K,
    reduce::GROUP_NORM,
    reduce::SOFT_MAX_BACK,
    reduce::RMS_NORM_BACK,
    // layout: padding, joining, gathering, copying
    layout::PAD,
    layout::CONCAT,
    layout::REPEAT,
    layout::REPEAT_BACK,
    layout::GET_ROWS,
    layout::SET_ROWS,
    layout::CPY,
    layout::CONT,
    layout::ACC,
    layout::DIAG_MASK_INF,
    layout::DUP,
    layout::SET,
    layout::FILL,
    layout::DIAG,
    layout::PAD_REFLECT_1D,
    layout::GET_ROWS_BACK,
    layout::ARANGE,
    // matrix products
    matmul::MUL_MAT,
    matmul::MUL_MAT_ID,
    matmul::MUL_MAT_HADAMARD,
    matmul::OUT_PROD,
    // model pieces
    nn::ROPE,
    nn::ROPE_BACK,
    nn::RMS_NORM_MUL_ROPE,
    nn::FLASH_ATTN_EXT,
    nn::TIMESTEP_EMBEDDING,
    nn::UPSCALE,
    nn::INTERPOLATE,
    nn::IM2COL,
    nn::POOL_2D,
    nn::POOL_1D,
    nn::SSM_CONV,
    nn::SOLVE_TRI,
    nn::LIGHTNING_INDEXER,
    // training
    train::CROSS_ENTROPY_LOSS,
    train::CROSS_ENTROPY_LOSS_BACK,
    train::OPT_STEP_ADAMW,
    train::OPT_STEP_SGD,
    // recurrent state
    recurrent::SSM_SCAN,
    recurrent::RWKV_WKV6,
    recurrent::RWKV_WKV7,
    recurrent::GATED_LINEAR_ATTN,
    recurrent::GATED_DELTA_NET,
    // convolutions
    conv::CONV_2D_DW,
    conv::CONV_2D,
    conv::CONV_3D,
    conv::IM2COL_3D,
    conv::COL2IM_1D,
];

/// Every case kedge derives for an entry without a device, each with where it comes from:
/// the smoke cases (in every dtype of the entry), then each boundary's cases (the op's own,
/// then those generated from its probe base on `limits`), smallest probe value first
/// (`LABEL #0`). Parameters the case leaves out take their defaults when it is validated.
pub fn cases(e: &GgmlOpEntry, limits: &LimitsProfile) -> Vec<(Case, String)> {
    const IMPL: &str = "ggml:CPU";
    let mut out = Vec::new();
    for (i, sm) in e.smoke.iter().enumerate() {
        for &d in e
            .dtypes
            .iter()
            .filter(|&&d| sm.dtype.is_none_or(|x| x == d))
        {
            let mut c = Case::new(
                e.name,
                IMPL,
                d,
                kedge_core::contract::boundary::whole_blocks(sm.ne, d),
            );
            c.params = (sm.params)();
            out.push((c, format!("smoke {i} {d}")));
        }
    }
    for &d in e.dtypes {
        let mut bounds: Vec<Boundary> = (e.boundaries)(limits)
            .into_iter()
            .filter(|b| b.dtype.is_none_or(|x| x == d))
            .collect();
        if let Some(base) = (e.probe)() {
            bounds.extend(kedge_core::contract::boundary::generated(&base, limits, d));
        }
        for b in bounds {
            let row_probe = b.axis == kedge_core::Axis::Ne(0);
            for (j, mut c) in b.cases(e.name, IMPL, d).into_iter().enumerate() {
                // As a suite builds them (`select::suite::raw_cases`): whole blocks.
                if d.is_block() {
                    if row_probe {
                        if !(c.ne[0] as u64).is_multiple_of(d.block()) {
                            continue;
                        }
                    } else {
                        c.ne = kedge_core::contract::boundary::whole_blocks(c.ne, d);
                    }
                }
                out.push((c, format!("{} #{j}", b.label)));
            }
        }
    }
    out
}

// ---- shared pieces of entries ---------------------------------------------------------------

/// No boundaries beyond the generated ones.
pub(crate) fn none(_: &LimitsProfile) -> Vec<Boundary> {
    Vec::new()
}

/// No workload known.
pub(crate) fn no_reach(_: &Case) -> Option<String> {
    None
}

/// A bad case, in the op's words.
pub(crate) fn bad(case: &Case, msg: impl Into<String>) -> CaseError {
    CaseError::BadInput {
        op: case.op.clone(),
        msg: msg.into(),
    }
}

/// A dense input.
pub(crate) fn input(name: &str, dtype: DType, ne: Ne) -> Result<TensorSpec, CaseError> {
    TensorSpec::dense(name, Role::Input, dtype, ne)
}

/// A dense output.
pub(crate) fn output(name: &str, dtype: DType, ne: Ne) -> Result<TensorSpec, CaseError> {
    TensorSpec::dense(name, Role::Output, dtype, ne)
}

/// An input that is a view of a larger dense tensor of shape `alloc` (test-backend-ops' `v`
/// views): the view's strides are the larger tensor's, its bytes end at its last element.
pub(crate) fn view_input(
    name: &str,
    dtype: DType,
    ne: Ne,
    alloc: Ne,
) -> Result<TensorSpec, CaseError> {
    let nb = kedge_core::model::shape::dense_strides(&alloc, dtype);
    TensorSpec::strided(name, Role::Input, dtype, ne, nb)
}

/// One input `x` and one output `dst` of the case's shape and dtype.
pub(crate) fn same_shape(case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    Ok(vec![
        input("x", case.dtype, case.ne)?,
        output("dst", case.dtype, case.ne)?,
    ])
}

/// An elementwise op: every dimension free, the element count on `ne[1]`.
pub(crate) fn elementwise_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        row_dim: false,
        ..ProbeBase::rows([64, 1, 1, 1])
    })
}

/// The shape of an element-wise op's case with one dimension moved to `v`.
pub(crate) fn with_dim(mut ne: Ne, dim: usize, v: i64) -> Ne {
    ne[dim] = v;
    ne
}

/// `test_cases.emplace_back(new CTOR);` with the `vars()` it prints.
pub(crate) fn repro(op: &str, ctor: String, vars: String) -> UpstreamRepro {
    UpstreamRepro {
        test_case_line: format!("test_cases.emplace_back(new {ctor});"),
        op_name: op.to_string(),
        vars,
    }
}

/// A C++ `std::array` literal: `{1, 2, 3}`.
pub(crate) fn cpp_arr(v: &[i64]) -> String {
    format!(
        "{{{}}}",
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `vars()`' array: `[1,2,3]`.
pub(crate) fn vars_arr(v: &[i64]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// A float as `vars()` prints a C++ `float` (`std::to_string`: `%f` of the float's value).
pub(crate) fn fl(x: f64) -> String {
    ggml_float(x as f32 as f64)
}

/// A C++ float literal for a constructor argument (`0.5f`, `1e-6f`).
pub(crate) fn cf(x: f64) -> String {
    kedge_core::contract::upstream::cpp_float(x)
}

/// A bool as `vars()` prints it.
pub(crate) fn b01(x: bool) -> u8 {
    u8::from(x)
}

/// The kedge dtype of a parameter naming a float type (`"f32"`, `"f16"`, `"bf16"`).
pub(crate) fn float_dtype(name: &str) -> DType {
    match name {
        "f16" => DType::F16,
        "bf16" => DType::Bf16,
        _ => DType::F32,
    }
}

/// ggml's type of a kedge dtype.
pub(crate) fn ggml_ty(d: DType) -> Result<kedge_ggml::Type, kedge_ggml::GraphError> {
    super::exec::ggml_type(d).map_err(|e| kedge_ggml::GraphError::Shape {
        op: "dtype",
        reason: e.to_string(),
    })
}

// ---- inputs ----------------------------------------------------------------------------------

/// Every input uniform in [lo, hi) (integer inputs in [0, 16)), each from its own stream.
pub(crate) fn uniform_inputs(
    case: &Case,
    specs: &[TensorSpec],
    lo: f32,
    hi: f32,
) -> Vec<HostTensor> {
    specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, s)| kedge_core::contract::op::random_tensor(case.seed, i as u64, s, lo, hi))
        .collect()
}

/// The default input of spec `i` (uniform in [-1, 1)).
pub(crate) fn default_input(case: &Case, specs: &[TensorSpec], i: usize) -> HostTensor {
    kedge_core::contract::op::random_tensor(case.seed, i as u64, &specs[i], -1.0, 1.0)
}

/// Input `i` in a block format as the loaded build quantizes it: a big dense one from its pool
/// of quantized rows (`kedge_core::contract::op::BlockPool`), so neither the device run nor
/// the reference quantizes 2^32 values; a small or strided one quantized here, once, from the
/// f32 values `default_input` draws (the device's run and the reference would each quantize
/// them again: an i-quant costs about a microsecond a value, 2^24 values some seconds).
/// Without a build loaded, or where the build cannot quantize the type, the f32 values (the
/// run then says why, in the build's words).
pub(crate) fn block_input(
    case: &Case,
    specs: &[TensorSpec],
    i: usize,
) -> Result<HostTensor, CaseError> {
    let s = &specs[i];
    let Some(ggml) = kedge_ggml::Ggml::loaded() else {
        return Ok(default_input(case, specs, i));
    };
    match super::exec::pooled_bytes(ggml, case.seed, i, s, -1.0, 1.0) {
        Ok(Some(bytes)) => Ok(HostTensor::from_bytes(s.dtype, s.ne, s.nb, bytes)),
        Ok(None) if s.dtype.is_block() => {
            let h = default_input(case, specs, i);
            let quantized = super::exec::input_bytes(ggml, s, &h).map(|b| b.into_owned());
            Ok(match quantized {
                Ok(bytes) => HostTensor::from_bytes(s.dtype, s.ne, s.nb, bytes),
                Err(_) => h,
            })
        }
        Ok(None) => Ok(default_input(case, specs, i)),
        Err(e) => Err(CaseError::BadInput {
            op: case.op.clone(),
            msg: format!("input {}: {e}", s.name),
        }),
    }
}

/// A tensor of spec `s` whose span holds `vals` (as f32 converted to the spec's dtype, or as
/// i32 for I32 specs), laid out as the span's elements in memory order.
pub(crate) fn span_tensor(s: &TensorSpec, vals: &[f32]) -> HostTensor {
    let n = (s.bytes / s.dtype.size()) as usize;
    debug_assert_eq!(vals.len(), n);
    let mut t = HostTensor::from_f32(s.dtype, [n as i64, 1, 1, 1], vals);
    t.ne = s.ne;
    t.nb = s.nb;
    t
}

/// An i32 tensor of spec `s` from its span's values in memory order.
pub(crate) fn span_i32(s: &TensorSpec, vals: &[i32]) -> HostTensor {
    HostTensor::from_bytes(DType::I32, s.ne, s.nb, bytemuck::cast_slice(vals).to_vec())
}

/// A random permutation of 0..n.
pub(crate) fn permutation(rng: &mut Rng, n: usize) -> Vec<u32> {
    let mut p = Vec::new();
    permute_into(rng, n, &mut p);
    p
}

#[cfg(test)]
mod tests;
