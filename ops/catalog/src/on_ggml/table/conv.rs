//! Convolutions: CONV_2D_DW, CONV_2D, CONV_3D, IM2COL_3D, COL2IM_1D.

use super::*;
use kedge_core::OpParams;
use kedge_ggml::Type;

/// ggml's `ggml_calc_conv_output_size`: `(ins + 2p - d(ks - 1) - 1) / s + 1`, or `None` where
/// the padded input is smaller than the dilated kernel (ggml's truncating division would
/// still give one).
fn conv_out(ins: i64, ks: i64, s: i64, p: i64, d: i64) -> Option<i64> {
    let span = ins + 2 * p - d * (ks - 1) - 1;
    (span >= 0).then(|| span / s + 1)
}

/// A dimension a ggml constructor takes as a C `int`.
fn fits_int(v: i64) -> bool {
    i32::try_from(v).is_ok()
}

// ---- CONV_2D_DW ------------------------------------------------------------------------------

kedge_core::params! {
    /// test_conv_2d_dw's kernel and geometry (the same stride, padding and dilation on both
    /// axes).
    pub(crate) struct Conv2dDwParams {
        kw: int(1..=1 << 10) = 3, "kernel width";
        kh: int(1..=1 << 10) = 3, "kernel height";
        stride: int(1..=1 << 10) = 1, "stride, both axes";
        padding: int(0..=1 << 10) = 0, "padding, both axes";
        dilation: int(1..=1 << 10) = 1, "dilation, both axes";
        cwhn: bool = false, "input and kernel laid out channel-most-contiguous (CWHN), as views of the usual shapes";
    }
}

/// The depthwise kernel's shape: one `[kw, kh]` kernel a channel.
fn dw_kernel(c: &Case) -> Ne {
    let p = Conv2dDwParams::of(c);
    [p.kw, p.kh, 1, c.ne[2]]
}

/// Whether the case's input is channel-contiguous as ggml sees it (`ggml_is_contiguous_channels`
/// of the permuted copy): CWHN with more than one channel and a row of more than one pixel.
/// With one channel the permuted copy is plain WHCN.
fn dw_channels_last(c: &Case) -> bool {
    Conv2dDwParams::of(c).cwhn && c.ne[2] > 1
}

fn conv_2d_dw_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = Conv2dDwParams::of(c);
    let (ow, oh) = match (
        conv_out(c.ne[0], p.kw, p.stride, p.padding, p.dilation),
        conv_out(c.ne[1], p.kh, p.stride, p.padding, p.dilation),
    ) {
        (Some(w), Some(h)) => (w, h),
        _ => {
            return Err(bad(
                c,
                "the padded input is smaller than the dilated kernel",
            ))
        }
    };
    if dw_channels_last(c) && c.ne[0] == 1 {
        // The permuted copy is then neither contiguous nor channel-contiguous: ggml's CPU and
        // CUDA kernels abort on that layout.
        return Err(bad(
            c,
            "cwhn with several channels needs an input wider than one pixel",
        ));
    }
    let ne = [ow, oh, c.ne[2], c.ne[3]];
    let out = if dw_channels_last(c) {
        // ggml_conv_2d_dw_direct lays the result out as its input: channels innermost.
        let ts = DType::F32.size();
        let ch = c.ne[2] as u64;
        let nb0 = ch * ts;
        let nb1 = ow as u64 * nb0;
        let nb3 = oh as u64 * nb1;
        TensorSpec::strided("dst", Role::Output, DType::F32, ne, [nb0, nb1, ts, nb3])?
    } else {
        output("dst", DType::F32, ne)?
    };
    Ok(vec![
        input("input", DType::F32, c.ne)?,
        input("kernel", c.dtype, dw_kernel(c))?,
        out,
    ])
}

/// `x` `[W, H, C, N]` made channel-most-contiguous and viewed back as `[W, H, C, N]`; the
/// kernel `[KW, KH, 1, C]` likewise (test-backend-ops' `cwhn` layout).
fn cwhn_views(
    g: &mut kedge_ggml::Graph,
    x: kedge_ggml::Tensor,
    k: kedge_ggml::Tensor,
) -> Result<(kedge_ggml::Tensor, kedge_ggml::Tensor), kedge_ggml::GraphError> {
    let xp = g.permute(x, [1, 2, 0, 3])?;
    let xc = g.cont(xp)?;
    let x = g.permute(xc, [2, 0, 1, 3])?;
    let kp = g.permute(k, [2, 3, 1, 0])?;
    let kc = g.cont(kp)?;
    let k = g.permute(kc, [3, 2, 0, 1])?;
    Ok((x, k))
}

pub(crate) const CONV_2D_DW: GgmlOpEntry = GgmlOpEntry {
    name: "conv_2d_dw",
    upstream: "CONV_2D_DW",
    about: "depthwise 2-D convolution: input [W, H, C, N] f32 by one [kw, kh] kernel a channel ([kw, kh, 1, C], the case's dtype); f32 result, laid out as the input (WHCN or, with cwhn, channels innermost)",
    dtypes: &[DType::F32, DType::F16],
    params: Conv2dDwParams::SPECS,
    tensors: conv_2d_dw_tensors,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Conv2dDwParams::of(c);
        let (input, kernel) = if p.cwhn {
            cwhn_views(g, x[0], x[1])?
        } else {
            (x[0], x[1])
        };
        let i = |v: i64| v as i32;
        Ok(vec![g.conv_2d_dw_direct(
            kernel,
            input,
            i(p.stride),
            i(p.stride),
            i(p.padding),
            i(p.padding),
            i(p.dilation),
            i(p.dilation),
        )?])
    },
    // The grid is one-dimensional: the grid probes are controls; the channels carry the count.
    probe: || {
        Some(ProbeBase {
            ne: [17, 34, 9, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([17, 34, 9, 1]),
        sp!([17, 34, 9, 1], |p: &mut Conv2dDwParams| p.cwhn = true),
        sp!([32, 8, 64, 1], |p: &mut Conv2dDwParams| {
            p.stride = 2;
            p.padding = 1;
        }),
        sp!([32, 8, 64, 1], |p: &mut Conv2dDwParams| {
            p.stride = 2;
            p.padding = 1;
            p.cwhn = true;
        }),
        sp!([13, 11, 5, 2], |p: &mut Conv2dDwParams| {
            p.kw = 5;
            p.kh = 2;
            p.padding = 2;
            p.dilation = 2;
            p.cwhn = true;
        }),
        sp!([9, 7, 1, 3], |p: &mut Conv2dDwParams| {
            p.stride = 3;
            p.padding = 1;
            p.cwhn = true;
        }),
    ],
    boundaries: |_| {
        vec![
            // C50: conv2d-dw.cu:147 `const int total = batches * channels * out_h * out_w`
            // (and :88 in the kernel): the result's element count in int.
            Boundary::ne(
                "C50: the result across 2^31 elements (int total, conv2d-dw.cu:147)",
                2,
                2048,
                [1024, 1024, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![2047, 2048])
            .with_params(|p: &mut Conv2dDwParams| p.padding = 1)
            .dtype(DType::F32),
            // C51: conv2d-dw.cu:37 `input_index` in int: at stride 2 the result stays a
            // quarter of the input, whose last element's index passes 2^31 first.
            Boundary::ne(
                "C51: the input across 2^31 elements at stride 2 (int input index, conv2d-dw.cu:37)",
                2,
                2049,
                [1024, 1024, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![2048, 2049])
            .with_params(|p: &mut Conv2dDwParams| {
                p.stride = 2;
                p.padding = 1;
            })
            .dtype(DType::F32),
        ]
    },
    upstream_line: |c| {
        let p = Conv2dDwParams::of(c);
        let k = dw_kernel(c);
        repro(
            "CONV_2D_DW",
            format!(
                "test_conv_2d_dw({}, {}, {}, {}, {}, {}, {})",
                cpp_arr(&c.ne),
                cpp_arr(&k),
                c.dtype.ggml_type(),
                p.stride,
                p.padding,
                p.dilation,
                p.cwhn
            ),
            format!(
                "ne_input={},ne_kernel={},type_kernel={},stride={},padding={},dilation={},cwhn={}",
                vars_arr(&c.ne),
                vars_arr(&k),
                c.dtype,
                p.stride,
                p.padding,
                p.dilation,
                b01(p.cwhn)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    // Each channel's result is a plane of its own (cwhn, whose result is channels innermost,
    // is sliced so); in WHCN each result row reads `kh` input rows of its channel and that
    // channel's kernel: a gather of those windows.
    rows: Rows::Choose(|c| {
        if Conv2dDwParams::of(c).cwhn {
            &DW_PLANES
        } else {
            &DW_WINDOWS
        }
    }),
    reach: no_reach,
};

const DW_PLANES: Rows = Rows::Slices(2);
const DW_WINDOWS: Rows = Rows::Gathered(conv_2d_dw_gathered);

/// conv_2d_dw's result rows `rows` alone (flat `ne[1..3]` indices of `[OW, OH, C, N]`): row
/// `(oh, ch, n)` is channel `ch`'s kernel over the `kh` input rows of that channel and batch
/// from `oh * stride - padding`, every `dilation`-th. The case of those rows gives each row a
/// channel of its own: the input `[W + 2 * padding, (kh - 1) * dilation + 1, k, 1]` holds row
/// `i`'s window, its padding written as zeros (so the case has none), and the kernel `[kw, kh,
/// 1, k]` the window's channel's kernel. One result row a channel, in the sampled order.
/// `[17, 14035840, 9]` was judged on all 9 of its planes, that is whole: 47 s of reference.
fn conv_2d_dw_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let p = Conv2dDwParams::of(c);
    let (Some(x), Some(kernel), Some(dst)) = (specs.first(), specs.get(1), specs.get(2)) else {
        return Err(bad(c, "conv_2d_dw has an input, a kernel and a result"));
    };
    if p.cwhn {
        return Err(bad(c, "a cwhn result is sliced by channel, not gathered"));
    }
    let [w, h, ch_n, _] = x.ne;
    let [_, oh_n, _, _] = dst.ne;
    let eh = (p.kh - 1) * p.dilation + 1;
    let wp = w + 2 * p.padding;
    // Each sampled row: the first input row of its window (it may start in the padding), its
    // channel and its batch.
    let places: Vec<(i64, i64, i64)> = rows
        .iter()
        .map(|&r| {
            let r = r as i64;
            let (oh, t) = (r % oh_n, r / oh_n);
            (oh * p.stride - p.padding, t % ch_n, t / ch_n)
        })
        .collect();
    let row_of = |y: i64, ch: i64, b: i64| (y + h * (ch + ch_n * b)) as u64;
    let mut wanted: Vec<u64> = places
        .iter()
        .flat_map(|&(y0, ch, b)| {
            (y0..y0 + eh)
                .filter(|y| (0..h).contains(y))
                .map(move |y| row_of(y, ch, b))
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let range = |i: usize| ranges.get(i).copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_rows(c, x, 0, &wanted, range(0)).to_f64();
    let k = places.len() as i64;
    let mut vals = vec![0f32; (wp * eh * k) as usize];
    for (i, &(y0, ch, b)) in places.iter().enumerate() {
        for t in 0..eh {
            let y = y0 + t;
            if !(0..h).contains(&y) {
                continue;
            }
            let Ok(at) = wanted.binary_search(&row_of(y, ch, b)) else {
                continue;
            };
            let to = ((i as i64 * eh + t) * wp + p.padding) as usize;
            let from = at * w as usize;
            for (v, d) in vals[to..to + w as usize]
                .iter_mut()
                .zip(&drawn[from..from + w as usize])
            {
                *v = *d as f32;
            }
        }
    }
    // Each window's channel's kernel: its `kh` rows of `kw`.
    let kernel_rows: Vec<u64> = places
        .iter()
        .flat_map(|&(_, ch, _)| (0..p.kh).map(move |y| (y + p.kh * ch) as u64))
        .collect();
    let kd = kedge_core::judge::sample::drawn_rows(c, kernel, 1, &kernel_rows, range(1));
    let mut sc = c
        .clone()
        .with_params(|q: &mut Conv2dDwParams| q.padding = 0);
    sc.ne = [wp, eh, k, 1];
    let kne = [p.kw, p.kh, 1, k];
    let input = HostTensor::from_f32(DType::F32, sc.ne, &vals);
    let kernel = HostTensor::from_bytes(
        kd.dtype,
        kne,
        kedge_core::model::shape::dense_strides(&kne, kd.dtype),
        kd.bytes,
    );
    Ok((sc, vec![input, kernel]))
}

// ---- CONV_2D ---------------------------------------------------------------------------------

kedge_core::params! {
    /// test_conv_2d's kernel and geometry, in the WHCN layout (its `cwhn` views give a
    /// non-contiguous kernel, which ggml's CPU backend, the reference, does not take).
    pub(crate) struct Conv2dParams {
        kw: int(1..=1 << 10) = 3, "kernel width";
        kh: int(1..=1 << 10) = 3, "kernel height";
        cout: int(1..=1 << 20) = 16, "output channels (the kernel's ne[3])";
        s0: int(1..=1 << 10) = 1, "stride x";
        s1: int(1..=1 << 10) = 1, "stride y";
        p0: int(0..=1 << 10) = 0, "padding x";
        p1: int(0..=1 << 10) = 0, "padding y";
        d0: int(1..=1 << 10) = 1, "dilation x";
        d1: int(1..=1 << 10) = 1, "dilation y";
    }
}

fn conv_2d_kernel(c: &Case) -> Ne {
    let p = Conv2dParams::of(c);
    [p.kw, p.kh, c.ne[2], p.cout]
}

pub(crate) const CONV_2D: GgmlOpEntry = GgmlOpEntry {
    name: "conv_2d",
    upstream: "CONV_2D",
    about: "direct 2-D convolution: input [W, H, IC, N] f32 by the kernel [kw, kh, IC, cout] (the case's dtype); f32 [OW, OH, cout, N]",
    dtypes: &[DType::F32, DType::F16],
    params: Conv2dParams::SPECS,
    tensors: |c| {
        let p = Conv2dParams::of(c);
        let (ow, oh) = match (
            conv_out(c.ne[0], p.kw, p.s0, p.p0, p.d0),
            conv_out(c.ne[1], p.kh, p.s1, p.p1, p.d1),
        ) {
            (Some(w), Some(h)) => (w, h),
            _ => return Err(bad(c, "the padded input is smaller than the dilated kernel")),
        };
        fits_work_buffer(c, &[p.kw, p.kh, c.ne[2]], p.cout, "KW*KH*IC")?;
        Ok(vec![
            input("input", DType::F32, c.ne)?,
            input("kernel", c.dtype, conv_2d_kernel(c))?,
            output("dst", DType::F32, [ow, oh, p.cout, c.ne[3]])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Conv2dParams::of(c);
        let i = |v: i64| v as i32;
        Ok(vec![g.conv_2d_direct(
            x[1],
            x[0],
            i(p.s0),
            i(p.s1),
            i(p.p0),
            i(p.p1),
            i(p.d0),
            i(p.d1),
        )?])
    },
    // A one-dimensional grid: the grid probes are controls; the batch carries the count.
    probe: || {
        Some(ProbeBase {
            ne: [16, 16, 4, 1],
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(3),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([64, 64, 16, 1]),
        sp!([141, 133, 25, 2], |p: &mut Conv2dParams| {
            p.kh = 11;
            p.cout = 12;
            p.s0 = 3;
            p.s1 = 5;
            p.p0 = 5;
            p.p1 = 2;
            p.d0 = 2;
            p.d1 = 4;
        }),
        sp!([1, 1, 1, 2], |p: &mut Conv2dParams| {
            p.kw = 1;
            p.kh = 2;
            p.cout = 1;
            p.s1 = 5;
            p.p0 = 5;
            p.p1 = 5;
            p.d0 = 2;
            p.d1 = 4;
        }),
        sp!([141, 1, 1, 2], |p: &mut Conv2dParams| {
            p.kw = 11;
            p.kh = 1;
            p.cout = 12;
            p.s0 = 3;
            p.s1 = 5;
            p.p0 = 5;
            p.p1 = 2;
            p.d0 = 2;
            p.d1 = 4;
        }),
    ],
    boundaries: |_| {
        // C52: conv2d.cu:159 `const int64_t total = B * OC * OH * OW` multiplies four ints in
        // int before widening: a 1x1 kernel over a 1024x1024 image, 2048 output channels.
        vec![Boundary::param(
            "C52: the result across 2^31 elements (int product, conv2d.cu:159)",
            kedge_core::param_name!(Conv2dParams, cout),
            2048,
            [1024, 1024, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![2047, 2048])
        .with_params(|p: &mut Conv2dParams| {
            p.kw = 1;
            p.kh = 1;
        })
        .dtype(DType::F32)]
    },
    upstream_line: |c| {
        let p = Conv2dParams::of(c);
        let k = conv_2d_kernel(c);
        repro(
            "CONV_2D",
            format!(
                "test_conv_2d({}, {}, {}, {}, {}, {}, {}, {}, {}, false)",
                cpp_arr(&c.ne),
                cpp_arr(&k),
                c.dtype.ggml_type(),
                p.s0,
                p.s1,
                p.p0,
                p.p1,
                p.d0,
                p.d1
            ),
            format!(
                "ne_input={},ne_kernel={},type_kernel={},stride0={},stride1={},padding0={},padding1={},dilation0={},dilation1={},cwhn=0",
                vars_arr(&c.ne),
                vars_arr(&k),
                c.dtype,
                p.s0,
                p.s1,
                p.p0,
                p.p1,
                p.d0,
                p.d1
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(3),
    reach: no_reach,
};

// ---- CONV_3D ---------------------------------------------------------------------------------

kedge_core::params! {
    /// test_conv_3d's channels, kernel and geometry; the case is `[IW, IH, ID, N]`.
    pub(crate) struct Conv3dParams {
        ic: int(1..=1 << 20) = 3, "input channels (the input's ne[3] is IC*N)";
        oc: int(1..=1 << 20) = 4, "output channels (the kernel's ne[3] is IC*OC)";
        kw: int(1..=1 << 10) = 3, "kernel width";
        kh: int(1..=1 << 10) = 3, "kernel height";
        kd: int(1..=1 << 10) = 3, "kernel depth";
        s0: int(1..=1 << 10) = 1, "stride x";
        s1: int(1..=1 << 10) = 1, "stride y";
        s2: int(1..=1 << 10) = 1, "stride z";
        p0: int(0..=1 << 10) = 0, "padding x";
        p1: int(0..=1 << 10) = 0, "padding y";
        p2: int(0..=1 << 10) = 0, "padding z";
        d0: int(1..=1 << 10) = 1, "dilation x";
        d1: int(1..=1 << 10) = 1, "dilation y";
        d2: int(1..=1 << 10) = 1, "dilation z";
    }
}

/// ggml's CPU work buffer for CONV_2D and CONV_3D (`GGML_IM2COL_WORK_SIZE`, ggml-cpu/ops.h),
/// before the cache line a thread it adds.
const IM2COL_WORK_SIZE: i64 = 16 << 20;

/// ggml's CPU kernel of CONV_2D and CONV_3D, the reference, asserts that one output position
/// fits its work buffer: its im2col row (the product of `kernel`, the kernel's window and input
/// channels, in the case's dtype) and its `out_channels` f32 results (ops.cpp
/// `space_per_patch`). `what` names the row's factors in the refusal.
fn fits_work_buffer(
    c: &Case,
    kernel: &[i64],
    out_channels: i64,
    what: &str,
) -> Result<(), CaseError> {
    let bytes = kernel
        .iter()
        .chain([&(c.dtype.size() as i64)])
        .try_fold(1i64, |a, &x| a.checked_mul(x))
        .and_then(|row| row.checked_add(out_channels.checked_mul(4)?));
    match bytes {
        Some(b) if b <= IM2COL_WORK_SIZE => Ok(()),
        _ => Err(bad(
            c,
            format!("{what} kernel elements and their f32 results a position pass the CPU kernel's 16 MiB work buffer"),
        )),
    }
}

fn conv_3d_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = Conv3dParams::of(c);
    let [iw, ih, id, n] = c.ne;
    // test_conv_3d hands IC, N and OC to ggml_conv_3d_direct as C ints.
    if !fits_int(n) {
        return Err(bad(c, "N (ne[3]) must fit a C int (ggml takes it as one)"));
    }
    let (Some(icn), Some(icoc), Some(ocn)) = (
        p.ic.checked_mul(n),
        p.ic.checked_mul(p.oc),
        p.oc.checked_mul(n),
    ) else {
        return Err(bad(c, "IC*N, IC*OC or OC*N overflows int64"));
    };
    let (ow, oh, od) = match (
        conv_out(iw, p.kw, p.s0, p.p0, p.d0),
        conv_out(ih, p.kh, p.s1, p.p1, p.d1),
        conv_out(id, p.kd, p.s2, p.p2, p.d2),
    ) {
        (Some(w), Some(h), Some(d)) => (w, h, d),
        _ => {
            return Err(bad(
                c,
                "the padded input is smaller than the dilated kernel",
            ))
        }
    };
    fits_work_buffer(c, &[p.kw, p.kh, p.kd, p.ic], p.oc, "KW*KH*KD*IC")?;
    Ok(vec![
        input("input", DType::F32, [iw, ih, id, icn])?,
        input("kernel", c.dtype, [p.kw, p.kh, p.kd, icoc])?,
        output("dst", DType::F32, [ow, oh, od, ocn])?,
    ])
}

pub(crate) const CONV_3D: GgmlOpEntry = GgmlOpEntry {
    name: "conv_3d",
    upstream: "CONV_3D",
    about: "direct 3-D convolution: input [IW, IH, ID, IC*N] f32 by the kernel [KW, KH, KD, IC*OC] (the case's dtype) into f32 [OW, OH, OD, OC*N]; the case is [IW, IH, ID, N]. ggml's CUDA backend has no CONV_3D in the pinned snapshot (its CPU, Vulkan, Metal and SYCL backends do); the CPU kernel takes a kernel row of at most 16 MiB",
    dtypes: &[DType::F32, DType::F16],
    params: Conv3dParams::SPECS,
    tensors: conv_3d_tensors,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Conv3dParams::of(c);
        let i = |v: i64| v as i32;
        Ok(vec![g.conv_3d_direct(
            x[1],
            x[0],
            i(p.s0),
            i(p.s1),
            i(p.s2),
            i(p.p0),
            i(p.p1),
            i(p.p2),
            i(p.d0),
            i(p.d1),
            i(p.d2),
            i(p.ic),
            i(c.ne[3]),
            i(p.oc),
        )?])
    },
    // One channel in and out, padded to keep the size: the case's element count is the
    // input's and the result's. The batch carries the count.
    probe: || {
        Some(ProbeBase {
            ne: [8, 8, 8, 1],
            params: crate::params_with(|p: &mut Conv3dParams| {
                p.ic = 1;
                p.oc = 1;
                p.p0 = 1;
                p.p1 = 1;
                p.p2 = 1;
            }),
            grid_dims: &[1, 2, 3],
            count_dim: Some(3),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([20, 22, 18, 1]),
        sp!([20, 22, 18, 2], |p: &mut Conv3dParams| {
            p.s0 = 2;
            p.s1 = 2;
            p.s2 = 2;
            p.p0 = 1;
            p.p1 = 1;
            p.p2 = 1;
            p.d0 = 2;
            p.d1 = 2;
            p.d2 = 2;
        }),
        sp!([20, 22, 18, 2], |p: &mut Conv3dParams| {
            p.ic = 1;
            p.oc = 1;
            p.kw = 5;
            p.kh = 1;
            p.kd = 3;
            p.s0 = 2;
            p.p0 = 2;
            p.p2 = 1;
            p.d2 = 2;
        }),
        sp!([8, 8, 8, 1], |p: &mut Conv3dParams| {
            p.ic = 4;
            p.oc = 8;
            p.kw = 1;
            p.kh = 1;
            p.kd = 1;
        }),
        // More positions than one pass of the CPU kernel's work buffer takes (4760 in f32,
        // 9360 in f16): it loops.
        sp!([20, 22, 18, 2], |p: &mut Conv3dParams| {
            p.ic = 32;
            p.oc = 16;
            p.p0 = 1;
            p.p1 = 1;
            p.p2 = 1;
        }),
        // Padding wider than the input: the kernel mostly reads zeros.
        sp!([1, 2, 1, 3], |p: &mut Conv3dParams| {
            p.ic = 2;
            p.oc = 3;
            p.kh = 2;
            p.kd = 2;
            p.s1 = 3;
            p.p0 = 1;
            p.p1 = 2;
            p.p2 = 1;
            p.d2 = 2;
        }),
    ],
    boundaries: |_| {
        // ggml's CPU kernel (ops.cpp, ggml_compute_forward_conv_3d_impl) takes the output
        // positions in passes of wsize / space_per_patch (rounded down to a multiple of 8): a
        // 1x1x1 kernel, one input channel and 4095 output channels take 16 KiB a position, so
        // a pass is 1024 positions (below 128 threads, whose cache lines the buffer adds).
        vec![Boundary::ne(
            "the positions N*OD*OH*OW across one pass of the CPU kernel's work buffer (1024 at 16 KiB a position; looped: a control)",
            0,
            1025,
            [0, 1, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![1024, 1025])
        .with_params(|p: &mut Conv3dParams| {
            p.ic = 1;
            p.oc = 4095;
            p.kw = 1;
            p.kh = 1;
            p.kd = 1;
        })
        .dtype(DType::F32)]
    },
    upstream_line: |c| {
        let p = Conv3dParams::of(c);
        let [iw, ih, id, n] = c.ne;
        repro(
            "CONV_3D",
            format!(
                "test_conv_3d({n}, {}, {id}, {ih}, {iw}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p.ic,
                p.oc,
                p.kd,
                p.kh,
                p.kw,
                p.s0,
                p.s1,
                p.s2,
                p.p0,
                p.p1,
                p.p2,
                p.d0,
                p.d1,
                p.d2,
                c.dtype.ggml_type()
            ),
            format!(
                "N={n},IC={},ID={id},IH={ih},IW={iw},OC={},KD={},KH={},KW={},s0={},s1={},s2={},p0={},p1={},p2={},d0={},d1={},d2={},type_kernel={}",
                p.ic,
                p.oc,
                p.kd,
                p.kh,
                p.kw,
                p.s0,
                p.s1,
                p.s2,
                p.p0,
                p.p1,
                p.p2,
                p.d0,
                p.d1,
                p.d2,
                c.dtype
            ),
        )
    },
    nmse: Nmse::Fixed(5e-4),
    reference: Reference::CpuBackend,
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- IM2COL_3D -------------------------------------------------------------------------------

kedge_core::params! {
    /// test_im2col_3d's kernel shape, channels and geometry; the case's dtype is the result's.
    pub(crate) struct Im2col3dParams {
        kw: int(1..=1 << 10) = 3, "kernel width";
        kh: int(1..=1 << 10) = 3, "kernel height";
        kd: int(1..=1 << 10) = 3, "kernel depth";
        k3: int(1..=1 << 20) = 1, "the kernel's ne[3] (OC*IC; its shape only)";
        ic: int(1..=1 << 20) = 3, "input channels (the input's ne[3] is N*IC)";
        s0: int(1..=1 << 10) = 1, "stride x";
        s1: int(1..=1 << 10) = 1, "stride y";
        s2: int(1..=1 << 10) = 1, "stride z";
        p0: int(0..=1 << 10) = 1, "padding x";
        p1: int(0..=1 << 10) = 1, "padding y";
        p2: int(0..=1 << 10) = 1, "padding z";
        d0: int(1..=1 << 10) = 1, "dilation x";
        d1: int(1..=1 << 10) = 1, "dilation y";
        d2: int(1..=1 << 10) = 1, "dilation z";
        kernel: choice(["f16", "f32"]) = "f16", "the kernel's type (its shape only)";
        v: bool = false, "the input a view of [W, H, D, N*IC], each dimension 2 smaller";
    }
}

fn im2col_3d_kernel(c: &Case) -> Ne {
    let p = Im2col3dParams::of(c);
    [p.kw, p.kh, p.kd, p.k3]
}

/// The input's shape as the op sees it: the case's, or with `v` the view 2 smaller on each
/// dimension.
fn im2col_3d_input(c: &Case) -> Ne {
    if Im2col3dParams::of(c).v {
        c.ne.map(|n| n - 2)
    } else {
        c.ne
    }
}

fn im2col_3d_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = Im2col3dParams::of(c);
    let b = im2col_3d_input(c);
    if b.iter().any(|&n| n < 1) {
        return Err(bad(c, "the view needs every dimension at least 3"));
    }
    if b[3] % p.ic != 0 {
        return Err(bad(
            c,
            format!(
                "the input's ne[3] ({}) is not a whole number of ic = {} channels",
                b[3], p.ic
            ),
        ));
    }
    if !fits_int(p.ic) {
        return Err(bad(c, "ic must fit a C int (ggml keeps it as one)"));
    }
    let n = b[3] / p.ic;
    let (ow, oh, od) = match (
        conv_out(b[0], p.kw, p.s0, p.p0, p.d0),
        conv_out(b[1], p.kh, p.s1, p.p1, p.d1),
        conv_out(b[2], p.kd, p.s2, p.p2, p.d2),
    ) {
        (Some(w), Some(h), Some(d)) => (w, h, d),
        _ => {
            return Err(bad(
                c,
                "the padded input is smaller than the dilated kernel",
            ))
        }
    };
    let x = if p.v {
        view_input("input", DType::F32, b, c.ne)?
    } else {
        input("input", DType::F32, c.ne)?
    };
    Ok(vec![
        x,
        output("dst", c.dtype, [p.kw * p.kh * p.kd * p.ic, ow, oh, od * n])?,
    ])
}

/// im2col_3d's result rows `rows` alone (flat `ne[1..3]` indices of `[K*IC, OW, OH, OD*N]`):
/// row `(ow, oh, od, n)` holds the kernel's window of batch `n` at that place, every channel of
/// it. The case of those rows makes each window a batch of its own, cut from the input as the
/// case draws it (zero where the window hangs over the padding), taken at stride 1 without
/// padding: one place per batch, so its rows are the sampled rows in order. The CPU backend's
/// im2col_3d runs one thread per input channel; the whole case of one channel took 9 s a
/// reference, this one takes milliseconds.
fn im2col_3d_gathered(
    c: &Case,
    specs: &[TensorSpec],
    rows: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let p = Im2col3dParams::of(c);
    let (Some(x), Some(dst)) = (specs.first(), specs.get(1)) else {
        return Err(bad(c, "im2col_3d has an input and a result"));
    };
    if p.v {
        return Err(bad(c, "a view's windows are not cut from its rows"));
    }
    let [w, h, d, nic] = x.ne;
    let [_, ow, oh, odn] = dst.ne;
    let n = nic / p.ic;
    let od = odn / n.max(1);
    let span = |k: i64, dil: i64| (k - 1) * dil + 1;
    let (ew, eh, ed) = (span(p.kw, p.d0), span(p.kh, p.d1), span(p.kd, p.d2));
    // Each sampled place: its window's corner in the input (it may start in the padding) and
    // its batch.
    let places: Vec<(i64, i64, i64, i64)> = rows
        .iter()
        .map(|&r| {
            let r = r as i64;
            let (iow, ioh, t) = (r % ow, (r / ow) % oh, r / (ow * oh));
            let (iod, b) = (t % od, t / od);
            (iow * p.s0 - p.p0, ioh * p.s1 - p.p1, iod * p.s2 - p.p2, b)
        })
        .collect();
    // The input rows (each `w` values) the windows read, drawn once each.
    let row_of = |y: i64, z: i64, ch: i64| (y + h * (z + d * ch)) as u64;
    let mut wanted = Vec::new();
    for &(_, y0, z0, b) in &places {
        for ch in b * p.ic..(b + 1) * p.ic {
            for z in (z0..z0 + ed).filter(|z| (0..d).contains(z)) {
                for y in (y0..y0 + eh).filter(|y| (0..h).contains(y)) {
                    wanted.push(row_of(y, z, ch));
                }
            }
        }
    }
    wanted.sort_unstable();
    wanted.dedup();
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_rows(c, x, 0, &wanted, range).to_f64();
    let k = places.len() as i64;
    let mut vals = Vec::with_capacity((ew * eh * ed * k * p.ic) as usize);
    for &(x0, y0, z0, b) in &places {
        for ch in b * p.ic..(b + 1) * p.ic {
            for z in z0..z0 + ed {
                for y in y0..y0 + eh {
                    let at = ((0..d).contains(&z) && (0..h).contains(&y))
                        .then(|| wanted.binary_search(&row_of(y, z, ch)).ok())
                        .flatten();
                    for xw in x0..x0 + ew {
                        let v = match at {
                            Some(i) if (0..w).contains(&xw) => drawn[i * w as usize + xw as usize],
                            _ => 0.0,
                        };
                        vals.push(v as f32);
                    }
                }
            }
        }
    }
    let mut sc = c.clone().with_params(|q: &mut Im2col3dParams| {
        (q.s0, q.s1, q.s2) = (1, 1, 1);
        (q.p0, q.p1, q.p2) = (0, 0, 0);
    });
    sc.ne = [ew, eh, ed, k * p.ic];
    let input = HostTensor::from_f32(DType::F32, sc.ne, &vals);
    Ok((sc, vec![input]))
}

pub(crate) const IM2COL_3D: GgmlOpEntry = GgmlOpEntry {
    name: "im2col_3d",
    upstream: "IM2COL_3D",
    about: "3-D image to columns: input [W, H, D, N*IC] f32 (or a view of it), kernel [kw, kh, kd, OC*IC] (its shape only) into [kw*kh*kd*IC, OW, OH, OD*N] of the case's dtype; im2col.cu clamps its grid and loops",
    dtypes: &[DType::F32, DType::F16],
    params: Im2col3dParams::SPECS,
    tensors: im2col_3d_tensors,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Im2col3dParams::of(c);
        let kt = if p.kernel == "f32" {
            Type::F32
        } else {
            Type::F16
        };
        let kernel = g.new_tensor(kt, &im2col_3d_kernel(c))?;
        let dst = ggml_ty(c.dtype)?;
        let i = |v: i64| v as i32;
        Ok(vec![g.im2col_3d(
            kernel,
            x[0],
            p.ic,
            i(p.s0),
            i(p.s1),
            i(p.s2),
            i(p.p0),
            i(p.p1),
            i(p.p2),
            i(p.d0),
            i(p.d1),
            i(p.d2),
            dst,
        )?])
    },
    // One input channel, so every generated batch is whole; the result is 27 times the input:
    // the count probe is on the depth.
    probe: || {
        Some(ProbeBase {
            ne: [10, 10, 10, 3],
            params: crate::params_with(|p: &mut Im2col3dParams| p.ic = 1),
            grid_dims: &[1, 2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([10, 10, 10, 9]),
        sp!([10, 10, 10, 9], |p: &mut Im2col3dParams| p.kernel = "f32"),
        sp!([20, 20, 10, 3], |p: &mut Im2col3dParams| {
            p.k3 = 3;
            p.kernel = "f32";
            p.s0 = 3;
            p.s2 = 3;
            p.p0 = 3;
            p.p1 = 0;
            p.p2 = 3;
            p.d1 = 3;
        }),
        sp!([20, 20, 10, 3], |p: &mut Im2col3dParams| {
            p.k3 = 3;
            p.kernel = "f32";
            p.ic = 1;
            p.s1 = 3;
            p.p0 = 0;
            p.p2 = 0;
            p.d0 = 3;
            p.d2 = 3;
            p.v = true;
        }),
        sp!([7, 5, 4, 6], |p: &mut Im2col3dParams| {
            p.kw = 2;
            p.kh = 1;
            p.kd = 2;
            p.k3 = 4;
            p.ic = 2;
            p.s0 = 2;
            p.p1 = 0;
        }),
    ],
    boundaries: |_| {
        let one_channel = |p: &mut Im2col3dParams| p.ic = 1;
        vec![
            // im2col.cu:184 puts min(OW, 65535) on grid.y and loops past it: a control.
            Boundary::ne(
                "the result's width across the grid.y limit 65535 (clamped grid, looped: a control)",
                0,
                65536,
                [0, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536])
            .with_params(one_channel),
            // im2col.cu:184 puts min(N*OD*OH, 65535) on grid.z and loops past it: a control.
            Boundary::ne(
                "N*OD*OH across the grid.z limit 65535 (clamped grid, looped: a control)",
                1,
                65536,
                [1, 0, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65535, 65536])
            .with_params(one_channel),
            // im2col.cu:151 computes every offset in int64: a control.
            Boundary::ne(
                "the result across 2^31 elements (int64 offsets: a control)",
                2,
                304,
                [512, 512, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![303, 304])
            .with_params(one_channel)
            .dtype(DType::F16),
        ]
    },
    upstream_line: |c| {
        let p = Im2col3dParams::of(c);
        let k = im2col_3d_kernel(c);
        let kt = float_dtype(p.kernel);
        repro(
            "IM2COL_3D",
            format!(
                "test_im2col_3d(GGML_TYPE_F32, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                kt.ggml_type(),
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cpp_arr(&k),
                p.ic,
                p.s0,
                p.s1,
                p.s2,
                p.p0,
                p.p1,
                p.p2,
                p.d0,
                p.d1,
                p.d2,
                p.v
            ),
            format!(
                "type_input=f32,type_kernel={kt},dst_type={},ne_input={},ne_kernel={},IC={},s0={},s1={},s2={},p0={},p1={},p2={},d0={},d1={},d2={},v={}",
                c.dtype,
                vars_arr(&c.ne),
                vars_arr(&k),
                p.ic,
                p.s0,
                p.s1,
                p.s2,
                p.p0,
                p.p1,
                p.p2,
                p.d0,
                p.d1,
                p.d2,
                b01(p.v)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Gathered(im2col_3d_gathered),
    reach: no_reach,
};

// ---- COL2IM_1D -------------------------------------------------------------------------------

kedge_core::params! {
    /// test_col2im_1d's stride and cropping; the case is `[K, OC, T_in, 1]`.
    pub(crate) struct Col2im1dParams {
        s0: int(1..=1 << 20) = 2, "stride";
        p0: int(0..=1 << 20) = 0, "padding cropped from both ends";
    }
}

/// The signal's length: `(T_in - 1) * s0 + K - 2 * p0`.
fn col2im_t_out(c: &Case) -> i64 {
    let p = Col2im1dParams::of(c);
    (c.ne[2] - 1) * p.s0 + c.ne[0] - 2 * p.p0
}

pub(crate) const COL2IM_1D: GgmlOpEntry = GgmlOpEntry {
    name: "col2im_1d",
    upstream: "COL2IM_1D",
    about: "columns [K*OC, T_in] (case [K, OC, T_in, 1]) added back into a 1-D signal [T_out, OC] at stride s0, p0 cropped from both ends: a transposed convolution after its matrix product; the result in the input's type",
    dtypes: &[DType::F32, DType::F16, DType::Bf16],
    params: Col2im1dParams::SPECS,
    tensors: |c| {
        let [k, oc, t_in, one] = c.ne;
        if one != 1 {
            return Err(bad(c, "the case is [K, OC, T_in, 1]: ne[3] must be 1"));
        }
        if !fits_int(oc) {
            return Err(bad(c, "OC must fit a C int (ggml takes it as one)"));
        }
        let t_out = col2im_t_out(c);
        if t_out < 1 {
            return Err(bad(
                c,
                format!("T_out = (T_in - 1) * s0 + K - 2 * p0 = {t_out}: the cropping eats the signal"),
            ));
        }
        Ok(vec![
            input("cols", c.dtype, [k * oc, t_in, 1, 1])?,
            output("dst", c.dtype, [t_out, oc, 1, 1])?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = Col2im1dParams::of(c);
        Ok(vec![g.col2im_1d(
            x[0],
            p.s0 as i32,
            c.ne[1] as i32,
            p.p0 as i32,
        )?])
    },
    // A one-dimensional grid: the grid probes are controls; T_in carries the count.
    probe: || {
        Some(ProbeBase {
            ne: [4, 3, 7, 1],
            params: Params::new(),
            grid_dims: &[1, 2],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        sp!([16, 32, 197, 1], |p: &mut Col2im1dParams| p.s0 = 8),
        s([4, 3, 7, 1]),
        sp!([1, 5, 13, 1], |p: &mut Col2im1dParams| p.s0 = 1),
        sp!([6, 4, 11, 1], |p: &mut Col2im1dParams| {
            p.s0 = 3;
            p.p0 = 1;
        }),
        sp!([2, 3, 9, 1], |p: &mut Col2im1dParams| p.s0 = 3),
        sp!([5, 4, 11, 1], |p: &mut Col2im1dParams| p.s0 = 2),
        sp!([8, 4, 13, 1], |p: &mut Col2im1dParams| {
            p.s0 = 4;
            p.p0 = 2;
        }),
        s([4, 3, 1, 1]),
        sp!([8, 2, 3, 1], |p: &mut Col2im1dParams| p.p0 = 5),
    ],
    boundaries: |_| {
        vec![
            // C53: col2im-1d.cu:35 reads `col[(oc * K + k) + t_in * K_OC]` in int: the
            // columns' last index passes 2^31 (K*OC = 8192, T_in past 262144).
            Boundary::ne(
                "C53: the columns across 2^31 elements (int index t_in * K_OC, col2im-1d.cu:35)",
                2,
                262_145,
                [16, 512, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![262_144, 262_145])
            .with_params(|p: &mut Col2im1dParams| p.s0 = 8)
            .dtype(DType::F32),
            // C54: col2im-1d.cu:58 `const int total = T_out * OC`: with K < s0 the signal
            // outgrows the columns and its element count passes 2^31 first.
            Boundary::ne(
                "C54: the signal across 2^31 elements (int total T_out * OC, col2im-1d.cu:58)",
                2,
                33_554_433,
                [2, 16, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![33_554_432, 33_554_433])
            .with_params(|p: &mut Col2im1dParams| p.s0 = 4)
            .dtype(DType::F32),
        ]
    },
    upstream_line: |c| {
        let p = Col2im1dParams::of(c);
        let [k, oc, t_in, _] = c.ne;
        repro(
            "COL2IM_1D",
            format!(
                "test_col2im_1d({}, {k}, {oc}, {t_in}, {}, {})",
                c.dtype.ggml_type(),
                p.s0,
                p.p0
            ),
            format!(
                "type={},K={k},OC={oc},T_in={t_in},s0={},p0={}",
                c.dtype, p.s0, p.p0
            ),
        )
    },
    nmse: Nmse::PerCase(|c| if c.dtype == DType::F32 { 1e-7 } else { 5e-4 }),
    reference: Reference::CpuBackend,
    // The signal has few rows (one per channel) of up to 2^28 values: sampled in runs of each
    // channel (a run never crosses into the next), whose columns col2im_1d_gathered cuts. A
    // run of w values reads K * (w + K - 1) column values: past a kernel of 256 (the
    // shared-memory probes on K) the runs would hold more than the case, judged whole.
    rows: Rows::GatheredRuns(col2im_1d_gathered, col2im_run_width),
    reach: no_reach,
};

/// The width of the signal's runs (`Rows::GatheredRuns`): `run_width` of a channel's length,
/// so a run never crosses into the next channel; none past a kernel of 256.
fn col2im_run_width(specs: &[TensorSpec]) -> Option<u64> {
    let (cols, dst) = (specs.first()?, specs.get(1)?);
    let k = cols.ne[0] / dst.ne[1].max(1);
    (k <= 256).then(|| super::run_width(dst.ne[0].max(1) as u64))
}

/// The signal's runs `runs` alone (each `run_width(T_out)` values of one channel). Run `j`,
/// values `a .. a + w` of channel `oc`, sums the columns whose windows reach signal positions
/// `u = a + p0 ..`: column `t` adds its `K` values at `t * s0 ..`. The same sums at stride 1
/// are those of columns `t' = t * s0` with zero columns between (adding a zero changes no
/// sum), so the case of the runs is stride 1, a channel per run whose `w + K - 1` columns are
/// `t' = u - K + 1 ..` of its channel (zero where `t'` is not a multiple of s0 or past the
/// columns), cropped by `K - 1` at each end: its signal `[w, runs]` is the runs in order.
fn col2im_1d_gathered(
    c: &Case,
    specs: &[TensorSpec],
    runs: &[u64],
    _made: &[(usize, HostTensor)],
    ranges: &[(f32, f32)],
) -> Result<(Case, Vec<HostTensor>), CaseError> {
    let (Some(cols), Some(dst), Some(w)) = (specs.first(), specs.get(1), col2im_run_width(specs))
    else {
        return Err(bad(
            c,
            "col2im_1d's runs: columns, a signal and a kernel of 256 or less",
        ));
    };
    let p = Col2im1dParams::of(c);
    let [k, oc, t_in, _] = c.ne;
    let t_out = dst.ne[0].max(1);
    let w = w as i64;
    let n = runs.len() as i64;
    let k_oc = k * oc;
    // Per value of the new columns (channel j's kernel value kk at column t'): where in the
    // case's columns it comes from, or none (a zero column).
    let mut from: Vec<Option<u64>> = vec![None; (k * n * (w + k - 1)) as usize];
    for (j, &run) in runs.iter().enumerate() {
        let f = run as i64 * w;
        let (ch, a) = (f / t_out, f % t_out);
        let first = a + p.p0 - k + 1;
        for tt in 0..w + k - 1 {
            let t = first + tt;
            if t < 0 || t % p.s0 != 0 || t / p.s0 >= t_in {
                continue;
            }
            for kk in 0..k {
                let at = (ch * k + kk) + (t / p.s0) * k_oc;
                from[((j as i64 * k + kk) + tt * k * n) as usize] = Some(at as u64);
            }
        }
    }
    let wanted: Vec<u64> = from.iter().flatten().copied().collect();
    let range = ranges.first().copied().unwrap_or((-1.0, 1.0));
    let drawn = kedge_core::judge::sample::drawn_elements(c, cols, 0, &wanted, range);
    let mut drawn = drawn.into_iter();
    let vals: Vec<f32> = from
        .iter()
        .map(|x| x.and_then(|_| drawn.next()).unwrap_or(0.0))
        .collect();
    let mut sc = c.clone().with_params(|q: &mut Col2im1dParams| {
        q.s0 = 1;
        q.p0 = k - 1;
    });
    sc.ne = [k, n, w + k - 1, 1];
    let input = HostTensor::from_f32(cols.dtype, [k * n, w + k - 1, 1, 1], &vals);
    Ok((sc, vec![input]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_ggml::Ggml;

    /// A depthwise convolution computed directly in f64, `[OW, OH, C, N]` in logical order.
    fn depthwise(c: &Case, x: &HostTensor, k: &HostTensor) -> Vec<f64> {
        let p = Conv2dDwParams::of(c);
        let [w, h, ch, n] = c.ne;
        let ow = conv_out(w, p.kw, p.stride, p.padding, p.dilation).unwrap_or(0);
        let oh = conv_out(h, p.kh, p.stride, p.padding, p.dilation).unwrap_or(0);
        let mut out = Vec::new();
        for b in 0..n {
            for q in 0..ch {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = 0.0;
                        for ky in 0..p.kh {
                            for kx in 0..p.kw {
                                let iy = oy * p.stride + ky * p.dilation - p.padding;
                                let ix = ox * p.stride + kx * p.dilation - p.padding;
                                if (0..h).contains(&iy) && (0..w).contains(&ix) {
                                    let u = |v: i64| v as usize;
                                    acc += x.get(u(ix), u(iy), u(q), u(b))
                                        * k.get(u(kx), u(ky), 0, u(q));
                                }
                            }
                        }
                        out.push(acc);
                    }
                }
            }
        }
        out
    }

    /// Both layouts of a depthwise convolution, read back through the strides the entry
    /// declares, agree with the convolution computed directly: the CWHN result's strides are
    /// the ones ggml gives it.
    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn both_depthwise_layouts_read_back_as_the_direct_convolution() {
        let dir = std::env::var_os("KEDGE_GGML_DIR").expect("KEDGE_GGML_DIR");
        let ggml = Ggml::load(std::path::Path::new(&dir)).expect("the build loads");
        for cwhn in [false, true] {
            for ne in [[9, 7, 5, 2], [17, 34, 9, 1], [6, 1, 3, 1]] {
                let mut c = Case::new("conv_2d_dw", "ggml:CPU", DType::F32, ne);
                c.params = crate::params_with(|p: &mut Conv2dDwParams| {
                    p.stride = 2;
                    p.padding = 1;
                    p.kh = 2;
                    p.cwhn = cwhn;
                });
                let specs = (CONV_2D_DW.tensors)(&c).expect("tensors");
                assert_eq!(specs[2].nb[2] == 4, cwhn, "{ne:?}: the result's layout");
                let inputs = Op::inputs(&CONV_2D_DW, &c, &specs).expect("inputs");
                let ran = crate::on_ggml::exec::run_on(
                    ggml,
                    "CPU",
                    &c,
                    &specs,
                    &inputs,
                    CONV_2D_DW.graph,
                )
                .expect("runs");
                let got = ran.outputs[0].to_f64();
                let want = depthwise(&c, &inputs[0], &inputs[1]);
                assert_eq!(got.len(), want.len());
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!((g - w).abs() < 1e-5, "cwhn {cwhn} {ne:?} [{i}]: {g} vs {w}");
                }
            }
        }
    }

    /// A 3-D convolution computed directly in f64, `[OW, OH, OD, OC*N]` in logical order; the
    /// kernel's `ne[3]` is `oc * IC + ic`, the input's `b * IC + ic`.
    fn conv_3d_direct(c: &Case, x: &HostTensor, k: &HostTensor) -> Vec<f64> {
        let p = Conv3dParams::of(c);
        let [w, h, d, n] = c.ne;
        let ow = conv_out(w, p.kw, p.s0, p.p0, p.d0).unwrap_or(0);
        let oh = conv_out(h, p.kh, p.s1, p.p1, p.d1).unwrap_or(0);
        let od = conv_out(d, p.kd, p.s2, p.p2, p.d2).unwrap_or(0);
        let u = |v: i64| v as usize;
        let mut out = Vec::new();
        for b in 0..n {
            for o in 0..p.oc {
                for oz in 0..od {
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let mut acc = 0.0;
                            for ic in 0..p.ic {
                                for kz in 0..p.kd {
                                    for ky in 0..p.kh {
                                        for kx in 0..p.kw {
                                            let iz = oz * p.s2 + kz * p.d2 - p.p2;
                                            let iy = oy * p.s1 + ky * p.d1 - p.p1;
                                            let ix = ox * p.s0 + kx * p.d0 - p.p0;
                                            if (0..d).contains(&iz)
                                                && (0..h).contains(&iy)
                                                && (0..w).contains(&ix)
                                            {
                                                acc += x.get(u(ix), u(iy), u(iz), u(b * p.ic + ic))
                                                    * k.get(u(kx), u(ky), u(kz), u(o * p.ic + ic));
                                            }
                                        }
                                    }
                                }
                            }
                            out.push(acc);
                        }
                    }
                }
            }
        }
        out
    }

    /// The 3-D convolution's smoke cases, in both kernel types, agree with the convolution
    /// computed directly: the declared shapes and channel packing are the ones ggml computes.
    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn the_3d_convolution_reads_back_as_the_direct_convolution() {
        let dir = std::env::var_os("KEDGE_GGML_DIR").expect("KEDGE_GGML_DIR");
        let ggml = Ggml::load(std::path::Path::new(&dir)).expect("the build loads");
        for sm in CONV_3D.smoke {
            for &dt in CONV_3D.dtypes {
                let mut c = Case::new("conv_3d", "ggml:CPU", dt, sm.ne);
                c.params = (sm.params)();
                let specs = (CONV_3D.tensors)(&c).expect("tensors");
                let inputs = Op::inputs(&CONV_3D, &c, &specs).expect("inputs");
                let ran =
                    crate::on_ggml::exec::run_on(ggml, "CPU", &c, &specs, &inputs, CONV_3D.graph)
                        .expect("runs");
                let got = ran.outputs[0].to_f64();
                let want = conv_3d_direct(&c, &inputs[0], &inputs[1]);
                assert_eq!(got.len(), want.len(), "{:?}", sm.ne);
                // The f16 kernel rounds the input to f16 as well.
                let tol = if dt == DType::F32 { 1e-4 } else { 5e-2 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() < tol * (1.0 + w.abs()),
                        "{dt} {:?} [{i}]: {g} vs {w}",
                        sm.ne
                    );
                }
            }
        }
    }

    /// Cases ggml would assert on are refused before a graph is built.
    #[test]
    fn the_3d_convolution_refuses_what_ggml_asserts_on() {
        let refused = |ne: Ne, set: fn(&mut Conv3dParams)| {
            let mut c = Case::new("conv_3d", "ggml:CPU", DType::F32, ne);
            c.params = crate::params_with(set);
            (CONV_3D.tensors)(&c).is_err()
        };
        assert!(refused([2, 8, 8, 1], |_| {}));
        assert!(refused([8, 8, 8, 1 << 31], |_| {}));
        // 8 * (2^19 - 1) f32 kernel elements and 8 f32 results: exactly 16 MiB a position.
        assert!(!refused([8, 8, 8, 1], |p| {
            p.kw = 2;
            p.kh = 2;
            p.kd = 2;
            p.ic = (1 << 19) - 1;
            p.oc = 8;
        }));
        assert!(refused([8, 8, 8, 1], |p| {
            p.kw = 2;
            p.kh = 2;
            p.kd = 2;
            p.ic = (1 << 19) - 1;
            p.oc = 9;
        }));
        assert!(refused([64, 64, 64, 1], |p| {
            p.kw = 64;
            p.kh = 64;
            p.kd = 64;
            p.ic = 16;
            p.oc = 1;
        }));
    }
}
