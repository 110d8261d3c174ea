//! The CPU side of a case: the launch and allocation contracts against a limits profile and,
//! if asked, the reference. Used by `kedge plan` and by a sweep without a GPU.

use super::ReferenceCache;
use crate::contract::imp::Impl;
use crate::contract::plan::{human_bytes, Plan};
use crate::contract::registry::Registry;
use crate::judge::result::CaseResult;
use crate::model::case::Case;
use crate::model::limits::LimitsProfile;
use crate::model::words::{Detector, Under, Verdict};
use std::time::Instant;

/// Plan the case against a profile. Unsupported is answered as a result.
pub fn plan_case(
    imp: &dyn Impl,
    case: &Case,
    limits: &LimitsProfile,
) -> Result<Plan, Box<CaseResult>> {
    imp.plan(case, limits).map_err(|why| {
        Box::new(CaseResult::new(
            case,
            Verdict::Unsupported,
            Detector::Impl,
            why.0,
        ))
    })
}

/// The CPU side of a case: the launch contract against `limits` and, if asked, the reference
/// (to prove it runs on this shape). Used by `kedge plan` and by `sweep` without a GPU.
pub fn check_on_cpu(
    reg: &Registry,
    case: &Case,
    limits: &LimitsProfile,
    with_reference: bool,
) -> CaseResult {
    let t0 = Instant::now();
    let (op, imp) = match reg.resolve(case) {
        Ok(x) => x,
        Err(e) => {
            return CaseResult::new(case, Verdict::Unsupported, Detector::Impl, e.to_string())
        }
    };
    let mut res = match plan_case(imp, case, limits) {
        Err(r) => *r,
        Ok(plan) => {
            let v = plan.violations(limits);
            let tensor_bytes = op
                .tensors(case)
                .map(|ts| ts.iter().fold(0u64, |a, t| a.saturating_add(t.bytes)))
                .unwrap_or(0);
            let bv = plan.buffer_violations(limits, tensor_bytes);
            if v.is_empty() && !bv.is_empty() {
                let mut r = CaseResult::new(
                    case,
                    Verdict::ResourceLimit,
                    Detector::AllocContract,
                    format!(
                        "plan breaks profile {}: {} {}",
                        limits.name,
                        case.imp,
                        joined(&bv)
                    ),
                );
                r.buffer_violations = bv;
                r
            } else if !v.is_empty() {
                let mut r = CaseResult::new(
                    case,
                    Verdict::LaunchError,
                    Detector::LaunchContract,
                    format!("plan breaks profile {}: {}", limits.name, joined(&v)),
                );
                r.violations = v;
                r
            } else {
                let mut msg = format!(
                    "plan fits profile {} ({} launches)",
                    limits.name,
                    plan.launch_count()
                );
                if !plan.buffers.is_empty() {
                    msg.push_str(&format!(
                        "; buffers: {} (largest allowed {})",
                        plan.buffers
                            .iter()
                            .map(|b| format!("{} {}", b.name, human_bytes(b.bytes)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        human_bytes(limits.max_alloc_bytes.value)
                    ));
                }
                if !plan.unchecked.is_empty() {
                    msg.push_str(&format!("; not checked: {}", plan.unchecked.join(", ")));
                }
                CaseResult::new(case, Verdict::Skipped, Detector::None, msg)
            }
        }
    };
    if with_reference && res.verdict == Verdict::Skipped {
        let mut refs = ReferenceCache::default();
        let computed = refs
            .inputs(op, case)
            .and_then(|(_, inputs)| refs.reference(op, case, &inputs));
        match computed {
            Ok(outs) => res.detail.push_str(&format!(
                "; reference computed ({} outputs); device run skipped",
                outs.len()
            )),
            Err(e) => {
                res.verdict = Verdict::Unsupported;
                res.detector = Detector::Impl;
                res.detail = format!("bad input: {e}");
            }
        }
    }
    res.reach = op.reach(case);
    res.alloc_note = op.alloc_note(case);
    res.under = Under::Cpu;
    res.ms = t0.elapsed().as_secs_f64() * 1e3;
    res
}

/// Violations as one sentence each, "; "-separated.
fn joined<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
