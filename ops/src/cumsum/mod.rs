//! cumsum (ggml CUMSUM, f32): inclusive prefix sum along ne0, per row.
//!
//! Upstream (ggml-cuda/cumsum.cu) chooses by row length: a device-wide scan per row
//! (`cub::DeviceScan`, host loop over rows) when `(nrows == 1 && ne00 > 1024) ||
//! ne00 / nrows > 4096`; else a 256-thread block scan with a carry for `ne00 >= 1024`; else a
//! block of `min(pad(ne00, 32), 256)` threads with 4 elements each. The row kernels launch
//! `grid_dims(ne01, ne02, ne03)`: ne[2] on grid.y, ne[3] on grid.z, both capped at 65535.
//! Those thresholds are the strategy boundaries here. The `.cu` file says how the CUB pieces
//! are stood in for (NVRTC has no CUB).
//!
//! This op also carries the index-width case: impl `int32-index` computes flat element offsets
//! in `int`, and the boundary "elements past 2^31" ([1024, 2097153] f32, just over 2^31
//! elements, 8 GiB per tensor) must see it fail while the 64-bit `clamped` passes.

use crate::rows::{cpp_ne, map_rows, row_tensors, vars_ne, RowLayout, ROW_PAD};
use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::params::Params;
use kedge_core::*;

const SRC: &str = include_str!("cumsum.cu");
const FILE: &str = "ops/src/cumsum/cumsum.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct Cumsum;
pub static OP: Cumsum = Cumsum;

static PARAMS: &[ParamSpec] = &[ROW_PAD];

/// ggml's `CUDA_CUMSUM_BLOCK_SIZE`.
pub const BLOCK: u64 = 256;
/// Rows at least this long use the block scan with carry (`use_cub && ne00 >= 1024`).
pub const BLOCK_CARRY_FROM: i64 = 1024;
/// A single row longer than this takes the device-wide scan (`nrows == 1 && ne00 > 1024`).
pub const DEVICE_SCAN_SINGLE_ROW_ABOVE: i64 = 1024;
/// `ne00 / nrows > 4096` takes the device-wide scan.
pub const DEVICE_SCAN_RATIO_ABOVE: i64 = 4096;
/// Elements per tile of the device-wide scan (cumsum.cu's `TILE`).
pub const TILE: i64 = 1024;
/// [1024, 2097153] f32: 2^31 + 1024 elements, the first row whose offset wraps an `int`.
pub const ROWS_PAST_2_31: i64 = 2_097_153;

pub const REACH_GRID: &str = "synthetic: no known model reaches it (the incident could not identify CUMSUM's consumers; ne[2] > 65535 rows of a cumsum is not a shape any known graph builds)";

pub const REACH_2_31: &str = "synthetic: no known model reaches it (one f32 cumsum over more than 2^31 elements, 8 GiB per tensor)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Device-wide scan of each row (host loop over rows).
    DeviceScan,
    /// 256 threads, 256-element chunks, carry between chunks.
    BlockCarry,
    /// `block` threads, 4 elements per thread.
    Small { block: u64 },
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
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::F32_ONLY
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED, &INT32_INDEX]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        row_tensors(case)
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        Ok(vec![map_rows(&inputs[0], cumsum_row)])
    }
    // The default f32 NMSE bound (1e-7) holds for these row lengths: an f32 prefix sum of
    // uniform [-1, 1] inputs accumulated strictly in order (the worst order; the kernels' block
    // and tile scans add fewer terms in sequence) has NMSE about 1e-10 at 1e5 elements, see
    // `f32_prefix_error_is_far_below_the_bound`. So the tolerance is not loosened.
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        vec![
            Boundary::ne(
                "ne[2] on grid.y (short rows)",
                2,
                gy,
                [64, 1, 0, 1],
                Reach(REACH_GRID),
            ),
            Boundary::ne(
                "ne[2] on grid.y (block scan with carry)",
                2,
                gy,
                [1024, 1, 0, 1],
                Reach(REACH_GRID),
            ),
            Boundary::ne("ne[3] on grid.z", 3, gz, [64, 1, 1, 0], Reach(REACH_GRID)),
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
            .with_param("row_pad", 5),
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
            .with_param("row_pad", 7),
            Boundary::ne(
                "elements past 2^31: int32 flat offsets wrap ([1024, N] f32, 8 GiB per tensor, 16 GiB per case)",
                1,
                ROWS_PAST_2_31,
                [1024, 0, 1, 1],
                Reach(REACH_2_31),
            )
            .with_values(vec![ROWS_PAST_2_31 - 1, ROWS_PAST_2_31])
            .only(&["int32-index", "clamped"]),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let pad = |p: i64| {
            let mut m = Params::new();
            m.insert("row_pad".into(), p.into());
            m
        };
        vec![
            ([10, 5, 4, 3], Params::new()),
            ([1, 1, 1, 1], Params::new()),
            ([33, 7, 3, 2], Params::new()),
            ([1000, 3, 2, 1], Params::new()),
            ([5000, 3, 2, 1], Params::new()),
            ([100_000, 1, 1, 1], Params::new()),
            ([100_000, 3, 1, 1], Params::new()),
            ([300, 4, 2, 2], pad(3)),
        ]
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        // test-backend-ops: test_cumsum(type = GGML_TYPE_F32, ne = {10, 5, 4, 3}), vars
        // "type,ne" (best knowledge; it has no view/padding flag, so row_pad is not expressible).
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
        if case.ne.iter().product::<i64>() > 1 << 31 {
            Some(REACH_2_31.into())
        } else if case.ne[2] > 65_535 || case.ne[3] > 65_535 {
            Some(REACH_GRID.into())
        } else {
            None
        }
    }
}

pub fn cumsum_row(x: &[f64], dst: &mut [f64]) {
    let mut s = 0.0;
    for (d, v) in dst.iter_mut().zip(x) {
        s += v;
        *d = s;
    }
}

fn grid(l: &RowLayout, limits: &LimitsProfile, clamp: bool) -> [u64; 3] {
    let (y, z) = (l.nchannels as u64, l.nsamples as u64);
    if clamp {
        [
            l.nrows as u64,
            y.min(limits.grid_limit(1)),
            z.min(limits.grid_limit(2)),
        ]
    } else {
        [l.nrows as u64, y, z]
    }
}

/// Three launches per row, in row order (i1 fastest): tiles, tile sums, tile offsets.
fn device_scan_plan(l: &RowLayout) -> Vec<LaunchPlan> {
    let ntiles = (l.ncols as u64).div_ceil(TILE as u64);
    let mut v = Vec::with_capacity(3 * l.total_rows() as usize);
    for _ in 0..l.total_rows() {
        v.push(LaunchPlan::new(
            k("cumsum_row_tiles"),
            [ntiles, 1, 1],
            [BLOCK, 1, 1],
            0,
        ));
        v.push(LaunchPlan::new(
            k("cumsum_tile_sums"),
            [1, 1, 1],
            [BLOCK, 1, 1],
            0,
        ));
        // At least two tiles: a device-wide scan is only chosen for ncols > 1024.
        v.push(LaunchPlan::new(
            k("cumsum_add_tile_offsets"),
            [ntiles.saturating_sub(1).max(1), 1, 1],
            [BLOCK, 1, 1],
            0,
        ));
    }
    v
}

fn row_plan(case: &Case, limits: &LimitsProfile, prefix: &str, clamp: bool) -> Plan {
    let l = RowLayout::of(case);
    let g = grid(&l, limits, clamp);
    match strategy(l.ncols, l.total_rows()) {
        Strategy::DeviceScan => Plan::kernels(device_scan_plan(&l)),
        Strategy::BlockCarry => Plan::kernels(vec![LaunchPlan::new(
            k(if prefix == "ggml" {
                "cumsum_ggml_block_carry"
            } else {
                "cumsum_clamped_block_carry"
            }),
            g,
            [BLOCK, 1, 1],
            0,
        )]),
        Strategy::Small { block } => Plan::kernels(vec![LaunchPlan::new(
            k(if prefix == "ggml" {
                "cumsum_ggml_small"
            } else {
                "cumsum_clamped_small"
            }),
            g,
            [block, 1, 1],
            small_smem(block),
        )]),
    }
}

fn row_args(ctx: &RunCtx<'_>, l: &RowLayout) -> Vec<KArg> {
    vec![
        KArg::Ptr(ctx.ptr(0)),
        KArg::Ptr(ctx.ptr(1)),
        KArg::I64(l.ncols),
        KArg::I64(l.nrows),
        KArg::I64(l.nchannels),
        KArg::I64(l.nsamples),
        KArg::I64(l.stride_row),
        KArg::I64(l.stride_channel),
        KArg::I64(l.stride_sample),
    ]
}

/// `upstream_row_step`: step source rows by ne00 as upstream's per-row CUB loop does
/// (`src0_d + i * src0_ne[0]`), which is right only for rows without padding; the fix uses the
/// row strides.
fn run_rows(
    ctx: &mut RunCtx<'_>,
    case: &Case,
    plan: &Plan,
    upstream_row_step: bool,
) -> Result<(), RunError> {
    let l = RowLayout::of(case);
    if strategy(l.ncols, l.total_rows()) != Strategy::DeviceScan {
        let args = row_args(ctx, &l);
        return ctx.launch(&plan.launches[0], &args);
    }
    let ntiles = (l.ncols as u64).div_ceil(TILE as u64);
    let sums = ctx.scratch("tile_sums", ntiles * 4, 4)?;
    let (x, dst) = (ctx.ptr(0), ctx.ptr(1));
    let mut r = 0usize;
    for i3 in 0..l.nsamples {
        for i2 in 0..l.nchannels {
            for i1 in 0..l.nrows {
                let src_off = if upstream_row_step {
                    r as i64 * l.ncols * 4
                } else {
                    (i1 * l.stride_row + i2 * l.stride_channel + i3 * l.stride_sample) * 4
                };
                let dst_off = (((i3 * l.nchannels + i2) * l.nrows + i1) * l.ncols) * 4;
                let src_row = KArg::Ptr(x + src_off as u64);
                let dst_row = KArg::Ptr(dst + dst_off as u64);
                let n = KArg::I64(l.ncols);
                ctx.launch(
                    &plan.launches[3 * r],
                    &[src_row, dst_row, KArg::Ptr(sums), n],
                )?;
                ctx.launch(
                    &plan.launches[3 * r + 1],
                    &[KArg::Ptr(sums), KArg::I64(ntiles as i64)],
                )?;
                ctx.launch(&plan.launches[3 * r + 2], &[dst_row, KArg::Ptr(sums), n])?;
                r += 1;
            }
        }
    }
    Ok(())
}

/// Upstream: strategy by row length, grid (ne01, ne02, ne03) for the row kernels.
pub struct Ggml;
pub static GGML: Ggml = Ggml;

impl Impl for Ggml {
    fn name(&self) -> &'static str {
        "ggml"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Upstream
    }
    fn about(&self) -> &'static str {
        "ggml cumsum.cu as shipped (CUB build): device-wide scan per row (rows stepped by ne00, as upstream does), 256-thread block scan with carry from 1024, small block below; grid (ne01, ne02, ne03)"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        Ok(row_plan(case, limits, "ggml", false))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        run_rows(ctx, case, plan, true)
    }
}

/// The fix: same strategies, grid clamped, ne[2]/ne[3] grid-stride loops.
pub struct Clamped;
pub static CLAMPED: Clamped = Clamped;

impl Impl for Clamped {
    fn name(&self) -> &'static str {
        "clamped"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Fixed
    }
    fn about(&self) -> &'static str {
        "ggml's strategies with the grid clamped to the device limits and grid-stride loops over ne[2] and ne[3]; 64-bit offsets"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let l = RowLayout::of(case);
        if l.nrows as u64 > limits.grid_limit(0) {
            return Err(format!(
                "ne[1] = {} rows exceeds grid.x {}; this impl keeps one row per block.x",
                l.nrows,
                limits.grid_limit(0)
            ));
        }
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
            ));
        }
        Ok(row_plan(case, limits, "clamped", true))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        run_rows(ctx, case, plan, false)
    }
}

/// CALIBRATION of the index-width boundary: the clamped block scan with `int` offsets.
pub struct Int32Index;
pub static INT32_INDEX: Int32Index = Int32Index;

impl Impl for Int32Index {
    fn name(&self) -> &'static str {
        "int32-index"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Planted {
            bug: "flat element offsets computed in 32-bit int: right up to 2^31 elements, wraps past it (boundary 'elements past 2^31'); every smaller case passes by design",
            expect: &[Detector::DeviceSync, Detector::Poison, Detector::Reference],
        }
    }
    fn about(&self) -> &'static str {
        "CALIBRATION: the clamped 256-thread block scan with row offsets and element indices in int, as many kernels compute them"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let l = RowLayout::of(case);
        if l.nrows as u64 > limits.grid_limit(0) {
            return Err(format!(
                "ne[1] = {} rows exceeds grid.x {}",
                l.nrows,
                limits.grid_limit(0)
            ));
        }
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k("cumsum_int32_index"),
            grid(&l, limits, true),
            [BLOCK, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let l = RowLayout::of(case);
        // The kernel takes int extents and strides, as an int-indexed kernel's launcher does;
        // `as i32` wraps exactly as the C cast would.
        let args = [
            KArg::Ptr(ctx.ptr(0)),
            KArg::Ptr(ctx.ptr(1)),
            KArg::I32(l.ncols as i32),
            KArg::I32(l.nrows as i32),
            KArg::I32(l.nchannels as i32),
            KArg::I32(l.nsamples as i32),
            KArg::I32(l.stride_row as i32),
            KArg::I32(l.stride_channel as i32),
            KArg::I32(l.stride_sample as i32),
        ];
        ctx.launch(&plan.launches[0], &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::compare::Tolerance;
    use kedge_core::rng::Rng;

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
            assert!(
                (row[776] - sum).abs() < 1e-9,
                "row {r}: {} vs {sum}",
                row[776]
            );
            // and each element adds exactly one input to the one before
            assert!((row[1] - row[0] - inputs[0].get(1, i1, i2, i3)).abs() < 1e-12);
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

    #[test]
    fn strategies_change_where_upstream_changes_them() {
        assert_eq!(strategy(32, 4), Strategy::Small { block: 32 });
        assert_eq!(strategy(33, 4), Strategy::Small { block: 64 });
        assert_eq!(strategy(225, 4), Strategy::Small { block: 256 });
        assert_eq!(strategy(1023, 8), Strategy::Small { block: 256 });
        assert_eq!(strategy(1024, 8), Strategy::BlockCarry);
        // One row: 1023 small, 1024 block scan, 1025 device-wide.
        assert_eq!(strategy(1023, 1), Strategy::Small { block: 256 });
        assert_eq!(strategy(1024, 1), Strategy::BlockCarry);
        assert_eq!(strategy(1025, 1), Strategy::DeviceScan);
        // Two rows: 8193 / 2 = 4096 is not > 4096, 8194 / 2 = 4097 is.
        assert_eq!(strategy(8193, 2), Strategy::BlockCarry);
        assert_eq!(strategy(8194, 2), Strategy::DeviceScan);
        // The small kernel's smem: block + warps + 2 floats.
        let p = GGML.plan(&case([100, 3, 1, 1]), &h200()).unwrap();
        assert_eq!(p.launches[0].block, [128, 1, 1]);
        assert_eq!(p.launches[0].smem, (128 + 4 + 2) * 4);
        // The device-wide scan: three launches per row over a 1-D tile grid.
        let p = GGML.plan(&case([8194, 2, 1, 1]), &h200()).unwrap();
        assert_eq!(p.launches.len(), 6);
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

    #[test]
    fn upstream_line() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_cumsum(GGML_TYPE_F32, {64, 1, 65536, 1}));"
        );
        assert_eq!(r.vars, "type=f32,ne=[64,1,65536,1]");
        assert_eq!(r.op_name, "CUMSUM");
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
