//! tri (ggml TRI): keep one triangle of each square ne0 x ne1 matrix, zero the rest.
//! Modes as ggml's `ggml_tri_type` (column i0, row i1): lower `i0 < i1`, lower_diag
//! `i0 <= i1`, upper `i0 > i1`, upper_diag `i0 >= i1`.
//!
//! Upstream (ggml-cuda/tri.cu): one 256-thread block per row, `grid_dims(ne01, ne02, ne03)`,
//! so `ne[2]` (the matrix index) sits on grid.y and `ne[3]` on grid.z: one of the six unclamped
//! sites the incident's sweep found (kedge generates those boundaries from `probe_base`).
//!
//! Element types: f32, f16 and bf16. Upstream's CUDA tri.cu instantiates its kernel for float,
//! half and nv_bfloat16, but `ggml_tri` asserts an f32 input when the graph is built (and the
//! CPU backend runs f32 only), so upstream runs f32 only; kedge's impls model the CUDA kernel
//! in all three. Kept elements are copied unchanged, so a right output equals the reference.

use crate::rows::{map_rows_at, row_tensors, RowLayout};
use kedge_core::contract::upstream::{cpp_ne, vars_ne};
use kedge_core::model::host::HostTensor;
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/tri/tri.cu", "tri.cu");

pub(crate) const MODES: [&str; 4] = ["lower", "lower_diag", "upper", "upper_diag"];

kedge_core::params! {
    /// tri's parameters.
    pub(crate) struct TriParams {
        mode: choice(MODES) = "lower", "which triangle is kept: lower (col < row), lower_diag (<=), upper (>), upper_diag (>=)";
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view";
    }
}

pub(crate) struct Tri;
pub(crate) static OP: Tri = Tri;

/// ggml's `CUDA_TRI_BLOCK_SIZE`.
pub(crate) const BLOCK: u64 = 256;

pub(crate) const REACH_GRID: &str = "synthetic: no known model reaches it (the incident could not identify TRI's consumers; a batch of more than 65535 masks is not a shape any known graph builds)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Lower,
    LowerDiag,
    Upper,
    UpperDiag,
}

impl Mode {
    pub(crate) fn of(case: &Case) -> Mode {
        match TriParams::of(case).mode {
            "lower_diag" => Mode::LowerDiag,
            "upper" => Mode::Upper,
            "upper_diag" => Mode::UpperDiag,
            _ => Mode::Lower,
        }
    }
    pub(crate) fn keeps(self, i0: usize, i1: usize) -> bool {
        match self {
            Mode::Lower => i0 < i1,
            Mode::LowerDiag => i0 <= i1,
            Mode::Upper => i0 > i1,
            Mode::UpperDiag => i0 >= i1,
        }
    }
    /// ggml's enum name and value (`GGML_TRI_TYPE_UPPER_DIAG = 0, UPPER = 1, LOWER_DIAG = 2, LOWER = 3`).
    pub(crate) fn ggml(self) -> (&'static str, i32) {
        match self {
            Mode::UpperDiag => ("GGML_TRI_TYPE_UPPER_DIAG", 0),
            Mode::Upper => ("GGML_TRI_TYPE_UPPER", 1),
            Mode::LowerDiag => ("GGML_TRI_TYPE_LOWER_DIAG", 2),
            Mode::Lower => ("GGML_TRI_TYPE_LOWER", 3),
        }
    }
    /// The kernel's split of row i1 at `i1 + add`: (prefix kept?, add), as tri.cu templates it.
    pub(crate) fn split(self) -> (i32, i32) {
        match self {
            Mode::Lower => (1, 0),
            Mode::LowerDiag => (1, 1),
            Mode::Upper => (0, 1),
            Mode::UpperDiag => (0, 0),
        }
    }
}

fn mode_params(mode: &'static str) -> Params {
    crate::params_with(|p: &mut TriParams| p.mode = mode)
}

impl Op for Tri {
    fn name(&self) -> &'static str {
        "tri"
    }
    fn about(&self) -> &'static str {
        "triangle mask of square matrices, the four ggml modes (ggml TRI)"
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some("TRI")
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::FLOATS
    }
    /// f32: test-backend-ops' 1e-7; f16 and bf16: the same plus their rounding
    /// (`Tolerance::rounded_to`), although a right output equals the reference exactly.
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to(case.dtype)
    }
    fn params(&self) -> &'static [ParamSpec] {
        TriParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        if case.ne[0] != case.ne[1] {
            return Err(CaseError::BadInput {
                op: "tri".into(),
                msg: format!(
                    "tri needs square matrices: ne[0] = {} but ne[1] = {}",
                    case.ne[0], case.ne[1]
                ),
            });
        }
        row_tensors(case)
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let mode = Mode::of(case);
        let n1 = case.ne[1] as usize;
        let x = inputs.first().ok_or_else(|| CaseError::BadInput {
            op: "tri".into(),
            msg: "no input x".into(),
        })?;
        Ok(vec![map_rows_at(x, |r, row, dst| {
            let i1 = r % n1;
            for (i0, (d, &v)) in dst.iter_mut().zip(row).enumerate() {
                *d = if mode.keeps(i0, i1) { v } else { 0.0 };
            }
        })])
    }
    /// Each matrix is masked on its own (a row's mask is its place in its matrix): a big case
    /// may be judged on sampled matrices. Whole, `[16, 16, 16777217]` paid a CPU reference of
    /// 2^32 elements.
    fn row_sampling(&self, case: &Case) -> Option<kedge_core::RowSampling> {
        Some(kedge_core::RowSampling::uniform(self.tensors(case).ok()?.len()).along(2))
    }
    /// Matrices are square, so `ne[0]` and `ne[1]` move together, never alone: the free
    /// dimensions are the matrix count `ne[2]` (which also carries the element count) and `ne[3]`.
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase {
            ne: [16, 16, 1, 1],
            params: Params::new(),
            grid_dims: &[2, 3],
            count_dim: Some(2),
            row_dim: false,
            vec_dim: false,
            launch_loop_dims: &[],
        })
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        // The generated grid probes run the default mode (lower: a kept prefix); the upper
        // modes zero the prefix instead, a different path through the same launch.
        vec![Boundary::ne(
            "ne[2] matrices on grid.y, upper_diag",
            2,
            gy,
            [8, 8, 0, 1],
            Reach(REACH_GRID),
        )
        .with_params(|p: &mut TriParams| p.mode = "upper_diag")]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let mut v = Vec::new();
        for m in MODES {
            v.push(([10, 10, 4, 3], mode_params(m)));
            v.push(([1, 1, 1, 1], mode_params(m)));
            v.push(([300, 300, 2, 1], mode_params(m)));
        }
        // Square shapes move ne[0] and ne[1] together, which a one-axis boundary cannot:
        // rows around the 256-thread block (one pass, one pass, a second in-row pass) live here.
        for n in [255, 256, 257] {
            v.push(([n, n, 2, 1], mode_params("lower_diag")));
        }
        let padded = crate::params_with(|p: &mut TriParams| {
            p.mode = "upper";
            p.row_pad = 3;
        });
        v.push(([33, 33, 2, 2], padded));
        v
    }
    /// test-backend-ops (tests/test-backend-ops.cpp, `struct test_tri`): `test_tri(ggml_tri_type
    /// tri_type, ggml_type type = GGML_TYPE_F32, std::array<int64_t, 4> ne = { 10, 10, 4, 3 })`
    /// (the mode first), `vars()` = `VARS_TO_STR3(type, ne, tri_type)` with the enum printed as
    /// its integer value. It has no view flag: a padded case is written dense.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let (name, value) = Mode::of(case).ggml();
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_tri({name}, {}, {}));",
                case.dtype.ggml_type(),
                cpp_ne(&case.ne)
            ),
            op_name: "TRI".into(),
            vars: format!(
                "type={},ne={},tri_type={value}",
                case.dtype,
                vars_ne(&case.ne)
            ),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if case.ne[2] > 65_535 || case.ne[3] > 65_535 {
            Some(REACH_GRID.into())
        } else {
            None
        }
    }
}

/// src, dst, ne00..ne03, the input's strides in elements, the mode's split.
fn args(case: &Case) -> Vec<KernelArg> {
    let l = RowLayout::of(case);
    let (prefix_keep, add) = Mode::of(case).split();
    let mut args = vec![KernelArg::Tensor(0), KernelArg::Tensor(1)];
    args.extend(l.extent_args());
    args.extend(l.stride_args());
    args.extend([KernelArg::I32(prefix_keep), KernelArg::I32(add)]);
    args
}

/// Upstream: one 256-thread block per row, grid (ne01, ne02, ne03).
fn ggml_plan(case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let [_, n1, n2, n3] = case.ne;
    Ok(Plan::single(
        LaunchPlan::new(
            crate::rows::typed!(SRC, "tri_ggml").kernel(case.dtype)?,
            [n1 as u64, n2 as u64, n3 as u64],
            [BLOCK, 1, 1],
            0,
        )
        .args(args(case)),
    ))
}

/// The fix: grid clamped, grid-stride loops over ne[2] and ne[3].
fn clamped_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let [_, n1, n2, n3] = case.ne;
    if n1 as u64 > limits.grid_limit(0) {
        return Err(format!(
            "ne[1] = {n1} rows exceeds grid.x {}; this impl keeps one row per block.x",
            limits.grid_limit(0)
        )
        .into());
    }
    Ok(Plan::single(
        LaunchPlan::new(
            crate::rows::typed!(SRC, "tri_clamped").kernel(case.dtype)?,
            [
                n1 as u64,
                (n2 as u64).min(limits.grid_limit(1)),
                (n3 as u64).min(limits.grid_limit(2)),
            ],
            [BLOCK, 1, 1],
            0,
        )
        .args(args(case)),
    ))
}

pub(crate) static GGML: KernelImpl = KernelImpl {
    name: "ggml",
    role: ImplRole::Upstream,
    about: "ggml tri.cu as shipped: 256 threads per row, grid (ne01, ne02, ne03)",
    plan: ggml_plan,
};

pub(crate) static CLAMPED: KernelImpl = KernelImpl {
    name: "clamped",
    role: ImplRole::Fixed,
    about: "grid clamped to the device limits, ne[2] and ne[3] walked with grid-stride loops",
    plan: clamped_plan,
};

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn case(ne: Ne, mode: &str) -> Case {
        Case::new("tri", "ggml", DType::F32, ne).with_param("mode", mode)
    }

    #[test]
    fn four_modes_on_a_3x3_by_hand() {
        // x[i1][i0] = 1..9, row-major with i0 the column.
        let vals: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let x = HostTensor::from_f32(DType::F32, [3, 3, 1, 1], &vals);
        let expect: [(&str, [f64; 9]); 4] = [
            ("lower", [0., 0., 0., 4., 0., 0., 7., 8., 0.]),
            ("lower_diag", [1., 0., 0., 4., 5., 0., 7., 8., 9.]),
            ("upper", [0., 2., 3., 0., 0., 6., 0., 0., 0.]),
            ("upper_diag", [1., 2., 3., 0., 5., 6., 0., 0., 9.]),
        ];
        for (mode, want) in expect {
            let out = OP
                .reference(&case([3, 3, 1, 1], mode), std::slice::from_ref(&x))
                .unwrap();
            assert_eq!(out[0], want.to_vec(), "mode {mode}");
        }
    }

    #[test]
    fn split_encoding_matches_the_modes() {
        // The kernel keeps i0 in the prefix [0, i1 + add) iff prefix_keep: check against keeps().
        for m in [Mode::Lower, Mode::LowerDiag, Mode::Upper, Mode::UpperDiag] {
            let (prefix_keep, add) = m.split();
            for i1 in 0..6usize {
                for i0 in 0..6usize {
                    let in_prefix = i0 < i1 + add as usize;
                    assert_eq!(in_prefix == (prefix_keep == 1), m.keeps(i0, i1), "{m:?}");
                }
            }
        }
    }

    #[test]
    fn batched_matrices_use_their_own_row_index() {
        let c = case([4, 4, 3, 2], "lower").with_param("row_pad", 2);
        let specs = OP.tensors(&c).unwrap();
        let inputs = OP.inputs(&c, &specs).unwrap();
        let out = OP.reference(&c, &inputs).unwrap().remove(0);
        for (r, row) in out.chunks(4).enumerate() {
            let (i1, i2, i3) = (r % 4, (r / 4) % 3, r / 12);
            for (i0, &v) in row.iter().enumerate() {
                let want = if i0 < i1 {
                    inputs[0].get(i0, i1, i2, i3)
                } else {
                    0.0
                };
                assert_eq!(v, want);
            }
        }
    }

    #[test]
    fn non_square_is_bad_input() {
        let e = OP.tensors(&case([4, 5, 1, 1], "lower")).unwrap_err();
        assert!(matches!(e, CaseError::BadInput { .. }));
        assert!(e.to_string().contains("square"), "{e}");
    }

    #[test]
    fn ggml_plan_breaks_grid_y_and_z_exactly_past_65535() {
        let h = LimitsProfile::builtin("h200").unwrap();
        assert!(GGML
            .plan(&case([16, 16, 65_535, 1], "lower"), &h)
            .unwrap()
            .violations(&h)
            .is_empty());
        let v = GGML
            .plan(&case([16, 16, 65_536, 1], "lower"), &h)
            .unwrap()
            .violations(&h);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].dim.as_str(), v[0].value), ("grid.y", 65_536));
        let v = GGML
            .plan(&case([16, 16, 1, 65_536], "lower"), &h)
            .unwrap()
            .violations(&h);
        assert_eq!(v[0].dim, "grid.z");
    }

    #[test]
    fn typed_params_default_once() {
        let p = TriParams::default();
        assert_eq!((p.mode, p.row_pad), ("lower", 0));
        let c = Case::new("tri", "ggml", DType::F32, [4, 4, 1, 1]);
        assert_eq!(Mode::of(&c), Mode::Lower);
    }

    #[rstest]
    #[case("upper_diag", "GGML_TRI_TYPE_UPPER_DIAG", 0)]
    #[case("upper", "GGML_TRI_TYPE_UPPER", 1)]
    #[case("lower_diag", "GGML_TRI_TYPE_LOWER_DIAG", 2)]
    #[case("lower", "GGML_TRI_TYPE_LOWER", 3)]
    fn upstream_enum_per_mode(#[case] mode: &str, #[case] name: &str, #[case] value: i32) {
        let r = OP.upstream(&case([10, 10, 4, 3], mode)).unwrap();
        assert_eq!(
            r.test_case_line,
            format!(
                "test_cases.emplace_back(new test_tri({name}, GGML_TYPE_F32, {{10, 10, 4, 3}}));"
            )
        );
        assert_eq!(r.vars, format!("type=f32,ne=[10,10,4,3],tri_type={value}"));
    }

    #[test]
    fn grid_limits_are_generated_not_declared() {
        let h = LimitsProfile::builtin("h200").unwrap();
        let base = OP.probe_base().unwrap();
        let generated = kedge_core::contract::boundary::generated(&base, &h, DType::F32);
        // Every generated probe keeps the matrices square, so every one validates.
        for b in &generated {
            assert!(!matches!(b.axis, Axis::Ne(0) | Axis::Ne(1)), "{}", b.label);
        }
        for d in [2, 3] {
            let b = generated
                .iter()
                .find(|b| b.axis == Axis::Ne(d) && b.probe_values() == vec![65_535, 65_536])
                .unwrap();
            let mut ne = b.base;
            ne[d] = 65_536;
            assert!(!GGML
                .plan(&case(ne, "lower"), &h)
                .unwrap()
                .violations(&h)
                .is_empty());
            assert_eq!(OP.reach(&case(ne, "lower")).as_deref(), Some(REACH_GRID));
        }
        for b in OP.boundaries(&h) {
            let plain_grid = b.params.is_empty() && matches!(b.axis, Axis::Ne(2) | Axis::Ne(3));
            assert!(!plain_grid, "{} is generated", b.label);
        }
    }

    #[rstest]
    fn plan_args_match_the_kernel_signatures(
        #[values(&GGML, &CLAMPED)] imp: &KernelImpl,
        #[values("lower", "lower_diag", "upper", "upper_diag")] mode: &str,
    ) {
        let h = LimitsProfile::builtin("h200").unwrap();
        let c = case([33, 33, 2, 2], mode).with_param("row_pad", 3);
        let plan = imp.plan(&c, &h).unwrap();
        crate::signature::check_plan(&plan).unwrap();
        assert!(plan.standalone().is_ok());
    }

    #[rstest]
    fn plan_size_does_not_grow_with_the_shape(#[values(&GGML, &CLAMPED)] imp: &KernelImpl) {
        let h = LimitsProfile::builtin("h200").unwrap();
        let shape = |p: &Plan| {
            (
                p.launches.len(),
                p.repetitions(),
                p.launches.iter().map(|l| l.args.len()).collect::<Vec<_>>(),
            )
        };
        let small = shape(&imp.plan(&case([3, 3, 1, 1], "lower"), &h).unwrap());
        for ne in [
            [65_535, 65_535, 1, 1],
            [16, 16, 65_535, 1],
            [16, 16, 3, 65_535],
        ] {
            assert_eq!(shape(&imp.plan(&case(ne, "lower"), &h).unwrap()), small);
        }
    }

    #[test]
    fn upstream_line() {
        let r = OP
            .upstream(&case([16, 16, 65536, 1], "lower_diag"))
            .unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_tri(GGML_TRI_TYPE_LOWER_DIAG, GGML_TYPE_F32, {16, 16, 65536, 1}));"
        );
        assert_eq!(r.vars, "type=f32,ne=[16,16,65536,1],tri_type=2");
        assert_eq!(r.op_name, "TRI");
        assert_eq!(OP.upstream_name(), Some("TRI"));
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n in 1i64..200_000, n2 in 1i64..300_000, n3 in 1i64..300_000,
            prof in 0usize..5, mode in 0usize..4,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let c = case([n, n, n2, n3], MODES[mode]);
            let plan = CLAMPED.plan(&c, &p).unwrap();
            proptest::prop_assert!(plan.violations(&p).is_empty(), "{:?}", plan.violations(&p));
        }
    }
}
