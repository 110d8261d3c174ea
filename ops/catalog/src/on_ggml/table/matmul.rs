//! Matrix products: MUL_MAT and MUL_MAT_ID. Their dimensions are not free (the kernel is chosen
//! by n, the type and the shape), so they have no generated probes; their boundaries are the
//! dispatch switches and the predicted failures.
//!
//! The weight's type is the case's dtype: a float type or any of ggml's block formats, made
//! by the build under test from kedge's f32 values (`ggml_quantize_chunk`, as test-backend-ops
//! makes its weights); the line printed is test-backend-ops' for that weight type.

use super::*;
use kedge_core::OpParams;

/// Every weight type test-backend-ops runs MUL_MAT and MUL_MAT_ID over (its `all_types`).
pub(crate) const WEIGHT_TYPES: &[DType] = &WEIGHT_TYPE_LIST;

/// `WEIGHT_TYPES` as an array, for the lists made from it at compile time.
pub(crate) const WEIGHT_TYPE_LIST: [DType; 27] = [
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q1_0,
    DType::Q2_0,
    DType::Mxfp4,
    DType::Nvfp4,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Tq2_0,
    DType::Iq2Xxs,
    DType::Iq2Xs,
    DType::Iq2S,
    DType::Iq3Xxs,
    DType::Iq1S,
    DType::Iq1M,
    DType::Iq4Nl,
    DType::Iq3S,
    DType::Iq4Xs,
];

/// k around whole blocks of each weight type, for the mat-vec kernels (n = 1) and the matrix
/// ones (n = 9: past MMVQ's 8): a quantized row's tail is where a vectorized read past it hides.
fn k_block_bounds(what: &'static str) -> Vec<Boundary> {
    let mut out = Vec::new();
    for &d in WEIGHT_TYPES {
        let b = d.block() as i64;
        let ks: Vec<i64> = if d.is_block() {
            [1, 2, 3, 7, 8, 9, 31, 32, 33]
                .iter()
                .map(|m| m * b)
                .collect()
        } else {
            vec![1, 2, 3, 7, 8, 9, 31, 32, 33, 255, 256, 257]
        };
        for n in [1, 9] {
            out.push(
                Boundary::ne(
                    format!("{d}: k around whole blocks, n = {n} ({what})"),
                    0,
                    ks[ks.len() - 1],
                    [0, 64, n, 1],
                    Reach(REACH_DECODE),
                )
                .with_values(ks.clone())
                .dtype(d),
            );
        }
    }
    out
}

/// The weight spec: the case's dtype, whole blocks along k.
fn weight(c: &Case, ne: Ne) -> Result<TensorSpec, CaseError> {
    input("a", c.dtype, ne)
}

fn gemm_shape(c: &Case) -> Result<(i64, i64, i64), CaseError> {
    if c.ne[3] != 1 {
        return Err(bad(c, format!("ne = [k, m, n, 1]: ne[3] is {}", c.ne[3])));
    }
    Ok((c.ne[0], c.ne[1], c.ne[2]))
}

const REACH_DECODE: &str = "decode (n = 1) and small batches (speculative drafts, parallel sequences) take the mat-vec kernels; prefill ubatches the matrix ones";

// ---- MUL_MAT ---------------------------------------------------------------------------------

kedge_core::params! {
    /// test_mul_mat's batching.
    pub(crate) struct MulMatParams {
        bs0: int(1..=1 << 20) = 1, "weight batches in dim 2";
        bs1: int(1..=1 << 20) = 1, "weight batches in dim 3";
        nr0: int(1..=1 << 20) = 1, "b's dim-2 batches per weight batch (broadcast)";
        nr1: int(1..=1 << 20) = 1, "b's dim-3 batches per weight batch (broadcast)";
    }
}

fn mul_mat_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = MulMatParams::of(c);
    let (k, m, n) = gemm_shape(c)?;
    let (b2, b3) = (p.bs0 * p.nr0, p.bs1 * p.nr1);
    Ok(vec![
        weight(c, [k, m, p.bs0, p.bs1])?,
        input("b", DType::F32, [k, n, b2, b3])?,
        output("dst", DType::F32, [m, n, b2, b3])?,
    ])
}

/// A MUL_MAT boundary on `[k, m, n, 1]` with a weight type.
fn mm(label: &str, dim: usize, values: &[i64], base: Ne, reach: &'static str) -> Boundary {
    Boundary::ne(label, dim, values[values.len() - 1], base, Reach(reach))
        .with_values(values.to_vec())
}

fn mul_mat_bounds(_: &LimitsProfile) -> Vec<Boundary> {
    let q4 = |b: Boundary| b.dtype(DType::Q4_0);
    let mut v = vec![
        // Dispatch (ggml-cuda.cu:1815-1869): MMVF for f32 with n <= 3 and f16/bf16 with n = 1,
        // MMF up to n = 16, MMVQ for quantized weights up to n = 8, then MMQ.
        mm("f32: n across 3 (MMVF -> MMF/cuBLAS)", 2, &[3, 4], [256, 64, 0, 1], REACH_DECODE)
            .dtype(DType::F32),
        mm("f16: n across 1 (MMVF -> MMF)", 2, &[1, 2], [256, 64, 0, 1], REACH_DECODE)
            .dtype(DType::F16),
        mm("f16: n across 16 (MMF -> cuBLAS)", 2, &[16, 17], [256, 64, 0, 1], REACH_DECODE)
            .dtype(DType::F16),
        q4(mm("q4_0: n across 8 (MMVQ -> MMQ)", 2, &[8, 9], [256, 64, 0, 1], REACH_DECODE)),
        // C1: mmvf.cu:47 computes row*stride_row in int: an f16 weight of 2^31 elements read
        // by one token. n = 4 takes MMF on the same weight (half2 units): the control.
        mm(
            "C1: f16 weight rows across 2^31 / k elements (MMVF int row offset)",
            1,
            &[524_288, 524_544],
            [4096, 0, 1, 1],
            "decode against a non-quantized weight of 2^31 elements, e.g. a 262144-vocab x 8192 BF16 lm_head",
        )
        .dtype(DType::F16),
        mm(
            "C1 control: n = 1 (MMVF) vs n = 4 (MMF) on a 2^31-element f16 weight",
            2,
            &[1, 4],
            [4096, 524_544, 0, 1],
            "decode (n = 1) against a 2^31-element f16 weight",
        )
        .dtype(DType::F16),
        // C4: mmf.cuh:113, the row offset in half2 units overflows at 2^32 halves.
        mm(
            "C4: f16 weight rows across 2^32 / k halves (MMF int row offset)",
            1,
            &[1_048_576, 1_048_832],
            [4096, 0, 4, 1],
            "a 4-token batch against an f16 weight of 2^32 elements",
        )
        .dtype(DType::F16),
        // C2: mmq.cuh:998 `int offset_dst = ... + jt*J*stride_col_dst`: a destination of 2^31
        // floats; tiles of 128 columns start at 32768 from n = 32769 on.
        q4(mm(
            "C2: q4_0 destination across 2^31 elements (MMQ int tile offset)",
            2,
            &[32_768, 33_024],
            [256, 65536, 0, 1],
            "all-logits output (perplexity, imatrix): vocab 152k with a ubatch of 14.2k tokens and more",
        )),
        // B14: mmvf.cu:450, grid (nrows, nchannels_dst, nsamples): channels on grid.y.
        Boundary::param(
            "B14: f32 mat-vec (MMVF) with bs0 across 65535 channels on grid.y",
            kedge_core::param_name!(MulMatParams, bs0),
            65536,
            [32, 16, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![65535, 65536])
        .dtype(DType::F32),
        // B12/B13: quantize.cu:568/584 put b's ne2*ne3 on grid.z before MMVQ and MMQ.
        q4(Boundary::param(
            "B12: q4_0 mat-vec (MMVQ), b broadcast nr0 across 65535 (quantize grid.z)",
            kedge_core::param_name!(MulMatParams, nr0),
            65536,
            [256, 16, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![65535, 65536])),
        q4(Boundary::param(
            "B13: q4_0 matrix (MMQ, n = 9), b broadcast nr0 across 65535 (quantize grid.z)",
            kedge_core::param_name!(MulMatParams, nr0),
            65536,
            [256, 16, 9, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![65535, 65536])),
    ];
    v.extend(k_block_bounds("MMVQ/MMQ/MMVF"));
    v
}

pub(crate) const MUL_MAT: GgmlOpEntry = GgmlOpEntry {
    name: "mul_mat",
    upstream: "MUL_MAT",
    about: "dst = a^T b per batch: ne = [k, m, n, 1] with weight a [k, m, bs0, bs1] in the case's dtype (any of ggml's block formats: quantized by the build under test from kedge's f32 values, as test-backend-ops makes its weights) and f32 b [k, n, bs0*nr0, bs1*nr1] (test_mul_mat's m, n, k, bs, nr)",
    dtypes: WEIGHT_TYPES,
    params: MulMatParams::SPECS,
    tensors: mul_mat_tensors,
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.mul_mat(x[0], x[1])?]),
    probe: || None,
    smoke: &[
        s([32, 32, 32, 1]),
        sp!([32, 32, 32, 1], |p: &mut MulMatParams| { p.bs0 = 10; p.bs1 = 10; p.nr0 = 2; p.nr1 = 2; }),
        s([256, 64, 1, 1]),
        s([256, 16, 3, 1]),
        sp!([256, 16, 9, 1], |p: &mut MulMatParams| p.nr0 = 3),
    ],
    boundaries: mul_mat_bounds,
    upstream_line: |c| {
        let p = MulMatParams::of(c);
        let (ta, va) = (c.dtype.ggml_type(), c.dtype);
        let [k, m, n, _] = c.ne;
        repro(
            "MUL_MAT",
            format!(
                "test_mul_mat({ta}, GGML_TYPE_F32, {m}, {n}, {k}, {{{}, {}}}, {{{}, {}}})",
                p.bs0, p.bs1, p.nr0, p.nr1
            ),
            format!(
                "type_a={va},type_b=f32,m={m},n={n},k={k},bs=[{},{}],nr=[{},{}],per=[0,1,2,3],k_v=0,o=1,src_overlap=0",
                p.bs0, p.bs1, p.nr0, p.nr1
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- MUL_MAT_HADAMARD ------------------------------------------------------------------------

/// A square f32 weight whose row `r` (counted over every batch, as `ggml_nrows` counts) has
/// `±1/sqrt(k)` by the parity of `popcount(r & i)`: test_mul_mat_hadamard's Hadamard matrix
/// (the same in every batch when k is a power of two).
fn hadamard(s: &TensorSpec) -> HostTensor {
    let k = s.ne[0] as usize;
    let rows = (s.nelements() as usize) / k.max(1);
    let scale = 1.0 / (k as f32).sqrt();
    let mut v = Vec::with_capacity(k * rows);
    for r in 0..rows {
        for i in 0..k {
            v.push(if (r & i).count_ones() % 2 == 0 {
                scale
            } else {
                -scale
            });
        }
    }
    span_tensor(s, &v)
}

pub(crate) const MUL_MAT_HADAMARD: GgmlOpEntry = GgmlOpEntry {
    name: "mul_mat_hadamard",
    upstream: "MUL_MAT_HADAMARD",
    about: "a matrix product whose square f32 weight is a normalized Hadamard matrix and says so (ggml_mul_mat_set_hint): CUDA runs a fast Walsh-Hadamard transform of b for k of 64 to 512 (fwht.cu), the plain product otherwise; ne = [k, k, n, 1] as test_mul_mat_hadamard's m = k, n",
    dtypes: &[DType::F32],
    params: MulMatParams::SPECS,
    tensors: |c| {
        if c.ne[0] != c.ne[1] {
            return Err(bad(
                c,
                format!("a Hadamard matrix is square: k = {} and m = {} differ", c.ne[0], c.ne[1]),
            ));
        }
        mul_mat_tensors(c)
    },
    inputs: Inputs::Made(|c, s| Ok(vec![hadamard(&s[0]), default_input(c, s, 1)])),
    graph: |g, _c, x| {
        let out = g.mul_mat(x[0], x[1])?;
        g.hint_hadamard(out)?;
        Ok(vec![out])
    },
    probe: || None,
    smoke: &[
        s([128, 128, 1, 1]),
        s([64, 64, 1, 1]),
        s([512, 512, 1, 1]),
        s([128, 128, 32, 1]),
        sp!([128, 128, 4, 1], |p: &mut MulMatParams| { p.bs0 = 2; p.bs1 = 3; }),
        s([256, 256, 512, 1]),
        // fwht.cu:85: the transform for k = 64, 128, 256, 512; other sizes take the plain
        // product (k moves two dimensions at once: its sides are smoke cases).
        s([32, 32, 1, 1]),
        s([1024, 1024, 1, 1]),
    ],
    boundaries: |_| {
        vec![
            // One row of b per 4 threads' row on grid.x, int64 offsets: a control at 2^31
            // elements of b.
            Boundary::ne(
                "b's elements across 2^31 (the transform's rows)",
                2,
                1 << 24,
                [128, 128, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![(1 << 24) - 1, 1 << 24, (1 << 24) + 1]),
        ]
    },
    upstream_line: |c| {
        let p = MulMatParams::of(c);
        let [k, m, n, _] = c.ne;
        repro(
            "MUL_MAT_HADAMARD",
            format!(
                "test_mul_mat_hadamard(GGML_TYPE_F32, GGML_TYPE_F32, {m}, {n}, {k}, {{{}, {}}}, {{{}, {}}})",
                p.bs0, p.bs1, p.nr0, p.nr1
            ),
            format!(
                "type_a=f32,type_b=f32,m={m},n={n},k={k},bs=[{},{}],nr=[{},{}],per=[0,1,2,3],k_v=0,o=1,src_overlap=0",
                p.bs0, p.bs1, p.nr0, p.nr1
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- MUL_MAT_ID ------------------------------------------------------------------------------

kedge_core::params! {
    /// test_mul_mat_id's experts.
    pub(crate) struct MulMatIdParams {
        n_mats: int(1..=1 << 16) = 8, "experts";
        n_used: int(0..=1 << 16) = 2, "experts per token (0: all)";
        b: bool = false, "one b row per token, broadcast over its experts";
    }
}

fn n_used(c: &Case) -> i64 {
    let p = MulMatIdParams::of(c);
    if p.n_used == 0 {
        p.n_mats
    } else {
        p.n_used
    }
}

fn mul_mat_id_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = MulMatIdParams::of(c);
    let (k, m, n) = gemm_shape(c)?;
    let used = n_used(c);
    if used > p.n_mats {
        return Err(bad(c, format!("n_used {used} > n_mats {}", p.n_mats)));
    }
    let ids = if used == p.n_mats {
        input("ids", DType::I32, [used, n, 1, 1])?
    } else {
        view_input("ids", DType::I32, [used, n, 1, 1], [p.n_mats, n, 1, 1])?
    };
    Ok(vec![
        weight(c, [k, m, p.n_mats, 1])?,
        ids,
        input("b", DType::F32, [k, if p.b { 1 } else { used }, n, 1])?,
        output("dst", DType::F32, [m, used, n, 1])?,
    ])
}

pub(crate) const MUL_MAT_ID: GgmlOpEntry = GgmlOpEntry {
    name: "mul_mat_id",
    upstream: "MUL_MAT_ID",
    about: "a mixture of experts' matrix products: ne = [k, m, n, 1] with n tokens, experts [k, m, n_mats] in the case's dtype (any block format, made as for mul_mat), per-token distinct expert ids (the first n_used of a shuffled 0..n_mats, as test-backend-ops draws them) and f32 b [k, n_used or 1, n]",
    dtypes: WEIGHT_TYPES,
    params: MulMatIdParams::SPECS,
    tensors: mul_mat_id_tensors,
    inputs: Inputs::Made(|c, s| {
        let n_mats = MulMatIdParams::of(c).n_mats as usize;
        let span = (s[1].bytes / 4) as usize;
        let mut rng = Rng::stream(c.seed, 1);
        let mut ids = Vec::with_capacity(span + n_mats);
        while ids.len() < span {
            ids.extend(permutation(&mut rng, n_mats).into_iter().map(|x| x as i32));
        }
        ids.truncate(span);
        Ok(vec![
            default_input(c, s, 0),
            span_i32(&s[1], &ids),
            default_input(c, s, 2),
        ])
    }),
    graph: |g, _c, x| Ok(vec![g.mul_mat_id(x[0], x[2], x[1])?]),
    probe: || None,
    smoke: &[
        s([32, 32, 32, 1]),
        sp!([32, 32, 32, 1], |p: &mut MulMatIdParams| p.b = true),
        sp!([64, 16, 3, 1], |p: &mut MulMatIdParams| { p.n_mats = 4; p.n_used = 0; }),
        sp!([256, 16, 5, 1], |p: &mut MulMatIdParams| p.n_used = 4),
    ],
    boundaries: |_| {
        vec![
            // MUL_MAT_ID dispatch: MMVQ for quantized experts up to 8 tokens, MMQ after.
            Boundary::ne(
                "q4_0: tokens across 8 (MMVQ -> MMQ)",
                2,
                9,
                [256, 64, 0, 1],
                Reach(REACH_DECODE),
            )
            .with_values(vec![8, 9])
            .dtype(DType::Q4_0),
            // MMF takes float experts while tokens <= 512 (m <= 1024) or <= 128 (m > 1024).
            Boundary::ne(
                "f16, m = 1024: tokens across 512 (MMF -> the fallback)",
                2,
                513,
                [256, 1024, 0, 1],
                Reach(REACH_DECODE),
            )
            .with_values(vec![512, 513])
            .dtype(DType::F16),
            // C3: mmf.cuh:113/365, the expert offset channel_x*stride_channel_x in half2 units
            // passes 2^31 with 257 experts of 4096 x 4096.
            Boundary::param(
                "C3: f16 experts across 2^32 halves (MMF int expert offset)",
                kedge_core::param_name!(MulMatIdParams, n_mats),
                257,
                [4096, 4096, 4, 1],
                Reach("MoE with f16/bf16 expert tensors of 2^32 elements (Kimi-K2-size bf16 experts)"),
            )
            .with_values(vec![256, 257])
            .with_params(|p: &mut MulMatIdParams| p.n_used = 0)
            .dtype(DType::F16),
        ]
    },
    upstream_line: |c| {
        let p = MulMatIdParams::of(c);
        let (ta, va) = (c.dtype.ggml_type(), c.dtype);
        let [k, m, n, _] = c.ne;
        let used = n_used(c);
        repro(
            "MUL_MAT_ID",
            format!(
                "test_mul_mat_id({ta}, GGML_TYPE_F32, {}, {used}, {}, {m}, {n}, {k})",
                p.n_mats, p.b
            ),
            format!(
                "type_a={va},type_b=f32,n_mats={},n_used={used},b={},m={m},n={n},k={k}",
                p.n_mats,
                b01(p.b)
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- OUT_PROD --------------------------------------------------------------------------------

kedge_core::params! {
    /// test_out_prod's batching and b's layout.
    pub(crate) struct OutProdParams {
        bs0: int(1..=1 << 20) = 1, "a's batches in dim 2";
        bs1: int(1..=1 << 20) = 1, "a's batches in dim 3";
        nr0: int(1..=1 << 20) = 1, "b's dim-2 batches per batch of a (broadcast)";
        nr1: int(1..=1 << 20) = 1, "b's dim-3 batches per batch of a (broadcast)";
        trans_b: bool = false, "b made [k, n] and transposed (a strided view), not [n, k]";
    }
}

pub(crate) const OUT_PROD: GgmlOpEntry = GgmlOpEntry {
    name: "out_prod",
    upstream: "OUT_PROD",
    about: "dst[i, j] = sum over k of a[i, k] b[j, k], per batch: ne = [m, n, k, 1] with a [m, k, bs0, bs1] and b [n, k, bs0*nr0, bs1*nr1] (trans_b: [k, n, ...] transposed), a in the case's dtype (test-backend-ops' base types: ggml's CUDA backend computes f32 only, its CPU backend every one), b f32 (test_out_prod's m, n, k, bs, nr, trans_b)",
    dtypes: &[
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q1_0,
        DType::Q2_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q4K,
        DType::Mxfp4,
        DType::Nvfp4,
        DType::Iq2Xxs,
    ],
    params: OutProdParams::SPECS,
    tensors: |c| {
        let p = OutProdParams::of(c);
        let (m, n, k) = gemm_shape(c)?;
        let (b2, b3) = (p.bs0 * p.nr0, p.bs1 * p.nr1);
        // ggml's CPU backend, the reference, broadcasts b over a only for an f32 a.
        if c.dtype != DType::F32 && (p.nr0, p.nr1) != (1, 1) {
            return Err(bad(
                c,
                format!("a {} a takes no broadcast (nr = [{}, {}]): ggml's CPU backend computes it only without", c.dtype, p.nr0, p.nr1),
            ));
        }
        let b = if p.trans_b { [k, n, b2, b3] } else { [n, k, b2, b3] };
        Ok(vec![
            input("a", c.dtype, [m, k, p.bs0, p.bs1])?,
            input("b", DType::F32, b)?,
            output("dst", DType::F32, [m, n, b2, b3])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let b = if OutProdParams::of(c).trans_b { g.transpose(x[1])? } else { x[1] };
        Ok(vec![g.out_prod(x[0], b)?])
    },
    probe: || None,
    // test-backend-ops' cases: m = 256 over n, k in {1, 16} with batches and broadcasts, and its
    // sweeps of ne2 (cublasSgemmStridedBatched) and nr2 (cublasSgemmBatched's pointer array).
    smoke: &[
        s([256, 16, 16, 1]),
        s([256, 1, 1, 1]),
        sp!([256, 16, 1, 1], |p: &mut OutProdParams| { p.bs0 = 3; p.bs1 = 3; p.nr0 = 2; p.nr1 = 2; }),
        sp!([256, 16, 16, 1], |p: &mut OutProdParams| p.trans_b = true),
        sp!([256, 16, 16, 1], |p: &mut OutProdParams| p.bs0 = 32),
        sp!([256, 16, 16, 1], |p: &mut OutProdParams| p.nr0 = 32),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = OutProdParams::of(c);
        let [m, n, k, _] = c.ne;
        let (bs, nr) = ([p.bs0, p.bs1], [p.nr0, p.nr1]);
        repro(
            "OUT_PROD",
            format!(
                "test_out_prod({}, GGML_TYPE_F32, {m}, {n}, {k}, {{{}, {}}}, {{{}, {}}}, {})",
                c.dtype.ggml_type(), bs[0], bs[1], nr[0], nr[1], p.trans_b
            ),
            format!(
                "type_a={},type_b=f32,m={m},n={n},k={k},bs=[{},{}],nr=[{},{}],trans_b={}",
                c.dtype, bs[0], bs[1], nr[0], nr[1], u8::from(p.trans_b)
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};
