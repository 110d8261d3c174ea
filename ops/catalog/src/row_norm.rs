//! The row normalizations ggml launches the same way (norm.cu): rms_norm, norm and l2_norm,
//! declared once. One block per row; upstream's grid is `dim3 blocks_num(nrows, nchannels,
//! nsamples)` with the kernel reading its extents from gridDim, so ne\[2\] lands on grid.y and
//! `ne[3]` on grid.z, both capped at 65535 (the incident: a 260K-token context failing with
//! "CUDA error: invalid argument"). The fix keeps rows on grid.x, clamps the
//! other two axes and walks them with grid-stride loops. The three ops differ only in their
//! row function, their default eps, the small block size and their test-backend-ops line.
//!
//! Element types: f32, f16 and bf16 (`rows::FLOATS`). Upstream's CUDA backend runs these ops
//! on f32 only (norm.cu asserts `src0->type == GGML_TYPE_F32` in each launcher, although
//! `supports_op` checks only that rows are contiguous), and so does its CPU backend. kedge's
//! impls take f16 and bf16 too, as models of the same launch: the same grid, block and index
//! arithmetic with 2-byte elements (the row that starts at element 2^31 is then at byte 2^32),
//! loading the type, computing in f32 and storing the type, so a plugin or source kernel in
//! f16 or bf16 gets every case the f32 one gets.

use crate::rows::{map_rows, row_tensors, RowLayout};
use kedge_core::contract::upstream::{cpp_float, cpp_ne, ggml_float, vars_ne};
use kedge_core::model::host::HostTensor;
use kedge_core::*;

/// ggml switches from the small block to 1024 threads at ncols 1024 (norm.cu).
pub(crate) const BLOCK_SWITCH: i64 = 1024;

/// How a row normalization is written in test-backend-ops: the constructor and where the view
/// flag goes. Checked against the pinned `tests/test-backend-ops.cpp`: `test_rms_norm(type, ne,
/// v, eps, inplace)`, `test_norm(type, ne, v, eps, noncontig_rows)`, `test_l2_norm(type, ne,
/// eps, v, noncontig_rows)`.
pub(crate) struct Upstream {
    /// `test_rms_norm`
    pub(crate) ctor: &'static str,
    /// `RMS_NORM`
    pub(crate) op_name: &'static str,
    /// The view flag `v` comes after eps (test_l2_norm) rather than before it.
    pub(crate) eps_first: bool,
    /// What `vars()` prints after the last of type, ne, v and eps (`,inplace=0`).
    pub(crate) vars_suffix: &'static str,
}

/// One row normalization, as data.
pub(crate) struct RowNormOp {
    pub(crate) name: &'static str,
    pub(crate) about: &'static str,
    /// Its parameters (`eps` and `row_pad`), declared with `params!`.
    pub(crate) params: &'static [ParamSpec],
    /// The case's eps, read through the op's typed parameters.
    pub(crate) eps: fn(&Case) -> f64,
    /// The row function: `dst` from one row `x`, with `eps`.
    pub(crate) row: fn(&[f64], &mut [f64], f64),
    pub(crate) impls: &'static [&'static dyn Impl],
    pub(crate) upstream: Upstream,
    /// Who reaches `ne[2]` and `ne[3]` past the grid limit.
    pub(crate) reach_ne2: &'static str,
    pub(crate) reach_ne3: &'static str,
    /// Who takes the 1024-thread path.
    pub(crate) reach_block_switch: &'static str,
    /// Smoke shapes, with their row padding.
    pub(crate) smoke: &'static [(Ne, i64)],
    /// Boundaries of this op alone, beyond the family's and the generated ones.
    pub(crate) more_boundaries: fn(&LimitsProfile) -> Vec<Boundary>,
}

/// No boundaries beyond the family's.
pub(crate) fn no_more_boundaries(_: &LimitsProfile) -> Vec<Boundary> {
    Vec::new()
}

impl RowNormOp {
    fn eps(&self, case: &Case) -> f64 {
        (self.eps)(case)
    }
}

/// Params with only `row_pad` set, through the parameter every row op takes (`RowParams`).
pub(crate) fn pad(p: i64) -> Params {
    crate::params_with(|r: &mut crate::rows::RowParams| r.row_pad = p)
}

impl Op for RowNormOp {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some(self.upstream.op_name)
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::FLOATS
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        self.impls.to_vec()
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        row_tensors(case)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let eps = self.eps(case);
        let row = self.row;
        Ok(vec![map_rows(&inputs[0], |x, dst| row(x, dst, eps))])
    }
    /// f32: test-backend-ops' 1e-7; f16 and bf16: the same plus their rounding (the reference
    /// is not rounded to the output's type; `Tolerance::rounded_to` says why).
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to(case.dtype)
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase::rows([64, 1, 1, 1]))
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let mut v = vec![
            Boundary::ne(
                "ne[0] at the small-block -> 1024 thread switch",
                0,
                BLOCK_SWITCH,
                [0, 4, 3, 2],
                Reach(self.reach_block_switch),
            ),
            Boundary::ne(
                "ne[0] at a warp multiple, padded rows",
                0,
                32,
                [0, 3, 2, 1],
                Reach("a view of a larger tensor (test-backend-ops v=1)"),
            )
            .with_params(|p: &mut crate::rows::RowParams| p.row_pad = 5),
        ];
        v.extend((self.more_boundaries)(limits));
        v
    }
    /// Rows are normalized each on its own: a big case may be judged on sampled rows (a padded
    /// one is judged whole: its rows are not dense).
    fn row_sampling(&self, case: &Case) -> Option<kedge_core::RowSampling> {
        Some(kedge_core::RowSampling::uniform(
            self.tensors(case).ok()?.len(),
        ))
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        self.smoke.iter().map(|&(ne, p)| (ne, pad(p))).collect()
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let eps = self.eps(case);
        let u = &self.upstream;
        // A padded case maps to upstream's v=1, which views half of every dimension.
        let (v, ne) = upstream_view(case);
        let (args, vars) = if u.eps_first {
            (
                format!("{}, {v}", cpp_float(eps)),
                format!("eps={},v={}", ggml_float(eps), v as i32),
            )
        } else {
            (
                format!("{v}, {}", cpp_float(eps)),
                format!("v={},eps={}", v as i32, ggml_float(eps)),
            )
        };
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new {}({}, {}, {args}));",
                u.ctor,
                case.dtype.ggml_type(),
                cpp_ne(&ne),
            ),
            op_name: u.op_name.into(),
            vars: format!(
                "type={},ne={},{vars}{}",
                case.dtype,
                vars_ne(&ne),
                u.vars_suffix
            ),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if case.ne[2] > 65_535 {
            Some(self.reach_ne2.into())
        } else if case.ne[3] > 65_535 {
            Some(self.reach_ne3.into())
        } else {
            None
        }
    }
}

/// test-backend-ops' `v` flag and `ne` for a case. Upstream's `v=1` allocates `ne` and runs
/// the op on a view of half of every dimension (`ggml_view_4d(a, ne0/2, ne1/2, ne2/2, ne3/2,
/// a->nb[1], a->nb[2], a->nb[3], 0)`), so a padded case is emitted with every dimension
/// doubled: the view then has exactly the case's shape, with padded rows. (Upstream's view
/// also skips whole rows between channels; the launch geometry, which is what fails, is the
/// same.)
pub(crate) fn upstream_view(case: &Case) -> (bool, Ne) {
    let pad = case
        .params
        .get("row_pad")
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    if pad > 0 {
        (true, case.ne.map(|d| d * 2))
    } else {
        (false, case.ne)
    }
}

/// ggml's grid: `dim3 blocks_num(nrows, nchannels, nsamples)`.
pub(crate) fn ggml_grid(l: &RowLayout) -> [u64; 3] {
    [l.nrows as u64, l.nchannels as u64, l.nsamples as u64]
}

/// The fix's grid: rows on grid.x (2^31-1 on every profile), channels and samples clamped to
/// the profile and walked by grid-stride loops in the kernel. Refuses what the kernel cannot
/// index: a row longer than its `int` column index, or more rows than grid.x holds.
pub(crate) fn clamped_grid(l: &RowLayout, limits: &LimitsProfile) -> Result<[u64; 3], Refusal> {
    if l.ncols > i32::MAX as i64 {
        return Err(format!(
            "ncols {} does not fit the kernel's int column index",
            l.ncols
        )
        .into());
    }
    if l.nrows as u64 > limits.grid_limit(0) {
        return Err(format!(
            "ne[1] = {} rows exceeds grid.x {}; this impl keeps one row per block.x",
            l.nrows,
            limits.grid_limit(0)
        )
        .into());
    }
    Ok([
        l.nrows as u64,
        (l.nchannels as u64).min(limits.grid_limit(1)),
        (l.nsamples as u64).min(limits.grid_limit(2)),
    ])
}

/// Apply `f` to every row of `x` with the row's (i1, i2, i3), writing rows of the dense
/// output, in parallel. For references whose row depends on its position (broadcast weights).
pub(crate) fn map_rows_indexed(
    x: &HostTensor,
    f: impl Fn([usize; 3], &[f64], &mut [f64]) + Sync,
) -> Vec<f64> {
    let [n0, n1, n2, n3] = x.ne.map(|v| v as usize);
    let mut out = kedge_core::model::host::zeroed_f64(n0 * n1 * n2 * n3);
    crate::rows::par_rows(&mut out, n0, |row, r, dst| {
        let idx = [r % n1, (r / n1) % n2, r / (n1 * n2)];
        x.row_f64(idx[0], idx[1], idx[2], row);
        f(idx, row, dst);
    });
    out
}

/// Which launch geometry an impl of the family uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowNormGeometry {
    /// ggml: grid (nrows, nchannels, nsamples), extents read from gridDim.
    Ggml,
    /// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
    Clamped,
}

/// An impl of a row normalization: the geometry, and its kernel entries for the small block
/// and for 1024 threads (a single entry serves both when they are the same kernel).
pub(crate) struct RowNormImpl {
    pub(crate) name: &'static str,
    pub(crate) role: ImplRole,
    pub(crate) geometry: RowNormGeometry,
    pub(crate) about: &'static str,
    /// Threads per block below ncols 1024 (256 for rms_norm, 32 for norm and l2_norm, as
    /// upstream launches them).
    pub(crate) small_block: u64,
    /// Entries for the small block and for 1024 threads, in each element type.
    pub(crate) entries: [crate::rows::Typed; 2],
    /// Always launch the small block with the first entry (a calibration kernel).
    pub(crate) fixed_block: bool,
    /// The case's eps, read through the op's typed parameters.
    pub(crate) eps: fn(&Case) -> f64,
}

impl RowNormImpl {
    /// The launch for a case: geometry, block, the entry of the case's element type and the
    /// argument list (x, dst, ncols, [the true extents, clamped only], the input's strides in
    /// elements, eps).
    pub(crate) fn launch(
        &self,
        case: &Case,
        limits: &LimitsProfile,
    ) -> Result<LaunchPlan, Refusal> {
        let l = RowLayout::of(case);
        let grid = match self.geometry {
            RowNormGeometry::Ggml => ggml_grid(&l),
            RowNormGeometry::Clamped => clamped_grid(&l, limits)?,
        };
        let (bs, entry) = if self.fixed_block || l.ncols < BLOCK_SWITCH {
            (self.small_block, self.entries[0])
        } else {
            (1024, self.entries[1])
        };
        let entry = entry.kernel(case.dtype)?;
        let mut args = vec![
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::I32(l.ncols as i32),
        ];
        if self.geometry == RowNormGeometry::Clamped {
            args.extend(l.extent_args()[1..].iter().cloned());
        }
        args.extend(l.stride_args());
        args.push(KernelArg::F32((self.eps)(case) as f32));
        Ok(LaunchPlan::new(entry, grid, [bs, 1, 1], 0).args(args))
    }
}

impl Impl for RowNormImpl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        self.role
    }
    fn about(&self) -> &str {
        self.about
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
        Ok(Plan::single(self.launch(case, limits)?))
    }
}

/// The `ggml` and `clamped` impls of a family member whose kernels are named
/// `{prefix}_ggml_{small}`, `{prefix}_ggml_1024`, `{prefix}_clamped_{small}`, ...
macro_rules! row_norm_impls {
    ($src:expr, $eps:expr, $small:expr, $ggml_about:expr, [$g0:literal, $g1:literal], [$c0:literal, $c1:literal]) => {
        pub(crate) static GGML: $crate::row_norm::RowNormImpl = $crate::row_norm::RowNormImpl {
            name: "ggml",
            role: kedge_core::ImplRole::Upstream,
            geometry: $crate::row_norm::RowNormGeometry::Ggml,
            about: $ggml_about,
            small_block: $small,
            entries: [$crate::rows::typed!($src, $g0), $crate::rows::typed!($src, $g1)],
            fixed_block: false,
            eps: $eps,
        };
        pub(crate) static CLAMPED: $crate::row_norm::RowNormImpl = $crate::row_norm::RowNormImpl {
            name: "clamped",
            role: kedge_core::ImplRole::Fixed,
            geometry: $crate::row_norm::RowNormGeometry::Clamped,
            about: "grid clamped to the device limits, extents passed explicitly, grid-stride loops, 64-bit offsets (the incident's fix)",
            small_block: $small,
            entries: [$crate::rows::typed!($src, $c0), $crate::rows::typed!($src, $c1)],
            fixed_block: false,
            eps: $eps,
        };
    };
}
pub(crate) use row_norm_impls;
