//! fp8_gemm: `D[M, N] = A[M, K] . W[N, K]^T`, the W4A8 prefill GEMM of the incident
//! (shared/background/fp8-gemm-staging-overrun.txt).
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
//! - `scratch = strict`: each chunk's staging is its own allocation in the case's allocation
//!   mode (exact: memcheck's bounds are the staging's; guard: its end touches an unmapped page).
//! - `scratch = pool`: a grow-only pool first grown by an earlier layer of `pool_prior_rows`
//!   rows; a smaller request gets the existing buffer, so an overrun lands in slack. With
//!   `nvtx = true` the pool is registered as an NVTX sub-allocator heap and each region (W, A)
//!   as a sub-allocation, so compute-sanitizer memcheck checks the regions' bounds inside the
//!   pool too.

pub mod lt;
pub mod nvtx;
pub mod plan_cache;
pub mod quant;

use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::{round_to, HostTensor};
use kedge_core::params::{Params, ParamsExt};
use kedge_core::rng::Rng;
use kedge_core::*;
use plan_cache::{layouts, prior_pool_bytes, ChunkLayout, Sizing};
use rayon::prelude::*;
use serde_json::json;

const SRC: &str = include_str!("fp8_gemm.cu");
const FILE: &str = "ops/src/fp8_gemm/fp8_gemm.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}
const K_UPCAST: Kernel = k("fp8_gemm_upcast_w");
const K_SCALE: Kernel = k("fp8_gemm_act_scale");
const K_QUANT: Kernel = k("fp8_gemm_quantize_a");
const K_SIMT: Kernel = k("fp8_gemm_simt");
const BLOCK: u64 = 256;
const SCALE_THREADS: u64 = 1024;

pub struct Fp8Gemm;
pub static OP: Fp8Gemm = Fp8Gemm;

static PARAMS: &[ParamSpec] = &[
    ParamSpec::choice(
        "scratch",
        "strict",
        &["strict", "pool"],
        "strict: the staging buffer is its own allocation in the case's mode; pool: sub-allocated from a grow-only pool an earlier layer grew (can hide overruns)",
    ),
    ParamSpec::int(
        "pool_prior_rows",
        512,
        0,
        1 << 20,
        "pool mode: rows of the earlier, larger layer that grew the pool (0: the pool is exactly this request)",
    ),
    ParamSpec::int(
        "chunk",
        512,
        1,
        1 << 16,
        "prefill chunk: longer M is sliced into chunks of this many rows; the largest plan bucket",
    ),
    ParamSpec::boolean(
        "nvtx",
        false,
        "pool mode: register the pool and its sub-allocations with the NVTX memory API so compute-sanitizer memcheck checks their bounds",
    ),
    ParamSpec::choice(
        "gemm",
        "cublaslt",
        &["cublaslt", "simt"],
        "cublaslt: the real cuBLASLt FP8 matmul (what the engine ships); simt: kedge's own kernel reading exactly what the plan reads through plain loads, a calibration for the detectors (memcheck instruments plain loads; it reported no precise access for cuBLASLt's Hopper kernels on the H200)",
    ),
    ParamSpec::int(
        "algo",
        0,
        0,
        31,
        "which of cuBLASLt's heuristic results to run (0: its first choice, what an engine ships); another index picks another kernel",
    ),
    ParamSpec::int(
        "weight_block",
        32,
        1,
        1 << 16,
        "FP4 weights per UE8M0 block scale",
    ),
];

/// Reach of the incident's shape.
pub const REACH_INCIDENT: &str = "Mila W4A8 prefill (fp8-gemm-staging-overrun): Llama 3.2 3B FP4 (K = 3072), a ~300-token tools system prompt at prefill chunk 512 takes plan bucket 512 and the GEMM reads 212 x 3072 = 651,264 bytes past the activation staging";
/// Reach of any non-bucket row count.
pub const REACH_BUCKETS: &str = "Mila W4A8 prefill plan cache (buckets 1, 16, ..., 128, 256, 512 at chunk 512): every prompt or chunk remainder whose length is not itself a bucket (a 40-token prompt takes bucket 48; Gemma at chunk 64 slices into 64-row chunks and a remainder)";
/// Reach of K and N.
pub const REACH_KN: &str = "model widths: hidden sizes and FFN widths are multiples of 64 in every shipped model; off-16 K or N is synthetic and must be refused (unsupported), not crash";

/// The case's dimensions, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub k: u64,
    pub m: u64,
    pub n: u64,
    pub chunk: u64,
    pub weight_block: u64,
    pub w_row_bytes: u64,
    pub scale_blocks: u64,
}

impl Dims {
    pub fn of(case: &Case) -> Result<Dims, CaseError> {
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
        let chunk = case.params.i64_or("chunk", 512).max(1) as u64;
        let wb = case.params.i64_or("weight_block", 32).max(1) as u64;
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
    case.params.str_or("scratch", "strict") == "pool"
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
        PARAMS
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
    fn tolerance(&self, _case: &Case) -> compare_tol::Tolerance {
        const U_BF16: f64 = 1.0 / 256.0;
        compare_tol::Tolerance {
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
            .with_param("gemm", "simt")
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
                "pool_prior_rows",
                512,
                [3072, 300, 256, 1],
                Reach("Mila's grow-only scratch: an earlier layer's larger request leaves slack; the overrun faults only when the slack is smaller than (bucket - M) x K"),
            )
            .with_param("scratch", "pool")
            .with_values(vec![0, 300, 511, 512, 513]),
        );
        v.push(
            Boundary::param(
                "prefill chunk 64 (Gemma)",
                "chunk",
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
    fn reach(&self, case: &Case) -> Option<String> {
        let d = Dims::of(case).ok()?;
        let rem = plan_cache::chunk_rows(d.m, d.chunk);
        let last = *rem.last()?;
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
            let prior = case.params.i64_or("pool_prior_rows", 512);
            let nvtx = case.params.bool_or("nvtx", false);
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

use kedge_core::compare as compare_tol;
use kedge_core::op::random_tensor;

/// The f64 reference: per chunk, quantize exactly as the device does, accumulate the
/// dequantized products in f64, apply the scales, round to BF16. Output [N, M] (row m has N).
pub fn reference(d: &Dims, a: &HostTensor, w: &HostTensor, ws: &HostTensor) -> Vec<f64> {
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

/// One step of an impl's run, in launch order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Upcast {
        chunk: usize,
    },
    Scale {
        chunk: usize,
    },
    Quant {
        chunk: usize,
    },
    /// `gemm = simt` only: kedge's own GEMM over the plan's rows.
    Simt {
        chunk: usize,
    },
}

fn is_simt(case: &Case) -> bool {
    case.params.str_or("gemm", "cublaslt") == "simt"
}

fn sizing_plan(sizing: Sizing, case: &Case) -> Result<(Dims, Vec<ChunkLayout>), String> {
    let d = Dims::of(case).map_err(|e| e.to_string())?;
    let ls = layouts(sizing, d.m, d.k, d.n, d.chunk)?;
    Ok((d, ls))
}

/// The launches of a run: W upcast into each fresh staging buffer (every chunk in strict
/// mode, once into the pool), then per chunk the scale and the quantization.
fn steps(case: &Case, ls: &[ChunkLayout], d: &Dims) -> Vec<(Step, LaunchPlan)> {
    let pool = is_pool(case);
    let mut v = Vec::new();
    for (i, c) in ls.iter().enumerate() {
        if !pool || i == 0 {
            v.push((
                Step::Upcast { chunk: i },
                LaunchPlan::new(
                    K_UPCAST,
                    [(d.n * d.k).div_ceil(BLOCK), 1, 1],
                    [BLOCK, 1, 1],
                    0,
                ),
            ));
        }
        v.push((
            Step::Scale { chunk: i },
            LaunchPlan::new(K_SCALE, [1, 1, 1], [SCALE_THREADS, 1, 1], 0),
        ));
        v.push((
            Step::Quant { chunk: i },
            LaunchPlan::new(
                K_QUANT,
                [(c.staged_rows * d.k).div_ceil(BLOCK), 1, 1],
                [BLOCK, 1, 1],
                0,
            ),
        ));
        if is_simt(case) {
            v.push((
                Step::Simt { chunk: i },
                LaunchPlan::new(
                    K_SIMT,
                    [d.n.div_ceil(BLOCK), c.plan_rows, 1],
                    [BLOCK, 1, 1],
                    0,
                ),
            ));
        }
    }
    v
}

/// Pool mode: (the earlier layer's rows, the bytes it grew the pool to, the pool's size once
/// this layer's largest request has grown it too; chunks never grow it after the first).
fn pool_sizes(case: &Case, d: &Dims, ls: &[ChunkLayout]) -> (u64, u64, u64) {
    let prior_rows = case.params.i64_or("pool_prior_rows", 512).max(0) as u64;
    let prior = prior_pool_bytes(prior_rows, d.k, d.n);
    let need = ls.iter().map(|c| c.staging_bytes).max().unwrap_or(0);
    (prior_rows, prior, prior.max(need))
}

fn plan_for(sizing: Sizing, case: &Case) -> Result<Plan, String> {
    let (d, ls) = sizing_plan(sizing, case)?;
    let launches = steps(case, &ls, &d).into_iter().map(|(_, l)| l).collect();
    let mut unchecked = Vec::new();
    for (i, c) in ls.iter().enumerate() {
        unchecked.push(if is_simt(case) {
            format!("chunk {i}: cuMemcpyDtoD of {} rows", c.rows)
        } else {
            format!(
                "chunk {i}: cublasLtMatmul FP8 e4m3 TN m={} n={} k={} (plan rows {}, staged rows {}; cuBLASLt picks its own launch) + cuMemcpyDtoD of {} rows",
                d.n, c.plan_rows, d.k, c.plan_rows, c.staged_rows, c.rows
            )
        });
    }
    // The allocation contract: the staging (one per chunk in strict mode, the pool in pool
    // mode) and the GEMM's output at the plan's rows. (cuBLASLt's workspace is chosen by its
    // heuristic at run time: the record names it.)
    let mut buffers = Vec::new();
    if is_pool(case) {
        buffers.push(BufferPlan {
            name: format!(
                "grow-only scratch pool (W e4m3 [{}, {}] + A e4m3 staging)",
                d.n, d.k
            ),
            bytes: pool_sizes(case, &d, &ls).2,
        });
    } else {
        for (i, c) in ls.iter().enumerate() {
            buffers.push(BufferPlan {
                name: format!(
                    "staging[{i}] (W e4m3 [{}, {}] + A e4m3 [{}, {}])",
                    d.n, d.k, c.staged_rows, d.k
                ),
                bytes: c.staging_bytes,
            });
        }
    }
    let d_rows = ls.iter().map(|c| c.plan_rows).max().unwrap_or(1);
    buffers.push(BufferPlan {
        name: format!("GEMM output bf16 [{d_rows}, {}] (plan rows)", d.n),
        bytes: d_rows * d.n * 2,
    });
    Ok(Plan {
        launches,
        unchecked,
        buffers,
    })
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

fn drv(call: &str, r: cudarc::driver::sys::CUresult) -> Result<(), RunError> {
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(RunError::Driver {
        call: call.into(),
        name: format!("{r:?}"),
        code: r as u32,
        msg: String::new(),
        sticky: kedge_core::device::is_sticky(r),
    })
}

fn run_impl(
    sizing: Sizing,
    cached: bool,
    ctx: &mut RunCtx<'_>,
    case: &Case,
    plan: &Plan,
) -> Result<(), RunError> {
    let (d, ls) = sizing_plan(sizing, case).map_err(RunError::Unsupported)?;
    let steps = steps(case, &ls, &d);
    if steps.len() != plan.launches.len() {
        return Err(RunError::Unsupported(format!(
            "plan has {} launches, the run needs {}",
            plan.launches.len(),
            steps.len()
        )));
    }
    let pool_mode = is_pool(case);
    let nvtx_on = pool_mode && case.params.bool_or("nvtx", false);
    let (k, n) = (d.k, d.n);
    // Facts first, so they are in the record even when the GEMM faults.
    let first = ls[0];
    let read_past: u64 = ls.iter().map(|c| c.bytes_read_past_staging).sum();
    ctx.extra.insert(
        "scratch".into(),
        json!(if pool_mode { "pool" } else { "strict" }),
    );
    ctx.extra.insert(
        "bucket".into(),
        json!(plan_cache::bucket_for(first.rows, d.chunk)),
    );
    ctx.extra.insert("plan_rows".into(), json!(first.plan_rows));
    ctx.extra
        .insert("staging_bytes".into(), json!(first.staging_bytes));
    ctx.extra
        .insert("bytes_read_past_staging".into(), json!(read_past));
    ctx.extra.insert(
        "chunks".into(),
        json!(ls.iter().map(chunk_json).collect::<Vec<_>>()),
    );
    ctx.extra.insert("plan_cache".into(), json!(cached));
    ctx.extra
        .insert("cublaslt_version".into(), json!(lt::version()));
    ctx.extra.insert(
        "cublaslt_kernel".into(),
        json!(
            "not exposed by the cuBLASLt API; compute-sanitizer's record names it (<where><func>)"
        ),
    );

    let scales = ctx.scratch("fp8_gemm.scales", lt::SCALES_BYTES, 256)?;
    let d_rows = ls.iter().map(|c| c.plan_rows).max().unwrap_or(1);
    // The GEMM's BF16 output at the plan's rows (as Mila's real tensors were allocated at the
    // chunk extent): correctly sized in every impl.
    let d_plan = ctx.scratch("fp8_gemm.d_plan_rows", d_rows * n * 2, 256)?;

    // Every chunk's plan (cache lookup or build) and the workspace, before any staging is
    // allocated: the staging is then the last allocation, so the memory past its end is not
    // another live allocation of this case (memcheck sees the read as out of bounds).
    let algo = case.params.i64_or("algo", 0).max(0) as usize;
    let simt = is_simt(case);
    ctx.extra.insert(
        "gemm".into(),
        json!(if simt {
            "simt (kedge's calibration kernel: plain loads of the plan's rows)"
        } else {
            "cublaslt"
        }),
    );
    let mut chunk_plans: Vec<(Option<lt::LtPlan>, lt::AlgoInfo, bool)> = Vec::new();
    for c in ls.iter().filter(|_| !simt) {
        if cached {
            let (info, hit) =
                lt::cache().with_plan(n, k, c.plan_rows, scales, algo, |p| Ok(p.info.clone()))?;
            chunk_plans.push((None, info, hit));
        } else {
            let p = lt::LtPlan::build(n, k, c.plan_rows, scales, algo)?;
            let info = p.info.clone();
            chunk_plans.push((Some(p), info, false));
        }
    }
    let ws_bytes = chunk_plans
        .iter()
        .map(|(_, info, _)| info.workspace_bytes)
        .max()
        .unwrap_or(0);
    let workspace = if ws_bytes > 0 {
        (ctx.scratch("fp8_gemm.workspace", ws_bytes, 256)?, ws_bytes)
    } else {
        (0, 0)
    };

    // Pool: grown first by the earlier layer, then by this layer's largest request (chunk 0:
    // chunks never grow after the first).
    let mut pool: Option<(u64, u64)> = None;
    let mut heap: Option<nvtx::NvtxPool> = None;
    if pool_mode {
        let (prior_rows, prior, cap) = pool_sizes(case, &d, &ls);
        let p = ctx.scratch("fp8_gemm.pool", cap, 256)?;
        let slack = cap - first.staging_bytes;
        ctx.extra.insert(
            "pool".into(),
            json!({
                "bytes": cap,
                "prior_rows": prior_rows,
                "prior_bytes": prior,
                "slack_after_staging": slack,
                "overrun_inside_slack": read_past > 0 && ls.iter().all(|c| c.a_offset + c.plan_rows * k <= cap),
            }),
        );
        if nvtx_on {
            heap = Some(nvtx::NvtxPool::register(p, cap));
        }
        pool = Some((p, cap));
    }
    ctx.extra.insert(
        "nvtx".into(),
        json!(if nvtx_on {
            if nvtx::tool_attached() {
                "sub-allocations registered (NVTX tool attached)"
            } else {
                "sub-allocations registered (no NVTX tool attached: calls are no-ops)"
            }
        } else {
            "off"
        }),
    );

    let a_ptr = ctx.ptr(0);
    let w_ptr = ctx.ptr(1);
    let ws_ptr = ctx.ptr(2);
    let out_ptr = ctx.ptr(3);
    let mut algos = Vec::new();
    let mut si = 0usize;
    for (i, c) in ls.iter().enumerate() {
        // The chunk's staging buffer: the last allocation before its GEMM in strict mode.
        let staging = if let Some((p, _)) = pool {
            p
        } else {
            let p = ctx.scratch(&format!("fp8_gemm.staging[{i}]"), c.staging_bytes, 256)?;
            if let Some(g) = ctx.scratch.last().and_then(|a| a.guard_slack()) {
                ctx.extra
                    .insert(format!("staging_guard_gap[{i}]"), json!(g));
            }
            p
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
        let a8 = staging + c.a_offset;
        let a_chunk = a_ptr + c.row0 * k * 2;
        while si < steps.len() {
            let (step, _) = steps[si];
            let launch = plan.launches[si].clone();
            match step {
                Step::Upcast { chunk } if chunk == i => {
                    ctx.launch(
                        &launch,
                        &[
                            KArg::Ptr(w_ptr),
                            KArg::Ptr(ws_ptr),
                            KArg::Ptr(staging),
                            KArg::I64(n as i64),
                            KArg::I64(k as i64),
                            KArg::I64(d.w_row_bytes as i64),
                            KArg::I64(d.scale_blocks as i64),
                            KArg::I32(d.weight_block.min(i32::MAX as u64) as i32),
                        ],
                    )?;
                }
                Step::Scale { chunk } if chunk == i => {
                    ctx.launch(
                        &launch,
                        &[
                            KArg::Ptr(a_chunk),
                            KArg::I64((c.rows * k) as i64),
                            KArg::Ptr(scales),
                        ],
                    )?;
                }
                Step::Quant { chunk } if chunk == i => {
                    ctx.launch(
                        &launch,
                        &[
                            KArg::Ptr(a_chunk),
                            KArg::Ptr(scales),
                            KArg::Ptr(a8),
                            KArg::I64(c.rows as i64),
                            KArg::I64(c.staged_rows as i64),
                            KArg::I64(k as i64),
                        ],
                    )?;
                }
                Step::Simt { chunk } if chunk == i => {
                    ctx.launch(
                        &launch,
                        &[
                            KArg::Ptr(staging),
                            KArg::Ptr(a8),
                            KArg::Ptr(scales),
                            KArg::Ptr(d_plan),
                            KArg::I64(n as i64),
                            KArg::I64(k as i64),
                        ],
                    )?;
                }
                _ => break,
            }
            si += 1;
        }
        // The GEMM, through the plan cache (or a plan of its own for exact-plan); with
        // gemm = simt it was the last launch above.
        if simt {
            ctx.dev.synchronize("fp8_gemm_simt")?;
        } else {
            let Some((own_plan, info, hit)) = chunk_plans.get(i) else {
                return Err(RunError::Unsupported(format!(
                    "no cuBLASLt plan for chunk {i}"
                )));
            };
            let stream = ctx.stream();
            let what = format!(
                "cublasLtMatmul chunk {i} (FP8 TN m={n} n={} k={k}, staged rows {})",
                c.plan_rows, c.staged_rows
            );
            ctx.launched.push(what.clone());
            let mut j = info.to_json();
            j["chunk"] = json!(i);
            j["plan_rows"] = json!(c.plan_rows);
            j["cache_hit"] = json!(*hit);
            algos.push(j);
            ctx.extra.insert("cublaslt".into(), json!(algos.clone()));
            let run = |p: &lt::LtPlan| {
                p.matmul(
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
                Some(p) => run(p)?,
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

macro_rules! fp8_impl {
    ($ty:ident, $stat:ident, $name:literal, $role:expr, $about:literal, $sizing:expr, $cached:expr) => {
        pub struct $ty;
        pub static $stat: $ty = $ty;
        impl Impl for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn role(&self) -> ImplRole {
                $role
            }
            fn about(&self) -> &'static str {
                $about
            }
            fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, String> {
                plan_for($sizing, case)
            }
            fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
                run_impl($sizing, $cached, ctx, case, plan)
            }
        }
    };
}

fp8_impl!(
    BucketedShort,
    BUCKETED_SHORT,
    "bucketed-short",
    ImplRole::Upstream,
    "Mila's W4A8 prefill as shipped: cuBLASLt plan from the M-bucket cache (rounds up), activation staging sized by the caller's M: reads (bucket - M) x K bytes past it",
    Sizing::BucketedShort,
    true
);
fp8_impl!(
    Bucketed,
    BUCKETED,
    "bucketed",
    ImplRole::Fixed,
    "the fix: the same bucketed plan, activation staging sized by the bucket the cache returned (padding rows zeroed)",
    Sizing::Bucketed,
    true
);
fp8_impl!(
    ExactPlan,
    EXACT_PLAN,
    "exact-plan",
    ImplRole::Fixed,
    "no plan cache: cuBLASLt layouts built at the caller's M, staging sized by M",
    Sizing::ExactPlan,
    false
);

#[cfg(test)]
mod tests;
