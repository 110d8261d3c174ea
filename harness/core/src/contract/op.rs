//! Ops as data (PyTorch's OpInfo): one entry holds the reference, the dtypes, the params, the
//! impls, the boundaries and the upstream repro format. The engine knows nothing op-specific.

use crate::contract::boundary::{Boundary, ProbeBase};
use crate::contract::imp::Impl;
use crate::contract::upstream::UpstreamRepro;
use crate::error::CaseError;
use crate::model::case::Case;
use crate::model::dtype::DType;
use crate::model::host::HostTensor;
use crate::model::limits::LimitsProfile;
use crate::model::params::{ParamSpec, Params};
use crate::model::rng::Rng;
use crate::model::shape::{dense_strides, Ne};

/// Per op and dtype thresholds of the reference comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Normalized mean squared error bound, test-backend-ops style (1e-7 for f32).
    pub nmse: f64,
    /// Element bound used to name the first bad index: |d - r| > abs + rel * |r|.
    pub elem_abs: f64,
    /// Relative part of the element bound.
    pub elem_rel: f64,
}

impl Tolerance {
    /// test-backend-ops' f32 bound.
    pub const F32: Tolerance = Tolerance {
        nmse: 1e-7,
        elem_abs: 1e-5,
        elem_rel: 1e-3,
    };
    /// f16: half precision's rounding.
    const F16: Tolerance = Tolerance {
        nmse: 1e-5,
        elem_abs: 1e-3,
        elem_rel: 1e-2,
    };
    /// bf16: 8 bits of mantissa.
    const BF16: Tolerance = Tolerance {
        nmse: 1e-4,
        elem_abs: 1e-2,
        elem_rel: 2e-2,
    };
    /// The tolerance of an output dtype.
    pub fn for_dtype(d: DType) -> Tolerance {
        match d {
            DType::F16 => Tolerance::F16,
            DType::Bf16 => Tolerance::BF16,
            _ => Tolerance::F32,
        }
    }
    /// The same element bounds with another NMSE bound (an op's own, as test-backend-ops'
    /// `max_nmse_err()` overrides it).
    pub const fn with_nmse(self, nmse: f64) -> Tolerance {
        Tolerance { nmse, ..self }
    }
    /// The bound for an output of `dtype` judged against an f64 reference that is not rounded
    /// to `dtype`, for an op whose f32 outputs are held to [`Tolerance::F32`].
    ///
    /// test-backend-ops holds kedge's row ops to one NMSE bound in every type (1e-7; 1e-6 for
    /// softmax), but its reference is ggml's CPU backend, whose output is rounded to the same
    /// type as the one judged. kedge's reference is not rounded, so an f16 or bf16 output
    /// carries its type's rounding on top of the arithmetic's error. With `u` the type's unit
    /// roundoff (2^-11 for f16, 2^-8 for bf16) and `s` = sqrt(F32's bound), an output `c` of
    /// the f32 arithmetic within the f32 bound, `||c - r|| <= s ||r||`, rounded once to the
    /// type, `||k - c|| <= u ||c||`, is within `||k - r|| <= (u (1 + s) + s) ||r||` (the
    /// triangle inequality), so the bound is `(u (1 + s) + s)^2`: 6.5e-7 for f16 and 1.8e-5 for
    /// bf16, for values in the type's normal range (see [`Tolerance::rounded_to_small`] for
    /// smaller ones). f32 keeps [`Tolerance::F32`] exactly; the element bounds (which only name
    /// the first bad element) are the type's.
    pub fn rounded_to(dtype: DType) -> Tolerance {
        Tolerance::rounded_to_small(dtype, 0.0)
    }
    /// [`Tolerance::rounded_to`] for outputs that may be small enough to be subnormal in
    /// `dtype`, where rounding is off by up to half the subnormal step `a` (2^-25 for f16,
    /// 2^-134 for bf16) rather than by a fraction of the value. `sqrt_n_over_norm` bounds
    /// `sqrt(n) / ||r||` over the op's outputs of n elements (a softmax row sums to 1, so for
    /// rows of `ncols` it is at most `ncols`); the bound is then
    /// `(u (1 + s) + s + a * sqrt_n_over_norm)^2`.
    pub fn rounded_to_small(dtype: DType, sqrt_n_over_norm: f64) -> Tolerance {
        let (u, a) = match dtype {
            DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
            DType::Bf16 => (2f64.powi(-8), 2f64.powi(-134)),
            _ => return Tolerance::for_dtype(dtype),
        };
        let s = Tolerance::F32.nmse.sqrt();
        let root = u * (1.0 + s) + s + a * sqrt_n_over_norm;
        Tolerance::for_dtype(dtype).with_nmse(root * root)
    }
}

pub use crate::contract::tensor::{Role, TensorSpec};

/// An op: reference, dtypes, params, impls, boundaries and upstream repro format together.
pub trait Op: Send + Sync {
    /// kedge's name for the op (`rms_norm`).
    fn name(&self) -> &'static str;
    /// One line on what it computes.
    fn about(&self) -> &'static str;
    /// The op's name in ggml (`RMS_NORM`), as test-backend-ops' `-o` takes it; accepted by
    /// every `-o` flag. `None` when upstream has no such op.
    fn upstream_name(&self) -> Option<&'static str> {
        None
    }
    /// The dtypes it supports; the first is the default.
    fn dtypes(&self) -> &'static [DType];
    /// Its parameters.
    fn params(&self) -> &'static [ParamSpec];
    /// kedge's own impls of it.
    fn impls(&self) -> Vec<&'static dyn Impl>;
    /// The case's tensors: inputs first, then outputs. Errors here are bad input.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError>;
    /// Random, never all-zero inputs (one per input spec, in order).
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        Ok(random_inputs(case.seed, specs))
    }
    /// The inputs the op makes itself (indices, positions, distinct rows), by spec index, for a
    /// big case judged on sampled slices whose `RowSampling` says its inputs are made: those
    /// are made on the host and uploaded, the others drawn where the case runs. Default: every
    /// input, as `inputs` makes them.
    fn made_inputs(
        &self,
        case: &Case,
        specs: &[TensorSpec],
    ) -> Result<Vec<(usize, HostTensor)>, CaseError> {
        Ok(by_spec_index(specs, self.inputs(case, specs)?))
    }
    /// For a scatter (an op whose `RowSampling` is `gathered` and whose indices say where each
    /// input row is written): the output rows (flat `ne[1..3]` indices) written from its input
    /// rows at the sampler's crossings (elements 2^31 - 1, 2^31, 2^32 - 1 and 2^32 and byte
    /// offsets 2^31 and 2^32, with their neighbours, and the first and last rows), from the
    /// indices the op made (`made`). The sampler's crossings are those of the outputs; a kernel
    /// that walks its input with a 32-bit index loses the input rows past it, which land on
    /// output rows anywhere (set_rows: source row k is destination row `rows[k]`). A sampled
    /// judge reads these rows too. Default: none.
    fn scattered_rows(
        &self,
        _case: &Case,
        _specs: &[TensorSpec],
        _made: &[(usize, HostTensor)],
    ) -> Vec<u64> {
        Vec::new()
    }
    /// For an op whose `RowSampling` is `gathered`: the case of just the outputs' rows `rows`
    /// (flat `ne[1..3]` indices of the outputs, ascending) and its inputs, from the indices the
    /// op made (`made`, by spec index) and the rows of its drawn inputs those indices select
    /// (`judge::sample::drawn_rows`, with `ranges`). Its outputs must be those rows of the
    /// case's outputs, in order. Default: the op has no such case.
    fn gathered_case(
        &self,
        case: &Case,
        _specs: &[TensorSpec],
        _rows: &[u64],
        _made: &[(usize, HostTensor)],
        _ranges: &[(f32, f32)],
    ) -> Result<(Case, Vec<HostTensor>), CaseError> {
        Err(CaseError::BadInput {
            op: case.op.clone(),
            msg: "the op builds no case of gathered rows".into(),
        })
    }
    /// f64 reference, one vector per output in logical order.
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError>;
    /// How close an output must be to the reference.
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::for_dtype(case.dtype)
    }
    /// The op's own boundaries for a device profile: its implementation thresholds, with the
    /// workload that reaches each.
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary>;
    /// A small shape (and params) from which kedge generates the boundaries it derives from
    /// the hardware and the data, for kernels whose grid it cannot see: each free dimension at
    /// the grid.y/z limits, element counts across 2^31 and 2^32, rows across the shared-memory
    /// limit (`contract::boundary::generated`). `None`: the op's dimensions are not free
    /// (a GEMM's K, M, N; attention's head size), and its own boundaries say where it breaks.
    fn probe_base(&self) -> Option<ProbeBase> {
        None
    }
    /// Floating-point operations of one run (a GEMM's 2·M·N·K), for kernel timing; `None`: the
    /// op is judged by the bytes it moves.
    fn flops(&self, _case: &Case) -> Option<u64> {
        None
    }
    /// What the reference is, as the verdict names it.
    fn reference_source(&self) -> &'static str {
        "f64 CPU reference"
    }
    /// Small shapes every impl must pass.
    fn smoke(&self) -> Vec<(Ne, Params)>;
    /// The smoke shapes in `dtype` (default: `smoke()` in every dtype); an op whose smoke
    /// cases differ by dtype says so here.
    fn smoke_for(&self, _dtype: DType) -> Vec<(Ne, Params)> {
        self.smoke()
    }
    /// test-backend-ops line and vars for this case, if upstream has the op.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro>;
    /// Reachability of a specific case beyond its boundary's note (default: none).
    fn reach(&self, _case: &Case) -> Option<String> {
        None
    }
    /// What the case's allocation layout can hide (e.g. a pool with slack). Default: none.
    fn alloc_note(&self, _case: &Case) -> Option<String> {
        None
    }
    /// How code kedge did not write implements this op (harness/include/kedge.h): the params
    /// struct a plugin's entry receives and, for the row ops, the published kernel ABI of
    /// NVRTC source kernels. `None`: plugins get the params as JSON, and no source-kernel ABI.
    fn external_abi(&self) -> Option<ExternalAbi> {
        None
    }
    /// Whether a big case may be judged on sampled slices (`judge::sample`), and how its
    /// inputs come to be: the op promises that each output slice (one index of the case's
    /// dimensions `from..4`: a row for `from` 1) depends only on the same slice of each input
    /// and on the inputs every slice reads whole, not on where the slice is; and that input `i`
    /// is `random_tensor(seed, i, spec, lo, hi)` with `ranges[i]`, or (`made`) what
    /// `Op::inputs` makes. Which tensors are stacks of slices is checked from `tensors`, not
    /// promised. `None` (the default): the case is judged whole.
    fn row_sampling(&self, _case: &Case) -> Option<RowSampling> {
        None
    }
    /// Rough multiply-adds of the f64 reference, so a CPU-only sweep can leave out the
    /// references it could not finish (attention is quadratic in L, a GEMM is K·M·N).
    /// Default: the product of `ne`.
    fn reference_work(&self, case: &Case) -> u64 {
        case.ne
            .iter()
            .fold(1u64, |a, &x| a.saturating_mul(x.max(0) as u64))
    }
}

/// Inputs in input order (as `Op::inputs` gives them) paired with their spec indices.
pub fn by_spec_index(specs: &[TensorSpec], inputs: Vec<HostTensor>) -> Vec<(usize, HostTensor)> {
    let idx = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, _)| i);
    idx.zip(inputs).collect()
}

/// `permutation` of 0..n into `p`, reusing its allocation (a big case has millions of short
/// rows): Fisher-Yates from the top, one draw a swap.
pub fn permute_into(rng: &mut Rng, n: usize, p: &mut Vec<u32>) {
    p.clear();
    p.extend(0..n as u32);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
}

/// Row values that are all distinct and ordered as `rank`: exact integers while rows fit f32's
/// 24-bit mantissa (test-backend-ops shuffles 0..ne0), then distinct floats by bit pattern, so
/// a sort or a maximum has one right answer.
pub fn distinct_value(rank: u32, n: usize) -> f32 {
    if n <= 1 << 24 {
        rank as f32
    } else {
        f32::from_bits(0x3f80_0000 + rank)
    }
}

/// The draws a row of spec `s` takes in a distinct-rows input: `ne0 - 1` for its permutation
/// and one per padding value after it.
fn distinct_draws(s: &TensorSpec) -> u64 {
    let row = s.ne[0].max(1) as u64;
    let pitch = s.nb[1] / s.dtype.size().max(1);
    row - 1 + pitch.saturating_sub(row)
}

/// An input whose rows are shuffled distinct values (argsort, argmax, top_k: one right
/// answer): input `i`'s span filled row by row (a row of `ne0` values every `nb1` bytes), row
/// `r` from the stream at `r` times the draws a row takes (`permute_into`, then the padding
/// after it uniform in [-1, 1)). The device makes the same (`cuda::big::distinct_rows`).
pub fn distinct_rows(case: &Case, s: &TensorSpec, i: usize) -> HostTensor {
    use rayon::prelude::*;
    /// Rows a task draws one after the other.
    const ROWS_PER_TASK: usize = 1024;
    let n = (s.bytes / s.dtype.size()) as usize;
    let row = s.ne[0].max(1) as usize;
    let pitch = (s.nb[1] / s.dtype.size()) as usize;
    let step = pitch.max(row);
    let draws = distinct_draws(s);
    let stream = Rng::stream(case.seed, i as u64);
    let mut vals = vec![0f32; n];
    vals.par_chunks_mut(step * ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let mut rng = stream.skipped((task * ROWS_PER_TASK) as u64 * draws);
            let mut perm = Vec::with_capacity(row);
            let mut start = 0;
            while start < chunk.len() {
                let len = row.min(chunk.len() - start);
                permute_into(&mut rng, row, &mut perm);
                for (k, &p) in perm.iter().take(len).enumerate() {
                    chunk[start + k] = distinct_value(p, row);
                }
                for v in chunk
                    .iter_mut()
                    .skip(start + len)
                    .take(pitch.saturating_sub(row))
                {
                    *v = rng.uniform(-1.0, 1.0);
                }
                start += step;
            }
        });
    let mut t = HostTensor::from_f32(s.dtype, [n as i64, 1, 1, 1], &vals);
    t.ne = s.ne;
    t.nb = s.nb;
    t
}

/// Rows `rows` (flat `ne[1..3]` indices) of input `i` as `distinct_rows` makes it, one after
/// the other, without the padding between them: what a sampled judge reads of it.
pub fn distinct_row_values(case: &Case, s: &TensorSpec, i: usize, rows: &[u64]) -> Vec<f32> {
    let row = s.ne[0].max(1) as usize;
    let draws = distinct_draws(s);
    let stream = Rng::stream(case.seed, i as u64);
    let mut perm = Vec::with_capacity(row);
    let mut vals = Vec::with_capacity(rows.len() * row);
    for &r in rows {
        permute_into(&mut stream.skipped(r * draws), row, &mut perm);
        vals.extend(perm.iter().map(|&p| distinct_value(p, row)));
    }
    vals
}

/// How a big case of an op is judged on sampled slices (`judge::sample`): along which of the
/// case's dimensions its outputs are independent, and how its inputs come to be: per spec (in
/// spec order; outputs' entries are not read), the uniform range `random_tensor` draws it
/// from, or made by the op (`Op::inputs`) on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSampling {
    /// The range of each spec's draw.
    pub(crate) ranges: Vec<(f32, f32)>,
    /// The first of the case's dimensions the slices run along: 1 (rows, `ne[1..3]`), 2
    /// (planes, `ne[2..3]`) or 3 (`ne[3]`). Each output's slice depends only on the same
    /// slice of each input (or on an input read whole).
    pub(crate) from: usize,
    /// Some inputs are the op's own (indices, positions, distinct rows: `Op::made_inputs`):
    /// made whole on the host and uploaded, their sampled slices cut from them.
    pub(crate) made: bool,
    /// Which inputs (spec indices) the op makes, where it makes only some (`made_only`);
    /// `None`: all of them.
    pub(crate) made_specs: Option<Vec<usize>>,
    /// The op's output rows read input rows its indices choose (a gather, a scatter): the
    /// slices are the outputs' rows, and the op builds the case of the sampled ones itself
    /// (`Op::gathered_case`).
    pub(crate) gather: bool,
    /// Every input the op does not make holds distinct rows (`distinct_rows`), not uniform
    /// values: the device makes them as the host does, and a sampled judge draws its rows.
    pub(crate) distinct: bool,
    /// A gather whose output rows are too long to sample whole (a transpose of one plane:
    /// 64 rows of 2^25 values): its slices are runs of this many elements of each flat
    /// output instead of rows (`judge::sample::output_runs`).
    pub(crate) runs: Option<u64>,
}

impl RowSampling {
    /// Every input uniform in [-1, 1) (integers in [0, 16)), as `random_inputs` draws them;
    /// rows independent.
    pub fn uniform(specs: usize) -> RowSampling {
        RowSampling::uniform_in(specs, -1.0, 1.0)
    }
    /// Every input uniform in [lo, hi) (integers as `uniform` draws them), as
    /// `random_tensor(seed, i, spec, lo, hi)` draws input `i`: an op's domain.
    pub fn uniform_in(specs: usize, lo: f32, hi: f32) -> RowSampling {
        RowSampling {
            ranges: vec![(lo, hi); specs],
            from: 1,
            made: false,
            made_specs: None,
            gather: false,
            distinct: false,
            runs: None,
        }
    }
    /// Inputs the op makes itself (`Op::made_inputs`: all of them by default), made whole on
    /// the host; the others drawn.
    pub fn made(specs: usize) -> RowSampling {
        RowSampling {
            made: true,
            ..RowSampling::uniform(specs)
        }
    }
    /// Slices along the case's dimensions `from..4` instead of rows (2: each `ne[2..3]`
    /// plane independent, 3: each `ne[3]` batch).
    pub fn along(self, from: usize) -> RowSampling {
        RowSampling { from, ..self }
    }
    /// The op makes only these inputs (spec indices; `Op::made_inputs`), the others drawn:
    /// what the host holds of a sampled case.
    pub fn made_only(self, specs: &[usize]) -> RowSampling {
        RowSampling {
            made: true,
            made_specs: Some(specs.to_vec()),
            ..self
        }
    }
    /// Whether input `spec` is one the op makes on the host (with `made`).
    pub fn makes(&self, spec: usize) -> bool {
        self.made && self.made_specs.as_ref().is_none_or(|v| v.contains(&spec))
    }
    /// Output rows that read the input rows the op's indices choose (`Op::gathered_case`).
    pub fn gathered(self) -> RowSampling {
        RowSampling {
            gather: true,
            ..self
        }
    }
    /// A gather (`gathered`) whose slices are runs of `width` elements of its flat outputs,
    /// not their rows.
    pub fn gathered_in_runs(self, width: u64) -> RowSampling {
        RowSampling {
            gather: true,
            runs: Some(width),
            ..self
        }
    }
    /// Inputs of distinct rows (`distinct_rows`), every one of them; rows independent.
    pub fn distinct(specs: usize) -> RowSampling {
        RowSampling {
            distinct: true,
            ..RowSampling::uniform(specs)
        }
    }
    /// Whether the inputs are distinct rows (`distinct`).
    pub fn is_distinct(&self) -> bool {
        self.distinct
    }
    /// Whether the op builds the sampled rows' case itself (`gathered`).
    pub fn is_gather(&self) -> bool {
        self.gather
    }
    /// Whether some inputs are made on the host (`made`).
    pub fn inputs_made(&self) -> bool {
        self.made
    }
    /// The first dimension the slices run along.
    pub fn from_dim(&self) -> usize {
        self.from
    }
    /// The range each spec's draw is uniform in (outputs' entries are not read).
    pub fn ranges(&self) -> &[(f32, f32)] {
        &self.ranges
    }
}

/// An op's C ABI for external code (harness/include/kedge.h), as data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExternalAbi {
    /// kedge.h's params struct for a plugin entry (`kedge_params_rms_norm`); `None`: the
    /// case's parameters as JSON (`kedge_params_json`).
    pub params: Option<CParams>,
    /// The op follows kedge.h's row-op kernel ABI, and this parameter is its last argument
    /// (`float eps_or_scale`).
    pub row_kernel_scalar: Option<&'static str>,
}

/// A params struct of kedge.h: its C name and its fields in declaration order. Every field
/// is 4 bytes, so the struct is the fields packed in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CParams {
    /// The struct's C name.
    pub c_name: &'static str,
    /// Its fields, in declaration order.
    pub fields: &'static [CField],
}

/// One 4-byte field of a kedge.h params struct and where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CField {
    /// `float`: the case's parameter of this name.
    F32(&'static str),
    /// `int32_t`: the case's integer or boolean parameter of this name.
    I32(&'static str),
    /// `int32_t`: 1 when the case has an input tensor of this name (softmax's mask).
    HasInput(&'static str),
}

/// Uniform [-1, 1) floats (never all zero), per tensor from its own stream. Integer tensors
/// get values in [0, 16).
pub fn random_inputs(seed: u64, specs: &[TensorSpec]) -> Vec<HostTensor> {
    specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, s)| random_tensor(seed, i as u64, s, -1.0, 1.0))
        .collect()
}

/// A block-format input of more values than this is made of a pool of this many values' rows
/// (`BlockPool`).
pub const POOLED_FROM: u64 = 1 << 24;

/// The rows a big block-format input is made of: a pool of `POOLED_FROM` values' rows, drawn
/// as `random_tensor` draws the input's first rows (the same stream), which the build under
/// test quantizes once, and for each of the input's rows the pool row it holds, picked by a
/// stream of its own. A 2^32-value input in a slow format is minutes of a host's quantizing
/// (for the device, and again for the reference); a pool is a fixed cost. A kernel that reads
/// another row than it should reads other values but for a chance of one in the pool's rows.
#[derive(Debug, Clone)]
pub struct BlockPool {
    /// The pool's spec: the input's rows, `rows` of them, dense.
    pub spec: TensorSpec,
    /// Rows in the pool.
    pub rows: u64,
    picks: Rng,
}

impl BlockPool {
    /// The pool of input `index` of spec `s`, or `None` where the input is drawn whole (not a
    /// block format, not dense, not past `POOLED_FROM` values, or rows too long for two in a
    /// pool).
    pub fn of(seed: u64, index: u64, s: &TensorSpec) -> Option<BlockPool> {
        let ne0 = s.ne[0].max(1) as u64;
        let rows = POOLED_FROM / ne0;
        let dense = s.nb == dense_strides(&s.ne, s.dtype);
        if !s.dtype.is_block() || !dense || s.nelements() <= POOLED_FROM || rows < 2 {
            return None;
        }
        let ne = [s.ne[0], rows as i64, 1, 1];
        Some(BlockPool {
            spec: TensorSpec {
                ne,
                nb: dense_strides(&ne, s.dtype),
                bytes: s.nb[1].saturating_mul(rows),
                ..s.clone()
            },
            rows,
            picks: Rng::stream(seed, u64::MAX - index),
        })
    }
    /// The pool row that row `row` of the input holds (each a single draw of the picks'
    /// stream, so any row's pick costs the same).
    pub fn pick(&self, row: u64) -> u64 {
        self.picks.skipped(row).below(self.rows)
    }
    /// The picks' stream as a device draws from it: row `r`'s pick is `below(rows)` of the mix
    /// of `state + (r + 1) * gamma` (`cuda::big::pool_rows`).
    pub fn picks_state(&self) -> u64 {
        self.picks.state()
    }
}

/// Fill a (possibly strided) tensor's span; padding bytes get values too, so a kernel that
/// reads padding reads plausible numbers (that is what a real engine's memory holds).
///
/// A block-format spec (`q4_0`, ...) gets its span's values as one flat f32 row: the ggml build
/// that runs the case quantizes them, `ne[0]` at a time (kedge does not).
pub fn random_tensor(seed: u64, index: u64, s: &TensorSpec, lo: f32, hi: f32) -> HostTensor {
    use rayon::prelude::*;
    if s.dtype.is_block() {
        // Every element of the span (a view's padding rows too), as one flat f32 row.
        let n = (s.bytes / s.dtype.size()).saturating_mul(s.dtype.block());
        let flat = [n as i64, 1, 1, 1];
        let twin = TensorSpec {
            dtype: DType::F32,
            ne: flat,
            nb: dense_strides(&flat, DType::F32),
            bytes: n.saturating_mul(4),
            ..s.clone()
        };
        return random_tensor(seed, index, &twin, lo, hi);
    }
    let rng = Rng::stream(seed, index);
    let n = (s.bytes / s.dtype.size()) as usize;
    // Chunks draw from the stream at their own offsets: the values are those of one
    // sequential pass, whatever the thread count.
    const CHUNK: usize = 1 << 16;
    let integer = s.dtype.is_integer();
    let draw = move |r: &mut Rng| {
        if integer {
            r.below(16) as f32
        } else {
            r.uniform(lo, hi)
        }
    };
    let mut t = if s.dtype == DType::F32 {
        // Straight into the tensor's bytes: no second copy of a multi-gigabyte input. Every
        // byte is drawn, so a recycled buffer of the last key's inputs serves.
        let mut bytes = crate::model::host::bytes_to_overwrite(n * 4);
        bytes
            .par_chunks_mut(CHUNK * 4)
            .enumerate()
            .for_each(|(c, out)| {
                let mut r = rng.skipped((c * CHUNK) as u64);
                for v in out.chunks_exact_mut(4) {
                    v.copy_from_slice(&draw(&mut r).to_le_bytes());
                }
            });
        HostTensor {
            dtype: s.dtype,
            ne: s.ne,
            nb: s.nb,
            bytes,
        }
    } else {
        let mut vals = crate::model::host::zeroed_f32(n);
        vals.par_chunks_mut(CHUNK).enumerate().for_each(|(c, out)| {
            let mut r = rng.skipped((c * CHUNK) as u64);
            for v in out {
                *v = draw(&mut r);
            }
        });
        HostTensor::from_f32(s.dtype, [n as i64, 1, 1, 1], &vals)
    };
    t.ne = s.ne;
    t.nb = s.nb;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kedge_distinct_rows` (cuda/big.cu), written out as the kernel computes it (a row's
    /// state at `r * draws` gammas, a swap with the top bits of `mix(s) * (i + 1)`, ranks made
    /// values in place, the padding after each row but the last uniform in [-1, 1)), makes
    /// the host's `distinct_rows`, padded rows included.
    #[test]
    fn the_device_shuffle_of_distinct_rows_is_the_hosts() {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let case = Case::new("argsort", "ggml:CPU", DType::F32, [7, 5, 3, 1]);
        let (n, pitch, rows) = (7u64, 10u64, 15u64);
        let spec = TensorSpec::strided(
            "a",
            Role::Input,
            DType::F32,
            case.ne,
            [4, 4 * pitch, 4 * pitch * 5, 4 * pitch * 15],
        )
        .expect("a spec");
        let host = distinct_rows(&case, &spec, 1);
        let state = Rng::stream(case.seed, 1).state();
        let draws = n - 1 + (pitch - n);
        let mut dev = vec![0u32; (pitch * (rows - 1) + n) as usize];
        for r in 0..rows {
            let at = (r * pitch) as usize;
            let mut s = state.wrapping_add(r.wrapping_mul(draws).wrapping_mul(GAMMA));
            for k in 0..n as usize {
                dev[at + k] = k as u32;
            }
            for i in (1..n).rev() {
                s = s.wrapping_add(GAMMA);
                let j = ((mix(s) as u128 * (i + 1) as u128) >> 64) as usize;
                dev.swap(at + i as usize, at + j);
            }
            for k in 0..n as usize {
                dev[at + k] = (dev[at + k] as f32).to_bits();
            }
            if r + 1 < rows {
                for k in n..pitch {
                    s = s.wrapping_add(GAMMA);
                    let unit = (mix(s) >> 40) as f32 * 5.960_464_5e-8;
                    dev[at + k as usize] = (-1.0f32 + 2.0 * unit).to_bits();
                }
            }
        }
        assert_eq!(host.bytes, bytemuck::cast_slice::<u32, u8>(&dev));
    }

    /// A sampled judge's rows of a distinct-rows input are those rows of the whole input, in
    /// any order asked, across the rows a task of `distinct_rows` draws.
    #[test]
    fn distinct_row_values_are_the_rows_of_the_whole_input() {
        let case = Case::new("argsort", "ggml:CPU", DType::F32, [5, 3000, 1, 1]);
        let spec = TensorSpec::dense("a", Role::Input, DType::F32, case.ne).expect("a spec");
        let whole = distinct_rows(&case, &spec, 2).to_f64();
        let rows = [2999u64, 0, 1023, 1024, 1500, 7];
        let got = distinct_row_values(&case, &spec, 2, &rows);
        for (k, &r) in rows.iter().enumerate() {
            let want: Vec<f32> = whole[r as usize * 5..(r as usize + 1) * 5]
                .iter()
                .map(|&v| v as f32)
                .collect();
            assert_eq!(&got[k * 5..(k + 1) * 5], &want[..], "row {r}");
            // Each row a shuffle of 0..5.
            let mut sorted = want.clone();
            sorted.sort_by(f32::total_cmp);
            assert_eq!(sorted, [0.0, 1.0, 2.0, 3.0, 4.0], "row {r}");
        }
    }

    /// `kedge_pool_rows` (cuda/big.cu) picks row `r`'s pool row as the top bits of the product
    /// of `pool_rows` with `kedge_mix(state + (r + 1) * gamma)`, from `picks_state`. Written
    /// out here as the kernel computes it, it must be the host's `pick` for every row, or the
    /// device would lay out other rows than the sampled judge's reference reads.
    #[test]
    fn the_device_pick_of_a_pool_row_is_the_hosts() {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let ne = [256, 1 << 23, 1, 1];
        for (dtype, seed, index) in [(DType::Q4K, 1, 0), (DType::Q8_0, 7, 2)] {
            let s = TensorSpec::dense("table", Role::Input, dtype, ne).expect("a spec");
            let pool = BlockPool::of(seed, index, &s).expect("a pooled input");
            assert!(pool.rows > 1 && pool.rows < ne[1] as u64);
            let mut seen = std::collections::BTreeSet::new();
            for r in (0..4096u64).chain([(1 << 23) - 1, 1 << 22, 12_345_678]) {
                let z = mix(pool.picks_state().wrapping_add((r + 1).wrapping_mul(GAMMA)));
                let k = ((z as u128 * pool.rows as u128) >> 64) as u64;
                assert_eq!(k, pool.pick(r), "{dtype} row {r}");
                seen.insert(k);
            }
            // The picks spread over the pool.
            assert!(seen.len() > 3000, "{} distinct pool rows", seen.len());
        }
    }

    #[test]
    fn rounded_to_adds_the_types_rounding_and_keeps_f32() {
        assert_eq!(Tolerance::rounded_to(DType::F32), Tolerance::F32);
        let f16 = Tolerance::rounded_to(DType::F16);
        let bf16 = Tolerance::rounded_to(DType::Bf16);
        assert!((6.4e-7..6.6e-7).contains(&f16.nmse), "{}", f16.nmse);
        assert!((1.7e-5..1.8e-5).contains(&bf16.nmse), "{}", bf16.nmse);
        assert_eq!(
            (f16.elem_abs, f16.elem_rel),
            (Tolerance::F16.elem_abs, Tolerance::F16.elem_rel)
        );
        // The worst a correct rounding can do: every value half a unit in the last place off,
        // at the bottom of its binade (relative error 2^-11, 2^-8). It passes; the same values
        // two units off do not.
        for (d, t, ulp) in [
            (DType::F16, f16, 2f64.powi(-10)),
            (DType::Bf16, bf16, 2f64.powi(-7)),
        ] {
            let nmse = |rel: f64| {
                let r: Vec<f64> = (0..1000).map(|i| (1 + i % 7) as f64).collect();
                let out: Vec<f64> = r.iter().map(|v| v * (1.0 + rel)).collect();
                let err: f64 = out.iter().zip(&r).map(|(o, r)| (o - r) * (o - r)).sum();
                err / r.iter().map(|r| r * r).sum::<f64>()
            };
            assert!(nmse(ulp / 2.0) <= t.nmse, "{d}: {}", nmse(ulp / 2.0));
            assert!(nmse(2.0 * ulp) > t.nmse, "{d}: {}", nmse(2.0 * ulp));
        }
    }

    #[test]
    fn a_parallel_fill_gives_the_values_of_one_sequential_pass() {
        // Three chunks and a bit, so chunk edges are crossed.
        let n = 3 * (1 << 16) + 5;
        for dtype in [DType::F32, DType::I32] {
            let spec = TensorSpec::dense("x", Role::Input, dtype, [n, 1, 1, 1]).expect("spec");
            let t = random_tensor(9, 4, &spec, -1.0, 1.0);
            let mut r = Rng::stream(9, 4);
            let want: Vec<f32> = (0..n)
                .map(|_| match dtype {
                    DType::I32 => r.below(16) as f32,
                    _ => r.uniform(-1.0, 1.0),
                })
                .collect();
            assert_eq!(
                t.bytes,
                HostTensor::from_f32(dtype, [n, 1, 1, 1], &want).bytes,
                "{dtype:?}"
            );
        }
    }
}
