//! fp8_gemm: `D[M, N] = A[M, K] . W[N, K]^T`, the W4A8 prefill GEMM of the incident (a plan
//! cache that rounds M up to a bucket, so the GEMM reads past its staging buffer).
//!
//! # Case mapping
//! `case.ne = [K, M, N, 1]`, `case.dtype = bf16` (the activations' and the output's dtype).
//! Tensors, ggml order (ne0 contiguous):
//! - `a`       bf16 `[K, M]`: activations, M rows of K.
//! - `w`       u8 `[ceil(K/2), N]`: FP4 e2m1 weights, N rows of K nibbles (element 2i in the
//!   low nibble of byte i, 2i+1 in the high nibble; code = sign bit 3 | magnitude 0..7 of
//!   {0, 0.5, 1, 1.5, 2, 3, 4, 6}).
//! - `w_scale` u8 `[ceil(K/weight_block), N]`: one UE8M0 block scale (2^(e-127)) per
//!   `weight_block` weights of a row (the last block of a row may be partial).
//! - `d`       bf16 `[N, M]` (output): D row-major, N contiguous.
//!
//! # Device path (every impl)
//! Per prefill chunk of at most `chunk` rows: one staging buffer holds the e4m3 weights (W
//! region, upcast on the device from FP4 x block scale, exact in e4m3) and then the e4m3
//! activations (A region last, so reading past it runs off the buffer's end); a kernel
//! computes the chunk's activation scale amax/448 and another quantizes A (round to nearest
//! even, saturating). Then a real cuBLASLt FP8 matmul (TN, FP32 compute, BF16 out, scale
//! pointers) whose layouts were built at the plan's row count writes a BF16 buffer of that
//! many rows, and the caller's rows are copied into `d`.
//!
//! # Impls
//! - `bucketed-short` (as shipped): plan from the bucket cache (1, 16, ..., 128, 256, 512),
//!   A region sized by the caller's rows. Reads (bucket - rows) x K bytes past the staging.
//! - `bucketed` (the fix): the same plan, A region sized by the bucket (padding rows zeroed).
//! - `exact-plan`: no cache; plan built at the caller's rows.
//!
//! # Scratch
//! - `scratch = strict`: the staging is its own allocation in the case's allocation mode
//!   (exact: memcheck's bounds are the staging's; guard: its end touches an unmapped page): one
//!   for the full chunks, which all have the same layout and reuse it, and one for the
//!   remainder, allocated last, just before its GEMM.
//! - `scratch = pool`: a grow-only pool first grown by an earlier layer of `pool_prior_rows`
//!   rows; a smaller request gets the existing buffer, so an overrun lands in slack. With
//!   `nvtx = true` the pool is registered as an NVTX sub-allocator heap and each region (W, A)
//!   as a sub-allocation, so compute-sanitizer memcheck checks the regions' bounds inside the
//!   pool too.
//!
//! # Plan
//! The plan does not grow with M: chunk layouts are a formula (`plan_cache::ChunkLayouts`:
//! every full chunk has one layout, the remainder its own), and the plan lists each launch
//! once: the launches run once before the first chunk (the W upcast into the pool, or into
//! the full chunks' staging), those of a full chunk (their activation pointer a
//! `KernelArg::TensorAt` stepping one chunk per full chunk), and those of the remainder. The
//! cuBLASLt matmuls and the copies into `d` are named in `Plan::unchecked`, with how many
//! times the full chunks' launches run.

pub(crate) mod lt;
pub(crate) mod nvtx;
pub(crate) mod plan_cache;
pub(crate) mod quant;

use kedge_core::contract::op::random_tensor;
use kedge_core::cuda::RunError;
use kedge_core::model::host::{round_to, HostTensor};
use kedge_core::model::rng::Rng;
use kedge_core::*;
use plan_cache::{layouts, prior_pool_bytes, ChunkLayout, ChunkLayouts, Chunks, Sizing};
use rayon::prelude::*;
use serde_json::json;

kedge_core::kernel_source!(SRC = "ops/catalog/src/fp8_gemm/fp8_gemm.cu", "fp8_gemm.cu");
const K_UPCAST: Kernel = SRC.entry("fp8_gemm_upcast_w");
const K_SCALE: Kernel = SRC.entry("fp8_gemm_act_scale");
const K_QUANT: Kernel = SRC.entry("fp8_gemm_quantize_a");
const K_SIMT: Kernel = SRC.entry("fp8_gemm_simt");
const BLOCK: u64 = 256;
const SCALE_THREADS: u64 = 1024;

/// Scratch buffers, by the name the plan's arguments and the run share.
const SCALES: &str = "fp8_gemm.scales";
const D_PLAN: &str = "fp8_gemm.d_plan_rows";
const WORKSPACE: &str = "fp8_gemm.workspace";
const POOL: &str = "fp8_gemm.pool";

/// The strict-mode staging first used by chunk `i`.
fn staging_name(i: u64) -> String {
    format!("fp8_gemm.staging[{i}]")
}

pub(crate) struct Fp8Gemm;
pub(crate) static OP: Fp8Gemm = Fp8Gemm;

kedge_core::params! {
    /// fp8_gemm's parameters.
    pub(crate) struct Fp8GemmParams {
        scratch: choice(["strict", "pool"]) = "strict", "strict: the staging buffer is its own allocation in the case's mode; pool: sub-allocated from a grow-only pool an earlier layer grew (can hide overruns)";
        pool_prior_rows: int(0..=(1 << 20)) = 512, "pool mode: rows of the earlier, larger layer that grew the pool (0: the pool is exactly this request)";
        chunk: int(1..=(1 << 16)) = 512, "prefill chunk: longer M is sliced into chunks of this many rows; the largest plan bucket";
        nvtx: bool = false, "pool mode: register the pool and its sub-allocations with the NVTX memory API so compute-sanitizer memcheck checks their bounds";
        gemm: choice(["cublaslt", "simt"]) = "cublaslt", "cublaslt: the real cuBLASLt FP8 matmul (what the engine ships); simt: kedge's own kernel reading exactly what the plan reads through plain loads, a calibration for the detectors (memcheck instruments plain loads; it reported no precise access for cuBLASLt's Hopper kernels on the H200)";
        algo: int(0..=31) = 0, "which of cuBLASLt's heuristic results to run (0: its first choice, what an engine ships); another index picks another kernel";
        weight_block: int(1..=(1 << 16)) = 32, "FP4 weights per UE8M0 block scale";
    }
}

/// Reach of the incident's shape.
pub(crate) const REACH_INCIDENT: &str = "Mila W4A8 prefill (fp8-gemm-staging-overrun): Llama 3.2 3B FP4 (K = 3072), a ~300-token tools system prompt at prefill chunk 512 takes plan bucket 512 and the GEMM reads 212 x 3072 = 651,264 bytes past the activation staging";
/// Reach of any non-bucket row count.
pub(crate) const REACH_BUCKETS: &str = "Mila W4A8 prefill plan cache (buckets 1, 16, ..., 128, 256, 512 at chunk 512): every prompt or chunk remainder whose length is not itself a bucket (a 40-token prompt takes bucket 48; Gemma at chunk 64 slices into 64-row chunks and a remainder)";
/// Reach of K and N.
pub(crate) const REACH_KN: &str = "model widths: hidden sizes and FFN widths are multiples of 64 in every shipped model; off-16 K or N is synthetic and must be refused (unsupported), not crash";

/// The case's dimensions, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dims {
    pub(crate) k: u64,
    pub(crate) m: u64,
    pub(crate) n: u64,
    pub(crate) chunk: u64,
    pub(crate) weight_block: u64,
    pub(crate) w_row_bytes: u64,
    pub(crate) scale_blocks: u64,
}

impl Dims {
    pub(crate) fn of(case: &Case) -> Result<Dims, CaseError> {
        let bad = |msg: String| CaseError::BadInput {
            op: "fp8_gemm".into(),
            msg,
        };
        let [k, m, n, one] = case.ne;
        for (d, v) in case.ne.iter().enumerate() {
            if *v < 1 {
                return Err(CaseError::NonPositiveDim { dim: d, value: *v });
            }
        }
        if one != 1 {
            return Err(bad(format!(
                "ne = [K, M, N, 1]: ne[3] must be 1, got {one}"
            )));
        }
        let p = Fp8GemmParams::of(case);
        let chunk = p.chunk.max(1) as u64;
        let wb = p.weight_block.max(1) as u64;
        let (k, m, n) = (k as u64, m as u64, n as u64);
        Ok(Dims {
            k,
            m,
            n,
            chunk,
            weight_block: wb,
            w_row_bytes: k.div_ceil(2),
            scale_blocks: k.div_ceil(wb),
        })
    }
}

fn is_pool(case: &Case) -> bool {
    Fp8GemmParams::of(case).scratch == "pool"
}

impl Op for Fp8Gemm {
    fn name(&self) -> &'static str {
        "fp8_gemm"
    }
    fn about(&self) -> &'static str {
        "W4A8 GEMM D[M,N] = A[M,K] W[N,K]^T: FP4 weights and BF16 activations staged as FP8 e4m3, cuBLASLt FP8 matmul with a bucketed plan cache (ne = [K, M, N, 1])"
    }
    fn dtypes(&self) -> &'static [DType] {
        &[DType::Bf16]
    }
    fn params(&self) -> &'static [ParamSpec] {
        Fp8GemmParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&BUCKETED_SHORT, &BUCKETED, &EXACT_PLAN]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let d = Dims::of(case)?;
        let (k, m, n) = (d.k as i64, d.m as i64, d.n as i64);
        Ok(vec![
            TensorSpec::dense("a", Role::Input, DType::Bf16, [k, m, 1, 1])?,
            TensorSpec::dense("w", Role::Input, DType::U8, [d.w_row_bytes as i64, n, 1, 1])?,
            TensorSpec::dense(
                "w_scale",
                Role::Input,
                DType::U8,
                [d.scale_blocks as i64, n, 1, 1],
            )?,
            TensorSpec::dense("d", Role::Output, DType::Bf16, [n, m, 1, 1])?,
        ])
    }
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        // a: uniform [-1, 1) in bf16. w: every byte random (all 16 codes in both nibbles,
        // +-0 included). w_scale: 2^-3 .. 2^2, so every upcast product is exact in e4m3.
        let a = random_tensor(case.seed, 0, &specs[0], -1.0, 1.0);
        let mut rng = Rng::stream(case.seed, 1);
        let w: Vec<u8> = (0..specs[1].bytes).map(|_| rng.below(256) as u8).collect();
        let mut rng = Rng::stream(case.seed, 2);
        let s: Vec<u8> = (0..specs[2].bytes)
            .map(|_| (124 + rng.below(6)) as u8)
            .collect();
        Ok(vec![
            a,
            HostTensor::from_bytes(DType::U8, specs[1].ne, specs[1].nb, w),
            HostTensor::from_bytes(DType::U8, specs[2].ne, specs[2].nb, s),
        ])
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let d = Dims::of(case)?;
        Ok(vec![reference(&d, &inputs[0], &inputs[1], &inputs[2])])
    }
    /// Tolerance from BF16 output rounding, not tuned.
    ///
    /// The reference quantizes exactly as the device does, so device and reference multiply
    /// the same e4m3 values. Every product of two e4m3 values is exact in f32 (4 + 4
    /// significant bits), so the only differences before the output rounding are the order
    /// and precision of the K-term sum (cuBLASLt: f32 accumulators, fast accumulation off;
    /// reference: f64). For random-sign data that error is ~ sqrt(K) * 2^-24 relative, orders
    /// below BF16's resolution at every K kedge runs. Both sides then round to BF16 (8
    /// significant bits, unit roundoff u = 2^-8): two values that agree that closely round to
    /// the same BF16 or to neighbours one ulp apart (|d - r| <= 2u |r|). So even if every
    /// element were one ulp off, NMSE <= (2u)^2 = 2^-14 ~= 6.1e-5; in practice only the few
    /// elements that straddle a rounding boundary differ. A wrong activation or weight scale
    /// (the incident's other bug) or one wrong row moves NMSE far above this.
    fn tolerance(&self, _case: &Case) -> Tolerance {
        const U_BF16: f64 = 1.0 / 256.0;
        Tolerance {
            nmse: (2.0 * U_BF16) * (2.0 * U_BF16),
            elem_rel: 2.0 * U_BF16,
            // Only names the first bad index (the verdict is the NMSE): one ulp relative, and
            // an absolute floor of 2u for outputs that cancel to near zero (outputs here are
            // O(1) to O(100)).
            elem_abs: 2.0 * U_BF16,
        }
    }
    fn boundaries(&self, _limits: &LimitsProfile) -> Vec<Boundary> {
        let mut v = Vec::new();
        // Every bucket edge at chunk 512, +-1, on the incident's K with a narrow N (the
        // overrun depends on K only; N keeps the f64 reference cheap).
        for b in plan_cache::buckets(512) {
            let label = format!("M at plan bucket {b}");
            let bd = Boundary::ne(label, 1, b as i64, [3072, 0, 256, 1], Reach(REACH_BUCKETS));
            let bd = if b == 1 {
                bd.with_values(vec![1, 2])
            } else {
                bd
            };
            v.push(bd);
        }
        v.push(
            Boundary::ne(
                "M inside bucket 512 (the incident's 300)",
                1,
                300,
                [3072, 0, 256, 1],
                Reach(REACH_INCIDENT),
            )
            .with_values(vec![257, 299, 300, 301, 400]),
        );
        // The same plans through kedge's SIMT GEMM: plain loads, so memcheck (and NVTX
        // sub-allocation bounds in pool mode) can see the read past the staging.
        v.push(
            Boundary::ne(
                "M inside bucket 512, read through kedge's SIMT GEMM (calibration)",
                1,
                300,
                [3072, 0, 256, 1],
                Reach("calibration: the incident's plan read through plain loads; cuBLASLt's own kernels gave memcheck no precise record on the H200"),
            )
            .with_params(|p: &mut Fp8GemmParams| p.gemm = "simt")
            .with_values(vec![2, 299, 300, 301]),
        );
        v.push(
            Boundary::ne(
                "M across the prefill chunk (512)",
                1,
                512,
                [3072, 0, 256, 1],
                Reach("a prompt longer than the chunk: full chunks then a remainder (~1000-token user prompt at chunk 512: 512 + 488 rows)"),
            )
            .with_values(vec![511, 512, 513, 1000]),
        );
        v.push(
            Boundary::ne(
                "K at and off multiples of 16",
                0,
                3072,
                [0, 300, 256, 1],
                Reach(REACH_KN),
            )
            .with_values(vec![3056, 3071, 3072, 3073, 3088]),
        );
        v.push(
            Boundary::ne("small K at 16", 0, 16, [0, 40, 64, 1], Reach(REACH_KN))
                .with_values(vec![15, 16, 17, 32]),
        );
        v.push(
            Boundary::ne(
                "N at and off multiples of 16",
                2,
                256,
                [3072, 300, 0, 1],
                Reach(REACH_KN),
            )
            .with_values(vec![255, 256, 257, 264]),
        );
        v.push(
            Boundary::param(
                "pool slack vs the bucket (pool_prior_rows at 512, M = 300)",
                kedge_core::param_name!(Fp8GemmParams, pool_prior_rows),
                512,
                [3072, 300, 256, 1],
                Reach("Mila's grow-only scratch: an earlier layer's larger request leaves slack; the overrun faults only when the slack is smaller than (bucket - M) x K"),
            )
            .with_params(|p: &mut Fp8GemmParams| p.scratch = "pool")
            .with_values(vec![0, 300, 511, 512, 513]),
        );
        v.push(
            Boundary::param(
                "prefill chunk 64 (Gemma)",
                kedge_core::param_name!(Fp8GemmParams, chunk),
                64,
                [3072, 300, 256, 1],
                Reach("Gemma at chunk 64 slices a 300-token prompt into 64-row chunks and a 44-row remainder (bucket 48)"),
            )
            .with_values(vec![63, 64, 65]),
        );
        v
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let p = |pairs: &[(&str, serde_json::Value)]| {
            let mut m = Params::new();
            for (k, v) in pairs {
                m.insert(k.to_string(), v.clone());
            }
            m
        };
        vec![
            ([64, 5, 32, 1], Params::new()),
            ([128, 40, 64, 1], Params::new()),
            ([256, 16, 16, 1], Params::new()),
            ([64, 130, 48, 1], Params::new()),
            ([32, 600, 16, 1], Params::new()),
            ([3072, 300, 64, 1], Params::new()),
            ([96, 33, 32, 1], p(&[("weight_block", json!(16))])),
            (
                [128, 40, 32, 1],
                p(&[("scratch", json!("pool")), ("pool_prior_rows", json!(64))]),
            ),
        ]
    }
    fn upstream(&self, _case: &Case) -> Option<UpstreamRepro> {
        // No test-backend-ops op: this is Mila's cuBLASLt prefill path, not a ggml op.
        None
    }
    /// 2·M·N·K: the GEMM's multiply-adds, as TFLOP/s are counted.
    fn flops(&self, case: &Case) -> Option<u64> {
        let [k, m, n, _] = case.ne.map(|d| d.max(0) as u64);
        2u64.checked_mul(m)?.checked_mul(n)?.checked_mul(k)
    }
    fn reach(&self, case: &Case) -> Option<String> {
        let d = Dims::of(case).ok()?;
        let last = Chunks::of(d.m, d.chunk).last_rows()?;
        if d.k == 3072 && d.m == 300 && d.chunk == 512 {
            Some(REACH_INCIDENT.into())
        } else if plan_cache::bucket_for(last, d.chunk) != Some(last) {
            Some(REACH_BUCKETS.into())
        } else {
            None
        }
    }
    fn alloc_note(&self, case: &Case) -> Option<String> {
        if is_pool(case) {
            let p = Fp8GemmParams::of(case);
            let (prior, nvtx) = (p.pool_prior_rows, p.nvtx);
            let mut s = format!(
                "scratch=pool: the staging is sub-allocated from a grow-only pool an earlier layer of {prior} rows grew; a read past the staging region that stays inside the pool's slack is invisible to guard pages and to memcheck's allocation bounds: THIS MODE CAN HIDE OVERRUNS"
            );
            if nvtx {
                s.push_str("; nvtx=true: the pool is an NVTX sub-allocator heap and the W and A regions are registered sub-allocations, so under compute-sanitizer memcheck a plain load past a region is reported (gemm=simt: seen on the H200); cuBLASLt's own GEMM kernel gave memcheck no precise record there, so with gemm=cublaslt the overrun stayed hidden even so");
            } else {
                s.push_str("; nvtx=false: no sub-allocation bounds are declared, so memcheck cannot see it either");
            }
            Some(s)
        } else if case.alloc == AllocMode::Canary {
            Some("canary: red zones catch stray writes only; the staging overrun is a read, so use exact (memcheck) or guard".into())
        } else {
            None
        }
    }
}

/// The f64 reference: per chunk, quantize exactly as the device does, accumulate the
/// dequantized products in f64, apply the scales, round to BF16. Output [N, M] (row m has N).
pub(crate) fn reference(d: &Dims, a: &HostTensor, w: &HostTensor, ws: &HostTensor) -> Vec<f64> {
    let (k, m, n) = (d.k as usize, d.m as usize, d.n as usize);
    let a_bits: Vec<u16> = a
        .bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    // W upcast once: N x K e4m3 values as f64.
    let w8: Vec<f64> = (0..n * k)
        .into_par_iter()
        .map(|i| {
            let (row, kk) = (i / k, i % k);
            let code = quant::fp4_nibble(&w.bytes[row * d.w_row_bytes as usize..], kk);
            let s = ws.bytes[row * d.scale_blocks as usize + kk / d.weight_block as usize];
            quant::e4m3_to_f32(quant::upcast_w(code, s)) as f64
        })
        .collect();
    let mut out = vec![0.0f64; m * n];
    let mut row0 = 0usize;
    for rows in plan_cache::chunk_rows(m as u64, d.chunk) {
        let rows = rows as usize;
        let chunk_a = &a_bits[row0 * k..(row0 + rows) * k];
        let s_a = quant::act_scale(chunk_a.iter().map(|&b| quant::bf16_to_f32(b)));
        let qa: Vec<f64> = chunk_a
            .par_iter()
            .map(|&b| quant::e4m3_to_f32(quant::quantize_act(quant::bf16_to_f32(b), s_a)) as f64)
            .collect();
        out[row0 * n..(row0 + rows) * n]
            .par_chunks_mut(n)
            .enumerate()
            .for_each(|(r, dst)| {
                let arow = &qa[r * k..(r + 1) * k];
                for (c, o) in dst.iter_mut().enumerate() {
                    let wrow = &w8[c * k..(c + 1) * k];
                    let acc: f64 = arow.iter().zip(wrow).map(|(x, y)| x * y).sum();
                    // Weight per-tensor scale is 1 (block scales are folded into w8).
                    *o = round_to(DType::Bf16, acc * s_a as f64);
                }
            });
        row0 += rows;
    }
    out
}

/// A byte count or element count as the kernels' `long long`; refused past it.
fn as_i64(what: &str, v: u64) -> Result<i64, Refusal> {
    i64::try_from(v).map_err(|_| format!("{what} = {v} does not fit the kernels' long long").into())
}

fn mul(what: &str, a: u64, b: u64) -> Result<u64, Refusal> {
    a.checked_mul(b)
        .ok_or_else(|| format!("{what} ({a} x {b}) does not fit in 64 bits").into())
}

/// Pool mode: (the earlier layer's rows, the bytes it grew the pool to, the pool's size once
/// this layer's largest request has grown it too; chunks never grow it after the first).
fn pool_sizes(p: &Fp8GemmParams, d: &Dims, ls: &ChunkLayouts) -> Result<(u64, u64, u64), Refusal> {
    let prior_rows = p.pool_prior_rows.max(0) as u64;
    let prior = prior_pool_bytes(prior_rows, d.k, d.n).ok_or_else(|| {
        Refusal::from(format!(
            "the earlier layer's pool ({prior_rows} rows of K = {}) does not fit in 64 bits",
            d.k
        ))
    })?;
    Ok((prior_rows, prior, prior.max(ls.max_staging_bytes())))
}

/// When a planned launch runs (`Schedule`).
#[derive(Debug, Clone, Copy)]
enum Group {
    Prologue,
    Full,
    Tail,
}

/// Everything an impl's run issues for a case, derived from the case alone: the plan's
/// launches and which of them run when. `plan` and `run` both build it, so they agree.
struct Schedule {
    d: Dims,
    p: Fp8GemmParams,
    ls: ChunkLayouts,
    launches: Vec<LaunchPlan>,
    /// Launches run once, before chunk 0's: the W upcast into the pool, or into the staging
    /// the full chunks share.
    prologue: Vec<usize>,
    /// Launches run once per full chunk `i`, their arguments resolved at repeat point
    /// `[i, 0, 0]` (the activation pointer steps one chunk of rows).
    full: Vec<usize>,
    /// Launches run once for the remainder.
    tail: Vec<usize>,
    /// Pool mode: `pool_sizes`; `None` in strict mode.
    pool_bytes: Option<(u64, u64, u64)>,
}

impl Schedule {
    fn of(sizing: Sizing, case: &Case) -> Result<Schedule, Refusal> {
        let d = Dims::of(case).map_err(|e| Refusal(e.to_string()))?;
        let p = Fp8GemmParams::of(case);
        let ls = layouts(sizing, d.m, d.k, d.n, d.chunk)?;
        let pool_bytes = if p.scratch == "pool" {
            Some(pool_sizes(&p, &d, &ls)?)
        } else {
            None
        };
        let mut s = Schedule {
            d,
            p,
            ls,
            launches: Vec::new(),
            prologue: Vec::new(),
            full: Vec::new(),
            tail: Vec::new(),
            pool_bytes,
        };
        let n_full = s.ls.chunks.full;
        match (s.pool_bytes, s.ls.full) {
            (Some((_, _, cap)), _) => {
                let l = s.upcast(KernelArg::Scratch {
                    name: POOL.into(),
                    bytes: cap,
                })?;
                s.add(Group::Prologue, l);
            }
            (None, Some(f)) => {
                let l = s.upcast(s.staging(0, &f))?;
                s.add(Group::Prologue, l);
            }
            (None, None) => {}
        }
        if let Some(f) = s.ls.full {
            let step = as_i64(
                "one chunk of activations in bytes",
                mul("a chunk of activations", f.rows, s.d.k * 2)?,
            )?;
            for l in s.chunk_launches(&f, step, s.staging(0, &f))? {
                s.add(Group::Full, l);
            }
        }
        if let Some(t) = s.ls.tail {
            let staging = s.staging(n_full, &t);
            if s.pool_bytes.is_none() {
                let l = s.upcast(staging.clone())?;
                s.add(Group::Tail, l);
            }
            for l in s.chunk_launches(&t, 0, staging)? {
                s.add(Group::Tail, l);
            }
        }
        Ok(s)
    }

    fn add(&mut self, group: Group, l: LaunchPlan) {
        let i = self.launches.len();
        self.launches.push(l);
        match group {
            Group::Prologue => self.prologue.push(i),
            Group::Full => self.full.push(i),
            Group::Tail => self.tail.push(i),
        }
    }

    /// The staging buffer a chunk writes: the pool, or the strict staging first used by chunk
    /// `first` (the full chunks share chunk 0's).
    fn staging(&self, first: u64, c: &ChunkLayout) -> KernelArg {
        match self.pool_bytes {
            Some((_, _, cap)) => KernelArg::Scratch {
                name: POOL.into(),
                bytes: cap,
            },
            None => KernelArg::Scratch {
                name: staging_name(first),
                bytes: c.staging_bytes,
            },
        }
    }

    fn scales() -> KernelArg {
        KernelArg::Scratch {
            name: SCALES.into(),
            bytes: lt::SCALES_BYTES,
        }
    }

    /// The GEMM's BF16 output at the plan's rows, as Mila's real tensors were allocated at the
    /// chunk extent: correctly sized in every impl.
    fn d_plan_bytes(&self) -> Result<u64, Refusal> {
        mul(
            "the GEMM output",
            self.ls.max_plan_rows(),
            mul("a GEMM output row", self.d.n, 2)?,
        )
    }

    /// W upcast into a staging buffer's W region (its start).
    fn upcast(&self, staging: KernelArg) -> Result<LaunchPlan, Refusal> {
        let d = &self.d;
        let nk = mul("the weight", d.n, d.k)?;
        Ok(
            LaunchPlan::new(K_UPCAST, [nk.div_ceil(BLOCK), 1, 1], [BLOCK, 1, 1], 0).args(vec![
                KernelArg::Tensor(1),
                KernelArg::Tensor(2),
                staging,
                KernelArg::I64(as_i64("N", d.n)?),
                KernelArg::I64(as_i64("K", d.k)?),
                KernelArg::I64(as_i64("packed weight row bytes", d.w_row_bytes)?),
                KernelArg::I64(as_i64("scale blocks per row", d.scale_blocks)?),
                KernelArg::I32(d.weight_block.min(i32::MAX as u64) as i32),
            ]),
        )
    }

    /// One chunk's launches: its activation scale, its quantization into the staging's A
    /// region, and (gemm = simt) kedge's GEMM over the plan's rows. `a_step`: bytes the
    /// activation pointer moves per repeat (one chunk for the full chunks, 0 for the remainder).
    fn chunk_launches(
        &self,
        c: &ChunkLayout,
        a_step: i64,
        staging: KernelArg,
    ) -> Result<Vec<LaunchPlan>, Refusal> {
        let d = &self.d;
        let k = as_i64("K", d.k)?;
        let a_at = KernelArg::TensorAt {
            index: 0,
            offset: as_i64(
                "the chunk's activation offset",
                mul("the chunk's activation offset", c.row0, d.k * 2)?,
            )?,
            step: [a_step, 0, 0],
        };
        let a_offset = KernelArg::I64(as_i64("the A region's offset", c.a_offset)?);
        let staged = mul("the staged activations", c.staged_rows, d.k)?;
        let mut v = vec![
            LaunchPlan::new(K_SCALE, [1, 1, 1], [SCALE_THREADS, 1, 1], 0).args(vec![
                a_at.clone(),
                KernelArg::I64(as_i64(
                    "the chunk's activations",
                    mul("the chunk's activations", c.rows, d.k)?,
                )?),
                Self::scales(),
            ]),
            LaunchPlan::new(K_QUANT, [staged.div_ceil(BLOCK), 1, 1], [BLOCK, 1, 1], 0).args(vec![
                a_at,
                Self::scales(),
                staging.clone(),
                a_offset.clone(),
                KernelArg::I64(as_i64("rows", c.rows)?),
                KernelArg::I64(as_i64("staged rows", c.staged_rows)?),
                KernelArg::I64(k),
            ]),
        ];
        if self.p.gemm == "simt" {
            v.push(
                LaunchPlan::new(
                    K_SIMT,
                    [d.n.div_ceil(BLOCK), c.plan_rows, 1],
                    [BLOCK, 1, 1],
                    0,
                )
                .args(vec![
                    staging,
                    a_offset,
                    Self::scales(),
                    KernelArg::Scratch {
                        name: D_PLAN.into(),
                        bytes: self.d_plan_bytes()?,
                    },
                    KernelArg::I64(as_i64("N", d.n)?),
                    KernelArg::I64(k),
                ]),
            );
        }
        Ok(v)
    }

    /// "chunk 3" or "chunks 0..=9 (each)": the chunks with this layout.
    fn label(&self, tail: bool) -> String {
        let n_full = self.ls.chunks.full;
        match (tail, n_full) {
            (true, _) | (false, 1) => format!("chunk {}", if tail { n_full } else { 0 }),
            (false, _) => format!("chunks 0..={} (each)", n_full - 1),
        }
    }

    /// The work of a chunk layout that is not a kernel kedge launches.
    fn unchecked(&self, c: &ChunkLayout, tail: bool) -> String {
        let d = &self.d;
        let work = if self.p.gemm == "simt" {
            format!("cuMemcpyDtoD of {} rows", c.rows)
        } else {
            format!(
                "cublasLtMatmul FP8 e4m3 TN m={} n={} k={} (plan rows {}, staged rows {}; cuBLASLt picks its own launch) + cuMemcpyDtoD of {} rows",
                d.n, c.plan_rows, d.k, c.plan_rows, c.staged_rows, c.rows
            )
        };
        let mut s = format!("{}: {work}", self.label(tail));
        if !tail && self.ls.chunks.full > 1 {
            s.push_str(&format!(
                "; the plan's launches {:?} run once per chunk, {} times, the activation pointer moving {} rows each time",
                self.full, self.ls.chunks.full, c.rows
            ));
        }
        s
    }

    fn plan(&self) -> Result<Plan, Refusal> {
        let d = &self.d;
        let mut unchecked = Vec::new();
        if let Some(f) = &self.ls.full {
            unchecked.push(self.unchecked(f, false));
        }
        if let Some(t) = &self.ls.tail {
            unchecked.push(self.unchecked(t, true));
        }
        // The allocation contract: the staging (one for the full chunks and one for the
        // remainder in strict mode, the pool in pool mode) and the GEMM's output at the plan's
        // rows. (cuBLASLt's workspace is chosen by its heuristic at run time: the record
        // names it.)
        let mut buffers = Vec::new();
        if let Some((_, _, cap)) = self.pool_bytes {
            buffers.push(BufferPlan {
                name: format!(
                    "grow-only scratch pool (W e4m3 [{}, {}] + A e4m3 staging)",
                    d.n, d.k
                ),
                bytes: cap,
            });
        } else {
            let n_full = self.ls.chunks.full;
            for (first, c) in self
                .ls
                .full
                .map(|f| (0, f))
                .into_iter()
                .chain(self.ls.tail.map(|t| (n_full, t)))
            {
                let shared = if first == 0 && n_full > 1 {
                    format!(", reused by the {n_full} full chunks")
                } else {
                    String::new()
                };
                buffers.push(BufferPlan {
                    name: format!(
                        "staging[{first}] (W e4m3 [{}, {}] + A e4m3 [{}, {}]){shared}",
                        d.n, d.k, c.staged_rows, d.k
                    ),
                    bytes: c.staging_bytes,
                });
            }
        }
        buffers.push(BufferPlan {
            name: format!(
                "GEMM output bf16 [{}, {}] (plan rows)",
                self.ls.max_plan_rows(),
                d.n
            ),
            bytes: self.d_plan_bytes()?,
        });
        Ok(Plan {
            launches: self.launches.clone(),
            unchecked,
            buffers,
            ..Plan::default()
        })
    }
}

fn chunk_json(c: &ChunkLayout) -> serde_json::Value {
    json!({
        "row0": c.row0,
        "rows": c.rows,
        "plan_rows": c.plan_rows,
        "staged_rows": c.staged_rows,
        "a_offset": c.a_offset,
        "staging_bytes": c.staging_bytes,
        "bytes_read_past_staging": c.bytes_read_past_staging,
    })
}

/// Bytes between the end of a guard-mode allocation of `bytes` and its guard page, as the
/// engine places it (the end of the last mapped granule, the start aligned down to 256), when
/// alignment leaves a gap; `None` in every other mode.
pub(crate) fn guard_gap(mode: AllocMode, bytes: u64, granularity: u64) -> Option<u64> {
    if mode != AllocMode::Guard {
        return None;
    }
    let g = granularity.max(1);
    let mapped = bytes.max(1).div_ceil(g).checked_mul(g)?;
    let gap = mapped - bytes;
    (gap >= 256).then_some(gap % 256)
}

fn drv(call: &str, r: cudarc::driver::sys::CUresult) -> Result<(), RunError> {
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(RunError::Driver {
        call: call.into(),
        name: format!("{r:?}"),
        code: r as u32,
        msg: String::new(),
        sticky: kedge_core::cuda::error::is_sticky(r),
    })
}

fn run_impl(
    sizing: Sizing,
    cached: bool,
    ctx: &mut RunCtx<'_>,
    case: &Case,
    plan: &Plan,
) -> Result<(), RunError> {
    let s = Schedule::of(sizing, case).map_err(|r| RunError::Unsupported(r.0))?;
    if s.launches != plan.launches {
        return Err(RunError::Unsupported(format!(
            "the plan has {} launches, the run issues {}, or they differ",
            plan.launches.len(),
            s.launches.len()
        )));
    }
    let (d, ls, p) = (&s.d, &s.ls, &s.p);
    let Some(first) = ls.first() else {
        return Err(RunError::Unsupported("M = 0: nothing to multiply".into()));
    };
    let pool_mode = s.pool_bytes.is_some();
    let simt = p.gemm == "simt";
    let nvtx_on = pool_mode && p.nvtx;
    let (k, n) = (d.k, d.n);
    // Facts first, so they are in the record even when the GEMM faults.
    let read_past = ls.bytes_read_past_staging();
    ctx.fact("scratch", if pool_mode { "pool" } else { "strict" });
    ctx.fact("bucket", json!(plan_cache::bucket_for(first.rows, d.chunk)));
    ctx.fact("plan_rows", first.plan_rows);
    ctx.fact("staging_bytes", first.staging_bytes);
    ctx.fact("bytes_read_past_staging", read_past);
    ctx.fact(
        "chunks",
        ls.iter().map(|c| chunk_json(&c)).collect::<Vec<_>>(),
    );
    ctx.fact("plan_cache", cached);
    ctx.fact("cublaslt_version", json!(lt::version()));
    ctx.fact(
        "cublaslt_kernel",
        "not exposed by the cuBLASLt API; compute-sanitizer's record names it (<where><func>)",
    );

    let scales = ctx.scratch(SCALES, lt::SCALES_BYTES, 256)?;
    let d_plan_bytes = s.d_plan_bytes().map_err(|r| RunError::Unsupported(r.0))?;
    let d_plan = ctx.scratch(D_PLAN, d_plan_bytes, 256)?;

    // Each chunk layout's plan (cache lookup or build) and the workspace, before any staging
    // is allocated: the staging is then the last allocation, so the memory past its end is not
    // another live allocation of this case (memcheck sees the read as out of bounds).
    let algo = p.algo.max(0) as usize;
    ctx.fact(
        "gemm",
        if simt {
            "simt (kedge's calibration kernel: plain loads of the plan's rows)"
        } else {
            "cublaslt"
        },
    );
    let shapes: Vec<ChunkLayout> = ls.shapes().collect();
    let mut lt_plans: Vec<(Option<lt::LtPlan>, lt::AlgoInfo, bool)> = Vec::new();
    for c in shapes.iter().filter(|_| !simt) {
        if cached {
            let (info, hit) =
                lt::cache().with_plan(n, k, c.plan_rows, scales, algo, |p| Ok(p.info.clone()))?;
            lt_plans.push((None, info, hit));
        } else {
            let pl = lt::LtPlan::build(n, k, c.plan_rows, scales, algo)?;
            let info = pl.info.clone();
            lt_plans.push((Some(pl), info, false));
        }
    }
    let ws_bytes = lt_plans
        .iter()
        .map(|(_, info, _)| info.workspace_bytes)
        .max()
        .unwrap_or(0);
    let workspace = if ws_bytes > 0 {
        (ctx.scratch(WORKSPACE, ws_bytes, 256)?, ws_bytes)
    } else {
        (0, 0)
    };

    // Pool: grown first by the earlier layer, then by this layer's largest request (chunk 0:
    // chunks never grow after the first).
    let mut pool: Option<u64> = None;
    let mut heap: Option<nvtx::NvtxPool> = None;
    if let Some((prior_rows, prior, cap)) = s.pool_bytes {
        let pp = ctx.scratch(POOL, cap, 256)?;
        let slack = cap.saturating_sub(first.staging_bytes);
        ctx.fact(
            "pool",
            json!({
                "bytes": cap,
                "prior_rows": prior_rows,
                "prior_bytes": prior,
                "slack_after_staging": slack,
                "overrun_inside_slack": read_past > 0
                    && shapes.iter().all(|c| c.a_offset.saturating_add(c.plan_rows.saturating_mul(k)) <= cap),
            }),
        );
        if nvtx_on {
            heap = Some(nvtx::NvtxPool::register(pp, cap));
        }
        pool = Some(pp);
    }
    ctx.fact(
        "nvtx",
        if nvtx_on {
            if nvtx::tool_attached() {
                "sub-allocations registered (NVTX tool attached)"
            } else {
                "sub-allocations registered (no NVTX tool attached: calls are no-ops)"
            }
        } else {
            "off"
        },
    );

    let out_ptr = ctx.ptr(3);
    let granularity = ctx.dev.limits.vmm_granularity.value;
    let n_full = ls.chunks.full;
    let mut algos = Vec::new();
    for (i, c) in ls.iter().enumerate() {
        let i = i as u64;
        let tail = i == n_full;
        // The chunk's staging buffer: in strict mode the full chunks' (allocated for chunk 0)
        // or the remainder's, the last allocation before its GEMM.
        let staging = match pool {
            Some(pp) => pp,
            None => {
                let sp = ctx.scratch(
                    &staging_name(if tail { n_full } else { 0 }),
                    c.staging_bytes,
                    256,
                )?;
                if let Some(g) = guard_gap(case.alloc, c.staging_bytes, granularity) {
                    ctx.fact(&format!("staging_guard_gap[{i}]"), g);
                }
                sp
            }
        };
        if let Some(h) = &heap {
            // Declare this chunk's sub-allocations before any kernel touches the pool.
            h.reset();
            h.region(staging, n * k, "fp8_gemm.staging.w_e4m3");
            h.region(
                staging + c.a_offset,
                c.staged_rows * k,
                "fp8_gemm.staging.a_e4m3",
            );
        }
        if i == 0 {
            for &j in &s.prologue {
                ctx.launch(&plan.launches[j])?;
            }
        }
        // The chunk's launches: the plan's own, at this chunk's repeat point.
        let (group, at) = if tail { (&s.tail, 0) } else { (&s.full, i) };
        for &j in group {
            let l = &plan.launches[j];
            let args = ctx.resolve(&l.args, [at, 0, 0])?;
            ctx.launch_with(l, &args)?;
        }
        // The GEMM, through the plan cache (or a plan of its own for exact-plan); with
        // gemm = simt it was the last launch above.
        if simt {
            ctx.dev.synchronize("fp8_gemm_simt")?;
        } else {
            let shape = usize::from(tail && ls.full.is_some());
            let Some((own_plan, info, hit)) = lt_plans.get(shape) else {
                return Err(RunError::Unsupported(format!(
                    "no cuBLASLt plan for chunk {i}"
                )));
            };
            // A full chunk after the first finds its layout's plan in the cache.
            let hit = *hit || (cached && !tail && i > 0);
            let stream = ctx.stream();
            let what = format!(
                "cublasLtMatmul chunk {i} (FP8 TN m={n} n={} k={k}, staged rows {})",
                c.plan_rows, c.staged_rows
            );
            let mut j = info.to_json();
            j["chunk"] = json!(i);
            j["plan_rows"] = json!(c.plan_rows);
            j["cache_hit"] = json!(hit);
            algos.push(j);
            ctx.fact("cublaslt", algos.clone());
            let a8 = staging + c.a_offset;
            let run = |pl: &lt::LtPlan| {
                pl.matmul(
                    staging,
                    a8,
                    d_plan,
                    scales,
                    workspace.0,
                    workspace.1,
                    stream,
                )
            };
            match own_plan {
                None => {
                    lt::cache().with_plan(n, k, c.plan_rows, scales, algo, run)?;
                }
                Some(pl) => run(pl)?,
            }
            ctx.dev.synchronize(&what)?;
        }
        // The caller's rows into d.
        // SAFETY: both ranges lie inside live allocations: d_plan holds plan_rows >= rows
        // rows of N, d holds M rows of N from row0.
        drv("cuMemcpyDtoD", unsafe {
            cudarc::driver::sys::cuMemcpyDtoD_v2(
                out_ptr + c.row0 * n * 2,
                d_plan,
                (c.rows * n * 2) as usize,
            )
        })?;
        ctx.dev.synchronize("copy of the caller's rows")?;
    }
    // Unregister the NVTX heap before the engine frees the pool.
    drop(heap);
    Ok(())
}

/// The case runs kedge's SIMT calibration GEMM, not cuBLASLt.
fn is_simt(case: &Case) -> bool {
    Fp8GemmParams::of(case).gemm == "simt"
}

/// One fp8_gemm impl: how it sizes the plan and the staging, and whether its cuBLASLt plans
/// come from the process's plan cache. Its run does more than launch its plan (cuBLASLt's
/// matmul, the copies into `d`), so it has its own.
pub(crate) struct Fp8Impl {
    pub(crate) name: &'static str,
    pub(crate) role: ImplRole,
    pub(crate) about: &'static str,
    pub(crate) sizing: Sizing,
    pub(crate) cached: bool,
}

impl Impl for Fp8Impl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        self.role
    }
    fn about(&self) -> &str {
        self.about
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        Schedule::of(self.sizing, case)?.plan()
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        run_impl(self.sizing, self.cached, ctx, case, plan)
    }
    fn load(&self, case: &Case) {
        if !is_simt(case) {
            lt::load();
        }
    }
}

pub(crate) static BUCKETED_SHORT: Fp8Impl = Fp8Impl {
    name: "bucketed-short",
    role: ImplRole::Upstream,
    about: "Mila's W4A8 prefill as shipped: cuBLASLt plan from the M-bucket cache (rounds up), activation staging sized by the caller's M: reads (bucket - M) x K bytes past it",
    sizing: Sizing::BucketedShort,
    cached: true,
};

pub(crate) static BUCKETED: Fp8Impl = Fp8Impl {
    name: "bucketed",
    role: ImplRole::Fixed,
    about: "the fix: the same bucketed plan, activation staging sized by the bucket the cache returned (padding rows zeroed)",
    sizing: Sizing::Bucketed,
    cached: true,
};

pub(crate) static EXACT_PLAN: Fp8Impl = Fp8Impl {
    name: "exact-plan",
    role: ImplRole::Fixed,
    about: "no plan cache: cuBLASLt layouts built at the caller's M, staging sized by M",
    sizing: Sizing::ExactPlan,
    cached: false,
};

#[cfg(test)]
mod tests;
