//! Running a case on a ggml backend: the op's tensors made in a ggml graph (strided inputs as
//! views of their own base tensor), each in its own buffer, outputs poisoned, inputs uploaded,
//! computed, read back.

use super::pool_cache;
use kedge_core::contract::imp::{BackendImpl, BackendRun, SampledDraw, SampledRun};
use kedge_core::contract::op::BlockPool;
use kedge_core::cuda::big::{self, Scan};
use kedge_core::cuda::RunError;
use kedge_core::engine::phase::{self, Phase};
use kedge_core::judge::result::{Allocation, LibraryInfo};
use kedge_core::judge::sample::made_input;
use kedge_core::model::host::poison_pattern;
use kedge_core::model::shape::dense_strides;
use kedge_core::*;
use kedge_ggml::{
    Backend, ComputeError, DeviceKind, Ggml, Graph, GraphError, GraphOptions, Placement, Tensor,
    Type,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Builds an op's node(s) from its input tensors (in the op's spec order, views already made),
/// returning its outputs in spec order.
pub(crate) type GraphFn = fn(&mut Graph, &Case, &[Tensor]) -> Result<Vec<Tensor>, GraphError>;

/// An op on one backend device of a ggml build.
pub(crate) struct GgmlImpl {
    ggml: Ggml,
    host: bool,
    op: &'static str,
    device: String,
    description: String,
    name: String,
    about: String,
    graph: GraphFn,
    /// The dtypes ggml computes this op in, where that is narrower than kedge's op declares;
    /// `None`: whatever the backend's `supports_op` accepts.
    dtypes: Option<&'static [DType]>,
}

impl GgmlImpl {
    pub(crate) fn new(
        ggml: Ggml,
        op: &'static str,
        device: &str,
        description: &str,
        host: bool,
        graph: GraphFn,
    ) -> Self {
        GgmlImpl {
            ggml,
            host,
            op,
            device: device.to_string(),
            description: description.to_string(),
            name: format!("ggml:{device}"),
            about: format!(
                "ggml {} ({}) on {device} ({description}): ggml's own kernels and launch code",
                ggml.version(),
                ggml.commit()
            ),
            graph,
            dtypes: None,
        }
    }
    /// Limit the case dtypes this impl plans to `dtypes`; others are refused at plan time.
    pub(crate) fn with_dtypes(mut self, dtypes: Option<&'static [DType]>) -> Self {
        self.dtypes = dtypes;
        self
    }
    pub(crate) fn impl_name(&self) -> String {
        self.name.clone()
    }
    fn info(&self) -> LibraryInfo {
        LibraryInfo {
            name: "ggml".into(),
            version: self.ggml.version(),
            commit: self.ggml.commit(),
            device: format!("{}: {}", self.device, self.description),
        }
    }
}

impl Impl for GgmlImpl {
    fn name(&self) -> &str {
        &self.name
    }
    fn role(&self) -> ImplRole {
        ImplRole::External
    }
    fn about(&self) -> &str {
        &self.about
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        if let Some(ds) = self.dtypes.filter(|ds| !ds.contains(&case.dtype)) {
            return Err(Refusal(format!(
                "ggml computes {} in {} only (its backends abort on {}, though their supports_op accepts it)",
                self.op,
                ds.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
                case.dtype
            )));
        }
        Ok(Plan {
            unchecked: vec![format!(
                "{} runs {} through ggml's own launch code: kedge cannot see its grid (the generated boundaries probe it)",
                self.name, self.op
            )],
            ..Plan::default()
        })
    }
    fn backend(&self) -> Option<&dyn BackendImpl> {
        Some(self)
    }
    fn needs_gpu(&self) -> bool {
        !self.host
    }
    fn dtypes(&self) -> Option<&'static [DType]> {
        self.dtypes
    }
}

/// The ggml type of a kedge dtype (by ggml's own enum value).
pub(crate) fn ggml_type(d: DType) -> Result<Type, RunError> {
    Type::from_raw(d.ggml_value()).ok_or_else(|| {
        RunError::Unsupported(format!("kedge's ggml adapter has no ggml type for {d}"))
    })
}

/// A block-format input's bytes: kedge's f32 values quantized by the build under test
/// (`ggml_quantize_chunk`, as test-backend-ops does; an importance matrix of ones where the
/// type needs one). Already quantized bytes, and every other type's, pass through uncopied
/// (a big case's input is gigabytes).
pub(crate) fn input_bytes<'a>(
    ggml: Ggml,
    s: &TensorSpec,
    h: &'a HostTensor,
) -> Result<Cow<'a, [u8]>, RunError> {
    if !s.dtype.is_block() || h.dtype == s.dtype {
        return Ok(Cow::Borrowed(&h.bytes));
    }
    let span = (s.bytes / s.dtype.size()).saturating_mul(s.dtype.block());
    if h.dtype != DType::F32 || h.bytes.len() as u64 != span.saturating_mul(4) {
        return Err(RunError::Unsupported(format!(
            "input {}: a {} tensor is made from the f32 values of its span ({span}); got {} bytes of {}",
            s.name,
            s.dtype,
            h.bytes.len(),
            h.dtype
        )));
    }
    let vals: &[f32] = bytemuck::try_cast_slice(&h.bytes)
        .map_err(|e| RunError::Impl(format!("input {}: {e}", s.name)))?;
    match from_pool_rows(s, vals) {
        Some(b) => Ok(Cow::Owned(b)),
        None => quantize(ggml, s, vals).map(Cow::Owned),
    }
}

/// `vals` quantized by the build in rows of `s.ne[0]`.
fn quantize(ggml: Ggml, s: &TensorSpec, vals: &[f32]) -> Result<Vec<u8>, RunError> {
    let ty = ggml_type(s.dtype)?;
    let ones;
    let imatrix = match ggml.requires_imatrix(ty) {
        Ok(true) => {
            ones = vec![1.0f32; s.ne[0] as usize];
            Some(ones.as_slice())
        }
        Ok(false) => None,
        Err(e) => return Err(RunError::Unsupported(e.to_string())),
    };
    ggml.quantize(ty, vals, s.ne[0], imatrix)
        .map_err(|e| RunError::Unsupported(format!("input {}: {e}", s.name)))
}

/// How many quantized pools a worker keeps.
const KEPT_POOLS: usize = 4;

/// A block-format input's pool and its rows as the build quantized them (`pool_blocks`).
type PoolBlocks = (BlockPool, Arc<Vec<u8>>);

/// What a pool is made for: seed, input index, type, row length, rows, and the range's bits.
type PoolKey = (u64, usize, DType, i64, u64, u32, u32);

/// A pool a worker keeps: what it is made for, its rows as the build quantized them, and each
/// row's index by the digest of its f32 values (`from_pool_rows`).
struct KeptPool {
    key: PoolKey,
    blocks: Arc<Vec<u8>>,
    by_values: HashMap<u64, usize>,
}

/// The worker's last `KEPT_POOLS` pools, oldest first. A poisoned lock keeps nothing: a pool
/// is then made again.
static KEPT: Mutex<Vec<KeptPool>> = Mutex::new(Vec::new());

fn row_digest(row: &[f32]) -> u64 {
    kedge_core::model::digest::words_digest(bytemuck::cast_slice::<f32, u8>(row))
}

/// A block-format tensor's bytes laid out from a kept pool's quantized rows, where every row of
/// its values is a row of that pool (the sampled rows of a big input: its pool's rows). ggml
/// quantizes row by row, so the same values are the same blocks; laying them out skips the
/// quantization, and with it the tables an i-quant builds first in every new worker (iq1_m:
/// 5.7 s on two cores). `None`: quantize.
fn from_pool_rows(s: &TensorSpec, vals: &[f32]) -> Option<Vec<u8>> {
    let n0 = s.ne[0].max(1) as usize;
    // Only a dense tensor's values are its rows one after the other (a strided one's span
    // holds its padding too).
    let dense = s.nb == dense_strides(&s.ne, s.dtype);
    if !dense || vals.is_empty() || vals.len() as u64 != s.nelements() {
        return None;
    }
    let kept = KEPT.lock().ok()?;
    let mut pools = kept
        .iter()
        .rev()
        .filter(|p| p.key.2 == s.dtype && p.key.3 == s.ne[0])
        .peekable();
    pools.peek()?;
    let digests: Vec<u64> = vals.chunks_exact(n0).map(row_digest).collect();
    // The newest kept pool of the type and row length that holds every row.
    pools.find_map(|pool| {
        let row_bytes = pool.blocks.len() / pool.by_values.len().max(1);
        let mut out = Vec::with_capacity(digests.len() * row_bytes);
        for d in &digests {
            let r = *pool.by_values.get(d)?;
            out.extend_from_slice(pool.blocks.get(r * row_bytes..(r + 1) * row_bytes)?);
        }
        Some(out)
    })
}

/// A big block-format input's pool (`BlockPool`) and the pool's rows as the build quantized
/// them (drawn in [lo, hi)), or `None` where the input is drawn whole.
///
/// The quantized pool is kept for the worker's next cases (the last `KEPT_POOLS`): the cases
/// around one crossing share it (the same seed, input, type and row length), and an i-quant's
/// 2^24 values take seconds to quantize, more than the rest of such a case. A pool that took
/// long to quantize is also kept on disk (`pool_cache`) for the workers that come after this
/// one: a big case's worker is replaced after a failure.
fn pool_blocks(
    ggml: Ggml,
    seed: u64,
    index: usize,
    s: &TensorSpec,
    lo: f32,
    hi: f32,
) -> Result<Option<PoolBlocks>, RunError> {
    let Some(pool) = BlockPool::of(seed, index as u64, s) else {
        return Ok(None);
    };
    let key: PoolKey = (
        seed,
        index,
        s.dtype,
        s.ne[0],
        pool.rows,
        lo.to_bits(),
        hi.to_bits(),
    );
    let kept = KEPT.lock().ok().and_then(|v| {
        v.iter()
            .find(|p| p.key == key)
            .map(|p| Arc::clone(&p.blocks))
    });
    if let Some(b) = kept {
        return Ok(Some((pool, b)));
    }
    let values = kedge_core::contract::op::random_tensor(seed, index as u64, &pool.spec, lo, hi);
    let vals: &[f32] = bytemuck::try_cast_slice(&values.bytes)
        .map_err(|e| RunError::Impl(format!("input {}: {e}", s.name)))?;
    // Each row's digest, once: the rows' index (`from_pool_rows`) and the pool's name on disk.
    let digests: Vec<u64> = vals
        .chunks_exact(s.ne[0].max(1) as usize)
        .map(row_digest)
        .collect();
    // Another worker (or an earlier sweep) may have quantized these values with this build.
    static BUILD: OnceLock<String> = OnceLock::new();
    let build =
        BUILD.get_or_init(|| pool_cache::build_id(&ggml.version(), &ggml.commit(), ggml.dir()));
    let file = pool_cache::path(
        &pool_cache::dir(),
        build,
        &s.dtype.to_string(),
        s.ne[0],
        bytemuck::cast_slice(&digests),
    );
    let want = pool.spec.bytes as usize;
    let blocks = pool_cache::read_or_make(&file, want, || quantize(ggml, &pool.spec, vals))?;
    let blocks = Arc::new(blocks);
    if let Ok(mut v) = KEPT.lock() {
        if v.len() == KEPT_POOLS {
            v.remove(0);
        }
        v.push(KeptPool {
            key,
            blocks: Arc::clone(&blocks),
            by_values: digests
                .into_iter()
                .enumerate()
                .map(|(r, d)| (d, r))
                .collect(),
        });
    }
    Ok(Some((pool, blocks)))
}

/// A big block-format input's bytes made of its pool (`pool_blocks`): each row the pool row it
/// picks. `None`: the input is drawn whole.
pub(crate) fn pooled_bytes(
    ggml: Ggml,
    seed: u64,
    index: usize,
    s: &TensorSpec,
    lo: f32,
    hi: f32,
) -> Result<Option<Vec<u8>>, RunError> {
    use rayon::prelude::*;
    let Some((pool, blocks)) = pool_blocks(ggml, seed, index, s, lo, hi)? else {
        return Ok(None);
    };
    let row = s.nb[1] as usize;
    let mut bytes = vec![0u8; s.bytes as usize];
    bytes.par_chunks_mut(row).enumerate().for_each(|(r, dst)| {
        let k = pool.pick(r as u64) as usize;
        dst.copy_from_slice(&blocks[k * row..(k + 1) * row]);
    });
    Ok(Some(bytes))
}

/// Input `index` as the host draws it for a sampled run: its pool's rows (`pooled_bytes`), or
/// `random_tensor` in [lo, hi), quantized by the build where it is a block format.
fn drawn_bytes(
    ggml: Ggml,
    seed: u64,
    index: usize,
    s: &TensorSpec,
    lo: f32,
    hi: f32,
) -> Result<Vec<u8>, RunError> {
    if let Some(b) = pooled_bytes(ggml, seed, index, s, lo, hi)? {
        return Ok(b);
    }
    let h = kedge_core::contract::op::random_tensor(seed, index as u64, s, lo, hi);
    Ok(input_bytes(ggml, s, &h)?.into_owned())
}

/// A block-format output as the judge reads it: dequantized by the build's own `to_float`
/// into dense f32, a block still holding its poison bytes as f32 poison (never written). The
/// values are decoded once, into the tensor's own bytes: at 2^32 values a decode into a vector
/// and a copy into bytes cost seconds of a case.
pub(crate) fn output_tensor(
    ggml: Ggml,
    s: &TensorSpec,
    bytes: Vec<u8>,
) -> Result<HostTensor, RunError> {
    if !s.dtype.is_block() {
        return Ok(HostTensor::from_bytes(s.dtype, s.ne, s.nb, bytes));
    }
    let n = block_values(s, &bytes)?;
    let mut out = kedge_core::model::host::bytes_to_overwrite(n * 4);
    match bytemuck::try_cast_slice_mut::<u8, f32>(&mut out) {
        Ok(vals) => decode_blocks(ggml, s, &bytes, vals, |x| x)?,
        // A buffer not aligned for f32 (no allocator kedge knows gives one): decoded apart.
        Err(_) => {
            let mut vals = vec![0f32; n];
            decode_blocks(ggml, s, &bytes, &mut vals, |x| x)?;
            return Ok(HostTensor::from_f32(DType::F32, s.ne, &vals));
        }
    }
    Ok(HostTensor::from_bytes(
        DType::F32,
        s.ne,
        dense_strides(&s.ne, DType::F32),
        out,
    ))
}

/// An output's values as f64, as a reference returns them: a block format decoded as
/// [`output_tensor`] decodes it, straight into f64, without the f32 tensor between.
pub(crate) fn output_f64(ggml: Ggml, s: &TensorSpec, bytes: Vec<u8>) -> Result<Vec<f64>, RunError> {
    if !s.dtype.is_block() {
        return Ok(HostTensor::from_bytes(s.dtype, s.ne, s.nb, bytes).to_f64());
    }
    let n = block_values(s, &bytes)?;
    let mut out = kedge_core::model::host::zeroed_f64(n);
    decode_blocks(ggml, s, &bytes, &mut out, f64::from)?;
    Ok(out)
}

/// How many values a dense block-format output's bytes hold; a strided one is not read back.
fn block_values(s: &TensorSpec, bytes: &[u8]) -> Result<usize, RunError> {
    if s.nb != dense_strides(&s.ne, s.dtype) {
        return Err(RunError::Unsupported(format!(
            "output {}: a strided {} output cannot be read back",
            s.name, s.dtype
        )));
    }
    let (block, size) = (s.dtype.block() as usize, s.dtype.size() as usize);
    Ok(bytes.len() / size.max(1) * block)
}

/// `bytes`' blocks decoded by the build's `to_float` into `out` (`conv` of each f32), a block
/// still holding the poison written before the run as f32 poison, on every core: a task
/// decodes its blocks into a scratch of its own, checks them for poison and converts them.
fn decode_blocks<T: Send>(
    ggml: Ggml,
    s: &TensorSpec,
    bytes: &[u8],
    out: &mut [T],
    conv: impl Fn(f32) -> T + Sync,
) -> Result<(), RunError> {
    use rayon::prelude::*;
    /// Blocks a task decodes at a time: 64 Ki values of 32-value blocks, in cache.
    const BLOCKS: usize = 2048;
    let ty = ggml_type(s.dtype)?;
    let poison = poison_pattern(s.dtype);
    let (block, size) = (s.dtype.block() as usize, s.dtype.size() as usize);
    let unwritten = f32::from_bits(kedge_core::model::host::POISON_F32);
    out.par_chunks_mut(BLOCKS * block)
        .zip(bytes.par_chunks(BLOCKS * size))
        .try_for_each_init(Vec::new, |scratch: &mut Vec<f32>, (o, b)| {
            scratch.resize(o.len(), 0.0);
            ggml.dequantize_into(ty, b, scratch)
                .map_err(|e| RunError::Unsupported(format!("output {}: {e}", s.name)))?;
            for (k, blk) in b.chunks_exact(size).enumerate() {
                if blk == poison.as_slice() {
                    scratch[k * block..(k + 1) * block].fill(unwritten);
                }
            }
            for (d, &x) in o.iter_mut().zip(scratch.iter()) {
                *d = conv(x);
            }
            Ok(())
        })
}

/// Backends are started once per process (a CUDA backend's start costs a context).
fn backend(ggml: Ggml, device: &str) -> Result<&'static Mutex<Backend>, RunError> {
    static BACKENDS: OnceLock<Mutex<HashMap<String, &'static Mutex<Backend>>>> = OnceLock::new();
    let map = BACKENDS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = map
        .lock()
        .map_err(|_| RunError::Impl("a ggml backend's lock was poisoned".into()))?;
    if let Some(b) = m.get(device) {
        return Ok(b);
    }
    let b = ggml
        .backend(device)
        .map_err(|e| RunError::Unsupported(e.to_string()))?;
    if b.kind() == DeviceKind::Cpu {
        b.set_n_threads(worker_cores());
    }
    let b: &'static Mutex<Backend> = Box::leak(Box::new(Mutex::new(b)));
    m.insert(device.to_string(), b);
    Ok(b)
}

/// Threads ggml's CPU backend computes a case with: one per 8 MiB of the case's tensors, at
/// most `cores`. ggml's threads spin while they wait for each other (OpenMP), so a graph given
/// more threads than its work needs costs every worker beside it: on two cores, four
/// processes of two threads each took a tiny reference from 0.012 ms (one process) to as much
/// as 7.5 ms, and with one thread each to 0.04 ms at most.
fn cpu_threads(bytes: u64, cores: usize) -> usize {
    const PER_THREAD: u64 = 8 << 20;
    usize::try_from(bytes / PER_THREAD)
        .unwrap_or(usize::MAX)
        .clamp(1, cores.max(1))
}

/// The cores a worker's CPU-side work may use: `RAYON_NUM_THREADS` where the supervisor set
/// it (a tier's share), else every core.
fn worker_cores() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn graph_err(e: GraphError) -> RunError {
    match e {
        GraphError::OutOfMemory { .. } => RunError::Resource(e.to_string()),
        GraphError::MissingOp(_) | GraphError::Shape { .. } => RunError::Unsupported(e.to_string()),
        other => RunError::Impl(other.to_string()),
    }
}

/// A built graph: the graph, the tensors to upload (base, spec index), the outputs.
pub(crate) struct Built {
    pub(crate) graph: Graph,
    pub(crate) uploads: Vec<(Tensor, usize)>,
    pub(crate) outputs: Vec<Tensor>,
}

/// What a backend run read back: outputs in spec order, every allocation, the allocation
/// modes that did not apply.
pub(crate) struct Ran {
    pub(crate) outputs: Vec<HostTensor>,
    pub(crate) allocations: Vec<Allocation>,
    pub(crate) not_applied: Option<String>,
}

/// The op's tensors in a ggml graph: inputs (a strided one as a view of its own base tensor),
/// then the op's node(s). Returns the graph, the tensors to upload (base, spec index) and the
/// outputs in spec order.
pub(crate) fn build(
    ggml: Ggml,
    case: &Case,
    specs: &[TensorSpec],
    graph: GraphFn,
) -> Result<Built, RunError> {
    build_with(ggml, case, specs, graph, false)
}

/// [`build`], writing every ggml call down as C when `record` (`Graph::recording`).
pub(crate) fn build_with(
    ggml: Ggml,
    case: &Case,
    specs: &[TensorSpec],
    graph: GraphFn,
    record: bool,
) -> Result<Built, RunError> {
    let mut g = ggml
        .graph(GraphOptions { max_tensors: 64 })
        .map_err(graph_err)?;
    if record {
        g.record();
    }
    let mut uploads = Vec::new();
    let mut ins = Vec::new();
    for (i, s) in specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
    {
        let ty = ggml_type(s.dtype)?;
        let t = if s.nb == dense_strides(&s.ne, s.dtype) {
            let t = g.new_tensor(ty, &s.ne).map_err(graph_err)?;
            uploads.push((t, i));
            t
        } else {
            let n = (s.bytes / s.dtype.size() * s.dtype.block()) as i64;
            let base = g.new_tensor_1d(ty, n).map_err(graph_err)?;
            g.set_name(base, &format!("{}.base", s.name))
                .map_err(graph_err)?;
            uploads.push((base, i));
            // ggml takes the strides after the first (an element's own size).
            let nb = [s.nb[1] as usize, s.nb[2] as usize, s.nb[3] as usize];
            g.view(base, &s.ne, &nb, 0).map_err(graph_err)?
        };
        g.set_name(t, &s.name).map_err(graph_err)?;
        ins.push(t);
    }
    let outs = graph(&mut g, case, &ins).map_err(graph_err)?;
    let out_specs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
    if outs.len() != out_specs.len() {
        return Err(RunError::Impl(format!(
            "the ggml graph of {} gave {} outputs, the op declares {}",
            case.op,
            outs.len(),
            out_specs.len()
        )));
    }
    for (t, s) in outs.iter().zip(&out_specs) {
        let shape = g.shape(*t).map_err(graph_err)?;
        if shape != s.ne {
            return Err(RunError::Impl(format!(
                "the ggml graph of {} gives {} a shape {:?}, the op declares {:?}",
                case.op, s.name, shape, s.ne
            )));
        }
        g.set_name(*t, &s.name).map_err(graph_err)?;
    }
    g.build(&outs).map_err(graph_err)?;
    Ok(Built {
        graph: g,
        uploads,
        outputs: outs,
    })
}

/// The case's graph built, and the backend it runs on (locked), once the backend says it
/// supports every node (`ggml_backend_dev_supports_op`).
fn built_on(
    ggml: Ggml,
    device: &str,
    case: &Case,
    specs: &[TensorSpec],
    graph: GraphFn,
) -> Result<(Built, std::sync::MutexGuard<'static, Backend>), RunError> {
    let built = build(ggml, case, specs, graph)?;
    let b = backend(ggml, device)?
        .lock()
        .map_err(|_| RunError::Impl("a ggml backend's lock was poisoned".into()))?;
    if b.kind() == DeviceKind::Cpu {
        b.set_n_threads(cpu_threads(
            specs.iter().map(|s| s.bytes).sum(),
            worker_cores(),
        ));
    }
    let unsupported = built.graph.unsupported(&b);
    if !unsupported.is_empty() {
        return Err(RunError::Unsupported(format!(
            "ggml's {device} backend does not support {} (ggml_backend_dev_supports_op)",
            unsupported
                .iter()
                .map(|u| format!("{} ({})", u.op, u.name))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok((built, b))
}

/// Run `graph` for a case on a backend: supported check, allocation in the case's mode where the
/// backend lets kedge place memory, poison, upload, compute, read back.
pub(crate) fn run_on(
    ggml: Ggml,
    device: &str,
    case: &Case,
    specs: &[TensorSpec],
    inputs: &[HostTensor],
    graph: GraphFn,
) -> Result<Ran, RunError> {
    let (
        Built {
            graph: mut g,
            uploads,
            outputs: outs,
        },
        b,
    ) = built_on(ggml, device, case, specs, graph)?;
    let host = b.is_host();
    let not_applied = match (case.alloc, host) {
        (AllocMode::Exact, _) => None,
        (AllocMode::Guard | AllocMode::GuardFront, true) => None,
        (mode, true) => Some(format!(
            "{mode}: not applied on ggml's {device} backend (red zones need kedge-made device memory); ran as exact"
        )),
        (mode, false) => Some(format!(
            "{mode}: not applied on ggml's {device} backend, whose buffers are its own allocations; ran as exact (memcheck on these exact buffers covers reads past a tensor)"
        )),
    };
    let placement = match (case.alloc, host) {
        (AllocMode::Guard, true) => Some(true),
        (AllocMode::GuardFront, true) => Some(false),
        _ => None,
    };
    match placement {
        None => g.alloc(&b).map_err(graph_err)?,
        Some(after) => g
            .alloc_with(&b, |_| {
                if after {
                    Placement::GuardAfter
                } else {
                    Placement::GuardBefore
                }
            })
            .map_err(graph_err)?,
    }
    // Outputs are poisoned first, inputs written after: an op whose result is a view of an
    // input (ggml's in-place clamp and leaky_relu, set_rows into its destination) then runs on
    // the input's data, and every other output starts as poison.
    // On a device, the copies are said as kedge's (`phase`), so the case's run is the
    // library's compute. On the host backend (the reference) the engine's phase stands.
    let enter = |p: Phase| {
        if !host {
            phase::enter(p);
        }
    };
    enter(Phase::Upload);
    let out_specs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
    let mut sparse = Vec::with_capacity(outs.len());
    for (t, s) in outs.iter().zip(&out_specs) {
        let rows = sparse_rows(s, g.nbytes(*t).map_err(graph_err)?);
        let poison = poison_pattern(s.dtype);
        match &rows {
            Some(rows) => {
                for &(off, len) in rows {
                    g.fill_range(*t, off, len, &poison).map_err(graph_err)?;
                }
            }
            None => g.fill(*t, &poison).map_err(graph_err)?,
        }
        sparse.push(rows);
    }
    let mut inputs_iter = inputs.iter();
    let mut by_spec: HashMap<usize, &HostTensor> = HashMap::new();
    for (i, _) in specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
    {
        if let Some(h) = inputs_iter.next() {
            by_spec.insert(i, h);
        }
    }
    for (t, i) in &uploads {
        let h = by_spec
            .get(i)
            .ok_or_else(|| RunError::Impl(format!("no data for input {}", specs[*i].name)))?;
        let bytes = input_bytes(ggml, &specs[*i], h)?;
        g.set_data(*t, &bytes).map_err(graph_err)?;
    }
    enter(Phase::Run);
    g.compute(&b).map_err(|e| match e {
        ComputeError::Graph(e) => graph_err(e),
        other => RunError::Impl(other.to_string()),
    })?;
    enter(Phase::Download);
    let mut results = Vec::new();
    for ((t, s), rows) in outs.iter().zip(&out_specs).zip(&sparse) {
        match rows {
            Some(rows) => {
                let mut bytes = Vec::with_capacity(rows.iter().map(|r| r.1).sum());
                for &(off, len) in rows {
                    bytes.extend(g.get_range(*t, off, len).map_err(graph_err)?);
                }
                let nb = dense_strides(&s.ne, s.dtype);
                results.push(HostTensor::from_bytes(s.dtype, s.ne, nb, bytes));
            }
            None => {
                let bytes = g.get_data(*t).map_err(graph_err)?;
                results.push(output_tensor(ggml, s, bytes)?);
            }
        }
    }
    let allocations = allocations_of(&g);
    Ok(Ran {
        outputs: results,
        allocations,
        not_applied,
    })
}

/// The byte range of each row of an output whose rows lie far apart (a destination with
/// padded rows, as test_cpy's `dst_alloc` makes: D1 pads each row by 2 GiB), in row order,
/// where poisoning and reading only the rows saves moving a span many times their size; `None`
/// where the span is moved whole. The gaps between the rows are no output's values and no
/// verdict reads them, so they are left as allocated.
fn sparse_rows(s: &TensorSpec, span: usize) -> Option<Vec<(usize, usize)>> {
    /// Below this, the span is moved whole (one copy beats many small ones).
    const SPARSE_FROM: usize = 64 << 20;
    /// More rows than this are moved whole too (a copy per row costs more than the span).
    const MOST_ROWS: i64 = 4096;
    let size = s.dtype.size() as usize;
    if s.dtype.is_block() || s.nb[0] as usize != size || s.ne.iter().any(|&n| n < 1) {
        return None;
    }
    let row = s.ne[0] as usize * size;
    let rows = s.ne[1].checked_mul(s.ne[2])?.checked_mul(s.ne[3])?;
    if span < SPARSE_FROM || rows > MOST_ROWS || span / 8 < row * rows as usize {
        return None;
    }
    let mut out = Vec::with_capacity(rows as usize);
    for i3 in 0..s.ne[3] as u64 {
        for i2 in 0..s.ne[2] as u64 {
            for i1 in 0..s.ne[1] as u64 {
                let off = i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
                out.push((usize::try_from(off).ok()?, row));
            }
        }
    }
    Some(out)
}

/// The CUDA device ordinal of a ggml device named `CUDA<n>`.
fn cuda_ordinal(device: &str) -> Option<usize> {
    device.strip_prefix("CUDA")?.parse().ok()
}

/// Run `f` with kedge's own handle on the GPU of a ggml CUDA device: the device's primary
/// context, which ggml's CUDA backend uses too, so the addresses of ggml's buffers are
/// addresses kedge's kernels draw into and scan. Opened once per thread (a worker runs its
/// cases on one).
fn with_kedge_device<T>(
    ordinal: usize,
    f: impl FnOnce(&mut kedge_core::cuda::Device) -> Result<T, RunError>,
) -> Result<T, RunError> {
    thread_local! {
        static DEVICES: std::cell::RefCell<HashMap<usize, kedge_core::cuda::Device>> =
            std::cell::RefCell::new(HashMap::new());
    }
    DEVICES.with(|cell| {
        let mut m = cell
            .try_borrow_mut()
            .map_err(|_| RunError::Impl("kedge's device is already in use".into()))?;
        let d = match m.entry(ordinal) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(kedge_core::cuda::Device::open(ordinal).map_err(|e| {
                    RunError::Unsupported(format!("kedge's draw on the device: {e}"))
                })?)
            }
        };
        f(d)
    })
}

/// The spec indices of the outputs, in spec order.
fn output_indices(specs: &[TensorSpec]) -> impl Iterator<Item = usize> + '_ {
    specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Output)
        .map(|(i, _)| i)
}

/// Bytes of one sampled slice of output `spec` (index `k` among the case's specs).
fn slice_bytes(draw: &SampledDraw<'_>, s: &TensorSpec, k: usize) -> Result<usize, RunError> {
    match draw.chunk.get(k) {
        Some(&c) if c > 0 => Ok(c as usize),
        _ => Err(RunError::Impl(format!(
            "output {} has no slice size for sampled judging",
            s.name
        ))),
    }
}

/// The sampled slices of output `s` (index `k` among the case's specs) as the judge reads
/// them, each read by `read(byte offset, bytes)` from where the output lies: a dense
/// `[elements of a slice, slices, 1, 1]` tensor of the output's type, or of f32 for a block
/// format (dequantized by the build, a block still holding its poison read as f32 poison:
/// `output_tensor`).
fn read_slices<'a>(
    ggml: Ggml,
    draw: &SampledDraw<'_>,
    s: &TensorSpec,
    k: usize,
    mut read: impl FnMut(u64, usize) -> Result<Cow<'a, [u8]>, RunError>,
) -> Result<HostTensor, RunError> {
    let chunk = slice_bytes(draw, s, k)?;
    let mut bytes = Vec::with_capacity(chunk * draw.slices.len());
    for &r in draw.slices {
        bytes.extend_from_slice(&read(r * chunk as u64, chunk)?);
    }
    let per = chunk as u64 / s.dtype.size().max(1) * s.dtype.block();
    let ne = [per as i64, draw.slices.len() as i64, 1, 1];
    let spec = TensorSpec {
        ne,
        nb: dense_strides(&ne, s.dtype),
        bytes: bytes.len() as u64,
        ..s.clone()
    };
    output_tensor(ggml, &spec, bytes)
}

/// What a sampled run read: each output's sampled slices and scan, and every allocation.
pub(crate) struct SampledParts {
    pub(crate) rows: Vec<HostTensor>,
    pub(crate) scans: Vec<Scan>,
    pub(crate) allocations: Vec<Allocation>,
}

/// Run a big case on a ggml CUDA device judged on sampled slices: the op's tensors in ggml's
/// buffers, outputs poisoned and inputs drawn there by kedge's kernels (the same values as
/// the host draw; a block-format input is drawn on the host and quantized by the build; an
/// input the op made, uploaded), the graph computed, each output scanned there and only
/// `draw.slices` of it read back.
pub(crate) fn run_sampled(
    ggml: Ggml,
    device: &str,
    case: &Case,
    specs: &[TensorSpec],
    draw: &SampledDraw<'_>,
    graph: GraphFn,
) -> Result<SampledParts, RunError> {
    let ordinal = cuda_ordinal(device);
    let (
        Built {
            graph: mut g,
            uploads,
            outputs: outs,
        },
        b,
    ) = built_on(ggml, device, case, specs, graph)?;
    g.alloc(&b).map_err(graph_err)?;
    match ordinal {
        Some(o) => with_kedge_device(o, |dev| {
            sampled_on(ggml, dev, &mut g, &b, case, specs, &uploads, &outs, draw)
        }),
        None if b.is_host() => sampled_on_host(ggml, &mut g, &b, case, specs, &uploads, &outs, draw),
        None => Err(RunError::Unsupported(format!(
            "ggml's {device} is neither a CUDA device nor the host: sampled judging draws with CUDA kernels"
        ))),
    }
}

/// `run_sampled` on a host backend: the same steps with host memory (inputs drawn whole and
/// uploaded, outputs read whole and scanned on the host), so the sampled judge runs, and is
/// checked against the whole one, on a machine without a GPU.
#[allow(clippy::too_many_arguments)]
fn sampled_on_host(
    ggml: Ggml,
    g: &mut Graph,
    b: &Backend,
    case: &Case,
    specs: &[TensorSpec],
    uploads: &[(Tensor, usize)],
    outs: &[Tensor],
    draw: &SampledDraw<'_>,
) -> Result<SampledParts, RunError> {
    let out_specs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
    for (t, s) in outs.iter().zip(&out_specs) {
        g.fill(*t, &poison_pattern(s.dtype)).map_err(graph_err)?;
    }
    for (t, i) in uploads {
        let s = &specs[*i];
        let bytes = match made_input(draw.made, *i) {
            Some(h) => input_bytes(ggml, s, h)?.into_owned(),
            None if draw.distinct => {
                let h = kedge_core::contract::op::distinct_rows(case, s, *i);
                input_bytes(ggml, s, &h)?.into_owned()
            }
            None => {
                let (lo, hi) = draw.ranges.get(*i).copied().unwrap_or((-1.0, 1.0));
                drawn_bytes(ggml, case.seed, *i, s, lo, hi)?
            }
        };
        g.set_data(*t, &bytes).map_err(graph_err)?;
    }
    g.compute(b).map_err(|e| match e {
        ComputeError::Graph(e) => graph_err(e),
        other => RunError::Impl(other.to_string()),
    })?;
    let mut rows_out = Vec::new();
    let mut scans = Vec::new();
    for ((t, s), k) in outs.iter().zip(&out_specs).zip(output_indices(specs)) {
        let all = g.get_data(*t).map_err(graph_err)?;
        scans.push(Scan::of_bytes(&all, s.dtype));
        rows_out.push(read_slices(ggml, draw, s, k, |at, len| {
            all.get(at as usize..at as usize + len)
                .map(Cow::Borrowed)
                .ok_or_else(|| {
                    RunError::Impl(format!("{} ends before byte {}", s.name, at + len as u64))
                })
        })?);
    }
    Ok(SampledParts {
        rows: rows_out,
        scans,
        allocations: allocations_of(g),
    })
}

fn allocations_of(g: &Graph) -> Vec<Allocation> {
    g.allocations()
        .into_iter()
        .map(|a| Allocation {
            name: a.name,
            base: a.base as u64,
            bytes: a.bytes as u64,
        })
        .collect()
}

/// `run_sampled`'s work on kedge's device handle.
#[allow(clippy::too_many_arguments)]
fn sampled_on(
    ggml: Ggml,
    dev: &mut kedge_core::cuda::Device,
    g: &mut Graph,
    b: &Backend,
    case: &Case,
    specs: &[TensorSpec],
    uploads: &[(Tensor, usize)],
    outs: &[Tensor],
    draw: &SampledDraw<'_>,
) -> Result<SampledParts, RunError> {
    // Outputs poisoned first, inputs after (an output that is a view of an input then holds
    // the input, as in `run_on`). A block-format input is drawn and quantized on the host:
    // kedge's work, said as such to a supervisor whose deadline comes meanwhile.
    phase::enter(Phase::Upload);
    let out_specs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
    for (t, s) in outs.iter().zip(&out_specs) {
        let p = g.data_ptr(*t).map_err(graph_err)?;
        big::poison(dev, p, s.bytes, s.dtype)?;
    }
    for (t, i) in uploads {
        let s = &specs[*i];
        if let Some(h) = made_input(draw.made, *i) {
            let bytes = input_bytes(ggml, s, h)?;
            g.set_data(*t, &bytes).map_err(graph_err)?;
            continue;
        }
        let (lo, hi) = draw.ranges.get(*i).copied().unwrap_or((-1.0, 1.0));
        if draw.distinct {
            let p = g.data_ptr(*t).map_err(graph_err)?;
            big::distinct_rows(dev, p, s.dtype, s.ne, s.nb, case.seed, *i as u64)?;
            continue;
        }
        if big::can_draw(s.dtype) {
            let p = g.data_ptr(*t).map_err(graph_err)?;
            big::draw_uniform(dev, p, s.dtype, s.nelements(), case.seed, *i as u64, lo, hi)?;
            continue;
        }
        phase::enter(Phase::Inputs);
        if let Some((pool, blocks)) = pool_blocks(ggml, case.seed, *i, s, lo, hi)? {
            // The pool quantized on the host (or read from the pool cache), its rows laid out
            // on the device.
            phase::enter(Phase::Upload);
            let p = g.data_ptr(*t).map_err(graph_err)?;
            let row = pool.spec.nb[1];
            big::pool_rows(dev, p, s.bytes, row, &blocks, pool.rows, pool.picks_state())?;
        } else {
            let bytes = drawn_bytes(ggml, case.seed, *i, s, lo, hi)?;
            phase::enter(Phase::Upload);
            g.set_data(*t, &bytes).map_err(graph_err)?;
        }
    }
    dev.synchronize("drawing the inputs")?;
    phase::enter(Phase::Run);
    g.compute(b).map_err(|e| match e {
        ComputeError::Graph(e) => graph_err(e),
        other => RunError::Impl(other.to_string()),
    })?;
    phase::enter(Phase::Download);
    let mut rows_out = Vec::new();
    let mut scans = Vec::new();
    for ((t, s), k) in outs.iter().zip(&out_specs).zip(output_indices(specs)) {
        let p = g.data_ptr(*t).map_err(graph_err)?;
        scans.push(big::scan(dev, p, s.dtype, s.nelements())?);
        rows_out.push(read_slices(ggml, draw, s, k, |at, len| {
            Ok(Cow::Owned(big::read(dev, p + at, len)?))
        })?);
    }
    Ok(SampledParts {
        rows: rows_out,
        scans,
        allocations: allocations_of(g),
    })
}

/// Time `graph`'s compute on a backend, with everything allocated and uploaded once: the host's
/// wall time around each compute call (which synchronizes), as test-backend-ops' perf mode.
#[allow(clippy::too_many_arguments)]
fn time_on(
    ggml: Ggml,
    device: &str,
    case: &Case,
    specs: &[TensorSpec],
    inputs: &[HostTensor],
    graph: GraphFn,
    warmup: u32,
    reps: u32,
) -> Result<Vec<f64>, RunError> {
    let Built {
        graph: mut g,
        uploads,
        ..
    } = build(ggml, case, specs, graph)?;
    let b = backend(ggml, device)?;
    let b = b
        .lock()
        .map_err(|_| RunError::Impl("a ggml backend's lock was poisoned".into()))?;
    g.alloc(&b).map_err(graph_err)?;
    let input_specs: Vec<usize> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, _)| i)
        .collect();
    for (t, i) in &uploads {
        let k = input_specs.iter().position(|x| x == i);
        let h = k
            .and_then(|k| inputs.get(k))
            .ok_or_else(|| RunError::Impl(format!("no data for input {}", specs[*i].name)))?;
        let bytes = input_bytes(ggml, &specs[*i], h)?;
        g.set_data(*t, &bytes).map_err(graph_err)?;
    }
    let mut times = Vec::with_capacity(reps as usize);
    for i in 0..warmup + reps {
        let t0 = std::time::Instant::now();
        g.compute(&b).map_err(|e| RunError::Impl(e.to_string()))?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(times)
}

impl BackendImpl for GgmlImpl {
    fn library(&self) -> LibraryInfo {
        self.info()
    }
    /// A CUDA device (draws and scans by kedge's kernels in ggml's buffers) or the host.
    fn samples(&self) -> bool {
        self.host || cuda_ordinal(&self.device).is_some()
    }
    /// The case's graph built (no memory: a context without allocation) and the backend
    /// asked about every node, as `execute` asks before it runs.
    fn supports(&self, case: &Case, specs: &[TensorSpec]) -> Result<(), RunError> {
        built_on(self.ggml, &self.device, case, specs, self.graph).map(|_| ())
    }
    fn execute_sampled(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        draw: &SampledDraw<'_>,
    ) -> Result<SampledRun, RunError> {
        let not_applied = (case.alloc != AllocMode::Exact).then(|| {
            format!(
                "{}: not applied on ggml's {} backend, whose buffers are its own allocations; ran as exact (memcheck on these exact buffers covers reads past a tensor)",
                case.alloc, self.device
            )
        });
        let SampledParts {
            rows,
            scans,
            allocations,
        } = run_sampled(self.ggml, &self.device, case, specs, draw, self.graph)?;
        Ok(SampledRun {
            rows,
            scans,
            allocations,
            library: self.info(),
            not_applied,
            facts: Default::default(),
        })
    }
    fn time(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        inputs: &[HostTensor],
        warmup: u32,
        reps: u32,
    ) -> Result<Vec<f64>, RunError> {
        time_on(
            self.ggml,
            &self.device,
            case,
            specs,
            inputs,
            self.graph,
            warmup,
            reps,
        )
    }

    fn execute(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        inputs: &[HostTensor],
    ) -> Result<BackendRun, RunError> {
        let ran = run_on(self.ggml, &self.device, case, specs, inputs, self.graph)?;
        Ok(BackendRun {
            outputs: ran.outputs,
            allocations: ran.allocations,
            library: self.info(),
            not_applied: ran.not_applied,
            facts: Default::default(),
        })
    }
}

/// The reference of an op that has no f64 one: the same graph on ggml's CPU backend from the
/// same build (test-backend-ops' method), in logical order.
pub(crate) fn cpu_reference(
    case: &Case,
    specs: &[TensorSpec],
    inputs: &[HostTensor],
    graph: GraphFn,
) -> Result<Vec<Vec<f64>>, CaseError> {
    let bad = |msg: String| CaseError::BadInput {
        op: case.op.clone(),
        msg,
    };
    let ggml = Ggml::loaded().ok_or_else(|| {
        bad("its reference is ggml's CPU backend, and no ggml build is loaded (--ggml DIR)".into())
    })?;
    let mut exact = case.clone();
    exact.alloc = AllocMode::Exact;
    let ran = run_on(ggml, "CPU", &exact, specs, inputs, graph)
        .map_err(|e| bad(format!("ggml's CPU backend (the reference) failed: {e}")))?;
    Ok(ran.outputs.iter().map(HostTensor::to_f64).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn padded(ne: Ne, pad: i64) -> TensorSpec {
        let alloc = [ne[0] + pad, ne[1], ne[2], ne[3]];
        TensorSpec::strided(
            "dst",
            Role::Output,
            DType::F32,
            ne,
            dense_strides(&alloc, DType::F32),
        )
        .expect("a valid spec")
    }

    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn a_big_inputs_sampled_rows_are_laid_out_from_its_pool_as_the_build_quantizes_them() {
        let dir = std::env::var_os("KEDGE_GGML_DIR").expect("KEDGE_GGML_DIR");
        let ggml = Ggml::load(std::path::Path::new(&dir)).expect("the build loads");
        // A q4_0 input past the pool's 2^24 values: its rows are pool rows.
        let ne = [64, (1 << 18) + 3, 1, 1];
        let s = TensorSpec::dense("src0", Role::Input, DType::Q4_0, ne).expect("a spec");
        let case = Case::new("get_rows", "ggml:CPU", DType::Q4_0, ne);
        let (pool, blocks) = pool_blocks(ggml, case.seed, 0, &s, -1.0, 1.0)
            .expect("quantized")
            .expect("a pooled input");
        let rows = [0u64, 5, 262_146, 131_072];
        let drawn = kedge_core::judge::sample::drawn_rows(&case, &s, 0, &rows, (-1.0, 1.0));
        let sampled =
            TensorSpec::dense("src0", Role::Input, DType::Q4_0, drawn.ne).expect("a spec");
        let vals: &[f32] = bytemuck::cast_slice(&drawn.bytes);
        let laid = from_pool_rows(&sampled, vals).expect("every row is a pool row");
        // The pool's own rows, and what the build makes of the same values.
        let row = s.nb[1] as usize;
        let picked: Vec<u8> = rows
            .iter()
            .flat_map(|&r| {
                let k = pool.pick(r) as usize;
                blocks[k * row..(k + 1) * row].to_vec()
            })
            .collect();
        assert_eq!(laid, picked);
        let quantized = ggml
            .quantize(Type::Q4_0, vals, ne[0], None)
            .expect("quantizes");
        assert_eq!(laid, quantized);
        assert_eq!(
            input_bytes(ggml, &sampled, &drawn).expect("bytes").as_ref(),
            &quantized[..]
        );
        // Values that are no pool's rows are quantized.
        let other: Vec<f32> = vals.iter().map(|v| v * 0.5).collect();
        assert_eq!(from_pool_rows(&sampled, &other), None);
    }

    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn a_block_output_decodes_once_with_its_unwritten_blocks_as_poison_in_f32_and_f64() {
        let dir = std::env::var_os("KEDGE_GGML_DIR").expect("KEDGE_GGML_DIR");
        let ggml = Ggml::load(std::path::Path::new(&dir)).expect("the build loads");
        // More blocks than one task decodes (2048), and a last task of fewer.
        let ne = [64, 4099, 1, 1];
        let s = TensorSpec::dense("dst", Role::Output, DType::Q4_0, ne).expect("a spec");
        let vals: Vec<f32> = (0..64 * 4099)
            .map(|i| ((i % 251) as f32 - 125.0) / 128.0)
            .collect();
        let mut bytes = ggml
            .quantize(Type::Q4_0, &vals, ne[0], None)
            .expect("quantizes");
        let whole = ggml.dequantize(Type::Q4_0, &bytes).expect("decodes");
        // Blocks 0, 2049 and the last one still hold the poison written before the run.
        let (size, nblocks) = (DType::Q4_0.size() as usize, 2 * 4099);
        let poison = poison_pattern(DType::Q4_0);
        for k in [0, 2049, nblocks - 1] {
            bytes[k * size..(k + 1) * size].copy_from_slice(&poison);
        }
        let unwritten = f32::from_bits(kedge_core::model::host::POISON_F32);
        let expect: Vec<f32> = (0..vals.len())
            .map(|i| match i / 32 {
                0 | 2049 => unwritten,
                b if b == nblocks - 1 => unwritten,
                _ => whole[i],
            })
            .collect();
        let t = output_tensor(ggml, &s, bytes.clone()).expect("read back");
        assert_eq!((t.dtype, t.ne), (DType::F32, ne));
        let got: &[f32] = bytemuck::cast_slice(&t.bytes);
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            expect.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        let f = output_f64(ggml, &s, bytes).expect("read back");
        assert_eq!(f.len(), expect.len());
        for (i, (a, b)) in f.iter().zip(&expect).enumerate() {
            assert!(
                a.to_bits() == f64::from(*b).to_bits(),
                "value {i}: {a} against {b}"
            );
        }
        // A strided block output is not read back.
        let strided = TensorSpec::strided(
            "dst",
            Role::Output,
            DType::Q4_0,
            [64, 2, 1, 1],
            dense_strides(&[96, 2, 1, 1], DType::Q4_0),
        )
        .expect("a spec of padded rows");
        assert!(output_f64(ggml, &strided, vec![0; 2 * 54]).is_err());
    }

    #[test]
    fn the_cpu_backend_gets_a_thread_per_8_mib_up_to_the_cores() {
        assert_eq!(cpu_threads(0, 16), 1);
        assert_eq!(cpu_threads(1 << 20, 16), 1);
        assert_eq!(cpu_threads((8 << 20) * 3 + 1, 16), 3);
        assert_eq!(cpu_threads(8 << 30, 16), 16);
        assert_eq!(cpu_threads(8 << 30, 0), 1);
    }

    #[test]
    fn rows_far_apart_are_moved_one_by_one_and_the_rest_whole() {
        // test_cpy's dst_alloc at D1: two values, each in a row of 2^29 floats.
        let s = padded([1, 2, 1, 1], 536_870_911);
        let span = (s.nb[1] + 4) as usize;
        assert_eq!(
            sparse_rows(&s, span),
            Some(vec![(0, 4), (s.nb[1] as usize, 4)])
        );
        // Rows of every dimension, in row order.
        let s = padded([3, 2, 2, 1], 1 << 24);
        let span = (s.nb[2] + s.nb[1] + 12) as usize;
        let rows = sparse_rows(&s, span).expect("sparse");
        let offs: Vec<u64> = rows.iter().map(|r| r.0 as u64).collect();
        assert_eq!(offs, vec![0, s.nb[1], s.nb[2], s.nb[2] + s.nb[1]]);
        assert!(rows.iter().all(|r| r.1 == 12));
        // A small span, a dense tensor, many rows: moved whole.
        let s = padded([33, 7, 1, 1], 31);
        assert_eq!(sparse_rows(&s, (s.nb[1] * 7) as usize), None);
        let dense = padded([1 << 20, 64, 1, 1], 0);
        assert_eq!(sparse_rows(&dense, (1 << 20) * 64 * 4), None);
        let many = padded([1, 8192, 1, 1], 1 << 14);
        assert_eq!(sparse_rows(&many, (many.nb[1] * 8192) as usize), None);
    }
}
