//! rms_norm: `dst = x / sqrt(mean(x^2) + eps)` per row of ne0 elements.
//!
//! The incident (shared/background/ggml-norm-grid-y-limit.txt): ggml's CUDA launch is
//! `dim3 blocks_num(nrows, nchannels, nsamples)`, so ne[2] lands on grid.y and ne[3] on
//! grid.z, both capped at 65535. qwen4exp's indexer reshapes pooled keys to
//! [idx_dim, 1, ceil(n_kv/4)], so n_kv = 262,144 gives ne[2] = 65,536 and the launch fails
//! with `invalid argument`.

use crate::rows::{
    cpp_float, cpp_ne, ggml_float, map_rows, row_tensors, vars_ne, RowLayout, ROW_PAD,
};
use kedge_core::device::{RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::*;

const SRC: &str = include_str!("rms_norm.cu");
const FILE: &str = "ops/src/rms_norm/rms_norm.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct RmsNorm;
pub static OP: RmsNorm = RmsNorm;

static PARAMS: &[ParamSpec] = &[
    ParamSpec::float("eps", 1e-6, "added to the mean of squares"),
    ROW_PAD,
];

/// ggml switches from 256 to 1024 threads at ncols 1024 (norm.cu).
pub const BLOCK_SWITCH: i64 = 1024;

pub const REACH_NE2: &str = "qwen4exp indexer (llama.cpp PR #27742): pooled keys reshaped to [idx_dim, 1, ceil(n_kv/4)], so n_kv = 262,144 puts 65,536 on ne[2]; the real ceiling is n_kv <= 262,140 (261,888 after padding to 256)";

impl Op for RmsNorm {
    fn name(&self) -> &'static str {
        "rms_norm"
    }
    fn about(&self) -> &'static str {
        "RMS normalization over ne0 (ggml RMS_NORM)"
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::F32_ONLY
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED, &PLANTED_READ_PAST_END]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        row_tensors(case)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let eps = case.params.f64_or("eps", 1e-6);
        Ok(vec![map_rows(&inputs[0], |x, dst| {
            rms_norm_row(x, dst, eps)
        })])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        vec![
            Boundary::ne("ne[2] on grid.y", 2, gy, [64, 1, 0, 1], Reach(REACH_NE2)),
            Boundary::ne("ne[3] on grid.z", 3, gz, [64, 1, 1, 0], Reach::SYNTHETIC),
            Boundary::ne(
                "ne[0] at the 256 -> 1024 thread switch",
                0,
                BLOCK_SWITCH,
                [0, 4, 3, 2],
                Reach("every LLM: hidden sizes from 1024 up take the 1024-thread path"),
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
                Reach("a view of a larger tensor (test-backend-ops v=1)"),
            )
            .with_param("row_pad", 5),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let pad = |p: i64| {
            let mut m = Params::new();
            m.insert("row_pad".into(), p.into());
            m
        };
        vec![
            ([64, 5, 4, 3], Params::new()),
            ([1, 1, 1, 1], Params::new()),
            ([31, 7, 3, 2], Params::new()),
            ([1023, 2, 1, 1], Params::new()),
            ([1024, 2, 1, 1], Params::new()),
            ([4096, 3, 2, 1], Params::new()),
            ([100, 4, 2, 2], pad(3)),
        ]
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let eps = case.params.f64_or("eps", 1e-6);
        // A padded case maps to upstream's v=1, which views half of every dimension.
        let (v, ne) = crate::norm_family::upstream_view(case);
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_rms_norm({}, {}, {}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&ne),
                v,
                cpp_float(eps)
            ),
            op_name: "RMS_NORM".into(),
            vars: format!(
                "type={},ne={},v={},eps={},inplace=0",
                case.dtype,
                vars_ne(&ne),
                v as i32,
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

pub fn rms_norm_row(x: &[f64], dst: &mut [f64], eps: f64) {
    let mean = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (mean + eps).sqrt();
    for (d, v) in dst.iter_mut().zip(x) {
        *d = v * scale;
    }
}

fn block_for(ncols: i64) -> (u64, &'static str) {
    if ncols < BLOCK_SWITCH {
        (256, "256")
    } else {
        (1024, "1024")
    }
}

/// Upstream: `dim3 blocks_num(nrows, nchannels, nsamples)`.
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
        "ggml norm.cu as shipped: grid (nrows, nchannels, nsamples), extents read from gridDim"
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, String> {
        let l = RowLayout::of(case);
        let (bs, _) = block_for(l.ncols);
        let entry = if bs == 256 {
            "rms_norm_ggml_256"
        } else {
            "rms_norm_ggml_1024"
        };
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k(entry),
            [l.nrows as u64, l.nchannels as u64, l.nsamples as u64],
            [bs, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let args = ctx.resolve_args(&ggml_args(case))?;
        ctx.launch(&plan.launches[0], &args)
    }
    fn args_for_repro(&self, case: &Case, _plan: &Plan) -> Option<Vec<Vec<ReproArg>>> {
        Some(vec![ggml_args(case)])
    }
}

/// The ggml kernel's arguments; `run` and the standalone repro both use this list.
fn ggml_args(case: &Case) -> Vec<ReproArg> {
    let l = RowLayout::of(case);
    vec![
        ReproArg::Tensor(0),
        ReproArg::Tensor(1),
        ReproArg::I32(l.ncols as i32),
        ReproArg::I64(l.stride_row),
        ReproArg::I64(l.stride_channel),
        ReproArg::I64(l.stride_sample),
        ReproArg::F32(case.params.f64_or("eps", 1e-6) as f32),
    ]
}

/// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
pub struct Clamped;
pub static CLAMPED: Clamped = Clamped;

fn clamped_plan(
    case: &Case,
    limits: &LimitsProfile,
    entry: Option<&'static str>,
) -> Result<Plan, String> {
    let l = RowLayout::of(case);
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
    let (bs, name) = block_for(l.ncols);
    let entry = entry.unwrap_or(if name == "256" {
        "rms_norm_clamped_256"
    } else {
        "rms_norm_clamped_1024"
    });
    let bs = if entry == "rms_norm_planted_read_past_end" {
        256
    } else {
        bs
    };
    let gy = (l.nchannels as u64).min(limits.grid_limit(1));
    let gz = (l.nsamples as u64).min(limits.grid_limit(2));
    Ok(Plan::kernels(vec![LaunchPlan::new(
        k(entry),
        [l.nrows as u64, gy, gz],
        [bs, 1, 1],
        0,
    )]))
}

/// The clamped kernels' arguments; `run` and the standalone repro both use this list.
fn clamped_args(case: &Case) -> Vec<ReproArg> {
    let l = RowLayout::of(case);
    vec![
        ReproArg::Tensor(0),
        ReproArg::Tensor(1),
        ReproArg::I32(l.ncols as i32),
        ReproArg::I64(l.nrows),
        ReproArg::I64(l.nchannels),
        ReproArg::I64(l.nsamples),
        ReproArg::I64(l.stride_row),
        ReproArg::I64(l.stride_channel),
        ReproArg::I64(l.stride_sample),
        ReproArg::F32(case.params.f64_or("eps", 1e-6) as f32),
    ]
}

impl Impl for Clamped {
    fn name(&self) -> &'static str {
        "clamped"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Fixed
    }
    fn about(&self) -> &'static str {
        "grid clamped to the device limits, extents passed explicitly, grid-stride loops (the incident's fix)"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        clamped_plan(case, limits, None)
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let args = ctx.resolve_args(&clamped_args(case))?;
        ctx.launch(&plan.launches[0], &args)
    }
    fn args_for_repro(&self, case: &Case, _plan: &Plan) -> Option<Vec<Vec<ReproArg>>> {
        Some(vec![clamped_args(case)])
    }
}

/// CALIBRATION impl: `clamped` plus a read one element past the input's end on the last row.
pub struct PlantedReadPastEnd;
pub static PLANTED_READ_PAST_END: PlantedReadPastEnd = PlantedReadPastEnd;

impl Impl for PlantedReadPastEnd {
    fn name(&self) -> &'static str {
        "planted-read-past-end"
    }
    fn role(&self) -> ImplRole {
        ImplRole::Planted {
            bug: "reads one f32 past the input's end on the last row; discards it, so every value is right",
            expect: &[Detector::GuardPage, Detector::Memcheck],
        }
    }
    fn about(&self) -> &'static str {
        "CALIBRATION: the clamped kernel with a planted one-element read past the end of x"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        clamped_plan(case, limits, Some("rms_norm_planted_read_past_end"))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let args = ctx.resolve_args(&clamped_args(case))?;
        ctx.launch(&plan.launches[0], &args)
    }
    fn args_for_repro(&self, case: &Case, _plan: &Plan) -> Option<Vec<Vec<ReproArg>>> {
        Some(vec![clamped_args(case)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ne: Ne) -> Case {
        Case::new("rms_norm", "ggml", DType::F32, ne)
            .with_param("eps", 1e-6)
            .with_param("row_pad", 0)
    }

    #[test]
    fn reference_by_hand() {
        // Row [3, 4]: mean of squares 12.5, scale 1/sqrt(12.5 + eps).
        let x = HostTensor::from_f32(DType::F32, [2, 1, 1, 1], &[3.0, 4.0]);
        let out = OP.reference(&case([2, 1, 1, 1]), &[x]).unwrap();
        let s = 1.0 / (12.5f64 + 1e-6).sqrt();
        assert!((out[0][0] - 3.0 * s).abs() < 1e-12);
        assert!((out[0][1] - 4.0 * s).abs() < 1e-12);
        // A padded view: the padding is not part of the row.
        let c = case([2, 2, 1, 1]).with_param("row_pad", 1);
        let specs = OP.tensors(&c).unwrap();
        assert_eq!(specs[0].nb, [4, 12, 24, 24]);
        let x = HostTensor::from_bytes(
            DType::F32,
            [2, 2, 1, 1],
            specs[0].nb,
            [1.0f32, 1.0, 99.0, 2.0, 2.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        let out = OP.reference(&c, &[x]).unwrap();
        assert!((out[0][0] - 1.0 / (1.0f64 + 1e-6).sqrt()).abs() < 1e-12);
        assert!((out[0][2] - 2.0 / (4.0f64 + 1e-6).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn ggml_plan_breaks_grid_y_exactly_past_65535() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let bad = GGML.plan(&case([64, 1, 65536, 1]), &h200).unwrap();
        let v = bad.violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].dim, "grid.y");
        assert_eq!((v[0].value, v[0].limit), (65536, 65535));
        let ok = GGML.plan(&case([64, 1, 65535, 1]), &h200).unwrap();
        assert!(ok.violations(&h200).is_empty());
        let z = GGML.plan(&case([64, 1, 1, 65536]), &h200).unwrap();
        assert_eq!(z.violations(&h200)[0].dim, "grid.z");
    }

    #[test]
    fn upstream_line_matches_the_incident() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(r.test_case_line, "test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-6f));");
        assert_eq!(
            r.vars,
            "type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0"
        );
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n0 in 1i64..5000, n1 in 1i64..200_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
            prof in 0usize..5,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let c = case([n0, n1, n2, n3]);
            match CLAMPED.plan(&c, &p) {
                Ok(plan) => proptest::prop_assert!(plan.violations(&p).is_empty(), "{:?}", plan.violations(&p)),
                Err(_) => proptest::prop_assert!(n1 as u64 > p.grid_limit(0)),
            }
        }
    }
}
