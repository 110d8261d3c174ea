//! l2_norm (ggml L2_NORM): `dst = x / max(sqrt(sum x^2), eps)` per row of ne0 elements
//! (torch.nn.functional.normalize).
//!
//! Upstream's CUDA launch (ggml norm.cu, `l2_norm_f32_cuda`) is rms_norm's: `dim3
//! blocks_num(nrows, nchannels, nsamples)`, so ne\[2\] lands on grid.y and ne\[3\] on grid.z, both
//! capped at 65535; WARP_SIZE (32) threads below ncols 1024, 1024 from there.

use crate::row_norm::{RowNormOp, Upstream};
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/l2_norm/l2_norm.cu", "l2_norm.cu");

kedge_core::params! {
    /// l2_norm's parameters.
    pub(crate) struct L2NormParams {
        eps: float(0.0..=f64::MAX) = 1e-12, "lower bound on the row's L2 norm (test-backend-ops' default, RWKV7's value)";
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view (the delta-net's q/k are views)";
    }
}

/// The incident calls L2_NORM unreachable ("`ne[2]` = 1 in LLMs"); the gated delta-net layers
/// say otherwise.
pub(crate) const REACH_NE2: &str = "a micro-batch (-ub) of 65536+ tokens of one sequence through a gated delta-net layer: Qwen3-Next / Qwen3.5 (and qwen4exp's linear-attention layers) l2-normalize q and k as views [head_k_dim, num_k_heads, n_seq_tokens, n_seqs], so n_seq_tokens lands on ne[2] (llama.cpp model code seen in a code search, not run). The incident's 'ne[2] = 1' holds only for a hidden-state L2_NORM";

pub(crate) const REACH_NE3: &str = "synthetic: no known model reaches it (ne[3] is n_seqs in the delta-net layers, bounded by the server's sequence count, far below 65535)";

fn eps(c: &Case) -> f64 {
    L2NormParams::of(c).eps
}

/// The delta-net's q and k are views (padded rows) with tokens on ne[2].
fn padded_view_on_grid_y(limits: &LimitsProfile) -> Vec<Boundary> {
    let gy = limits.grid_limit(1) as i64;
    vec![Boundary::ne(
        "ne[2] on grid.y, padded rows (the delta-net's q/k are views)",
        2,
        gy + 1,
        [64, 1, 0, 1],
        Reach(REACH_NE2),
    )
    .with_values(vec![gy, gy + 1])
    .with_params(|p: &mut L2NormParams| p.row_pad = 64)]
}

pub(crate) static OP: RowNormOp = RowNormOp {
    name: "l2_norm",
    about: "L2 normalization over ne0 (ggml L2_NORM)",
    params: L2NormParams::SPECS,
    eps,
    row: l2_norm_row,
    impls: &[&GGML, &CLAMPED],
    upstream: Upstream {
        ctor: "test_l2_norm",
        op_name: "L2_NORM",
        eps_first: true,
        vars_suffix: ",noncontig_rows=0",
    },
    reach_ne2: REACH_NE2,
    reach_ne3: REACH_NE3,
    reach_block_switch:
        "synthetic: no known model l2-normalizes rows of about 1024 (delta-net head_k_dim is 128)",
    more_boundaries: padded_view_on_grid_y,
    smoke: &[
        ([64, 64, 3, 1], 0),
        ([1, 1, 1, 1], 0),
        ([31, 7, 3, 2], 0),
        ([1023, 2, 1, 1], 0),
        ([1024, 2, 1, 1], 0),
        ([4096, 3, 2, 1], 0),
        ([128, 4, 2, 2], 128),
    ],
};

pub(crate) fn l2_norm_row(x: &[f64], dst: &mut [f64], eps: f64) {
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    let scale = 1.0 / norm.max(eps);
    for (d, v) in dst.iter_mut().zip(x) {
        *d = v * scale;
    }
}

crate::row_norm::row_norm_impls!(
    SRC,
    eps,
    32,
    "ggml norm.cu l2_norm as shipped: grid (nrows, nchannels, nsamples), extents read from gridDim",
    ["l2_norm_ggml_32", "l2_norm_ggml_1024"],
    ["l2_norm_clamped_32", "l2_norm_clamped_1024"]
);

#[cfg(test)]
mod tests {
    use super::*;
    const EPS: f64 = 1e-12;

    #[test]
    fn eps_default_is_declared_once() {
        assert_eq!(L2NormParams::default().eps, EPS);
    }

    fn case(ne: Ne) -> Case {
        Case::new("l2_norm", "ggml", DType::F32, ne)
            .with_param("eps", EPS)
            .with_param("row_pad", 0)
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn reference_by_hand() {
        // Row [3, 4]: norm 5. Row [0, 0]: norm 0 < eps, so divided by eps: stays 0.
        let x = HostTensor::from_f32(DType::F32, [2, 2, 1, 1], &[3.0, 4.0, 0.0, 0.0]);
        let out = OP.reference(&case([2, 2, 1, 1]), &[x]).unwrap();
        close(&out[0], &[0.6, 0.8, 0.0, 0.0]);
        // eps bounds the divisor from below: a row of norm 1e-3 under eps 0.5 is divided by 0.5.
        let x = HostTensor::from_f32(DType::F32, [1, 1, 1, 1], &[1e-3]);
        let out = OP
            .reference(&case([1, 1, 1, 1]).with_param("eps", 0.5), &[x])
            .unwrap();
        assert!((out[0][0] - (1e-3f32 as f64) / 0.5).abs() < 1e-15);
        // Padded rows: the padding is not part of the row.
        let c = case([2, 2, 1, 1]).with_param("row_pad", 1);
        let specs = OP.tensors(&c).unwrap();
        let x = HostTensor::from_bytes(
            DType::F32,
            [2, 2, 1, 1],
            specs[0].nb,
            [6.0f32, 8.0, 99.0, 0.0, -2.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        let out = OP.reference(&c, &[x]).unwrap();
        close(&out[0], &[0.6, 0.8, 0.0, -1.0]);
    }

    #[test]
    fn reference_rows_have_unit_norm() {
        let n = 300;
        let vals: Vec<f32> = (0..n * 2).map(|i| ((i * 13) % 29) as f32 - 14.0).collect();
        let x = HostTensor::from_f32(DType::F32, [n as i64, 2, 1, 1], &vals);
        let out = OP.reference(&case([n as i64, 2, 1, 1]), &[x]).unwrap();
        for row in out[0].chunks(n) {
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-12, "norm {norm}");
        }
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let bad = GGML.plan(&case([128, 2, 65536, 1]), &h200).unwrap();
        let v = bad.violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].dim, "grid.y");
        assert_eq!((v[0].value, v[0].limit), (65536, 65535));
        assert!(GGML
            .plan(&case([128, 2, 65535, 1]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
        let v = GGML
            .plan(&case([64, 1, 1, 65536]), &h200)
            .unwrap()
            .violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].dim.as_str(), v[0].value), ("grid.z", 65536));
        assert!(GGML
            .plan(&case([64, 1, 1, 65535]), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
    }

    #[test]
    /// test_l2_norm(type, ne, eps, v, noncontig_rows): eps before the view flag, unlike
    /// test_norm (tests/test-backend-ops.cpp of the pinned ggml).
    fn upstream_line_and_vars() {
        let r = OP.upstream(&case([64, 1, 65536, 1])).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_l2_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, 1e-12f, false));"
        );
        assert_eq!(
            r.vars,
            "type=f32,ne=[64,1,65536,1],eps=0.000000,v=0,noncontig_rows=0"
        );
        assert_eq!(r.op_name, "L2_NORM");
        let r = OP
            .upstream(&case([32, 3, 2, 1]).with_param("row_pad", 5))
            .unwrap();
        assert!(
            r.test_case_line.contains("{64, 6, 4, 2}, 1e-12f, true"),
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
