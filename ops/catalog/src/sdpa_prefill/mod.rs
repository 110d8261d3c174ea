//! sdpa_prefill: causal prefill attention, f32 or bf16. q, out: ne = [head_dim, L, n_head, 1];
//! k, v: [head_dim, L, n_kv_head, 1] (GQA: query head h reads kv head h / (n_head /
//! n_kv_head)); `out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(head_dim)) v_j` per head.
//!
//! The incident (a long-context prefill on an M4 Max that "succeeded" with nothing in it):
//! MLX's fused causal SDPA supports head_dim 64, 80 and 128 only. Qwen3.6-35B-A3B has head_dim
//! 256 and 16 heads, so its prefill fell back to an unfused matmul that materializes a
//! [B, 16, L, L] fp32 score buffer: 16 · L² · 4 bytes, 41.74 GB at L = 25,540 and 41.94 GB at
//! L = 25,600, against the M4 Max's Metal maxBufferLength of 41.75 GB. Past it the request
//! still "succeeded": HTTP 200, the whole prompt consumed, then one end-of-sequence token. The
//! fix (sanctum-rs 5731769) runs the query axis in blocks of 2048 rows, so the buffer is
//! [B, 16, 2048, L]: linear in L.
//!
//! The device's largest buffer is a case parameter (`max_buffer_bytes`), so kedge can probe the
//! same transition at a size it can compute: with the limit scaled to 16 MiB, 16 heads reach it
//! at L = 512 instead of 25,541.

use kedge_core::contract::plan::human_bytes;
use kedge_core::cuda::RunError;
use kedge_core::model::host::HostTensor;
use kedge_core::*;

kedge_core::kernel_source!(
    SRC = "ops/catalog/src/sdpa_prefill/sdpa_prefill.cu",
    "sdpa_prefill.cu"
);

/// The kernel for the case's dtype: f32 entries, or their `_bf16` twins (same template).
fn kern(case: &Case, f32_entry: &'static str) -> Kernel {
    let bf16 = case.dtype == DType::Bf16;
    SRC.entry(match (f32_entry, bf16) {
        ("sdpa_fused_causal", true) => "sdpa_fused_causal_bf16",
        ("sdpa_scores", true) => "sdpa_scores_bf16",
        ("sdpa_softmax_pv", true) => "sdpa_softmax_pv_bf16",
        (e, _) => e,
    })
}

pub(crate) struct SdpaPrefill;
pub(crate) static OP: SdpaPrefill = SdpaPrefill;

/// The M4 Max's Metal maxBufferLength in the incident (41.75 GB).
#[cfg(test)]
pub(crate) const INCIDENT_MAX_BUFFER_BYTES: i64 = 41_750_000_000;
/// The fix's query block (sanctum-rs 5731769).
pub(crate) const INCIDENT_Q_CHUNK: i64 = 2048;
/// The limit scaled down so the transition is computable: 16 heads reach it at L = 512.
pub(crate) const MODELLED_MAX_BUFFER_BYTES: i64 = 16 << 20;
/// Qwen3.6-35B-A3B's attention geometry.
pub(crate) const INCIDENT_N_HEAD: i64 = 16;
pub(crate) const INCIDENT_HEAD_DIM: i64 = 256;
/// MLX's fused causal SDPA support matrix.
pub(crate) const FUSED_HEAD_DIMS: [i64; 3] = [64, 80, 128];

kedge_core::params! {
    /// sdpa_prefill's parameters.
    pub(crate) struct SdpaParams {
        max_buffer_bytes: int(0..=i64::MAX) = 0, "a modelled largest single buffer, so a smaller device's limit can be probed at a size kedge computes (the incident's M4 Max: 41750000000). 0: the device decides (its allocator on the GPU; the profile's largest buffer in `kedge plan`)";
        n_kv_head: int(0..=(1 << 20)) = 0, "KV heads (GQA): k and v are [head_dim, L, n_kv_head]; n_head must be a multiple. 0: n_head (plain multi-head attention)";
        q_chunk: int(1..=(i32::MAX as i64)) = INCIDENT_Q_CHUNK, "query rows per block in the chunked fix (sanctum-rs 5731769 uses 2048)";
    }
}

pub(crate) const REACH_LIMIT: &str = "the incident: Qwen3.6-35B-A3B (head_dim 256, 16 heads) on an M4 Max (Metal maxBufferLength 41.75 GB): L = 25,541 is the last fitting prompt; kedge probes the same transition with the limit scaled to 16 MiB (L* = 512)";

pub(crate) const REACH_HEAD_DIM: &str = "Qwen3.6-35B-A3B has head_dim 256: MLX has no fused causal SDPA for it, so its prefill takes the unfused fallback (64, 80 and 128 have one)";

pub(crate) const REACH_CHUNK_EDGE: &str = "a prompt one token either side of the fix's 2048-row query block: one block, exactly one, or a full block and a 1-row remainder whose causal mask starts at row 2048";

pub(crate) const REACH_GQA: &str = "Qwen3 and Llama 3 attention is GQA (Qwen3.6-35B-A3B: 16 query heads over 2 KV heads): each query head must read its own group's K and V";

pub(crate) const REACH_CHUNK: &str = "the fix's own ceiling: 16 heads, q_chunk 2048 and 41.75 GB make the [16, 2048, L] block stop fitting past L = 318,527, above Qwen3.6's 262,144-token context, so no served prompt reaches it; here the limit is scaled to 16 MiB with q_chunk 256 (L = 1024)";

const FUSED_THREADS: u64 = 128;
const UNFUSED_THREADS: u64 = 256;
/// The scores kernel keeps the query row in shared memory (D floats).
const MAX_UNFUSED_HEAD_DIM: i64 = 48 * 1024 / 4;
/// More query blocks than this is more launches than one case should issue one after the
/// other (two per block): the chunked fix refuses and asks for a larger q_chunk.
pub(crate) const MAX_CHUNKS: u64 = 1 << 16;

fn bad(msg: String) -> CaseError {
    CaseError::BadInput {
        op: "sdpa_prefill".into(),
        msg,
    }
}

/// (head_dim, L, n_head) of a case.
pub(crate) fn geometry(case: &Case) -> (i64, i64, i64) {
    (case.ne[0], case.ne[1], case.ne[2])
}

/// The modelled buffer limit, if the case sets one.
fn max_buffer_bytes(case: &Case) -> Option<u64> {
    let m = SdpaParams::of(case).max_buffer_bytes;
    (m > 0).then_some(m as u64)
}

/// KV heads: the `n_kv_head` parameter, or n_head.
pub(crate) fn n_kv_head(case: &Case) -> i64 {
    match SdpaParams::of(case).n_kv_head {
        0 => case.ne[2],
        n => n,
    }
}

/// Query heads per KV head.
fn group(case: &Case) -> i32 {
    (case.ne[2] / n_kv_head(case).max(1)).clamp(1, i32::MAX as i64) as i32
}

/// Bytes of an f32 score block [n_head, rows, L]; `None` when it does not fit in 64 bits.
pub(crate) fn score_bytes(n_head: i64, rows: i64, l: i64) -> Option<u64> {
    (n_head as u64)
        .checked_mul(rows as u64)?
        .checked_mul(l as u64)?
        .checked_mul(4)
}

/// The unfused path's buffer: [n_head, L, L] f32 (the incident's 16 · L² · 4 bytes).
pub(crate) fn unfused_scratch_bytes(case: &Case) -> Option<u64> {
    let (_, l, h) = geometry(case);
    score_bytes(h, l, l)
}

/// Does the unfused path's score buffer fit the case's modelled `max_buffer_bytes` (always,
/// when the case models none: then the device decides)?
pub(crate) fn unfused_fits(case: &Case) -> bool {
    unfused_scratch_bytes(case).is_some_and(|b| max_buffer_bytes(case).is_none_or(|m| b <= m))
}

/// The longest prompt whose [n_head, L, L] f32 score buffer fits `max_buffer_bytes`:
/// the largest L with n_head · L² · 4 <= max_buffer_bytes.
pub(crate) fn last_fitting_len(max_buffer_bytes: u64, n_head: u64) -> u64 {
    (max_buffer_bytes / (4 * n_head)).isqrt()
}

/// The chunked fix's query block: q_chunk rows (at most L), fewer when even that block would
/// pass `max_buffer_bytes` (so the fix cannot re-create the bug at a longer L). `None` when
/// not one query row's scores fit.
pub(crate) fn chunk_rows(case: &Case) -> Option<i64> {
    let (_, l, h) = geometry(case);
    let per_row = score_bytes(h, 1, l)?;
    let fit =
        max_buffer_bytes(case).map_or(i64::MAX, |m| (m / per_row).min(i64::MAX as u64) as i64);
    let rows = SdpaParams::of(case).q_chunk.min(l).min(fit);
    (rows >= 1).then_some(rows)
}

/// The chunked fix's buffer: [n_head, rows, L] f32, linear in L.
pub(crate) fn chunked_scratch_bytes(case: &Case) -> Option<u64> {
    let (_, l, h) = geometry(case);
    score_bytes(h, chunk_rows(case)?, l)
}

/// The query blocks of L rows, as a formula: `count` blocks of `rows` rows, block `i` starting
/// at row `i · rows`; the last holds what is left (`last_rows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueryBlocks {
    pub(crate) l: i64,
    pub(crate) rows: i64,
    pub(crate) count: u64,
}

impl QueryBlocks {
    /// L rows in blocks of `rows` (rows >= 1).
    pub(crate) fn new(l: i64, rows: i64) -> QueryBlocks {
        let rows = rows.max(1);
        QueryBlocks {
            l,
            rows,
            count: (l.max(0) as u64).div_ceil(rows as u64),
        }
    }
    /// Block `i` as (first row, rows); `None` past the last.
    #[cfg(test)]
    pub(crate) fn block(&self, i: u64) -> Option<(i64, i64)> {
        (i < self.count).then(|| {
            let row0 = i as i64 * self.rows;
            (row0, self.rows.min(self.l - row0))
        })
    }
    /// Rows of the last block.
    #[cfg(test)]
    pub(crate) fn last_rows(&self) -> i64 {
        self.count
            .checked_sub(1)
            .and_then(|i| self.block(i))
            .map_or(0, |b| b.1)
    }
}

/// The query blocks of the chunked fix; `None` when not one query row's scores fit.
pub(crate) fn chunks(case: &Case) -> Option<QueryBlocks> {
    Some(QueryBlocks::new(geometry(case).1, chunk_rows(case)?))
}

fn scale(case: &Case) -> f32 {
    (1.0 / (case.ne[0] as f64).sqrt()) as f32
}

impl Op for SdpaPrefill {
    fn name(&self) -> &'static str {
        "sdpa_prefill"
    }
    fn about(&self) -> &'static str {
        "causal prefill attention softmax(q k^T / sqrt(d)) v per head (MLX scaled_dot_product_attention, causal)"
    }
    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32, DType::Bf16]
    }
    fn params(&self) -> &'static [ParamSpec] {
        SdpaParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![
            &FUSED,
            &UNFUSED_FALLBACK,
            &UNFUSED_CHECKED,
            &CHUNKED,
            &MLX_DISPATCH,
        ]
    }
    /// q [head_dim, L, n_head, 1], k and v [head_dim, L, n_kv_head, 1], then out like q.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        if case.ne[3] != 1 {
            return Err(bad(format!(
                "ne = [head_dim, L, n_head, 1]: ne[3] is {}, must be 1",
                case.ne[3]
            )));
        }
        let kv = n_kv_head(case);
        if kv < 1 || case.ne[2] % kv != 0 {
            return Err(bad(format!(
                "n_kv_head {kv} must divide n_head {} (GQA groups whole query heads)",
                case.ne[2]
            )));
        }
        let kv_ne = [case.ne[0], case.ne[1], kv, 1];
        Ok(vec![
            TensorSpec::dense("q", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("k", Role::Input, case.dtype, kv_ne)?,
            TensorSpec::dense("v", Role::Input, case.dtype, kv_ne)?,
            TensorSpec::dense("out", Role::Output, case.dtype, case.ne)?,
        ])
    }
    /// Multiply-adds of the reference: two D-term dot products per (head, row, key <= row).
    fn reference_work(&self, case: &Case) -> u64 {
        let (d, l, h) = geometry(case);
        let (d, l, h) = (d.max(0) as u64, l.max(0) as u64, h.max(0) as u64);
        (l.saturating_mul(l + 1) / 2)
            .saturating_mul(h)
            .saturating_mul(2 * d)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let [q, k, v] = inputs else {
            return Err(bad(format!(
                "expected 3 inputs (q, k, v), got {}",
                inputs.len()
            )));
        };
        let kv_ne = [case.ne[0], case.ne[1], n_kv_head(case), 1];
        for (name, t, want) in [("q", q, case.ne), ("k", k, kv_ne), ("v", v, kv_ne)] {
            if t.ne != want {
                return Err(bad(format!("{name} has ne {:?}; expected {want:?}", t.ne)));
            }
        }
        let (d, l, h) = geometry(case);
        Ok(vec![causal_attention(
            &q.to_f64(),
            &k.to_f64(),
            &v.to_f64(),
            d as usize,
            l as usize,
            h as usize,
            group(case) as usize,
        )])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let l_star =
            last_fitting_len(MODELLED_MAX_BUFFER_BYTES as u64, INCIDENT_N_HEAD as u64) as i64;
        // The profile's own largest buffer: on the incident's M4 Max (41.75 GB) L* = 25,541;
        // on the H200 (150 GB, no cap below the device's memory) L* = 48,430.
        let l_profile =
            last_fitting_len(limits.max_alloc_bytes.value, INCIDENT_N_HEAD as u64) as i64;
        vec![
            Boundary::ne(
                format!(
                    "L where the [16, L, L] f32 scores pass the profile's largest buffer ({})",
                    human_bytes(limits.max_alloc_bytes.value)
                ),
                1,
                l_profile,
                [INCIDENT_HEAD_DIM, 0, INCIDENT_N_HEAD, 1],
                Reach(REACH_LIMIT),
            )
            .with_values(vec![l_profile, l_profile + 1])
            // The fix and the fused kernel have no such buffer (and their f64 references at
            // this L would take hours on a CPU).
            .only(&["unfused-fallback", "unfused-checked", "mlx-dispatch"]),
            Boundary::ne(
                "L across the fix's query block (q_chunk 2048)",
                1,
                INCIDENT_Q_CHUNK,
                [64, 0, 2, 1],
                Reach(REACH_CHUNK_EDGE),
            )
            .with_params(|p: &mut SdpaParams| p.q_chunk = INCIDENT_Q_CHUNK),
            // bf16 in and out (scores still f32): the fused head dims and the fallback's 256.
            Boundary {
                dtype: Some(DType::Bf16),
                ..Boundary::ne(
                    "bf16 q, k, v and out at the fused kernel's head dims and the fallback's 256",
                    0,
                    128,
                    [0, 33, 4, 1],
                    Reach(REACH_HEAD_DIM),
                )
                .with_values(vec![64, 128, 256])
            },
            Boundary::param(
                "n_head / n_kv_head (GQA groups of 8, 4, 2, 1 query heads per KV head)",
                kedge_core::param_name!(SdpaParams, n_kv_head),
                2,
                [128, 33, 8, 1],
                Reach(REACH_GQA),
            )
            .with_values(vec![1, 2, 4, 8]),
            Boundary::ne(
                "L where the [n_head, L, L] f32 score buffer passes max_buffer_bytes (16 MiB, modelled)",
                1,
                l_star,
                [INCIDENT_HEAD_DIM, 0, INCIDENT_N_HEAD, 1],
                Reach(REACH_LIMIT),
            )
            .with_params(|p: &mut SdpaParams| p.max_buffer_bytes = MODELLED_MAX_BUFFER_BYTES),
            Boundary::ne(
                "head_dim at the fused kernel's support matrix {64, 80, 128}",
                0,
                128,
                [0, 33, 4, 1],
                Reach(REACH_HEAD_DIM),
            )
            .with_values(vec![64, 80, 96, 128, 256]),
            Boundary::ne(
                "L where the chunked fix's q_chunk block stops fitting and shrinks",
                1,
                MODELLED_MAX_BUFFER_BYTES / (INCIDENT_N_HEAD * 256 * 4),
                [64, 0, INCIDENT_N_HEAD, 1],
                Reach(REACH_CHUNK),
            )
            .with_params(|p: &mut SdpaParams| {
                p.max_buffer_bytes = MODELLED_MAX_BUFFER_BYTES;
                p.q_chunk = 256;
            })
            .only(&["chunked"]),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let chunk = |c: i64| crate::params_with(|p: &mut SdpaParams| p.q_chunk = c);
        vec![
            ([64, 7, 2, 1], Params::new()),
            ([64, 1, 1, 1], Params::new()),
            ([80, 19, 3, 1], Params::new()),
            ([128, 33, 4, 1], Params::new()),
            ([128, 300, 2, 1], Params::new()),
            ([96, 5, 2, 1], Params::new()),
            ([256, 17, 16, 1], Params::new()),
            // Several query blocks: an uneven last block and an even split.
            ([128, 100, 2, 1], chunk(16)),
            ([64, 64, 2, 1], chunk(32)),
        ]
    }
    /// MLX's SDPA has no test in ggml's test-backend-ops.
    fn upstream(&self, _case: &Case) -> Option<UpstreamRepro> {
        None
    }
    fn alloc_note(&self, case: &Case) -> Option<String> {
        (case.imp == "mlx-dispatch" && !takes_fused(case)).then(|| fallback_note(case))
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if !unfused_fits(case) {
            Some(REACH_LIMIT.into())
        } else if !FUSED_HEAD_DIMS.contains(&case.ne[0]) {
            Some(REACH_HEAD_DIM.into())
        } else {
            None
        }
    }
}

/// f64 causal attention: q, k, v in logical order (element (d, i, h) at (h·L + i)·D + d).
///
/// The op keeps the default f32 tolerance (NMSE 1e-7). The kernels compute each score with a
/// D-term f32 dot product (relative error ~D·eps at worst), subtract the row max before expf
/// (every exponent <= 0, so nothing overflows and the largest weight is exactly 1), and form
/// each output as a ratio of two f32 sums of at most L non-negative terms: the error bound
/// grows like (D + L)·eps ≈ 770 · 6e-8 ≈ 5e-5 relative at the largest probed shape (D = 256,
/// L = 513), and random rounding makes the typical error far smaller, so the NMSE is expected
/// near 1e-10, three orders under the threshold. A wrong mask is not hidden by it: dropping
/// one key from every row moves each output by ~|v|/L while the output itself, an average of
/// L random values, is only ~|v|/sqrt(L), so the NMSE is ~1/L (2e-3 at L = 513).
///
/// `group` query heads share one k/v head (GQA; 1 for plain multi-head attention): query head
/// `h` reads kv head `h / group`.
pub(crate) fn causal_attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d: usize,
    l: usize,
    h: usize,
    group: usize,
) -> Vec<f64> {
    causal_attention_rows(q, k, v, d, l, h, group, 0, l)
}

/// Query rows [row0, row0 + rows) of every head, as the fix computes them one block at a
/// time (output [h, rows, d]); row i still attends to keys 0..=i.
#[allow(clippy::too_many_arguments)]
pub(crate) fn causal_attention_rows(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d: usize,
    l: usize,
    h: usize,
    group: usize,
    row0: usize,
    rows: usize,
) -> Vec<f64> {
    use rayon::prelude::*;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0f64; d * rows * h];
    out.par_chunks_mut(d).enumerate().for_each_init(
        || vec![0.0f64; l],
        |w, (r, o)| {
            let (head, i) = (r / rows, row0 + r % rows);
            let qi = &q[head * l * d + i * d..][..d];
            let base = (head / group.max(1)) * l * d;
            let mut m = f64::NEG_INFINITY;
            for (j, s) in w.iter_mut().enumerate().take(i + 1) {
                let kj = &k[base + j * d..][..d];
                *s = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>();
                m = m.max(*s);
            }
            let mut sum = 0.0;
            for p in w.iter_mut().take(i + 1) {
                *p = (*p - m).exp();
                sum += *p;
            }
            o.fill(0.0);
            for (j, p) in w.iter().enumerate().take(i + 1) {
                let vj = &v[base + j * d..][..d];
                for (x, y) in o.iter_mut().zip(vj) {
                    *x += p * y;
                }
            }
            for x in o.iter_mut() {
                *x /= sum;
            }
        },
    );
    out
}

/// Tensor arguments shared by the launches: q, k, v, out.
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const OUT: usize = 3;

/// The flash-style fused kernel, built (like MLX's) for head_dim 64, 80 and 128 only.
pub(crate) static FUSED: KernelImpl = KernelImpl {
    name: "fused",
    role: ImplRole::Fixed,
    about: "flash-style fused causal SDPA: one block per (query row, head), online softmax, no score buffer; head_dim 64, 80, 128 only (MLX's support matrix)",
    plan: fused_plan,
};

fn fused_plan(case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let (d, l, h) = geometry(case);
    if !FUSED_HEAD_DIMS.contains(&d) {
        return Err(format!("fused causal SDPA supports head_dim 64, 80, 128; got {d}").into());
    }
    Ok(Plan::single(
        LaunchPlan::new(
            kern(case, "sdpa_fused_causal"),
            [l as u64, h as u64, 1],
            [FUSED_THREADS, 1, 1],
            0,
        )
        .args(vec![
            KernelArg::Tensor(Q),
            KernelArg::Tensor(K),
            KernelArg::Tensor(V),
            KernelArg::Tensor(OUT),
            KernelArg::I32(d as i32),
            KernelArg::I64(l),
            KernelArg::F32(scale(case)),
            KernelArg::I32(group(case)),
        ]),
    ))
}

/// The two unfused launches of one query block of `rows` rows, repeated `blocks` times: scores
/// into the one [n_head, rows, L] buffer (`scratch_bytes`), then softmax and PV. The block's
/// first query row reaches the kernels as a row pointer into q and out that steps by `rows`
/// rows per repetition; every repetition has the same grid (rows of the last block at or past
/// L return at once).
fn block_plan(case: &Case, rows: i64, blocks: u64, scratch_bytes: u64) -> Plan {
    let (d, l, h) = geometry(case);
    let es = case.dtype.size() as i64;
    let at_block = |index| KernelArg::TensorAt {
        index,
        offset: 0,
        step: [rows.saturating_mul(d).saturating_mul(es), 0, 0],
    };
    let scores = || KernelArg::Scratch {
        name: "scores".into(),
        bytes: scratch_bytes,
    };
    Plan::kernels(vec![
        LaunchPlan::new(
            kern(case, "sdpa_scores"),
            [rows as u64, h as u64, 1],
            [UNFUSED_THREADS, 1, 1],
            d as u64 * 4,
        )
        .args(vec![
            KernelArg::Tensor(Q),
            at_block(Q),
            KernelArg::Tensor(K),
            scores(),
            KernelArg::I32(d as i32),
            KernelArg::I64(l),
            KernelArg::I64(rows),
            KernelArg::F32(scale(case)),
            KernelArg::I32(group(case)),
        ]),
        LaunchPlan::new(
            kern(case, "sdpa_softmax_pv"),
            [rows as u64, h as u64, 1],
            [UNFUSED_THREADS, 1, 1],
            0,
        )
        .args(vec![
            scores(),
            KernelArg::Tensor(V),
            KernelArg::Tensor(OUT),
            at_block(OUT),
            KernelArg::I32(d as i32),
            KernelArg::I64(l),
            KernelArg::I64(rows),
            KernelArg::I32(group(case)),
        ]),
    ])
    .repeated([blocks, 1, 1])
}

fn check_unfused_head_dim(case: &Case) -> Result<(), Refusal> {
    let d = case.ne[0];
    if d > MAX_UNFUSED_HEAD_DIM {
        return Err(format!(
            "head_dim {d} does not fit the scores kernel's shared-memory query row (at most {MAX_UNFUSED_HEAD_DIM})"
        )
        .into());
    }
    Ok(())
}

/// The unfused path's one buffer, for the allocation contract.
fn unfused_buffers(case: &Case) -> Vec<BufferPlan> {
    let (_, l, h) = geometry(case);
    vec![BufferPlan {
        name: format!("scores [{h} heads, L = {l}, L = {l}] f32"),
        bytes: unfused_scratch_bytes(case).unwrap_or(u64::MAX),
    }]
}

/// What the unfused path does when its score buffer passes `max_buffer_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverLimit {
    /// As shipped: nothing is computed and no error reaches the caller.
    Silent,
    /// The allocation failure is reported.
    Loud,
}

/// The unfused fallback: all L query rows in one block, an [n_head, L, L] f32 score buffer.
pub(crate) struct Unfused {
    name: &'static str,
    about: &'static str,
    over_limit: OverLimit,
}

/// What MLX shipped: past the buffer limit, it returns without doing any work and without an
/// error.
pub(crate) static UNFUSED_FALLBACK: Unfused = Unfused {
    name: "unfused-fallback",
    about: "MLX's unfused fallback as shipped: scores [n_head, L, L] f32 in one buffer, then softmax and PV; past max_buffer_bytes it returns with no work done and no error",
    over_limit: OverLimit::Silent,
};

/// The same path with the allocation failure reported: a loud failure instead of a silent one.
pub(crate) static UNFUSED_CHECKED: Unfused = Unfused {
    name: "unfused-checked",
    about: "the unfused fallback with its allocation failure reported (resource-limit): the loud failure the incident should have been",
    over_limit: OverLimit::Loud,
};

impl Impl for Unfused {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        // Both launch what MLX ships; they differ only in how the failed allocation surfaces.
        ImplRole::Upstream
    }
    fn about(&self) -> &str {
        self.about
    }
    /// Past the limit the silent fallback launches nothing, so its plan is empty (and a
    /// `kedge repro` of it launches nothing either); the checked one states the launches it
    /// would issue, refuses in `run` before the first, and says so in `unchecked` (no
    /// standalone file does what it does).
    ///
    /// Either way the plan names the score buffer it asks for: the allocation contract
    /// (`kedge plan` checks it against the profile's largest buffer).
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        check_unfused_head_dim(case)?;
        let buffers = unfused_buffers(case);
        let fits = unfused_fits(case);
        if self.over_limit == OverLimit::Silent && !fits {
            return Ok(Plan::kernels(Vec::new()).with_buffers(buffers));
        }
        let (_, l, _) = geometry(case);
        let bytes = unfused_scratch_bytes(case).unwrap_or(u64::MAX);
        let mut plan = block_plan(case, l, 1, bytes).with_buffers(buffers);
        if !fits {
            plan.unchecked.push(format!(
                "the score buffer ({}) passes max_buffer_bytes {}: the run reports resource-limit before its first launch",
                unfused_scratch_bytes(case).map_or("more than 2^64 bytes".to_string(), human_bytes),
                max_buffer_bytes(case).unwrap_or(0)
            ));
        }
        Ok(plan)
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let (_, l, h) = geometry(case);
        let limit = max_buffer_bytes(case);
        let bytes = unfused_scratch_bytes(case);
        ctx.fact(
            "max_buffer_bytes",
            limit.map_or(
                serde_json::Value::from("the device's (its allocator decides)"),
                serde_json::Value::from,
            ),
        );
        if let Some(b) = bytes {
            ctx.fact("score_buffer_bytes", b);
        }
        if !unfused_fits(case) {
            let what = format!(
                "score buffer [{h}, {l}, {l}] f32 ({}) exceeds max_buffer_bytes {}",
                bytes.map_or("more than 2^64 bytes".to_string(), |b| format!("{b} bytes")),
                limit.unwrap_or(0)
            );
            match self.over_limit {
                // The incident: MLX's unfused fallback asked for a [B, 16, L, L] fp32 buffer
                // (41.94 GB at L = 25,600) past Metal's 41.75 GB maxBufferLength; the
                // allocation failed, the prefill never ran, and no error reached the caller:
                // "The request did not error. The server logged a 200." Returning Ok here with
                // the output untouched is that behaviour; kedge must see it from the output
                // alone (every element still poisoned: silent-failure).
                OverLimit::Silent => return Ok(()),
                OverLimit::Loud => return Err(RunError::OverLimit(what)),
            }
        }
        let Some(bytes) = bytes.filter(|_| plan.launches.len() == 2) else {
            return Err(RunError::Unsupported(format!(
                "the plan has {} launches, the unfused path issues 2",
                plan.launches.len()
            )));
        };
        // No modelled limit: the device's allocator is the limit. The same two outcomes as
        // past a modelled one: the shipped fallback swallows the refusal, the checked one
        // reports it with the bytes it asked for. The plan's launches name the same scratch,
        // so they get this buffer.
        if let Err(e) = ctx.scratch("scores", bytes, 256) {
            let (RunError::Resource(m) | RunError::OverLimit(m)) = &e else {
                return Err(e);
            };
            let what = format!("score buffer [{h}, {l}, {l}] f32 ({bytes} bytes): {m}");
            ctx.fact("allocation_refused", what.clone());
            return match self.over_limit {
                OverLimit::Silent => Ok(()),
                // Refused the same way: the device's memory, or a limit it has alone too.
                OverLimit::Loud if matches!(e, RunError::OverLimit(_)) => {
                    Err(RunError::OverLimit(what))
                }
                OverLimit::Loud => Err(RunError::Resource(what)),
            };
        }
        ctx.run_plan(plan)
    }
}

/// The incident's fix: the query axis in blocks, each with its own causal-mask offset.
pub(crate) struct Chunked;
pub(crate) static CHUNKED: Chunked = Chunked;

impl Impl for Chunked {
    fn name(&self) -> &str {
        "chunked"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Fixed
    }
    fn about(&self) -> &str {
        "the incident's fix (sanctum-rs 5731769): query rows in blocks of q_chunk (fewer if the block would pass max_buffer_bytes), scores [n_head, block, L]: linear in L; same kernels as unfused, so bit-identical"
    }
    /// Two launches repeated once per query block, whatever L is.
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        check_unfused_head_dim(case)?;
        let (_, l, h) = geometry(case);
        let Some(blocks) = chunks(case) else {
            return Err(format!(
                "not even one query row's scores [{h}, 1, {l}] f32 fit max_buffer_bytes {}",
                max_buffer_bytes(case).unwrap_or(0)
            )
            .into());
        };
        if blocks.count > MAX_CHUNKS {
            return Err(format!(
                "{} query blocks (more than {MAX_CHUNKS}): raise q_chunk",
                blocks.count
            )
            .into());
        }
        let bytes = score_bytes(h, blocks.rows, l).unwrap_or(u64::MAX);
        Ok(
            block_plan(case, blocks.rows, blocks.count, bytes).with_buffers(vec![BufferPlan {
                name: format!(
                    "scores [{h} heads, {} query rows, L = {l}] f32, reused per block",
                    blocks.rows
                ),
                bytes,
            }]),
        )
    }
    /// The plan as stated, with the buffer and the block count on the record.
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let (Some(blocks), Some(bytes)) = (chunks(case), chunked_scratch_bytes(case)) else {
            return Err(RunError::Unsupported(
                "no query block fits max_buffer_bytes".into(),
            ));
        };
        if plan.repetitions() != blocks.count {
            return Err(RunError::Unsupported(format!(
                "the plan repeats its launches {} times for {} query blocks",
                plan.repetitions(),
                blocks.count
            )));
        }
        ctx.fact("score_buffer_bytes", bytes);
        ctx.fact("query_blocks", blocks.count);
        ctx.run_plan(plan)
    }
}

/// MLX's dispatch as the incident met it: the fused kernel where one exists (head_dim 64, 80,
/// 128), otherwise the unfused fallback as shipped (silent past the buffer limit). The record
/// says which path ran (the `path` fact, and the report's case note).
pub(crate) struct MlxDispatch;
pub(crate) static MLX_DISPATCH: MlxDispatch = MlxDispatch;

fn takes_fused(case: &Case) -> bool {
    FUSED_HEAD_DIMS.contains(&case.ne[0])
}

/// The impl MLX's dispatch picks for the case.
fn dispatched(case: &Case) -> &'static dyn Impl {
    if takes_fused(case) {
        &FUSED
    } else {
        &UNFUSED_FALLBACK
    }
}

/// The note the report prints for a dispatch that took the fallback.
pub(crate) fn fallback_note(case: &Case) -> String {
    format!(
        "mlx-dispatch at head_dim {}: no fused causal SDPA for it (MLX builds 64, 80, 128), so the unfused fallback ran, materializing a score buffer quadratic in L",
        case.ne[0]
    )
}

impl Impl for MlxDispatch {
    fn name(&self) -> &str {
        "mlx-dispatch"
    }
    fn role(&self) -> ImplRole {
        // What shipped: it contains the silent fallback.
        ImplRole::Upstream
    }
    fn about(&self) -> &str {
        "MLX's causal SDPA dispatch: fused for head_dim 64, 80, 128, the unfused fallback (silent past the buffer limit) for every other head_dim"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
        dispatched(case).plan(case, limits)
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let path = if takes_fused(case) {
            "fused".to_string()
        } else {
            fallback_note(case)
        };
        ctx.fact("path", path);
        dispatched(case).run(ctx, case, plan)
    }
}

#[cfg(test)]
mod tests;
