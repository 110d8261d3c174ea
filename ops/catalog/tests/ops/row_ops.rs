//! Cross-checks of the row ops (rms_norm, norm, l2_norm, rms_norm_mul_add) and add_id through
//! the registry, as the engine uses them, in every dtype each takes: every smoke shape
//! validates, its inputs fit its
//! tensors and its reference yields one value per output element; every boundary probe (own
//! and generated) validates, upstream's impl breaks the h200 limits exactly on the probes
//! past 65535 on the axes its grid puts there, and the fixed impl never does. Ops of the list
//! this build does not have are skipped.

use crate::boundaries;
use kedge_core::{Axis, Case, DType, LimitsProfile, Role};

const OPS: &[&str] = &["rms_norm", "norm", "l2_norm", "rms_norm_mul_add", "add_id"];

/// The ops of `OPS` this build has.
fn ops() -> Vec<&'static str> {
    let reg = kedge_ops::registry();
    let v: Vec<&str> = OPS.iter().copied().filter(|o| reg.op(o).is_ok()).collect();
    assert!(!v.is_empty());
    v
}

/// Each op of `ops()` with each dtype it takes.
fn ops_and_dtypes() -> Vec<(&'static str, DType)> {
    let reg = kedge_ops::registry();
    let v: Vec<(&str, DType)> = ops()
        .into_iter()
        .flat_map(|o| {
            let dtypes = reg.op(o).map(|op| op.dtypes().to_vec()).unwrap_or_default();
            dtypes.into_iter().map(move |d| (o, d))
        })
        .collect();
    assert!(v.iter().any(|(_, d)| *d == DType::Bf16), "{v:?}");
    v
}

/// The ne axes upstream's grid puts on grid.y / grid.z (capped at 65535).
fn ggml_capped_axes(op: &str) -> &'static [usize] {
    match op {
        "add_id" => &[2],
        _ => &[2, 3],
    }
}

#[test]
fn smoke_references_run_on_the_ops_own_inputs() {
    let reg = kedge_ops::registry();
    for (name, dtype) in ops_and_dtypes() {
        let op = reg.op(name).unwrap();
        let smoke = op.smoke();
        assert!(!smoke.is_empty(), "{name} has no smoke shapes");
        for (ne, params) in smoke {
            let mut c = Case::new(name, "ggml", dtype, ne);
            c.params = params;
            let c = reg
                .validate(&c)
                .unwrap_or_else(|e| panic!("{name} {dtype} {ne:?}: {e}"));
            let specs = op.tensors(&c).unwrap();
            let inputs = op.inputs(&c, &specs).unwrap();
            let in_specs: Vec<_> = specs.iter().filter(|s| s.role == Role::Input).collect();
            assert_eq!(inputs.len(), in_specs.len(), "{name} {ne:?}");
            for (h, s) in inputs.iter().zip(&in_specs) {
                assert_eq!(
                    (h.dtype, h.ne, h.bytes.len() as u64),
                    (s.dtype, s.ne, s.bytes)
                );
                // Float inputs are never all zeros (ids may legitimately all be expert 0).
                assert!(
                    s.dtype == DType::I32 || h.any_nonzero(),
                    "{name} {ne:?}: {} all zero",
                    s.name
                );
            }
            let outs = op.reference(&c, &inputs).unwrap();
            let out_specs: Vec<_> = specs.iter().filter(|s| s.role == Role::Output).collect();
            assert_eq!(outs.len(), out_specs.len());
            for (o, s) in outs.iter().zip(&out_specs) {
                assert_eq!(o.len() as u64, s.nelements(), "{name} {ne:?}");
                assert!(o.iter().all(|v| v.is_finite()), "{name} {ne:?}");
            }
        }
    }
}

#[test]
fn boundary_probes_break_ggml_exactly_past_the_grid_limit() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    for (name, dtype) in ops_and_dtypes() {
        let op = reg.op(name).unwrap();
        let mut transitions = 0;
        for b in boundaries(op, &h200, dtype) {
            assert!(
                !b.reach.0.is_empty(),
                "{name} {}: no reachability note",
                b.label
            );
            let Axis::Ne(d) = b.axis else {
                continue;
            };
            let mut failed_at = Vec::new();
            for c in b.cases(name, "ggml", dtype) {
                let (ne, v) = (c.ne, c.ne[d]);
                let c = reg
                    .validate(&c)
                    .unwrap_or_else(|e| panic!("{name} {}: {ne:?}: {e}", b.label));
                assert!(op.upstream(&c).is_some(), "{name} {ne:?}: no upstream line");
                let expect_fail = ggml_capped_axes(name).contains(&d) && v > 65_535;
                let ggml = reg.imp(op, "ggml").unwrap().plan(&c, &h200).unwrap();
                let viol = ggml.violations(&h200);
                assert_eq!(
                    !viol.is_empty(),
                    expect_fail,
                    "{name} {} at {v}: {viol:?}",
                    b.label
                );
                if expect_fail {
                    failed_at.push(v);
                    assert!(
                        op.reach(&c).is_some(),
                        "{name} {ne:?}: failing probe without reach"
                    );
                }
                let fixed = reg.imp(op, "clamped").unwrap().plan(&c, &h200).unwrap();
                assert!(
                    fixed.violations(&h200).is_empty(),
                    "{name} {ne:?}: {:?}",
                    fixed.violations(&h200)
                );
            }
            // At a grid limit the transition sits between 65535 and 65536, and both sides are
            // probed. (An element-count probe that moves a capped axis fails on both sides.)
            if !failed_at.is_empty() && b.label.contains("grid") {
                assert_eq!(failed_at, vec![65_536], "{name} {}", b.label);
                transitions += 1;
            }
        }
        // Every op has a boundary on each axis its upstream grid caps (add_id: n_tokens;
        // the row ops: ne[2] and ne[3]), generated from the profile's grid limits.
        assert!(
            transitions >= ggml_capped_axes(name).len(),
            "{name}: only {transitions} boundaries show the ggml launch failing"
        );
    }
}
