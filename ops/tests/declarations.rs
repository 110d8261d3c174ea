//! Every case an op declares (smoke shapes and boundary probes, on every built-in profile)
//! validates against the registry and gets its tensors: a declaration the op itself rejects
//! would make suite generation fail.

use kedge_core::op::Axis;
use kedge_core::{Case, LimitsProfile};

#[test]
fn every_declared_case_is_valid() {
    let reg = kedge_ops::registry();
    let mut n = 0;
    for name in LimitsProfile::BUILTIN {
        let p = LimitsProfile::builtin(name).expect("builtin profile");
        for op in reg.ops() {
            let dtype = op.dtypes()[0];
            // Any impl of the op validates the declaration (not every op has `clamped`).
            let imp = op.impls()[0].name();
            let mut cases = Vec::new();
            for (ne, params) in op.smoke() {
                let mut c = Case::new(op.name(), imp, dtype, ne);
                c.params = params;
                cases.push((format!("smoke {ne:?}"), c));
            }
            for b in op.boundaries(&p) {
                assert!(
                    !b.reach.0.is_empty(),
                    "{}: '{}' has no reach note",
                    op.name(),
                    b.label
                );
                let probes = b.probe_values();
                assert!(
                    {
                        let (lo, hi) = (probes.iter().min(), probes.iter().max());
                        lo < hi && lo <= Some(&b.at) && hi >= Some(&b.at)
                    },
                    "{}: '{}' does not probe around {}",
                    op.name(),
                    b.label,
                    b.at
                );
                for v in probes {
                    let mut c = Case::new(op.name(), imp, b.dtype.unwrap_or(dtype), b.base);
                    c.params = b.params.clone();
                    match b.axis {
                        Axis::Ne(d) => c.ne[d] = v,
                        Axis::Param(name) => {
                            c.params.insert(name.to_string(), v.into());
                        }
                    }
                    cases.push((format!("{} = {v}", b.label), c));
                }
            }
            for (what, c) in cases {
                let c = c
                    .validate(&reg)
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", op.name()));
                op.tensors(&c)
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", op.name()));
                n += 1;
            }
        }
    }
    assert!(n > 0);
}
