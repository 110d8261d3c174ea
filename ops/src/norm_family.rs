//! Launch geometry and helpers shared by the row normalizations added beside rms_norm (norm,
//! l2_norm, rms_norm_mul_add). Upstream launches all of them the same way (ggml norm.cu): one
//! block per row, grid (nrows, nchannels, nsamples), so ne[2] and ne[3] land on grid.y and
//! grid.z. The fix keeps rows on grid.x and clamps the other two axes.

use crate::rows::RowLayout;
use kedge_core::host::HostTensor;
use kedge_core::params::ParamsExt;
use kedge_core::{Case, LimitsProfile, Ne, Params};

/// ggml's grid: `dim3 blocks_num(nrows, nchannels, nsamples)`.
pub fn ggml_grid(l: &RowLayout) -> [u64; 3] {
    [l.nrows as u64, l.nchannels as u64, l.nsamples as u64]
}

/// The fix's grid: rows on grid.x (2^31-1 on every profile), channels and samples clamped to
/// the profile and walked by grid-stride loops in the kernel. Refuses what the kernel cannot
/// index: a row longer than its `int` column index, or more rows than grid.x holds.
pub fn clamped_grid(l: &RowLayout, limits: &LimitsProfile) -> Result<[u64; 3], String> {
    if l.ncols > i32::MAX as i64 {
        return Err(format!(
            "ncols {} does not fit the kernel's int column index",
            l.ncols
        ));
    }
    if l.nrows as u64 > limits.grid_limit(0) {
        return Err(format!(
            "ne[1] = {} rows exceeds grid.x {}; this impl keeps one row per block.x",
            l.nrows,
            limits.grid_limit(0)
        ));
    }
    Ok([
        l.nrows as u64,
        (l.nchannels as u64).min(limits.grid_limit(1)),
        (l.nsamples as u64).min(limits.grid_limit(2)),
    ])
}

/// Apply `f` to every row of `x` with the row's (i1, i2, i3), writing rows of the dense
/// output, in parallel. For references whose row depends on its position (broadcast weights).
pub fn map_rows_indexed(
    x: &HostTensor,
    f: impl Fn([usize; 3], &[f64], &mut [f64]) + Sync,
) -> Vec<f64> {
    use rayon::prelude::*;
    let [n0, n1, n2, n3] = x.ne.map(|v| v as usize);
    let mut out = vec![0.0f64; n0 * n1 * n2 * n3];
    out.par_chunks_mut(n0).enumerate().for_each_init(
        || vec![0.0f64; n0],
        |row, (r, dst)| {
            let idx = [r % n1, (r / n1) % n2, r / (n1 * n2)];
            for (i0, v) in row.iter_mut().enumerate() {
                *v = x.get(i0, idx[0], idx[1], idx[2]);
            }
            f(idx, row, dst);
        },
    );
    out
}

/// test-backend-ops' `v` flag and `ne` for a case. Upstream's `v=1` allocates `ne` and runs
/// the op on a view of half of every dimension (`ggml_view_4d(a, ne0/2, ne1/2, ne2/2, ne3/2,
/// a->nb[1], a->nb[2], a->nb[3], 0)`), so a padded case is emitted with every dimension
/// doubled: the view then has exactly the case's shape, with padded rows. (Upstream's view
/// also skips whole rows between channels; the launch geometry, which is what fails, is the
/// same.)
pub fn upstream_view(case: &Case) -> (bool, Ne) {
    if case.params.i64_or("row_pad", 0) > 0 {
        (true, case.ne.map(|d| d * 2))
    } else {
        (false, case.ne)
    }
}

/// Params with only `row_pad` set, for smoke shapes.
pub fn pad(p: i64) -> Params {
    let mut m = Params::new();
    m.insert("row_pad".into(), p.into());
    m
}

/// The two launches of a row normalization whose only parameter is `eps` (norm, l2_norm): the
/// upstream one and the fix differ only in grid and argument list, and the ops only in their
/// kernels, so one impl type serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowNormGeometry {
    /// ggml: grid (nrows, nchannels, nsamples), extents read from gridDim.
    Ggml,
    /// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
    Clamped,
}

/// ggml switches to 1024 threads at ncols 1024 (norm.cu).
pub const ROW_NORM_BLOCK_SWITCH: i64 = 1024;

pub struct RowNormImpl {
    pub geometry: RowNormGeometry,
    pub about: &'static str,
    /// Threads per block below ncols 1024 (32 for norm and l2_norm, as upstream launches them).
    pub small_block: u64,
    /// Entries for the small block and for 1024 threads.
    pub entries: [kedge_core::Kernel; 2],
    pub default_eps: f64,
}

impl kedge_core::Impl for RowNormImpl {
    fn name(&self) -> &'static str {
        match self.geometry {
            RowNormGeometry::Ggml => "ggml",
            RowNormGeometry::Clamped => "clamped",
        }
    }
    fn role(&self) -> kedge_core::ImplRole {
        match self.geometry {
            RowNormGeometry::Ggml => kedge_core::ImplRole::Upstream,
            RowNormGeometry::Clamped => kedge_core::ImplRole::Fixed,
        }
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<kedge_core::Plan, String> {
        let l = RowLayout::of(case);
        let grid = match self.geometry {
            RowNormGeometry::Ggml => ggml_grid(&l),
            RowNormGeometry::Clamped => clamped_grid(&l, limits)?,
        };
        let (bs, entry) = if l.ncols < ROW_NORM_BLOCK_SWITCH {
            (self.small_block, self.entries[0])
        } else {
            (1024, self.entries[1])
        };
        Ok(kedge_core::Plan::kernels(vec![
            kedge_core::LaunchPlan::new(entry, grid, [bs, 1, 1], 0),
        ]))
    }
    fn run(
        &self,
        ctx: &mut kedge_core::device::RunCtx<'_>,
        case: &Case,
        plan: &kedge_core::Plan,
    ) -> Result<(), kedge_core::device::RunError> {
        let args = self.args(case, ctx.ptr(0), ctx.ptr(1));
        ctx.launch(&plan.launches[0], &args)
    }
}

impl RowNormImpl {
    /// The kernel's arguments: x, dst, ncols, [the true extents, clamped only], the input's
    /// strides in elements, eps.
    pub fn args(&self, case: &Case, x: u64, dst: u64) -> Vec<kedge_core::device::KArg> {
        use kedge_core::device::KArg;
        let l = RowLayout::of(case);
        let mut args = vec![KArg::Ptr(x), KArg::Ptr(dst), KArg::I32(l.ncols as i32)];
        if self.geometry == RowNormGeometry::Clamped {
            args.extend([
                KArg::I64(l.nrows),
                KArg::I64(l.nchannels),
                KArg::I64(l.nsamples),
            ]);
        }
        args.extend([
            KArg::I64(l.stride_row),
            KArg::I64(l.stride_channel),
            KArg::I64(l.stride_sample),
            KArg::F32(case.params.f64_or("eps", self.default_eps) as f32),
        ]);
        args
    }
}
