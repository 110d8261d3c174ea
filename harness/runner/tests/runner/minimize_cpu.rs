//! `kedge minimize` on the CPU: the rms_norm incident, shrunk with the launch contract as the
//! predicate (no GPU), finds the minimal case and the transition 65535 / 65536 from both sides.

use kedge_core::{engine, Case, DType, Detector, LimitsProfile, Params, Verdict};
use kedge_runner::select::suite::boundaries;
use kedge_runner::workflow::minimize::{
    minimize, minimize_and_transition, Probes, ShrinkConfig, TransitionFinding,
};
use kedge_runner::workflow::repro;
use std::convert::Infallible;

#[test]
fn rms_norm_incident_minimizes_on_the_cpu_and_finds_the_transition() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let case = reg
        .validate(
            &Case::new("rms_norm", "ggml", DType::F32, [64, 1, 65536, 1]).with_param("eps", 0.5),
        )
        .unwrap();
    let op = reg.op("rms_norm").unwrap();
    let defaults: Params = op
        .params()
        .iter()
        .map(|p| (p.name.to_string(), p.default_value()))
        .collect();
    let cfg = ShrinkConfig {
        param_defaults: defaults,
        ..ShrinkConfig::default()
    };
    let report =
        minimize_and_transition(&case, None, &boundaries(op, &h200, DType::F32), cfg, |c| {
            Ok::<_, Infallible>(engine::check_on_cpu(&reg, c, &h200, false))
        })
        .unwrap();
    let m = &report.minimized;
    assert_eq!(m.case.ne, [1, 1, 65536, 1]);
    assert_eq!(m.case.params.get("eps"), Some(&1e-6.into()));
    assert_eq!(m.outcome.verdict, Verdict::LaunchError);
    assert_eq!(m.outcome.detector, Detector::LaunchContract);
    let Some(TransitionFinding::Found(t)) = &report.transition else {
        panic!("{:?}", report.transition)
    };
    assert_eq!(t.axis, "ne[2]");
    assert_eq!((t.pass_at, t.fail_at), (65535, 65536));
    assert_eq!(t.pass.verdict, Verdict::Skipped); // the plan fits: nothing ran on a device
    assert_eq!(t.fail.violations[0].dim, "grid.y");
    // The repro of the minimized case carries both sides.
    let r = repro::build(&repro::ReproInput {
        reg: &reg,
        case: &m.case,
        profile: &h200,
        result: Some(&m.result),
        transition: Some(&**t),
        sources: repro::SourceMode::Placeholder,
    })
    .unwrap();
    let up = r.upstream.unwrap();
    assert_eq!(up.lines[0], "// ne[2] = 65536 > grid.y limit 65535 (h200)");
    assert!(up.lines[1].contains("{1, 1, 65536, 1}"));
    assert!(up.lines[3].contains("{1, 1, 65535, 1}"), "{:?}", up.lines);
}

/// The workflow behind `kedge minimize --cpu`: the same answer, and a passing case refused
/// with the reason (exit status 2).
#[test]
fn the_minimize_workflow_refuses_a_passing_case() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let bad = reg
        .validate(&Case::new(
            "rms_norm",
            "ggml",
            DType::F32,
            [64, 1, 65536, 1],
        ))
        .unwrap();
    let report = minimize(&reg, &bad, None, &h200, 400, Probes::Cpu(&h200)).unwrap();
    assert_eq!(report.minimized.case.ne, [1, 1, 65536, 1]);
    let good = reg
        .validate(&Case::new("rms_norm", "ggml", DType::F32, [64, 1, 2, 1]))
        .unwrap();
    let e = minimize(&reg, &good, None, &h200, 400, Probes::Cpu(&h200)).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string()
            .starts_with("minimize needs a failing case: this one passes"),
        "{e}"
    );
}
