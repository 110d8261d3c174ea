//! Judging a big case on sampled slices. A case of 2^31 elements is there for its index
//! widths: what breaks, breaks at the slices where an offset crosses 2^31 or 2^32, at the
//! first and the last slice, at a grid limit, or everywhere. So its inputs are drawn on the
//! device (the same values as the host draw) or, where the op makes them (indices, positions),
//! made on the host and uploaded; the whole output is scanned there for elements never written
//! and for non-finite values; and the slices at and around every crossing, the first and last
//! slices and a seeded sample of the rest are read back and compared with a reference computed
//! for those slices alone: the op on a case of just those slices (`sliced`), whose inputs are
//! the same slices of the same inputs (`gathered_inputs`). A slice is a row (one index of
//! `ne[1..3]`) for ops whose rows are independent, a plane (`ne[2..3]`) or a batch (`ne[3]`)
//! for ops whose rows are not (a gather within a batch, a convolution per image). That needs an
//! op that promises it (`Op::row_sampling`) and tensors that are stacks of the case's slices
//! (`slicing`, checked from the op's own shapes).

use crate::contract::op::{Role, RowSampling, TensorSpec, Tolerance};
use crate::cuda::big::Scan;
use crate::error::CaseError;
use crate::judge::compare::{compare, nothing_written, Comparison};
use crate::model::case::Case;
use crate::model::host::HostTensor;
use crate::model::rng::Rng;
use crate::model::shape::dense_strides;
use crate::model::words::Verdict;
use serde::{Deserialize, Serialize};

/// From this many elements in a case's largest tensor, `Judging::Auto` judges on sampled rows.
/// A case of 2^20 to 2^24 elements judged whole spends its time on the host (drawing 4 to 64
/// MiB of inputs, a CPU reference of every row, reading every element back): such cases were
/// most of kedge's default suite's case time, and sampled and whole judging gave them the same
/// verdict and detector on the GPU (`--judge full` against `--judge sampled`).
pub const SAMPLED_FROM: u64 = 1 << 20;

/// From this many elements in a case's largest tensor, a case judged whole is costly: a CPU
/// reference of the whole case, seconds to minutes (`big_and_whole`).
pub const BIG_FROM: u64 = 1 << 26;

/// Rows drawn at random (seeded by the case) beside the crossings and the ends.
const RANDOM_ROWS: usize = 64;

/// How a worker judges big cases' outputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Judging {
    /// Sampled rows for cases of `SAMPLED_FROM` elements or more whose op allows it.
    #[default]
    Auto,
    /// Every case whole.
    Full,
    /// Sampled rows for every case whose op allows it, whatever its size (to compare the two).
    Sampled,
}

impl Judging {
    /// `auto`, `full`, `sampled`.
    pub fn name(self) -> &'static str {
        match self {
            Judging::Auto => "auto",
            Judging::Full => "full",
            Judging::Sampled => "sampled",
        }
    }
    /// Whether a case whose largest tensor has `elements` elements is judged on sampled rows
    /// (when its op and impl allow it).
    fn samples(self, elements: u64) -> bool {
        match self {
            Judging::Auto => elements >= SAMPLED_FROM,
            Judging::Full => false,
            Judging::Sampled => true,
        }
    }
}

impl std::str::FromStr for Judging {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Judging::Auto),
            "full" => Ok(Judging::Full),
            "sampled" => Ok(Judging::Sampled),
            _ => Err(format!(
                "unknown judging '{s}' (known: auto, full, sampled)"
            )),
        }
    }
}

/// How a case is cut for sampled judging: into `count` slices along the case's dimensions
/// `from..4` (rows for `from` 1, planes for 2, batches for 3), each tensor a stack of its
/// slices, one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slicing {
    /// The first dimension the slices run along.
    pub from: usize,
    /// Slices in the case: the product of `ne[from..4]`.
    pub count: u64,
    /// Per spec, the bytes of one slice; 0 for an input every slice reads whole (a broadcast
    /// weight, a convolution's kernel).
    pub chunk: Vec<u64>,
    /// The extents the slice index runs over (the case's `ne[from..4]`; a gather's output
    /// rows), innermost first: where the grid limits fall.
    pub extents: Vec<i64>,
    /// Elements of a slice that is a run of a gather's flat output (`output_runs`), not a
    /// row or a slice along the case's dimensions.
    pub run: Option<u64>,
}

impl Slicing {
    /// Elements of one slice of spec `i` (0 for an input read whole).
    pub fn chunk_elements(&self, s: &TensorSpec, i: usize) -> u64 {
        let bytes = self.chunk.get(i).copied().unwrap_or(0);
        bytes / s.dtype.size().max(1) * s.dtype.block()
    }
    /// What the slices are called in a verdict: rows, or slices along `ne[k..3]`.
    pub fn unit(&self) -> String {
        if let Some(w) = self.run {
            format!("runs of {w} elements")
        } else if self.from == 1 {
            "rows".into()
        } else {
            format!("slices along ne[{}..3]", self.from)
        }
    }
}

/// How `case` cuts into slices along `ne[from..4]` (`Slicing`), given the op's tensors for any
/// case (`tensors`), or `None` where it does not: every tensor dense and either a stack of
/// the case's slices (its outermost dimensions are the case's `ne[from..4]`, its bytes divide
/// by the slice count, and the op gives it `n` slices' bytes in the case of `n` slices,
/// `sliced`) or an input that is the same in the case of any number of slices (read whole by
/// each). Two slice counts are asked, so a tensor whose size only happens to match once is
/// not taken for a stack.
pub fn slicing(
    case: &Case,
    specs: &[TensorSpec],
    from: usize,
    tensors: &dyn Fn(&Case) -> Option<Vec<TensorSpec>>,
) -> Option<Slicing> {
    if !(1..=3).contains(&from) {
        return None;
    }
    let count = case.ne[from..]
        .iter()
        .try_fold(1u64, |a, &x| a.checked_mul(u64::try_from(x).ok()?))?;
    // One slice is the whole case: nothing to sample.
    if count < 2 {
        return None;
    }
    // The slice index's extents (`ne[from..4]` without its trailing ones): a stack of the
    // case's slices has them as its outermost dimensions.
    let mut extents = &case.ne[from..];
    while let [rest @ .., 1] = extents {
        extents = rest;
    }
    let two = tensors(&sliced(case, 2, from))?;
    let three = tensors(&sliced(case, 3, from))?;
    if two.len() != specs.len() || three.len() != specs.len() {
        return None;
    }
    let dense = |s: &TensorSpec| s.nb == dense_strides(&s.ne, s.dtype);
    let mut chunk = Vec::with_capacity(specs.len());
    for ((s, a), b) in specs.iter().zip(&two).zip(&three) {
        if !dense(s) || !dense(a) || !dense(b) || a.dtype != s.dtype || b.dtype != s.dtype {
            return None;
        }
        if s.role == Role::Input && a.ne == s.ne && b.ne == s.ne {
            chunk.push(0);
            continue;
        }
        let c = s.bytes / count;
        if c == 0 || !s.bytes.is_multiple_of(count) || a.bytes != 2 * c || b.bytes != 3 * c {
            return None;
        }
        if !outermost(&s.ne, extents) {
            return None;
        }
        chunk.push(c);
    }
    // A case all of whose tensors are read whole has nothing to sample.
    chunk.iter().any(|&c| c > 0).then_some(Slicing {
        from,
        count,
        chunk,
        extents: case.ne[from..].to_vec(),
        run: None,
    })
}

/// Whether a tensor of shape `ne` has `extents` as its outermost dimensions (every dimension
/// after them 1): then its slices lie one after the other, the slice index running as the
/// case's does. A tensor of the right size whose outer dimensions differ (a broadcast source
/// tiled over more rows than the case has, positions laid out in sections) is not a stack.
fn outermost(ne: &[i64; 4], extents: &[i64]) -> bool {
    (0..=4 - extents.len()).any(|j| {
        ne[j..j + extents.len()] == *extents && ne[j + extents.len()..].iter().all(|&x| x == 1)
    })
}

/// The finest slicing of `case` from dimension `from` on (`slicing` along `from`, else
/// `from + 1`, ...): slices independent along `ne[from..4]` are independent along any
/// dimensions after `from` too, so where the tensors are not stacks of rows they may still be
/// stacks of planes.
pub fn slicing_from(
    case: &Case,
    specs: &[TensorSpec],
    from: usize,
    tensors: &dyn Fn(&Case) -> Option<Vec<TensorSpec>>,
) -> Option<Slicing> {
    (from.max(1)..=3).find_map(|k| slicing(case, specs, k, tensors))
}

/// The case's slicing where its op allows sampled judging (`Op::row_sampling`): along the
/// dimensions the op declares, or fewer of them (`slicing_from`); a gather's output rows
/// (`output_rows`).
pub fn slicing_of(op: &dyn crate::contract::op::Op, case: &Case) -> Option<Slicing> {
    let sampling = op.row_sampling(case)?;
    let specs = op.tensors(case).ok()?;
    if sampling.gather {
        return match sampling.runs {
            Some(width) => output_runs(&specs, width),
            None => output_rows(&specs),
        };
    }
    slicing_from(case, &specs, sampling.from, &|c| op.tensors(c).ok())
}

/// A gather's slicing in runs (`RowSampling::gathered_in_runs`): slice `k` of each output is
/// its flat elements `k * width .. (k + 1) * width`, every output dense, of a type whose
/// blocks a run does not cut, and in the same number of runs (two or more). The crossings of
/// 2^31 and 2^32 elements and bytes fall in runs as they fall in rows (`sample_slices`); a
/// run has no place along the rows' dimensions, so the grid limits' rows are not picked out.
pub fn output_runs(specs: &[TensorSpec], width: u64) -> Option<Slicing> {
    let mut count = None;
    let mut chunk = Vec::with_capacity(specs.len());
    for s in specs {
        if s.role != Role::Output {
            chunk.push(0);
            continue;
        }
        let n = s.nelements();
        let block = s.dtype.block().max(1);
        if width == 0
            || s.nb != dense_strides(&s.ne, s.dtype)
            || !n.is_multiple_of(width)
            || !width.is_multiple_of(block)
        {
            return None;
        }
        let runs = n / width;
        if runs < 2 || count.is_some_and(|c| c != runs) {
            return None;
        }
        count = Some(runs);
        chunk.push(width / block * s.dtype.size());
    }
    let count = count?;
    Some(Slicing {
        from: 1,
        count,
        chunk,
        extents: vec![i64::try_from(count).ok()?],
        run: Some(width),
    })
}

/// A gather's slicing (`RowSampling::gathered`): the outputs' rows, every output dense with
/// the same number of rows (two or more); the inputs are the op's to cut (`Op::gathered_case`),
/// so their entries are 0.
pub fn output_rows(specs: &[TensorSpec]) -> Option<Slicing> {
    let mut count = None;
    let mut extents = Vec::new();
    let mut chunk = Vec::with_capacity(specs.len());
    for s in specs {
        if s.role != Role::Output {
            chunk.push(0);
            continue;
        }
        let rows = (s.ne[1..].iter().product::<i64>()).max(0) as u64;
        if s.nb != dense_strides(&s.ne, s.dtype) || rows < 2 || count.is_some_and(|c| c != rows) {
            return None;
        }
        count = Some(rows);
        extents = s.ne[1..].to_vec();
        chunk.push(s.nb[1]);
    }
    Some(Slicing {
        from: 1,
        count: count?,
        chunk,
        extents,
        run: None,
    })
}

/// Rows `rows` (each `ne[0]` elements, flat `ne[1..3]` indices) of input `index` of spec `s`
/// as the case draws it: from the stream at each row's offset, uniform in [lo, hi) (integers in
/// [0, 16)), a big block-format input's rows from its pool. A dense `[ne0, rows, 1, 1]` tensor.
pub fn drawn_rows(
    case: &Case,
    s: &TensorSpec,
    index: usize,
    rows: &[u64],
    (lo, hi): (f32, f32),
) -> HostTensor {
    let n0 = s.ne[0].max(1) as u64;
    let vals = row_values(case, s, index, rows, (lo, hi));
    HostTensor::from_f32(s.dtype, [n0 as i64, rows.len() as i64, 1, 1], &vals)
}

/// The values of input `index` of spec `s` at flat elements `at`, in that order, as the case
/// draws them (`drawn_rows`' values, element by element). For a gather that reads its inputs
/// element by element (a transpose sampled in runs of its output).
pub fn drawn_elements(
    case: &Case,
    s: &TensorSpec,
    index: usize,
    at: &[u64],
    range: (f32, f32),
) -> Vec<f32> {
    let d = Draw::of(case, s, index, range);
    at.iter().map(|&p| d.at(p)).collect()
}

/// The values of rows `rows` of input `index` (`drawn_rows`), one row after the other.
fn row_values(
    case: &Case,
    s: &TensorSpec,
    index: usize,
    rows: &[u64],
    range: (f32, f32),
) -> Vec<f32> {
    let d = Draw::of(case, s, index, range);
    let mut vals = Vec::with_capacity(rows.len() * d.n0 as usize);
    for &r in rows {
        d.row(r, &mut vals);
    }
    vals
}

/// How input `index` of spec `s` is drawn: each element one draw from its place in the
/// stream, uniform in [lo, hi) (integers in [0, 16)); a big block-format input's rows from
/// its pool's rows (`BlockPool`).
struct Draw {
    n0: u64,
    stream: Rng,
    pool: Option<crate::contract::op::BlockPool>,
    integer: bool,
    range: (f32, f32),
}

impl Draw {
    fn of(case: &Case, s: &TensorSpec, index: usize, range: (f32, f32)) -> Draw {
        Draw {
            n0: s.ne[0].max(1) as u64,
            stream: Rng::stream(case.seed, index as u64),
            pool: crate::contract::op::BlockPool::of(case.seed, index as u64, s),
            integer: s.dtype.is_integer(),
            range,
        }
    }
    /// The next value of a stream positioned at an element.
    fn next(&self, rng: &mut Rng) -> f32 {
        if self.integer {
            rng.below(16) as f32
        } else {
            rng.uniform(self.range.0, self.range.1)
        }
    }
    /// The stream at row `r`'s first element (its pool row's, for a pooled input).
    fn row_start(&self, r: u64) -> Rng {
        let r = self.pool.as_ref().map_or(r, |p| p.pick(r));
        self.stream.skipped(r * self.n0)
    }
    /// Row `r`'s values, appended to `out`.
    fn row(&self, r: u64, out: &mut Vec<f32>) {
        let mut rng = self.row_start(r);
        out.extend((0..self.n0).map(|_| self.next(&mut rng)));
    }
    /// Flat element `p`'s value.
    fn at(&self, p: u64) -> f32 {
        let mut rng = self.row_start(p / self.n0).skipped(p % self.n0);
        self.next(&mut rng)
    }
}

/// Whether a case is judged on sampled slices by an impl that can run it so: `judging` samples
/// its size, its op allows it, every tensor is a dense stack of the case's slices or an input
/// read whole, and every output is of a type the device scans (a block format's blocks too).
pub fn sampled(op: &dyn crate::contract::op::Op, case: &Case, judging: Judging) -> bool {
    if judging == Judging::Full {
        return false;
    }
    let Ok(specs) = op.tensors(case) else {
        return false;
    };
    judging.samples(largest(&specs))
        && slicing_of(op, case).is_some()
        && specs
            .iter()
            .filter(|s| s.role == Role::Output)
            .all(|s| crate::cuda::big::can_scan(s.dtype))
}

/// Whether kedge's kernels can judge a case of these tensors on sampled slices: they compare
/// what they read back as it is, so no output may be of a block format. (The engine's choice
/// and the runner's admission both ask this.)
pub fn kernels_read_back_as_is(specs: &[TensorSpec]) -> bool {
    specs
        .iter()
        .all(|s| s.role != Role::Output || !s.dtype.is_block())
}

/// Whether a case is big (`BIG_FROM` elements or more in a tensor) and still judged whole
/// under `judging`: a CPU reference of the whole case, seconds to minutes.
pub fn big_and_whole(op: &dyn crate::contract::op::Op, case: &Case, judging: Judging) -> bool {
    op.tensors(case)
        .is_ok_and(|specs| largest(&specs) >= BIG_FROM)
        && !sampled(op, case, judging)
}

/// Elements of the case's largest tensor.
fn largest(specs: &[TensorSpec]) -> u64 {
    specs.iter().map(TensorSpec::nelements).max().unwrap_or(0)
}

/// The slices a sampled judge compares, ascending: the first two and the last two; for every
/// sliced tensor, the slices holding elements 2^31 - 1, 2^31, 2^32 - 1 and 2^32 and the byte
/// offsets 2^31 and 2^32, each with its neighbours; the slices at index 65535 and 65536 of each
/// sliced dimension (a grid limit) with theirs; and `RANDOM_ROWS` slices drawn from the case's
/// seed.
pub fn sample_slices(case: &Case, specs: &[TensorSpec], sl: &Slicing) -> Vec<u64> {
    let n = sl.count;
    let mut v: Vec<u64> = vec![0, 1, n.saturating_sub(2), n.saturating_sub(1)];
    let mut around = |r: u64| v.extend([r.saturating_sub(1), r, r + 1]);
    for (i, s) in specs.iter().enumerate() {
        let (bytes, elems) = (
            sl.chunk.get(i).copied().unwrap_or(0),
            sl.chunk_elements(s, i),
        );
        if bytes == 0 || elems == 0 {
            continue;
        }
        for t in [1u64 << 31, 1u64 << 32] {
            around((t - 1) / elems);
            around(t / elems);
            around(t / bytes);
        }
    }
    for at in [65_535u64, 65_536] {
        let mut step = 1u64;
        for &e in &sl.extents {
            around(at.saturating_mul(step));
            step = step.saturating_mul(e.max(1) as u64);
        }
    }
    let mut rng = Rng::stream(case.seed, 0x5A3B_1E50);
    for _ in 0..RANDOM_ROWS {
        v.push(rng.below(n.max(1)));
    }
    v.retain(|&r| r < n);
    v.sort_unstable();
    v.dedup();
    v
}

/// The input of spec `spec` as the op made it (`Op::made_inputs`, paired with spec indices),
/// or `None` where it is drawn.
pub fn made_input(made: &[(usize, HostTensor)], spec: usize) -> Option<&HostTensor> {
    made.iter().find(|(k, _)| *k == spec).map(|(_, h)| h)
}

/// The case of `n` slices alone: the same op, dtype, parameters and seed, `ne[from]` = `n`
/// and the dimensions after it 1 (`[ne0, n, 1, 1]` for rows).
pub fn sliced(case: &Case, n: u64, from: usize) -> Case {
    let mut c = case.clone();
    for d in from..4 {
        c.ne[d] = 1;
    }
    if let Some(x) = c.ne.get_mut(from) {
        *x = n as i64;
    }
    c
}

/// The sliced case's inputs: slice `j` of input `i` is slice `slices[j]` of the case's input
/// `i`, and an input read whole is the whole of it. An input the op made (`made`, by spec
/// index, made whole on the host) is cut from it; a drawn one is drawn from the same stream
/// at that slice's offset as the op's sampling declares it (`random_tensor(seed, i, .., lo,
/// hi)` with its range; for a big block-format input, its pool rows: `BlockPool`; for distinct
/// rows, as `contract::op::distinct_rows` makes them). So the reference of the sliced case is
/// the reference of those slices.
pub fn gathered_inputs(
    case: &Case,
    specs: &[TensorSpec],
    sliced_specs: &[TensorSpec],
    sl: &Slicing,
    slices: &[u64],
    sampling: &RowSampling,
    made: &[(usize, HostTensor)],
) -> Result<Vec<HostTensor>, CaseError> {
    let bad = |msg: String| CaseError::BadInput {
        op: case.op.clone(),
        msg,
    };
    if sliced_specs.len() != specs.len() || sl.chunk.len() != specs.len() {
        return Err(bad(format!(
            "{} tensors for sampled slices, {} for the case",
            sliced_specs.len(),
            specs.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (s, ss)) in specs.iter().zip(sliced_specs).enumerate() {
        if s.role != Role::Input {
            continue;
        }
        let chunk = sl.chunk[i];
        let want_bytes = if chunk == 0 {
            s.bytes
        } else {
            chunk * slices.len() as u64
        };
        if ss.bytes != want_bytes || ss.dtype != s.dtype || (chunk == 0 && ss.ne != s.ne) {
            return Err(bad(format!(
                "input {}: the sampled slices' tensor is {:?} of {} ({} bytes), {want_bytes} bytes expected",
                s.name, ss.ne, ss.dtype, ss.bytes
            )));
        }
        if let Some(h) = made_input(made, i) {
            if chunk == 0 {
                out.push(h.clone());
                continue;
            }
            // A made tensor holds the spec's bytes or (a block format) its f32 values: cut it
            // by its own bytes per slice.
            let len = h.bytes.len() as u64;
            if !len.is_multiple_of(sl.count) {
                return Err(bad(format!(
                    "input {}: {len} made bytes do not cut into {} slices",
                    s.name, sl.count
                )));
            }
            let per = (len / sl.count) as usize;
            let mut bytes = Vec::with_capacity(per * slices.len());
            for &p in slices {
                let at = p as usize * per;
                let b = h
                    .bytes
                    .get(at..at + per)
                    .ok_or_else(|| bad(format!("input {}: slice {p} is past its end", s.name)))?;
                bytes.extend_from_slice(b);
            }
            let ne = if h.dtype == s.dtype {
                ss.ne
            } else {
                let e = (per * slices.len()) as u64 / h.dtype.size().max(1) * h.dtype.block();
                [e as i64, 1, 1, 1]
            };
            out.push(HostTensor::from_bytes(
                h.dtype,
                ne,
                dense_strides(&ne, h.dtype),
                bytes,
            ));
            continue;
        }
        let n0 = s.ne[0].max(1) as u64;
        let range = sampling.ranges.get(i).copied().unwrap_or((-1.0, 1.0));
        // The rows to draw: the whole input's, or each sampled slice's.
        let rows: Vec<u64> = if chunk == 0 {
            (0..s.nelements() / n0).collect()
        } else {
            let per = sl.chunk_elements(s, i) / n0;
            slices
                .iter()
                .flat_map(|&p| p * per..(p + 1) * per)
                .collect()
        };
        let vals = if sampling.distinct {
            crate::contract::op::distinct_row_values(case, s, i, &rows)
        } else {
            row_values(case, s, i, &rows, range)
        };
        out.push(HostTensor::from_f32(s.dtype, ss.ne, &vals));
    }
    Ok(out)
}

/// The case of the sampled slices alone and its inputs: the op's own for a gather
/// (`Op::gathered_case`), else the case cut along `sl` (`sliced`) with the same slices of its
/// inputs (`gathered_inputs`). `made`: the inputs the op made for the whole case.
pub fn sampled_case(
    op: &dyn crate::contract::op::Op,
    case: &Case,
    specs: &[TensorSpec],
    sampling: &RowSampling,
    sl: &Slicing,
    slices: &[u64],
    made: &[(usize, HostTensor)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    if sampling.gather {
        return op.gathered_case(case, specs, slices, made, &sampling.ranges);
    }
    let sliced = sliced(case, slices.len() as u64, sl.from);
    let sliced_specs = op.tensors(&sliced)?;
    let inputs = gathered_inputs(case, specs, &sliced_specs, sl, slices, sampling, made)?;
    Ok((sliced, inputs))
}

/// Whether `op`'s reference of `case` on sampled slices (every other slice, and the last)
/// equals those slices of its reference of the whole case: the check of an op's sampling
/// declaration (`Op::row_sampling`, `Op::gathered_case`) for its tests, on cases small enough
/// for both. `Ok(None)`: the case is judged whole (no sampling, not a stack of slices, fewer
/// than three of them, or a scatter none of whose sampled rows is set); `Ok(Some(from))`: equal,
/// sliced from dimension `from`; `Err`: what differs.
pub fn sampled_matches_whole(
    op: &dyn crate::contract::op::Op,
    case: &Case,
) -> Result<Option<usize>, String> {
    let Some(sampling) = op.row_sampling(case) else {
        return Ok(None);
    };
    let Ok(specs) = op.tensors(case) else {
        return Ok(None);
    };
    let Some(sl) = slicing_of(op, case) else {
        return Ok(None);
    };
    if sl.count < 3 {
        return Ok(None);
    }
    let mut picked: Vec<u64> = (1..sl.count).step_by(2).collect();
    if picked.last() != Some(&(sl.count - 1)) {
        picked.push(sl.count - 1);
    }
    let whole_in = op
        .inputs(case, &specs)
        .map_err(|e| format!("inputs: {e}"))?;
    // What the op makes is cut from what it made; the rest is drawn at each slice.
    let made = if sampling.inputs_made() {
        op.made_inputs(case, &specs)
            .map_err(|e| format!("made inputs: {e}"))?
    } else {
        Vec::new()
    };
    let (sc, cut) = match sampled_case(op, case, &specs, &sampling, &sl, &picked, &made) {
        Ok(x) => x,
        Err(e) if e.to_string().contains("no sampled row is set") => return Ok(None),
        Err(e) => return Err(format!("the sampled case: {e}")),
    };
    let whole = op
        .reference(case, &whole_in)
        .map_err(|e| format!("reference: {e}"))?;
    let part = op
        .reference(&sc, &cut)
        .map_err(|e| format!("the sampled case's reference: {e}"))?;
    let outs = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Output);
    for (k, (i, s)) in outs.enumerate() {
        let per = sl.chunk_elements(s, i) as usize;
        let (Some(whole), Some(part)) = (whole.get(k), part.get(k)) else {
            return Err(format!("output {} has no reference", s.name));
        };
        let want: Vec<f64> = picked
            .iter()
            .flat_map(|&p| {
                whole[p as usize * per..(p as usize + 1) * per]
                    .iter()
                    .copied()
            })
            .collect();
        let same = want.len() == part.len()
            && want.iter().zip(part).all(|(a, b)| {
                a.to_bits() == b.to_bits() || (a - b).abs() <= 1e-6 * a.abs().max(1.0)
            });
        if !same {
            let at = want
                .iter()
                .zip(part)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            return Err(format!(
                "{} ({} {:?}): output {} of the sliced case is not the slices of the whole ({} vs {} values, first difference at {at:?})",
                case.label(),
                sl.unit(),
                sl.count,
                s.name,
                part.len(),
                want.len()
            ));
        }
    }
    Ok(Some(sl.from))
}

/// Where an output's sampled values lie: the case's slicing, the slices read, and the output's
/// place among the case's specs (`Slicing::chunk`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampledAt<'a> {
    pub(crate) slicing: &'a Slicing,
    pub(crate) slices: &'a [u64],
    pub(crate) index: usize,
}

/// Whether any of the inputs an op made (`Op::made_inputs`) holds a non-finite value: a mask's
/// -inf, which makes the reference non-finite wherever it lies.
/// Read in parallel and stopped at the first: a made input can be gigabytes.
pub fn holds_nonfinite(made: &[(usize, HostTensor)]) -> bool {
    use rayon::prelude::*;
    made.iter()
        .filter(|(_, t)| t.dtype.is_float())
        .any(|(_, t)| {
            let e = t.dtype.size() as usize;
            t.bytes
                .par_chunks(e << 16)
                .any(|c| c.chunks_exact(e).any(|x| t.dtype.is_nonfinite(x)))
        })
}

/// An output judged on its sampled slices and its scan: elements never written anywhere in it
/// (the scan), then wrong values in the sampled slices, then non-finite values anywhere where
/// the sampled reference is finite. `first_bad` and the output's shape name the element in
/// the whole output. Where the inputs the op made hold non-finite values (`made_nonfinite`: a
/// mask's -inf), the reference may be non-finite in slices not sampled, so non-finite values
/// outside the sampled slices are counted in the detail, not judged: a masked output whose
/// sampled rows missed every masked block would otherwise fail for values its whole reference
/// holds too (lightning_indexer `[128,32,64,14528]`: 18,812 -inf elements, all where the mask
/// is -inf, none in the 68 sampled slices).
pub(crate) fn judge_output(
    spec: &TensorSpec,
    got_rows: &HostTensor,
    reference: &[f64],
    scan: Scan,
    at: SampledAt<'_>,
    tol: Tolerance,
    made_nonfinite: bool,
) -> Comparison {
    let (sl, slices) = (at.slicing, at.slices);
    let name = &spec.name;
    let mut c = compare(name, got_rows, reference, tol);
    let per = sl.chunk_elements(spec, at.index).max(1);
    // The comparison named elements among the sampled ones; `numbers` and the detail name
    // them in the whole output.
    let whole = |f: u64| slices.get((f / per) as usize).map(|r| r * per + f % per);
    let (first, worst) = (c.numbers.first_bad, c.numbers.worst_bad);
    c.numbers.first_bad = first.and_then(whole);
    c.numbers.worst_bad = worst.and_then(whole);
    for (said, at, w) in [
        ("first bad", first, c.numbers.first_bad),
        ("worst", worst, c.numbers.worst_bad),
    ] {
        if let (Some(f), Some(w)) = (at, w) {
            c.detail = c.detail.replace(
                &format!(", {said} at flat index {f}"),
                &format!(", {said} at flat index {w} of the whole output"),
            );
        }
    }
    c.numbers.output_ne = Some(spec.ne);
    let sampled = format!(
        "judged on {} of its {} {} (crossings, the ends, a seeded sample), the whole of it scanned for poison and non-finite values",
        slices.len(),
        sl.count,
        sl.unit()
    );
    if scan.elements > 0 && scan.unwritten == scan.elements {
        let mut w = nothing_written(name, scan.elements);
        w.numbers.output = Some(name.clone());
        w.numbers.output_ne = Some(spec.ne);
        return w;
    }
    if scan.unwritten > 0 {
        c.verdict = Verdict::UnwrittenOutput;
        c.numbers.unwritten = scan.unwritten;
        c.detail = format!(
            "{name}: {} of {} elements never written (poison counted on the device over the whole output); {sampled}",
            scan.unwritten, scan.elements
        );
        return c;
    }
    if c.verdict != Verdict::Pass {
        c.detail = format!("{} ({sampled})", c.detail);
        return c;
    }
    let reference_finite = reference.iter().all(|x| x.is_finite());
    if scan.nonfinite > 0 && reference_finite && spec.dtype.is_float() && made_nonfinite {
        c.detail = format!(
            "{name}: {} non-finite elements over the whole output (counted on the device), not judged: the inputs the op made hold non-finite values, so its reference may be non-finite outside the sampled slices; {sampled}",
            scan.nonfinite
        );
        return c;
    }
    if scan.nonfinite > 0 && reference_finite && spec.dtype.is_float() {
        c.verdict = Verdict::Nonfinite;
        c.numbers.nonfinite = scan.nonfinite;
        c.detail = format!(
            "{name}: {} non-finite elements (counted on the device over the whole output) where the sampled rows' reference is finite; {sampled}",
            scan.nonfinite
        );
        return c;
    }
    c.detail = format!("{name}: {sampled}");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::op::random_tensor;
    use crate::model::dtype::DType;
    use crate::model::host::POISON_F32;

    fn spec(name: &str, role: Role, ne: [i64; 4]) -> TensorSpec {
        TensorSpec::dense(name, role, DType::F32, ne).expect("spec")
    }

    /// An op of one input and one output of the case's shape (an element-wise op).
    fn same_shape(c: &Case) -> Option<Vec<TensorSpec>> {
        Some(vec![
            spec("a", Role::Input, c.ne),
            spec("d", Role::Output, c.ne),
        ])
    }

    fn rows(c: &Case, specs: &[TensorSpec]) -> Option<Slicing> {
        slicing(c, specs, 1, &same_shape)
    }

    /// A gather sliced in runs: each output cut into runs of the width, whole blocks only;
    /// the runs holding the 2^31st element are among those sampled; elements drawn one by
    /// one are the whole draw's.
    #[test]
    fn a_gathers_runs_cut_its_flat_outputs_and_elements_draw_as_the_whole() {
        let out = |dtype: DType, ne: [i64; 4]| {
            vec![
                spec("x", Role::Input, [3, 3, 1, 1]),
                TensorSpec::dense("d", Role::Output, dtype, ne).expect("spec"),
            ]
        };
        let sl = output_runs(&out(DType::F32, [12, 5, 1, 1]), 6).expect("runs");
        assert_eq!(
            (sl.count, sl.chunk.clone(), sl.run),
            (10, vec![0, 24], Some(6))
        );
        assert_eq!(sl.unit(), "runs of 6 elements");
        // A width that does not divide the output, one run, a run cutting a block: none.
        assert!(output_runs(&out(DType::F32, [12, 5, 1, 1]), 7).is_none());
        assert!(output_runs(&out(DType::F32, [12, 5, 1, 1]), 60).is_none());
        assert!(output_runs(&out(DType::Q4_0, [64, 4, 1, 1]), 16).is_none());
        assert_eq!(
            output_runs(&out(DType::Q4_0, [64, 4, 1, 1]), 64).map(|s| s.chunk),
            Some(vec![0, 36])
        );
        // 2^31 + 4096 elements in runs of 4096: the run holding element 2^31 is sampled.
        let big = out(DType::F32, [4096, (1 << 19) + 1, 1, 1]);
        let sl = output_runs(&big, 4096).expect("runs");
        let case = Case::new("t", "x", DType::F32, [3, 3, 1, 1]);
        let picked = sample_slices(&case, &big, &sl);
        assert!(picked.contains(&(1 << 19)) && picked.contains(&((1 << 19) - 1)));
        // Element draws.
        let x = TensorSpec::dense("x", Role::Input, DType::F32, [7, 5, 1, 1]).expect("spec");
        let whole = random_tensor(case.seed, 0, &x, -1.0, 1.0).to_f64();
        let at = [0u64, 6, 7, 20, 34, 13];
        let got = drawn_elements(&case, &x, 0, &at, (-1.0, 1.0));
        let want: Vec<f32> = at.iter().map(|&p| whole[p as usize] as f32).collect();
        assert_eq!(got, want);
    }

    /// Whether `gathered_inputs` draws what `random_tensor` draws for the whole case.
    fn draws_agree(case: &Case, spec: &TensorSpec, index: usize, rows: &[u64]) -> bool {
        let whole = random_tensor(case.seed, index as u64, spec, -1.0, 1.0);
        let n0 = spec.ne[0] as usize;
        let e = spec.dtype.size() as usize;
        let sl = sliced(case, rows.len() as u64, 1);
        let ss = TensorSpec::dense(&spec.name, Role::Input, spec.dtype, sl.ne);
        let Ok(ss) = ss else { return false };
        let specs = vec![spec.clone(); index + 1];
        let sspecs = vec![ss; index + 1];
        let cut = Slicing {
            from: 1,
            count: spec.nelements() / n0 as u64,
            chunk: vec![(n0 * e) as u64; index + 1],
            extents: case.ne[1..].to_vec(),
            run: None,
        };
        let Ok(g) = gathered_inputs(
            case,
            &specs,
            &sspecs,
            &cut,
            rows,
            &RowSampling::uniform(index + 1),
            &[],
        ) else {
            return false;
        };
        let Some(got) = g.get(index) else {
            return false;
        };
        rows.iter().enumerate().all(|(j, &r)| {
            let a = &whole.bytes[r as usize * n0 * e..(r as usize + 1) * n0 * e];
            let b = &got.bytes[j * n0 * e..(j + 1) * n0 * e];
            a == b
        })
    }

    #[test]
    fn rows_at_every_crossing_both_ends_and_a_seeded_sample() {
        // [64, 2^25 + 1]: element 2^31 starts row 2^25.
        let c = Case::new("x", "y", DType::F32, [64, (1 << 25) + 1, 1, 1]);
        let specs = same_shape(&c).expect("specs");
        let sl = rows(&c, &specs).expect("row-local");
        assert_eq!(sl.count, (1 << 25) + 1);
        assert_eq!(sl.chunk, vec![256, 256]);
        let r = sample_slices(&c, &specs, &sl);
        for want in [0, 1, (1 << 25) - 1, 1 << 25, (1 << 25) - 2, 65_535, 65_536] {
            assert!(r.contains(&want), "row {want} missing");
        }
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert!(r.iter().all(|&x| x < sl.count));
        // A few hundred rows at most; the seeded sample is the same for the same case.
        assert!(r.len() < RANDOM_ROWS + 60, "{}", r.len());
        assert_eq!(sample_slices(&c, &specs, &sl), r);
        let mut other = c.clone();
        other.seed = 2;
        assert_ne!(sample_slices(&other, &specs, &sl), r);
    }

    #[test]
    fn only_dense_stacks_of_the_cases_slices_are_sampled() {
        let c = Case::new("x", "y", DType::F32, [64, 8, 2, 1]);
        // One value a row (a row reduction's output) is a stack of rows.
        let reduce = |c: &Case| {
            Some(vec![
                spec("a", Role::Input, c.ne),
                spec("d", Role::Output, [1, c.ne[1], c.ne[2], c.ne[3]]),
            ])
        };
        let specs = reduce(&c).expect("specs");
        let sl = slicing(&c, &specs, 1, &reduce).expect("rows");
        assert_eq!((sl.count, sl.chunk.clone()), (16, vec![256, 4]));
        // An input of rows [64, 1, ne2] does not follow the rows: neither a stack nor read
        // whole (the op gives it other shapes for other slice counts).
        let bias = |c: &Case| {
            Some(vec![
                spec("a", Role::Input, c.ne),
                spec("b", Role::Input, [64, 1, c.ne[2], 1]),
                spec("d", Role::Output, c.ne),
            ])
        };
        let specs = bias(&c).expect("specs");
        assert_eq!(slicing(&c, &specs, 1, &bias), None);
        // Along planes it is one: each plane reads its own row of it.
        let sl = slicing(&c, &specs, 2, &bias).expect("planes");
        assert_eq!((sl.count, sl.chunk.clone()), (2, vec![2048, 256, 2048]));
        // A view is never sampled.
        let strided = |c: &Case| {
            Some(vec![TensorSpec::strided(
                "v",
                Role::Input,
                DType::F32,
                c.ne,
                [4, 512, 4096, 8192],
            )
            .expect("view")])
        };
        let specs = strided(&c).expect("specs");
        assert_eq!(slicing(&c, &specs, 1, &strided), None);
        // Nor a case whose tensors are all read whole.
        let fixed = |_: &Case| Some(vec![spec("w", Role::Input, [64, 1, 1, 1])]);
        assert_eq!(
            slicing(&c, &fixed(&c).expect("specs"), 1, &fixed),
            None,
            "nothing to sample"
        );
    }

    #[test]
    fn a_tensor_whose_size_matches_one_slice_count_only_is_not_a_stack() {
        // [ne0, ne1 * ne1]: 4 rows in the case of 2 and 9 in the case of 3, never a stack.
        let c = Case::new("x", "y", DType::F32, [8, 4, 1, 1]);
        let square = |c: &Case| {
            Some(vec![
                spec("a", Role::Input, c.ne),
                spec("d", Role::Output, [8, c.ne[1] * c.ne[1], 1, 1]),
            ])
        };
        let specs = square(&c).expect("specs");
        assert_eq!(slicing(&c, &specs, 1, &square), None);
    }

    #[test]
    fn a_source_tiled_over_more_rows_than_the_case_has_is_not_a_stack() {
        // a + b with b [10, 10] repeated twice along rows in a [10, 20]: a's row r reads b's
        // row r % 10, so a's rows are not b's rows, though a's size follows the case's.
        let c = Case::new("x", "y", DType::F32, [10, 10, 1, 1]);
        let tiled = |c: &Case| {
            let a = [c.ne[0], c.ne[1] * 2, c.ne[2], c.ne[3]];
            Some(vec![
                spec("a", Role::Input, a),
                spec("b", Role::Input, c.ne),
                spec("d", Role::Output, a),
            ])
        };
        let specs = tiled(&c).expect("specs");
        assert_eq!(slicing(&c, &specs, 1, &tiled), None);
        // Along planes, where a and b have the case's planes, it is one.
        let c = Case::new("x", "y", DType::F32, [10, 10, 4, 1]);
        let specs = tiled(&c).expect("specs");
        let sl = slicing(&c, &specs, 2, &tiled).expect("planes");
        assert_eq!(sl.chunk, vec![800, 400, 800]);
    }

    #[test]
    fn a_broadcast_input_is_read_whole_and_drawn_as_the_case_draws_it() {
        let c = Case::new("x", "y", DType::F32, [64, 8, 2, 1]);
        let x = spec("x", Role::Input, c.ne);
        let w = spec("w", Role::Input, [64, 1, 1, 1]);
        let d = spec("d", Role::Output, c.ne);
        let with_weight = |c: &Case| {
            Some(vec![
                spec("x", Role::Input, c.ne),
                spec("w", Role::Input, [64, 1, 1, 1]),
                spec("d", Role::Output, c.ne),
            ])
        };
        let specs = [x.clone(), w.clone(), d.clone()];
        let sl = slicing(&c, &specs, 1, &with_weight).expect("rows");
        assert_eq!(sl.chunk, vec![256, 0, 256]);
        // The sampled rows' reference reads the weight as the case drew it (stream 1, from its
        // start) and x's rows 3, 9 and 15 from stream 0.
        let picked = [3u64, 9, 15];
        let sc = sliced(&c, picked.len() as u64, 1);
        let sspecs = with_weight(&sc).expect("specs");
        let g = gathered_inputs(
            &c,
            &specs,
            &sspecs,
            &sl,
            &picked,
            &RowSampling::uniform(3),
            &[],
        )
        .expect("gathered");
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].ne, [64, 1, 1, 1]);
        assert_eq!(
            g[1].bytes,
            random_tensor(c.seed, 1, &w, -1.0, 1.0).bytes,
            "the weight is the case's whole draw"
        );
        let whole_x = random_tensor(c.seed, 0, &x, -1.0, 1.0);
        let row = 64 * 4;
        for (j, &r) in picked.iter().enumerate() {
            assert_eq!(
                g[0].bytes[j * row..(j + 1) * row],
                whole_x.bytes[r as usize * row..(r as usize + 1) * row]
            );
        }
        // A sliced case whose read-whole input follows the slices is refused, not guessed.
        assert!(gathered_inputs(
            &c,
            &specs,
            &[
                sspecs[0].clone(),
                spec("w", Role::Input, [64, 3, 1, 1]),
                sspecs[2].clone()
            ],
            &sl,
            &picked,
            &RowSampling::uniform(3),
            &[],
        )
        .is_err());
    }

    #[test]
    fn gathered_rows_are_the_rows_of_the_whole_draw() {
        let c = Case::new("x", "y", DType::F32, [33, 300, 2, 1]);
        for d in [DType::F32, DType::F16, DType::Bf16, DType::I32] {
            let s = TensorSpec::dense("a", Role::Input, d, c.ne).expect("spec");
            assert!(draws_agree(&c, &s, 0, &[0, 1, 7, 299, 300, 599]), "{d}");
            assert!(draws_agree(&c, &s, 2, &[5, 598]), "{d} index 2");
        }
    }

    /// A gather along planes: a table [n, m, b], indices [r, b], a result [n, r, b]. Each plane
    /// of the result reads its own plane of both inputs, whatever their shapes.
    fn gather(c: &Case) -> Option<Vec<TensorSpec>> {
        Some(vec![
            spec("table", Role::Input, c.ne),
            TensorSpec::dense("rows", Role::Input, DType::I32, [3, c.ne[2], c.ne[3], 1]).ok()?,
            spec("dst", Role::Output, [c.ne[0], 3, c.ne[2], c.ne[3]]),
        ])
    }

    #[test]
    fn planes_are_cut_from_every_tensor_and_sampled_at_each_grid_limit() {
        let c = Case::new("x", "y", DType::F32, [16, 8, 70_000, 1]);
        let specs = gather(&c).expect("specs");
        let sl = slicing(&c, &specs, 2, &gather).expect("planes");
        assert_eq!(sl.count, 70_000);
        assert_eq!(sl.chunk, vec![16 * 8 * 4, 3 * 4, 16 * 3 * 4]);
        assert_eq!(sl.unit(), "slices along ne[2..3]");
        let s = sample_slices(&c, &specs, &sl);
        for want in [0, 1, 65_534, 65_535, 65_536, 65_537, 69_998, 69_999] {
            assert!(s.contains(&want), "plane {want} missing");
        }
        // The planes of the drawn table and of made indices, each from where it lies.
        let picked = [2u64, 65_535, 69_999];
        let sc = sliced(&c, picked.len() as u64, 2);
        assert_eq!(sc.ne, [16, 8, 3, 1]);
        let sspecs = gather(&sc).expect("specs");
        let idx: Vec<f32> = (0..3 * 70_000).map(|i| (i % 8) as f32).collect();
        let made = vec![
            (0, random_tensor(c.seed, 0, &specs[0], -1.0, 1.0)),
            (1, HostTensor::from_f32(DType::I32, specs[1].ne, &idx)),
        ];
        let sampling = RowSampling::uniform(3);
        let drawn =
            gathered_inputs(&c, &specs, &sspecs, &sl, &picked, &sampling, &[]).expect("drawn");
        let cut = gathered_inputs(&c, &specs, &sspecs, &sl, &picked, &sampling, &made)
            .expect("cut from the made inputs");
        assert_eq!(
            drawn[0].bytes, cut[0].bytes,
            "a drawn plane is the plane of the draw"
        );
        for (j, &p) in picked.iter().enumerate() {
            let plane = 16 * 8 * 4;
            assert_eq!(
                cut[0].bytes[j * plane..(j + 1) * plane],
                made[0].1.bytes[p as usize * plane..(p as usize + 1) * plane]
            );
            assert_eq!(
                cut[1].bytes[j * 12..(j + 1) * 12],
                made[1].1.bytes[p as usize * 12..(p as usize + 1) * 12]
            );
        }
        assert_eq!(cut[1].ne, [3, 3, 1, 1]);
        // Along ne[3] alone there is one slice here: nothing to sample. A made tensor that
        // does not cut into the slices is refused.
        assert_eq!(slicing(&c, &specs, 3, &gather), None);
        let short = vec![
            made[0].clone(),
            (1, HostTensor::from_f32(DType::I32, [5, 1, 1, 1], &[1.0; 5])),
        ];
        assert!(gathered_inputs(&c, &specs, &sspecs, &sl, &picked, &sampling, &short).is_err());
    }

    fn out_rows(vals: &[f32], n0: i64) -> HostTensor {
        HostTensor::from_f32(DType::F32, [n0, vals.len() as i64 / n0, 1, 1], vals)
    }

    #[test]
    fn a_sampled_judge_sees_unwritten_elements_anywhere_and_wrong_values_in_its_rows() {
        let d = spec("dst", Role::Output, [4, 1000, 1, 1]);
        let sl = Slicing {
            from: 1,
            count: 1000,
            chunk: vec![16],
            extents: vec![1000, 1, 1],
            run: None,
        };
        let rows = [0u64, 500, 999];
        let reference: Vec<f64> = (0..12).map(|i| i as f64 * 0.25).collect();
        let good: Vec<f32> = reference.iter().map(|&x| x as f32).collect();
        let all = Scan {
            unwritten: 0,
            nonfinite: 0,
            elements: 4000,
        };
        let tol = Tolerance::F32;
        let judge = |got: &HostTensor, scan: Scan| {
            let at = SampledAt {
                slicing: &sl,
                slices: &rows,
                index: 0,
            };
            judge_output(&d, got, &reference, scan, at, tol, false)
        };
        let c = judge(&out_rows(&good, 4), all);
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(
            c.detail.contains("judged on 3 of its 1000 rows"),
            "{}",
            c.detail
        );
        // Elements never written outside the sampled rows: the scan sees them.
        let hole = Scan {
            unwritten: 7,
            ..all
        };
        let c = judge(&out_rows(&good, 4), hole);
        assert_eq!(c.verdict, Verdict::UnwrittenOutput);
        assert_eq!(c.numbers.unwritten, 7);
        let none = Scan {
            unwritten: 4000,
            ..all
        };
        let poison = vec![f32::from_bits(POISON_F32); 12];
        let c = judge(&out_rows(&poison, 4), none);
        assert_eq!(c.verdict, Verdict::SilentFailure);
        // A wrong value in row 500: named in the whole output's coordinates.
        let mut bad = good.clone();
        bad[4 + 2] = 9.0;
        let c = judge(&out_rows(&bad, 4), all);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(500 * 4 + 2));
        assert_eq!(c.numbers.first_bad_coords(), Some([2, 500, 0, 0]));
        assert!(
            c.detail
                .contains("first bad at flat index 2002 of the whole output"),
            "{}",
            c.detail
        );
        // A worse one in the last sampled row: both named in the whole output.
        bad[8 + 1] = -40.0;
        let c = judge(&out_rows(&bad, 4), all);
        assert_eq!(c.numbers.worst_bad, Some(999 * 4 + 1));
        assert!(
            c.detail.contains(
                "first bad at flat index 2002 of the whole output, worst at flat index 3997 of the whole output"
            ),
            "{}",
            c.detail
        );
        // Non-finite values elsewhere, where the sampled reference is finite.
        let inf = Scan {
            nonfinite: 3,
            ..all
        };
        let c = judge(&out_rows(&good, 4), inf);
        assert_eq!(c.verdict, Verdict::Nonfinite);
        assert_eq!(c.numbers.nonfinite, 3);
        // The same where the op's made inputs hold non-finite values (a mask's -inf): the
        // reference may be non-finite in rows not sampled, so the count is told, not judged;
        // a wrong value in a sampled row still fails.
        let at = SampledAt {
            slicing: &sl,
            slices: &rows,
            index: 0,
        };
        let c = judge_output(&d, &out_rows(&good, 4), &reference, inf, at, tol, true);
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(
            c.detail
                .contains("3 non-finite elements over the whole output")
                && c.detail.contains("not judged"),
            "{}",
            c.detail
        );
        let c = judge_output(&d, &out_rows(&bad, 4), &reference, inf, at, tol, true);
        assert_eq!(c.verdict, Verdict::WrongValues);
    }

    /// A made input's -inf or NaN is seen in each float type wherever it lies, past the first
    /// parallel chunk too; finite values and integer inputs are not.
    #[test]
    fn made_inputs_holding_a_nonfinite_value_are_told_apart() {
        let n = (1 << 17) + 5;
        let finite: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        for d in [DType::F32, DType::F16, DType::Bf16] {
            let t = HostTensor::from_f32(d, [n as i64, 1, 1, 1], &finite);
            assert!(!holds_nonfinite(&[(0, t)]), "{d}");
            for (at, x) in [(n - 1, f32::NEG_INFINITY), (70_000, f32::NAN)] {
                let mut v = finite.clone();
                v[at] = x;
                let t = HostTensor::from_f32(d, [n as i64, 1, 1, 1], &v);
                assert!(holds_nonfinite(&[(2, t)]), "{d} {x} at {at}");
            }
        }
        let ints = HostTensor::from_f32(DType::I32, [4, 1, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
        assert!(!holds_nonfinite(&[(1, ints)]));
    }

    #[test]
    fn a_wrong_value_in_a_sampled_plane_is_named_where_it_lies() {
        // Output [4, 3, 100]: planes of 12 values; planes 7 and 42 sampled.
        let d = spec("dst", Role::Output, [4, 3, 100, 1]);
        let sl = Slicing {
            from: 2,
            count: 100,
            chunk: vec![48],
            extents: vec![100, 1],
            run: None,
        };
        let planes = [7u64, 42];
        let reference: Vec<f64> = (0..24).map(|i| i as f64).collect();
        let mut got: Vec<f32> = reference.iter().map(|&x| x as f32).collect();
        got[12 + 5] = -1.0;
        let all = Scan {
            unwritten: 0,
            nonfinite: 0,
            elements: 1200,
        };
        let at = SampledAt {
            slicing: &sl,
            slices: &planes,
            index: 0,
        };
        let c = judge_output(
            &d,
            &out_rows(&got, 12),
            &reference,
            all,
            at,
            Tolerance::F32,
            false,
        );
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad_coords(), Some([1, 1, 42, 0]));
        assert!(
            c.detail.contains("2 of its 100 slices along ne[2..3]"),
            "{}",
            c.detail
        );
    }
}
