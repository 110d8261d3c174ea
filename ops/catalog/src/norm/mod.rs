//! norm (ggml NORM, LayerNorm without weight): `dst = (x - mean) / sqrt(var + eps)` per row of
//! ne0 elements.
//!
//! Upstream's CUDA launch (ggml norm.cu, `norm_f32_cuda`) is the one the incident (a 260K-token
//! context on a DGX Spark failing with "CUDA error: invalid argument") found in rms_norm:
//! `dim3 blocks_num(nrows, nchannels, nsamples)`, so ne\[2\] lands on grid.y and ne\[3\] on
//! grid.z, both capped at 65535.
//! Unlike rms_norm, norm still launches WARP_SIZE (32) threads below ncols 1024 (upstream's
//! rms_norm moved to 256); the switch to 1024 threads is at the same ncols.

use crate::row_norm::{RowNormOp, Upstream};
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/norm/norm.cu", "norm.cu");

kedge_core::params! {
    /// norm's parameters.
    pub(crate) struct NormParams {
        eps: float(0.0..=f64::MAX) = 1e-5, "added to the variance";
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view (test-backend-ops v=1)";
    }
}

/// NORM with n_tokens on `ne[2]`: a LayerNorm applied per head after the head reshape.
pub(crate) const REACH_NE2: &str = "a micro-batch (-ub) of 65536+ tokens through a per-head LayerNorm: StableLM's (and Command-R's) q/k norm is build_norm(Qcur, attn_q_norm, NULL, LLM_NORM) on Qcur = [n_embd_head, n_head, n_tokens], so n_tokens lands on ne[2] (llama.cpp model code as quoted in a code search, not run). The hidden-state NORM runs on [n_embd, n_tokens] (ne[2] = 1) and never gets there";

fn eps(c: &Case) -> f64 {
    NormParams::of(c).eps
}

pub(crate) static OP: RowNormOp = RowNormOp {
    name: "norm",
    about: "mean/variance normalization over ne0 (ggml NORM)",
    params: NormParams::SPECS,
    eps,
    row: norm_row,
    impls: &[&GGML, &CLAMPED],
    upstream: Upstream {
        ctor: "test_norm",
        op_name: "NORM",
        eps_first: false,
        vars_suffix: ",noncontig_rows=0",
    },
    reach_ne2: REACH_NE2,
    reach_ne3: Reach::SYNTHETIC.0,
    reach_block_switch: "LayerNorm models: hidden sizes from 1024 up (GPT-2 medium, Whisper, BERT-large) take the 1024-thread path, BERT-base's 768 the 32-thread one",
    more_boundaries: crate::row_norm::no_more_boundaries,
    smoke: &[
        ([64, 5, 4, 3], 0),
        ([2, 1, 1, 1], 0),
        ([31, 7, 3, 2], 0),
        ([1023, 2, 1, 1], 0),
        ([1024, 2, 1, 1], 0),
        ([4096, 3, 2, 1], 0),
        ([100, 4, 2, 2], 3),
    ],
};

/// Two-pass mean and variance in f64 (the kernel's `E[x^2]` - `E[x]`^2 is its own business).
pub(crate) fn norm_row(x: &[f64], dst: &mut [f64], eps: f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let inv_std = 1.0 / (var + eps).sqrt();
    for (d, v) in dst.iter_mut().zip(x) {
        *d = (v - mean) * inv_std;
    }
}

crate::row_norm::row_norm_impls!(
    SRC,
    eps,
    32,
    "ggml norm.cu as shipped: grid (nrows, nchannels, nsamples), extents read from gridDim",
    ["norm_ggml_32", "norm_ggml_1024"],
    ["norm_clamped_32", "norm_clamped_1024"]
);

#[cfg(test)]
mod tests {
    use super::*;
    const EPS: f64 = 1e-5;

    #[test]
    fn eps_default_is_declared_once() {
        assert_eq!(NormParams::default().eps, EPS);
    }

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
            (p.launches[0].name(), p.launches[0].block[0]),
            ("norm_ggml_32", 32)
        );
        let p = GGML.plan(&case([1024, 1, 1, 1]), &h200).unwrap();
        assert_eq!(
            (p.launches[0].name(), p.launches[0].block[0]),
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
        assert_eq!(
            r.vars,
            "type=f32,ne=[64,1,65536,1],v=0,eps=0.000010,noncontig_rows=0"
        );
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
