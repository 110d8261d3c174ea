//! Every incident's CPU expectation (`expect_cpu` in corpora/incidents.jsonl), checked with
//! `engine::check_on_cpu` against the h200 profile: the launch contract and the reference.
//! Incidents whose op is not in the registry are listed, not failed; at least one incident
//! must be checked. The corpus built into kedge is the file in the repository.

use kedge_core::{engine, LimitsProfile};
use kedge_runner::select::{Corpus, Expectation, Expected};
use std::path::PathBuf;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../corpora/incidents.jsonl")
}

fn read_expectations() -> Vec<Expectation> {
    Corpus::incidents(Some(&path()))
        .unwrap()
        .expectations()
        .unwrap()
}

#[test]
fn the_built_in_incidents_are_the_repository_file() {
    let file = std::fs::read_to_string(path()).unwrap();
    assert_eq!(Corpus::incidents(None).unwrap().text, file);
}

#[test]
fn every_incident_says_on_the_cpu_what_it_must() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let all = read_expectations();
    assert!(!all.is_empty());
    let mut checked = 0;
    let mut not_in_registry = Vec::new();
    let mut wrong = Vec::new();
    for e in &all {
        if reg.op(&e.case.op).is_err() {
            not_in_registry.push(format!("{} ({})", e.incident, e.case.op));
            continue;
        }
        let case = reg
            .validate(&e.case)
            .unwrap_or_else(|err| panic!("incident {}: {err}", e.incident));
        assert_eq!(
            case, e.case,
            "incident lines must be stored validated (defaults filled)"
        );
        let Some(want) = &e.expect_cpu else {
            continue;
        };
        let r = engine::check_on_cpu(&reg, &case, &h200, true);
        let got = Expected {
            verdict: r.verdict,
            detector: r.detector,
        };
        if &got != want {
            wrong.push(format!(
                "{} {}: expected {:?}, got {:?}: {}",
                e.incident,
                case.label(),
                want,
                got,
                r.detail
            ));
        }
        checked += 1;
    }
    if !not_in_registry.is_empty() {
        eprintln!(
            "incidents whose op is not in the registry yet (not checked): {}",
            not_in_registry.join(", ")
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 0, "no incident was checked");
}

/// The failing incident names the dimension and the limit on the CPU, with no GPU.
#[test]
fn rms_norm_incident_names_grid_y_on_the_cpu() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let all = read_expectations();
    let e = all
        .iter()
        .find(|e| e.case.op == "rms_norm" && e.case.imp == "ggml" && e.case.ne[2] == 65536)
        .expect("the rms_norm incident line");
    let r = engine::check_on_cpu(&reg, &e.case, &h200, false);
    assert_eq!(r.violations.len(), 1);
    assert_eq!(r.violations[0].dim, "grid.y");
    assert_eq!(
        (r.violations[0].value, r.violations[0].limit),
        (65536, 65535)
    );
}
