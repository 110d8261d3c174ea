//! Every op of kedge's own that may be judged on sampled slices (`Op::row_sampling`): on its
//! smoke shapes and its boundary cases small enough to compute whole, in each dtype it takes,
//! the reference of the sampled slices alone is those slices of the whole reference. An op
//! that declared rows or planes independent where they are not fails here.

use crate::boundaries;
use kedge_core::judge::sample::sampled_matches_whole;
use kedge_core::{Case, LimitsProfile};

/// The largest case computed whole here, in elements.
const MOST: i64 = 1 << 20;

#[test]
fn an_own_ops_sampled_slices_reference_is_the_slices_of_its_whole_reference() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").expect("the h200 profile");
    let mut failures = Vec::new();
    let mut checked = std::collections::BTreeSet::new();
    for &op in reg.ops() {
        let Some(imp) = reg.impls_of(op).first().map(|i| i.name().to_string()) else {
            continue;
        };
        for &dtype in op.dtypes() {
            let mut cases: Vec<Case> = op
                .smoke_for(dtype)
                .into_iter()
                .map(|(ne, params)| {
                    let mut c = Case::new(op.name(), &imp, dtype, ne);
                    c.params = params;
                    c
                })
                .collect();
            for b in boundaries(op, &h200, dtype) {
                cases.extend(b.cases(op.name(), &imp, dtype));
            }
            for c in cases {
                if c.ne.iter().product::<i64>() > MOST || op.row_sampling(&c).is_none() {
                    continue;
                }
                let Ok(c) = reg.validate(&c) else {
                    continue;
                };
                match sampled_matches_whole(op, &c) {
                    Ok(Some(from)) => {
                        checked.insert(format!("{}/{from}", op.name()));
                    }
                    Ok(None) => {}
                    Err(e) => failures.push(format!("{}: {e}", op.name())),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Rows (the row ops) and planes (tri's matrices) are both checked.
    for want in ["rms_norm/1", "softmax/1", "cumsum/1", "tri/2"] {
        assert!(checked.contains(want), "{want} not checked: {checked:?}");
    }
}
