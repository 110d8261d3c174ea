//! Ops that move data: PAD, CONCAT, REPEAT, REPEAT_BACK, GET_ROWS, SET_ROWS, CPY, CONT, ACC,
//! DIAG_MASK_INF, DUP, SET, FILL, DIAG, PAD_REFLECT_1D, GET_ROWS_BACK, ARANGE.

use super::*;
use crate::on_ggml::exec;
use kedge_core::cuda::RunError;
use kedge_core::model::shape::dense_strides;
use kedge_core::OpParams;
use std::collections::HashMap;

fn ne_times(ne: Ne, nr: [i64; 4]) -> Ne {
    [ne[0] * nr[0], ne[1] * nr[1], ne[2] * nr[2], ne[3] * nr[3]]
}

// ---- PAD -------------------------------------------------------------------------------------

kedge_core::params! {
    /// Zeros before (lp) and after (rp) each dimension. test_pad's defaults: one after ne0, ne1.
    pub(crate) struct PadParams {
        lp0: int(0..=1 << 20) = 0, "zeros before dim 0";
        rp0: int(0..=1 << 20) = 1, "zeros after dim 0";
        lp1: int(0..=1 << 20) = 0, "zeros before dim 1";
        rp1: int(0..=1 << 20) = 1, "zeros after dim 1";
        lp2: int(0..=1 << 20) = 0, "zeros before dim 2";
        rp2: int(0..=1 << 20) = 0, "zeros after dim 2";
        lp3: int(0..=1 << 20) = 0, "zeros before dim 3";
        rp3: int(0..=1 << 20) = 0, "zeros after dim 3";
    }
}

impl PadParams {
    fn pads(&self) -> [(i64, i64); 4] {
        [
            (self.lp0, self.rp0),
            (self.lp1, self.rp1),
            (self.lp2, self.rp2),
            (self.lp3, self.rp3),
        ]
    }
}

/// No padding after any dimension (the defaults pad after dims 0 and 1).
fn pad_zero(p: &mut PadParams) {
    p.rp0 = 0;
    p.rp1 = 0;
    p.rp2 = 0;
    p.rp3 = 0;
}

/// pad's result rows `rows` alone: row `(i1, i2, i3)` is x's row `(i1 - lp1, i2 - lp2, i3 -
/// lp3)` with zeros around it along dim 0, or zeros where that row is in the padding. The case
/// of those rows pads only dim 0: x's rows in the sampled order, a zero row for each padding
/// row. Sliced by planes, `[1023, 1023, 2048]` took 76 planes of a million values each, 2.3 s of
/// reference on the GPU machine's host in run 26.
fn pad_rows_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let p = PadParams::of(c);
    let (Some(x), Some(dst)) = (specs.first(), specs.get(1)) else {
        return Err(bad(c, "pad has an input and a result"));
    };
    let [n0, n1, n2, n3] = x.ne;
    let [_, o1, o2, _] = dst.ne;
    // Each sampled row's row of x, where it has one.
    let from: Vec<Option<u64>> = rows
        .iter()
        .map(|&r| {
            let r = r as i64;
            let (j1, j2, j3) = (r % o1 - p.lp1, (r / o1) % o2 - p.lp2, r / (o1 * o2) - p.lp3);
            ((0..n1).contains(&j1) && (0..n2).contains(&j2) && (0..n3).contains(&j3))
                .then(|| (j1 + n1 * (j2 + n2 * j3)) as u64)
        })
        .collect();
    let mut wanted: Vec<u64> = from.iter().flatten().copied().collect();
    wanted.sort_unstable();
    wanted.dedup();
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_rows(c, x, 0, &wanted, range).to_f64();
    let w = n0 as usize;
    let mut vals = vec![0f32; w * rows.len()];
    for (row, src) in vals.chunks_mut(w).zip(&from) {
        if let Some(at) = src.and_then(|s| wanted.binary_search(&s).ok()) {
            for (v, d) in row.iter_mut().zip(&drawn[at * w..(at + 1) * w]) {
                *v = *d as f32;
            }
        }
    }
    let mut sc = c.clone().with_params(|q: &mut PadParams| {
        (q.lp1, q.rp1, q.lp2, q.rp2, q.lp3, q.rp3) = (0, 0, 0, 0, 0, 0);
    });
    sc.ne = [n0, rows.len() as i64, 1, 1];
    let input = HostTensor::from_f32(x.dtype, sc.ne, &vals);
    Ok((sc, vec![input]))
}

pub(crate) const PAD: GgmlOpEntry = GgmlOpEntry {
    name: "pad",
    upstream: "PAD",
    about: "zeros around each dimension (ggml_pad_ext; ggml_pad is the right-side case). The line is test_pad where only the ends of dims 0 and 1 are padded, test_pad_ext otherwise",
    dtypes: &[DType::F32],
    params: PadParams::SPECS,
    tensors: |c| {
        let p = PadParams::of(c).pads();
        let mut dst = c.ne;
        for (d, (l, r)) in dst.iter_mut().zip(p) {
            *d += l + r;
        }
        Ok(vec![input("x", c.dtype, c.ne)?, output("dst", c.dtype, dst)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = PadParams::of(c);
        let i = |v: i64| v as i32;
        Ok(vec![g.pad_ext(
            x[0],
            i(p.lp0),
            i(p.rp0),
            i(p.lp1),
            i(p.rp1),
            i(p.lp2),
            i(p.rp2),
            i(p.lp3),
            i(p.rp3),
        )?])
    },
    // No padding above dim 0, so every probed dimension is the destination's too.
    probe: || {
        Some(ProbeBase {
            params: crate::params_with(|p: &mut PadParams| { p.rp0 = 1; p.rp1 = 0; }),
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([512, 17, 1, 1]),
        sp!([10, 5, 4, 3], |p: &mut PadParams| { p.lp0 = 2; p.lp2 = 1; p.rp3 = 2; }),
        sp!([8, 3, 2, 1], pad_zero),
    ],
    boundaries: |_| {
        let zero = |b: Boundary| b.with_params(pad_zero);
        vec![
            // B5: pad.cu:70, grid (ne0/256, ne1, ne2*ne3) of the destination: ne1 on grid.y.
            zero(Boundary::ne(
                "B5: the destination's ne1 (ne1 + rp1) across 65535 on grid.y",
                1,
                65535,
                [64, 0, 1, 1],
                Reach::SYNTHETIC,
            ))
            .with_params(|p: &mut PadParams| p.rp1 = 1)
            .with_values(vec![65534, 65535]),
            // B6: ne2*ne3 of the destination on grid.z.
            zero(Boundary::ne(
                "B6: the destination's ne2 (ne2 + rp2) across 65535 on grid.z",
                2,
                65535,
                [8, 1, 0, 1],
                Reach::SYNTHETIC,
            ))
            .with_params(|p: &mut PadParams| p.rp2 = 1)
            .with_values(vec![65534, 65535]),
            // C18: pad.cu:28 computes the destination index in int.
            Boundary::ne(
                "C18: destination elements across 2^31 (int dst index)",
                2,
                2049,
                [1023, 1023, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![2048, 2049]),
        ]
    },
    upstream_line: |c| {
        let p = PadParams::of(c);
        let (ty, ne, vne) = (c.dtype.ggml_type(), cpp_arr(&c.ne), vars_arr(&c.ne));
        if p.lp0 == 0 && p.lp1 == 0 && p.lp2 == 0 && p.lp3 == 0 && p.rp2 == 0 && p.rp3 == 0 {
            repro(
                "PAD",
                format!("test_pad({ty}, {ne}, {}, {}, false)", p.rp0, p.rp1),
                format!(
                    "type={},ne_a={vne},pad_0={},pad_1={},circular=0",
                    c.dtype, p.rp0, p.rp1
                ),
            )
        } else {
            let all = p.pads();
            let args = all
                .iter()
                .map(|(l, r)| format!("{l}, {r}"))
                .collect::<Vec<_>>()
                .join(", ");
            let vars = all
                .iter()
                .enumerate()
                .map(|(i, (l, r))| format!("lp{i}={l},rp{i}={r}"))
                .collect::<Vec<_>>()
                .join(",");
            repro(
                "PAD",
                format!("test_pad_ext({ty}, {ne}, {args}, 0, false)"),
                format!("type={},ne_a={vne},{vars},tfrm=0,circular=0", c.dtype),
            )
        }
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(pad_rows_gathered),
    reach: no_reach,
};

// ---- CONCAT ----------------------------------------------------------------------------------

kedge_core::params! {
    /// test_concat's layout: b's size along `dim`, and which input is a view (`v` bits).
    pub(crate) struct ConcatParams {
        dim: int(0..=3) = 2, "the dimension joined along";
        ne_b_d: int(0..=1 << 30) = 0, "b's size along dim (0: a's)";
        v: int(0..=15) = 0, "views: 1 a (first three dims), 2 b (first three), 4 a (last two), 8 b (last two)";
    }
}

fn concat_shapes(c: &Case) -> (usize, i64, Ne, Ne, Ne) {
    let p = ConcatParams::of(c);
    let d = p.dim as usize;
    let nbd = if p.ne_b_d == 0 { c.ne[d] } else { p.ne_b_d };
    let b = with_dim(c.ne, d, nbd);
    let out = with_dim(c.ne, d, c.ne[d] + nbd);
    (d, nbd, c.ne, b, out)
}

pub(crate) const CONCAT: GgmlOpEntry = GgmlOpEntry {
    name: "concat",
    upstream: "CONCAT",
    about: "a and b joined along dim; v makes either a view of a larger tensor exactly as test_concat does (the non-contiguous CUDA path puts dst ne1, ne2, ne3 on the grid)",
    dtypes: &[
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ],
    params: ConcatParams::SPECS,
    tensors: |c| {
        let v = ConcatParams::of(c).v;
        let (_, _, a, b, out) = concat_shapes(c);
        let grow = |ne: Ne, f: [i64; 4]| ne_times(ne, f);
        let a = if v & 1 != 0 {
            view_input("a", c.dtype, a, grow(a, [2, 4, 3, 1]))?
        } else if v & 4 != 0 {
            view_input("a", c.dtype, a, grow(a, [1, 1, 2, 4]))?
        } else {
            input("a", c.dtype, a)?
        };
        let b = if v & 2 != 0 {
            view_input("b", c.dtype, b, grow(b, [3, 2, 4, 1]))?
        } else if v & 8 != 0 {
            view_input("b", c.dtype, b, grow(b, [1, 1, 3, 2]))?
        } else {
            input("b", c.dtype, b)?
        };
        Ok(vec![a, b, output("dst", c.dtype, out)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| Ok(vec![g.concat(x[0], x[1], ConcatParams::of(c).dim as i32)?]),
    // concat.cu:149 launches one kernel per ne[3] slice when a and b are contiguous to
    // ne[2]: ne[3] keeps its grid, shared-memory and thread probes, not its 2^31 crossings
    // (2^26 slices are 67M launches: on an H100 180 s a case, timed out in kedge and in
    // test-backend-ops alike; nothing of a 32-bit index is left to see there).
    probe: || {
        Some(ProbeBase {
            ne: [16, 1, 1, 1],
            params: crate::params_with(|p: &mut ConcatParams| p.dim = 0),
            launch_loop_dims: &[3],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([10, 5, 5, 5]),
        sp!([10, 5, 5, 5], |p: &mut ConcatParams| { p.dim = 0; p.ne_b_d = 3; p.v = 1; }),
        sp!([10, 5, 5, 5], |p: &mut ConcatParams| { p.dim = 1; p.v = 2; }),
        sp!([10, 5, 5, 5], |p: &mut ConcatParams| { p.dim = 3; p.ne_b_d = 2; p.v = 12; }),
    ],
    boundaries: |_| {
        // B7: concat.cu:166, the non-contiguous path's grid is (dst ne1, ne2, ne3).
        let b7 = |dim: usize, axis: &str, base: Ne| {
            Boundary::ne(
                format!("B7: non-contiguous a (v=1): ne[{dim}] across 65535 on grid.{axis}"),
                dim,
                65536,
                base,
                Reach("MLA-style concat of a permuted [d, n_head, n_tokens] view along dim 0 puts n_tokens on grid.y (ubatch >= 65536)"),
            )
            .with_values(vec![65535, 65536])
            .with_params(|p: &mut ConcatParams| { p.dim = 0; p.ne_b_d = 16; p.v = 1; })
        };
        // ne[1] = 2 on the grid.z probe: with ne[1] = ne[2] = 1 the view is contiguous to dim 3,
        // so concat.cu takes its host loop over ne[3] (65,535 launches of the contiguous kernel)
        // and grid.z is never reached.
        vec![b7(2, "y", [16, 1, 0, 1]), b7(3, "z", [16, 2, 1, 0])]
    },
    upstream_line: |c| {
        let p = ConcatParams::of(c);
        let (d, nbd, ..) = concat_shapes(c);
        repro(
            "CONCAT",
            format!(
                "test_concat({}, {}, {nbd}, {d}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.v
            ),
            format!(
                "type={},ne_a={},ne_b_d={nbd},dim={d},v={}",
                c.dtype,
                vars_arr(&c.ne),
                p.v
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::SlicesWhen(|c| match ConcatParams::of(c).dim {
        d @ 0..=2 => Some(d as usize + 1),
        _ => None,
    }),
    reach: no_reach,
};

// ---- REPEAT, REPEAT_BACK ---------------------------------------------------------------------

kedge_core::params! {
    /// How many times each dimension repeats.
    pub(crate) struct RepeatParams {
        nr0: int(1..=1 << 20) = 2, "repeats of dim 0";
        nr1: int(1..=1 << 20) = 2, "repeats of dim 1";
        nr2: int(1..=1 << 20) = 2, "repeats of dim 2";
        nr3: int(1..=1 << 20) = 2, "repeats of dim 3";
    }
}

impl RepeatParams {
    fn nr(&self) -> [i64; 4] {
        [self.nr0, self.nr1, self.nr2, self.nr3]
    }
}

/// Repeated twice along dim 0 only: every probed dimension is the destination's too.
fn repeat_probe(ne0: i64) -> Option<ProbeBase> {
    Some(ProbeBase {
        ne: [ne0, 1, 1, 1],
        params: crate::params_with(|p: &mut RepeatParams| {
            p.nr1 = 1;
            p.nr2 = 1;
            p.nr3 = 1;
        }),
        ..elementwise_probe()?
    })
}

pub(crate) const REPEAT: GgmlOpEntry = GgmlOpEntry {
    name: "repeat",
    upstream: "REPEAT",
    about: "x tiled nr times along each dimension (ggml_repeat; the target tensor test-backend-ops passes only gives the shape)",
    dtypes: &[DType::F32, DType::F16, DType::Bf16, DType::I32, DType::I16],
    params: RepeatParams::SPECS,
    tensors: |c| {
        let dst = ne_times(c.ne, RepeatParams::of(c).nr());
        Ok(vec![input("x", c.dtype, c.ne)?, output("dst", c.dtype, dst)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let d = ne_times(c.ne, RepeatParams::of(c).nr());
        Ok(vec![g.repeat_4d(x[0], d[0], d[1], d[2], d[3])?])
    },
    probe: || repeat_probe(64),
    smoke: &[
        s([10, 5, 4, 3]),
        sp!([10, 5, 4, 1], |p: &mut RepeatParams| { p.nr0 = 1; p.nr1 = 1; p.nr2 = 1; p.nr3 = 1; }),
        sp!([1, 3, 1, 2], |p: &mut RepeatParams| { p.nr0 = 64; p.nr2 = 5; }),
    ],
    boundaries: none,
    upstream_line: |c| {
        let nr = RepeatParams::of(c).nr();
        repro(
            "REPEAT",
            format!(
                "test_repeat({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&nr)
            ),
            format!("type={},ne={},nr={}", c.dtype, vars_arr(&c.ne), vars_arr(&nr)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::SlicesPastChanged,
    reach: no_reach,
};

pub(crate) const REPEAT_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "repeat_back",
    upstream: "REPEAT_BACK",
    about: "sums the nr repetitions of src (ne * nr) into ne: REPEAT's gradient. The generated ne[1] probe at 65536 with nr = [2, 1, 1, 1] is B9 (binbcast.cu:406 puts the destination's ne1 on grid.y; supports_op caps only src ne2*ne3)",
    dtypes: &[DType::F32],
    params: RepeatParams::SPECS,
    tensors: |c| {
        let src = ne_times(c.ne, RepeatParams::of(c).nr());
        Ok(vec![input("src", c.dtype, src)?, output("dst", c.dtype, c.ne)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        // The target only gives the shape (ggml_repeat_back reads b->ne).
        let target = g.new_tensor(ggml_ty(c.dtype)?, &c.ne)?;
        Ok(vec![g.repeat_back(x[0], target)?])
    },
    probe: || repeat_probe(8),
    smoke: &[
        s([8, 6, 4, 2]),
        sp!([8, 6, 4, 2], |p: &mut RepeatParams| { p.nr0 = 1; p.nr3 = 1; }),
        sp!([3, 5, 1, 1], |p: &mut RepeatParams| { p.nr0 = 7; p.nr1 = 1; p.nr2 = 3; p.nr3 = 1; }),
    ],
    boundaries: none,
    upstream_line: |c| {
        let nr = RepeatParams::of(c).nr();
        repro(
            "REPEAT_BACK",
            format!(
                "test_repeat_back({}, {}, {}, false)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&nr)
            ),
            format!("type={},ne={},nr={},v=0", c.dtype, vars_arr(&c.ne), vars_arr(&nr)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::SlicesPastChanged,
    reach: no_reach,
};

// ---- GET_ROWS, SET_ROWS ----------------------------------------------------------------------

kedge_core::params! {
    /// GET_ROWS' rows gathered per batch.
    pub(crate) struct GetRowsParams {
        r: int(1..=1 << 30) = 3, "rows to get (test_get_rows' r)";
    }
}

pub(crate) const GET_ROWS: GgmlOpEntry = GgmlOpEntry {
    name: "get_rows",
    upstream: "GET_ROWS",
    about: "gathers r rows of a [n, m, be1, be2] table by i32 indices in [0, m) (test_get_rows: ne = [n, m, be1, be2]) in the case's dtype (any block format, made by the build under test from kedge's f32 values); the result is f32 [n, r, be1, be2] (i32 for an i32 table). getrows.cu clamps its grid and loops: a control",
    dtypes: GET_ROWS_TYPES,
    params: GetRowsParams::SPECS,
    tensors: |c| {
        let r = GetRowsParams::of(c).r;
        Ok(vec![
            input("table", c.dtype, c.ne)?,
            input("rows", DType::I32, [r, c.ne[2], c.ne[3], 1])?,
            output(
                "dst",
                if c.dtype == DType::I32 { DType::I32 } else { DType::F32 },
                [c.ne[0], r, c.ne[2], c.ne[3]],
            )?,
        ])
    },
    inputs: Inputs::Partly(&[1], |c, s| {
        let m = c.ne[1] as u64;
        let mut rng = Rng::stream(c.seed, 1);
        let n = s[1].nelements() as usize;
        let rows: Vec<i32> = (0..n).map(|_| rng.below(m) as i32).collect();
        Ok(vec![(1, span_i32(&s[1], &rows))])
    }),
    graph: |g, _c, x| Ok(vec![g.get_rows(x[0], x[1])?]),
    probe: || {
        Some(ProbeBase {
            ne: [64, 8, 1, 1],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([10, 5, 1, 1]),
        sp!([256, 80, 2, 3], |p: &mut GetRowsParams| p.r = 17),
        sp!([3, 1000, 1, 1], |p: &mut GetRowsParams| p.r = 700),
    ],
    boundaries: |_| {
        vec![Boundary::param(
            "r across 65535 (rows gathered on the grid, clamped with a loop: a control)",
            kedge_core::param_name!(GetRowsParams, r),
            65536,
            [64, 1024, 1, 1],
            Reach("the token-embedding lookup of a ubatch of 65536 tokens"),
        )
        .with_values(vec![65535, 65536])]
    },
    upstream_line: |c| {
        let r = GetRowsParams::of(c).r;
        let [n, m, be1, be2] = c.ne;
        repro(
            "GET_ROWS",
            format!(
                "test_get_rows({}, {n}, {m}, {r}, {be1}, {be2}, false)",
                c.dtype.ggml_type()
            ),
            format!(
                "type={},n={n},m={m},r={r},be1={be1},be2={be2},v=0",
                c.dtype
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(get_rows_gathered),
    reach: no_reach,
};

kedge_core::params! {
    /// test_set_rows' rows and broadcast.
    pub(crate) struct SetRowsParams {
        r: int(0..=1 << 30) = 0, "rows set per (ne2, ne3) index row (0: all ne1, a permutation)";
        nr2: int(1..=1 << 20) = 1, "the destination's ne2 is ne2 * nr2";
        nr3: int(1..=1 << 20) = 1, "the destination's ne3 is ne3 * nr3";
        type_idx: choice(["i32", "i64"]) = "i32", "the row indices' type (set-rows.cu instantiates its kernel for both)";
    }
}

/// SET_ROWS' index type.
fn set_rows_idx(c: &Case) -> DType {
    if SetRowsParams::of(c).type_idx == "i64" {
        DType::I64
    } else {
        DType::I32
    }
}

fn set_rows_dims(c: &Case) -> (i64, Ne) {
    let p = SetRowsParams::of(c);
    let r = if p.r == 0 { c.ne[1] } else { p.r };
    (r, [c.ne[0], c.ne[1], c.ne[2] * p.nr2, c.ne[3] * p.nr3])
}

/// Index `k` of a made index tensor (i32 or i64, dense).
pub(super) fn index_at(h: &HostTensor, k: usize) -> Option<i64> {
    match h.dtype {
        DType::I32 => h
            .bytes
            .get(4 * k..4 * k + 4)
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        DType::I64 => h
            .bytes
            .get(8 * k..8 * k + 8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes),
        _ => None,
    }
}

/// The made input of spec `i` (`Op::made_inputs`).
pub(super) fn made_at<'a>(
    c: &Case,
    made: &'a [(usize, HostTensor)],
    i: usize,
) -> Result<&'a HostTensor, CaseError> {
    kedge_core::judge::sample::made_input(made, i)
        .ok_or_else(|| bad(c, format!("input {i} was not made")))
}

/// get_rows' output rows `rows` alone: output row `p` (`i1` in batch `b`) is table row
/// `idx[p]` of batch `b`, so the case of those rows is a table of just those rows, gathered in
/// order by indices 0..n.
fn get_rows_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let r = GetRowsParams::of(c).r.max(1) as u64;
    let m = c.ne[1] as u64;
    let idx = made_at(c, made, 1)?;
    let mut picked = Vec::with_capacity(rows.len());
    for &p in rows {
        let i = index_at(idx, p as usize)
            .filter(|&i| (0..m as i64).contains(&i))
            .ok_or_else(|| bad(c, format!("row {p}: no index in range")))?;
        picked.push(i as u64 + m * (p / r));
    }
    let n = rows.len() as i64;
    let mut sc = c.clone();
    sc.ne = [c.ne[0], n, 1, 1];
    let sc = sc.with_param(kedge_core::param_name!(GetRowsParams, r), n);
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let table = kedge_core::judge::sample::drawn_rows(c, &specs[0], 0, &picked, range);
    let order: Vec<f32> = (0..n).map(|j| j as f32).collect();
    let ids = HostTensor::from_f32(DType::I32, [n, 1, 1, 1], &order);
    Ok((sc, vec![table, ids]))
}

/// set_rows' destination rows `rows` alone: destination row `i1` of batch `(i2, i3)` is the
/// source row `k` whose index (`rows[k]` of index row `(i2 % ne2, i3 % ne3)`) is `i1`, or the
/// destination's own row where no index names it. The case of those rows: a destination of
/// just them, the source rows that land there, and their places as indices.
fn set_rows_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let (r, _) = set_rows_dims(c);
    let (r, ne1) = (r as u64, c.ne[1] as u64);
    let idx = made_at(c, made, 2)?;
    // Per index row the sampled rows fall in: the destination rows wanted there, then one pass
    // over that index row for the source row that writes each (the last, where two do). Only
    // the wanted rows are looked up: an index row can hold 2^25 indices.
    let place = |p: u64| {
        let (i1, b) = (p % ne1, p / ne1);
        (i1, b, set_rows_index_row(c, b))
    };
    let mut writer: HashMap<u64, HashMap<u64, Option<u64>>> = HashMap::new();
    for &p in rows {
        let (i1, _, ir) = place(p);
        writer.entry(ir).or_default().insert(i1, None);
    }
    for (ir, wanted) in writer.iter_mut() {
        for k in 0..r {
            if let Some(slot) =
                index_at(idx, (k + r * *ir) as usize).and_then(|i| wanted.get_mut(&(i as u64)))
            {
                *slot = Some(k);
            }
        }
    }
    let (mut dst_rows, mut src_rows, mut places) = (Vec::new(), Vec::new(), Vec::new());
    for (j, &p) in rows.iter().enumerate() {
        let (i1, b, ir) = place(p);
        dst_rows.push(p);
        if let Some(k) = writer.get(&ir).and_then(|w| w.get(&i1)).copied().flatten() {
            src_rows.push(k + r * b);
            places.push(j as f32);
        }
    }
    let (n, w) = (rows.len() as i64, src_rows.len() as i64);
    if w == 0 {
        // r = 0 would mean every row: a case of none set is not one set_rows expresses.
        return Err(bad(c, "no sampled row is set"));
    }
    let mut sc = c.clone();
    sc.ne = [c.ne[0], n, 1, 1];
    let sc = sc
        .with_param(kedge_core::param_name!(SetRowsParams, r), w)
        .with_param(kedge_core::param_name!(SetRowsParams, nr2), 1)
        .with_param(kedge_core::param_name!(SetRowsParams, nr3), 1);
    let range = |i: usize| ranges.get(i).copied().unwrap_or((-1.0, 1.0));
    let dst_in = kedge_core::judge::sample::drawn_rows(c, &specs[0], 0, &dst_rows, range(0));
    let src = kedge_core::judge::sample::drawn_rows(c, &specs[1], 1, &src_rows, range(1));
    let ids = HostTensor::from_f32(specs[2].dtype, [w, 1, 1, 1], &places);
    Ok((sc, vec![dst_in, src, ids]))
}

/// The row of set_rows' indices that destination batch `b` (flat over its ne2 and ne3) reads:
/// the indices broadcast over the destination's `nr2` and `nr3` repeats.
fn set_rows_index_row(c: &Case, b: u64) -> u64 {
    let (_, dst) = set_rows_dims(c);
    let (d2, ne2, ne3) = (
        dst[2].max(1) as u64,
        c.ne[2].max(1) as u64,
        c.ne[3].max(1) as u64,
    );
    let (i2, i3) = (b % d2, b / d2);
    i2 % ne2 + ne2 * (i3 % ne3)
}

/// The destination rows set_rows writes its source rows at their crossings to: the source
/// rows holding elements 2^31 - 1, 2^31, 2^32 - 1 and 2^32 and byte offsets 2^31 and 2^32
/// (f32), each with its neighbours, and its first and last rows. Source row `k` of batch `b`
/// lands on destination row `rows[k]` of that batch, anywhere: ggml's CUDA kernels walk the
/// source with its flat index cast to 32 bits, so past 2^32 elements its last rows are never
/// written, and no destination row at the destination's own crossings shows it.
fn set_rows_scattered(c: &Case, specs: &[TensorSpec], made: &[(usize, HostTensor)]) -> Vec<u64> {
    let (Some(src), Ok(idx)) = (specs.get(1), made_at(c, made, 2)) else {
        return Vec::new();
    };
    let (r, _) = set_rows_dims(c);
    let (r, ne1) = (r.max(1) as u64, c.ne[1] as u64);
    let (n0, rows) = (
        src.ne[0].max(1) as u64,
        src.nelements() / src.ne[0].max(1) as u64,
    );
    let mut at: Vec<u64> = vec![0, rows.saturating_sub(1)];
    for t in [1u64 << 31, 1u64 << 32] {
        for e in [t - 1, t, t / src.dtype.size().max(1)] {
            let s = e / n0;
            at.extend([s.saturating_sub(1), s, s + 1]);
        }
    }
    at.retain(|&s| s < rows);
    at.sort_unstable();
    at.dedup();
    at.into_iter()
        .filter_map(|s| {
            let (k, b) = (s % r, s / r);
            let i1 = index_at(idx, (k + r * set_rows_index_row(c, b)) as usize)?;
            (0..ne1 as i64).contains(&i1).then(|| i1 as u64 + ne1 * b)
        })
        .collect()
}

/// Whether set_rows into the case's dtype is judged on the host with the CPU backend's own row
/// writer (`set_rows_by_cpu_row_writer`): a block format, where the loaded build links its CPU
/// backend (its `from_float` is reachable).
fn set_rows_by_cpu_writer(c: &Case) -> bool {
    c.dtype.is_block()
        && kedge_ggml::Ggml::loaded()
            .is_some_and(|g| exec::ggml_type(c.dtype).is_ok_and(|t| g.has_cpu_row_writer(t)))
}

/// set_rows into a block format, computed as ggml's CPU backend computes it but on every core:
/// each source row written by the CPU backend's own row writer (`from_float`, the function its
/// set_rows calls per row), rows in parallel, then placed into the destination's blocks in the
/// CPU backend's order (batch by batch, index by index, a later index over an earlier one),
/// then dequantized. ggml's CPU backend runs SET_ROWS on one thread (`n_tasks = 1`): a
/// 2^31-element q4_0 destination took 12 s there, most of a 17 s case.
fn set_rows_by_cpu_row_writer(
    c: &Case,
    specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    let ggml = kedge_ggml::Ggml::loaded().ok_or_else(|| {
        bad(
            c,
            "its reference runs the build's CPU row writer, and no ggml build is loaded (--ggml DIR)",
        )
    })?;
    let (Some(dst), Some(src), Some(ids), Some(dst_in), Some(x), Some(idx)) = (
        specs.first(),
        specs.get(1),
        specs.get(2),
        inputs.first(),
        inputs.get(1),
        inputs.get(2),
    ) else {
        return Err(bad(c, "set_rows has a destination, a source and indices"));
    };
    let run = |e: RunError| bad(c, format!("the CPU backend's row writer: {e}"));
    let mut out = exec::input_bytes(ggml, dst, dst_in)
        .map_err(run)?
        .into_owned();
    let vals: &[f32] = bytemuck::try_cast_slice(&x.bytes)
        .map_err(|e| bad(c, format!("the source's values: {e}")))?;
    let ty = exec::ggml_type(dst.dtype).map_err(run)?;
    let rows = ggml
        .cpu_write_rows(ty, vals, src.ne[0])
        .map_err(|e| bad(c, format!("the CPU backend's row writer: {e}")))?
        .ok_or_else(|| {
            bad(
                c,
                format!(
                    "the build's CPU backend has no row writer for {} that kedge can reach",
                    dst.dtype
                ),
            )
        })?;
    let (ne0, r) = (src.ne[0] as u64, src.ne[1] as u64);
    let row = dst.bytes / (dst.nelements() / ne0.max(1)).max(1);
    let (ne1, ne2, ne3) = (dst.ne[1] as u64, dst.ne[2] as u64, dst.ne[3] as u64);
    let (ni1, ni2) = (ids.ne[1].max(1) as u64, ids.ne[2].max(1) as u64);
    let row = row as usize;
    for i3 in 0..ne3 {
        for i2 in 0..ne2 {
            let (i11, i12) = (i2 % ni1, i3 % ni2);
            for k in 0..r {
                let at = (k + r * (i11 + ni1 * i12)) as usize;
                let i1 = index_at(idx, at)
                    .filter(|&i| i >= 0 && (i as u64) < ne1)
                    .ok_or_else(|| bad(c, format!("index {at} is not a row of the destination")))?
                    as u64;
                let (d, s) = (
                    (i1 + ne1 * (i2 + ne2 * i3)) as usize * row,
                    (k + r * (i2 + ne2 * i3)) as usize * row,
                );
                let (Some(to), Some(from)) = (out.get_mut(d..d + row), rows.get(s..s + row)) else {
                    return Err(bad(c, "a row lies past its tensor"));
                };
                to.copy_from_slice(from);
            }
        }
    }
    let Some(dst_out) = specs.get(3) else {
        return Err(bad(c, "set_rows has an output"));
    };
    Ok(vec![exec::output_f64(ggml, dst_out, out).map_err(run)?])
}

pub(crate) const SET_ROWS: GgmlOpEntry = GgmlOpEntry {
    name: "set_rows",
    upstream: "SET_ROWS",
    about: "writes r f32 rows into a destination of the case's dtype (any block format ggml quantizes without an importance matrix: quantized by the kernel under test, compared dequantized) at i32 or i64 row indices (a shuffled subset of 0..ne1 per index row, as test-backend-ops draws them); the result is the destination itself, and rows not set keep its values",
    dtypes: WRITABLE_TYPES,
    params: SetRowsParams::SPECS,
    tensors: |c| {
        let (r, dst) = set_rows_dims(c);
        if r > c.ne[1] {
            return Err(bad(c, format!("r = {r} rows of {}", c.ne[1])));
        }
        Ok(vec![
            input("dst_in", c.dtype, dst)?,
            input("src", DType::F32, with_dim(dst, 1, r))?,
            input("rows", set_rows_idx(c), [r, c.ne[2], c.ne[3], 1])?,
            output("dst", c.dtype, dst)?,
        ])
    },
    inputs: Inputs::Partly(&[2], |c, s| {
        let (r, _) = set_rows_dims(c);
        let mut rng = Rng::stream(c.seed, 2);
        let mut rows = Vec::with_capacity(s[2].nelements() as usize);
        for _ in 0..c.ne[2] * c.ne[3] {
            let p = permutation(&mut rng, c.ne[1] as usize);
            rows.extend(p.into_iter().take(r as usize).map(|x| x as i32));
        }
        let idx = if s[2].dtype == DType::I64 {
            let b: Vec<u8> = rows.iter().flat_map(|&x| i64::from(x).to_le_bytes()).collect();
            HostTensor::from_bytes(DType::I64, s[2].ne, s[2].nb, b)
        } else {
            span_i32(&s[2], &rows)
        };
        Ok(vec![(2, idx)])
    }),
    graph: |g, _c, x| Ok(vec![g.set_rows(x[0], x[1], x[2])?]),
    probe: || {
        Some(ProbeBase {
            ne: [64, 4, 1, 1],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([16, 5, 1, 1]),
        sp!([64, 11, 2, 3], |p: &mut SetRowsParams| p.r = 7),
        sp!([32, 6, 2, 1], |p: &mut SetRowsParams| { p.r = 3; p.nr2 = 3; p.nr3 = 2; }),
        sp!([256, 5, 1, 3], |p: &mut SetRowsParams| { p.r = 1; p.type_idx = "i64"; }),
        sp!([256, 11, 1, 2], |p: &mut SetRowsParams| { p.r = 7; p.nr2 = 2; p.nr3 = 3; p.type_idx = "i64"; }),
    ],
    boundaries: |_| {
        // C22: set-rows.cu:145 decomposes the element index from `(uint32_t) i`: from 2^32
        // source elements the upper rows alias lower ones and are never written.
        vec![Boundary::ne(
            "C22: source elements across 2^32 (uint32 index decomposition)",
            1,
            1_048_577,
            [4096, 0, 1, 1],
            Reach("a source of 2^32 elements in one write; a KV-cache write (n_tokens rows into a large cache) is safe"),
        )
        .with_values(vec![1_048_576, 1_048_577])
        .dtype(DType::F16)]
    },
    upstream_line: |c| {
        let p = SetRowsParams::of(c);
        let (r, _) = set_rows_dims(c);
        repro(
            "SET_ROWS",
            format!(
                "test_set_rows(GGML_TYPE_F32, {}, {}, {}, {{{}, {}}}, {r}, false)",
                c.dtype.ggml_type(),
                set_rows_idx(c).ggml_type(),
                cpp_arr(&c.ne),
                p.nr2,
                p.nr3
            ),
            format!(
                "type_src=f32,type_dst={},type_idx={},ne={},nr23=[{},{}],r={r},v=0",
                c.dtype,
                set_rows_idx(c),
                vars_arr(&c.ne),
                p.nr2,
                p.nr3
            ),
        )
    },
    // test_set_rows: into a 2/4/5/8-bit block format, one quantized value off by one step
    // over the rows set; otherwise 1e-7.
    nmse: Nmse::Allowance(
        |c| {
            let (r, dst) = set_rows_dims(c);
            let n = (c.ne[0] * r * dst[2] * dst[3]).max(1) as f64;
            one_step_off(c.dtype, n, 1.0)
        },
        |_| 1e-7,
    ),
    reference: Reference::F64 {
        applies: set_rows_by_cpu_writer,
        compute: set_rows_by_cpu_row_writer,
        source: "into a block format: the row writer of ggml's CPU backend from the same build (from_float of ggml_get_type_traits_cpu, what the CPU backend's set_rows writes each row with), rows on every core, placed in the CPU backend's order; otherwise (f32, f16, bf16, or a build whose CPU backend is a module) ggml's CPU backend from the same build (test-backend-ops' reference)",
    },
    rows: Rows::Scattered(set_rows_gathered, set_rows_scattered),
    reach: no_reach,
};

// ---- CPY, CONT -------------------------------------------------------------------------------

kedge_core::params! {
    /// CPY's destination.
    pub(crate) struct CpyParams {
        dst: choice(["f32", "f16", "bf16", "i32", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q1_0", "q2_0", "mxfp4", "nvfp4", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "tq2_0", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq1_s", "iq1_m", "iq4_nl", "iq3_s", "iq4_xs"]) = "f32", "the destination's type";
        dst_row_pad: int(0..=1 << 30) = 0, "the destination is a view of [ne0 + pad, ne1, ne2, ne3] (test_cpy's dst_alloc): strided rows";
    }
}

fn cpy_dst_type(c: &Case) -> DType {
    CpyParams::of(c).dst.parse().unwrap_or(DType::F32)
}

/// The conversions ggml defines (`ggml_compute_forward_dup`, which test-backend-ops' CPU
/// reference runs): any type into itself; f32, f16 and bf16 into each other and into a block
/// format it quantizes without an importance matrix; f32 into i32; anything into f32. ggml
/// aborts on (or its CPU backend refuses) every other pair, so it is not a case of the op.
fn cpy_pair(c: &Case) -> Result<(), CaseError> {
    let (s, d) = (c.dtype, cpy_dst_type(c));
    if s != d && IMATRIX_ONLY.contains(&d) {
        return Err(bad(
            c,
            format!("ggml quantizes {d} only with an importance matrix: no copy writes it"),
        ));
    }
    let float = |t: DType| matches!(t, DType::F32 | DType::F16 | DType::Bf16);
    let defined = s == d
        || d == DType::F32
        || (float(s) && d != DType::I32)
        || (s == DType::F32 && d == DType::I32);
    if defined {
        Ok(())
    } else {
        Err(bad(
            c,
            format!("ggml does not convert {s} into {d} (its CPU copy aborts on this pair)"),
        ))
    }
}

fn cpy_dst(c: &Case) -> Result<TensorSpec, CaseError> {
    let p = CpyParams::of(c);
    let d = cpy_dst_type(c);
    if p.dst_row_pad == 0 {
        output("dst", d, c.ne)
    } else {
        let alloc = with_dim(c.ne, 0, c.ne[0] + p.dst_row_pad);
        TensorSpec::strided("dst", Role::Output, d, c.ne, dense_strides(&alloc, d))
    }
}

pub(crate) const CPY: GgmlOpEntry = GgmlOpEntry {
    name: "cpy",
    upstream: "CPY",
    about: "x copied (converted) into a destination of another type (any block format either way: quantized by the kernel under test, compared dequantized), or into strided rows of a larger buffer (dst_row_pad: test_cpy's dst_alloc; the buffer kedge allocates ends at the view's last element)",
    dtypes: ALL_TYPES_I32,
    params: CpyParams::SPECS,
    tensors: |c| {
        cpy_pair(c)?;
        Ok(vec![input("x", c.dtype, c.ne)?, cpy_dst(c)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let d = cpy_dst(c).map_err(|e| kedge_ggml::GraphError::Shape {
            op: "cpy",
            reason: e.to_string(),
        })?;
        let ty = ggml_ty(d.dtype)?;
        let dst = if CpyParams::of(c).dst_row_pad == 0 {
            g.new_tensor(ty, &c.ne)?
        } else {
            let base = g.new_tensor_1d(ty, (d.bytes / d.dtype.size()) as i64)?;
            let nb = [d.nb[1] as usize, d.nb[2] as usize, d.nb[3] as usize];
            g.view(base, &c.ne, &nb, 0)?
        };
        Ok(vec![g.cpy(x[0], dst)?])
    },
    probe: elementwise_probe,
    smoke: &[
        s([10, 10, 10, 1]),
        sp!([64, 3, 2, 1], |p: &mut CpyParams| p.dst = "f16"),
        sp!([33, 7, 1, 1], |p: &mut CpyParams| { p.dst = "f32"; p.dst_row_pad = 31; }),
        sp!([16, 4, 3, 1], |p: &mut CpyParams| { p.dst = "bf16"; p.dst_row_pad = 3; }),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "bf16", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "bf16", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "i32", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "i32", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_1", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_1", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_1", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_1", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q8_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q8_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q1_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q1_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q2_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q2_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "mxfp4", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "mxfp4", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "nvfp4", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "nvfp4", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q2_K", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q2_K", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q3_K", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q3_K", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_K", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q4_K", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_K", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q5_K", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q6_K", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "q6_K", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "tq2_0", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "tq2_0", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "iq4_nl", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "iq4_nl", DType::F16),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "iq4_xs", DType::F32),
        spd!([256, 4, 2, 1], |p: &mut CpyParams| p.dst = "iq4_xs", DType::F16),
    ],
    boundaries: |_| {
        // D1: cpy.cu:421-427, 476: a same-type copy with a contiguous prefix goes through
        // cudaMemcpy2DAsync with the destination's row stride as the pitch; the usual
        // maximum pitch is 2^31 - 1 (likely "invalid pitch argument").
        vec![Boundary::param(
            "D1: the destination's row pitch across 2^31 bytes (cudaMemcpy2DAsync)",
            kedge_core::param_name!(CpyParams, dst_row_pad),
            536_870_911,
            [1, 2, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![536_870_910, 536_870_911])
        .with_params(|p: &mut CpyParams| p.dst = "f32")]
    },
    upstream_line: |c| {
        let p = CpyParams::of(c);
        let d = cpy_dst_type(c);
        let (ts, td) = (c.dtype.ggml_type(), d.ggml_type());
        if p.dst_row_pad == 0 {
            repro(
                "CPY",
                format!("test_cpy({ts}, {td}, {})", cpp_arr(&c.ne)),
                format!(
                    "type_src={},type_dst={d},ne_src={},permute_src=[0,0,0,0],permute_dst=[0,0,0,0],_src_transpose=0",
                    c.dtype,
                    vars_arr(&c.ne)
                ),
            )
        } else {
            let alloc = with_dim(c.ne, 0, c.ne[0] + p.dst_row_pad);
            repro(
                "CPY",
                format!(
                    "test_cpy({ts}, {td}, {ne}, {ne}, {{0, 0, 0, 0}}, {{0, 0, 0, 0}}, false, {})",
                    cpp_arr(&alloc),
                    ne = cpp_arr(&c.ne)
                ),
                format!(
                    "type_src={},type_dst={d},ne_src={ne},ne_dst={ne},permute_src=[0,0,0,0],permute_dst=[0,0,0,0],_src_transpose=0,dst_alloc={}",
                    c.dtype,
                    vars_arr(&alloc),
                    ne = vars_arr(&c.ne)
                ),
            )
        }
    },
    // test_cpy: a copy between equal types is exact; into a 4/5/8-bit block format, one
    // quantized value off by one step over the whole tensor; otherwise 1e-6.
    nmse: Nmse::Allowance(
        |c| {
            let d = cpy_dst_type(c);
            let n = c.ne.iter().product::<i64>().max(1) as f64;
            (d != c.dtype).then(|| one_step_off(d, n, 2.0)).flatten()
        },
        |c| if cpy_dst_type(c) == c.dtype { 0.0 } else { 1e-6 },
    ),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

kedge_core::params! {
    /// CONT's source view.
    pub(crate) struct ContParams {
        slice: bool = false, "the source is test_cont's view slice [ne0, 1, ne2, ne3] (offset ne1 - 1 elements) instead of the transpose";
    }
}

fn cont_out(c: &Case) -> Ne {
    if ContParams::of(c).slice {
        with_dim(c.ne, 1, 1)
    } else {
        [c.ne[1], c.ne[0], c.ne[2], c.ne[3]]
    }
}

pub(crate) const CONT: GgmlOpEntry = GgmlOpEntry {
    name: "cont",
    upstream: "CONT",
    about: "a contiguous copy of x transposed (dims 0 and 1 swapped), or of test_cont's view slice",
    dtypes: &[DType::F32, DType::F16, DType::Bf16, DType::I32],
    params: ContParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, cont_out(c))?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let src = if ContParams::of(c).slice {
            let nb = dense_strides(&c.ne, c.dtype);
            let (nb1, nb2, nb3) = (nb[1] as usize, nb[2] as usize, nb[3] as usize);
            let off = (nb[0] * (c.ne[1] as u64 - 1)) as usize;
            g.view(x[0], &cont_out(c), &[nb1, nb2, nb3], off)?
        } else {
            g.transpose(x[0])?
        };
        Ok(vec![g.cont(src)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 2, 1, 1],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([10, 10, 10, 1]),
        s([1, 300, 2, 1]),
        sp!([40, 9, 3, 1], |p: &mut ContParams| p.slice = true),
    ],
    boundaries: |_| {
        vec![Boundary::ne(
            "D1: the slice's pitch (ne0 * ne1 * 4 bytes) across 2^31 (cudaMemcpy2DAsync)",
            1,
            524_288,
            [1024, 0, 2, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![524_287, 524_288])
        .with_params(|p: &mut ContParams| p.slice = true)]
    },
    upstream_line: |c| {
        let slice = ContParams::of(c).slice;
        repro(
            "CONT",
            format!(
                "test_cont({}, {}, {slice})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!(
                "type={},ne={},use_view_slice={},permute=[0,0,0,0]",
                c.dtype,
                vars_arr(&c.ne),
                b01(slice)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    // A transpose stays inside its plane (it swaps dims 0 and 1): planes are independent. Its
    // rows are x's columns, so where the planes are big or few (one plane of 64 rows of 2^25
    // values, 24 s judged whole on the GPU machine's host) it is sampled in runs of its
    // flat result instead, each run gathered from x element by element. The slice's rows are
    // one row of each of x's planes: a gather of those rows.
    rows: Rows::Choose(|c| {
        if ContParams::of(c).slice {
            &CONT_SLICE_ROWS
        } else if c.ne[2].saturating_mul(c.ne[3]) >= 3 && c.ne[0].saturating_mul(c.ne[1]) <= 1 << 20
        {
            &CONT_TRANSPOSE_PLANES
        } else {
            &CONT_TRANSPOSE_RUNS
        }
    }),
    reach: no_reach,
};

const CONT_SLICE_ROWS: Rows = Rows::Gathered(cont_slice_gathered);
const CONT_TRANSPOSE_PLANES: Rows = Rows::Slices(2);
const CONT_TRANSPOSE_RUNS: Rows = Rows::GatheredRuns(cont_transpose_gathered, cont_run_width);

/// The width of the transpose's runs (`Rows::GatheredRuns`): `run_width` of its result.
fn cont_run_width(specs: &[TensorSpec]) -> Option<u64> {
    specs.get(1).map(|dst| super::run_width(dst.nelements()))
}

/// The transpose's result runs `runs` (each `run_width` of its flat elements) alone. Element
/// `f` of the result `[ne1, ne0, ne2, ne3]` is x's element `(f / ne1 % ne0, f % ne1, plane)`.
/// The case of those runs transposes a `[runs, width]` tensor whose column `r` holds run `r`'s
/// values in order, so its result `[width, runs]` is the runs one after the other. x's other
/// values are never drawn.
fn cont_transpose_gathered(
    c: &Case,
    specs: &[TensorSpec],
    runs: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let (Some(x), Some(w)) = (specs.first(), cont_run_width(specs)) else {
        return Err(bad(c, "cont has an input and a result"));
    };
    let (ne0, ne1) = (c.ne[0].max(1) as u64, c.ne[1].max(1) as u64);
    let k = runs.len() as u64;
    // x's flat element for each value of the new input, in its order: column r, row j.
    let mut at = vec![0u64; (k * w) as usize];
    for (r, &run) in runs.iter().enumerate() {
        for j in 0..w {
            let f = run * w + j;
            let (col, row, plane) = (f % ne1, f / ne1 % ne0, f / (ne0 * ne1));
            at[(r as u64 + k * j) as usize] = row + ne0 * (col + ne1 * plane);
        }
    }
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let vals = kedge_core::judge::sample::drawn_elements(c, x, 0, &at, range);
    let mut sc = c.clone();
    sc.ne = [k as i64, w as i64, 1, 1];
    let input = HostTensor::from_f32(x.dtype, sc.ne, &vals);
    Ok((sc, vec![input]))
}

/// The slice's rows `rows` alone: row `r` of `[ne0, 1, ne2, ne3]` is the `ne0` values of x's
/// plane `r` from its element `ne1 - 1` on (test_cont's view offset, in elements). The case of
/// those rows: a slice one row high of a tensor whose planes are those values in order (its
/// offset, `ne1 - 1` with `ne1` 1, is 0). x's other values are never read: a case of 2^30
/// values judged on a few rows draws those rows alone, not the 4 GiB it was drawing.
fn cont_slice_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let x = specs.first().ok_or_else(|| bad(c, "cont has an input"))?;
    let (ne0, ne1) = (c.ne[0].max(1) as u64, c.ne[1].max(1) as u64);
    // Each sampled row's first value, flat in x, and the (one or two) rows of x it spans.
    let starts: Vec<u64> = rows.iter().map(|&r| (ne1 - 1) + r * ne0 * ne1).collect();
    let mut wanted: Vec<u64> = starts
        .iter()
        .flat_map(|&s| {
            let last = s + ne0 - 1;
            [s / ne0, last / ne0]
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_rows(c, x, 0, &wanted, range);
    let size = drawn.dtype.size() as usize;
    let mut bytes = Vec::with_capacity(starts.len() * ne0 as usize * size);
    for &s in &starts {
        let (row, off) = (s / ne0, (s % ne0) as usize);
        let at = wanted
            .binary_search(&row)
            .map_err(|_| bad(c, format!("x's row {row} was not drawn")))?;
        let from = (at * ne0 as usize + off) * size;
        let span = drawn
            .bytes
            .get(from..from + ne0 as usize * size)
            .ok_or_else(|| bad(c, format!("x's values from {s} are past the rows drawn")))?;
        bytes.extend_from_slice(span);
    }
    let mut sc = c.clone();
    sc.ne = [c.ne[0], 1, rows.len() as i64, 1];
    let input = HostTensor::from_bytes(
        drawn.dtype,
        sc.ne,
        dense_strides(&sc.ne, drawn.dtype),
        bytes,
    );
    Ok((sc, vec![input]))
}

// ---- ACC, DIAG_MASK_INF ----------------------------------------------------------------------

kedge_core::params! {
    /// ACC's b: its shape (0: a's size in that dimension).
    pub(crate) struct AccParams {
        b0: int(0..=1 << 30) = 0, "b's ne0 (0: a's)";
        b1: int(0..=1 << 30) = 0, "b's ne1 (0: a's)";
        b2: int(0..=1 << 30) = 0, "b's ne2 (0: a's)";
        b3: int(0..=1 << 30) = 0, "b's ne3 (0: a's)";
    }
}

fn acc_b(c: &Case) -> Ne {
    let p = AccParams::of(c);
    let pick = |v: i64, a: i64| if v == 0 { a } else { v };
    [
        pick(p.b0, c.ne[0]),
        pick(p.b1, c.ne[1]),
        pick(p.b2, c.ne[2]),
        pick(p.b3, c.ne[3]),
    ]
}

pub(crate) const ACC: GgmlOpEntry = GgmlOpEntry {
    name: "acc",
    upstream: "ACC",
    about: "a with b added into its leading corner (a's strides, offset 0), as test_acc with stride_dim -1",
    dtypes: &[DType::F32],
    params: AccParams::SPECS,
    tensors: |c| {
        let b = acc_b(c);
        if (0..4).any(|i| b[i] > c.ne[i]) {
            return Err(bad(c, format!("b {b:?} does not fit in a {:?}", c.ne)));
        }
        Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, b)?,
            output("dst", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let nb = dense_strides(&c.ne, c.dtype);
        Ok(vec![g.acc(
            x[0],
            x[1],
            nb[1] as usize,
            nb[2] as usize,
            nb[3] as usize,
            0,
        )?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 2, 1, 1],
            params: crate::params_with(|p: &mut AccParams| p.b1 = 1),
            ..elementwise_probe()?
        })
    },
    smoke: &[
        sp!([256, 17, 2, 3], |p: &mut AccParams| p.b1 = 16),
        sp!([64, 8, 3, 1], |p: &mut AccParams| { p.b0 = 32; p.b1 = 3; p.b2 = 2; }),
        s([9, 4, 1, 1]),
    ],
    boundaries: |_| {
        // C23: acc.cu:6 multiplies blockDim.x * blockIdx.x in 32 bits before widening.
        vec![Boundary::ne(
            "C23: elements across 2^32 (32-bit thread index)",
            1,
            65_537,
            [65536, 0, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![65_536, 65_537])
        .with_params(|p: &mut AccParams| { p.b0 = 256; p.b1 = 16; })]
    },
    upstream_line: |c| {
        let b = acc_b(c);
        repro(
            "ACC",
            format!(
                "test_acc({}, {}, {}, -1)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&b)
            ),
            format!(
                "type={},ne_a={},ne_b={},stride_dim=-1",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&b)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(acc_gathered),
    reach: no_reach,
};

/// acc's result rows `rows` alone: row `(i1, i2, i3)` is a's row plus, where b reaches it (b
/// sits in a's leading corner), b's row over its first `b0` values. The case of those rows: a
/// of just them and a b of as many rows, b's own where it reaches the row and zeros where it
/// does not (adding zero leaves a drawn value as it is: a draw is never -0).
fn acc_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let (Some(a), Some(b)) = (specs.first(), specs.get(1)) else {
        return Err(bad(c, "acc has two inputs"));
    };
    let [_, n1, n2, _] = c.ne.map(|n| n.max(1) as u64);
    let [b0, b1, b2, b3] = b.ne.map(|n| n.max(1) as u64);
    let k = rows.len();
    let range = |i: usize| ranges.get(i).copied().unwrap_or((-1.0, 1.0));
    let a_rows = kedge_core::judge::sample::drawn_rows(c, a, 0, rows, range(0));
    // Where b reaches a sampled row: that row's place among the sampled ones and b's row.
    let reached: Vec<(usize, u64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(j, &p)| {
            let (i1, i2, i3) = (p % n1, (p / n1) % n2, p / (n1 * n2));
            (i1 < b1 && i2 < b2 && i3 < b3).then_some((j, i1 + b1 * (i2 + b2 * i3)))
        })
        .collect();
    let b_picked: Vec<u64> = reached.iter().map(|&(_, r)| r).collect();
    let b_drawn = kedge_core::judge::sample::drawn_rows(c, b, 1, &b_picked, range(1)).to_f64();
    let mut b_vals = vec![0f32; k * b0 as usize];
    for (n, &(j, _)) in reached.iter().enumerate() {
        let (to, from) = (j * b0 as usize, n * b0 as usize);
        for (dst, &v) in b_vals[to..to + b0 as usize]
            .iter_mut()
            .zip(&b_drawn[from..from + b0 as usize])
        {
            *dst = v as f32;
        }
    }
    let mut sc = c.clone().with_params(|p: &mut AccParams| {
        p.b0 = b0 as i64;
        (p.b1, p.b2, p.b3) = (0, 0, 0);
    });
    sc.ne = [c.ne[0], k as i64, 1, 1];
    let b_ne = [b0 as i64, k as i64, 1, 1];
    let a_in = HostTensor::from_bytes(
        a_rows.dtype,
        sc.ne,
        dense_strides(&sc.ne, a_rows.dtype),
        a_rows.bytes,
    );
    Ok((sc, vec![a_in, HostTensor::from_f32(b.dtype, b_ne, &b_vals)]))
}

kedge_core::params! {
    /// DIAG_MASK_INF's offset.
    pub(crate) struct DiagMaskParams {
        n_past: int(0..=1 << 30) = 5, "columns past the diagonal kept";
    }
}

/// DIAG_MASK_INF on the host, on every core: x with -inf wherever a column lies more than
/// n_past past its row (`i0 > n_past + i1`, as ggml's CPU backend masks), in every matrix.
/// Exact: the values it keeps are x's. A 2^29-element case spent 2.6 s of 5.6 s in ggml's CPU
/// backend on the GPU machine, reading the input into its buffers and the output back.
fn diag_mask_inf_host(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let Some(x) = inputs.first() else {
        return Err(bad(c, "diag_mask_inf has an input"));
    };
    let n_past = DiagMaskParams::of(c).n_past.max(0) as usize;
    let [n0, n1, n2, n3] = x.ne.map(|n| n.max(0) as usize);
    let mut out = kedge_core::model::host::zeroed_f64(n0 * n1 * n2 * n3);
    if n0 > 0 {
        out.par_chunks_mut(n0)
            .with_min_len(1024)
            .enumerate()
            .for_each(|(r, row)| {
                x.flat_row_f64(r, row);
                for v in row.iter_mut().skip(n_past + r % n1.max(1) + 1) {
                    *v = f64::NEG_INFINITY;
                }
            });
    }
    Ok(vec![out])
}

pub(crate) const DIAG_MASK_INF: GgmlOpEntry = GgmlOpEntry {
    name: "diag_mask_inf",
    upstream: "DIAG_MASK_INF",
    about: "-inf above the diagonal shifted by n_past, in every [ne0, ne1] matrix (the causal mask of attention without flash attention)",
    dtypes: &[DType::F32],
    params: DiagMaskParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| Ok(vec![g.diag_mask_inf(x[0], DiagMaskParams::of(c).n_past as i32)?]),
    probe: || Some(ProbeBase::rows([64, 1, 1, 1])),
    smoke: &[
        s([10, 10, 3, 2]),
        sp!([40, 7, 2, 1], |p: &mut DiagMaskParams| p.n_past = 0),
        sp!([5, 300, 1, 1], |p: &mut DiagMaskParams| p.n_past = 100),
    ],
    boundaries: |_| {
        vec![
            // B10: diagmask.cu:18-20 puts ceil(ncols / 32) column blocks on grid.y.
            Boundary::ne(
                "B10: ne0 across 65535 * 32 (column blocks on grid.y)",
                0,
                2_097_121,
                [0, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![2_097_120, 2_097_121, 2_097_152]),
            // C20: diagmask.cu:11, `const int i = row*ncols + col`.
            Boundary::ne(
                "C20: elements past 2^31 (int element index)",
                1,
                32_769,
                [65536, 0, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![32_768, 32_769]),
        ]
    },
    upstream_line: |c| {
        let n_past = DiagMaskParams::of(c).n_past;
        repro(
            "DIAG_MASK_INF",
            format!(
                "test_diag_mask_inf({}, {}, {n_past})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!("type={},ne={},n_past={n_past}", c.dtype, vars_arr(&c.ne)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: diag_mask_inf_host,
        source: "kedge's mask on the host on every core (exact: the values kept are the input's)",
    },
    rows: Rows::Slices(2),
    reach: no_reach,
};

/// test-backend-ops' NMSE bound for values in [-1, 1) written into a 2/4/5/8-bit block format:
/// one quantized value off by one step, over `n` elements (an eighth of the range for 4 bits,
/// twice that for iq4_nl's spread (`iq4_nl_spread`), half for 5 bits, an eighth for 8 bits),
/// squared, against a mean square of a quarter per element. `None` for other types.
fn one_step_off(d: DType, n: f64, iq4_nl_spread: f64) -> Option<f64> {
    let step = match d {
        DType::Q2_0 | DType::Q4_0 | DType::Q4_1 => 1.0 / 8.0,
        DType::Iq4Nl => iq4_nl_spread / 8.0,
        DType::Q5_0 | DType::Q5_1 => 1.0 / 16.0,
        DType::Q8_0 => 1.0 / 64.0,
        _ => return None,
    };
    Some(step * step / (0.25 * n))
}

// ---- DUP, SET, FILL, DIAG, PAD_REFLECT_1D, GET_ROWS_BACK -------------------------------------

kedge_core::params! {
    /// DUP's source view: test_dup's permutations.
    pub(crate) struct DupParams {
        permute: choice(["none", "0213", "1023", "1203"]) = "none", "the source is x permuted by these axes (ggml_permute) before the copy";
    }
}

/// DUP's permutation axes, if any.
fn dup_axes(c: &Case) -> Option<[i32; 4]> {
    let p = DupParams::of(c).permute;
    let b = p.as_bytes();
    (b.len() == 4 && b.iter().all(u8::is_ascii_digit))
        .then(|| [0, 1, 2, 3].map(|i| i32::from(b[i] - b'0')))
}

/// The shape of x permuted by `axes` (ggml_permute: source dim i goes to `axes[i]`).
fn permuted(ne: Ne, axes: [i32; 4]) -> Ne {
    let mut out = ne;
    for (i, &a) in axes.iter().enumerate() {
        out[a as usize] = ne[i];
    }
    out
}

pub(crate) const DUP: GgmlOpEntry = GgmlOpEntry {
    name: "dup",
    upstream: "DUP",
    about: "a copy of x, or of x permuted (test_dup): a contiguous destination, a source read through its strides",
    // test_dup's types and bf16; ggml's CUDA backend refuses i32 and i16.
    dtypes: &[DType::F32, DType::F16, DType::Bf16, DType::I32, DType::I16],
    params: DupParams::SPECS,
    tensors: |c| {
        let out = dup_axes(c).map_or(c.ne, |a| permuted(c.ne, a));
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, out)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let src = match dup_axes(c) {
            Some(a) => g.permute(x[0], a)?,
            None => x[0],
        };
        Ok(vec![g.dup(src)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 2, 1, 1],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([10, 10, 20, 1]),
        sp!([10, 10, 5, 1], |p: &mut DupParams| p.permute = "0213"),
        sp!([10, 10, 5, 1], |p: &mut DupParams| p.permute = "1023"),
        sp!([10, 8, 3, 1], |p: &mut DupParams| p.permute = "1203"),
    ],
    boundaries: none,
    upstream_line: |c| {
        let perm: Vec<i64> = dup_axes(c).map_or(vec![0, 0, 0, 0], |a| {
            a.iter().map(|&x| i64::from(x)).collect()
        });
        let used = dup_axes(c).is_some();
        repro(
            "DUP",
            format!(
                "test_dup({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&perm)
            ),
            if used {
                format!(
                    "type={},ne={},permute={}",
                    c.dtype,
                    vars_arr(&c.ne),
                    vars_arr(&perm)
                )
            } else {
                format!("type={},ne={}", c.dtype, vars_arr(&c.ne))
            },
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    // A copy keeps each row where it was; a permuted one moves rows: judged whole.
    rows: Rows::IndependentWhen(|c| dup_axes(c).is_none()),
    reach: no_reach,
};

kedge_core::params! {
    /// test_set's layout: the destination doubles the dimensions below `dim`.
    pub(crate) struct SetParams {
        dim: int(0..=3) = 1, "the destination is twice x in every dimension below this one; x is written in its middle";
        inplace: bool = false, "ggml_set_inplace: the result is a view of the destination";
    }
}

/// SET's destination shape and the byte offset of x in it (test_set's layout).
fn set_layout(c: &Case) -> Result<(Ne, u64), CaseError> {
    let dim = SetParams::of(c).dim as usize;
    let mut ne_dst = c.ne;
    for n in ne_dst.iter_mut().take(dim) {
        *n *= 2;
    }
    let nb = dense_strides(&ne_dst, c.dtype);
    let offset = (0..dim)
        .map(|i| ((ne_dst[i] - c.ne[i]) / 2) as u64 * nb[i])
        .sum::<u64>();
    // ggml_set keeps the view's strides and offset as int32 op params and asserts the
    // offset is below 2^30.
    let src_nb = dense_strides(&c.ne, c.dtype);
    if offset >= 1 << 30 || src_nb[1..].iter().any(|&b| b > i32::MAX as u64) {
        return Err(bad(
            c,
            format!(
                "ggml_set keeps strides and the offset as int32 (offset {offset} must be below 2^30, x's strides {:?} below 2^31)",
                &src_nb[1..]
            ),
        ));
    }
    Ok((ne_dst, offset))
}

/// SET on the host, exact: the destination's values with x's written over the run of them
/// x's view covers. test_set's view has x's own dense strides, so x lands as one contiguous
/// run of the destination's elements from the offset on. ggml's CPU backend copies on one
/// thread (`n_tasks = 1`).
fn set_host(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    let [dst_in, x] = inputs else {
        return Err(bad(c, "set has a destination and x"));
    };
    let (_, offset) = set_layout(c)?;
    let from = (offset / c.dtype.size()) as usize;
    let mut out = dst_in.to_f64();
    let xs = x.to_f64();
    let Some(run) = out.get_mut(from..from + xs.len()) else {
        return Err(bad(
            c,
            format!(
                "x's {} values from element {from} run past the destination's {}",
                xs.len(),
                out.len()
            ),
        ));
    };
    run.copy_from_slice(&xs);
    Ok(vec![out])
}

pub(crate) const SET: GgmlOpEntry = GgmlOpEntry {
    name: "set",
    upstream: "SET",
    about: "the destination with x written into its middle (test_set: every dimension below dim doubled), through ggml's strided copy",
    dtypes: &[DType::F32, DType::I32],
    params: SetParams::SPECS,
    tensors: |c| {
        let (ne_dst, _) = set_layout(c)?;
        Ok(vec![
            input("dst_in", c.dtype, ne_dst)?,
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, ne_dst)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let (_, offset) = set_layout(c).map_err(|e| kedge_ggml::GraphError::Shape {
            op: "ggml_set",
            reason: e.to_string(),
        })?;
        let nb = dense_strides(&c.ne, c.dtype);
        let (nb1, nb2, nb3) = (nb[1] as usize, nb[2] as usize, nb[3] as usize);
        let out = if SetParams::of(c).inplace {
            g.set_inplace(x[0], x[1], nb1, nb2, nb3, offset as usize)?
        } else {
            g.set(x[0], x[1], nb1, nb2, nb3, offset as usize)?
        };
        Ok(vec![out])
    },
    probe: || {
        Some(ProbeBase {
            ne: [16, 2, 1, 1],
            ..elementwise_probe()?
        })
    },
    smoke: &[
        s([6, 5, 4, 3]),
        sp!([6, 5, 4, 3], |p: &mut SetParams| p.dim = 2),
        sp!([6, 5, 4, 3], |p: &mut SetParams| {
            p.dim = 3;
            p.inplace = true;
        }),
        sp!([6, 5, 4, 3], |p: &mut SetParams| p.inplace = true),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = SetParams::of(c);
        let t = c.dtype.ggml_type();
        repro(
            "SET",
            format!(
                "test_set({t}, {t}, {}, {}, {})",
                cpp_arr(&c.ne),
                p.dim,
                p.inplace
            ),
            format!(
                "type_src={d},type_dst={d},ne={},dim={},inplace={}",
                vars_arr(&c.ne),
                p.dim,
                b01(p.inplace),
                d = c.dtype
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: set_host,
        source: "kedge's copy on the host (exact; ggml's CPU backend, test-backend-ops' reference, copies on one thread)",
    },
    rows: Rows::Whole,
    reach: no_reach,
};

kedge_core::params! {
    /// FILL's value.
    pub(crate) struct FillParams {
        c: float = 2.0, "the value every element gets";
    }
}

pub(crate) const FILL: GgmlOpEntry = GgmlOpEntry {
    name: "fill",
    upstream: "FILL",
    about: "a tensor of x's shape with every element c (x's values unread); fill.cu indexes in int64: a control",
    dtypes: &[DType::F32, DType::F16],
    params: FillParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| Ok(vec![g.fill_value(x[0], FillParams::of(c).c as f32)?]),
    probe: elementwise_probe,
    smoke: &[
        s([10, 10, 4, 3]),
        sp!([303, 207, 11, 3], |p: &mut FillParams| p.c = -152.0),
        sp!([10, 10, 4, 3], |p: &mut FillParams| p.c = 0.0),
    ],
    boundaries: none,
    upstream_line: |c| {
        let v = FillParams::of(c).c;
        repro(
            "FILL",
            format!(
                "test_fill({}, {}, {})",
                cf(v),
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!("type={},ne={},c={}", c.dtype, vars_arr(&c.ne), fl(v)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

/// DIAG on the host, exact: zeros (faulted in on every core) with x's values on each
/// matrix's diagonal. ggml's CPU backend writes every element on one thread (`n_tasks = 1`),
/// and a 58,113-wide diagonal is 3.4G elements.
fn diag_host(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    let Some(x) = inputs.first() else {
        return Err(bad(c, "diag has an input"));
    };
    let [n, _, n2, n3] = x.ne.map(|d| d.max(0) as usize);
    let mut out = kedge_core::model::host::zeroed_f64(n * n * n2 * n3);
    let mut row = vec![0f64; n];
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            x.row_f64(0, i2, i3, &mut row);
            let plane = (i3 * n2 + i2) * n * n;
            for (i, v) in row.iter().enumerate() {
                out[plane + i * n + i] = *v;
            }
        }
    }
    Ok(vec![out])
}

pub(crate) const DIAG: GgmlOpEntry = GgmlOpEntry {
    name: "diag",
    upstream: "DIAG",
    about: "x [n, 1, ne2, ne3] as the diagonals of n x n matrices (zeros elsewhere)",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        if c.ne[1] != 1 {
            return Err(bad(
                c,
                format!("ne[1] must be 1 (ggml_diag), got {}", c.ne[1]),
            ));
        }
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, [c.ne[0], c.ne[0], c.ne[2], c.ne[3]])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.diag(x[0])?]),
    // The output is ne0 times the input: the count probes are declared on the output.
    probe: || {
        Some(ProbeBase {
            ne: [16, 1, 1, 1],
            grid_dims: &[2, 3],
            count_dim: None,
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[s([10, 1, 4, 3]), s([79, 1, 19, 13]), s([256, 1, 8, 16])],
    boundaries: |_| {
        // C27: diag.cu:13 computes `blockIdx.x * blockDim.x` in 32 bits before widening:
        // past 2^32 output elements the index wraps, the tail is never written.
        vec![Boundary::ne(
            "C27: output elements across 2^32 (blockIdx.x * blockDim.x in 32 bits)",
            2,
            65537,
            [256, 1, 0, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![32768, 65536, 65537])]
    },
    upstream_line: |c| super::elementwise::type_ne_line("test_diag", "DIAG", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: diag_host,
        source: "kedge's diagonal on the host (exact; ggml's CPU backend, test-backend-ops' reference, writes it on one thread)",
    },
    rows: Rows::Slices(2),
    reach: no_reach,
};

kedge_core::params! {
    /// PAD_REFLECT_1D's padding (each below ne0).
    pub(crate) struct PadReflectParams {
        pad_0: int(0..=1 << 30) = 10, "values reflected before ne0";
        pad_1: int(0..=1 << 30) = 9, "values reflected after ne0";
    }
}

pub(crate) const PAD_REFLECT_1D: GgmlOpEntry = GgmlOpEntry {
    name: "pad_reflect_1d",
    upstream: "PAD_REFLECT_1D",
    about: "each row of a 2-D x padded by reflection (test_pad_reflect_1d: ne_a's first two dims)",
    dtypes: &[DType::F32],
    params: PadReflectParams::SPECS,
    tensors: |c| {
        let p = PadReflectParams::of(c);
        if c.ne[2] != 1 || c.ne[3] != 1 {
            return Err(bad(
                c,
                "test_pad_reflect_1d builds a 2-D tensor: ne[2] and ne[3] must be 1",
            ));
        }
        if p.pad_0 >= c.ne[0] || p.pad_1 >= c.ne[0] {
            return Err(bad(
                c,
                format!("each pad must be below ne0 = {} (ggml asserts it)", c.ne[0]),
            ));
        }
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output(
                "dst",
                c.dtype,
                with_dim(c.ne, 0, c.ne[0] + p.pad_0 + p.pad_1),
            )?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = PadReflectParams::of(c);
        Ok(vec![g.pad_reflect_1d(
            x[0],
            p.pad_0 as i32,
            p.pad_1 as i32,
        )?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 2, 1, 1],
            grid_dims: &[1],
            count_dim: Some(1),
            row_dim: true,
            vec_dim: true,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[s([512, 34, 1, 1]), s([3000, 384, 1, 1])],
    boundaries: none,
    upstream_line: |c| {
        let p = PadReflectParams::of(c);
        repro(
            "PAD_REFLECT_1D",
            format!(
                "test_pad_reflect_1d({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.pad_0,
                p.pad_1
            ),
            format!(
                "type={},ne_a={},pad_0={},pad_1={}",
                c.dtype,
                vars_arr(&c.ne),
                p.pad_0,
                p.pad_1
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

/// GET_ROWS_BACK on the host: the destination zeroed (on every core), then each row of grad
/// added into the row its index names, in index order, in f64. ggml's CPU backend runs it on
/// one thread (`n_tasks = 1`), zeroing the whole destination there first; sums of more than
/// one row differ from its f32 ones only in rounding.
fn get_rows_back_host(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    let [grad, rows, _] = inputs else {
        return Err(bad(c, "get_rows_back has grad, rows and in_forward"));
    };
    let [n, m, r, _] = c.ne.map(|x| x.max(0) as usize);
    let mut out = kedge_core::model::host::zeroed_f64(n * m);
    let mut g = vec![0f64; n];
    for i in 0..r {
        let to = rows.get(i, 0, 0, 0);
        if !(0.0..m as f64).contains(&to) {
            return Err(bad(c, format!("row index {to} outside the {m} rows")));
        }
        grad.row_f64(i, 0, 0, &mut g);
        let to = to as usize * n;
        for (o, v) in out[to..to + n].iter_mut().zip(&g) {
            *o += v;
        }
    }
    Ok(vec![out])
}

pub(crate) const GET_ROWS_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "get_rows_back",
    upstream: "GET_ROWS_BACK",
    about: "the gradient of get_rows: the r rows of grad [n, r] summed into the rows of [n, m] the i32 indices name (test_get_rows_back: ne = [n, m, r, 1])",
    // ggml's CUDA backend computes f32 only; its CPU backend f16 too.
    dtypes: &[DType::F32, DType::F16],
    params: &[],
    tensors: |c| {
        let [n, m, r, b] = c.ne;
        if b != 1 {
            return Err(bad(c, "ggml_get_rows_back takes matrices: ne[3] (b) must be 1"));
        }
        Ok(vec![
            input("grad", c.dtype, [n, r, 1, 1])?,
            input("rows", DType::I32, [r, 1, 1, 1])?,
            input("in_forward", c.dtype, [n, m, 1, 1])?,
            output("dst", DType::F32, [n, m, 1, 1])?,
        ])
    },
    inputs: Inputs::Made(|c, s| {
        let m = c.ne[1] as u64;
        let mut rng = Rng::stream(c.seed, 1);
        let n = s[1].nelements() as usize;
        let rows: Vec<i32> = (0..n).map(|_| rng.below(m) as i32).collect();
        Ok(vec![
            default_input(c, s, 0),
            span_i32(&s[1], &rows),
            default_input(c, s, 2),
        ])
    }),
    graph: |g, _c, x| Ok(vec![g.get_rows_back(x[0], x[1], x[2])?]),
    probe: || {
        Some(ProbeBase {
            ne: [64, 8, 4, 1],
            grid_dims: &[1],
            count_dim: Some(1),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[s([10, 5, 3, 1]), s([1, 8, 2, 1]), s([256, 5, 4, 1])],
    boundaries: |_| {
        vec![Boundary::ne(
            "m across 65535 (destination rows on grid.y, clamped with a loop: a control)",
            1,
            65536,
            [1, 0, 4, 1],
            Reach("the embedding gradient of a 70k-row table (upstream's own case)"),
        )
        .with_values(vec![65535, 70000])]
    },
    upstream_line: |c| {
        let [n, m, r, b] = c.ne;
        repro(
            "GET_ROWS_BACK",
            format!(
                "test_get_rows_back({}, {n}, {m}, {r}, {b}, false)",
                c.dtype.ggml_type()
            ),
            format!("type={},n={n},m={m},r={r},b={b},v=0", c.dtype),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: get_rows_back_host,
        source: "kedge's f64 sums of the gathered rows (ggml's CPU backend, test-backend-ops' reference, runs it on one thread)",
    },
    rows: Rows::Whole,
    reach: no_reach,
};

kedge_core::params! {
    /// ARANGE's start and step (its stop is start + ne0 * step).
    pub(crate) struct ArangeParams {
        start: float = 0.0, "the first value";
        step: float(0.0..=f64::MAX) = 1.0, "the difference between neighbours";
    }
}

/// ARANGE's (start, stop, step) for a case of ne0 values, in f32 as ggml takes them, or why
/// the case has no such stop: ggml sizes the result as ceilf((stop - start) / step).
fn arange_args(c: &Case) -> Result<(f32, f32, f32), CaseError> {
    let p = ArangeParams::of(c);
    let (start, step) = (p.start as f32, p.step as f32);
    let stop = start + c.ne[0] as f32 * step;
    let steps = ((stop - start) / step).ceil();
    if stop.partial_cmp(&start) != Some(std::cmp::Ordering::Greater)
        || steps != c.ne[0] as f32
        || c.ne[1..] != [1, 1, 1]
    {
        return Err(bad(
            c,
            format!(
                "ne = {:?}: arange makes [ceilf((stop - start) / step), 1, 1, 1]; with start {start} and step {step}, stop {stop} gives {steps} values",
                c.ne
            ),
        ));
    }
    Ok((start, stop, step))
}

pub(crate) const ARANGE: GgmlOpEntry = GgmlOpEntry {
    name: "arange",
    upstream: "ARANGE",
    about: "start, start + step, ... : ne0 values, f32, from no input (test_arange's stop is start + ne0 * step)",
    dtypes: &[DType::F32],
    params: ArangeParams::SPECS,
    tensors: |c| {
        arange_args(c)?;
        Ok(vec![output("dst", c.dtype, c.ne)?])
    },
    inputs: Inputs::Default,
    graph: |g, c, _x| {
        let (start, stop, step) =
            arange_args(c).map_err(|e| kedge_ggml::GraphError::Shape {
                op: "ggml_arange",
                reason: e.to_string(),
            })?;
        Ok(vec![g.arange(start, stop, step)?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [64, 1, 1, 1],
            grid_dims: &[],
            count_dim: None,
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
            params: Params::new(),
        })
    },
    smoke: &[
        s([10, 1, 1, 1]),
        s([1_048_576, 1, 1, 1]),
        sp!([37, 1, 1, 1], |p: &mut ArangeParams| {
            p.start = -3.0;
            p.step = 0.5;
        }),
    ],
    boundaries: |_| {
        // C30: arange.cu:3-5 takes ne0 and the thread index as int: from 2^31 values ne0 is
        // negative and the launch has no blocks.
        vec![Boundary::ne(
            "C30: ne0 across 2^31 (int ne0 and index in the kernel)",
            0,
            1 << 31,
            [0, 1, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![(1 << 31) - 128, 1 << 31])]
    },
    upstream_line: |c| {
        let (start, stop, step) = arange_args(c).unwrap_or((0.0, 0.0, 0.0));
        repro(
            "ARANGE",
            format!(
                "test_arange({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cf(start.into()),
                cf(stop.into()),
                cf(step.into())
            ),
            format!(
                "type={},start={},stop={},step={}",
                c.dtype,
                fl(start.into()),
                fl(stop.into()),
                fl(step.into())
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};
