//! cumsum (ggml CUMSUM): inclusive prefix sum along ne0, per row.
//!
//! Upstream (ggml-cuda/cumsum.cu) chooses by row length: a device-wide scan per row
//! (`cub::DeviceScan`, host loop over rows) when `(nrows == 1 && ne00 > 1024) ||
//! ne00 / nrows > 4096`; else a 256-thread block scan with a carry for `ne00 >= 1024`; else a
//! block of `min(pad(ne00, 32), 256)` threads with 4 elements each. The row kernels launch
//! `grid_dims(ne01, ne02, ne03)`: `ne[2]` on grid.y, `ne[3]` on grid.z, both capped at 65535 (kedge
//! generates those boundaries from `probe_base`). The strategy thresholds are this op's own
//! boundaries. The `.cu` file says how the CUB pieces are stood in for (NVRTC has no CUB).
//!
//! The device-wide scan is one list of three launches (tiles, tile sums, tile offsets) repeated
//! over the rows (`Plan::repeated([nrows, nchannels, nsamples])`), each row's pointers a
//! `KernelArg::TensorAt` stepped per level; the tile sums are one scratch buffer shared by name.
//!
//! This op also carries the index-width case: impl `int32-index` computes flat element offsets
//! in `int`, and the boundary "elements past 2^31" ([1024, 2097153] f32, just over 2^31
//! elements, 8 GiB per f32 tensor) must see it fail while the 64-bit `clamped` passes.
//!
//! Element types: f32, f16 and bf16. Upstream's CUDA cumsum runs f32 only: its f16 and bf16
//! cases are commented out in cumsum.cu ("We do not support those on CPU for now"), and the CPU
//! backend aborts on them. kedge's impls take f16 and bf16 too, as models of the same launches
//! (the strategy thresholds are element counts, so they do not move; row steps are in bytes
//! of the type), loading the type, summing in f32 and storing the type. The device-wide scan
//! keeps its tile totals in f32 and adds each tile's offset to the tile's stored prefix, so a
//! 16-bit output is rounded twice there; `half_outputs_of_the_tiled_scan_stay_in_bounds`
//! checks that this stays within the tolerance.

use crate::rows::{map_rows, row_tensors, RowLayout, RowParams};
use kedge_core::contract::plan::BufferPlan;
use kedge_core::contract::upstream::{cpp_ne, vars_ne};
use kedge_core::model::host::HostTensor;
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/cumsum/cumsum.cu", "cumsum.cu");

pub(crate) struct Cumsum;
pub(crate) static OP: Cumsum = Cumsum;

/// ggml's `CUDA_CUMSUM_BLOCK_SIZE`.
pub(crate) const BLOCK: u64 = 256;
/// Rows at least this long use the block scan with carry (`use_cub && ne00 >= 1024`).
pub(crate) const BLOCK_CARRY_FROM: i64 = 1024;
/// A single row longer than this takes the device-wide scan (`nrows == 1 && ne00 > 1024`).
pub(crate) const DEVICE_SCAN_SINGLE_ROW_ABOVE: i64 = 1024;
/// `ne00 / nrows > 4096` takes the device-wide scan.
pub(crate) const DEVICE_SCAN_RATIO_ABOVE: i64 = 4096;
/// Elements per tile of the device-wide scan (cumsum.cu's `TILE`).
pub const TILE: i64 = 1024;
/// [1024, 2097153] f32: 2^31 + 1024 elements, the first row whose offset wraps an `int`.
pub(crate) const ROWS_PAST_2_31: i64 = 2_097_153;
/// The device-wide scan's scratch: one f32 total per tile, shared by its three launches.
pub(crate) const TILE_SUMS: &str = "tile_sums";

pub(crate) const REACH_GRID: &str = "synthetic: no known model reaches it (the incident could not identify CUMSUM's consumers; ne[2] > 65535 rows of a cumsum is not a shape any known graph builds)";

pub(crate) const REACH_2_31: &str = "synthetic: no known model reaches it (one cumsum over more than 2^31 elements, 8 GiB per f32 tensor)";

/// How ggml's CUDA cumsum scans its rows, as [`strategy`] picks it: each has its own kernels,
/// block size and shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Device-wide scan of each row (host loop over rows).
    DeviceScan,
    /// 256 threads, 256-element chunks, carry between chunks.
    BlockCarry,
    /// `block` threads, 4 elements per thread.
    Small {
        /// Threads per block: the row length rounded up to a whole warp (32), at most 256.
        block: u64,
    },
}

/// ggml's choice for contiguous f32 rows with CUB available.
pub fn strategy(ncols: i64, nrows: i64) -> Strategy {
    if (nrows == 1 && ncols > DEVICE_SCAN_SINGLE_ROW_ABOVE)
        || ncols / nrows.max(1) > DEVICE_SCAN_RATIO_ABOVE
    {
        Strategy::DeviceScan
    } else if ncols >= BLOCK_CARRY_FROM {
        Strategy::BlockCarry
    } else {
        let padded = (ncols.max(1) as u64).div_ceil(32) * 32;
        Strategy::Small {
            block: padded.min(BLOCK),
        }
    }
}

/// `(block_size + warps_per_block + 2) * sizeof(float)`.
fn small_smem(block: u64) -> u64 {
    (block + block / 32 + 2) * 4
}

impl Op for Cumsum {
    fn name(&self) -> &'static str {
        "cumsum"
    }
    fn about(&self) -> &'static str {
        "inclusive prefix sum along ne0 (ggml CUMSUM)"
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some("CUMSUM")
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::FLOATS
    }
    /// f32: test-backend-ops' 1e-7; f16 and bf16: the same plus their rounding
    /// (`Tolerance::rounded_to`).
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to(case.dtype)
    }
    fn params(&self) -> &'static [ParamSpec] {
        RowParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED, &INT32_INDEX]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        row_tensors(case)
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let x = inputs.first().ok_or_else(|| CaseError::BadInput {
            op: "cumsum".into(),
            msg: "no input x".into(),
        })?;
        Ok(vec![map_rows(x, cumsum_row)])
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase::rows([64, 1, 1, 1]))
    }
    // The default f32 NMSE bound (1e-7) holds for these row lengths: an f32 prefix sum of
    // uniform [-1, 1] inputs accumulated strictly in order (the worst order; the kernels' block
    // and tile scans add fewer terms in sequence) has NMSE about 1e-10 at 1e5 elements, see
    // `f32_prefix_error_is_far_below_the_bound`. So the tolerance is not loosened.
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        vec![
            // The generated grid probes have short rows (the small-block kernel); the block
            // scan with carry is its own kernel on the same grid.
            Boundary::ne(
                "ne[2] on grid.y, rows of 1024 (the block scan with carry)",
                2,
                gy,
                [1024, 1, 0, 1],
                Reach(REACH_GRID),
            ),
            Boundary::ne(
                "ne[0] at 1024, one row: small block -> block scan -> device-wide scan",
                0,
                BLOCK_CARRY_FROM,
                [0, 1, 1, 1],
                Reach("a single long row (a cumsum over a whole sequence): every length crosses it"),
            ),
            Boundary::ne(
                "ne[0] at 1024, several rows: small block -> block scan with carry",
                0,
                BLOCK_CARRY_FROM,
                [0, 4, 2, 1],
                Reach("rows of 1024 elements: any batch of cumsums over 1k-long rows"),
            ),
            Boundary::ne(
                "ne[0] / nrows past 4096 (two rows): block scan -> device-wide scan",
                0,
                2 * DEVICE_SCAN_RATIO_ABOVE + 2,
                [0, 2, 1, 1],
                Reach("a couple of rows of 8k elements"),
            )
            .with_values(vec![8192, 8193, 8194]),
            Boundary::ne(
                "ne[0] at the 256-thread cap of the small block",
                0,
                256,
                [0, 3, 2, 1],
                Reach("short rows of 256 elements"),
            )
            .with_values(vec![224, 225, 256, 257]),
            Boundary::ne(
                "ne[0] at one warp -> two warps",
                0,
                32,
                [0, 3, 2, 1],
                Reach("rows of 32 elements"),
            ),
            Boundary::ne(
                "ne[0] at a tile edge of the device-wide scan",
                0,
                2 * TILE,
                [0, 1, 1, 1],
                Reach("a single long row"),
            ),
            Boundary::ne(
                "ne[0] at a warp multiple, padded rows",
                0,
                1024,
                [0, 3, 2, 1],
                Reach("a view of a larger tensor"),
            )
            .with_params(|p: &mut crate::rows::RowParams| p.row_pad = 5),
            // Upstream's device-wide path checks only that dim 0 is contiguous, then steps
            // rows by ne00. With padded rows (a view) it would scan the wrong data. Unverified
            // whether ggml's supports_op or any graph lets such a view reach CUMSUM.
            Boundary::ne(
                "padded rows reaching the device-wide scan (upstream steps rows by ne00)",
                0,
                2 * DEVICE_SCAN_RATIO_ABOVE + 2,
                [0, 2, 1, 1],
                Reach("synthetic: a row-padded view of two 8k rows; no known graph hands CUMSUM such a view"),
            )
            .with_values(vec![8193, 8194])
            .with_params(|p: &mut crate::rows::RowParams| p.row_pad = 7),
            Boundary::ne(
                "elements past 2^31: int32 flat offsets wrap ([1024, N]: 8 GiB per f32 tensor, 16 GiB per f32 case)",
                1,
                ROWS_PAST_2_31,
                [1024, 0, 1, 1],
                Reach(REACH_2_31),
            )
            .with_values(vec![ROWS_PAST_2_31 - 1, ROWS_PAST_2_31])
            .only(&["int32-index", "clamped"]),
        ]
    }
    /// Each row's sum is its own: a big case may be judged on sampled rows.
    fn row_sampling(&self, case: &Case) -> Option<kedge_core::RowSampling> {
        Some(kedge_core::RowSampling::uniform(
            self.tensors(case).ok()?.len(),
        ))
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        vec![
            ([10, 5, 4, 3], Params::new()),
            ([1, 1, 1, 1], Params::new()),
            ([33, 7, 3, 2], Params::new()),
            ([1000, 3, 2, 1], Params::new()),
            ([5000, 3, 2, 1], Params::new()),
            ([100_000, 1, 1, 1], Params::new()),
            ([100_000, 3, 1, 1], Params::new()),
            ([300, 4, 2, 2], crate::row_norm::pad(3)),
        ]
    }
    /// test-backend-ops (tests/test-backend-ops.cpp, `struct test_cumsum`):
    /// `test_cumsum(ggml_type type = GGML_TYPE_F32, std::array<int64_t, 4> ne = { 10, 5, 4, 3 })`,
    /// `vars()` = `VARS_TO_STR2(type, ne)`. It has no view flag, so a padded case is written
    /// dense (the launch geometry and the strategy, which are what the boundaries move, do not
    /// depend on the padding).
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_cumsum({}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&case.ne)
            ),
            op_name: "CUMSUM".into(),
            vars: format!("type={},ne={}", case.dtype, vars_ne(&case.ne)),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        let elements = case
            .ne
            .iter()
            .fold(1i64, |a, &d| a.saturating_mul(d.max(0)));
        if elements > 1 << 31 {
            Some(REACH_2_31.into())
        } else if case.ne[2] > 65_535 || case.ne[3] > 65_535 {
            Some(REACH_GRID.into())
        } else {
            None
        }
    }
}

pub(crate) fn cumsum_row(x: &[f64], dst: &mut [f64]) {
    let mut s = 0.0;
    for (d, v) in dst.iter_mut().zip(x) {
        s += v;
        *d = s;
    }
}

/// How the device-wide scan steps from one source row to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowStep {
    /// Upstream's per-row CUB loop: `src0_d + i * src0_ne[0]`, right only for rows without
    /// padding.
    Ne00,
    /// The input's own row, channel and sample strides.
    Strides,
}

/// Which impl's kernels and grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Geometry {
    /// grid (ne01, ne02, ne03), device-wide rows stepped by ne00.
    Ggml,
    /// grid clamped to the profile, ne[2]/ne[3] grid-stride loops, rows stepped by strides.
    Clamped,
}

fn overflow(what: &str) -> Refusal {
    format!("{what} does not fit a 64-bit byte offset").into()
}

/// Byte steps per repeat level of `[rows, channels, samples]` for element strides of
/// `elem` bytes.
fn byte_steps(strides: [i64; 3], elem: i64) -> Result<[i64; 3], Refusal> {
    let mut out = [0i64; 3];
    for (o, s) in out.iter_mut().zip(strides) {
        *o = s.checked_mul(elem).ok_or_else(|| overflow("a row step"))?;
    }
    Ok(out)
}

/// The device-wide scan of rows of `dtype`: one list of three launches (tiles, tile sums,
/// tile offsets) run once per row, rows innermost, each launch's row pointers stepped per
/// repeat level. The tile sums are f32 for every element type.
pub(crate) fn device_scan_plan(
    l: &RowLayout,
    step: RowStep,
    dtype: DType,
) -> Result<Plan, Refusal> {
    let elem = dtype.size() as i64;
    let ntiles = (l.ncols as u64).div_ceil(TILE as u64);
    let sums_bytes = ntiles
        .checked_mul(4)
        .ok_or_else(|| overflow("the tile sums"))?;
    let dense_channel = l
        .ncols
        .checked_mul(l.nrows)
        .ok_or_else(|| overflow("a channel"))?;
    let dense_sample = dense_channel
        .checked_mul(l.nchannels)
        .ok_or_else(|| overflow("a sample"))?;
    let dst_step = byte_steps([l.ncols, dense_channel, dense_sample], elem)?;
    let src_step = match step {
        RowStep::Ne00 => dst_step,
        RowStep::Strides => byte_steps([l.stride_row, l.stride_channel, l.stride_sample], elem)?,
    };
    let src = KernelArg::TensorAt {
        index: 0,
        offset: 0,
        step: src_step,
    };
    let dst = KernelArg::TensorAt {
        index: 1,
        offset: 0,
        step: dst_step,
    };
    let sums = KernelArg::Scratch {
        name: TILE_SUMS.into(),
        bytes: sums_bytes,
    };
    let n = KernelArg::I64(l.ncols);
    let launches = vec![
        LaunchPlan::new(
            crate::rows::typed!(SRC, "cumsum_row_tiles").kernel(dtype)?,
            [ntiles, 1, 1],
            [BLOCK, 1, 1],
            0,
        )
        .args(vec![src, dst.clone(), sums.clone(), n.clone()]),
        LaunchPlan::new(SRC.entry("cumsum_tile_sums"), [1, 1, 1], [BLOCK, 1, 1], 0)
            .args(vec![sums.clone(), KernelArg::I64(ntiles as i64)]),
        // At least two tiles: a device-wide scan is only chosen for ncols > 1024.
        LaunchPlan::new(
            crate::rows::typed!(SRC, "cumsum_add_tile_offsets").kernel(dtype)?,
            [ntiles.saturating_sub(1).max(1), 1, 1],
            [BLOCK, 1, 1],
            0,
        )
        .args(vec![dst, sums, n]),
    ];
    Ok(Plan::kernels(launches)
        .repeated([l.nrows as u64, l.nchannels as u64, l.nsamples as u64])
        .with_buffers(vec![BufferPlan {
            name: format!("{TILE_SUMS} [{ntiles}] f32"),
            bytes: sums_bytes,
        }]))
}

/// The row kernels' arguments: src, dst, ne00..ne03, the input's strides in elements.
fn row_args(l: &RowLayout) -> Vec<KernelArg> {
    let mut args = vec![KernelArg::Tensor(0), KernelArg::Tensor(1)];
    args.extend(l.extent_args());
    args.extend(l.stride_args());
    args
}

fn row_plan(case: &Case, limits: &LimitsProfile, geometry: Geometry) -> Result<Plan, Refusal> {
    let l = RowLayout::of(case);
    let grid = match geometry {
        Geometry::Ggml => [l.nrows as u64, l.nchannels as u64, l.nsamples as u64],
        Geometry::Clamped => [
            l.nrows as u64,
            (l.nchannels as u64).min(limits.grid_limit(1)),
            (l.nsamples as u64).min(limits.grid_limit(2)),
        ],
    };
    let ggml = geometry == Geometry::Ggml;
    Ok(match strategy(l.ncols, l.total_rows()) {
        Strategy::DeviceScan => device_scan_plan(
            &l,
            if ggml {
                RowStep::Ne00
            } else {
                RowStep::Strides
            },
            case.dtype,
        )?,
        Strategy::BlockCarry => Plan::single(
            LaunchPlan::new(
                if ggml {
                    crate::rows::typed!(SRC, "cumsum_ggml_block_carry")
                } else {
                    crate::rows::typed!(SRC, "cumsum_clamped_block_carry")
                }
                .kernel(case.dtype)?,
                grid,
                [BLOCK, 1, 1],
                0,
            )
            .args(row_args(&l)),
        ),
        Strategy::Small { block } => Plan::single(
            LaunchPlan::new(
                if ggml {
                    crate::rows::typed!(SRC, "cumsum_ggml_small")
                } else {
                    crate::rows::typed!(SRC, "cumsum_clamped_small")
                }
                .kernel(case.dtype)?,
                grid,
                [block, 1, 1],
                small_smem(block),
            )
            .args(row_args(&l)),
        ),
    })
}

fn rows_on_grid_x(l: &RowLayout, limits: &LimitsProfile) -> Result<(), Refusal> {
    if l.nrows as u64 > limits.grid_limit(0) {
        return Err(format!(
            "ne[1] = {} rows exceeds grid.x {}; this impl keeps one row per block.x",
            l.nrows,
            limits.grid_limit(0)
        )
        .into());
    }
    Ok(())
}

fn ggml_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    row_plan(case, limits, Geometry::Ggml)
}

fn clamped_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let l = RowLayout::of(case);
    rows_on_grid_x(&l, limits)?;
    // The device-wide scan puts a row's tiles on grid.x (found by the launch_plan fuzz
    // target: a row of 2.5e15 elements planned 2.4e12 blocks).
    let tiles = (l.ncols as u64).div_ceil(TILE as u64);
    if matches!(strategy(l.ncols, l.total_rows()), Strategy::DeviceScan)
        && tiles > limits.grid_limit(0)
    {
        return Err(format!(
            "a row of {} elements needs {tiles} tiles of {TILE}, more than grid.x {}",
            l.ncols,
            limits.grid_limit(0)
        )
        .into());
    }
    row_plan(case, limits, Geometry::Clamped)
}

/// The clamped 256-thread block scan with `int` extents and strides, as an int-indexed
/// kernel's launcher passes them: `as i32` wraps exactly as the C conversion would.
fn int32_index_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let l = RowLayout::of(case);
    rows_on_grid_x(&l, limits)?;
    let args = [
        l.ncols,
        l.nrows,
        l.nchannels,
        l.nsamples,
        l.stride_row,
        l.stride_channel,
        l.stride_sample,
    ]
    .into_iter()
    .map(|v| KernelArg::I32(v as i32));
    let mut all = vec![KernelArg::Tensor(0), KernelArg::Tensor(1)];
    all.extend(args);
    Ok(Plan::single(
        LaunchPlan::new(
            crate::rows::typed!(SRC, "cumsum_int32_index").kernel(case.dtype)?,
            [
                l.nrows as u64,
                (l.nchannels as u64).min(limits.grid_limit(1)),
                (l.nsamples as u64).min(limits.grid_limit(2)),
            ],
            [BLOCK, 1, 1],
            0,
        )
        .args(all),
    ))
}

/// Upstream: strategy by row length, grid (ne01, ne02, ne03) for the row kernels.
pub(crate) static GGML: KernelImpl = KernelImpl {
    name: "ggml",
    role: ImplRole::Upstream,
    about: "ggml cumsum.cu as shipped (CUB build): device-wide scan per row (rows stepped by ne00, as upstream does), 256-thread block scan with carry from 1024, small block below; grid (ne01, ne02, ne03)",
    plan: ggml_plan,
};

/// The fix: same strategies, grid clamped, `ne[2]`/`ne[3]` grid-stride loops.
pub(crate) static CLAMPED: KernelImpl = KernelImpl {
    name: "clamped",
    role: ImplRole::Fixed,
    about: "ggml's strategies with the grid clamped to the device limits and grid-stride loops over ne[2] and ne[3]; 64-bit offsets",
    plan: clamped_plan,
};

/// CALIBRATION of the index-width boundary: the clamped block scan with `int` offsets.
pub(crate) static INT32_INDEX: KernelImpl = KernelImpl {
    name: "int32-index",
    role: ImplRole::Planted {
        bug: "flat element offsets computed in 32-bit int: right up to 2^31 elements, wraps past it (boundary 'elements past 2^31'); every smaller case passes by design",
        expect: &[Detector::DeviceSync, Detector::Poison, Detector::Reference],
    },
    about: "CALIBRATION: the clamped 256-thread block scan with row offsets and element indices in int, as many kernels compute them",
    plan: int32_index_plan,
};

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use kedge_core::model::rng::Rng;
    use rstest::rstest;

    fn case(ne: Ne) -> Case {
        Case::new("cumsum", "ggml", DType::F32, ne)
    }

    #[test]
    fn reference_by_hand() {
        let x = HostTensor::from_f32(DType::F32, [3, 2, 1, 1], &[1.0, 2.0, 3.0, -1.0, 0.5, 4.0]);
        let out = OP.reference(&case([3, 2, 1, 1]), &[x]).unwrap();
        assert_eq!(out[0], vec![1.0, 3.0, 6.0, -1.0, -0.5, 3.5]);
    }

    #[test]
    fn last_element_is_the_row_sum() {
        let c = case([777, 3, 2, 2]).with_param("row_pad", 3);
        let specs = OP.tensors(&c).unwrap();
        let inputs = OP.inputs(&c, &specs).unwrap();
        let out = OP.reference(&c, &inputs).unwrap().remove(0);
        for (r, row) in out.chunks(777).enumerate() {
            let (i1, i2, i3) = (r % 3, (r / 3) % 2, r / 6);
            let sum: f64 = (0..777).map(|i0| inputs[0].get(i0, i1, i2, i3)).sum();
            assert_abs_diff_eq!(row[776], sum, epsilon = 1e-9);
            // and each element adds exactly one input to the one before
            assert_abs_diff_eq!(
                row[1] - row[0],
                inputs[0].get(1, i1, i2, i3),
                epsilon = 1e-12
            );
        }
    }

    /// Why the default f32 tolerance is honest for cumsum: the worst summation order (strictly
    /// sequential f32, what a single thread would do) over 1e5 uniform [-1, 1] inputs stays
    /// two orders of magnitude under the 1e-7 NMSE bound. The kernels add fewer terms in
    /// sequence (block scans, tile carries), so their error is smaller still.
    #[test]
    fn f32_prefix_error_is_far_below_the_bound() {
        for (seed, n) in [(1u64, 100_000usize), (2, 100_000), (3, 8194)] {
            let mut rng = Rng::stream(seed, 0);
            let x: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let (mut s32, mut s64) = (0f32, 0f64);
            let (mut err, mut norm) = (0f64, 0f64);
            for &v in &x {
                s32 += v;
                s64 += v as f64;
                err += (s32 as f64 - s64).powi(2);
                norm += s64 * s64;
            }
            let nmse = err / norm;
            assert!(
                nmse < Tolerance::F32.nmse / 100.0,
                "n {n}: sequential f32 NMSE {nmse:e}"
            );
        }
        assert_eq!(OP.tolerance(&case([100_000, 1, 1, 1])), Tolerance::F32);
    }

    #[rstest]
    #[case(32, 4, Strategy::Small { block: 32 })]
    #[case(33, 4, Strategy::Small { block: 64 })]
    #[case(225, 4, Strategy::Small { block: 256 })]
    #[case(1023, 8, Strategy::Small { block: 256 })]
    #[case(1024, 8, Strategy::BlockCarry)]
    // One row: 1023 small, 1024 block scan, 1025 device-wide.
    #[case(1023, 1, Strategy::Small { block: 256 })]
    #[case(1024, 1, Strategy::BlockCarry)]
    #[case(1025, 1, Strategy::DeviceScan)]
    // Two rows: 8193 / 2 = 4096 is not > 4096, 8194 / 2 = 4097 is.
    #[case(8193, 2, Strategy::BlockCarry)]
    #[case(8194, 2, Strategy::DeviceScan)]
    fn strategies_change_where_upstream_changes_them(
        #[case] ncols: i64,
        #[case] nrows: i64,
        #[case] want: Strategy,
    ) {
        assert_eq!(strategy(ncols, nrows), want);
    }

    #[test]
    fn strategy_plans() {
        // The small kernel's smem: block + warps + 2 floats.
        let p = GGML.plan(&case([100, 3, 1, 1]), &h200()).unwrap();
        assert_eq!(p.launches[0].block, [128, 1, 1]);
        assert_eq!(p.launches[0].smem, (128 + 4 + 2) * 4);
        // The device-wide scan: three launches per row over a 1-D tile grid, one list
        // repeated per row.
        let p = GGML.plan(&case([8194, 2, 1, 1]), &h200()).unwrap();
        assert_eq!(p.launches.len(), 3);
        assert_eq!((p.repeat, p.launch_count()), ([2, 1, 1], 6));
        assert_eq!(p.launches[0].grid, [9, 1, 1]);
        assert_eq!(p.launches[2].grid, [8, 1, 1]);
    }

    fn h200() -> LimitsProfile {
        LimitsProfile::builtin("h200").unwrap()
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h = h200();
        for base in [[64, 1, 0, 1], [1024, 1, 0, 1]] {
            let mut ne = base;
            ne[2] = 65_535;
            assert!(GGML.plan(&case(ne), &h).unwrap().violations(&h).is_empty());
            ne[2] = 65_536;
            let v = GGML.plan(&case(ne), &h).unwrap().violations(&h);
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!((v[0].dim.as_str(), v[0].value), ("grid.y", 65_536));
            assert!(CLAMPED
                .plan(&case(ne), &h)
                .unwrap()
                .violations(&h)
                .is_empty());
        }
        let v = GGML
            .plan(&case([64, 1, 1, 65_536]), &h)
            .unwrap()
            .violations(&h);
        assert_eq!(v[0].dim, "grid.z");
    }

    #[test]
    fn the_2_31_boundary_straddles_int_range() {
        let b = OP
            .boundaries(&h200())
            .into_iter()
            .find(|b| b.label.starts_with("elements past 2^31"))
            .unwrap();
        let elems = |rows: i64| 1024 * rows;
        let v = b.probe_values();
        assert_eq!(elems(v[0]), 1 << 31, "the last row fits an int offset");
        assert!(elems(v[1]) > 1 << 31);
        // The last row's first offset: fits at 2^31 elements, wraps one row later.
        assert!(1024 * (v[0] - 1) <= i32::MAX as i64);
        assert!(1024 * (v[1] - 1) > i32::MAX as i64);
        assert_eq!(b.impls, vec!["int32-index", "clamped"]);
        // Both plans are legal launches: the failure is in the arithmetic, not the launch.
        for imp in [&INT32_INDEX as &dyn Impl, &CLAMPED] {
            let c = case([1024, v[1], 1, 1]);
            assert!(imp
                .plan(&c, &h200())
                .unwrap()
                .violations(&h200())
                .is_empty());
        }
    }

    /// The device-wide scan's row pointers, resolved as `RunCtx::run_plan` resolves them
    /// (offset + step[l] * index at level l), are each row's: upstream's `r * ne00` for ggml,
    /// the input's strides for the fix, dense rows of dst for both.
    #[rstest]
    #[case(&GGML, RowStep::Ne00)]
    #[case(&CLAMPED, RowStep::Strides)]
    fn device_scan_row_pointers_are_each_rows(#[case] imp: &KernelImpl, #[case] step: RowStep) {
        let c = case([9000 * 12, 3, 2, 2]).with_param("row_pad", 7);
        let l = RowLayout::of(&c);
        assert_eq!(strategy(l.ncols, l.total_rows()), Strategy::DeviceScan);
        let plan = imp.plan(&c, &h200()).unwrap();
        assert_eq!(plan.repeat, [3, 2, 2]);
        let at = |a: &KernelArg, i: [i64; 3]| match a {
            KernelArg::TensorAt {
                index,
                offset,
                step,
            } => (*index, offset + (0..3).map(|k| step[k] * i[k]).sum::<i64>()),
            other => panic!("not a row pointer: {other:?}"),
        };
        let mut r = 0i64;
        for i3 in 0..l.nsamples {
            for i2 in 0..l.nchannels {
                for i1 in 0..l.nrows {
                    let i = [i1, i2, i3];
                    let src = match step {
                        RowStep::Ne00 => r * l.ncols * 4,
                        RowStep::Strides => {
                            (i1 * l.stride_row + i2 * l.stride_channel + i3 * l.stride_sample) * 4
                        }
                    };
                    let dst = r * l.ncols * 4;
                    assert_eq!(at(&plan.launches[0].args[0], i), (0, src));
                    assert_eq!(at(&plan.launches[0].args[1], i), (1, dst));
                    assert_eq!(at(&plan.launches[2].args[0], i), (1, dst));
                    r += 1;
                }
            }
        }
        // One scratch, shared by name by the three launches, listed as a planned buffer.
        let sums = KernelArg::Scratch {
            name: TILE_SUMS.into(),
            bytes: 106 * 4,
        };
        assert_eq!(plan.launches[0].args[2], sums);
        assert_eq!(plan.launches[1].args[0], sums);
        assert_eq!(plan.launches[2].args[1], sums);
        assert_eq!(plan.buffers.len(), 1);
        assert_eq!(plan.buffers[0].bytes, 106 * 4);
    }

    /// Every impl and strategy: planned arguments match the kernel's declared parameters.
    #[rstest]
    fn plan_args_match_the_kernel_signatures(
        #[values(&GGML, &CLAMPED, &INT32_INDEX)] imp: &KernelImpl,
        #[values([100, 3, 2, 1], [1024, 3, 2, 1], [8194, 2, 1, 1], [100_000, 1, 1, 1])] ne: Ne,
        #[values(0, 3)] pad: i64,
    ) {
        let plan = imp
            .plan(&case(ne).with_param("row_pad", pad), &h200())
            .unwrap();
        crate::signature::check_plan(&plan).unwrap();
        assert!(plan.standalone().is_ok());
    }

    /// The plan of 65535 rows is the plan of 3 rows with another repeat count: launches and
    /// arguments do not grow with the shape, on every strategy.
    #[rstest]
    fn plan_size_does_not_grow_with_the_shape(
        #[values(&GGML, &CLAMPED, &INT32_INDEX)] imp: &KernelImpl,
        #[values(64, 1024, 4097 * 65_535)] ncols: i64,
    ) {
        let shape = |p: &Plan| {
            (
                p.launches.len(),
                p.launches.iter().map(|l| l.args.len()).collect::<Vec<_>>(),
                p.buffers.len(),
            )
        };
        let small = imp.plan(&case([ncols, 3, 1, 1]), &h200()).unwrap();
        for ne in [[ncols, 65_535, 1, 1], [ncols, 5, 13_107, 1]] {
            let big = imp.plan(&case(ne), &h200()).unwrap();
            assert_eq!(shape(&big), shape(&small), "{ne:?}");
            let same_strategy = strategy(ncols, 3) == strategy(ncols, 65_535);
            if same_strategy && small.repetitions() > 1 {
                assert_eq!(big.repetitions(), 65_535);
            }
        }
    }

    #[test]
    fn grid_limits_are_generated_not_declared() {
        let base = OP.probe_base().unwrap();
        let generated = kedge_core::contract::boundary::generated(&base, &h200(), DType::F32);
        for d in [2, 3] {
            let b = generated
                .iter()
                .find(|b| b.axis == Axis::Ne(d) && b.probe_values() == vec![65_535, 65_536])
                .unwrap();
            let mut ne = b.base;
            ne[d] = 65_536;
            assert!(!GGML
                .plan(&case(ne), &h200())
                .unwrap()
                .violations(&h200())
                .is_empty());
            assert_eq!(OP.reach(&case(ne)).as_deref(), Some(REACH_GRID));
        }
        for b in OP.boundaries(&h200()) {
            let short_rows_on_grid = b.base[0] < BLOCK_CARRY_FROM
                && b.params.is_empty()
                && matches!(b.axis, Axis::Ne(2) | Axis::Ne(3));
            assert!(!short_rows_on_grid, "{} is generated", b.label);
        }
    }

    #[test]
    fn upstream_line() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_cumsum(GGML_TYPE_F32, {64, 1, 65536, 1}));"
        );
        assert_eq!(r.vars, "type=f32,ne=[64,1,65536,1]");
        assert_eq!(r.op_name, "CUMSUM");
        assert_eq!(OP.upstream_name(), Some("CUMSUM"));
    }

    proptest::proptest! {
        #[test]
        fn fixed_impls_never_plan_a_violation(
            n0 in 1i64..300_000, n1 in 1i64..200_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
            prof in 0usize..5,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let c = case([n0, n1, n2, n3]);
            for imp in [&CLAMPED as &dyn Impl, &INT32_INDEX] {
                let plan = imp.plan(&c, &p).unwrap();
                proptest::prop_assert!(plan.violations(&p).is_empty(), "{}: {:?}", imp.name(), plan.violations(&p));
            }
        }
    }
}
