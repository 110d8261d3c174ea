//! softmax (ggml `soft_max_ext`, f32): `dst = softmax(x*scale + slope*mask)` per row of ne0.
//!
//! The mask is optional, f32 of shape [ne0, ne1, 1, 1], broadcast over dims 2 and 3 (the KQ
//! mask of attention: one row per query token, shared by every head). `max_bias` > 0 turns on
//! ALiBi: head `h` (`ne[2]` is the head count) gets slope m0^(h+1) below n_head_log2 and
//! m1^(2*(h - n_head_log2) + 1) above it, as ggml computes; without a mask the slope is unused.
//!
//! Upstream launch (ggml-cuda/softmax.cu, `soft_max_f32_cuda`): `block_nums(ne01, ne02, ne03)`,
//! so heads sit on grid.y and `ne[3]` on grid.z (the incident's sweep found it: a crash needs more
//! than 65535 heads, which no model has; kedge generates those boundaries from `probe_base`).
//! Block size: the smallest power of two >= ncols, from 32 up to 1024. The row is kept in
//! dynamic shared memory when `(pad(ncols, 32) + 32) * 4` bytes fit the device's opt-in shared
//! memory per block; otherwise the row is cached in dst. Upstream also instantiates the
//! shared-memory body for ncols in {32, 64, ..., 4096} as compile-time constants; those launch
//! with the same grid, block and shared memory, so kedge runs one body for all of them (their
//! ncols are boundaries all the same). Its cooperative column-parallel path (scale 1, no mask,
//! no ALiBi, ncols / nrows > 8192, past the threshold) is not modelled: the threshold
//! boundaries and the generated probes use scale != 1 so upstream would take the row kernel
//! modelled here.

use kedge_core::contract::upstream::{cpp_float, cpp_ne, ggml_float, vars_ne};
use kedge_core::model::host::HostTensor;
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/softmax/softmax.cu", "softmax.cu");

kedge_core::params! {
    /// softmax's parameters.
    pub(crate) struct SoftmaxParams {
        scale: float = 1.0, "multiplies x before the mask is added";
        mask: bool = false, "add an f32 mask of shape [ne0, ne1, 1, 1], broadcast over dims 2 and 3";
        max_bias: float = 0.0, "ALiBi max bias (> 0 needs the mask): per-head slope on the mask";
    }
}

pub(crate) struct Softmax;
pub(crate) static OP: Softmax = Softmax;

/// ggml's `WARP_SIZE` and `CUDA_SOFT_MAX_BLOCK_SIZE`.
pub(crate) const WARP: u64 = 32;
pub(crate) const MAX_BLOCK: u64 = 1024;
/// The largest ncols upstream instantiates the shared-memory body for
/// (`launch_soft_max_kernels<32, 64, 128, 256, 512, 1024, 2048, 4096>`).
pub(crate) const MAX_NCOLS_INSTANCE: i64 = 4096;

pub(crate) const REACH_SMEM: &str = "KQ softmax without flash attention has ncols = n_kv: a context past the threshold (58,080 tokens on an H200, 25,312 on an RTX 3090 or GB10) takes the uncached path; sampling softmax over a vocabulary (128,256 for Llama 3, 151,936 for Qwen) is past it on every device";
pub(crate) const REACH_BLOCK: &str =
    "KQ softmax rows of n_kv tokens: every context length walks through each block-size step";

/// Threads per block: `nth = WARP_SIZE; while (nth < ncols && nth < CUDA_SOFT_MAX_BLOCK_SIZE) nth *= 2;`
pub(crate) fn block_size(ncols: i64) -> u64 {
    let mut nth = WARP;
    while (nth as i64) < ncols && nth < MAX_BLOCK {
        nth *= 2;
    }
    nth
}

/// `GGML_PAD(ncols, WARP_SIZE)`.
fn pad32(n: i64) -> u64 {
    (n.max(0) as u64).div_ceil(WARP) * WARP
}

/// Bytes the row-in-shared-memory path asks for: `(GGML_PAD(ncols, WARP_SIZE) + WARP_SIZE) * sizeof(float)`.
pub(crate) fn shared_bytes(ncols: i64) -> u64 {
    (pad32(ncols) + WARP) * 4
}

/// The largest ncols whose row still fits the profile's opt-in shared memory: the shared-memory
/// threshold. ncols = threshold + 1 is the first to take the uncached path.
pub fn smem_threshold(limits: &LimitsProfile) -> i64 {
    let floats = limits.shared_per_block_optin.value / 4;
    ((floats.saturating_sub(WARP)) / WARP * WARP) as i64
}

/// ALiBi parameters as ggml's host code computes them, in f32: (n_head_log2, m0, m1).
pub(crate) fn alibi_params(n_head: i64, max_bias: f32) -> (u32, f32, f32) {
    let n_head = n_head.clamp(1, u32::MAX as i64) as u32;
    let n_head_log2 = 1u32 << (n_head as f32).log2().floor() as u32;
    let m0 = 2.0f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2.0f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    (n_head_log2, m0, m1)
}

/// ggml's `get_alibi_slope` in f64 (the reference's).
pub(crate) fn alibi_slope(max_bias: f64, h: u32, n_head: i64) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_head = n_head.clamp(1, u32::MAX as i64) as u32;
    let n_head_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
    let m0 = 2f64.powf(-max_bias / n_head_log2 as f64);
    let m1 = 2f64.powf(-(max_bias / 2.0) / n_head_log2 as f64);
    if h < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_head_log2) as i32 + 1)
    }
}

/// Softmax of one row in f64, max-subtracted.
pub(crate) fn softmax_row(v: &mut [f64]) {
    let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for x in v.iter_mut() {
        *x = (*x - m).exp();
        sum += *x;
    }
    for x in v.iter_mut() {
        *x /= sum;
    }
}

impl Op for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }
    fn about(&self) -> &'static str {
        "softmax over ne0 with scale, optional broadcast mask and ALiBi (ggml SOFT_MAX / soft_max_ext)"
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some("SOFT_MAX")
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::FLOATS
    }
    /// f32: 1e-7 (test-backend-ops allows softmax 1e-6; kedge's f64 reference keeps f32 at
    /// the default); f16 and bf16: the same plus their rounding. A row of `ncols`
    /// probabilities sums to 1, so its values fall to about 1/ncols: past 16,384 columns they
    /// are subnormal in f16, where rounding is off by up to 2^-25 whatever the value, so the
    /// bound takes `sqrt(n) / ||r|| <= ncols` (`Tolerance::rounded_to_small`).
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to_small(case.dtype, case.ne[0].max(1) as f64)
    }
    fn params(&self) -> &'static [ParamSpec] {
        SoftmaxParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let p = SoftmaxParams::of(case);
        if p.max_bias > 0.0 && !p.mask {
            // ggml_soft_max_impl asserts a mask when max_bias > 0: ALiBi biases the mask.
            return Err(CaseError::BadInput {
                op: "softmax".into(),
                msg: "max_bias > 0 (ALiBi) needs mask = true: the slope scales the mask".into(),
            });
        }
        let mut v = vec![TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?];
        if p.mask {
            v.push(TensorSpec::dense(
                "mask",
                Role::Input,
                DType::F32,
                [case.ne[0], case.ne[1], 1, 1],
            )?);
        }
        v.push(TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?);
        Ok(v)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let [n0, n1, n2, _] = case.ne.map(|v| v as usize);
        let p = SoftmaxParams::of(case);
        let x = inputs.first().ok_or_else(|| CaseError::BadInput {
            op: "softmax".into(),
            msg: "no input x".into(),
        })?;
        let mask = if p.mask {
            Some(inputs.get(1).ok_or_else(|| CaseError::BadInput {
                op: "softmax".into(),
                msg: "mask = true but no mask input".into(),
            })?)
        } else {
            None
        };
        let mut out =
            kedge_core::model::host::zeroed_f64(x.ne.iter().map(|&v| v as usize).product());
        crate::rows::par_rows(&mut out, n0, |_, r, row| {
            let i1 = r % n1;
            let i2 = (r / n1) % n2;
            let i3 = r / (n1 * n2);
            x.row_f64(i1, i2, i3, row);
            if p.scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= p.scale);
            }
            if let Some(m) = mask {
                let slope = alibi_slope(p.max_bias, i2 as u32, case.ne[2]);
                for (i0, v) in row.iter_mut().enumerate() {
                    *v += slope * m.get(i0, i1, 0, 0);
                }
            }
            softmax_row(row);
        });
        Ok(vec![out])
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        let mut base = ProbeBase::rows([32, 1, 1, 1]);
        // scale != 1 keeps upstream off its cooperative column-parallel path on the generated
        // row probes (one row past the shared-memory limit), so ggml's row kernel is what they
        // measure, as kedge models it.
        base.params = SoftmaxParams {
            scale: 0.5,
            ..Default::default()
        }
        .to_params();
        Some(base)
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let t = smem_threshold(limits);
        let mut b = vec![
            // The generated grid probes are unmasked; this one runs the masked launch (the
            // mask row from blockIdx.x, the head's slope from blockIdx.y) past the limit.
            Boundary::ne(
                "ne[2] heads on grid.y, masked",
                2,
                gy,
                [32, 2, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_params(|p: &mut SoftmaxParams| {
                p.mask = true;
                p.scale = 0.125;
            }),
            // scale != 1 keeps upstream off its cooperative column-parallel path (taken only
            // when scale == 1, no mask, no ALiBi and ncols/nrows > 8192), so ggml's fallback
            // row kernel is what this boundary measures.
            Boundary::ne(
                format!(
                    "ne[0] at the shared-memory threshold of {} ({} bytes opt-in)",
                    limits.name, limits.shared_per_block_optin.value
                ),
                0,
                t,
                [0, 2, 2, 1],
                Reach(REACH_SMEM),
            )
            .with_values(vec![t - 32, t - 1, t, t + 1, t + 32])
            .with_params(|p: &mut SoftmaxParams| p.scale = 0.5),
            Boundary::ne(
                "ne[0] at the shared-memory threshold, masked",
                0,
                t,
                [0, 3, 2, 1],
                Reach(REACH_SMEM),
            )
            .with_values(vec![t, t + 1])
            .with_params(|p: &mut SoftmaxParams| p.mask = true),
            Boundary::ne(
                "ne[2] across a power of two with ALiBi (m0 -> m1 slopes)",
                2,
                16,
                [64, 3, 0, 1],
                Reach("ALiBi models (BLOOM, MPT) with a head count that is not a power of two"),
            )
            .with_params(|p: &mut SoftmaxParams| {
                p.mask = true;
                p.max_bias = 8.0;
            }),
        ];
        // Upstream's ncols-specialized instances (ncols = 32 ... 4096 exactly take a
        // compile-time body, their neighbours the generic one); up to 1024 they are also the
        // block-size steps.
        let mut p = WARP as i64;
        while p <= MAX_NCOLS_INSTANCE {
            let label = if p < MAX_BLOCK as i64 {
                format!(
                    "ne[0] at the block-size step {p} -> {} threads (upstream's ncols={p} instance)",
                    p * 2
                )
            } else if p == MAX_BLOCK as i64 {
                format!(
                    "ne[0] at the {p}-thread cap ({} loops in-row; upstream's ncols={p} instance)",
                    p + 1
                )
            } else {
                format!(
                    "ne[0] at upstream's ncols={p} instance ({MAX_BLOCK} threads, the generic body on either side)"
                )
            };
            b.push(Boundary::ne(label, 0, p, [0, 3, 2, 1], Reach(REACH_BLOCK)));
            p *= 2;
        }
        b
    }
    /// Each row's softmax is its own, wherever it is, unless ALiBi is on: then a row's slope
    /// depends on its head (`ne[2]` index) and on the number of heads, so a case of some heads
    /// alone is not those heads of the case. A mask (one per query row, shared by every head)
    /// makes the case's slices planes, the mask read whole by each.
    fn row_sampling(&self, case: &Case) -> Option<kedge_core::RowSampling> {
        if SoftmaxParams::of(case).max_bias > 0.0 {
            return None;
        }
        Some(kedge_core::RowSampling::uniform(
            self.tensors(case).ok()?.len(),
        ))
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let p = |mask: bool, scale: f64, max_bias: f64| {
            crate::params_with(|p: &mut SoftmaxParams| {
                p.mask = mask;
                p.scale = scale;
                p.max_bias = max_bias;
            })
        };
        vec![
            ([10, 5, 4, 3], Params::new()),
            ([1, 1, 1, 1], Params::new()),
            ([33, 7, 3, 2], p(true, 0.1, 0.0)),
            ([1024, 2, 2, 1], p(false, 2.0, 0.0)),
            ([1025, 2, 2, 1], p(true, 1.0, 0.0)),
            ([4096, 3, 2, 1], p(true, 0.5, 8.0)),
            ([64, 4, 12, 2], p(true, 0.125, 8.0)),
            // Past the shared-memory threshold of every built-in profile: the uncached path.
            ([60_000, 2, 1, 1], p(false, 0.5, 0.0)),
            ([60_000, 2, 2, 1], p(true, 1.0, 0.0)),
        ]
    }
    /// test-backend-ops (tests/test-backend-ops.cpp, `struct test_soft_max`):
    /// `test_soft_max(ggml_type type = GGML_TYPE_F32, std::array<int64_t, 4> ne = {10, 5, 4, 3},
    /// bool mask = false, bool sinks = false, ggml_type m_prec = GGML_TYPE_F32,
    /// std::array<int64_t, 2> nr23 = {1, 1}, float scale = 1.0f, float max_bias = 0.0f,
    /// bool inplace = false)`, `vars()` = `VARS_TO_STR9(type, ne, mask, sinks, m_prec, nr23,
    /// scale, max_bias, inplace)`. Its x is `{ne0, ne1, ne2*nr23[0], ne3*nr23[1]}` and its mask
    /// `{ne0, ne1, ne2, ne3}`, so kedge's mask broadcast over dims 2 and 3 is `ne = {ne0, ne1,
    /// 1, 1}` with `nr23 = {ne2, ne3}`: the same x, mask and launch. Unmasked cases are written
    /// with kedge's `ne` and `nr23 = {1, 1}`.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let p = SoftmaxParams::of(case);
        let (ne, nr23) = if p.mask {
            ([case.ne[0], case.ne[1], 1, 1], [case.ne[2], case.ne[3]])
        } else {
            (case.ne, [1, 1])
        };
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_soft_max({}, {}, {}, false, GGML_TYPE_F32, {{{}, {}}}, {}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&ne),
                p.mask,
                nr23[0],
                nr23[1],
                cpp_float(p.scale),
                cpp_float(p.max_bias)
            ),
            op_name: "SOFT_MAX".into(),
            vars: format!(
                "type={},ne={},mask={},sinks=0,m_prec=f32,nr23=[{},{}],scale={},max_bias={},inplace=0",
                case.dtype,
                vars_ne(&ne),
                p.mask as i32,
                nr23[0],
                nr23[1],
                ggml_float(p.scale),
                ggml_float(p.max_bias)
            ),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if case.ne[2] > 65_535 || case.ne[3] > 65_535 {
            Some(Reach::SYNTHETIC.0.into())
        } else {
            None
        }
    }
}

/// Which kernel body and how much dynamic shared memory, as upstream decides it.
fn smem_choice(ncols: i64, limits: &LimitsProfile) -> (bool, u64) {
    let want = shared_bytes(ncols);
    if want <= limits.shared_per_block_optin.value {
        (true, want)
    } else {
        (false, WARP * 4)
    }
}

fn check_ncols(case: &Case) -> Result<(), Refusal> {
    if case.ne[0] > i32::MAX as i64 {
        return Err(format!(
            "ncols {} does not fit the kernel's int column index",
            case.ne[0]
        )
        .into());
    }
    Ok(())
}

/// x, mask (a null pointer without one: 8 zero bytes), dst.
fn pointers(case: &Case) -> [KernelArg; 3] {
    if SoftmaxParams::of(case).mask {
        [
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::Tensor(2),
        ]
    } else {
        [
            KernelArg::Tensor(0),
            KernelArg::U64(0),
            KernelArg::Tensor(1),
        ]
    }
}

/// scale, max_bias, m0, m1, n_head_log2 (ALiBi's, as ggml's host code computes them).
fn tail(case: &Case) -> [KernelArg; 5] {
    let p = SoftmaxParams::of(case);
    let max_bias = p.max_bias as f32;
    let (n_head_log2, m0, m1) = alibi_params(case.ne[2], max_bias);
    [
        KernelArg::F32(p.scale as f32),
        KernelArg::F32(max_bias),
        KernelArg::F32(m0),
        KernelArg::F32(m1),
        KernelArg::U32(n_head_log2),
    ]
}

/// Upstream: grid (ne01, ne02, ne03), extents and the row index from gridDim.
fn ggml_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    check_ncols(case)?;
    let [n0, n1, n2, n3] = case.ne;
    let (shared, smem) = smem_choice(n0, limits);
    let entry = if shared {
        crate::rows::typed!(SRC, "softmax_ggml_shared")
    } else {
        crate::rows::typed!(SRC, "softmax_ggml_global")
    };
    let mut args = pointers(case).to_vec();
    args.push(KernelArg::I32(n0 as i32));
    args.extend(tail(case));
    Ok(Plan::single(
        LaunchPlan::new(
            entry.kernel(case.dtype)?,
            [n1 as u64, n2 as u64, n3 as u64],
            [block_size(n0), 1, 1],
            smem,
        )
        .args(args),
    ))
}

/// The fix: grid clamped to the profile, extents passed, heads and ne[3] grid-stride loops.
fn clamped_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    check_ncols(case)?;
    let [n0, n1, n2, n3] = case.ne;
    if n1 as u64 > limits.grid_limit(0) {
        return Err(format!(
            "ne[1] = {n1} rows exceeds grid.x {}; this impl keeps one row per block.x",
            limits.grid_limit(0)
        )
        .into());
    }
    let (shared, smem) = smem_choice(n0, limits);
    let entry = if shared {
        crate::rows::typed!(SRC, "softmax_clamped_shared")
    } else {
        crate::rows::typed!(SRC, "softmax_clamped_global")
    };
    let mut args = pointers(case).to_vec();
    args.extend([
        KernelArg::I32(n0 as i32),
        KernelArg::I64(n1),
        KernelArg::I64(n2),
        KernelArg::I64(n3),
    ]);
    args.extend(tail(case));
    Ok(Plan::single(
        LaunchPlan::new(
            entry.kernel(case.dtype)?,
            [
                n1 as u64,
                (n2 as u64).min(limits.grid_limit(1)),
                (n3 as u64).min(limits.grid_limit(2)),
            ],
            [block_size(n0), 1, 1],
            smem,
        )
        .args(args),
    ))
}

pub(crate) static GGML: KernelImpl = KernelImpl {
    name: "ggml",
    role: ImplRole::Upstream,
    about: "ggml softmax.cu as shipped: grid (ne01, ne02, ne03), row in shared memory when it fits the opt-in limit, else cached in dst (recomputed from x for a 16-bit dst; the cooperative column-parallel path for scale 1 / no mask is not modelled)",
    plan: ggml_plan,
};

pub(crate) static CLAMPED: KernelImpl = KernelImpl {
    name: "clamped",
    role: ImplRole::Fixed,
    about: "grid clamped to the device limits, heads and ne[3] walked with grid-stride loops; same shared-memory choice as ggml",
    plan: clamped_plan,
};

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use rstest::rstest;

    fn case(ne: Ne) -> Case {
        Case::new("softmax", "ggml", DType::F32, ne)
    }

    fn run_ref(c: &Case) -> (Vec<HostTensor>, Vec<f64>) {
        let specs = OP.tensors(c).unwrap();
        let inputs = OP.inputs(c, &specs).unwrap();
        let out = OP.reference(c, &inputs).unwrap().remove(0);
        (inputs, out)
    }

    #[test]
    fn reference_by_hand() {
        // Row [0, ln 3] with scale 1: e^0 : e^ln3 = 1 : 3.
        let x = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[0.0, 3f32.ln()]);
        let out = OP.reference(&case([2, 1, 1, 1]), &[x]).unwrap();
        assert_abs_diff_eq!(out[0][..], [0.25, 0.75][..], epsilon = 1e-7);
        // scale 2 and a mask [0, -ln 3] on row [ln 3 / 2, ln 3]: logits [ln 3, ln 3] -> 1/2 each.
        let c = case([2, 1, 1, 1])
            .with_param("scale", 2.0)
            .with_param("mask", true);
        let l3 = 3f32.ln();
        let x = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[l3 / 2.0, l3]);
        let m = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[0.0, -l3]);
        let out = OP.reference(&c, &[x, m]).unwrap();
        assert_abs_diff_eq!(out[0][..], [0.5, 0.5][..], epsilon = 1e-6);
    }

    #[test]
    fn alibi_slopes_by_hand() {
        // 8 heads, max_bias 8: n_head_log2 8, m0 = 2^-1, slopes 1/2, 1/4, ..., 1/256.
        for h in 0..8u32 {
            assert_abs_diff_eq!(
                alibi_slope(8.0, h, 8),
                0.5f64.powi(h as i32 + 1),
                epsilon = 1e-15
            );
        }
        // 12 heads: n_head_log2 8, m1 = 2^-(4/8) = 2^-0.5; head 8 -> m1^1, head 9 -> m1^3.
        let m1 = 2f64.powf(-0.5);
        assert_abs_diff_eq!(alibi_slope(8.0, 8, 12), m1, epsilon = 1e-15);
        assert_abs_diff_eq!(alibi_slope(8.0, 9, 12), m1.powi(3), epsilon = 1e-15);
        assert_eq!(alibi_slope(0.0, 5, 12), 1.0);
        let (l2, m0, m1f) = alibi_params(12, 8.0);
        assert_eq!(l2, 8);
        assert_abs_diff_eq!(m0, 0.5, epsilon = 1e-7);
        assert_abs_diff_eq!(m1f as f64, m1, epsilon = 1e-7);
    }

    #[test]
    fn rows_sum_to_one_and_masked_heads_differ() {
        let c = case([37, 3, 12, 2])
            .with_param("mask", true)
            .with_param("max_bias", 8.0)
            .with_param("scale", 0.3);
        let (_, out) = run_ref(&c);
        for row in out.chunks(37) {
            let s: f64 = row.iter().sum();
            assert_abs_diff_eq!(s, 1.0, epsilon = 1e-12);
            assert!(row.iter().all(|&v| v > 0.0));
        }
    }

    #[test]
    fn shift_invariant() {
        let c = case([50, 4, 3, 1]).with_param("scale", 0.7);
        let (inputs, out) = run_ref(&c);
        // Add a per-row constant to x (scaled: x*scale shifts by 0.7*c) and compare.
        let x = &inputs[0];
        let n = 50 * 4 * 3;
        let vals: Vec<f32> = (0..n)
            .map(|i| {
                let row = i / 50;
                x.get(i % 50, row % 4, row / 4, 0) as f32 + (row as f32 - 5.0) * 3.25
            })
            .collect();
        let shifted = HostTensor::from_f32(DType::F32, [50, 4, 3, 1], &vals);
        let out2 = OP.reference(&c, &[shifted]).unwrap().remove(0);
        for (a, b) in out.iter().zip(&out2) {
            // f32 rounding of the shifted inputs is the only difference.
            assert_abs_diff_eq!(*a, *b, epsilon = 1e-6 * a.abs().max(1e-3));
        }
    }

    #[test]
    fn alibi_needs_a_mask() {
        let c = case([8, 1, 1, 1]).with_param("max_bias", 8.0);
        assert!(matches!(OP.tensors(&c), Err(CaseError::BadInput { .. })));
    }

    #[rstest]
    #[case(1, 32)]
    #[case(32, 32)]
    #[case(33, 64)]
    #[case(512, 512)]
    #[case(513, 1024)]
    #[case(1024, 1024)]
    #[case(1025, 1024)]
    #[case(100_000, 1024)]
    fn block_sizes_step_at_powers_of_two(#[case] ncols: i64, #[case] block: u64) {
        assert_eq!(block_size(ncols), block);
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let ok = GGML.plan(&case([32, 1, 65535, 1]), &h200).unwrap();
        assert!(ok.violations(&h200).is_empty());
        let bad = GGML.plan(&case([32, 1, 65536, 1]), &h200).unwrap();
        let v = bad.violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].dim.as_str(), v[0].value, v[0].limit),
            ("grid.y", 65536, 65535)
        );
        let z = GGML.plan(&case([32, 1, 1, 65536]), &h200).unwrap();
        assert_eq!(z.violations(&h200)[0].dim, "grid.z");
        assert!(GGML
            .plan(&case([32, 1, 1, 65535]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
        // The clamped plan of the same shapes fits.
        for ne in [
            [32, 1, 65536, 1],
            [32, 1, 1, 65536],
            [32, 1, 300_000, 70_000],
        ] {
            assert!(CLAMPED
                .plan(&case(ne), &h200)
                .unwrap()
                .violations(&h200)
                .is_empty());
        }
    }

    #[test]
    fn smem_threshold_switches_path_per_profile() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let rtx = LimitsProfile::builtin("rtx3090").unwrap();
        let gb10 = LimitsProfile::builtin("gb10").unwrap();
        // 232448 / 4 = 58112 floats, minus the 32-float inter-warp buffer.
        assert_eq!(smem_threshold(&h200), 58_080);
        // 101376 / 4 = 25344 floats.
        assert_eq!(smem_threshold(&rtx), 25_312);
        assert_eq!(smem_threshold(&gb10), 25_312);
        for (p, t) in [(&h200, 58_080i64), (&rtx, 25_312)] {
            let at = GGML.plan(&case([t, 2, 2, 1]), p).unwrap().launches[0].clone();
            assert_eq!(at.name(), "softmax_ggml_shared");
            assert_eq!(
                at.smem, p.shared_per_block_optin.value,
                "exactly the opt-in limit"
            );
            assert!(at.check(p).is_empty());
            let past = GGML.plan(&case([t + 1, 2, 2, 1]), p).unwrap().launches[0].clone();
            assert_eq!(past.name(), "softmax_ggml_global");
            assert_eq!(past.smem, 128);
            assert!(past.check(p).is_empty());
        }
        // The same ncols takes different paths on the two devices.
        let mid = case([40_000, 1, 1, 1]);
        assert_eq!(
            GGML.plan(&mid, &h200).unwrap().launches[0].name(),
            "softmax_ggml_shared"
        );
        assert_eq!(
            GGML.plan(&mid, &rtx).unwrap().launches[0].name(),
            "softmax_ggml_global"
        );
        // A row planned for the h200 breaks the rtx3090's shared-memory limit.
        let p = GGML.plan(&mid, &h200).unwrap();
        assert_eq!(p.violations(&rtx)[0].dim, "dynamic shared memory");
        // The boundary probes both sides.
        let b = OP
            .boundaries(&rtx)
            .into_iter()
            .find(|b| b.label.contains("shared-memory threshold of rtx3090"))
            .unwrap();
        assert_eq!(
            b.probe_values(),
            vec![25_280, 25_311, 25_312, 25_313, 25_344]
        );
    }

    #[test]
    fn upstream_line() {
        let r = OP.upstream(&case([32, 1, 65536, 1])).unwrap();
        assert_eq!(r.test_case_line, "test_cases.emplace_back(new test_soft_max(GGML_TYPE_F32, {32, 1, 65536, 1}, false, false, GGML_TYPE_F32, {1, 1}, 1.0f, 0.0f));");
        assert_eq!(r.vars, "type=f32,ne=[32,1,65536,1],mask=0,sinks=0,m_prec=f32,nr23=[1,1],scale=1.000000,max_bias=0.000000,inplace=0");
        assert_eq!(r.op_name, "SOFT_MAX");
        assert_eq!(OP.upstream_name(), Some("SOFT_MAX"));
    }

    /// A masked case: upstream's mask is [ne0, ne1, ne2, ne3] and its x is ne scaled by
    /// nr23, so kedge's broadcast mask is ne = {ne0, ne1, 1, 1} with nr23 = {ne2, ne3}.
    #[test]
    fn upstream_line_masked_broadcasts_through_nr23() {
        let c = case([32, 2, 65536, 3])
            .with_param("mask", true)
            .with_param("scale", 0.125)
            .with_param("max_bias", 8.0);
        let r = OP.upstream(&c).unwrap();
        assert_eq!(r.test_case_line, "test_cases.emplace_back(new test_soft_max(GGML_TYPE_F32, {32, 2, 1, 1}, true, false, GGML_TYPE_F32, {65536, 3}, 0.125f, 8.0f));");
        assert_eq!(r.vars, "type=f32,ne=[32,2,1,1],mask=1,sinks=0,m_prec=f32,nr23=[65536,3],scale=0.125000,max_bias=8.000000,inplace=0");
    }

    #[test]
    fn grid_limits_are_generated_not_declared() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let base = OP.probe_base().unwrap();
        let generated = kedge_core::contract::boundary::generated(&base, &h200, DType::F32);
        for d in [2, 3] {
            let b = generated
                .iter()
                .find(|b| b.axis == Axis::Ne(d) && b.probe_values() == vec![65_535, 65_536])
                .unwrap();
            // Past the limit, the generated probe breaks the upstream launch and has a reach.
            let mut ne = b.base;
            ne[d] = 65_536;
            let c = case(ne).with_param("scale", 0.5);
            assert!(!GGML.plan(&c, &h200).unwrap().violations(&h200).is_empty());
            assert!(OP.reach(&c).is_some());
        }
        // The generated row probe, past the opt-in limit, stays off the cooperative path.
        let row = generated.iter().find(|b| b.axis == Axis::Ne(0)).unwrap();
        assert_eq!(row.params.get("scale"), Some(&0.5.into()));
        for b in OP.boundaries(&h200) {
            let plain_grid = b.params.is_empty() && matches!(b.axis, Axis::Ne(2) | Axis::Ne(3));
            assert!(!plain_grid, "{} is generated", b.label);
        }
    }

    #[test]
    fn every_ncols_instance_is_a_boundary() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let at: Vec<i64> = OP
            .boundaries(&h200)
            .iter()
            .filter(|b| b.label.contains("instance"))
            .map(|b| b.at)
            .collect();
        assert_eq!(at, vec![32, 64, 128, 256, 512, 1024, 2048, 4096]);
    }

    /// Each impl's planned arguments match the kernel's declared parameters, on both paths,
    /// with and without the mask (a null pointer in its place).
    #[rstest]
    fn plan_args_match_the_kernel_signatures(
        #[values(&GGML, &CLAMPED)] imp: &KernelImpl,
        #[values(100, 60_000)] ncols: i64,
        #[values(false, true)] mask: bool,
    ) {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let plan = imp
            .plan(&case([ncols, 3, 2, 2]).with_param("mask", mask), &h200)
            .unwrap();
        crate::signature::check_plan(&plan).unwrap();
        assert!(plan.standalone().is_ok());
        let l = &plan.launches[0];
        assert_eq!(l.args[1] == KernelArg::U64(0), !mask);
    }

    #[rstest]
    fn plan_size_does_not_grow_with_the_shape(#[values(&GGML, &CLAMPED)] imp: &KernelImpl) {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let shape = |p: &Plan| {
            (
                p.launches.len(),
                p.repetitions(),
                p.launches.iter().map(|l| l.args.len()).collect::<Vec<_>>(),
            )
        };
        let small = shape(&imp.plan(&case([64, 3, 1, 1]), &h200).unwrap());
        for ne in [[64, 65_535, 1, 1], [64, 1, 65_535, 1], [64, 7, 300, 65_535]] {
            assert_eq!(shape(&imp.plan(&case(ne), &h200).unwrap()), small);
        }
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n0 in 1i64..300_000, n1 in 1i64..200_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
            prof in 0usize..5,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let c = case([n0, n1, n2, n3]);
            let plan = CLAMPED.plan(&c, &p).unwrap();
            proptest::prop_assert!(plan.violations(&p).is_empty(), "{:?}", plan.violations(&p));
        }
    }
}
