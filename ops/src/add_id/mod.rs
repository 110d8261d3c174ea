//! add_id (ggml ADD_ID, the MoE expert bias): `dst[i, e, t] = a[i, e, t] + b[i, ids[e, t]]`.
//!
//! a, dst: [n_embd, n_experts_used, n_tokens] (the case's `ne`, ne[3] = 1); b: [n_embd,
//! n_experts]; ids: i32 [n_experts_used, n_tokens], each in [0, n_experts).
//!
//! Upstream (ggml add-id.cu) launches `dim3 blocks(ne01, ne02)`: the small n_experts_used on
//! grid.x (2^31-1) and the large n_tokens on grid.y (65535), so 65536 tokens in one
//! micro-batch cannot be launched. The incident names it as the one op with the dimensions
//! inverted.

use crate::rows::F32_ONLY;
use kedge_core::device::{KArg, RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::op::random_tensor;
use kedge_core::params::{Params, ParamsExt};
use kedge_core::rng::Rng;
use kedge_core::*;

const SRC: &str = include_str!("add_id.cu");
const FILE: &str = "ops/src/add_id/add_id.cu";
const fn k(entry: &'static str) -> Kernel {
    Kernel {
        file: FILE,
        source: SRC,
        entry,
    }
}

pub struct AddId;
pub static OP: AddId = AddId;

const N_EXPERTS: i64 = 8;

static PARAMS: &[ParamSpec] = &[ParamSpec::int(
    "n_experts",
    N_EXPERTS,
    1,
    1 << 20,
    "rows of b (experts); ids are drawn from [0, n_experts)",
)];

/// Upstream's thread count: `std::min((int)ne00, 768)`.
pub const MAX_THREADS: i64 = 768;

pub const REACH_TOKENS: &str = "a micro-batch (-ub) of 65536+ tokens on the MoE expert-bias path: gpt-oss's build_moe_ffn adds its expert biases with ggml_add_id on [n_ff, n_expert_used, n_tokens], so n_tokens lands on grid.y. A user setting reaches it; no realistic deployment runs a physical micro-batch that large";

pub const REACH_USED: &str = "synthetic: no known model reaches it (MoE models route each token to at most a few dozen experts)";

fn n_experts(case: &Case) -> i64 {
    case.params.i64_or("n_experts", N_EXPERTS)
}

fn bad(msg: String) -> CaseError {
    CaseError::BadInput {
        op: "add_id".into(),
        msg,
    }
}

impl Op for AddId {
    fn name(&self) -> &'static str {
        "add_id"
    }
    fn about(&self) -> &'static str {
        "MoE expert bias: a + b[ids] per (expert slot, token) (ggml ADD_ID)"
    }
    fn dtypes(&self) -> &'static [DType] {
        F32_ONLY
    }
    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    /// a, b, ids, then dst.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let [n_embd, n_used, n_tokens, n3] = case.ne;
        if n3 != 1 {
            return Err(bad(format!(
                "ne = [n_embd, n_experts_used, n_tokens, 1]: ne[3] is {n3}, must be 1"
            )));
        }
        let n_exp = n_experts(case);
        Ok(vec![
            TensorSpec::dense("a", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("b", Role::Input, case.dtype, [n_embd, n_exp, 1, 1])?,
            TensorSpec::dense("ids", Role::Input, DType::I32, [n_used, n_tokens, 1, 1])?,
            TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
        ])
    }
    /// a and b uniform in [-1, 1); ids uniform in [0, n_experts).
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        let [a, b, ids, ..] = specs else {
            return Err(bad(format!("expected 4 tensors, got {}", specs.len())));
        };
        let n_exp = n_experts(case) as u64;
        let mut rng = Rng::stream(case.seed, 2);
        let vals: Vec<i32> = (0..ids.nelements())
            .map(|_| rng.below(n_exp) as i32)
            .collect();
        Ok(vec![
            random_tensor(case.seed, 0, a, -1.0, 1.0),
            random_tensor(case.seed, 1, b, -1.0, 1.0),
            HostTensor::from_i32(ids.ne, &vals),
        ])
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        use rayon::prelude::*;
        let [a, b, ids] = inputs else {
            return Err(bad(format!(
                "expected 3 inputs (a, b, ids), got {}",
                inputs.len()
            )));
        };
        let [n0, n1, n2, _] = a.ne.map(|d| d as usize);
        if ids.dtype != DType::I32 || ids.ne != [a.ne[1], a.ne[2], 1, 1] {
            return Err(bad(format!(
                "ids must be i32 [{}, {}, 1, 1] (n_experts_used, n_tokens); got {} {:?}",
                a.ne[1], a.ne[2], ids.dtype, ids.ne
            )));
        }
        if b.ne[0] != a.ne[0] {
            return Err(bad(format!(
                "b's rows have {} elements, a's have {}",
                b.ne[0], a.ne[0]
            )));
        }
        let n_exp = b.ne[1];
        // Every id is checked before any row of b is read.
        let id_of: Vec<usize> = (0..n1 * n2)
            .map(|r| {
                let (e, t) = (r % n1, r / n1);
                let id = ids.get(e, t, 0, 0) as i64;
                if (0..n_exp).contains(&id) {
                    Ok(id as usize)
                } else {
                    Err(bad(format!(
                        "ids[{e}, {t}] = {id} is outside [0, n_experts = {n_exp}): b has no such row"
                    )))
                }
            })
            .collect::<Result<_, _>>()?;
        let mut out = vec![0.0f64; n0 * n1 * n2];
        out.par_chunks_mut(n0).enumerate().for_each(|(r, dst)| {
            let (e, t, id) = (r % n1, r / n1, id_of[r]);
            for (i0, d) in dst.iter_mut().enumerate() {
                *d = a.get(i0, e, t, 0) + b.get(i0, id, 0, 0);
            }
        });
        Ok(vec![out])
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        vec![
            Boundary::ne(
                "ne[2] n_tokens on grid.y (ggml) / grid.x (clamped)",
                2,
                gy,
                [64, 4, 0, 1],
                Reach(REACH_TOKENS),
            ),
            // The clamped impl puts n_experts_used on grid.y: past 65535 its clamp and loop
            // are what keep it right. Enough experts that every probe has an upstream line.
            Boundary::ne(
                "ne[1] n_experts_used on grid.x (ggml) / grid.y (clamped)",
                1,
                gy,
                [16, 0, 2, 1],
                Reach(REACH_USED),
            )
            .with_param("n_experts", gy + 2),
            Boundary::ne(
                "ne[0] at the 768-thread cap",
                0,
                MAX_THREADS,
                [0, 4, 8, 1],
                Reach("gpt-oss's expert biases have n_embd = n_ff_exp = 2880 > 768: every real call takes the strided loop"),
            ),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let experts = |n: i64| {
            let mut m = Params::new();
            m.insert("n_experts".into(), n.into());
            m
        };
        vec![
            ([128, 8, 10, 1], experts(16)),
            ([1, 1, 1, 1], experts(1)),
            ([767, 4, 3, 1], Params::new()),
            ([769, 2, 5, 1], Params::new()),
            ([2880, 4, 7, 1], experts(32)),
            ([5, 3, 1000, 1], Params::new()),
        ]
    }
    /// test_add_id(type_a, type_b, n_embd, n_experts, n_experts_used, n_token). Upstream's test
    /// views ids [n_experts, n_token] down to n_experts_used, so it cannot express
    /// n_experts_used > n_experts: no line then.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let [n_embd, n_used, n_tokens, _] = case.ne;
        let n_exp = n_experts(case);
        if n_used > n_exp {
            return None;
        }
        let t = case.dtype.ggml_type();
        Some(UpstreamRepro {
            test_case_line: format!(
                "test_cases.emplace_back(new test_add_id({t}, {t}, {n_embd}, {n_exp}, {n_used}, {n_tokens}));"
            ),
            op_name: "ADD_ID".into(),
            vars: format!(
                "type_a={d},type_b={d},n_embd={n_embd},n_experts={n_exp},n_experts_used={n_used},n_token={n_tokens}",
                d = case.dtype
            ),
        })
    }
    fn reach(&self, case: &Case) -> Option<String> {
        if case.ne[2] > 65_535 {
            Some(REACH_TOKENS.into())
        } else if case.ne[1] > 65_535 {
            Some(REACH_USED.into())
        } else {
            None
        }
    }
}

/// Upstream: `int threads = std::min((int)ne00, 768)`.
fn threads(ne0: i64) -> u64 {
    ne0.min(MAX_THREADS) as u64
}

/// Byte strides of the dense a, b and ids as upstream's kernel takes them.
struct Strides {
    nb01: u64,
    nb02: u64,
    nb11: u64,
    nb21: u64,
}

fn strides(case: &Case) -> Strides {
    let [n0, n1, _, _] = case.ne.map(|d| d as u64);
    Strides {
        nb01: n0 * 4,
        nb02: n0 * n1 * 4,
        nb11: n0 * 4,
        nb21: n1 * 4,
    }
}

/// Upstream add-id.cu: `dim3 blocks(ne01, ne02)`, n_experts_used on grid.x, n_tokens on grid.y.
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
        "ggml add-id.cu as shipped: grid (n_experts_used, n_tokens), min(n_embd, 768) threads, ids unchecked"
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, String> {
        let [n0, n1, n2, _] = case.ne;
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k("add_id_ggml"),
            [n1 as u64, n2 as u64, 1],
            [threads(n0), 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let s = strides(case);
        let args = [
            KArg::Ptr(ctx.ptr(0)),
            KArg::Ptr(ctx.ptr(1)),
            KArg::Ptr(ctx.ptr(2)),
            KArg::Ptr(ctx.ptr(3)),
            KArg::I64(case.ne[0]),
            KArg::I64(case.ne[1]),
            KArg::U64(s.nb01),
            KArg::U64(s.nb02),
            KArg::U64(s.nb11),
            KArg::U64(s.nb21),
        ];
        ctx.launch(&plan.launches[0], &args)
    }
}

/// The fix: n_tokens on grid.x, n_experts_used on grid.y, both clamped to the profile and
/// walked by grid-stride loops; ids out of range are skipped, never dereferenced.
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
        "n_tokens on grid.x, n_experts_used on grid.y, both clamped, grid-stride loops, ids bounds-checked"
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let [n0, n1, n2, _] = case.ne;
        Ok(Plan::kernels(vec![LaunchPlan::new(
            k("add_id_clamped"),
            [
                (n2 as u64).min(limits.grid_limit(0)),
                (n1 as u64).min(limits.grid_limit(1)),
                1,
            ],
            [threads(n0), 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let s = strides(case);
        let args = [
            KArg::Ptr(ctx.ptr(0)),
            KArg::Ptr(ctx.ptr(1)),
            KArg::Ptr(ctx.ptr(2)),
            KArg::Ptr(ctx.ptr(3)),
            KArg::I64(case.ne[0]),
            KArg::I64(case.ne[1]),
            KArg::I64(case.ne[2]),
            KArg::I64(n_experts(case)),
            KArg::U64(s.nb01),
            KArg::U64(s.nb02),
            KArg::U64(s.nb11),
            KArg::U64(s.nb21),
        ];
        ctx.launch(&plan.launches[0], &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ne: Ne, n_exp: i64) -> Case {
        Case::new("add_id", "ggml", DType::F32, ne).with_param("n_experts", n_exp)
    }

    #[test]
    fn reference_by_hand() {
        // n_embd 2, 2 expert slots, 2 tokens, 3 experts.
        let a = HostTensor::from_f32(
            DType::F32,
            [2, 2, 2, 1],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        );
        let b = HostTensor::from_f32(
            DType::F32,
            [2, 3, 1, 1],
            &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
        );
        let ids = HostTensor::from_i32([2, 2, 1, 1], &[2, 0, 1, 1]);
        let out = OP.reference(&case([2, 2, 2, 1], 3), &[a, b, ids]).unwrap();
        assert_eq!(out[0], vec![51.0, 62.0, 13.0, 24.0, 35.0, 46.0, 37.0, 48.0]);
    }

    #[test]
    fn out_of_range_ids_are_bad_input_with_a_clear_message() {
        let a = HostTensor::from_f32(DType::F32, [2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
        let b = HostTensor::from_f32(DType::F32, [2, 8, 1, 1], &[1.0; 16]);
        for (bad_id, want) in [
            (8, "ids[1, 0] = 8 is outside [0, n_experts = 8)"),
            (-1, "ids[1, 0] = -1 is outside [0, n_experts = 8)"),
        ] {
            let ids = HostTensor::from_i32([2, 1, 1, 1], &[3, bad_id]);
            let err = OP
                .reference(&case([2, 2, 1, 1], 8), &[a.clone(), b.clone(), ids])
                .unwrap_err();
            match err {
                CaseError::BadInput { op, msg } => {
                    assert_eq!(op, "add_id");
                    assert!(msg.contains(want), "{msg}");
                }
                other => panic!("expected BadInput, got {other:?}"),
            }
        }
    }

    #[test]
    fn tensors_need_three_dims_and_follow_n_experts() {
        let err = OP.tensors(&case([4, 2, 3, 2], 8)).unwrap_err();
        assert!(matches!(err, CaseError::BadInput { .. }), "{err:?}");
        assert!(err.to_string().contains("ne[3] is 2"), "{err}");
        let s = OP.tensors(&case([4, 2, 3, 1], 5)).unwrap();
        let shapes: Vec<_> = s.iter().map(|t| (t.name.as_str(), t.dtype, t.ne)).collect();
        assert_eq!(
            shapes,
            vec![
                ("a", DType::F32, [4, 2, 3, 1]),
                ("b", DType::F32, [4, 5, 1, 1]),
                ("ids", DType::I32, [2, 3, 1, 1]),
                ("dst", DType::F32, [4, 2, 3, 1]),
            ]
        );
    }

    #[test]
    fn inputs_draw_ids_in_range_and_the_reference_accepts_them() {
        let c = case([8, 4, 500, 1], 5);
        let specs = OP.tensors(&c).unwrap();
        let inputs = OP.inputs(&c, &specs).unwrap();
        let ids: Vec<i64> = inputs[2].to_f64().iter().map(|&v| v as i64).collect();
        assert_eq!(ids.len(), 2000);
        assert!(ids.iter().all(|&i| (0..5).contains(&i)));
        for e in 0..5 {
            assert!(ids.contains(&e), "expert {e} never drawn in 2000 ids");
        }
        assert!(inputs[0].any_nonzero() && inputs[1].any_nonzero());
        assert_eq!(OP.reference(&c, &inputs).unwrap()[0].len(), 8 * 4 * 500);
    }

    #[test]
    fn ggml_plan_breaks_grid_y_exactly_past_65535_tokens() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let v = GGML
            .plan(&case([64, 4, 65536, 1], 8), &h200)
            .unwrap()
            .violations(&h200);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].dim.as_str(), v[0].value, v[0].limit),
            ("grid.y", 65536, 65535)
        );
        assert!(GGML
            .plan(&case([64, 4, 65535, 1], 8), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
        // n_experts_used sits on grid.x upstream: no limit near.
        assert!(GGML
            .plan(&case([16, 65536, 2, 1], 65537), &h200)
            .unwrap()
            .violations(&h200)
            .is_empty());
        // Threads: min(n_embd, 768).
        let p = GGML.plan(&case([2880, 4, 1, 1], 8), &h200).unwrap();
        assert_eq!(p.launches[0].block, [768, 1, 1]);
        let p = GGML.plan(&case([100, 4, 1, 1], 8), &h200).unwrap();
        assert_eq!(p.launches[0].block, [100, 1, 1]);
    }

    #[test]
    fn clamped_puts_tokens_on_grid_x() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let p = CLAMPED.plan(&case([64, 4, 65536, 1], 8), &h200).unwrap();
        assert_eq!(p.launches[0].grid, [65536, 4, 1]);
        let p = CLAMPED
            .plan(&case([16, 65536, 2, 1], 65537), &h200)
            .unwrap();
        assert_eq!(p.launches[0].grid, [2, 65535, 1]);
    }

    #[test]
    fn upstream_line_and_vars() {
        let r = OP.upstream(&case([64, 4, 65536, 1], 8)).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_add_id(GGML_TYPE_F32, GGML_TYPE_F32, 64, 8, 4, 65536));"
        );
        assert_eq!(
            r.vars,
            "type_a=f32,type_b=f32,n_embd=64,n_experts=8,n_experts_used=4,n_token=65536"
        );
        assert_eq!(r.op_name, "ADD_ID");
        assert!(OP.upstream(&case([64, 9, 2, 1], 8)).is_none());
    }

    proptest::proptest! {
        #[test]
        fn clamped_never_plans_a_violation(
            n0 in 1i64..5000, n1 in 1i64..300_000, n2 in 1i64..3_000_000_000,
            prof in 0usize..5,
        ) {
            let p = LimitsProfile::builtin(LimitsProfile::BUILTIN[prof]).unwrap();
            let plan = CLAMPED.plan(&case([n0, n1, n2, 1], 8), &p).unwrap();
            proptest::prop_assert!(plan.violations(&p).is_empty(), "{:?}", plan.violations(&p));
        }
    }
}
