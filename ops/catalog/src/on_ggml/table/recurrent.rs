//! Recurrent state: Mamba's selective scan (SSM_SCAN), RWKV-6 and RWKV-7 time mixing
//! (RWKV_WKV6, RWKV_WKV7), gated linear attention (GATED_LINEAR_ATTN) and the gated delta rule
//! (GATED_DELTA_NET). Each carries a state across the tokens of a sequence, so its rows are
//! judged whole; each result is the outputs followed by the final states, flattened.
//!
//! Case model: `ne` is `[head_size, head_count, n_seq_tokens, n_seqs]` (SSM_SCAN:
//! `[head_dim, n_head, n_seq_tokens, n_seqs]`, the shape of its `x`), so the element count of a
//! case is the element count of one of its token inputs.

use super::*;
use kedge_core::OpParams;

/// Input `i` of `specs` uniform in [lo, hi).
fn uniform(c: &Case, s: &TensorSpec, i: usize, lo: f32, hi: f32) -> HostTensor {
    kedge_core::contract::op::random_tensor(c.seed, i as u64, s, lo, hi)
}

/// The case's dimensions, or the reason one is not positive.
fn dims(c: &Case) -> Result<[i64; 4], CaseError> {
    if c.ne.iter().any(|&d| d < 1) {
        return Err(bad(
            c,
            format!("ne = {:?}: every dimension is at least 1", c.ne),
        ));
    }
    Ok(c.ne)
}

// ---- SSM_SCAN --------------------------------------------------------------------------------

kedge_core::params! {
    /// test_ssm_scan's parameters beyond ne = [head_dim, n_head, n_seq_tokens, n_seqs].
    pub(crate) struct SsmScanParams {
        d_state: int(1..=1 << 16) = 128, "state size per head dimension (CUDA's kernels: 16 with head_dim 1, 128 or 256 otherwise)";
        n_group: int(1..=1 << 20) = 1, "groups sharing B and C (n_head is a multiple)";
        xbc_overlap: bool = false, "x, B and C are views of one [d_state, n_head, n_seq_tokens, 2*n_seqs] tensor (needs head_dim = d_state, n_seqs >= 2)";
        k: int(1..=1 << 20) = 1, "states kept (upstream's K): the final one and K - 1 before it (Mamba-2 only, at most n_seq_tokens)";
    }
}

/// Mamba-1 (head_dim 1) decays each state element: A is [d_state, n_head]; Mamba-2 one per
/// head: A is [1, n_head].
fn ssm_a_rows(c: &Case) -> i64 {
    if c.ne[0] > 1 {
        1
    } else {
        SsmScanParams::of(c).d_state
    }
}

/// Elements of SSM_SCAN's result: y (x's shape), then K states per sequence.
fn ssm_out_len(c: &Case) -> i64 {
    let p = SsmScanParams::of(c);
    let [hd, nh, _, ns] = c.ne;
    c.ne.iter().product::<i64>() + p.k * p.d_state * hd * nh * ns
}

pub(crate) const SSM_SCAN: GgmlOpEntry = GgmlOpEntry {
    name: "ssm_scan",
    upstream: "SSM_SCAN",
    about: "Mamba's selective scan: x [head_dim, n_head, n_seq_tokens, n_seqs] (ne), dt [n_head, n_seq_tokens, n_seqs], A (negative decays), B and C [d_state, n_group, n_seq_tokens, n_seqs], the states s [d_state, head_dim, n_head, n_seqs] picked by a permutation ids; f32 y and K final states, flattened",
    dtypes: &[DType::F32],
    params: SsmScanParams::SPECS,
    tensors: |c| {
        let [hd, nh, nt, ns] = dims(c)?;
        let p = SsmScanParams::of(c);
        // ggml's CPU kernel asserts n_head % n_group == 0 (ops.cpp: `nh % ng`).
        if nh % p.n_group != 0 {
            return Err(bad(c, format!("n_head = {nh} is not a multiple of n_group = {}", p.n_group)));
        }
        // ggml_ssm_scan asserts K == 1 where A is per element (Mamba-1).
        if ssm_a_rows(c) != 1 && p.k != 1 {
            return Err(bad(c, "K > 1 needs Mamba-2 (head_dim > 1)"));
        }
        // Slots past the tokens are left as they were: nothing to compare.
        if p.k > 1 && p.k > nt {
            return Err(bad(c, format!("K = {} is more than n_seq_tokens = {nt}", p.k)));
        }
        let mut v = vec![input("s", c.dtype, [p.d_state, hd, nh, ns])?];
        if p.xbc_overlap {
            // The views' rows must be dense (ggml_ssm_scan's `x->nb[1] == x->ne[0]*x->nb[0]`)
            // and lie inside the shared tensor.
            if hd != p.d_state || ns < 2 || p.n_group > nh {
                return Err(bad(
                    c,
                    format!("xbc_overlap needs head_dim = d_state ({hd}, {}), n_seqs >= 2 ({ns}) and n_group <= n_head", p.d_state),
                ));
            }
            v.push(input("xbc", c.dtype, [p.d_state, nh, nt, 2 * ns])?);
        } else {
            v.push(input("x", c.dtype, c.ne)?);
        }
        v.push(input("dt", c.dtype, [nh, nt, ns, 1])?);
        v.push(input("A", c.dtype, [ssm_a_rows(c), nh, 1, 1])?);
        if !p.xbc_overlap {
            v.push(input("B", c.dtype, [p.d_state, p.n_group, nt, ns])?);
            v.push(input("C", c.dtype, [p.d_state, p.n_group, nt, ns])?);
        }
        v.push(input("ids", DType::I32, [ns, 1, 1, 1])?);
        v.push(output("dst", DType::F32, [ssm_out_len(c), 1, 1, 1])?);
        Ok(v)
    },
    // test_ssm_scan's initialize_tensors: ids a permutation of the sequences, a 2-D tensor of
    // n_head rows (A, and any other input of that shape) in [-1, -0.5), the rest in [-1, 1).
    inputs: Inputs::Made(|c, specs| {
        let nh = c.ne[1];
        Ok(specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == Role::Input)
            .map(|(i, s)| {
                if s.dtype == DType::I32 {
                    let mut rng = Rng::stream(c.seed, i as u64);
                    let p: Vec<i32> = permutation(&mut rng, s.ne[0] as usize)
                        .into_iter()
                        .map(|x| x as i32)
                        .collect();
                    span_i32(s, &p)
                } else if s.ne[1] == nh && s.ne[2] == 1 {
                    uniform(c, s, i, -1.0, -0.5)
                } else {
                    uniform(c, s, i, -1.0, 1.0)
                }
            })
            .collect())
    }),
    graph: |g, c, x| {
        let p = SsmScanParams::of(c);
        let [hd, nh, nt, ns] = c.ne;
        let k = p.k;
        if p.xbc_overlap {
            // test_ssm_scan's views: B is sequences 0.., x 1.., C 2.. of the shared tensor.
            let f = 4usize;
            let nb1 = p.d_state as usize * f;
            let nb2 = nb1 * nh as usize;
            let nb3 = nb2 * nt as usize;
            let xv = g.view_4d(x[1], [hd, nh, nt, ns], nb1, nb2, nb3, nb3)?;
            let bv = g.view_4d(x[1], [p.d_state, p.n_group, nt, ns], nb1, nb2, nb3, 0)?;
            let cv = g.view_4d(x[1], [p.d_state, p.n_group, nt, ns], nb1, nb2, nb3, 2 * nb3)?;
            Ok(vec![g.ssm_scan(x[0], xv, x[2], x[3], bv, cv, x[4], k)?])
        } else {
            Ok(vec![g.ssm_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], k)?])
        }
    },
    probe: || {
        Some(ProbeBase {
            ne: [16, 4, 8, 2],
            params: Params::new(),
            // Sequences are on grid.y (ssm-scan.cu:253); tokens carry the element count.
            grid_dims: &[3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: false,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        // Mamba-1: d_state 16, one dimension per head, heads in 128s.
        sp!([1, 128, 4, 2], |p: &mut SsmScanParams| p.d_state = 16),
        sp!([1, 128, 11, 1], |p: &mut SsmScanParams| p.d_state = 16),
        // Mamba-2, grouped B and C.
        sp!([16, 4, 8, 2], |p: &mut SsmScanParams| p.n_group = 2),
        // Falcon-H1's state size.
        sp!([16, 2, 5, 1], |p: &mut SsmScanParams| p.d_state = 256),
        // x, B and C views of one tensor.
        sp!([128, 4, 4, 2], |p: &mut SsmScanParams| p.xbc_overlap = true),
        // States kept for rollback (all slots, and more tokens than slots).
        sp!([16, 4, 4, 2], |p: &mut SsmScanParams| p.k = 4),
        sp!([16, 4, 8, 2], |p: &mut SsmScanParams| p.k = 3),
        // Past 128 tokens: CUDA's SSD matmul path, two chunks.
        s([16, 2, 300, 2]),
    ],
    boundaries: |_| {
        let tokens = |label: &str, base: Ne, values: Vec<i64>| {
            let at = values.last().copied().unwrap_or(1);
            Boundary::ne(label.to_string(), 2, at, base, Reach::SYNTHETIC).with_values(values)
        };
        vec![
            // ssm-scan.cu:829: Mamba-2 past SSM_SSD_MIN_TOKENS (128) tokens takes the SSD
            // matmul path, in chunks of 256, up to SSM_SSD_MAX_TOKENS (8192); the scan past it.
            tokens(
                "n_seq_tokens across 128 (the scan kernel, then SSD matmuls)",
                [16, 2, 0, 1],
                vec![128, 129],
            ),
            tokens(
                "n_seq_tokens across 256 (SSD's second chunk)",
                [16, 2, 0, 1],
                vec![256, 257],
            ),
            tokens(
                "n_seq_tokens across 8192 (SSD's last length, then the scan kernel)",
                [16, 2, 0, 1],
                vec![8192, 8193],
            ),
            // ssm-scan.cu:282: Mamba-1 unrolls 1 to 8 tokens, loops past.
            tokens(
                "n_seq_tokens across 8 (Mamba-1's unrolled token counts, then its loop)",
                [1, 128, 0, 1],
                vec![8, 9],
            )
            .with_params(|p: &mut SsmScanParams| p.d_state = 16),
            // C43: ssm-scan.cu:174 `src6[seq_idx] * src0_nb3` (and :181 `seq_idx * src0_nb3`)
            // multiply two ints: 4096 sequences of 512 KiB states reach 2^31 bytes.
            Boundary::ne(
                "C43: sequences x state bytes across 2^31 (int byte offset)",
                3,
                4097,
                [64, 16, 1, 0],
                Reach::SYNTHETIC,
            )
            .with_values(vec![4096, 4097]),
            // B31: ssm-scan.cu:253 puts the sequences on grid.y.
            Boundary::ne(
                "B31: n_seqs across 65535 (sequences on grid.y)",
                3,
                65536,
                [16, 1, 1, 0],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536]),
            // D20: ssm-scan.cu:815 asserts x's sequence stride fits an int, which
            // supports_op does not check: 2 GiB of x per sequence aborts.
            tokens(
                "D20: x bytes per sequence across 2^31 (GGML_ASSERT nb[3] <= INT_MAX)",
                [64, 16, 0, 1],
                vec![524_287, 524_288],
            ),
        ]
    },
    upstream_line: |c| {
        let p = SsmScanParams::of(c);
        let [hd, nh, nt, ns] = c.ne;
        repro(
            "SSM_SCAN",
            format!(
                "test_ssm_scan({}, {}, {hd}, {nh}, {}, {nt}, {ns}, {}, {})",
                c.dtype.ggml_type(),
                p.d_state,
                p.n_group,
                p.xbc_overlap,
                p.k
            ),
            format!(
                "type={},d_state={},head_dim={hd},n_head={nh},n_group={},n_seq_tokens={nt},n_seqs={ns},xbc_overlap={},K={}",
                c.dtype,
                p.d_state,
                p.n_group,
                b01(p.xbc_overlap),
                p.k
            ),
        )
    },
    // The SSD path (head_dim > 1) keeps f16 intermediates.
    nmse: Nmse::PerCase(|c| if c.ne[0] > 1 { 2e-7 } else { 1e-7 }),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- RWKV_WKV6, RWKV_WKV7, GATED_LINEAR_ATTN: one layout ------------------------------------

/// Tokens of every sequence: `n_seq_tokens * n_seqs`.
fn tokens(c: &Case) -> i64 {
    c.ne[2] * c.ne[3]
}

/// A per-token input `[head_size, head_count, n_tokens]`.
fn per_token(c: &Case, name: &str) -> Result<TensorSpec, CaseError> {
    input(name, c.dtype, [c.ne[0], c.ne[1], tokens(c), 1])
}

/// The carried state `[head_size^2 * head_count, n_seqs]`.
fn wkv_state(c: &Case) -> Result<TensorSpec, CaseError> {
    input(
        "state",
        c.dtype,
        [c.ne[0] * c.ne[0] * c.ne[1], c.ne[3], 1, 1],
    )
}

/// The result: outputs `[C, n_tokens]` then states `[C, head_size * n_seqs]`, C = size x heads.
fn wkv_out(c: &Case) -> Result<TensorSpec, CaseError> {
    let [hs, h, _, ns] = c.ne;
    output("dst", DType::F32, [hs * h, tokens(c) + hs * ns, 1, 1])
}

/// `test_NAME(type, head_count, head_size, n_seq_tokens, n_seqs)` and its vars.
fn wkv_line(ctor: &str, op: &str, c: &Case) -> UpstreamRepro {
    let [hs, h, nt, ns] = c.ne;
    repro(
        op,
        format!("{ctor}({}, {h}, {hs}, {nt}, {ns})", c.dtype.ggml_type()),
        format!(
            "type={},head_count={h},head_size={hs},n_seq_tokens={nt},n_seqs={ns}",
            c.dtype
        ),
    )
}

/// Heads of 64 over two sequences; tokens carry the element count (the blocks are
/// sequences x heads, on grid.x).
fn wkv_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        ne: [64, 2, 4, 2],
        params: Params::new(),
        grid_dims: &[],
        count_dim: Some(2),
        row_dim: false,
        vec_dim: false,
        launch_loop_dims: &[],
    })
}

const WKV_SMOKE: &[Smoke] = &[
    s([64, 4, 1, 1]),
    s([64, 4, 5, 1]),
    s([64, 4, 3, 3]),
    s([128, 2, 4, 2]),
    s([64, 32, 8, 2]),
];

/// The head sizes a CUDA kernel has (64 and 128, `file_line` asserts any other), probed at
/// 32: `tag` names the prediction.
fn head_size_bound(tag: &str, file_line: &str) -> Boundary {
    Boundary::ne(
        format!(
            "{tag}: head_size 32, not 64 or 128 ({file_line} GGML_ASSERT; supports_op says yes)"
        ),
        0,
        64,
        [0, 4, 2, 1],
        Reach::SYNTHETIC,
    )
    .with_values(vec![32, 64])
}

/// The output and state index `T * C + batch * state_size + ...` in int: two tokens for each
/// of 15,888 sequences of 32 heads of 64 put the last state element past 2^31 (the states are
/// most of it: 8 GiB, the token inputs 260 MB each).
fn wkv_index_bound(tag: &str, file_line: &str) -> Boundary {
    Boundary::ne(
        format!("{tag}: outputs + states across 2^31 elements (int index, {file_line})"),
        3,
        15_888,
        [64, 32, 2, 0],
        Reach::SYNTHETIC,
    )
    .with_values(vec![15_887, 15_888])
}

pub(crate) const RWKV_WKV6: GgmlOpEntry = GgmlOpEntry {
    name: "rwkv_wkv6",
    upstream: "RWKV_WKV6",
    about: "RWKV-6 time mixing: k, v, r, decays td [head_size, head_count, n_tokens], bonus tf [head_size, head_count], state [head_size^2 * head_count, n_seqs]; ne = [head_size, head_count, n_seq_tokens, n_seqs]; f32 outputs then states",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        let [hs, h, _, _] = dims(c)?;
        Ok(vec![
            per_token(c, "k")?,
            per_token(c, "v")?,
            per_token(c, "r")?,
            input("tf", c.dtype, [hs, h, 1, 1])?,
            per_token(c, "td")?,
            wkv_state(c)?,
            wkv_out(c)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.rwkv_wkv6(x[0], x[1], x[2], x[3], x[4], x[5])?]),
    probe: wkv_probe,
    smoke: WKV_SMOKE,
    boundaries: |_| {
        vec![
            head_size_bound("D21", "wkv.cu:214"),
            wkv_index_bound("C40", "wkv.cu:64"),
        ]
    },
    upstream_line: |c| wkv_line("test_rwkv_wkv6", "RWKV_WKV6", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

pub(crate) const RWKV_WKV7: GgmlOpEntry = GgmlOpEntry {
    name: "rwkv_wkv7",
    upstream: "RWKV_WKV7",
    about: "RWKV-7 time mixing: r, decays w, k, v, a, b [head_size, head_count, n_tokens] (a and b L2-normalized first, as test_rwkv_wkv7 does), state [head_size^2 * head_count, n_seqs]; ne = [head_size, head_count, n_seq_tokens, n_seqs]; f32 outputs then states",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        dims(c)?;
        Ok(vec![
            per_token(c, "r")?,
            per_token(c, "w")?,
            per_token(c, "k")?,
            per_token(c, "v")?,
            per_token(c, "a")?,
            per_token(c, "b")?,
            wkv_state(c)?,
            wkv_out(c)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| {
        // Unnormalized a and b let the state grow without bound over long sequences.
        let a = g.l2_norm(x[4], 1e-7)?;
        let b = g.l2_norm(x[5], 1e-7)?;
        Ok(vec![g.rwkv_wkv7(x[0], x[1], x[2], x[3], a, b, x[6])?])
    },
    probe: wkv_probe,
    smoke: WKV_SMOKE,
    boundaries: |_| {
        vec![
            // wkv.cu:245: one token per sequence at head size 64 takes a warp per state row.
            Boundary::ne(
                "n_seq_tokens across 1 (a warp per state row, then a thread per column)",
                2,
                2,
                [64, 4, 0, 3],
                Reach::SYNTHETIC,
            )
            .with_values(vec![1, 2]),
            head_size_bound("D22", "wkv.cu:243"),
            wkv_index_bound("C41", "wkv.cu:140"),
            // C42: wkv.cu:177 `batch_i * state_size` in int, one token per sequence: 16384
            // sequences of 32 heads of 64 reach 2^31 state elements.
            Boundary::ne(
                "C42: sequences x state elements across 2^31 (int product, wkv.cu:177)",
                3,
                16_385,
                [64, 32, 1, 0],
                Reach::SYNTHETIC,
            )
            .with_values(vec![16_384, 16_385]),
        ]
    },
    upstream_line: |c| wkv_line("test_rwkv_wkv7", "RWKV_WKV7", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

pub(crate) const GATED_LINEAR_ATTN: GgmlOpEntry = GgmlOpEntry {
    name: "gated_linear_attn",
    upstream: "GATED_LINEAR_ATTN",
    about: "gated linear attention: k, v, q, gates g [head_size, head_count, n_tokens], state [head_size^2 * head_count, n_seqs], outputs scaled by head_size^-0.5; ne = [head_size, head_count, n_seq_tokens, n_seqs]; f32 outputs then states",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        dims(c)?;
        Ok(vec![
            per_token(c, "k")?,
            per_token(c, "v")?,
            per_token(c, "q")?,
            per_token(c, "g")?,
            wkv_state(c)?,
            wkv_out(c)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        // test_gla's scale: pow(head_size, -0.5) in double, passed as float.
        let scale = (c.ne[0] as f64).powf(-0.5) as f32;
        Ok(vec![g.gated_linear_attn(x[0], x[1], x[2], x[3], x[4], scale)?])
    },
    probe: wkv_probe,
    smoke: WKV_SMOKE,
    boundaries: |_| {
        vec![
            head_size_bound("D23", "gla.cu:85"),
            wkv_index_bound("C44", "gla.cu:60"),
        ]
    },
    upstream_line: |c| wkv_line("test_gla", "GATED_LINEAR_ATTN", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- GATED_DELTA_NET -------------------------------------------------------------------------

kedge_core::params! {
    /// test_gated_delta_net's parameters beyond ne = [head_size, head_count, n_seq_tokens, n_seqs].
    pub(crate) struct GatedDeltaNetParams {
        v_repeat: int(1..=1 << 10) = 1, "value heads per query/key head";
        permuted: bool = false, "q, k and v are [head_size, n_seq_tokens, heads, n_seqs] tensors permuted to heads before tokens (rows strided)";
        kda: bool = false, "a gate per element of a head (Kimi's KDA), not one per head";
        k: int(1..=1 << 20) = 1, "states kept (upstream's K): the final one and K - 1 before it (at most n_seq_tokens)";
    }
}

/// Value heads: `head_count * v_repeat`.
fn value_heads(c: &Case) -> i64 {
    c.ne[1] * GatedDeltaNetParams::of(c).v_repeat
}

pub(crate) const GATED_DELTA_NET: GgmlOpEntry = GgmlOpEntry {
    name: "gated_delta_net",
    upstream: "GATED_DELTA_NET",
    about: "the gated delta rule (Qwen3-Next, Kimi linear): q, k [head_size, head_count, n_seq_tokens, n_seqs] (L2-normalized first, as test_gated_delta_net does), v [head_size, head_count * v_repeat, ...], gates g (log decays in [-20, 0)), write strengths beta in [0, 1), state [head_size, head_size, heads, n_seqs]; f32 outputs then K states",
    dtypes: &[DType::F32],
    params: GatedDeltaNetParams::SPECS,
    tensors: |c| {
        let [hs, h, nt, ns] = dims(c)?;
        let p = GatedDeltaNetParams::of(c);
        // Slots past the tokens are left as they were: nothing to compare.
        if p.k > 1 && p.k > nt {
            return Err(bad(c, format!("K = {} is more than n_seq_tokens = {nt}", p.k)));
        }
        let hv = value_heads(c);
        let qk = if p.permuted { [hs, nt, h, ns] } else { [hs, h, nt, ns] };
        let v = if p.permuted { [hs, nt, hv, ns] } else { [hs, hv, nt, ns] };
        let g0 = if p.kda { hs } else { 1 };
        Ok(vec![
            input("q", c.dtype, qk)?,
            input("k", c.dtype, qk)?,
            input("v", c.dtype, v)?,
            input("g", c.dtype, [g0, hv, nt, ns])?,
            input("beta", c.dtype, [1, hv, nt, ns])?,
            input("state", c.dtype, [hs, hs, hv, ns])?,
            output("dst", DType::F32, [hs * hv, nt * ns + p.k * hs * ns, 1, 1])?,
        ])
    },
    // test_gated_delta_net's initialize_tensors, by name: g in [-20, -1e-4), beta in [0, 1),
    // v in [-0.3, 5), the rest in [-1, 1). Permuted, the named tensors are the views, which it
    // skips: the tensors under them (v's too) are drawn in [-1, 1).
    inputs: Inputs::Made(|c, specs| {
        let permuted = GatedDeltaNetParams::of(c).permuted;
        Ok(specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == Role::Input)
            .map(|(i, s)| match s.name.as_str() {
                "g" => uniform(c, s, i, -20.0, -1e-4),
                "beta" => uniform(c, s, i, 0.0, 1.0),
                "v" if !permuted => uniform(c, s, i, -0.3, 5.0),
                _ => uniform(c, s, i, -1.0, 1.0),
            })
            .collect())
    }),
    graph: |g, c, x| {
        let p = GatedDeltaNetParams::of(c);
        let (mut q, mut k, mut v) = (x[0], x[1], x[2]);
        if p.permuted {
            q = g.permute(q, [0, 2, 1, 3])?;
            k = g.permute(k, [0, 2, 1, 3])?;
            v = g.permute(v, [0, 2, 1, 3])?;
        }
        let q = g.l2_norm(q, 1e-6)?;
        let k = g.l2_norm(k, 1e-6)?;
        Ok(vec![g.gated_delta_net(q, k, v, x[3], x[4], x[5], p.k)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [16, 2, 4, 2],
            params: Params::new(),
            // Sequences are on grid.y (gated_delta_net.cu:183); tokens carry the count.
            grid_dims: &[3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: false,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([128, 4, 1, 1]),
        s([16, 8, 1, 1]),
        sp!([16, 4, 3, 1], |p: &mut GatedDeltaNetParams| { p.permuted = true; p.kda = true; }),
        sp!([16, 4, 1, 2], |p: &mut GatedDeltaNetParams| p.kda = true),
        s([64, 4, 4, 2]),
        sp!([32, 4, 4, 2], |p: &mut GatedDeltaNetParams| p.v_repeat = 2),
        sp!([64, 2, 4, 2], |p: &mut GatedDeltaNetParams| p.permuted = true),
        sp!([32, 4, 4, 2], |p: &mut GatedDeltaNetParams| { p.v_repeat = 2; p.kda = true; }),
        s([64, 2, 65, 1]),
        sp!([32, 2, 4, 1], |p: &mut GatedDeltaNetParams| p.k = 4),
        sp!([64, 2, 16, 2], |p: &mut GatedDeltaNetParams| { p.k = 4; p.kda = true; }),
    ],
    boundaries: |_| {
        vec![
            // gated_delta_net.cu:287 (keep_rs): K > 1 writes every state it keeps as it goes.
            Boundary::param(
                "K across 1 (the final state, then snapshots)",
                kedge_core::param_name!(GatedDeltaNetParams, k),
                2,
                [64, 2, 4, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![1, 2]),
            // D24: gated_delta_net.cu:218 aborts on a head size it has no kernel for (16, 32,
            // 64, 128) while supports_op says yes.
            Boundary::ne(
                "D24: head_size 48, not 16, 32, 64 or 128 (gated_delta_net.cu:218 GGML_ABORT)",
                0,
                48,
                [32, 2, 2, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![32, 48]),
            // B30: gated_delta_net.cu:183 puts the sequences on grid.y.
            Boundary::ne(
                "B30: n_seqs across 65535 (sequences on grid.y)",
                3,
                65_536,
                [16, 1, 1, 0],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65_535, 65_536]),
        ]
    },
    upstream_line: |c| {
        let p = GatedDeltaNetParams::of(c);
        let [hs, h, nt, ns] = c.ne;
        repro(
            "GATED_DELTA_NET",
            format!(
                "test_gated_delta_net({}, {h}, {hs}, {nt}, {ns}, {}, {}, {}, {})",
                c.dtype.ggml_type(),
                p.v_repeat,
                p.permuted,
                p.kda,
                p.k
            ),
            format!(
                "type={},head_count={h},head_size={hs},n_seq_tokens={nt},n_seqs={ns},v_repeat={},permuted={},kda={},K={}",
                c.dtype,
                p.v_repeat,
                b01(p.permuted),
                b01(p.kda),
                p.k
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};
