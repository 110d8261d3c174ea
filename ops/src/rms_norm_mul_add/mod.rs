//! rms_norm_mul_add: the fusion ggml's CUDA backend applies to RMS_NORM -> MUL -> ADD,
//! `dst = rms_norm(x) * w + b`, w and b broadcast by ggml's repeat rule (index modulo shape).
//!
//! `broadcast = "row"` (the default, what a model's norm weight and bias are): w and b are
//! [ne0, 1, 1, 1]. `broadcast = "full"`: w and b have x's shape, as in test-backend-ops'
//! test_rms_norm_mul_add with broadcast=false.
//!
//! Upstream launches the fused kernel (`rms_norm_f32<block_size, true, true>`, norm.cu) with
//! rms_norm's grid, `dim3 blocks_num(nrows, nchannels, nsamples)`: ne[2] on grid.y and ne[3] on
//! grid.z, both capped at 65535. It is the second line of the incident's repro.

use crate::norm_family::{clamped_grid, ggml_grid, map_rows_indexed, pad};
use crate::rows::{cpp_float, cpp_ne, ggml_float, row_tensors, vars_ne, RowLayout, ROW_PAD};
use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::*;

const SRC: &str = include_str!("rms_norm_mul_add.cu");
const FILE: &str = "ops/src/rms_norm_mul_add/rms_norm_mul_add.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct RmsNormMulAdd;
pub static OP: RmsNormMulAdd = RmsNormMulAdd;

const EPS: f64 = 1e-6;

static PARAMS: &[ParamSpec] = &[
    ParamSpec::float("eps", EPS, "added to the mean of squares"),
    ParamSpec::choice(
        "broadcast",
        "row",
        &["row", "full"],
        "shape of w and b: row = [ne0, 1, 1, 1] (a model's norm weight), full = x's shape",
    ),
    ROW_PAD,
];

/// Upstream switches from 256 to 1024 threads at ncols 1024 (rms_norm_mul_f32_cuda).
pub const BLOCK_SWITCH: i64 = 1024;

pub const REACH_NE2: &str = "qwen4exp indexer (llama.cpp PR #27742): pooled keys reshaped to [idx_dim, 1, ceil(n_kv/4)] go through build_norm(pooled, index_k_norm, nullptr, LLM_NORM_RMS), which ggml fuses into RMS_NORM x weight (rms_norm_mul_f32_cuda in the incident's stack: this kernel template and grid, without the add; a norm with a bias takes the add); n_kv = 262,144 puts 65,536 on ne[2]";

/// Shape of w and b for a case.
pub fn weight_ne(case: &Case) -> Ne {
    if case.params.str_or("broadcast", "row") == "full" {
        case.ne
    } else {
        [case.ne[0], 1, 1, 1]
    }
}

impl Op for RmsNormMulAdd {
    fn name(&self) -> &'static str {
        "rms_norm_mul_add"
    }
    fn about(&self) -> &'static str {
        "fused RMS_NORM x weight + bias over ne0 (ggml's RMS_NORM_MUL_ADD fusion)"
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
    /// x (padded rows if `row_pad` > 0), w, b, then dst.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let mut t = row_tensors(case)?;
        let wne = weight_ne(case);
        let dst = t.pop().ok_or_else(|| CaseError::BadInput {
            op: "rms_norm_mul_add".into(),
            msg: "row tensors without an output".into(),
        })?;
        t.push(TensorSpec::dense("w", Role::Input, case.dtype, wne)?);
        t.push(TensorSpec::dense("b", Role::Input, case.dtype, wne)?);
        t.push(dst);
        Ok(t)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let eps = case.params.f64_or("eps", EPS);
        let [x, w, b] = inputs else {
            return Err(CaseError::BadInput {
                op: "rms_norm_mul_add".into(),
                msg: format!("expected 3 inputs (x, w, b), got {}", inputs.len()),
            });
        };
        let wne = w.ne.map(|d| d as usize);
        if w.ne != b.ne || wne[0] != x.ne[0] as usize {
            return Err(CaseError::BadInput {
                op: "rms_norm_mul_add".into(),
                msg: format!(
                    "w {:?} and b {:?} must share one shape whose ne0 is x's ({})",
                    w.ne, b.ne, x.ne[0]
                ),
            });
        }
        Ok(vec![map_rows_indexed(x, |[i1, i2, i3], row, dst| {
            let (j1, j2, j3) = (i1 % wne[1], i2 % wne[2], i3 % wne[3]);
            let mean = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
            let scale = 1.0 / (mean + eps).sqrt();
            for (i0, (d, v)) in dst.iter_mut().zip(row).enumerate() {
                *d = v * scale * w.get(i0, j1, j2, j3) + b.get(i0, j1, j2, j3);
            }
        })])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        vec![
            Boundary::ne("ne[2] on grid.y", 2, gy, [64, 1, 0, 1], Reach(REACH_NE2)),
            // A clamped kernel that took the weight row from blockIdx.y instead of the loop's
            // channel would be wrong only here, past the clamp.
            Boundary::ne(
                "ne[2] on grid.y, w and b of x's shape (test-backend-ops' layout)",
                2,
                gy,
                [64, 1, 0, 1],
                Reach(REACH_NE2),
            )
            .with_param("broadcast", "full"),
            Boundary::ne("ne[3] on grid.z", 3, gz, [64, 1, 1, 0], Reach::SYNTHETIC),
            Boundary::ne(
                "ne[0] at the 256 -> 1024 thread switch",
                0,
                BLOCK_SWITCH,
                [0, 4, 3, 2],
                Reach("every LLM with a fused norm: hidden sizes from 1024 up take the 1024-thread path"),
            ),
            Boundary::ne(
                "ne[1] rows past 65535 on grid.x",
                1,
                65_536,
                [64, 0, 1, 1],
                Reach(
                    "n_tokens of a large ubatch on ne[1]: grid.x holds 2^31-1, so no limit is near",
                ),
            ),
            Boundary::ne(
                "ne[0] at a warp multiple, padded rows",
                0,
                32,
                [0, 3, 2, 1],
                Reach("a view of a larger tensor"),
            )
            .with_param("row_pad", 5),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let full = || {
            let mut m = Params::new();
            m.insert("broadcast".into(), "full".into());
            m
        };
        vec![
            ([64, 5, 4, 3], Params::new()),
            ([64, 5, 4, 3], full()),
            ([1, 1, 1, 1], Params::new()),
            ([31, 7, 3, 2], full()),
            ([1023, 2, 1, 1], Params::new()),
            ([1024, 2, 1, 1], Params::new()),
            ([4096, 3, 2, 1], full()),
            ([100, 4, 2, 2], pad(3)),
        ]
    }
    /// Upstream's constructor is `test_rms_norm_mul_add(type, ne, eps, broadcast, multi_add)`;
    /// with broadcast=false its w and b have x's shape (our "full"), and it has no row-shaped
    /// weight nor a padded view. The line is emitted with broadcast=false, multi_add=false for
    /// every case: the launch geometry, which is what fails upstream, depends on x's shape only.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let eps = case.params.f64_or("eps", EPS);
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_rms_norm_mul_add({}, {}, {}, false, false));",
                case.dtype.ggml_type(),
                cpp_ne(&case.ne),
                cpp_float(eps)
            ),
            op_name: "RMS_NORM_MUL_ADD".into(),
            vars: format!(
                "type={},ne={},eps={},broadcast=0,multi_add=0",
                case.dtype,
                vars_ne(&case.ne),
                ggml_float(eps)
            ),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if case.ne[2] > 65_535 {
            Some(REACH_NE2.into())
        } else if case.ne[3] > 65_535 {
            Some(Reach::SYNTHETIC.0.into())
        } else {
            None
        }
    }
}

fn block_for(ncols: i64) -> u64 {
    if ncols < BLOCK_SWITCH {
        256
    } else {
        1024
    }
}

/// Upstream: `dim3 blocks_num(nrows, nchannels, nsamples)`, extents from gridDim.
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
        "ggml's fused rms_norm_f32<bs, true, true> as shipped: grid (nrows, nchannels, nsamples), extents from gridDim"
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, String> {
        let l = RowLayout::of(case);
        let bs = block_for(l.ncols);
        let entry = if bs == 256 {
            "rms_norm_mul_add_ggml_256"
        } else {
            "rms_norm_mul_add_ggml_1024"
        };
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k(entry),
            ggml_grid(&l),
            [bs, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let l = RowLayout::of(case);
        let wne = weight_ne(case);
        let args = [
            KArg::Ptr(ctx.ptr(0)),
            KArg::Ptr(ctx.ptr(1)),
            KArg::Ptr(ctx.ptr(2)),
            KArg::Ptr(ctx.ptr(3)),
            KArg::I32(l.ncols as i32),
            KArg::I64(l.stride_row),
            KArg::I64(l.stride_channel),
            KArg::I64(l.stride_sample),
            KArg::F32(case.params.f64_or("eps", EPS) as f32),
            // Upstream passes these as uint32 fastdiv values; ints here, as they fit x's.
            KArg::I32(wne[1] as i32),
            KArg::I32(wne[2] as i32),
            KArg::I32(wne[3] as i32),
        ];
        ctx.launch(&plan.launches[0], &args)
    }
}

/// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
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
        "grid clamped to the device limits, extents passed explicitly, grid-stride loops, 64-bit offsets"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let l = RowLayout::of(case);
        let grid = clamped_grid(&l, limits)?;
        let bs = block_for(l.ncols);
        let entry = if bs == 256 {
            "rms_norm_mul_add_clamped_256"
        } else {
            "rms_norm_mul_add_clamped_1024"
        };
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k(entry),
            grid,
            [bs, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let l = RowLayout::of(case);
        let wne = weight_ne(case);
        let args = [
            KArg::Ptr(ctx.ptr(0)),
            KArg::Ptr(ctx.ptr(1)),
            KArg::Ptr(ctx.ptr(2)),
            KArg::Ptr(ctx.ptr(3)),
            KArg::I32(l.ncols as i32),
            KArg::I64(l.nrows),
            KArg::I64(l.nchannels),
            KArg::I64(l.nsamples),
            KArg::I64(l.stride_row),
            KArg::I64(l.stride_channel),
            KArg::I64(l.stride_sample),
            KArg::F32(case.params.f64_or("eps", EPS) as f32),
            KArg::I64(wne[1]),
            KArg::I64(wne[2]),
            KArg::I64(wne[3]),
        ];
        ctx.launch(&plan.launches[0], &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ne: Ne) -> Case {
        Case::new("rms_norm_mul_add", "ggml", DType::F32, ne)
            .with_param("eps", EPS)
            .with_param("broadcast", "row")
            .with_param("row_pad", 0)
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn tensors_in_order_with_broadcast_shapes() {
        let s = OP.tensors(&case([8, 3, 2, 1])).unwrap();
        let names: Vec<_> = s.iter().map(|t| (t.name.as_str(), t.ne)).collect();
        assert_eq!(
            names,
            vec![
                ("x", [8, 3, 2, 1]),
                ("w", [8, 1, 1, 1]),
                ("b", [8, 1, 1, 1]),
                ("dst", [8, 3, 2, 1])
            ]
        );
        let s = OP
            .tensors(&case([8, 3, 2, 1]).with_param("broadcast", "full"))
            .unwrap();
        assert_eq!((s[1].ne, s[2].ne), ([8, 3, 2, 1], [8, 3, 2, 1]));
    }

    #[test]
    fn reference_by_hand_row_broadcast() {
        // Rows [3, 4] and [1, 1]: mean squares 12.5 and 1. w = [2, -1], b = [0.5, 10].
        let x = HostTensor::from_f32(DType::F32, [2, 2, 1, 1], &[3.0, 4.0, 1.0, 1.0]);
        let w = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[2.0, -1.0]);
        let b = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[0.5, 10.0]);
        let out = OP.reference(&case([2, 2, 1, 1]), &[x, w, b]).unwrap();
        let s0 = 1.0 / (12.5f64 + EPS).sqrt();
        let s1 = 1.0 / (1.0f64 + EPS).sqrt();
        close(
            &out[0],
            &[
                3.0 * s0 * 2.0 + 0.5,
                -4.0 * s0 + 10.0,
                2.0 * s1 + 0.5,
                -s1 + 10.0,
            ],
        );
    }

    #[test]
    fn reference_by_hand_full_broadcast() {
        // Each row has its own w and b row.
        let c = case([1, 2, 1, 1]).with_param("broadcast", "full");
        let x = HostTensor::from_f32(DType::F32, [1, 2, 1, 1], &[2.0, -3.0]);
        let w = HostTensor::from_f32(DType::F32, [1, 2, 1, 1], &[3.0, 5.0]);
        let b = HostTensor::from_f32(DType::F32, [1, 2, 1, 1], &[1.0, -1.0]);
        let out = OP.reference(&c, &[x, w, b]).unwrap();
        // A one-element row normalizes to sign(x) (up to eps).
        let s0 = 2.0 / (4.0f64 + EPS).sqrt();
        let s1 = -3.0 / (9.0f64 + EPS).sqrt();
        close(&out[0], &[s0 * 3.0 + 1.0, s1 * 5.0 - 1.0]);
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        for bc in ["row", "full"] {
            let c = |ne| case(ne).with_param("broadcast", bc);
            let v = GGML
                .plan(&c([64, 1, 65536, 1]), &h200)
                .unwrap()
                .violations(&h200);
            assert_eq!(v.len(), 1);
            assert_eq!(
                (v[0].dim.as_str(), v[0].value, v[0].limit),
                ("grid.y", 65536, 65535)
            );
            assert!(GGML
                .plan(&c([64, 1, 65535, 1]), &h200)
                .unwrap()
                .violations(&h200)
                .is_empty());
        }
        let v = GGML
            .plan(&case([64, 1, 1, 65536]), &h200)
            .unwrap()
            .violations(&h200);
        assert_eq!((v.len(), v[0].dim.as_str()), (1, "grid.z"));
        assert!(GGML
            .plan(&case([64, 1, 1, 65535]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
    }

    #[test]
    fn upstream_line_is_the_incidents_second_line() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_rms_norm_mul_add(GGML_TYPE_F32, {64, 1, 65536, 1}, 1e-6f, false, false));"
        );
        assert_eq!(
            r.vars,
            "type=f32,ne=[64,1,65536,1],eps=0.000001,broadcast=0,multi_add=0"
        );
        assert_eq!(r.op_name, "RMS_NORM_MUL_ADD");
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n0 in 1i64..5000, n1 in 1i64..3_000_000_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
            prof in 0usize..5, full in proptest::bool::ANY,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let c = case([n0, n1, n2, n3]).with_param("broadcast", if full { "full" } else { "row" });
            match CLAMPED.plan(&c, &p) {
                Ok(plan) => proptest::prop_assert!(plan.violations(&p).is_empty(), "{:?}", plan.violations(&p)),
                Err(_) => proptest::prop_assert!(n1 as u64 > p.grid_limit(0)),
            }
        }
    }
}
