//! tri (ggml TRI, f32): keep one triangle of each square ne0 x ne1 matrix, zero the rest.
//! Modes as ggml's `ggml_tri_type` (column i0, row i1): lower `i0 < i1`, lower_diag
//! `i0 <= i1`, upper `i0 > i1`, upper_diag `i0 >= i1`.
//!
//! Upstream (ggml-cuda/tri.cu): one 256-thread block per row, `grid_dims(ne01, ne02, ne03)`,
//! so ne[2] (the matrix index) sits on grid.y and ne[3] on grid.z: one of the six unclamped
//! sites the incident's sweep found.

use crate::rows::{cpp_ne, map_rows, row_tensors, vars_ne, RowLayout, ROW_PAD};
use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::*;

const SRC: &str = include_str!("tri.cu");
const FILE: &str = "ops/src/tri/tri.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct Tri;
pub static OP: Tri = Tri;

pub const MODES: &[&str] = &["lower", "lower_diag", "upper", "upper_diag"];

static PARAMS: &[ParamSpec] = &[
    ParamSpec::choice(
        "mode",
        "lower",
        MODES,
        "which triangle is kept: lower (col < row), lower_diag (<=), upper (>), upper_diag (>=)",
    ),
    ROW_PAD,
];

/// ggml's `CUDA_TRI_BLOCK_SIZE`.
pub const BLOCK: u64 = 256;

pub const REACH_GRID: &str = "synthetic: no known model reaches it (the incident could not identify TRI's consumers; a batch of more than 65535 masks is not a shape any known graph builds)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Lower,
    LowerDiag,
    Upper,
    UpperDiag,
}

impl Mode {
    pub fn of(case: &Case) -> Mode {
        match case.params.str_or("mode", "lower") {
            "lower_diag" => Mode::LowerDiag,
            "upper" => Mode::Upper,
            "upper_diag" => Mode::UpperDiag,
            _ => Mode::Lower,
        }
    }
    pub fn keeps(self, i0: usize, i1: usize) -> bool {
        match self {
            Mode::Lower => i0 < i1,
            Mode::LowerDiag => i0 <= i1,
            Mode::Upper => i0 > i1,
            Mode::UpperDiag => i0 >= i1,
        }
    }
    /// ggml's enum name and value (`GGML_TRI_TYPE_UPPER_DIAG = 0, UPPER = 1, LOWER_DIAG = 2, LOWER = 3`).
    pub fn ggml(self) -> (&'static str, i32) {
        match self {
            Mode::UpperDiag => ("GGML_TRI_TYPE_UPPER_DIAG", 0),
            Mode::Upper => ("GGML_TRI_TYPE_UPPER", 1),
            Mode::LowerDiag => ("GGML_TRI_TYPE_LOWER_DIAG", 2),
            Mode::Lower => ("GGML_TRI_TYPE_LOWER", 3),
        }
    }
    /// The kernel's split of row i1 at `i1 + add`: (prefix kept?, add), as tri.cu templates it.
    pub fn split(self) -> (i32, i32) {
        match self {
            Mode::Lower => (1, 0),
            Mode::LowerDiag => (1, 1),
            Mode::Upper => (0, 1),
            Mode::UpperDiag => (0, 0),
        }
    }
}

fn mode_params(mode: &str) -> Params {
    let mut m = Params::new();
    m.insert("mode".into(), mode.into());
    m
}

impl Op for Tri {
    fn name(&self) -> &'static str {
        "tri"
    }
    fn about(&self) -> &'static str {
        "triangle mask of square matrices, the four ggml modes (ggml TRI)"
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
        let n0 = case.ne[0] as usize;
        let n1 = case.ne[1] as usize;
        // map_rows hands rows in logical order; recover the row index i1 from the row's
        // position, which map_rows does not pass, by numbering rows here.
        let x = &inputs[0];
        let rows = map_rows(x, |r, d| d.copy_from_slice(r));
        Ok(vec![rows
            .chunks(n0)
            .enumerate()
            .flat_map(|(r, row)| {
                let i1 = r % n1;
                row.iter()
                    .enumerate()
                    .map(move |(i0, &v)| if mode.keeps(i0, i1) { v } else { 0.0 })
            })
            .collect()])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        let gz = limits.grid_limit(2) as i64;
        vec![
            Boundary::ne(
                "ne[2] matrices on grid.y",
                2,
                gy,
                [16, 16, 0, 1],
                Reach(REACH_GRID),
            ),
            Boundary::ne(
                "ne[2] matrices on grid.y, upper_diag",
                2,
                gy,
                [8, 8, 0, 1],
                Reach(REACH_GRID),
            )
            .with_param("mode", "upper_diag"),
            Boundary::ne("ne[3] on grid.z", 3, gz, [16, 16, 1, 0], Reach(REACH_GRID)),
        ]
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
        let mut padded = mode_params("upper");
        padded.insert("row_pad".into(), 3.into());
        v.push(([33, 33, 2, 2], padded));
        v
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        // test-backend-ops' constructor, best knowledge: test_tri(ggml_tri_type, type = F32,
        // ne = {10, 10, 4, 3}), vars "type,ne,tri_type" with the enum printed as its value.
        // Uncertain: argument order and the vars key name were not checked against a tree.
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

fn args(ctx: &RunCtx<'_>, case: &Case) -> Vec<KArg> {
    let l = RowLayout::of(case);
    let (prefix_keep, add) = Mode::of(case).split();
    vec![
        KArg::Ptr(ctx.ptr(0)),
        KArg::Ptr(ctx.ptr(1)),
        KArg::I64(l.ncols),
        KArg::I64(l.nrows),
        KArg::I64(l.nchannels),
        KArg::I64(l.nsamples),
        KArg::I64(l.stride_row),
        KArg::I64(l.stride_channel),
        KArg::I64(l.stride_sample),
        KArg::I32(prefix_keep),
        KArg::I32(add),
    ]
}

/// Upstream: one 256-thread block per row, grid (ne01, ne02, ne03).
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
        "ggml tri.cu as shipped: 256 threads per row, grid (ne01, ne02, ne03)"
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, String> {
        let [_, n1, n2, n3] = case.ne;
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k("tri_ggml"),
            [n1 as u64, n2 as u64, n3 as u64],
            [BLOCK, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let a = args(ctx, case);
        ctx.launch(&plan.launches[0], &a)
    }
}

/// The fix: grid clamped, grid-stride loops over ne[2] and ne[3].
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
        "grid clamped to the device limits, ne[2] and ne[3] walked with grid-stride loops"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let [_, n1, n2, n3] = case.ne;
        if n1 as u64 > limits.grid_limit(0) {
            return Err(format!(
                "ne[1] = {n1} rows exceeds grid.x {}; this impl keeps one row per block.x",
                limits.grid_limit(0)
            ));
        }
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k("tri_clamped"),
            [
                n1 as u64,
                (n2 as u64).min(limits.grid_limit(1)),
                (n3 as u64).min(limits.grid_limit(2)),
            ],
            [BLOCK, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let a = args(ctx, case);
        ctx.launch(&plan.launches[0], &a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn upstream_line() {
        let r = OP
            .upstream(&case([16, 16, 65536, 1], "lower_diag"))
            .unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_tri(GGML_TRI_TYPE_LOWER_DIAG, GGML_TYPE_F32, {16, 16, 65536, 1}));"
        );
        assert_eq!(r.vars, "type=f32,ne=[16,16,65536,1],tri_type=2");
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
