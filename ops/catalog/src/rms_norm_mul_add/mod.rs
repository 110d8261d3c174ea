//! rms_norm_mul_add: the fusion ggml's CUDA backend applies to RMS_NORM -> MUL -> ADD,
//! `dst = rms_norm(x) * w + b`, w and b broadcast by ggml's repeat rule (index modulo shape).
//!
//! `broadcast = "row"` (the default, what a model's norm weight and bias are): w and b are
//! [ne0, 1, 1, 1]. `broadcast = "full"`: w and b have x's shape, as in test-backend-ops'
//! test_rms_norm_mul_add with broadcast=false.
//!
//! Upstream launches the fused kernel (`rms_norm_f32<block_size, true, true>`, norm.cu) with
//! rms_norm's grid, `dim3 blocks_num(nrows, nchannels, nsamples)`: `ne[2]` on grid.y and `ne[3]` on
//! grid.z, both capped at 65535 (kedge generates those boundaries from `probe_base`). It is the
//! second line of the incident's repro.
//!
//! Element types: f32, f16 and bf16 (x, w, b and dst share one). Upstream's fused CUDA kernel
//! takes f32 only (norm.cu asserts f32 for the norm's input, the weight, the bias and the
//! output); kedge's impls take f16 and bf16 too, as models of the same launch with 2-byte
//! elements, loading the type, computing in f32 and storing the type.

use crate::row_norm::{
    clamped_grid, ggml_grid, map_rows_indexed, pad, RowNormGeometry, BLOCK_SWITCH,
};
use crate::rows::{row_tensors, RowLayout};
use kedge_core::contract::upstream::{cpp_float, cpp_ne, ggml_float, vars_ne};
use kedge_core::model::host::HostTensor;
use kedge_core::*;

crate::rows::row_kernel_source!(
    SRC = "ops/catalog/src/rms_norm_mul_add/rms_norm_mul_add.cu",
    "rms_norm_mul_add.cu"
);

kedge_core::params! {
    /// rms_norm_mul_add's parameters.
    pub(crate) struct RmsNormMulAddParams {
        eps: float(0.0..=f64::MAX) = 1e-6, "added to the mean of squares";
        broadcast: choice(["row", "full"]) = "row", "shape of w and b: row = [ne0, 1, 1, 1] (a model's norm weight), full = x's shape";
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view";
    }
}

pub(crate) struct RmsNormMulAdd;
pub(crate) static OP: RmsNormMulAdd = RmsNormMulAdd;

pub(crate) const REACH_NE2: &str = "qwen4exp indexer (llama.cpp PR #27742): pooled keys reshaped to [idx_dim, 1, ceil(n_kv/4)] go through build_norm(pooled, index_k_norm, nullptr, LLM_NORM_RMS), which ggml fuses into RMS_NORM x weight (rms_norm_mul_f32_cuda in the incident's stack: this kernel template and grid, without the add; a norm with a bias takes the add); n_kv = 262,144 puts 65,536 on ne[2]";

/// Shape of w and b for a case.
pub(crate) fn weight_ne(case: &Case) -> Ne {
    if RmsNormMulAddParams::of(case).broadcast == "full" {
        case.ne
    } else {
        [case.ne[0], 1, 1, 1]
    }
}

fn bad(msg: String) -> CaseError {
    CaseError::BadInput {
        op: "rms_norm_mul_add".into(),
        msg,
    }
}

impl Op for RmsNormMulAdd {
    fn name(&self) -> &'static str {
        "rms_norm_mul_add"
    }
    fn about(&self) -> &'static str {
        "fused RMS_NORM x weight + bias over ne0 (ggml's RMS_NORM_MUL_ADD fusion)"
    }
    /// test-backend-ops names the fused case `RMS_NORM_MUL_ADD` (its `op_desc`).
    fn upstream_name(&self) -> Option<&'static str> {
        Some("RMS_NORM_MUL_ADD")
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::FLOATS
    }
    /// f32: test-backend-ops' 1e-7; f16 and bf16: the same plus their rounding
    /// (`Tolerance::rounded_to`).
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to(case.dtype)
    }
    fn params(&self) -> &'static [ParamSpec] {
        RmsNormMulAddParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    /// x (padded rows if `row_pad` > 0), w, b, then dst.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let mut t = row_tensors(case)?;
        let wne = weight_ne(case);
        let dst = t
            .pop()
            .ok_or_else(|| bad("row tensors without an output".into()))?;
        t.push(TensorSpec::dense("w", Role::Input, case.dtype, wne)?);
        t.push(TensorSpec::dense("b", Role::Input, case.dtype, wne)?);
        t.push(dst);
        Ok(t)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let eps = RmsNormMulAddParams::of(case).eps;
        let [x, w, b] = inputs else {
            return Err(bad(format!(
                "expected 3 inputs (x, w, b), got {}",
                inputs.len()
            )));
        };
        let wne = w.ne.map(|d| d as usize);
        if w.ne != b.ne || wne[0] != x.ne[0] as usize {
            return Err(bad(format!(
                "w {:?} and b {:?} must share one shape whose ne0 is x's ({})",
                w.ne, b.ne, x.ne[0]
            )));
        }
        // One row of w and b (a model's norm weight and bias) is decoded once for every row
        // of x; per-row weights are read where they are.
        let one_row = (wne[1] * wne[2] * wne[3] == 1).then(|| {
            let (mut wr, mut br) = (vec![0.0; wne[0]], vec![0.0; wne[0]]);
            w.row_f64(0, 0, 0, &mut wr);
            b.row_f64(0, 0, 0, &mut br);
            (wr, br)
        });
        Ok(vec![map_rows_indexed(x, |[i1, i2, i3], row, dst| {
            let mean = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
            let scale = 1.0 / (mean + eps).sqrt();
            match &one_row {
                Some((wr, br)) => {
                    for (((d, v), wv), bv) in dst.iter_mut().zip(row).zip(wr).zip(br) {
                        *d = v * scale * wv + bv;
                    }
                }
                None => {
                    let (j1, j2, j3) = (i1 % wne[1], i2 % wne[2], i3 % wne[3]);
                    for (i0, (d, v)) in dst.iter_mut().zip(row).enumerate() {
                        *d = v * scale * w.get(i0, j1, j2, j3) + b.get(i0, j1, j2, j3);
                    }
                }
            }
        })])
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase::rows([64, 1, 1, 1]))
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        vec![
            // The generated ne[2] probes keep the default row-shaped w and b. A clamped kernel
            // that took the weight row from blockIdx.y instead of the loop's channel would be
            // wrong only with per-channel weights, past the clamp: this probe has them.
            Boundary::ne(
                "ne[2] on grid.y, w and b of x's shape (test-backend-ops' layout)",
                2,
                gy,
                [64, 1, 0, 1],
                Reach(REACH_NE2),
            )
            .with_params(|p: &mut RmsNormMulAddParams| p.broadcast = "full"),
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
            .with_params(|p: &mut RmsNormMulAddParams| p.row_pad = 5),
        ]
    }
    /// Each row is its own; a row-broadcast weight and bias are read whole by every row (and by
    /// the sampled rows' reference).
    fn row_sampling(&self, case: &Case) -> Option<kedge_core::RowSampling> {
        Some(kedge_core::RowSampling::uniform(
            self.tensors(case).ok()?.len(),
        ))
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let full = || crate::params_with(|p: &mut RmsNormMulAddParams| p.broadcast = "full");
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
    /// Upstream's constructor (tests/test-backend-ops.cpp, `struct test_rms_norm_mul_add`) is
    /// `test_rms_norm_mul_add(ggml_type type = GGML_TYPE_F32, std::array<int64_t, 4> ne =
    /// {64, 5, 4, 3}, float eps = 1e-6f, bool broadcast = false, bool multi_add = false)` and
    /// its `vars()` is `VARS_TO_STR5(type, ne, eps, broadcast, multi_add)`. With
    /// broadcast=false its weight and bias have x's shape (kedge's "full"); it has neither a
    /// row-shaped weight nor a padded view, so every case is written with broadcast=false,
    /// multi_add=false and x's shape: the launch geometry, which is what fails upstream,
    /// depends on x's shape only.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let eps = RmsNormMulAddParams::of(case).eps;
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

/// The launch for a case: upstream's block (256 threads below ncols 1024, 1024 from there),
/// the geometry's grid, the entry of the case's element type and the kernel's arguments in
/// parameter order: x, w, b, dst, ncols, [the true extents, clamped only], x's strides in
/// elements, eps, w's and b's extents.
pub(crate) fn launch(
    case: &Case,
    limits: &LimitsProfile,
    geometry: RowNormGeometry,
) -> Result<LaunchPlan, Refusal> {
    let l = RowLayout::of(case);
    let wne = weight_ne(case);
    let eps = RmsNormMulAddParams::of(case).eps as f32;
    let small = l.ncols < BLOCK_SWITCH;
    let bs = if small { 256 } else { 1024 };
    // ncols is an `int` parameter in both kernels, as upstream's; `as i32` is the C
    // conversion (the clamped grid refuses rows that do not fit).
    let mut args = vec![
        KernelArg::Tensor(0),
        KernelArg::Tensor(1),
        KernelArg::Tensor(2),
        KernelArg::Tensor(3),
        KernelArg::I32(l.ncols as i32),
    ];
    let strides = l.stride_args();
    let (grid, entry) = match geometry {
        RowNormGeometry::Ggml => {
            args.extend(strides);
            args.push(KernelArg::F32(eps));
            // Upstream passes w's extents as uint32 fastdiv values; `int` here, as x's.
            args.extend(wne[1..].iter().map(|&d| KernelArg::I32(d as i32)));
            let entry = if small {
                crate::rows::typed!(SRC, "rms_norm_mul_add_ggml_256")
            } else {
                crate::rows::typed!(SRC, "rms_norm_mul_add_ggml_1024")
            };
            (ggml_grid(&l), entry)
        }
        RowNormGeometry::Clamped => {
            let grid = clamped_grid(&l, limits)?;
            args.extend([
                KernelArg::I64(l.nrows),
                KernelArg::I64(l.nchannels),
                KernelArg::I64(l.nsamples),
            ]);
            args.extend(strides);
            args.push(KernelArg::F32(eps));
            args.extend(wne[1..].iter().map(|&d| KernelArg::I64(d)));
            let entry = if small {
                crate::rows::typed!(SRC, "rms_norm_mul_add_clamped_256")
            } else {
                crate::rows::typed!(SRC, "rms_norm_mul_add_clamped_1024")
            };
            (grid, entry)
        }
    };
    Ok(LaunchPlan::new(entry.kernel(case.dtype)?, grid, [bs, 1, 1], 0).args(args))
}

fn ggml_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    Ok(Plan::single(launch(case, limits, RowNormGeometry::Ggml)?))
}

fn clamped_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    Ok(Plan::single(launch(
        case,
        limits,
        RowNormGeometry::Clamped,
    )?))
}

/// Upstream: `dim3 blocks_num(nrows, nchannels, nsamples)`, extents from gridDim.
pub(crate) static GGML: KernelImpl = KernelImpl {
    name: "ggml",
    role: ImplRole::Upstream,
    about: "ggml's fused rms_norm_f32<bs, true, true> as shipped: grid (nrows, nchannels, nsamples), extents from gridDim",
    plan: ggml_plan,
};

/// The fix: grid clamped to the profile, true extents passed, grid-stride loops.
pub(crate) static CLAMPED: KernelImpl = KernelImpl {
    name: "clamped",
    role: ImplRole::Fixed,
    about: "grid clamped to the device limits, extents passed explicitly, grid-stride loops, 64-bit offsets",
    plan: clamped_plan,
};

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;
    use rstest::rstest;

    const EPS: f64 = 1e-6;

    fn case(ne: Ne) -> Case {
        Case::new("rms_norm_mul_add", "ggml", DType::F32, ne)
            .with_param("eps", EPS)
            .with_param("broadcast", "row")
            .with_param("row_pad", 0)
    }

    fn h200() -> LimitsProfile {
        LimitsProfile::builtin("h200").unwrap()
    }

    #[test]
    fn typed_params_default_once() {
        let p = RmsNormMulAddParams::default();
        assert_eq!((p.eps, p.broadcast, p.row_pad), (EPS, "row", 0));
        let c = Case::new("rms_norm_mul_add", "ggml", DType::F32, [4, 3, 1, 1]);
        assert_eq!(weight_ne(&c), [4, 1, 1, 1]);
        assert_eq!(weight_ne(&c.with_param("broadcast", "full")), [4, 3, 1, 1]);
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
        let want = [
            3.0 * s0 * 2.0 + 0.5,
            -4.0 * s0 + 10.0,
            2.0 * s1 + 0.5,
            -s1 + 10.0,
        ];
        assert_abs_diff_eq!(out[0][..], want[..], epsilon = 1e-12);
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
        assert_abs_diff_eq!(
            out[0][..],
            [s0 * 3.0 + 1.0, s1 * 5.0 - 1.0][..],
            epsilon = 1e-12
        );
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h200 = h200();
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
    fn grid_limits_are_generated_not_declared() {
        let h200 = h200();
        let base = OP.probe_base().unwrap();
        let generated = kedge_core::contract::boundary::generated(&base, &h200, DType::F32);
        for d in [2, 3] {
            assert!(
                generated
                    .iter()
                    .any(|b| b.axis == Axis::Ne(d) && b.probe_values() == vec![65_535, 65_536]),
                "ne[{d}] at the grid limit is generated"
            );
        }
        // The op's own boundaries keep only what the generator does not yield.
        for b in OP.boundaries(&h200) {
            let plain_grid = b.params.is_empty() && matches!(b.axis, Axis::Ne(2) | Axis::Ne(3));
            assert!(!plain_grid, "{} is generated", b.label);
        }
        assert_eq!(
            OP.reach(&case([64, 1, 65536, 1])).as_deref(),
            Some(REACH_NE2)
        );
        assert!(OP.reach(&case([64, 1, 1, 65536])).is_some());
        assert!(OP.reach(&case([64, 1, 65535, 65535])).is_none());
    }

    #[rstest]
    #[case(1023, 256, "rms_norm_mul_add_ggml_256")]
    #[case(1024, 1024, "rms_norm_mul_add_ggml_1024")]
    fn block_switches_at_1024_like_upstream(
        #[case] ncols: i64,
        #[case] block: u64,
        #[case] entry: &str,
    ) {
        let p = GGML.plan(&case([ncols, 2, 1, 1]), &h200()).unwrap();
        assert_eq!(
            (p.launches[0].name(), p.launches[0].block[0]),
            (entry, block)
        );
        let p = CLAMPED.plan(&case([ncols, 2, 1, 1]), &h200()).unwrap();
        assert_eq!(p.launches[0].block[0], block);
    }

    /// Each impl's planned arguments match the kernel's declared parameters, on both block
    /// sizes and both broadcasts; the ggml impls' plans are what `kedge repro` writes out.
    #[rstest]
    fn plan_args_match_the_kernel_signatures(
        #[values(&GGML, &CLAMPED)] imp: &KernelImpl,
        #[values(100, 4096)] ncols: i64,
        #[values("row", "full")] broadcast: &str,
    ) {
        let c = case([ncols, 3, 2, 2]).with_param("broadcast", broadcast);
        let plan = imp.plan(&c, &h200()).unwrap();
        crate::signature::check_plan(&plan).unwrap();
        assert!(plan.standalone().is_ok());
    }

    #[rstest]
    fn plan_size_does_not_grow_with_the_shape(#[values(&GGML, &CLAMPED)] imp: &KernelImpl) {
        let shape = |p: &Plan| {
            (
                p.launches.len(),
                p.repetitions(),
                p.launches.iter().map(|l| l.args.len()).collect::<Vec<_>>(),
            )
        };
        let small = shape(&imp.plan(&case([64, 3, 1, 1]), &h200()).unwrap());
        for ne in [[64, 65_535, 1, 1], [64, 1, 65_535, 1], [64, 7, 300, 65_535]] {
            assert_eq!(shape(&imp.plan(&case(ne), &h200()).unwrap()), small);
        }
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
        assert_eq!(OP.upstream_name(), Some("RMS_NORM_MUL_ADD"));
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
