//! rms_norm: `dst = x / sqrt(mean(x^2) + eps)` per row of ne0 elements (ggml RMS_NORM).
//!
//! The incident (a 260K-token context on a DGX Spark failing with "CUDA error: invalid
//! argument"): ggml's CUDA launch is
//! `dim3 blocks_num(nrows, nchannels, nsamples)`, so `ne[2]` lands on grid.y and `ne[3]` on
//! grid.z, both capped at 65535. qwen4exp's indexer reshapes pooled keys to
//! \[idx_dim, 1, ceil(n_kv/4)\], so n_kv = 262,144 gives `ne[2]` = 65,536 and the launch fails
//! with `invalid argument`. The family's launch code is in `row_norm`.

use crate::row_norm::{RowNormGeometry, RowNormImpl, RowNormOp, Upstream};
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/rms_norm/rms_norm.cu", "rms_norm.cu");

kedge_core::params! {
    /// rms_norm's parameters.
    pub(crate) struct RmsNormParams {
        eps: float(0.0..=f64::MAX) = 1e-6, "added to the mean of squares";
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view (test-backend-ops v=1)";
    }
}

pub(crate) const REACH_NE2: &str = "qwen4exp indexer (llama.cpp PR #27742): pooled keys reshaped to [idx_dim, 1, ceil(n_kv/4)], so n_kv = 262,144 puts 65,536 on ne[2]; the real ceiling is n_kv <= 262,140 (261,888 after padding to 256)";

fn eps(c: &Case) -> f64 {
    RmsNormParams::of(c).eps
}

pub(crate) static OP: RowNormOp = RowNormOp {
    name: "rms_norm",
    about: "RMS normalization over ne0 (ggml RMS_NORM)",
    params: RmsNormParams::SPECS,
    eps,
    row: rms_norm_row,
    impls: &[&GGML, &CLAMPED, &PLANTED_READ_PAST_END],
    upstream: Upstream {
        ctor: "test_rms_norm",
        op_name: "RMS_NORM",
        eps_first: false,
        vars_suffix: ",inplace=0",
    },
    reach_ne2: REACH_NE2,
    reach_ne3: Reach::SYNTHETIC.0,
    reach_block_switch: "every LLM: hidden sizes from 1024 up take the 1024-thread path",
    more_boundaries: dst_offset_past_2p31,
    smoke: &[
        ([64, 5, 4, 3], 0),
        ([1, 1, 1, 1], 0),
        ([31, 7, 3, 2], 0),
        ([1023, 2, 1, 1], 0),
        ([1024, 2, 1, 1], 0),
        ([4096, 3, 2, 1], 0),
        ([100, 4, 2, 2], 3),
    ],
};

/// norm.cu:112 computes the destination offset `((sample*nchannels + channel)*nrows + row)*ncols`
/// in int: the row that starts at element 2^31 is written out of bounds (prediction C15,
/// 16 GiB per tensor at ne0 = 4096). The generated count boundary stops at 2^31 elements, whose
/// last row still starts below it, so this one is declared.
fn dst_offset_past_2p31(_: &LimitsProfile) -> Vec<Boundary> {
    vec![Boundary::ne(
        "C15: the row past 524288 of 4096 starts at element 2^31 (int destination offset)",
        1,
        524_289,
        [4096, 0, 1, 1],
        Reach::SYNTHETIC,
    )
    .with_values(vec![524_288, 524_289])]
}

pub(crate) fn rms_norm_row(x: &[f64], dst: &mut [f64], eps: f64) {
    let mean = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (mean + eps).sqrt();
    for (d, v) in dst.iter_mut().zip(x) {
        *d = v * scale;
    }
}

crate::row_norm::row_norm_impls!(
    SRC,
    eps,
    256,
    "ggml norm.cu as shipped: grid (nrows, nchannels, nsamples), extents read from gridDim",
    ["rms_norm_ggml_256", "rms_norm_ggml_1024"],
    ["rms_norm_clamped_256", "rms_norm_clamped_1024"]
);

/// CALIBRATION impl: `clamped` plus a read one element past the input's end on the last row.
pub(crate) static PLANTED_READ_PAST_END: RowNormImpl = RowNormImpl {
    name: "planted-read-past-end",
    role: ImplRole::Planted {
        bug: "reads one element past the input's end on the last row; discards it, so every value is right",
        expect: &[Detector::GuardPage, Detector::Memcheck],
    },
    geometry: RowNormGeometry::Clamped,
    about: "CALIBRATION: the clamped kernel with a planted one-element read past the end of x",
    small_block: 256,
    entries: [
        crate::rows::typed!(SRC, "rms_norm_planted_read_past_end"),
        crate::rows::typed!(SRC, "rms_norm_planted_read_past_end"),
    ],
    fixed_block: true,
    eps,
};

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
    fn typed_params_default_once() {
        let p = RmsNormParams::default();
        assert_eq!((p.eps, p.row_pad), (1e-6, 0));
        let c = Case::new("rms_norm", "ggml", DType::F32, [4, 1, 1, 1]).with_param("eps", 1e-3);
        assert_eq!(RmsNormParams::of(&c).eps, 1e-3);
        assert_eq!(RmsNormParams::of(&c).row_pad, 0);
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
