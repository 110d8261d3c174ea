//! The bodies of kedge's fuzz targets (`fuzz/fuzz_targets/*.rs` call these), here in the
//! library so that `cargo test` replays the committed seeds through the very same code
//! (harness/tests/fuzz_replay.rs) on machines without cargo-fuzz or a nightly toolchain.
//!
//! Each function takes the fuzzer's raw bytes and panics only on a real defect:
//! - `case_line`: the case-line parser and validation never panic, and a validated case
//!   survives its own JSON line unchanged;
//! - `launch_plan`: planning never panics on any shape or profile, and a fixed impl
//!   (`ImplRole::Fixed`) never plans a launch that breaks the profile;
//! - `reference_vs_naive`: each op's CPU reference agrees with an independent naive model on
//!   small shapes (ops listed in `naive_models`).

use arbitrary::{Result as AResult, Unstructured};
use kedge_core::host::HostTensor;
use kedge_core::params::ParamKind;
use kedge_core::{Case, ImplRole, LimitsProfile, Op, ParamSpec, Registry};

/// Target `case_line`.
pub fn case_line(reg: &Registry, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = kedge_core::case::parse_corpus(&text);
    let _ = serde_json::from_str::<crate::corpus::Expectation>(&text);
    let Ok(case) = Case::parse_line(1, &text) else {
        return;
    };
    let _ = case.id();
    let _ = case.label();
    let Ok(valid) = case.validate(reg) else {
        return;
    };
    let line = valid.to_line();
    let again = Case::parse_line(1, &line)
        .unwrap_or_else(|e| panic!("a validated case's own line does not parse: {line}: {e}"));
    assert_eq!(
        again, valid,
        "a validated case changed through its line: {line}"
    );
    let twice = valid
        .validate(reg)
        .unwrap_or_else(|e| panic!("a validated case fails validation again: {line}: {e}"));
    assert_eq!(twice, valid, "validation is not idempotent: {line}");
}

/// Shape values where kernels break: 1, warp and block multiples and their neighbours, the
/// grid.y/z limit and its neighbours, the int32 edges.
pub const EDGE_VALUES: [i64; 20] = [
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
        ParamKind::Float { default } => {
            if u.arbitrary()? {
                default.into()
            } else {
                let x: f64 = u.arbitrary()?;
                if x.is_finite() {
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
pub fn arbitrary_case(
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
    Ok(c.validate(reg).ok())
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
    let _ = crate::repro::limit_comments(reg, &case, &profile);
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
        if let Some(args) = imp.args_for_repro(&case, &plan) {
            assert_eq!(
                args.len(),
                plan.launches.len(),
                "{}/{}: one argument list per launch",
                op.name(),
                imp.name()
            );
        }
    }
    Ok(())
}

/// An independent model of an op's output, for `reference_vs_naive`: written from the op's
/// definition, reading inputs through their byte strides, with no code shared with the op.
pub struct NaiveModel {
    pub op: &'static str,
    pub eval: fn(&Case, &[HostTensor]) -> Vec<Vec<f64>>,
}

fn read_f32(t: &HostTensor, i: [usize; 4]) -> f64 {
    let off: u64 = (0..4).map(|k| i[k] as u64 * t.nb[k]).sum();
    let o = off as usize;
    f32::from_le_bytes([t.bytes[o], t.bytes[o + 1], t.bytes[o + 2], t.bytes[o + 3]]) as f64
}

fn naive_rms_norm(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let x = &inputs[0];
    let eps = case
        .params
        .get("eps")
        .and_then(|v| v.as_f64())
        .unwrap_or(1e-6);
    let [n0, n1, n2, n3] = case.ne.map(|v| v as usize);
    let mut out = Vec::new();
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                let mut sumsq = 0.0;
                for i0 in 0..n0 {
                    let v = read_f32(x, [i0, i1, i2, i3]);
                    sumsq += v * v;
                }
                let rms = (sumsq / n0 as f64 + eps).sqrt();
                for i0 in 0..n0 {
                    out.push(read_f32(x, [i0, i1, i2, i3]) / rms);
                }
            }
        }
    }
    vec![out]
}

fn naive_zoo_rows(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let x = &inputs[0];
    let [n0, n1, n2, n3] = case.ne.map(|v| v as usize);
    let mut out = Vec::new();
    let mut row = 0usize;
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                for i0 in 0..n0 {
                    out.push(read_f32(x, [i0, i1, i2, i3]) * 2.0 + row as f64);
                }
                row += 1;
            }
        }
    }
    vec![out]
}

/// Ops with a naive model. A new op adds one entry here (and its ops are then fuzzed).
pub fn naive_models() -> Vec<NaiveModel> {
    vec![
        NaiveModel {
            op: "rms_norm",
            eval: naive_rms_norm,
        },
        NaiveModel {
            op: "zoo_rows",
            eval: naive_zoo_rows,
        },
    ]
}

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
            let tol = 1e-12 * b.abs().max(1.0);
            assert!(
                (a - b).abs() <= tol || (a.is_nan() && b.is_nan()),
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
