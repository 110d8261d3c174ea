//! The contract's generic parts, with a small fake op: validation (either spelling of the op,
//! typed params), boundary expansion, the generated boundaries, plans that repeat, the
//! reference cache, and the run-kind words.

use kedge_core::contract::boundary::generated;
use kedge_core::engine::ReferenceCache;
use kedge_core::*;

kedge_core::params! {
    /// The fake op's parameters.
    pub struct FakeParams {
        eps: float = 1e-6, "an epsilon";
        row_pad: int(0..=8) = 0, "padding";
        mode: choice(["a", "b"]) = "a", "a mode";
    }
}

struct Fake;
static FAKE: Fake = Fake;

fn plan(case: &Case, _l: &LimitsProfile) -> Result<Plan, Refusal> {
    if case.ne[0] > 1 << 20 {
        return Err("rows longer than 2^20 are not supported".into());
    }
    Ok(Plan::default())
}

static ONLY: KernelImpl = KernelImpl {
    name: "only",
    role: ImplRole::Fixed,
    about: "a plan that launches nothing",
    plan,
};

impl Op for Fake {
    fn name(&self) -> &'static str {
        "fake_norm"
    }
    fn about(&self) -> &'static str {
        "a fake row op"
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some("FAKE_NORM")
    }
    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32]
    }
    fn params(&self) -> &'static [ParamSpec] {
        FakeParams::SPECS
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&ONLY]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        Ok(vec![
            TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
        ])
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        Ok(vec![inputs[0].to_f64()])
    }
    fn boundaries(&self, _limits: &LimitsProfile) -> Vec<Boundary> {
        vec![Boundary::ne(
            "ne[0] at 1024",
            0,
            1024,
            [0, 2, 1, 1],
            Reach::SYNTHETIC,
        )]
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        Some(ProbeBase::rows([64, 1, 1, 1]))
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        vec![([8, 2, 1, 1], Params::new())]
    }
    fn upstream(&self, _case: &Case) -> Option<UpstreamRepro> {
        None
    }
}

fn reg() -> Registry {
    Registry::new(vec![&FAKE])
}

#[test]
fn validation_fills_defaults_and_accepts_ggml_spelling() {
    let reg = reg();
    let c = reg
        .validate(&Case::new("FAKE_NORM", "only", DType::F32, [4, 1, 1, 1]))
        .expect("valid");
    assert_eq!(c.op, "fake_norm");
    assert_eq!(c.params.len(), 3);
    let p = FakeParams::of(&c);
    assert_eq!((p.eps, p.row_pad, p.mode), (1e-6, 0, "a"));
    let bad = Case::new("fake_norm", "only", DType::F32, [4, 1, 1, 1]).with_param("mode", "z");
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::BadParam { .. })
    ));
    let bad = Case::new("fake_norm", "only", DType::F32, [4, 1, 1, 1]).with_param("row_pad", 9);
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::BadParam { .. })
    ));
    let bad = Case::new("fake_norm", "only", DType::F32, [4, 1, 1, 1]).with_param("nope", 1);
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::UnknownParam { .. })
    ));
    let bad = Case::new("nosuch", "only", DType::F32, [4, 1, 1, 1]);
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::UnknownOp { .. })
    ));
    let bad = Case::new("fake_norm", "nosuch", DType::F32, [4, 1, 1, 1]);
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::UnknownImpl { .. })
    ));
    let bad = Case::new("fake_norm", "only", DType::F16, [4, 1, 1, 1]);
    assert!(matches!(
        reg.validate(&bad),
        Err(CaseError::UnsupportedDtype { .. })
    ));
    let typed = FakeParams::of(&c.clone().with_param("mode", "b").with_param("eps", 0.5));
    assert_eq!((typed.mode, typed.eps), ("b", 0.5));
}

#[test]
fn boundaries_expand_to_both_sides_and_generated_ones_follow_the_profile() {
    let b = &FAKE.boundaries(&LimitsProfile::builtin("h200").expect("h200"))[0];
    let ne0: Vec<i64> = b
        .cases("fake_norm", "only", DType::F32)
        .iter()
        .map(|c| c.ne[0])
        .collect();
    assert_eq!(ne0, vec![1023, 1024, 1025]);
    assert!(b
        .clone()
        .only(&["other"])
        .cases("fake_norm", "only", DType::F32)
        .is_empty());

    let h200 = LimitsProfile::builtin("h200").expect("h200");
    let base = FAKE.probe_base().expect("a base");
    let gen = generated(&base, &h200, DType::F32);
    let values = |label: &str| -> Vec<i64> {
        gen.iter()
            .find(|b| b.label.contains(label))
            .unwrap_or_else(|| {
                panic!(
                    "no boundary {label}: {:?}",
                    gen.iter().map(|b| &b.label).collect::<Vec<_>>()
                )
            })
            .probe_values()
    };
    assert_eq!(values("ne[2] at the grid.y/z limit"), vec![65535, 65536]);
    assert_eq!(values("ne[3] at the grid.y/z limit"), vec![65535, 65536]);
    // ne = [64, n, 1, 1]: 64 * n crosses 2^31 between n = 2^25 - 1 and 2^25, and with one
    // more row the last row starts at 2^31.
    assert_eq!(
        values("ne[1]: elements across 2^31"),
        vec![(1 << 25) - 1, 1 << 25, (1 << 25) + 1]
    );
    assert_eq!(values("2^32"), vec![(1 << 26) - 1, 1 << 26, (1 << 26) + 1]);
    assert_eq!(values("bytes across 2^31"), vec![(1 << 23) - 1, 1 << 23]);
    // 232,448 bytes of shared memory per block on the h200: 58,112 f32, and its halves,
    // quarters and eighths, each both sides.
    assert_eq!(
        values("ne[0]: the 232448-byte shared-memory opt-in"),
        vec![7264, 7265, 14_528, 14_529, 29_056, 29_057, 58_112, 58_113]
    );
    for b in &gen {
        for c in b.cases("fake_norm", "only", DType::F32) {
            reg().validate(&c).expect("generated cases are valid");
        }
    }
    // A profile whose grid.y and grid.z differ gets one boundary per limit.
    let mut odd = h200.clone();
    odd.max_grid[2].value = 1024;
    let g2 = generated(&base, &odd, DType::F32);
    assert!(g2.iter().any(|b| b.label.contains("grid.z limit 1024")));
}

#[test]
fn plans_repeat_without_growing() {
    let p = Plan::default().repeated([65_535, 3, 2]);
    assert_eq!(p.repetitions(), 65_535 * 6);
    assert_eq!(p.launch_count(), 0);
    assert!(
        p.standalone().is_ok(),
        "a plan that launches nothing is written as such (a silent fallback's repro)"
    );
    let mut u = Plan::default();
    u.unchecked.push("a library call".into());
    assert!(u.standalone().unwrap_err().contains("library call"));
}

/// One small case in `exact` mode and the same case in `guard` mode: the same key.
fn exact_and_guard() -> (Case, Case) {
    let a = reg()
        .validate(&Case::new("fake_norm", "only", DType::F32, [8, 2, 1, 1]))
        .expect("valid");
    let mut guard = a.clone();
    guard.alloc = AllocMode::Guard;
    (a, guard)
}

#[test]
fn references_are_computed_once_per_key() {
    let (a, b) = exact_and_guard();
    let mut refs = ReferenceCache::default();
    for c in [&a, &b, &a] {
        let (_, inputs) = refs.inputs(&FAKE, c).expect("inputs");
        assert!(inputs[0].any_nonzero());
        refs.reference(&FAKE, c, &inputs).expect("reference");
    }
    assert_eq!((refs.computed, refs.reused), (1, 2));
    let other = a.clone().with_param("eps", 0.5);
    let (_, inputs) = refs.inputs(&FAKE, &other).expect("inputs");
    refs.reference(&FAKE, &other, &inputs).expect("reference");
    assert_eq!(refs.computed, 2);
}

/// A comparison kept with an output's buffer is given for the next case only when the download
/// named the buffer's tag (the same bytes), the key is the same (another impl or allocation
/// mode), and the output and tolerance are the same; anything else is compared afresh.
#[test]
fn a_comparison_holds_for_the_same_bytes_of_the_same_key_only() {
    let (a, guard) = exact_and_guard();
    let other = a.clone().with_param("eps", 0.5);
    let tol = FAKE.tolerance(&a);
    let mut refs = ReferenceCache::default();
    let (_, inputs) = refs.inputs(&FAKE, &a).expect("inputs");
    let reference = refs.reference(&FAKE, &a, &inputs).expect("reference");
    let specs = FAKE.tensors(&a).expect("tensors");
    let out = HostTensor::from_bytes(
        DType::F32,
        specs[1].ne,
        specs[1].nb,
        reference[0]
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect(),
    );
    let c = kedge_core::judge::compare::compare("dst", &out, &reference[0], tol);
    let tag = refs.remember_comparison(&a, "dst", tol, "d1", &c);
    assert!(
        refs.judged_before(&guard, "dst", tol, None).is_none(),
        "no tag named"
    );
    assert!(
        refs.judged_before(&guard, "dst", tol, Some(tag + 1))
            .is_none(),
        "another tag"
    );
    assert!(
        refs.judged_before(&guard, "x", tol, Some(tag)).is_none(),
        "another output"
    );
    assert!(
        refs.judged_before(&other, "dst", tol, Some(tag)).is_none(),
        "another key"
    );
    let looser = Tolerance {
        nmse: tol.nmse * 2.0,
        ..tol
    };
    assert!(
        refs.judged_before(&guard, "dst", looser, Some(tag))
            .is_none(),
        "another tolerance"
    );
    assert_eq!(refs.comparisons_reused, 0);
    let j = refs
        .judged_before(&guard, "dst", tol, Some(tag))
        .expect("the same bytes of the same key");
    assert_eq!(j.digest, "d1");
    assert_eq!(j.comparison.numbers, c.numbers);
    assert_eq!(j.comparison.verdict, c.verdict);
    assert!(j.by.contains("only") && j.by.contains("exact"), "{}", j.by);
    assert_eq!(refs.comparisons_reused, 1);
    // Only the last comparison is kept: the device keeps only the last buffer.
    let tag2 = refs.remember_comparison(&guard, "dst", tol, "d2", &c);
    assert!(refs.judged_before(&a, "dst", tol, Some(tag)).is_none());
    assert!(refs.judged_before(&a, "dst", tol, Some(tag2)).is_some());
}

#[test]
fn a_reference_computed_ahead_is_kept_for_its_key_and_counted_once() {
    let (a, guard) = exact_and_guard();
    let mut refs = ReferenceCache::default();
    let (_, inputs) = refs.inputs(&FAKE, &a).expect("inputs");
    assert!(!refs.has_reference(&a, &inputs));
    // Computed elsewhere (while the device had the case), then put.
    let ahead = FAKE.reference(&a, &inputs).expect("reference");
    refs.put_reference(&a, &inputs, ahead.clone());
    assert!(refs.has_reference(&a, &inputs) && refs.has_reference(&guard, &inputs));
    // The judge of that case takes it (not a reuse); the next impl or mode reuses it.
    let got = refs.reference(&FAKE, &a, &inputs).expect("reference");
    assert_eq!(*got, ahead);
    assert_eq!((refs.computed, refs.reused), (1, 0));
    let (_, again) = refs.inputs(&FAKE, &guard).expect("inputs");
    assert!(std::sync::Arc::ptr_eq(&inputs, &again));
    refs.reference(&FAKE, &guard, &again).expect("reference");
    assert_eq!((refs.computed, refs.reused), (1, 1));
    // A reference put for a key the cache no longer holds is dropped.
    let other = a.clone().with_param("eps", 0.5);
    let (_, other_inputs) = refs.inputs(&FAKE, &other).expect("inputs");
    refs.put_reference(&a, &inputs, ahead);
    assert!(!refs.has_reference(&a, &inputs));
    assert!(!refs.has_reference(&other, &other_inputs));
    assert_eq!(refs.computed, 1);
}

#[test]
fn the_next_keys_inputs_are_drawn_into_the_last_keys_buffers_and_are_the_same_values() {
    // 2^24 f32 inputs: 64 MiB, where buffers are recycled. Two keys of one size (two seeds),
    // then a key of another size.
    let reg = reg();
    let big = |seed: u64, n0: i64| {
        let mut c = reg
            .validate(&Case::new(
                "fake_norm",
                "only",
                DType::F32,
                [n0, 1 << 4, 1, 1],
            ))
            .expect("valid");
        c.seed = seed;
        c
    };
    let (a, b, c) = (big(1, 1 << 20), big(2, 1 << 20), big(3, 1 << 19));
    let fresh = |case: &Case| {
        let specs = FAKE.tensors(case).expect("specs");
        FAKE.inputs(case, &specs).expect("inputs")
    };
    let mut refs = ReferenceCache::default();
    let (_, first) = refs.inputs(&FAKE, &a).expect("inputs");
    let at = first[0].bytes.as_ptr();
    drop(first);
    assert_eq!(refs.recycled_bytes, 0);
    let (_, second) = refs.inputs(&FAKE, &b).expect("inputs");
    assert_eq!(
        second[0].bytes.as_ptr(),
        at,
        "drawn into the last key's buffer"
    );
    assert_eq!(refs.recycled_bytes, 1 << 26);
    assert!(
        second[0].bytes == fresh(&b)[0].bytes,
        "the values of a fresh draw"
    );
    drop(second);
    let (_, third) = refs.inputs(&FAKE, &c).expect("inputs");
    assert!(third[0].bytes == fresh(&c)[0].bytes);
    assert_eq!(
        refs.recycled_bytes,
        1 << 26,
        "another size: nothing offered"
    );
    // Nothing is left offered after a draw: a buffer of the last size is made afresh.
    assert_eq!(
        kedge_core::model::host::bytes_to_overwrite(1 << 26),
        vec![0u8; 1 << 26]
    );
}

#[test]
fn run_kinds_and_tools_round_trip() {
    for s in [
        "cpu",
        "native",
        "memcheck",
        "initcheck",
        "racecheck",
        "synccheck",
    ] {
        let u: Under = s.parse().expect("known");
        assert_eq!(u.to_string(), s);
        let j = serde_json::to_string(&u).expect("serializes");
        assert_eq!(j, format!("\"{s}\""));
    }
    assert!("valgrind".parse::<Under>().is_err());
    assert_eq!(
        Tool::parse_list("memcheck,racecheck,memcheck").expect("list"),
        vec![Tool::Memcheck, Tool::Racecheck]
    );
    assert!(Tool::parse_list("").is_err());
    assert_eq!(
        Tool::of_detector(Detector::Initcheck),
        Some(Tool::Initcheck)
    );
}
