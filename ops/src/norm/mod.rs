//! norm (ggml NORM, LayerNorm without weight): `dst = (x - mean) / sqrt(var + eps)` per row of
//! ne0 elements.
//!
//! Upstream's CUDA launch (ggml norm.cu, `norm_f32_cuda`) is the one the incident
//! (shared/background/ggml-norm-grid-y-limit.txt) found in rms_norm: `dim3 blocks_num(nrows,
//! nchannels, nsamples)`, so ne[2] lands on grid.y and ne[3] on grid.z, both capped at 65535.
//! Unlike rms_norm, norm still launches WARP_SIZE (32) threads below ncols 1024 (upstream's
//! rms_norm moved to 256); the switch to 1024 threads is at the same ncols.

use crate::norm_family::{pad, upstream_view, RowNormGeometry, RowNormImpl};
use crate::rows::{cpp_float, cpp_ne, ggml_float, map_rows, row_tensors, vars_ne, ROW_PAD};
use kedge_core::host::HostTensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::*;

const SRC: &str = include_str!("norm.cu");
const FILE: &str = "ops/src/norm/norm.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct Norm;
pub static OP: Norm = Norm;

const EPS: f64 = 1e-5;

static PARAMS: &[ParamSpec] = &[
    ParamSpec::float("eps", EPS, "added to the variance"),
    ROW_PAD,
];

/// ggml switches from 32 to 1024 threads at ncols 1024 (norm.cu, norm_f32_cuda).
pub const BLOCK_SWITCH: i64 = crate::norm_family::ROW_NORM_BLOCK_SWITCH;

/// NORM with n_tokens on ne[2]: a LayerNorm applied per head after the head reshape.
pub const REACH_NE2: &str = "a micro-batch (-ub) of 65536+ tokens through a per-head LayerNorm: StableLM's (and Command-R's) q/k norm is build_norm(Qcur, attn_q_norm, NULL, LLM_NORM) on Qcur = [n_embd_head, n_head, n_tokens], so n_tokens lands on ne[2] (llama.cpp model code as quoted in a code search, not run). The hidden-state NORM runs on [n_embd, n_tokens] (ne[2] = 1) and never gets there";

impl Op for Norm {
    fn name(&self) -> &'static str {
        "norm"
    }
    fn about(&self) -> &'static str {
        "mean/variance normalization over ne0 (ggml NORM)"
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
        row_tensors(case)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let eps = case.params.f64_or("eps", EPS);
        Ok(vec![map_rows(&inputs[0], |x, dst| norm_row(x, dst, eps))])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        vec![
            Boundary::ne("ne[2] on grid.y", 2, gy, [64, 1, 0, 1], Reach(REACH_NE2)),
            Boundary::ne("ne[3] on grid.z", 3, gz, [64, 1, 1, 0], Reach::SYNTHETIC),
            Boundary::ne(
                "ne[0] at the 32 -> 1024 thread switch",
                0,
                BLOCK_SWITCH,
                [0, 4, 3, 2],
                Reach("LayerNorm models: hidden sizes from 1024 up (GPT-2 medium, Whisper, BERT-large) take the 1024-thread path, BERT-base's 768 the 32-thread one"),
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
        vec![
            ([64, 5, 4, 3], Params::new()),
            ([2, 1, 1, 1], Params::new()),
            ([31, 7, 3, 2], Params::new()),
            ([1023, 2, 1, 1], Params::new()),
            ([1024, 2, 1, 1], Params::new()),
            ([4096, 3, 2, 1], Params::new()),
            ([100, 4, 2, 2], pad(3)),
        ]
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let eps = case.params.f64_or("eps", EPS);
        let (v, ne) = upstream_view(case);
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_norm({}, {}, {}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&ne),
                v,
                cpp_float(eps)
            ),
            op_name: "NORM".into(),
            vars: format!(
                "type={},ne={},v={},eps={}",
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

/// Two-pass mean and variance in f64 (the kernel's E[x^2] - E[x]^2 is its own business).
pub fn norm_row(x: &[f64], dst: &mut [f64], eps: f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let inv_std = 1.0 / (var + eps).sqrt();
    for (d, v) in dst.iter_mut().zip(x) {
        *d = (v - mean) * inv_std;
    }
}

/// Upstream: `dim3 blocks_num(nrows, nchannels, nsamples)`, extents from gridDim.
pub static GGML: RowNormImpl = RowNormImpl {
    geometry: RowNormGeometry::Ggml,
    about: "ggml norm.cu as shipped: grid (nrows, nchannels, nsamples), extents read from gridDim",
    small_block: 32,
    entries: [k("norm_ggml_32"), k("norm_ggml_1024")],
    default_eps: EPS,
};

/// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
pub static CLAMPED: RowNormImpl = RowNormImpl {
    geometry: RowNormGeometry::Clamped,
    about: "grid clamped to the device limits, extents passed explicitly, grid-stride loops, 64-bit offsets",
    small_block: 32,
    entries: [k("norm_clamped_32"), k("norm_clamped_1024")],
    default_eps: EPS,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ne: Ne) -> Case {
        Case::new("norm", "ggml", DType::F32, ne)
            .with_param("eps", EPS)
            .with_param("row_pad", 0)
    }

    #[test]
    fn reference_by_hand() {
        // Row [1, 2, 3, 6]: mean 3, deviations [-2, -1, 0, 3], variance 14/4 = 3.5.
        let x = HostTensor::from_f32(DType::F32, [4, 1, 1, 1], &[1.0, 2.0, 3.0, 6.0]);
        let out = OP.reference(&case([4, 1, 1, 1]), &[x]).unwrap();
        let s = 1.0 / (3.5f64 + EPS).sqrt();
        for (got, dev) in out[0].iter().zip([-2.0, -1.0, 0.0, 3.0]) {
            assert!((got - dev * s).abs() < 1e-12, "{got} vs {}", dev * s);
        }
        // Two rows are independent: a constant row normalizes to zeros.
        let x = HostTensor::from_f32(DType::F32, [2, 2, 1, 1], &[5.0, 5.0, -1.0, 1.0]);
        let out = OP.reference(&case([2, 2, 1, 1]), &[x]).unwrap();
        assert_eq!(&out[0][..2], &[0.0, 0.0]);
        let s = 1.0 / (1.0f64 + EPS).sqrt();
        assert!((out[0][2] + s).abs() < 1e-12 && (out[0][3] - s).abs() < 1e-12);
        // A padded view: the padding is not part of the row.
        let c = case([2, 2, 1, 1]).with_param("row_pad", 1);
        let specs = OP.tensors(&c).unwrap();
        assert_eq!(specs[0].nb, [4, 12, 24, 24]);
        let x = HostTensor::from_bytes(
            DType::F32,
            [2, 2, 1, 1],
            specs[0].nb,
            [1.0f32, 3.0, 99.0, 0.0, 4.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        let out = OP.reference(&c, &[x]).unwrap();
        // Row 0 [1, 3]: mean 2, variance 1. Row 1 [0, 4]: mean 2, variance 4.
        assert!((out[0][0] + 1.0 / (1.0f64 + EPS).sqrt()).abs() < 1e-12);
        assert!((out[0][3] - 2.0 / (4.0f64 + EPS).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn reference_rows_have_zero_mean_and_unit_variance() {
        let n = 257;
        let vals: Vec<f32> = (0..n * 3).map(|i| ((i * 37) % 101) as f32 - 40.0).collect();
        let x = HostTensor::from_f32(DType::F32, [n as i64, 3, 1, 1], &vals);
        let c = case([n as i64, 3, 1, 1]).with_param("eps", 0.0);
        let out = OP.reference(&c, &[x]).unwrap();
        for row in out[0].chunks(n) {
            let mean = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
            assert!(mean.abs() < 1e-12, "mean {mean}");
            assert!((var - 1.0).abs() < 1e-12, "var {var}");
        }
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let bad = GGML.plan(&case([64, 1, 65536, 1]), &h200).unwrap();
        let v = bad.violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].dim, "grid.y");
        assert_eq!((v[0].value, v[0].limit), (65536, 65535));
        let ok = GGML.plan(&case([64, 1, 65535, 1]), &h200).unwrap();
        assert!(ok.violations(&h200).is_empty());
        let z = GGML.plan(&case([64, 1, 1, 65536]), &h200).unwrap();
        let v = z.violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].dim.as_str(), v[0].value), ("grid.z", 65536));
        assert!(GGML
            .plan(&case([64, 1, 1, 65535]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
        // Rows sit on grid.x: 65536 of them are fine.
        assert!(GGML
            .plan(&case([64, 65536, 1, 1]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
    }

    #[test]
    fn block_switches_at_1024_like_upstream() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let p = GGML.plan(&case([1023, 1, 1, 1]), &h200).unwrap();
        assert_eq!(
            (p.launches[0].kernel.as_str(), p.launches[0].block[0]),
            ("norm_ggml_32", 32)
        );
        let p = GGML.plan(&case([1024, 1, 1, 1]), &h200).unwrap();
        assert_eq!(
            (p.launches[0].kernel.as_str(), p.launches[0].block[0]),
            ("norm_ggml_1024", 1024)
        );
    }

    #[test]
    fn upstream_line_and_vars() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-5f));"
        );
        assert_eq!(r.vars, "type=f32,ne=[64,1,65536,1],v=0,eps=0.000010");
        assert_eq!(r.op_name, "NORM");
        // Padded rows: upstream's v=1 views half of each dimension, so ne is doubled.
        let r = OP
            .upstream(&case([32, 3, 2, 1]).with_param("row_pad", 5))
            .unwrap();
        assert!(
            r.test_case_line.contains("{64, 6, 4, 2}, true"),
            "{}",
            r.test_case_line
        );
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n0 in 1i64..5000, n1 in 1i64..3_000_000_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
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
