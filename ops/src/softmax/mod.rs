//! softmax (ggml `soft_max_ext`, f32): `dst = softmax(x*scale + slope*mask)` per row of ne0.
//!
//! The mask is optional, f32 of shape [ne0, ne1, 1, 1], broadcast over dims 2 and 3 (the KQ
//! mask of attention: one row per query token, shared by every head). `max_bias` > 0 turns on
//! ALiBi: head `h` (ne[2] is the head count) gets slope m0^(h+1) below n_head_log2 and
//! m1^(2*(h - n_head_log2) + 1) above it, as ggml computes; without a mask the slope is unused.
//!
//! Upstream launch (ggml-cuda/softmax.cu, `soft_max_f32_cuda`): `block_nums(ne01, ne02, ne03)`,
//! so heads sit on grid.y and ne[3] on grid.z (the incident's sweep found it: a crash needs more
//! than 65535 heads, which no model has). Block size: the smallest power of two >= ncols, from
//! 32 up to 1024. The row is kept in dynamic shared memory when `(pad(ncols, 32) + 32) * 4`
//! bytes fit the device's opt-in shared memory per block; otherwise the row is cached in dst.
//! Upstream also instantiates the shared-memory body for ncols in {32, 64, ..., 4096} as
//! compile-time constants; those launch with the same grid, block and shared memory, so kedge
//! runs one body for all of them. Its cooperative column-parallel path (scale 1, no mask, no
//! ALiBi, ncols / nrows > 8192, past the threshold) is not modelled: the threshold boundaries
//! use scale != 1 so upstream would take the row kernel modelled here.

use crate::rows::{cpp_float, cpp_ne, ggml_float, vars_ne};
use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::*;
use rayon::prelude::*;

const SRC: &str = include_str!("softmax.cu");
const FILE: &str = "ops/src/softmax/softmax.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct Softmax;
pub static OP: Softmax = Softmax;

static PARAMS: &[ParamSpec] = &[
    ParamSpec::float("scale", 1.0, "multiplies x before the mask is added"),
    ParamSpec::boolean(
        "mask",
        false,
        "add an f32 mask of shape [ne0, ne1, 1, 1], broadcast over dims 2 and 3",
    ),
    ParamSpec::float(
        "max_bias",
        0.0,
        "ALiBi max bias (> 0 needs the mask): per-head slope on the mask",
    ),
];

/// ggml's `WARP_SIZE` and `CUDA_SOFT_MAX_BLOCK_SIZE`.
pub const WARP: u64 = 32;
pub const MAX_BLOCK: u64 = 1024;

pub const REACH_SMEM: &str = "KQ softmax without flash attention has ncols = n_kv: a context past the threshold (58,080 tokens on an H200, 25,312 on an RTX 3090 or GB10) takes the uncached path; sampling softmax over a vocabulary (128,256 for Llama 3, 151,936 for Qwen) is past it on every device";
pub const REACH_BLOCK: &str =
    "KQ softmax rows of n_kv tokens: every context length walks through each block-size step";

/// Threads per block: `nth = WARP_SIZE; while (nth < ncols && nth < CUDA_SOFT_MAX_BLOCK_SIZE) nth *= 2;`
pub fn block_size(ncols: i64) -> u64 {
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
pub fn shared_bytes(ncols: i64) -> u64 {
    (pad32(ncols) + WARP) * 4
}

/// The largest ncols whose row still fits the profile's opt-in shared memory: the shared-memory
/// threshold. ncols = threshold + 1 is the first to take the uncached path.
pub fn smem_threshold(limits: &LimitsProfile) -> i64 {
    let floats = limits.shared_per_block_optin.value / 4;
    ((floats.saturating_sub(WARP)) / WARP * WARP) as i64
}

/// ALiBi parameters as ggml's host code computes them, in f32: (n_head_log2, m0, m1).
pub fn alibi_params(n_head: i64, max_bias: f32) -> (u32, f32, f32) {
    let n_head = n_head.clamp(1, u32::MAX as i64) as u32;
    let n_head_log2 = 1u32 << (n_head as f32).log2().floor() as u32;
    let m0 = 2.0f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2.0f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    (n_head_log2, m0, m1)
}

/// ggml's `get_alibi_slope` in f64 (the reference's).
pub fn alibi_slope(max_bias: f64, h: u32, n_head: i64) -> f64 {
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
pub fn softmax_row(v: &mut [f64]) {
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

fn with_mask(case: &Case) -> bool {
    case.params.bool_or("mask", false)
}

impl Op for Softmax {
    fn name(&self) -> &'static str {
        "softmax"
    }
    fn about(&self) -> &'static str {
        "softmax over ne0 with scale, optional broadcast mask and ALiBi (ggml SOFT_MAX / soft_max_ext)"
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::F32_ONLY
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        if case.params.f64_or("max_bias", 0.0) > 0.0 && !with_mask(case) {
            // ggml_soft_max_impl asserts a mask when max_bias > 0: ALiBi biases the mask.
            return Err(CaseError::BadInput {
                op: "softmax".into(),
                msg: "max_bias > 0 (ALiBi) needs mask = true: the slope scales the mask".into(),
            });
        }
        let mut v = vec![TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?];
        if with_mask(case) {
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
        let scale = case.params.f64_or("scale", 1.0);
        let max_bias = case.params.f64_or("max_bias", 0.0);
        let x = &inputs[0];
        let mask = if with_mask(case) {
            Some(&inputs[1])
        } else {
            None
        };
        let mut out = vec![0.0f64; x.ne.iter().map(|&v| v as usize).product()];
        out.par_chunks_mut(n0).enumerate().for_each(|(r, row)| {
            let i1 = r % n1;
            let i2 = (r / n1) % n2;
            let i3 = r / (n1 * n2);
            let slope = alibi_slope(max_bias, i2 as u32, case.ne[2]);
            for (i0, v) in row.iter_mut().enumerate() {
                *v = x.get(i0, i1, i2, i3) * scale
                    + mask.map_or(0.0, |m| slope * m.get(i0, i1, 0, 0));
            }
            softmax_row(row);
        });
        Ok(vec![out])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        let t = smem_threshold(limits);
        let mut b = vec![
            Boundary::ne(
                "ne[2] heads on grid.y",
                2,
                gy,
                [32, 1, 0, 1],
                Reach::SYNTHETIC,
            ),
            Boundary::ne(
                "ne[2] heads on grid.y, masked",
                2,
                gy,
                [32, 2, 0, 1],
                Reach::SYNTHETIC,
            )
            .with_param("mask", true)
            .with_param("scale", 0.125),
            Boundary::ne("ne[3] on grid.z", 3, gz, [32, 1, 1, 0], Reach::SYNTHETIC),
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
            .with_param("scale", 0.5),
            Boundary::ne(
                "ne[0] at the shared-memory threshold, masked",
                0,
                t,
                [0, 3, 2, 1],
                Reach(REACH_SMEM),
            )
            .with_values(vec![t, t + 1])
            .with_param("mask", true),
            Boundary::ne(
                "ne[2] across a power of two with ALiBi (m0 -> m1 slopes)",
                2,
                16,
                [64, 3, 0, 1],
                Reach("ALiBi models (BLOOM, MPT) with a head count that is not a power of two"),
            )
            .with_param("mask", true)
            .with_param("max_bias", 8.0),
        ];
        let mut p = WARP as i64;
        while p <= MAX_BLOCK as i64 {
            let label = if p < MAX_BLOCK as i64 {
                format!("ne[0] at the block-size step {p} -> {} threads", p * 2)
            } else {
                format!("ne[0] at the {p}-thread cap ({} loops in-row)", p + 1)
            };
            b.push(Boundary::ne(label, 0, p, [0, 3, 2, 1], Reach(REACH_BLOCK)));
            p *= 2;
        }
        b
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let p = |mask: bool, scale: f64, max_bias: f64| {
            let mut m = Params::new();
            m.insert("mask".into(), mask.into());
            m.insert("scale".into(), scale.into());
            m.insert("max_bias".into(), max_bias.into());
            m
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
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        // test-backend-ops' constructor, as best known: test_soft_max(type, ne, mask, sinks,
        // m_prec, nr23, scale, max_bias, inplace = false), vars()
        // "type,ne,mask,sinks,m_prec,nr23,scale,max_bias,inplace". Uncertain: the order of
        // these arguments has changed upstream over time (sinks and nr23 were added later), and
        // test_soft_max's mask is [ne0, ne1, ne2, ne3] (one per head) where kedge broadcasts
        // a [ne0, ne1, 1, 1] mask: values differ, the launch geometry is the same.
        let mask = with_mask(case);
        let scale = case.params.f64_or("scale", 1.0);
        let max_bias = case.params.f64_or("max_bias", 0.0);
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_soft_max({}, {}, {}, false, GGML_TYPE_F32, {{1, 1}}, {}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&case.ne),
                mask,
                cpp_float(scale),
                cpp_float(max_bias)
            ),
            op_name: "SOFT_MAX".into(),
            vars: format!(
                "type={},ne={},mask={},sinks=0,m_prec=f32,nr23=[1,1],scale={},max_bias={},inplace=0",
                case.dtype,
                vars_ne(&case.ne),
                mask as i32,
                ggml_float(scale),
                ggml_float(max_bias)
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

fn check_ncols(case: &Case) -> Result<(), String> {
    if case.ne[0] > i32::MAX as i64 {
        return Err(format!(
            "ncols {} does not fit the kernel's int column index",
            case.ne[0]
        ));
    }
    Ok(())
}

/// Upstream: grid (ne01, ne02, ne03), extents and the row index from gridDim.
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
        "ggml softmax.cu as shipped: grid (ne01, ne02, ne03), row in shared memory when it fits the opt-in limit, else cached in dst (the cooperative column-parallel path for scale 1 / no mask is not modelled)"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        check_ncols(case)?;
        let [n0, n1, n2, n3] = case.ne;
        let (shared, smem) = smem_choice(n0, limits);
        let entry = if shared {
            "softmax_ggml_shared"
        } else {
            "softmax_ggml_global"
        };
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k(entry),
            [n1 as u64, n2 as u64, n3 as u64],
            [block_size(n0), 1, 1],
            smem,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let a = args(ctx, case);
        let mut v = vec![a.x, a.mask, a.dst, KArg::I32(case.ne[0] as i32)];
        v.extend(a.tail);
        ctx.launch(&plan.launches[0], &v)
    }
}

struct Args {
    x: KArg,
    mask: KArg,
    dst: KArg,
    /// scale, max_bias, m0, m1, n_head_log2.
    tail: [KArg; 5],
}

fn args(ctx: &RunCtx<'_>, case: &Case) -> Args {
    let mask = with_mask(case);
    let max_bias = case.params.f64_or("max_bias", 0.0) as f32;
    let (n_head_log2, m0, m1) = alibi_params(case.ne[2], max_bias);
    Args {
        x: KArg::Ptr(ctx.ptr(0)),
        mask: KArg::Ptr(if mask { ctx.ptr(1) } else { 0 }),
        dst: KArg::Ptr(ctx.ptr(if mask { 2 } else { 1 })),
        tail: [
            KArg::F32(case.params.f64_or("scale", 1.0) as f32),
            KArg::F32(max_bias),
            KArg::F32(m0),
            KArg::F32(m1),
            KArg::U32(n_head_log2),
        ],
    }
}

/// The fix: grid clamped to the profile, extents passed, heads and ne[3] grid-stride loops.
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
        "grid clamped to the device limits, heads and ne[3] walked with grid-stride loops; same shared-memory choice as ggml"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        check_ncols(case)?;
        let [n0, n1, n2, n3] = case.ne;
        if n1 as u64 > limits.grid_limit(0) {
            return Err(format!(
                "ne[1] = {n1} rows exceeds grid.x {}; this impl keeps one row per block.x",
                limits.grid_limit(0)
            ));
        }
        let (shared, smem) = smem_choice(n0, limits);
        let entry = if shared {
            "softmax_clamped_shared"
        } else {
            "softmax_clamped_global"
        };
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k(entry),
            [
                n1 as u64,
                (n2 as u64).min(limits.grid_limit(1)),
                (n3 as u64).min(limits.grid_limit(2)),
            ],
            [block_size(n0), 1, 1],
            smem,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let a = args(ctx, case);
        let [n0, n1, n2, n3] = case.ne;
        let mut v = vec![
            a.x,
            a.mask,
            a.dst,
            KArg::I32(n0 as i32),
            KArg::I64(n1),
            KArg::I64(n2),
            KArg::I64(n3),
        ];
        v.extend(a.tail);
        ctx.launch(&plan.launches[0], &v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!((out[0][0] - 0.25).abs() < 1e-7);
        assert!((out[0][1] - 0.75).abs() < 1e-7);
        // scale 2 and a mask [0, -ln 3] on row [ln 3 / 2, ln 3]: logits [ln 3, ln 3] -> 1/2 each.
        let c = case([2, 1, 1, 1])
            .with_param("scale", 2.0)
            .with_param("mask", true);
        let l3 = 3f32.ln();
        let x = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[l3 / 2.0, l3]);
        let m = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[0.0, -l3]);
        let out = OP.reference(&c, &[x, m]).unwrap();
        assert!((out[0][0] - 0.5).abs() < 1e-6 && (out[0][1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn alibi_slopes_by_hand() {
        // 8 heads, max_bias 8: n_head_log2 8, m0 = 2^-1, slopes 1/2, 1/4, ..., 1/256.
        for h in 0..8u32 {
            assert!((alibi_slope(8.0, h, 8) - 0.5f64.powi(h as i32 + 1)).abs() < 1e-15);
        }
        // 12 heads: n_head_log2 8, m1 = 2^-(4/8) = 2^-0.5; head 8 -> m1^1, head 9 -> m1^3.
        let m1 = 2f64.powf(-0.5);
        assert!((alibi_slope(8.0, 8, 12) - m1).abs() < 1e-15);
        assert!((alibi_slope(8.0, 9, 12) - m1.powi(3)).abs() < 1e-15);
        assert_eq!(alibi_slope(0.0, 5, 12), 1.0);
        let (l2, m0, m1f) = alibi_params(12, 8.0);
        assert_eq!(l2, 8);
        assert!((m0 - 0.5).abs() < 1e-7 && (m1f as f64 - m1).abs() < 1e-7);
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
            assert!((s - 1.0).abs() < 1e-12, "row sums to {s}");
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
            assert!((a - b).abs() < 1e-6 * a.abs().max(1e-3), "{a} vs {b}");
        }
    }

    #[test]
    fn alibi_needs_a_mask() {
        let c = case([8, 1, 1, 1]).with_param("max_bias", 8.0);
        assert!(matches!(OP.tensors(&c), Err(CaseError::BadInput { .. })));
    }

    #[test]
    fn block_sizes_step_at_powers_of_two() {
        assert_eq!(block_size(1), 32);
        assert_eq!(block_size(32), 32);
        assert_eq!(block_size(33), 64);
        assert_eq!(block_size(512), 512);
        assert_eq!(block_size(513), 1024);
        assert_eq!(block_size(1024), 1024);
        assert_eq!(block_size(1025), 1024);
        assert_eq!(block_size(100_000), 1024);
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
            assert_eq!(at.kernel, "softmax_ggml_shared");
            assert_eq!(
                at.smem, p.shared_per_block_optin.value,
                "exactly the opt-in limit"
            );
            assert!(at.check(p).is_empty());
            let past = GGML.plan(&case([t + 1, 2, 2, 1]), p).unwrap().launches[0].clone();
            assert_eq!(past.kernel, "softmax_ggml_global");
            assert_eq!(past.smem, 128);
            assert!(past.check(p).is_empty());
        }
        // The same ncols takes different paths on the two devices.
        let mid = case([40_000, 1, 1, 1]);
        assert_eq!(
            GGML.plan(&mid, &h200).unwrap().launches[0].kernel,
            "softmax_ggml_shared"
        );
        assert_eq!(
            GGML.plan(&mid, &rtx).unwrap().launches[0].kernel,
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
