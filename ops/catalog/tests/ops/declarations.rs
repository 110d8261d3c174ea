//! Every case an op declares (smoke shapes, its own boundary probes and the generated ones,
//! on every built-in profile, in every dtype the op takes) validates against the registry and
//! gets its tensors: a declaration the op itself rejects would make suite generation fail.

use crate::boundaries;
use kedge_core::{Case, LimitsProfile};

#[test]
fn every_declared_case_is_valid() {
    let reg = kedge_ops::registry();
    let mut n = 0;
    for name in LimitsProfile::BUILTIN {
        let p = LimitsProfile::builtin(name).expect("builtin profile");
        for (op, &dtype) in reg
            .ops()
            .iter()
            .flat_map(|op| op.dtypes().iter().map(move |d| (op, d)))
        {
            // Any impl of the op validates the declaration (not every op has `clamped`). ggml's
            // other ops have impls only once a ggml build is loaded; the adapter's tests
            // validate their declarations against one.
            let Some(imp) = op.impls().first().map(|i| i.name()) else {
                continue;
            };
            let mut cases = Vec::new();
            for (ne, params) in op.smoke() {
                let mut c = Case::new(op.name(), imp, dtype, ne);
                c.params = params;
                cases.push((format!("smoke {ne:?}"), c));
            }
            for b in boundaries(*op, &p, dtype) {
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
                for c in b.cases(op.name(), imp, dtype) {
                    cases.push((format!("{}: {}", b.label, c.label()), c));
                }
            }
            for (what, c) in cases {
                let c = reg
                    .validate(&c)
                    .unwrap_or_else(|e| panic!("{} {dtype} {what}: {e}", op.name()));
                op.tensors(&c)
                    .unwrap_or_else(|e| panic!("{} {dtype} {what}: {e}", op.name()));
                n += 1;
            }
        }
    }
    assert!(n > 0);
}
