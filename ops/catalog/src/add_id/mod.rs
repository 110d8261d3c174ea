//! add_id (ggml ADD_ID, the MoE expert bias): `dst[i, e, t] = a[i, e, t] + b[i, ids[e, t]]`.
//!
//! a, dst: \[n_embd, n_experts_used, n_tokens\] (the case's `ne`, `ne[3]` = 1); b: [n_embd,
//! n_experts]; ids: i32 [n_experts_used, n_tokens], each in [0, n_experts). As upstream builds
//! it, ids is a view: when n_experts_used < n_experts it is the first n_experts_used entries of
//! each row of an [n_experts, n_tokens] tensor (test-backend-ops' `test_add_id` views it so;
//! `ggml_argsort_top_k` selects experts as such a view of a per-token argsort), so its row
//! stride is n_experts, not n_experts_used. Otherwise ids is dense (rows of n_experts_used).
//!
//! Upstream (ggml add-id.cu) launches `dim3 blocks(ne01, ne02)`: the small n_experts_used on
//! grid.x (2^31-1) and the large n_tokens on grid.y (65535), so 65536 tokens in one
//! micro-batch cannot be launched (kedge generates that boundary from `probe_base`). The
//! incident names it as the one op with the dimensions inverted.
//!
//! Element types: a, b and dst in f32, f16 or bf16 (ids are i32). Upstream's CUDA add_id takes
//! f32 only (add-id.cu asserts f32 a, b and dst; test-backend-ops builds f32 only) and so does
//! its CPU backend. kedge's impls take f16 and bf16 too, as models of the same launch: byte
//! strides in bytes of the type, loading the type, adding in f32 and storing the type.

use crate::rows::FLOATS;
use kedge_core::contract::op::random_tensor;
use kedge_core::model::host::HostTensor;
use kedge_core::model::rng::Rng;
use kedge_core::*;

crate::rows::row_kernel_source!(SRC = "ops/catalog/src/add_id/add_id.cu", "add_id.cu");

kedge_core::params! {
    /// add_id's parameters.
    pub(crate) struct AddIdParams {
        n_experts: int(1..=1 << 20) = 8, "rows of b (experts); ids are drawn from [0, n_experts), and ids is a view of [n_experts, n_tokens] when n_experts_used < n_experts";
    }
}

pub(crate) struct AddId;
pub(crate) static OP: AddId = AddId;

/// Upstream's thread count: `std::min((int)ne00, 768)`.
pub(crate) const MAX_THREADS: i64 = 768;

pub(crate) const REACH_TOKENS: &str = "a micro-batch (-ub) of 65536+ tokens on the MoE expert-bias path: gpt-oss's build_moe_ffn adds its expert biases with ggml_add_id on [n_ff, n_expert_used, n_tokens], so n_tokens lands on grid.y. A user setting reaches it; no realistic deployment runs a physical micro-batch that large";

pub(crate) const REACH_USED: &str = "synthetic: no known model reaches it (MoE models route each token to at most a few dozen experts)";

pub(crate) const REACH_VIEW: &str = "every MoE model routes a token to fewer experts than it has (gpt-oss: 4 of 32 or 128), so ids rows are views of per-token rows of n_experts; n_experts_used = n_experts only in tests";

fn bad(msg: String) -> CaseError {
    CaseError::BadInput {
        op: "add_id".into(),
        msg,
    }
}

/// Elements per row of the tensor ids is (a view of): n_experts when n_experts_used is less
/// (upstream's view), else n_experts_used (dense).
pub(crate) fn ids_row(n_used: i64, n_experts: i64) -> i64 {
    n_used.max(n_experts)
}

/// ids' byte strides for a case: 4-byte ids, rows of `ids_row` ids.
fn ids_nb(case: &Case) -> Result<[u64; 4], CaseError> {
    let [_, n_used, n_tokens, _] = case.ne;
    let row = ids_row(n_used, AddIdParams::of(case).n_experts);
    let overflow = || CaseError::ByteCountOverflow {
        ne: [n_used, n_tokens, 1, 1],
        dtype: DType::I32,
    };
    let nb1 = (row.max(0) as u64).checked_mul(4).ok_or_else(overflow)?;
    let nb2 = nb1
        .checked_mul(n_tokens.max(0) as u64)
        .ok_or_else(overflow)?;
    Ok([4, nb1, nb2, nb2])
}

/// ids as upstream lays it out: per token a row of `row` ids, `i % n_experts` for i in
/// 0..row, shuffled (test-backend-ops' `initialize_tensors` for test_add_id): distinct experts
/// per token whenever n_experts_used <= n_experts. The ids past each row's n_experts_used are
/// written too (they are the view's padding), up to the view's span.
fn ids_input(case: &Case, spec: &TensorSpec) -> Result<HostTensor, CaseError> {
    let n_exp = AddIdParams::of(case).n_experts;
    let row = (spec.nb[1] / 4) as usize;
    let span = (spec.bytes / 4) as usize;
    if spec.nb[0] != 4 || row == 0 || n_exp < 1 {
        return Err(bad(format!(
            "ids strides {:?} with n_experts {n_exp} are not rows of i32 ids",
            spec.nb
        )));
    }
    let mut rng = Rng::stream(case.seed, 2);
    let mut vals: Vec<i32> = Vec::with_capacity(span);
    let mut perm: Vec<i32> = Vec::with_capacity(row);
    while vals.len() < span {
        perm.clear();
        perm.extend((0..row as i64).map(|i| (i % n_exp) as i32));
        for i in (1..row).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        let take = row.min(span - vals.len());
        vals.extend_from_slice(&perm[..take]);
    }
    Ok(HostTensor::from_bytes(
        DType::I32,
        spec.ne,
        spec.nb,
        bytemuck::cast_slice(&vals).to_vec(),
    ))
}

impl Op for AddId {
    fn name(&self) -> &'static str {
        "add_id"
    }
    fn about(&self) -> &'static str {
        "MoE expert bias: a + b[ids] per (expert slot, token) (ggml ADD_ID)"
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some("ADD_ID")
    }
    fn dtypes(&self) -> &'static [DType] {
        FLOATS
    }
    /// f32: test-backend-ops' 1e-7; f16 and bf16: the same plus their rounding
    /// (`Tolerance::rounded_to`).
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::rounded_to(case.dtype)
    }
    fn params(&self) -> &'static [ParamSpec] {
        AddIdParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&GGML, &CLAMPED]
    }
    /// a, b, ids (a view of [n_experts, n_tokens] when n_experts_used < n_experts), then dst.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        let [n_embd, n_used, n_tokens, n3] = case.ne;
        if n3 != 1 {
            return Err(bad(format!(
                "ne = [n_embd, n_experts_used, n_tokens, 1]: ne[3] is {n3}, must be 1"
            )));
        }
        let n_exp = AddIdParams::of(case).n_experts;
        Ok(vec![
            TensorSpec::dense("a", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("b", Role::Input, case.dtype, [n_embd, n_exp, 1, 1])?,
            TensorSpec::strided(
                "ids",
                Role::Input,
                DType::I32,
                [n_used, n_tokens, 1, 1],
                ids_nb(case)?,
            )?,
            TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
        ])
    }
    /// a and b uniform in [-1, 1); ids as upstream's test fills them (`ids_input`).
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        let [a, b, ids, ..] = specs else {
            return Err(bad(format!("expected 4 tensors, got {}", specs.len())));
        };
        Ok(vec![
            random_tensor(case.seed, 0, a, -1.0, 1.0),
            random_tensor(case.seed, 1, b, -1.0, 1.0),
            ids_input(case, ids)?,
        ])
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
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
        // Every id is checked before any row of b is read; ids are read through their own
        // strides (a view's rows are n_experts apart).
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
        let mut out = kedge_core::model::host::zeroed_f64(n0 * n1 * n2);
        crate::rows::par_rows(&mut out, n0, |brow, r, dst| {
            let (e, tok, id) = (r % n1, r / n1, id_of[r]);
            a.row_f64(e, tok, 0, dst);
            b.row_f64(id, 0, 0, brow);
            for (d, bv) in dst.iter_mut().zip(brow.iter()) {
                *d += bv;
            }
        });
        Ok(vec![out])
    }
    /// n_tokens (`ne[2]`) is the free dimension that hits grid.y upstream and carries the
    /// element count; n_embd (`ne[0]`) is a row of a and b. n_experts_used (`ne[1]`) stays small
    /// (its grid edge is the clamped impl's own boundary) and `ne[3]` must be 1.
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase {
            ne: [64, 4, 1, 1],
            params: Params::new(),
            grid_dims: &[2],
            count_dim: Some(2),
            row_dim: true,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        let gy = limits.grid_limit(1) as i64;
        vec![
            // The clamped impl puts n_experts_used on grid.y: past 65535 its clamp and loop
            // are what keep it right. Enough experts that every probe has an upstream line.
            Boundary::ne(
                "ne[1] n_experts_used on grid.x (ggml) / grid.y (clamped)",
                1,
                gy,
                [16, 0, 2, 1],
                Reach(REACH_USED),
            )
            .with_params(|p: &mut AddIdParams| p.n_experts = gy + 2),
            Boundary::ne(
                "ne[0] at the 768-thread cap",
                0,
                MAX_THREADS,
                [0, 4, 8, 1],
                Reach("gpt-oss's expert biases have n_embd = n_ff_exp = 2880 > 768: every real call takes the strided loop"),
            ),
            // Below n_experts ids rows are n_experts apart (a view); at it they are dense. A
            // kernel that steps ids rows by n_experts_used is right only at the dense side.
            Boundary::ne(
                "ne[1] n_experts_used reaching n_experts: ids a view below, dense at it",
                1,
                8,
                [64, 0, 16, 1],
                Reach(REACH_VIEW),
            )
            .with_values(vec![7, 8])
            .with_params(|p: &mut AddIdParams| p.n_experts = 8),
        ]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        let experts = |n: i64| crate::params_with(|p: &mut AddIdParams| p.n_experts = n);
        vec![
            ([128, 8, 10, 1], experts(16)),
            ([1, 1, 1, 1], experts(1)),
            ([767, 4, 3, 1], Params::new()),
            ([769, 2, 5, 1], Params::new()),
            ([2880, 4, 7, 1], experts(32)),
            ([5, 3, 1000, 1], Params::new()),
            ([16, 8, 9, 1], experts(8)),
        ]
    }
    /// test-backend-ops (tests/test-backend-ops.cpp, `struct test_add_id`):
    /// `test_add_id(ggml_type type_a = GGML_TYPE_F32, ggml_type type_b = GGML_TYPE_F32,
    /// int64_t n_embd = 128, int64_t n_experts = 16, int64_t n_experts_used = 8,
    /// int64_t n_token = 10)`, `vars()` = `VARS_TO_STR6(type_a, type_b, n_embd, n_experts,
    /// n_experts_used, n_token)`. Its ids is [n_experts, n_token], viewed down to
    /// n_experts_used when they differ, so it cannot express n_experts_used > n_experts: no
    /// line then.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        let [n_embd, n_used, n_tokens, _] = case.ne;
        let n_exp = AddIdParams::of(case).n_experts;
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

/// The byte strides upstream's kernel takes: a's rows and tokens (dense), b's rows (dense),
/// in bytes of the case's element type, and ids' rows (n_experts apart when ids is a view).
fn strides(case: &Case) -> Result<[KernelArg; 4], Refusal> {
    let [n0, n1, _, _] = case.ne.map(|d| d.max(0) as u64);
    let es = case.dtype.size();
    let nb = ids_nb(case).map_err(|e| Refusal(e.to_string()))?;
    Ok([
        KernelArg::U64(n0.saturating_mul(es)),
        KernelArg::U64(n0.saturating_mul(n1).saturating_mul(es)),
        KernelArg::U64(n0.saturating_mul(es)),
        KernelArg::U64(nb[1]),
    ])
}

fn pointers() -> [KernelArg; 4] {
    [
        KernelArg::Tensor(0),
        KernelArg::Tensor(1),
        KernelArg::Tensor(2),
        KernelArg::Tensor(3),
    ]
}

/// Upstream add-id.cu: `dim3 blocks(ne01, ne02)`, n_experts_used on grid.x, n_tokens on grid.y.
fn ggml_plan(case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let [n0, n1, n2, _] = case.ne;
    let mut args = pointers().to_vec();
    args.extend([KernelArg::I64(n0), KernelArg::I64(n1)]);
    args.extend(strides(case)?);
    Ok(Plan::single(
        LaunchPlan::new(
            crate::rows::typed!(SRC, "add_id_ggml").kernel(case.dtype)?,
            [n1 as u64, n2 as u64, 1],
            [threads(n0), 1, 1],
            0,
        )
        .args(args),
    ))
}

/// The fix: n_tokens on grid.x, n_experts_used on grid.y, both clamped to the profile and
/// walked by grid-stride loops; ids out of range are skipped, never dereferenced.
fn clamped_plan(case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
    let [n0, n1, n2, _] = case.ne;
    let mut args = pointers().to_vec();
    args.extend([
        KernelArg::I64(n0),
        KernelArg::I64(n1),
        KernelArg::I64(n2),
        KernelArg::I64(AddIdParams::of(case).n_experts),
    ]);
    args.extend(strides(case)?);
    Ok(Plan::single(
        LaunchPlan::new(
            crate::rows::typed!(SRC, "add_id_clamped").kernel(case.dtype)?,
            [
                (n2 as u64).min(limits.grid_limit(0)),
                (n1 as u64).min(limits.grid_limit(1)),
                1,
            ],
            [threads(n0), 1, 1],
            0,
        )
        .args(args),
    ))
}

pub(crate) static GGML: KernelImpl = KernelImpl {
    name: "ggml",
    role: ImplRole::Upstream,
    about: "ggml add-id.cu as shipped: grid (n_experts_used, n_tokens), min(n_embd, 768) threads, ids unchecked",
    plan: ggml_plan,
};

pub(crate) static CLAMPED: KernelImpl = KernelImpl {
    name: "clamped",
    role: ImplRole::Fixed,
    about: "n_tokens on grid.x, n_experts_used on grid.y, both clamped, grid-stride loops, ids bounds-checked",
    plan: clamped_plan,
};

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

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

    /// ids is a view of [n_experts, n_tokens] below n_experts, dense at and above it.
    #[rstest]
    #[case([4, 2, 3, 1], 5, [4, 20, 60, 60], (2 * 5 + 2) * 4)]
    #[case([4, 5, 3, 1], 5, [4, 20, 60, 60], 15 * 4)]
    #[case([4, 7, 3, 1], 5, [4, 28, 84, 84], 21 * 4)]
    fn ids_follow_upstreams_layout(
        #[case] ne: Ne,
        #[case] n_exp: i64,
        #[case] nb: [u64; 4],
        #[case] bytes: u64,
    ) {
        let s = OP.tensors(&case(ne, n_exp)).unwrap();
        assert_eq!(
            (s[2].ne, s[2].nb, s[2].bytes),
            ([ne[1], ne[2], 1, 1], nb, bytes)
        );
        // The kernels step ids rows by the same stride (nb21, the last argument of both).
        for imp in [&GGML, &CLAMPED] {
            let plan = imp.plan(&case(ne, n_exp), &LimitsProfile::builtin("h200").unwrap());
            let args = &plan.unwrap().launches[0].args;
            assert_eq!(args.last(), Some(&KernelArg::U64(nb[1])), "{}", imp.name);
        }
    }

    #[test]
    fn reference_reads_ids_through_the_view() {
        // 2 slots of 4 experts, 2 tokens: ids rows are 4 apart. Token 0 picks [3, 1] (then 0,
        // 2 unselected), token 1 picks [2, 0]. Read densely, token 1 would pick [0, 2].
        let c = case([1, 2, 2, 1], 4);
        let specs = OP.tensors(&c).unwrap();
        assert_eq!(specs[2].nb[1], 16);
        let ids = HostTensor::from_bytes(
            DType::I32,
            specs[2].ne,
            specs[2].nb,
            bytemuck::cast_slice(&[3i32, 1, 0, 2, 2, 0]).to_vec(),
        );
        let a = HostTensor::from_f32(DType::F32, [1, 2, 2, 1], &[0.0; 4]);
        let b = HostTensor::from_f32(DType::F32, [1, 4, 1, 1], &[10.0, 11.0, 12.0, 13.0]);
        let out = OP.reference(&c, &[a, b, ids]).unwrap();
        assert_eq!(out[0], vec![13.0, 11.0, 12.0, 10.0]);
    }

    /// As test-backend-ops fills them: each token's row of the [n_experts, n_tokens] tensor is
    /// a permutation of the experts, so a token's selected experts are distinct; the view's
    /// padding holds the rest of the permutation.
    #[test]
    fn inputs_fill_each_row_with_a_permutation_of_the_experts() {
        let c = case([4, 3, 50, 1], 6);
        let specs = OP.tensors(&c).unwrap();
        let ids = &OP.inputs(&c, &specs).unwrap()[2];
        assert_eq!(ids.bytes.len() as u64, specs[2].bytes);
        let raw: &[i32] = bytemuck::cast_slice(&ids.bytes);
        for (t, row) in raw.chunks(6).enumerate() {
            let mut sorted = row.to_vec();
            sorted.sort_unstable();
            if t < 49 {
                assert_eq!(sorted, vec![0, 1, 2, 3, 4, 5], "token {t}");
            } else {
                // The last row ends with the view: its n_experts_used ids, distinct.
                assert_eq!(row.len(), 3);
                sorted.dedup();
                assert_eq!(sorted.len(), 3);
            }
        }
        // More slots than experts (dense rows): each row is i % n_experts, shuffled.
        let c = case([4, 5, 2, 1], 2);
        let specs = OP.tensors(&c).unwrap();
        let ids = &OP.inputs(&c, &specs).unwrap()[2];
        for row in bytemuck::cast_slice::<u8, i32>(&ids.bytes).chunks(5) {
            let mut sorted = row.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 0, 0, 1, 1]);
        }
    }

    #[test]
    fn grid_limit_on_tokens_is_generated_not_declared() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let base = OP.probe_base().unwrap();
        let generated = kedge_core::contract::boundary::generated(&base, &h200, DType::F32);
        let on_grid: Vec<_> = generated
            .iter()
            .filter(|b| b.probe_values() == vec![65_535, 65_536])
            .collect();
        assert_eq!(on_grid.len(), 1);
        assert_eq!(on_grid[0].axis, Axis::Ne(2));
        // Every generated probe validates as add_id (ne[3] stays 1), and the count probes move
        // n_tokens.
        for b in &generated {
            assert_ne!(b.axis, Axis::Ne(3));
            assert_ne!(b.axis, Axis::Ne(1), "{}", b.label);
            for v in b.probe_values() {
                let mut ne = b.base;
                if let Axis::Ne(d) = b.axis {
                    ne[d] = v;
                }
                OP.tensors(&case(ne, 8)).unwrap();
            }
        }
        let c = case([64, 4, 65_536, 1], 8);
        assert!(!GGML.plan(&c, &h200).unwrap().violations(&h200).is_empty());
        assert_eq!(OP.reach(&c).as_deref(), Some(REACH_TOKENS));
        for b in OP.boundaries(&h200) {
            assert_ne!(b.axis, Axis::Ne(2), "{} is generated", b.label);
        }
    }

    #[rstest]
    fn plan_args_match_the_kernel_signatures(
        #[values(&GGML, &CLAMPED)] imp: &KernelImpl,
        #[values(2, 8, 12)] n_used: i64,
    ) {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let plan = imp.plan(&case([2880, n_used, 7, 1], 8), &h200).unwrap();
        crate::signature::check_plan(&plan).unwrap();
        assert!(plan.standalone().is_ok());
    }

    #[rstest]
    fn plan_size_does_not_grow_with_the_shape(#[values(&GGML, &CLAMPED)] imp: &KernelImpl) {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let shape = |p: &Plan| {
            (
                p.launches.len(),
                p.repetitions(),
                p.launches.iter().map(|l| l.args.len()).collect::<Vec<_>>(),
            )
        };
        let small = shape(&imp.plan(&case([64, 4, 3, 1], 8), &h200).unwrap());
        for (ne, n_exp) in [([64, 4, 65_535, 1], 8), ([64, 65_535, 3, 1], 65_537)] {
            assert_eq!(shape(&imp.plan(&case(ne, n_exp), &h200).unwrap()), small);
        }
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
        assert_eq!(OP.upstream_name(), Some("ADD_ID"));
        assert!(OP.upstream(&case([64, 9, 2, 1], 8)).is_none());
        // test_add_id's defaults: n_embd 128, 16 experts, 8 used, 10 tokens.
        let r = OP.upstream(&case([128, 8, 10, 1], 16)).unwrap();
        assert_eq!(
            r.test_case_line,
            "test_cases.emplace_back(new test_add_id(GGML_TYPE_F32, GGML_TYPE_F32, 128, 16, 8, 10));"
        );
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
