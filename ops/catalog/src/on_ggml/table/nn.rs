//! Model pieces: ROPE, the fused RMS_NORM+MUL+ROPE, FLASH_ATTN_EXT, TIMESTEP_EMBEDDING,
//! UPSCALE and INTERPOLATE, IM2COL, POOL_2D, SSM_CONV, SOLVE_TRI, LIGHTNING_INDEXER, ROPE_BACK.

use super::*;
use kedge_core::OpParams;
use kedge_ggml::{rope_mode, PoolOp, Prec, RopeParams, ScaleMode, Type};

fn rope_mode_of(mode: &str) -> (i32, &'static str) {
    if mode == "neox" {
        (rope_mode::NEOX, "GGML_ROPE_TYPE_NEOX")
    } else {
        (rope_mode::NORMAL, "GGML_ROPE_TYPE_NORMAL")
    }
}

/// Positions in [0, 512), as test-backend-ops draws them (`rand() % n_ctx`).
fn positions(c: &Case, s: &TensorSpec, index: u64) -> HostTensor {
    let mut rng = Rng::stream(c.seed, index);
    let v: Vec<i32> = (0..s.nelements()).map(|_| rng.below(512) as i32).collect();
    span_i32(s, &v)
}

/// Positions `0..n_tokens` in a seeded order, as test_rms_norm_mul_rope draws them
/// (`init_set_rows_row_ids(t, ne[2])`: a shuffle of the token indices, each once).
fn shuffled_positions(c: &Case, s: &TensorSpec, index: u64) -> HostTensor {
    let n = s.nelements() as usize;
    let mut v: Vec<i32> = (0..n).map(|i| i as i32).collect();
    let mut rng = Rng::stream(c.seed, index);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    span_i32(s, &v)
}

/// The result rows `rows` of a rope (rope, rope_back, rms_norm_mul_rope) alone: row `(i1, i2,
/// i3)` is its own rows of the row-shaped inputs (x; rms_norm_mul_rope's a and b) turned at
/// token `i2`'s position, with the frequency factors every row shares. The case of those rows:
/// `[ne0, 1, k, 1]`, one token per row, each with its row's position.
fn rope_rows_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let [_, n1, n2, _] = c.ne.map(|n| n.max(1) as u64);
    let k = rows.len() as i64;
    let mut sc = c.clone();
    sc.ne = [c.ne[0], 1, k, 1];
    let mut ins = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        if s.role != Role::Input {
            continue;
        }
        if s.name == "pos" {
            let pos = layout::made_at(c, made, i)?;
            let mut p = Vec::with_capacity(rows.len());
            for &r in rows {
                let t = (r / n1) % n2;
                let v = layout::index_at(pos, t as usize)
                    .ok_or_else(|| bad(c, format!("token {t} has no position")))?;
                p.push(v as f32);
            }
            ins.push(HostTensor::from_f32(DType::I32, [k, 1, 1, 1], &p));
        } else if s.ne == c.ne {
            let range = ranges.get(i).copied().unwrap_or((-1.0, 1.0));
            let d = kedge_core::judge::sample::drawn_rows(c, s, i, rows, range);
            ins.push(HostTensor::from_bytes(
                d.dtype,
                sc.ne,
                kedge_core::model::shape::dense_strides(&sc.ne, d.dtype),
                d.bytes,
            ));
        } else {
            // Shared by every row (the frequency factors): as made.
            ins.push(layout::made_at(c, made, i)?.clone());
        }
    }
    Ok((sc, ins))
}

// ---- ROPE ------------------------------------------------------------------------------------

kedge_core::params! {
    /// test_rope's parameters (n_ctx 512, fs 1, ef 0, af 1: YaRN off).
    pub(crate) struct RopeCaseParams {
        n_dims: int(0..=1 << 30) = 0, "rotated dimensions (0: all of ne0)";
        mode: choice(["normal", "neox"]) = "normal", "pairs (x[2i], x[2i+1]) or (x[i], x[i + n_dims/2])";
        ff: bool = false, "frequency factors (f32 [n_dims/2] in [0.9, 1.1))";
    }
}

fn n_dims(c: &Case) -> i64 {
    let n = RopeCaseParams::of(c).n_dims;
    if n == 0 {
        c.ne[0]
    } else {
        n
    }
}

pub(crate) const ROPE: GgmlOpEntry = GgmlOpEntry {
    name: "rope",
    upstream: "ROPE",
    about: "rotary position embedding of x [head_dim, n_head, n_tokens, 1] at i32 positions [n_tokens] in [0, 512) (ggml_rope_ext, YaRN off)",
    dtypes: &[DType::F32, DType::F16],
    params: RopeCaseParams::SPECS,
    tensors: |c| {
        let nd = n_dims(c);
        if c.ne[0] % 2 != 0 || nd % 2 != 0 || nd > c.ne[0] {
            return Err(bad(
                c,
                format!("ne0 = {} and n_dims = {nd} must be even, n_dims <= ne0", c.ne[0]),
            ));
        }
        let mut v = vec![input("x", c.dtype, c.ne)?, input("pos", DType::I32, [c.ne[2], 1, 1, 1])?];
        if RopeCaseParams::of(c).ff {
            v.push(input("freq", DType::F32, [nd / 2, 1, 1, 1])?);
        }
        v.push(output("dst", c.dtype, c.ne)?);
        Ok(v)
    },
    inputs: Inputs::Partly(&[1, 2], |c, s| {
        let mut v = vec![(1, positions(c, &s[1], 1))];
        if RopeCaseParams::of(c).ff {
            v.push((2, kedge_core::contract::op::random_tensor(c.seed, 2, &s[2], 0.9, 1.1)));
        }
        Ok(v)
    }),
    graph: |g, c, x| {
        let p = RopeCaseParams::of(c);
        let rp = RopeParams::new(n_dims(c) as i32, rope_mode_of(p.mode).0);
        let freq = if p.ff { Some(x[2]) } else { None };
        Ok(vec![g.rope_ext(x[0], x[1], freq, rp)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 2, 2, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 5, 3, 1]),
        sp!([128, 4, 7, 1], |p: &mut RopeCaseParams| p.mode = "neox"),
        sp!([64, 3, 5, 2], |p: &mut RopeCaseParams| { p.n_dims = 32; p.ff = true; }),
        sp!([80, 2, 9, 1], |p: &mut RopeCaseParams| { p.mode = "neox"; p.n_dims = 40; p.ff = true; }),
    ],
    boundaries: |_| {
        vec![
            // B11: rope.cu:384-386, block_nums(nr, ceil(ne00 / 512)): the head dimension's
            // blocks on grid.y.
            Boundary::ne(
                "B11: ne0 across 65535 * 512 (ne0/512 blocks on grid.y)",
                0,
                33_553_922,
                [0, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![33_553_920, 33_553_922, 33_554_432])
            .with_params(|p: &mut RopeCaseParams| p.n_dims = 128),
            // C14: rope.cu:159-160 `int idst`, `const int ix`: elements past 2^31.
            Boundary::ne(
                "C14: elements past 2^31 (int idst/ix)",
                2,
                524_289,
                [128, 32, 0, 1],
                Reach("a Q of 524289 tokens x 32 heads x 128 in one ubatch (f16: 8 GiB)"),
            )
            .with_values(vec![524_288, 524_289])
            .with_params(|p: &mut RopeCaseParams| p.mode = "neox")
            .dtype(DType::F16),
        ]
    },
    upstream_line: |c| rope_line(c, true),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(rope_rows_gathered),
    reach: no_reach,
};

/// test_rope's line, forward (ROPE) or backward (ROPE_BACK: `vars()` is the same, the op name
/// tells them apart).
fn rope_line(c: &Case, forward: bool) -> UpstreamRepro {
    let p = RopeCaseParams::of(c);
    let nd = n_dims(c);
    let (m, mc) = rope_mode_of(p.mode);
    repro(
        if forward { "ROPE" } else { "ROPE_BACK" },
        format!(
            "test_rope({}, {}, {nd}, {mc}, 512, 1.0f, 0.0f, 1.0f, {}, 0, {forward})",
            c.dtype.ggml_type(),
            cpp_arr(&c.ne),
            p.ff
        ),
        format!(
            "type={},ne_a={},n_dims={nd},mode={m},n_ctx=512,fs=1.000000,ef=0.000000,af=1.000000,ff={},v=0,inplace=0,n_offs=0",
            c.dtype,
            vars_arr(&c.ne),
            b01(p.ff)
        ),
    )
}

/// ROPE's gradient: the same cases, tensors and boundaries (rope.cu runs both directions
/// through one kernel), through `ggml_rope_ext_back`.
pub(crate) const ROPE_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "rope_back",
    upstream: "ROPE_BACK",
    about: "the gradient of rope: dy [head_dim, n_head, n_tokens, 1] rotated back at i32 positions [n_tokens] in [0, 512) (ggml_rope_ext_back, YaRN off)",
    graph: |g, c, x| {
        let p = RopeCaseParams::of(c);
        let rp = RopeParams::new(n_dims(c) as i32, rope_mode_of(p.mode).0);
        let freq = if p.ff { Some(x[2]) } else { None };
        Ok(vec![g.rope_ext_back(x[0], x[1], freq, rp)?])
    },
    upstream_line: |c| rope_line(c, false),
    ..ROPE
};

// ---- RMS_NORM + MUL + ROPE (fused on CUDA) ---------------------------------------------------

kedge_core::params! {
    /// test_rms_norm_mul_rope's parameters (no multi_add, no set_rows, no broadcast).
    pub(crate) struct RmsNormMulRopeParams {
        eps: float(0.0..=f64::MAX) = 1e-6, "added to the mean of squares";
        mode: choice(["normal", "neox"]) = "normal", "RoPE mode";
    }
}

pub(crate) const RMS_NORM_MUL_ROPE: GgmlOpEntry = GgmlOpEntry {
    name: "rms_norm_mul_rope",
    upstream: "RMS_NORM_MUL_ROPE",
    about: "QK-norm then RoPE: rope(rms_norm(a) * b, pos) over [head_dim, n_head, n_tokens, 1], which ggml's CUDA backend fuses into one kernel (rope.cu:711-851); n_dims = ne0",
    dtypes: &[DType::F32],
    params: RmsNormMulRopeParams::SPECS,
    tensors: |c| {
        if c.ne[3] != 1 || c.ne[0] % 2 != 0 {
            return Err(bad(c, format!("ne = {:?}: need an even ne0 and ne[3] = 1", c.ne)));
        }
        Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, c.ne)?,
            input("pos", DType::I32, [c.ne[2], 1, 1, 1])?,
            output("dst", c.dtype, c.ne)?,
        ])
    },
    // Positions as upstream draws them: each token's own index, shuffled (not [0, 512)).
    inputs: Inputs::Partly(&[2], |c, s| Ok(vec![(2, shuffled_positions(c, &s[2], 2))])),
    graph: |g, c, x| {
        let p = RmsNormMulRopeParams::of(c);
        let n = g.rms_norm(x[0], p.eps as f32)?;
        let m = g.mul(n, x[1])?;
        let rp = RopeParams::new(c.ne[0] as i32, rope_mode_of(p.mode).0);
        Ok(vec![g.rope_ext(m, x[2], None, rp)?])
    },
    probe: || {
        Some(ProbeBase {
            grid_dims: &[1, 2],
            count_dim: Some(2),
            row_dim: false,
            ..ProbeBase::rows([64, 1, 1, 1])
        })
    },
    smoke: &[
        s([128, 8, 3, 1]),
        sp!([64, 4, 17, 1], |p: &mut RmsNormMulRopeParams| p.mode = "neox"),
        s([2, 1, 1, 1]),
    ],
    boundaries: |_| {
        // A4: rope.cu:809, the fused kernel's grid (nrows, nchannels, nsamples) puts n_tokens
        // on grid.y.
        vec![Boundary::ne(
            "A4: n_tokens (ne2) across 65535 on grid.y of the fused kernel",
            2,
            65536,
            [128, 8, 0, 1],
            Reach("QK-norm models (Qwen3, Gemma-3, OLMo-2) with a ubatch of 65536 tokens: embedding or rerank models on 64k inputs"),
        )
        .with_values(vec![65535, 65536])
        .with_params(|p: &mut RmsNormMulRopeParams| p.mode = "neox")]
    },
    upstream_line: |c| {
        let p = RmsNormMulRopeParams::of(c);
        let (m, mc) = rope_mode_of(p.mode);
        repro(
            "RMS_NORM_MUL_ROPE",
            format!(
                "test_rms_norm_mul_rope({}, {}, false, false, false, {mc})",
                cpp_arr(&c.ne),
                cf(p.eps)
            ),
            format!(
                "ne={},eps={},multi_add=0,set_rows=0,broadcast=0,mode={m}",
                vars_arr(&c.ne),
                fl(p.eps)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(rope_rows_gathered),
    reach: no_reach,
};

// ---- FLASH_ATTN_EXT --------------------------------------------------------------------------

kedge_core::params! {
    /// test_flash_attn_ext's parameters beyond ne = [hsk, nb, nh, 1].
    pub(crate) struct FlashAttnParams {
        kv: int(1..=1 << 30) = 96, "keys and values";
        hsv: int(0..=1 << 16) = 0, "V head size (0: hsk)";
        gqa: int(1..=1 << 10) = 1, "query heads per K/V head (nr23[0])";
        mask: bool = true, "an f16 mask [kv, nb] (test-backend-ops' random -inf/0 blocks)";
        kv_view: bool = true, "K and V are views of [hs, 2*kv, nh] caches (heads outer), as test-backend-ops makes them";
    }
}

fn hsv(c: &Case) -> i64 {
    let v = FlashAttnParams::of(c).hsv;
    if v == 0 {
        c.ne[0]
    } else {
        v
    }
}

fn kv_spec(c: &Case, name: &str, hs: i64) -> Result<TensorSpec, CaseError> {
    let p = FlashAttnParams::of(c);
    let ne = [hs, p.kv, c.ne[2], 1];
    if p.kv_view {
        view_input(name, c.dtype, ne, [hs, 2 * p.kv, c.ne[2], 1])
    } else {
        input(name, c.dtype, ne)
    }
}

/// test-backend-ops' `init_tensor_kq_mask`: uniform [-1, 1), then a fifth of the area in
/// 128 x 64 blocks of -inf or 0.
fn kq_mask(c: &Case, s: &TensorSpec, index: u64) -> HostTensor {
    let (ne0, ne1) = (s.ne[0] as usize, s.ne[1] as usize);
    // Every plane of the span (a mask of several streams has them in dim 3), each drawn on from
    // where the last one ended: the first plane is what a mask of one plane holds.
    let n = (s.bytes / s.dtype.size()) as usize;
    let planes = n.div_ceil((ne0 * ne1).max(1));
    let mut rng = Rng::stream(c.seed, index);
    let mut all = Vec::with_capacity(planes * ne0 * ne1);
    for _ in 0..planes {
        let mut v: Vec<f32> = (0..ne0 * ne1).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let blocks = (0.2 * (ne0 * ne1) as f64 / (128.0 * 64.0)) as usize;
        for _ in 0..blocks {
            let p1 = rng.below(ne1 as u64) as usize;
            let p0 = rng.below(ne0 as u64) as usize;
            let x = if rng.below(2) == 1 {
                f32::NEG_INFINITY
            } else {
                0.0
            };
            for i1 in p1..(p1 + 64).min(ne1) {
                for i0 in p0..(p0 + 128).min(ne0) {
                    v[i1 * ne0 + i0] = x;
                }
            }
        }
        all.extend(v);
    }
    all.truncate(n);
    span_tensor(s, &all)
}

/// Whether K and V are of a type kedge reads itself (f32, f16, bf16), for its f64 reference.
fn kv_read_as_is(c: &Case) -> bool {
    matches!(c.dtype, DType::F32 | DType::F16 | DType::Bf16)
}

/// flash_attn_ext in f64: softmax(q k^T * scale + mask) v per query and head, from the case's
/// own K, V (their views' strides) and mask. Why not ggml's CPU backend: with one query and 512
/// keys or more it splits the keys over its threads and sums each share's f16 V rows in f16,
/// so its error depends on the host's thread count and passes a tolerance: against this one,
/// 131,072 keys over 32 heads gave NMSE 2.6e-3 on one thread (test-backend-ops' reference
/// paths, `use_ref`, take one share whatever the threads), 1.7e-4 on 16 and 4.4e-5 on 64
/// (`scripts/flash-attn-cpu-reference.c`), against test-backend-ops' 5e-4.
fn flash_attn_f64(
    c: &Case,
    specs: &[TensorSpec],
    x: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let p = FlashAttnParams::of(c);
    let (hsk, nb, nh) = (c.ne[0] as usize, c.ne[1] as usize, c.ne[2] as usize);
    let (hv, gqa, kv) = (hsv(c) as usize, p.gqa as usize, p.kv as usize);
    let (Some(q), Some(k), Some(v)) = (x.first(), x.get(1), x.get(2)) else {
        return Err(bad(c, "flash_attn_ext takes q, k and v"));
    };
    let mask = if p.mask {
        Some(
            x.get(3)
                .ok_or_else(|| bad(c, "the case has a mask and no mask was given"))?,
        )
    } else {
        None
    };
    if specs
        .last()
        .is_none_or(|d| d.ne != [hv as i64, (nh * gqa) as i64, nb as i64, 1])
    {
        return Err(bad(c, "flash_attn_ext's result is [hsv, nh*gqa, nb, 1]"));
    }
    // The graph's scale, as the f32 ggml is given.
    let scale = f64::from(1.0 / (hsk as f32).sqrt());
    let nq = nh * gqa;
    let mut out = vec![0f64; hv * nq * nb];
    out.par_chunks_mut(hv).enumerate().for_each(|(r, o)| {
        // dst [hsv, nh*gqa, nb]: row r is query head h of query i; K/V head h / gqa.
        let (h, i) = (r % nq, r / nq);
        let hk = h / gqa;
        let mut qr = vec![0f64; hsk];
        q.row_f64(i, h, 0, &mut qr);
        let mut kr = vec![0f64; hsk];
        let mut s = vec![f64::NEG_INFINITY; kv];
        let mut most = f64::NEG_INFINITY;
        for (j, sj) in s.iter_mut().enumerate() {
            let m = mask.map_or(0.0, |m| m.get(j, i, 0, 0));
            if m == f64::NEG_INFINITY {
                continue;
            }
            k.row_f64(j, hk, 0, &mut kr);
            let dot: f64 = qr.iter().zip(&kr).map(|(a, b)| a * b).sum();
            *sj = dot * scale + m;
            most = most.max(*sj);
        }
        if most == f64::NEG_INFINITY {
            // Every key masked: ggml writes zeros (its sum is 0).
            return;
        }
        let mut sum = 0.0;
        for sj in s.iter_mut() {
            *sj = (*sj - most).exp();
            sum += *sj;
        }
        let mut vr = vec![0f64; hv];
        for (j, &w) in s.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            v.row_f64(j, hk, 0, &mut vr);
            for (od, vd) in o.iter_mut().zip(&vr) {
                *od += w / sum * vd;
            }
        }
    });
    Ok(vec![out])
}

pub(crate) const FLASH_ATTN_EXT: GgmlOpEntry = GgmlOpEntry {
    name: "flash_attn_ext",
    upstream: "FLASH_ATTN_EXT",
    about: "attention softmax(q k^T / sqrt(hsk) + mask) v: ne = [hsk, nb queries, nh heads, 1], f32 q, K/V of the case's dtype laid out as test_flash_attn_ext makes them (views of [hs, 2*kv, nh] caches: heads outer), f32 precision; the result is [hsv, nh*gqa, nb, 1]",
    dtypes: &[
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::Q8_0,
        DType::Q5_1,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q4_0,
        DType::Iq4Nl,
        DType::Q1_0,
        DType::Q2_0,
    ],
    params: FlashAttnParams::SPECS,
    tensors: |c| {
        let p = FlashAttnParams::of(c);
        if c.ne[3] != 1 {
            return Err(bad(c, format!("ne = [hsk, nb, nh, 1]: ne[3] is {}", c.ne[3])));
        }
        let (hsk, nb, nh) = (c.ne[0], c.ne[1], c.ne[2]);
        let mut v = vec![
            input("q", DType::F32, [hsk, nb, nh * p.gqa, 1])?,
            kv_spec(c, "k", hsk)?,
            kv_spec(c, "v", hsv(c))?,
        ];
        if p.mask {
            v.push(input("mask", DType::F16, [p.kv, nb, 1, 1])?);
        }
        v.push(output("dst", DType::F32, [hsv(c), nh * p.gqa, nb, 1])?);
        Ok(v)
    },
    inputs: Inputs::Made(|c, s| {
        let mut v = vec![default_input(c, s, 0), default_input(c, s, 1), default_input(c, s, 2)];
        if FlashAttnParams::of(c).mask {
            v.push(kq_mask(c, &s[3], 3));
        }
        Ok(v)
    }),
    graph: |g, c, x| {
        let mask = FlashAttnParams::of(c).mask.then(|| x[3]);
        let scale = 1.0 / (c.ne[0] as f32).sqrt();
        let fa = g.flash_attn_ext(x[0], x[1], x[2], mask, scale, 0.0, 0.0)?;
        g.set_flash_attn_prec(fa, Prec::F32)?;
        Ok(vec![fa])
    },
    probe: || None,
    smoke: &[
        s([128, 8, 4, 1]),
        sp!([64, 3, 2, 1], |p: &mut FlashAttnParams| { p.kv = 300; p.gqa = 4; }),
        sp!([80, 1, 3, 1], |p: &mut FlashAttnParams| { p.kv = 513; p.mask = false; p.kv_view = false; }),
        sp!([192, 5, 2, 1], |p: &mut FlashAttnParams| { p.hsv = 128; p.kv = 128; }),
    ],
    boundaries: |_| {
        // C10: fattn-vec.cuh:110 (tile :857, mma :1816) `K += nb13*sequence + nb12*(head /
        // gqa_ratio)` with int32 nb12: heads-outer K of 2 GiB reads the wrong head.
        vec![Boundary::ne(
            "C10: heads x per-head K stride across 2^31 bytes (int32 nb12)",
            2,
            33,
            [128, 1, 0, 1],
            Reach("K/V laid out heads-outer (test-backend-ops' own layout; diffusion and video models); llama.cpp's KV cache interleaves heads and is immune"),
        )
        .with_values(vec![32, 33])
        .with_params(|p: &mut FlashAttnParams| p.kv = 131_072)]
    },
    upstream_line: |c| {
        let p = FlashAttnParams::of(c);
        let (hsk, nb, nh) = (c.ne[0], c.ne[1], c.ne[2]);
        let hv = hsv(c);
        let t = c.dtype.ggml_type();
        repro(
            "FLASH_ATTN_EXT",
            format!(
                "test_flash_attn_ext({hsk}, {hv}, {nh}, {{{}, 1}}, {}, {nb}, {}, false, 0.0f, 0.0f, GGML_PREC_F32, {t}, {t}, {{0, 1, 2, 3}}, {})",
                p.gqa, p.kv, p.mask, p.kv_view
            ),
            format!(
                "hsk={hsk},hsv={hv},nh={nh},nr23=[{},1],kv={},nb={nb},mask={},sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K={d},type_V={d},permute=[0,1,2,3],kv_view={},v_is_view_of_k=0",
                p.gqa,
                p.kv,
                b01(p.mask),
                b01(p.kv_view),
                d = c.dtype
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::F64 {
        applies: kv_read_as_is,
        compute: flash_attn_f64,
        source: "kedge's f64 attention over the case's K, V and mask (f32, f16, bf16 K/V; ggml's CPU backend, test-backend-ops' reference, for block formats)",
    },
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- TIMESTEP_EMBEDDING ----------------------------------------------------------------------

kedge_core::params! {
    /// TIMESTEP_EMBEDDING's size.
    pub(crate) struct TimestepParams {
        dim: int(1..=1 << 20) = 320, "embedding size";
        max_period: int(1..=1 << 30) = 10000, "the longest sinusoid's period";
    }
}

/// TIMESTEP_EMBEDDING's result rows `rows` alone: row `r` is the embedding of timestep `r`,
/// so the case of those rows is the sampled timesteps, in order. `[65535]` timesteps at dim
/// 8,192 is a 2 GB result whose whole reference took 16.5 s on the GPU machine's host.
fn timestep_rows_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let Some(t) = specs.first() else {
        return Err(bad(c, "timestep_embedding has an input"));
    };
    // The timesteps as rows of one value each: timestep `r` is row `r`.
    let one_a_row = TensorSpec::dense(&t.name, Role::Input, t.dtype, [1, t.ne[0], 1, 1])?;
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_rows(c, &one_a_row, 0, rows, range);
    let mut sc = c.clone();
    sc.ne = [rows.len() as i64, 1, 1, 1];
    let input = HostTensor::from_bytes(
        drawn.dtype,
        sc.ne,
        kedge_core::model::shape::dense_strides(&sc.ne, drawn.dtype),
        drawn.bytes,
    );
    Ok((sc, vec![input]))
}

pub(crate) const TIMESTEP_EMBEDDING: GgmlOpEntry = GgmlOpEntry {
    name: "timestep_embedding",
    upstream: "TIMESTEP_EMBEDDING",
    about: "sinusoidal embeddings f32 [dim, n] of n f32 timesteps (ne = [n, 1, 1, 1])",
    dtypes: &[DType::F32],
    params: TimestepParams::SPECS,
    tensors: |c| {
        if c.ne[1..].iter().any(|&d| d != 1) {
            return Err(bad(
                c,
                format!("ne = {:?}: timesteps are a vector [n, 1, 1, 1]", c.ne),
            ));
        }
        let dim = TimestepParams::of(c).dim;
        Ok(vec![
            input("timesteps", c.dtype, c.ne)?,
            output("dst", DType::F32, [dim, c.ne[0], 1, 1])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = TimestepParams::of(c);
        Ok(vec![g.timestep_embedding(
            x[0],
            p.dim as i32,
            p.max_period as i32,
        )?])
    },
    // The only free dimension is ne0 (on grid.y: declared below), and the output is dim times
    // the input, so no count probe.
    probe: || None,
    smoke: &[
        s([2, 1, 1, 1]),
        sp!([100, 1, 1, 1], |p: &mut TimestepParams| p.dim = 63),
        sp!([7, 1, 1, 1], |p: &mut TimestepParams| {
            p.dim = 1024;
            p.max_period = 500;
        }),
    ],
    boundaries: |_| {
        vec![
            // B8: tsembd.cu:30, gridDim(num_blocks, ne00): the timesteps on grid.y.
            Boundary::ne(
                "B8: timesteps (ne0) across 65535 on grid.y",
                0,
                65536,
                [0, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536]),
            // C13: tsembd.cu:3,8, `const int nb1` and `dst + i*nb1` in int.
            Boundary::param(
                "C13: the last row's byte offset (n - 1) * dim * 4 across 2^31 (int nb1)",
                kedge_core::param_name!(TimestepParams, dim),
                8194,
                [65535, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![8192, 8194, 8200]),
        ]
    },
    upstream_line: |c| {
        let p = TimestepParams::of(c);
        repro(
            "TIMESTEP_EMBEDDING",
            format!(
                "test_timestep_embedding({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.dim,
                p.max_period
            ),
            format!(
                "type={},ne_a={},dim={},max_period={}",
                c.dtype,
                vars_arr(&c.ne),
                p.dim,
                p.max_period
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(timestep_rows_gathered),
    reach: no_reach,
};

// ---- UPSCALE, INTERPOLATE --------------------------------------------------------------------

const SCALE_MODES: [&str; 3] = ["nearest", "bilinear", "bicubic"];

fn scale_mode(name: &str) -> (ScaleMode, &'static str) {
    match name {
        "bilinear" => (ScaleMode::Bilinear, "GGML_SCALE_MODE_BILINEAR"),
        "bicubic" => (ScaleMode::Bicubic, "GGML_SCALE_MODE_BICUBIC"),
        _ => (ScaleMode::Nearest, "GGML_SCALE_MODE_NEAREST"),
    }
}

kedge_core::params! {
    /// UPSCALE's factor and mode.
    pub(crate) struct UpscaleParams {
        scale_factor: int(2..=1 << 10) = 2, "ne0 and ne1 grow by this factor (ggml_upscale asserts > 1)";
        mode: choice(SCALE_MODES) = "nearest", "sampling";
    }
}

fn resample_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        ne: [8, 8, 1, 1],
        params: Params::new(),
        grid_dims: &[1, 2, 3],
        count_dim: Some(2),
        row_dim: false,
        vec_dim: true,
        launch_loop_dims: &[],
    })
}

const REACH_VAE: Reach = Reach("the SD / Wan VAE decoder's upsampling at high resolution");

pub(crate) const UPSCALE: GgmlOpEntry = GgmlOpEntry {
    name: "upscale",
    upstream: "UPSCALE",
    about:
        "ne0 and ne1 scaled up by an integer factor (ggml_upscale: nearest, bilinear or bicubic)",
    dtypes: &[DType::F32],
    params: UpscaleParams::SPECS,
    tensors: |c| {
        let f = UpscaleParams::of(c).scale_factor;
        let dst = [c.ne[0] * f, c.ne[1] * f, c.ne[2], c.ne[3]];
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, dst)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = UpscaleParams::of(c);
        Ok(vec![g.upscale(
            x[0],
            p.scale_factor as i32,
            scale_mode(p.mode).0,
        )?])
    },
    probe: resample_probe,
    smoke: &[
        s([16, 12, 3, 1]),
        sp!([10, 7, 2, 2], |p: &mut UpscaleParams| {
            p.mode = "bilinear";
            p.scale_factor = 3;
        }),
        sp!([9, 9, 1, 1], |p: &mut UpscaleParams| p.mode = "bicubic"),
    ],
    boundaries: |_| {
        // C12: upscale.cu:32, dst_total_elements is an int product: at 2^31 it is negative
        // and every thread returns, nothing written.
        vec![Boundary::ne(
            "C12: bilinear destination across 2^31 elements (int product; nothing written)",
            2,
            2048,
            [512, 512, 0, 1],
            REACH_VAE,
        )
        .with_values(vec![2047, 2048])
        .with_params(|p: &mut UpscaleParams| p.mode = "bilinear")]
    },
    upstream_line: |c| {
        let p = UpscaleParams::of(c);
        repro(
            "UPSCALE",
            format!(
                "test_upscale({}, {}, {}, {}, false)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.scale_factor,
                scale_mode(p.mode).1
            ),
            format!(
                "type={},ne={},scale_factor={},mode={},transpose=0",
                c.dtype,
                vars_arr(&c.ne),
                p.scale_factor,
                p.mode
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::SlicesPastChanged,
    reach: no_reach,
};

kedge_core::params! {
    /// INTERPOLATE's target shape (0: the source's size) and mode.
    pub(crate) struct InterpolateParams {
        t0: int(0..=1 << 30) = 0, "target ne0 (0: ne0)";
        t1: int(0..=1 << 30) = 0, "target ne1 (0: ne1)";
        t2: int(0..=1 << 30) = 0, "target ne2 (0: ne2)";
        t3: int(0..=1 << 30) = 0, "target ne3 (0: ne3)";
        mode: choice(SCALE_MODES) = "nearest", "sampling";
    }
}

fn target(c: &Case) -> Ne {
    let p = InterpolateParams::of(c);
    let pick = |t: i64, n: i64| if t == 0 { n } else { t };
    [
        pick(p.t0, c.ne[0]),
        pick(p.t1, c.ne[1]),
        pick(p.t2, c.ne[2]),
        pick(p.t3, c.ne[3]),
    ]
}

pub(crate) const INTERPOLATE: GgmlOpEntry = GgmlOpEntry {
    name: "interpolate",
    upstream: "UPSCALE",
    about: "resampled to any target shape (ggml_interpolate, op UPSCALE); identity sizes too, which ggml_upscale refuses",
    dtypes: &[DType::F32],
    params: InterpolateParams::SPECS,
    tensors: |c| Ok(vec![input("x", c.dtype, c.ne)?, output("dst", c.dtype, target(c))?]),
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let t = target(c);
        let mode = scale_mode(InterpolateParams::of(c).mode).0 as u32;
        Ok(vec![g.interpolate(x[0], t[0], t[1], t[2], t[3], mode)?])
    },
    probe: resample_probe,
    smoke: &[
        sp!([2, 5, 7, 11], |p: &mut InterpolateParams| { p.t0 = 5; p.t1 = 7; p.t2 = 11; p.t3 = 13; }),
        sp!([20, 9, 3, 1], |p: &mut InterpolateParams| { p.t0 = 7; p.t1 = 30; p.mode = "bilinear"; }),
        sp!([12, 12, 2, 1], |p: &mut InterpolateParams| { p.t0 = 17; p.t1 = 5; p.mode = "bicubic"; }),
    ],
    boundaries: |_| {
        // C11: upscale.cu:3-22, nearest takes int byte strides and computes int offsets: a
        // source of 2 GiB reads out of bounds.
        vec![Boundary::ne(
            "C11: nearest, a source across 2^31 bytes (int byte offsets)",
            2,
            2049,
            [512, 512, 0, 1],
            REACH_VAE,
        )
        .with_values(vec![2048, 2049])]
    },
    upstream_line: |c| {
        let p = InterpolateParams::of(c);
        let t = target(c);
        repro(
            "UPSCALE",
            format!(
                "test_interpolate({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&t),
                scale_mode(p.mode).1
            ),
            format!(
                "type={},ne={},ne_tgt={},mode={}",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&t),
                p.mode
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::SlicesPastChanged,
    reach: no_reach,
};

// ---- IM2COL, POOL_2D -------------------------------------------------------------------------

kedge_core::params! {
    /// test_im2col's kernel and geometry (2-D).
    pub(crate) struct Im2colParams {
        kw: int(1..=1 << 10) = 3, "kernel width";
        kh: int(1..=1 << 10) = 3, "kernel height";
        s0: int(1..=1 << 10) = 1, "stride x";
        s1: int(1..=1 << 10) = 1, "stride y";
        p0: int(0..=1 << 10) = 1, "padding x";
        p1: int(0..=1 << 10) = 1, "padding y";
        d0: int(1..=1 << 10) = 1, "dilation x";
        d1: int(1..=1 << 10) = 1, "dilation y";
        dst: choice(["f32", "f16"]) = "f32", "the result's type";
    }
}

fn im2col_out(c: &Case) -> Result<Ne, CaseError> {
    let p = Im2colParams::of(c);
    let ow = (c.ne[0] + 2 * p.p0 - p.d0 * (p.kw - 1) - 1) / p.s0 + 1;
    let oh = (c.ne[1] + 2 * p.p1 - p.d1 * (p.kh - 1) - 1) / p.s1 + 1;
    if ow <= 0 || oh <= 0 {
        return Err(bad(c, "the input is smaller than the (dilated) kernel"));
    }
    Ok([p.kw * p.kh * c.ne[2], ow, oh, c.ne[3]])
}

pub(crate) const IM2COL: GgmlOpEntry = GgmlOpEntry {
    name: "im2col",
    upstream: "IM2COL",
    about: "2-D image to columns for a convolution as a matrix product: input [W, H, C, N] f32, kernel [kw, kh, C, 1] (f16, its shape only); im2col.cu clamps its grid and loops: a control",
    dtypes: &[DType::F32],
    params: Im2colParams::SPECS,
    tensors: |c| {
        let d = float_dtype(Im2colParams::of(c).dst);
        Ok(vec![input("input", c.dtype, c.ne)?, output("dst", d, im2col_out(c)?)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Im2colParams::of(c);
        let kernel = g.new_tensor(Type::F16, &[p.kw, p.kh, c.ne[2], 1])?;
        let i = |v: i64| v as i32;
        let dst = if p.dst == "f16" { Type::F16 } else { Type::F32 };
        Ok(vec![g.im2col(
            kernel,
            x[0],
            i(p.s0),
            i(p.s1),
            i(p.p0),
            i(p.p1),
            i(p.d0),
            i(p.d1),
            true,
            dst,
        )?])
    },
    // The output is kw*kh = 9 times the input: no count probe.
    probe: || {
        Some(ProbeBase {
            ne: [10, 10, 3, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: None,
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 10, 3, 1]),
        sp!([20, 11, 4, 2], |p: &mut Im2colParams| { p.dst = "f16"; p.s0 = 2; p.d1 = 2; }),
        sp!([7, 9, 1, 1], |p: &mut Im2colParams| { p.kw = 5; p.kh = 1; p.p1 = 0; }),
    ],
    boundaries: |_| {
        vec![Boundary::ne(
            "the result across 2^31 elements (int64 offsets, clamped grid: a control)",
            2,
            15,
            [4096, 4096, 0, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![14, 15, 32])
        .with_params(|p: &mut Im2colParams| p.dst = "f16")]
    },
    upstream_line: |c| {
        let p = Im2colParams::of(c);
        let d = float_dtype(p.dst);
        let k = [p.kw, p.kh, c.ne[2], 1];
        repro(
            "IM2COL",
            format!(
                "test_im2col({}, GGML_TYPE_F16, {}, {}, {}, {}, {}, {}, {}, {}, {}, true)",
                c.dtype.ggml_type(),
                d.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&k),
                p.s0,
                p.s1,
                p.p0,
                p.p1,
                p.d0,
                p.d1
            ),
            format!(
                "type_input={},type_kernel=f16,dst_type={d},ne_input={},ne_kernel={},s0={},s1={},p0={},p1={},d0={},d1={},is_2D=1",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&k),
                p.s0,
                p.s1,
                p.p0,
                p.p1,
                p.d0,
                p.d1
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(3),
    reach: no_reach,
};

kedge_core::params! {
    /// test_pool2d's window.
    pub(crate) struct Pool2dParams {
        op: choice(["avg", "max"]) = "avg", "pooling";
        k0: int(1..=1 << 10) = 3, "window width";
        k1: int(1..=1 << 10) = 3, "window height";
        s0: int(1..=1 << 10) = 1, "stride x";
        s1: int(1..=1 << 10) = 1, "stride y";
        p0: int(0..=1 << 10) = 1, "padding x";
        p1: int(0..=1 << 10) = 1, "padding y";
    }
}

fn pool_out(c: &Case) -> Result<Ne, CaseError> {
    let p = Pool2dParams::of(c);
    let ow = (c.ne[0] + 2 * p.p0 - p.k0) / p.s0 + 1;
    let oh = (c.ne[1] + 2 * p.p1 - p.k1) / p.s1 + 1;
    if c.ne[0] + 2 * p.p0 < p.k0 || c.ne[1] + 2 * p.p1 < p.k1 || ow <= 0 || oh <= 0 {
        return Err(bad(c, "the padded input is smaller than the window"));
    }
    Ok([ow, oh, c.ne[2], c.ne[3]])
}

pub(crate) const POOL_2D: GgmlOpEntry = GgmlOpEntry {
    name: "pool_2d",
    upstream: "POOL_2D",
    about: "2-D average or max pooling of [W, H, C, N]; f32 result",
    dtypes: &[DType::F32],
    params: Pool2dParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", DType::F32, pool_out(c)?)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Pool2dParams::of(c);
        let op = if p.op == "max" {
            PoolOp::Max
        } else {
            PoolOp::Avg
        };
        let i = |v: i64| v as i32;
        Ok(vec![g.pool_2d(
            x[0],
            op,
            i(p.k0),
            i(p.k1),
            i(p.s0),
            i(p.s1),
            p.p0 as f32,
            p.p1 as f32,
        )?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [10, 10, 3, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 10, 3, 1]),
        sp!([16, 9, 2, 2], |p: &mut Pool2dParams| {
            p.op = "max";
            p.k0 = 2;
            p.s0 = 2;
            p.p1 = 0;
        }),
        sp!([7, 7, 5, 1], |p: &mut Pool2dParams| {
            p.k1 = 1;
            p.s1 = 3;
            p.p0 = 0;
        }),
    ],
    boundaries: |_| {
        // C19: pool2d.cu:19 `src + nc * I_HW` and :91 `const int parallel_elements` in int.
        vec![Boundary::ne(
            "C19: a source across 2^31 elements (int channel offset)",
            2,
            2049,
            [1024, 1024, 0, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![2048, 2049])
        .with_params(|p: &mut Pool2dParams| {
            p.k0 = 2;
            p.k1 = 2;
            p.s0 = 2;
            p.s1 = 2;
            p.p0 = 0;
            p.p1 = 0;
        })]
    },
    upstream_line: |c| {
        let p = Pool2dParams::of(c);
        let op = if p.op == "max" {
            "GGML_OP_POOL_MAX"
        } else {
            "GGML_OP_POOL_AVG"
        };
        repro(
            "POOL_2D",
            format!(
                "test_pool2d({op}, {}, {}, {}, {}, {}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.k0,
                p.k1,
                p.s0,
                p.s1,
                p.p0,
                p.p1
            ),
            format!(
                "pool_type={},type_input={},ne_input={},k0={},k1={},s0={},s1={},p0={},p1={}",
                p.op,
                c.dtype,
                vars_arr(&c.ne),
                p.k0,
                p.k1,
                p.s0,
                p.s1,
                p.p0,
                p.p1
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(2),
    reach: no_reach,
};

kedge_core::params! {
    /// test_pool1d's window.
    pub(crate) struct Pool1dParams {
        op: choice(["avg", "max"]) = "avg", "pooling";
        k0: int(1..=1 << 10) = 3, "window width";
        s0: int(1..=1 << 10) = 3, "stride";
        p0: int(0..=1 << 10) = 0, "padding each side";
    }
}

/// POOL_1D's result width, or why the case has none (ggml asserts a positive width).
fn pool1d_width(c: &Case) -> Result<i64, CaseError> {
    let p = Pool1dParams::of(c);
    if c.ne[0] + 2 * p.p0 < p.k0 {
        return Err(bad(c, "the padded input is narrower than the window"));
    }
    Ok((c.ne[0] + 2 * p.p0 - p.k0) / p.s0 + 1)
}

pub(crate) const POOL_1D: GgmlOpEntry = GgmlOpEntry {
    name: "pool_1d",
    upstream: "POOL_1D",
    about: "1-D average or max pooling along ne0 of [W, ...]; f32 result (no CUDA kernel in the pinned snapshot: its other backends' op)",
    dtypes: &[DType::F32],
    params: Pool1dParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", DType::F32, with_dim(c.ne, 0, pool1d_width(c)?))?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Pool1dParams::of(c);
        let op = if p.op == "max" {
            PoolOp::Max
        } else {
            PoolOp::Avg
        };
        Ok(vec![g.pool_1d(x[0], op, p.k0 as i32, p.s0 as i32, p.p0 as i32)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [10, 3, 2, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(1),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 3, 2, 1]),
        sp!([11, 1, 3, 2], |p: &mut Pool1dParams| {
            p.op = "max";
            p.k0 = 2;
            p.s0 = 1;
            p.p0 = 1;
        }),
        sp!([128, 2, 1, 3], |p: &mut Pool1dParams| {
            p.k0 = 1;
            p.s0 = 2;
            p.p0 = 3;
        }),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = Pool1dParams::of(c);
        let op = if p.op == "max" {
            "GGML_OP_POOL_MAX"
        } else {
            "GGML_OP_POOL_AVG"
        };
        repro(
            "POOL_1D",
            format!(
                "test_pool1d({op}, {}, {}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.k0,
                p.s0,
                p.p0
            ),
            format!(
                "pool_type={},type_input={},ne_input={},k0={},s0={},p0={}",
                p.op,
                c.dtype,
                vars_arr(&c.ne),
                p.k0,
                p.s0,
                p.p0
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- SSM_CONV --------------------------------------------------------------------------------

kedge_core::params! {
    /// SSM_CONV's kernel width.
    pub(crate) struct SsmConvParams {
        d_conv: int(1..=64) = 4, "convolution width (CUDA's kernel has 3, 4, 5, 9 and 15)";
    }
}

pub(crate) const SSM_CONV: GgmlOpEntry = GgmlOpEntry {
    name: "ssm_conv",
    upstream: "SSM_CONV",
    about: "Mamba's depthwise causal convolution: sx [d_conv - 1 + n_t, d_inner, n_s, 1], weights [d_conv, d_inner]; f32 [d_inner, n_t, n_s]",
    dtypes: &[DType::F32],
    params: SsmConvParams::SPECS,
    tensors: |c| {
        let d = SsmConvParams::of(c).d_conv;
        let n_t = c.ne[0] - d + 1;
        if n_t < 1 || c.ne[3] != 1 {
            return Err(bad(
                c,
                format!("ne = {:?}: need ne0 >= d_conv ({d}) and ne[3] = 1", c.ne),
            ));
        }
        Ok(vec![
            input("sx", c.dtype, c.ne)?,
            input("c", c.dtype, [d, c.ne[1], 1, 1])?,
            output("dst", DType::F32, [c.ne[1], n_t, c.ne[2], 1])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.ssm_conv(x[0], x[1])?]),
    probe: || {
        Some(ProbeBase {
            ne: [35, 128, 1, 1],
            params: Params::new(),
            // ne[1] (d_inner) / 128 is on grid.y; ne[2] (sequences) on x.
            grid_dims: &[1, 2],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 128, 2, 1]),
        sp!([3, 256, 1, 1], |p: &mut SsmConvParams| p.d_conv = 3),
        sp!([78, 128, 3, 1], |p: &mut SsmConvParams| p.d_conv = 15),
        s([4, 1024, 1, 1]),
    ],
    boundaries: |_| {
        vec![
            // B15: ssm-conv.cu:143, the long-token path puts ceil(n_t / 32) on grid.z.
            Boundary::ne(
                "B15: n_t across 65535 * 32 (token blocks on grid.z)",
                0,
                2_097_124,
                [0, 128, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![2_097_123, 2_097_124, 2_097_155]),
            // C24: ssm-conv.cu:21, `bidx * src0_nb2` with `const int src0_nb2`.
            Boundary::ne(
                "C24: sequences x sx's byte stride across 2^31 (int byte offset)",
                2,
                1874,
                [35, 8192, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![1873, 1874, 2048]),
            // D30: ssm-conv.cu:86-101, the long-token path stages d_conv - 1 + 32 columns of
            // every row for each 32-token tile, the last tile too, and computes only the
            // tile's tokens: for n_t past 32 and not a multiple of it, the last row of sx is
            // read 32 - n_t % 32 floats past its end. memcheck on ggml's exact buffers sees
            // it at every such n_t (31 reads past sx at [36, 128], 3 at [12288, 128]; none at
            // [35, 128] or [12291, 128]); natively it faults only where the next page is
            // unmapped, as at [12288, 128]: 3 floats past a buffer of exactly 3 MiB (it
            // faulted in one run and passed in the next). kedge's C repro under memcheck
            // shows it upstream: 32 errors at [36, 128], none at [35, 128].
            Boundary::ne(
                "D30: n_t not a multiple of the 32-token tile (the last tile's staging reads past sx)",
                0,
                12_288,
                [0, 128, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![35, 36, 12_288, 12_291]),
            // ssm-conv.cu:156 aborts on any other width while supports_op says yes.
            Boundary::param(
                "d_conv past the widths CUDA's kernel has (5 -> 6: GGML_ABORT)",
                kedge_core::param_name!(SsmConvParams, d_conv),
                6,
                [9, 128, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![5, 6]),
        ]
    },
    upstream_line: |c| {
        let d = SsmConvParams::of(c).d_conv;
        let b = [d, c.ne[1], 1, 1];
        repro(
            "SSM_CONV",
            format!(
                "test_ssm_conv({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&b)
            ),
            format!(
                "type={},ne_a={},ne_b={}",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&b)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(2),
    reach: no_reach,
};

// ---- SOLVE_TRI -------------------------------------------------------------------------------

kedge_core::params! {
    /// SOLVE_TRI's right-hand sides.
    pub(crate) struct SolveTriParams {
        k: int(1..=1 << 20) = 3, "columns of b (test_solve_tri's ne_rhs[0])";
    }
}

/// `total` values of `[n, n, ...]` lower-triangular matrices: uniform in [0.1, 1) on and below
/// the diagonal, drawn one after the other from the case's stream 0, zero above it. Made by rows
/// in parallel, each from its place in the stream (row `r` of matrix `m` starts at draw
/// `m * n(n+1)/2 + r(r+1)/2`): the values one sequential pass gives, at the host's cores'
/// speed (`[8, 8, 8388608]`, 2^29 values, took 6 to 23 s on one core of the GPU host).
pub(super) fn lower_triangular(seed: u64, n: usize, total: usize) -> Vec<f32> {
    use rayon::prelude::*;
    let stream = Rng::stream(seed, 0);
    let per_matrix = (n * (n + 1) / 2) as u64;
    let mut a = vec![0f32; total];
    a.par_chunks_mut(n).enumerate().for_each(|(g, row)| {
        let (m, r) = ((g / n) as u64, g % n);
        let mut rng = stream.skipped(m * per_matrix + (r * (r + 1) / 2) as u64);
        for v in row.iter_mut().take(r + 1) {
            *v = rng.uniform(0.1, 1.0);
        }
    });
    a
}

pub(crate) const SOLVE_TRI: GgmlOpEntry = GgmlOpEntry {
    name: "solve_tri",
    upstream: "SOLVE_TRI",
    about: "solves a x = b for lower-triangular a [n, n, ne2, ne3] (diagonal in [0.1, 1), as test_solve_tri draws it) and b [k, n, ne2, ne3]; a shared-memory kernel up to n = 64, k = 32, cuBLAS past",
    dtypes: &[DType::F32],
    params: SolveTriParams::SPECS,
    tensors: |c| {
        if c.ne[0] != c.ne[1] {
            return Err(bad(c, "a must be square: ne[0] == ne[1]"));
        }
        let k = SolveTriParams::of(c).k;
        let rhs = [k, c.ne[1], c.ne[2], c.ne[3]];
        Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, rhs)?,
            output("x", c.dtype, rhs)?,
        ])
    },
    // init_tensor_tril(a, 0.1, 1): uniform on and below the diagonal, zero above.
    inputs: Inputs::Made(|c, s| {
        let a = lower_triangular(c.seed, c.ne[0].max(1) as usize, s[0].nelements() as usize);
        Ok(vec![span_tensor(&s[0], &a), default_input(c, s, 1)])
    }),
    graph: |g, _c, x| Ok(vec![g.solve_tri(x[0], x[1], true, true, false)?]),
    probe: || {
        Some(ProbeBase {
            ne: [8, 8, 1, 1],
            grid_dims: &[2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: false,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[
        s([10, 10, 4, 3]),
        sp!([11, 11, 1, 1], |p: &mut SolveTriParams| p.k = 5),
        sp!([64, 64, 2, 2], |p: &mut SolveTriParams| p.k = 64),
        sp!([64, 64, 2, 2], |p: &mut SolveTriParams| p.k = 10),
        sp!([65, 65, 2, 2], |p: &mut SolveTriParams| p.k = 10),
        sp!([79, 79, 5, 3], |p: &mut SolveTriParams| p.k = 417),
        sp!([128, 128, 4, 2], |p: &mut SolveTriParams| p.k = 32),
    ],
    boundaries: |_| {
        // solve_tri.cu:262: the shared-memory kernel for n <= 64 and k <= 32, cuBLAS's
        // batched trsm past either (n moves two dimensions at once: its sides, 64 and 65,
        // are smoke cases).
        vec![
            Boundary::param(
                "k across 32 (the shared-memory kernel, then cuBLAS)",
                kedge_core::param_name!(SolveTriParams, k),
                33,
                [64, 64, 2, 2],
                Reach::SYNTHETIC,
            )
            .with_values(vec![32, 33]),
        ]
    },
    upstream_line: |c| {
        let k = SolveTriParams::of(c).k;
        let rhs = [k, c.ne[1], c.ne[2], c.ne[3]];
        repro(
            "SOLVE_TRI",
            format!(
                "test_solve_tri({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&rhs)
            ),
            format!(
                "type={},ne_lhs={},ne_rhs={}",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&rhs)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(2),
    reach: no_reach,
};

// ---- LIGHTNING_INDEXER -----------------------------------------------------------------------

kedge_core::params! {
    /// test_lightning_indexer's streams.
    pub(crate) struct LightningParams {
        ns: int(1..=1 << 20) = 1, "streams (parallel sequences): q, k, weights and the result have ns in dim 3";
        nm: int(1..=1 << 20) = 1, "the mask's dim 3 (ns a multiple of it: broadcast)";
    }
}

pub(crate) const LIGHTNING_INDEXER: GgmlOpEntry = GgmlOpEntry {
    name: "lightning_indexer",
    upstream: "LIGHTNING_INDEXER",
    about: "DeepSeek's sparse-attention indexer: for each token and key, sum over heads of w * relu(q . k), plus the f16 mask; ne = [hsk, nh, kv, nb] (test_lightning_indexer's head size, heads, keys, tokens), K in the case's dtype, q and weights f32, the mask made as for flash attention. CUDA takes hsk = 128 with 32 or 64 heads, keys on grid.x, tokens on grid.y, streams on grid.z",
    dtypes: &[
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::Q8_0,
        DType::Q5_1,
        DType::Q5_0,
        DType::Q4_1,
        DType::Q4_0,
        DType::Iq4Nl,
    ],
    params: LightningParams::SPECS,
    tensors: |c| {
        let p = LightningParams::of(c);
        let [hsk, nh, kv, nb] = c.ne;
        if p.ns % p.nm != 0 {
            return Err(bad(c, format!("ns = {} must be a multiple of nm = {}", p.ns, p.nm)));
        }
        Ok(vec![
            input("q", DType::F32, [hsk, nh, nb, p.ns])?,
            input("k", c.dtype, [hsk, 1, kv, p.ns])?,
            input("weights", DType::F32, [nh, nb, 1, p.ns])?,
            input("mask", DType::F16, [kv, nb, 1, p.nm])?,
            output("dst", DType::F32, [kv, nb, 1, p.ns])?,
        ])
    },
    inputs: Inputs::Partly(&[3], |c, s| Ok(vec![(3, kq_mask(c, &s[3], 3))])),
    graph: |g, _c, x| Ok(vec![g.lightning_indexer(x[0], x[1], x[2], x[3])?]),
    probe: || {
        Some(ProbeBase {
            ne: [128, 32, 64, 4],
            grid_dims: &[2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: false,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[
        s([128, 64, 256, 128]),
        s([128, 32, 256, 1]),
        sp!([128, 64, 256, 512], |p: &mut LightningParams| { p.ns = 4; p.nm = 4; }),
        sp!([128, 32, 65, 32], |p: &mut LightningParams| { p.ns = 4; p.nm = 1; }),
        s([128, 64, 7, 32]),
        s([64, 8, 33, 5]),
    ],
    boundaries: |_| {
        vec![
            // B20: lightning-indexer.cu:458, grid(kv blocks, n_batch, n_stream): tokens on
            // grid.y.
            Boundary::ne(
                "B20: tokens (nb) across 65535 (grid.y)",
                3,
                65536,
                [128, 64, 256, 0],
                Reach("DeepSeek V3.2's indexer over a prefill ubatch of 65536 tokens"),
            )
            .with_values(vec![65535, 65536]),
            // B21: the same grid, streams on grid.z.
            Boundary::param(
                "B21: streams (ns) across 65535 (grid.z)",
                kedge_core::param_name!(LightningParams, ns),
                65536,
                [128, 32, 64, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536]),
        ]
    },
    upstream_line: |c| {
        let p = LightningParams::of(c);
        let [hsk, nh, kv, nb] = c.ne;
        repro(
            "LIGHTNING_INDEXER",
            format!(
                "test_lightning_indexer({hsk}, {nh}, {kv}, {nb}, {}, {}, {})",
                p.ns,
                p.nm,
                c.dtype.ggml_type()
            ),
            format!(
                "hsk={hsk},nh={nh},kv={kv},nb={nb},ns={},nm={},type_K={}",
                p.ns, p.nm, c.dtype
            ),
        )
    },
    nmse: Nmse::Fixed(1e-6),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(3),
    reach: no_reach,
};
