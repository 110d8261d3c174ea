//! The bodies of kedge's fuzz targets (`fuzz/fuzz_targets/*.rs` call these), here in the
//! library so that `cargo test` replays the committed seeds through the very same code
//! (the runner's `fuzz_replay` tests) on machines without cargo-fuzz or a nightly toolchain.
//!
//! Each function takes the fuzzer's raw bytes and panics only on a real defect:
//! - `case_line`: the case-line parser and validation never panic, and a validated case
//!   survives its own JSON line unchanged;
//! - `launch_plan`: planning never panics on any shape or profile, a fixed impl
//!   (`ImplRole::Fixed`) never plans a launch that breaks the profile, and every planned
//!   argument names a tensor the case has;
//! - `reference_vs_naive`: each op's CPU reference agrees with an independent naive model on
//!   small shapes (the ops of `kedge_ops::fuzz_models::naive_models`).

use arbitrary::{Result as AResult, Unstructured};
use kedge_core::model::params::ParamKind;
use kedge_core::{Case, ImplRole, KernelArg, LimitsProfile, Op, ParamSpec, Registry};

/// Target `case_line`.
pub fn case_line(reg: &Registry, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = kedge_core::model::case::parse_corpus(&text);
    let _ = serde_json::from_str::<crate::select::Expectation>(&text);
    let Ok(case) = Case::parse_line(1, &text) else {
        return;
    };
    let _ = case.id();
    let _ = case.label();
    let Ok(valid) = reg.validate(&case) else {
        return;
    };
    let line = valid.to_line();
    let again = Case::parse_line(1, &line)
        .unwrap_or_else(|e| panic!("a validated case's own line does not parse: {line}: {e}"));
    assert_eq!(
        again, valid,
        "a validated case changed through its line: {line}"
    );
    let twice = reg
        .validate(&valid)
        .unwrap_or_else(|e| panic!("a validated case fails validation again: {line}: {e}"));
    assert_eq!(twice, valid, "validation is not idempotent: {line}");
}

/// Shape values where kernels break: 1, warp and block multiples and their neighbours, the
/// grid.y/z limit and its neighbours, the int32 edges.
pub(crate) const EDGE_VALUES: [i64; 20] = [
    1,
    2,
    3,
    31,
    32,
    33,
    255,
    256,
    257,
    1000,
    1023,
    1024,
    1025,
    65_535,
    65_536,
    65_537,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) + 1,
    1 << 40,
];

fn dim(u: &mut Unstructured<'_>) -> AResult<i64> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => *u.choose(&EDGE_VALUES)?,
        1 => u.int_in_range(1i64..=4096)?,
        2 => u.int_in_range(1i64..=(1 << 20))?,
        _ => u.int_in_range(1i64..=i64::MAX)?,
    })
}

fn param_value(u: &mut Unstructured<'_>, p: &ParamSpec) -> AResult<serde_json::Value> {
    Ok(match p.kind {
        ParamKind::Float { default, min, max } => {
            if u.arbitrary()? {
                default.into()
            } else {
                let x: f64 = u.arbitrary()?;
                if x.is_finite() && (min..=max).contains(&x) {
                    x.into()
                } else {
                    default.into()
                }
            }
        }
        ParamKind::Int { min, max, .. } => u.int_in_range(min..=max)?.into(),
        ParamKind::Bool { .. } => u.arbitrary::<bool>()?.into(),
        ParamKind::Choice { options, default } => {
            if options.is_empty() {
                default.into()
            } else {
                (*u.choose(options)?).into()
            }
        }
    })
}

/// An arbitrary validated case of `op` (any impl), or `None` if the bytes ran out or the op
/// rejects the shape.
fn arbitrary_case(
    reg: &Registry,
    op: &dyn Op,
    u: &mut Unstructured<'_>,
    small: bool,
) -> AResult<Option<Case>> {
    let impls = reg.impls_of(op);
    let imp = u.choose(&impls)?;
    let dtype = *u.choose(op.dtypes())?;
    let mut ne = [1i64; 4];
    for d in ne.iter_mut() {
        *d = if small {
            u.int_in_range(1i64..=8)?
        } else {
            dim(u)?
        };
    }
    if small {
        ne[0] = u.int_in_range(1i64..=80)?;
    }
    let mut c = Case::new(op.name(), imp.name(), dtype, ne);
    for p in op.params() {
        if u.arbitrary()? {
            let v = match (small, p.kind) {
                // Keep small cases small: a bounded int range.
                (true, ParamKind::Int { min, max, .. }) => {
                    u.int_in_range(min..=max.min(min.saturating_add(8)))?.into()
                }
                _ => param_value(u, p)?,
            };
            c.params.insert(p.name.to_string(), v);
        }
    }
    c.seed = u.arbitrary()?;
    Ok(reg.validate(&c).ok())
}

/// Target `launch_plan`.
pub fn launch_plan(reg: &Registry, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = launch_plan_inner(reg, &mut u);
}

fn launch_plan_inner(reg: &Registry, u: &mut Unstructured<'_>) -> AResult<()> {
    let op = *u.choose(reg.ops())?;
    let profile_name = *u.choose(&LimitsProfile::BUILTIN)?;
    let Some(profile) = LimitsProfile::builtin(profile_name) else {
        return Ok(());
    };
    let _ = op.boundaries(&profile);
    let Some(case) = arbitrary_case(reg, op, u, false)? else {
        return Ok(());
    };
    let Ok((op, imp)) = reg.resolve(&case) else {
        return Ok(());
    };
    let _ = op.upstream(&case);
    let _ = op.reach(&case);
    let _ = op.alloc_note(&case);
    let _ = crate::workflow::repro::limit_comments(reg, &case, &profile);
    let n_tensors = op.tensors(&case).map(|t| t.len()).unwrap_or(0);
    if let Ok(plan) = imp.plan(&case, &profile) {
        let v = plan.violations(&profile);
        if imp.role() == ImplRole::Fixed {
            assert!(
                v.is_empty(),
                "fixed impl {}/{} plans a launch that breaks {}: {}: {}",
                op.name(),
                imp.name(),
                profile.name,
                case.to_line(),
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        for l in &plan.launches {
            for a in &l.args {
                if let KernelArg::Tensor(t) | KernelArg::TensorAt { index: t, .. } = a {
                    assert!(
                        *t < n_tensors,
                        "{}/{}: launch {l} names tensor {t} of {n_tensors}: {}",
                        op.name(),
                        imp.name(),
                        case.to_line()
                    );
                }
            }
        }
    }
    Ok(())
}

pub use kedge_ops::fuzz_models::{naive_models, NaiveModel};

/// Target `reference_vs_naive`.
pub fn reference_vs_naive(reg: &Registry, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = reference_vs_naive_inner(reg, &mut u);
}

fn reference_vs_naive_inner(reg: &Registry, u: &mut Unstructured<'_>) -> AResult<()> {
    let models = naive_models();
    let model = u.choose(&models)?;
    let Ok(op) = reg.op(model.op) else {
        return Ok(());
    };
    let Some(case) = arbitrary_case(reg, op, u, true)? else {
        return Ok(());
    };
    let specs = op.tensors(&case).expect("validated case has tensors");
    let inputs = op.inputs(&case, &specs).expect("validated case has inputs");
    let reference = op
        .reference(&case, &inputs)
        .expect("validated case has a reference");
    let naive = (model.eval)(&case, &inputs);
    assert_eq!(
        reference.len(),
        naive.len(),
        "{}: output count",
        case.to_line()
    );
    for (o, (r, n)) in reference.iter().zip(&naive).enumerate() {
        assert_eq!(r.len(), n.len(), "{}: output {o} length", case.to_line());
        for (i, (a, b)) in r.iter().zip(n).enumerate() {
            assert!(
                approx::relative_eq!(*a, *b, epsilon = 1e-12, max_relative = 1e-12)
                    || (a.is_nan() && b.is_nan()),
                "{}: output {o}[{i}]: reference {a}, naive model {b}",
                case.to_line()
            );
        }
    }
    Ok(())
}

/// compute-sanitizer XML: the parser returns records or a typed error, never panics, and a
/// file cut anywhere still parses (a worker killed mid-run leaves one).
pub fn sanitizer_xml(_reg: &Registry, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(parsed) = crate::sanitizer::parse_xml(&text) {
        let n = parsed.records.len();
        let att = crate::sanitizer::attribute(&parsed.records, n.max(1));
        assert_eq!(att.per_case.len(), n.max(1));
    }
}

/// A fuzz target's body.
pub type Target = fn(&Registry, &[u8]);

/// The targets `cargo test` replays, by name (`fuzz/seeds/<name>/`).
pub fn targets() -> Vec<(&'static str, Target)> {
    vec![
        ("case_line", case_line),
        ("launch_plan", launch_plan),
        ("reference_vs_naive", reference_vs_naive),
        ("sanitizer_xml", sanitizer_xml),
    ]
}
