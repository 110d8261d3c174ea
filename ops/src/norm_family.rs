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
