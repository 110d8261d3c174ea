//! Running one case, op-agnostic: plan check, allocation in the case's mode, inputs and
//! poison, the impl's launches, synchronization, copy back, canaries, comparison.

use crate::case::{AllocMode, Case};
use crate::compare::compare;
use crate::device::{Device, DeviceAlloc, RunCtx, RunError};
use crate::host::{poison_pattern, HostTensor};
use crate::launch::Plan;
use crate::limits::LimitsProfile;
use crate::op::{Impl, Op, Registry, Role, TensorSpec};
use crate::verdict::{CaseResult, Detector, Verdict};
use std::time::Instant;

/// Outcome of the device part of a case, plus whether the context is now dead.
pub struct Executed {
    pub result: CaseResult,
    pub context_dead: bool,
}

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
            why,
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
                    plan.launches.len()
                );
                if !plan.buffers.is_empty() {
                    msg.push_str(&format!(
                        "; buffers: {} (largest allowed {})",
                        plan.buffers
                            .iter()
                            .map(|b| format!("{} {}", b.name, crate::launch::human_bytes(b.bytes)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        crate::launch::human_bytes(limits.max_alloc_bytes.value)
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
        match reference_for(op, case) {
            Ok((_, _, outs)) => res.detail.push_str(&format!(
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
    res.under = "cpu".into();
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

#[allow(clippy::type_complexity)]
fn reference_for(
    op: &dyn Op,
    case: &Case,
) -> Result<(Vec<TensorSpec>, Vec<HostTensor>, Vec<Vec<f64>>), crate::CaseError> {
    let specs = op.tensors(case)?;
    let inputs = op.inputs(case, &specs)?;
    let outs = op.reference(case, &inputs)?;
    Ok((specs, inputs, outs))
}

/// Run one case on the device and judge it. Never panics on device errors; reports whether
/// the context died so the worker can exit.
pub fn execute(reg: &Registry, dev: &mut Device, case: &Case) -> Executed {
    let t0 = Instant::now();
    let mut ex = execute_inner(reg, dev, case);
    ex.result.ms = t0.elapsed().as_secs_f64() * 1e3;
    ex
}

fn fail(case: &Case, e: RunError, alloc: AllocMode) -> Executed {
    let dead = e.is_sticky();
    let (verdict, detector) = match &e {
        RunError::LaunchRefused { .. } => (Verdict::LaunchError, Detector::Driver),
        RunError::Fault { name, .. } | RunError::Driver { name, .. } => {
            let guard = matches!(alloc, AllocMode::Guard | AllocMode::GuardFront);
            if guard && name == "CUDA_ERROR_ILLEGAL_ADDRESS" {
                (Verdict::DeviceFault, Detector::GuardPage)
            } else {
                (Verdict::DeviceFault, Detector::DeviceSync)
            }
        }
        RunError::Compile(_) => (Verdict::Unsupported, Detector::Impl),
        RunError::Resource(_) => (Verdict::ResourceLimit, Detector::Driver),
        RunError::Unsupported(_) => (Verdict::Unsupported, Detector::Impl),
        // A plugin's own error check (cudaGetLastError after its launch) failed: a launch
        // error seen by the impl rather than by kedge's driver check.
        RunError::Impl(_) => (Verdict::LaunchError, Detector::Impl),
    };
    let mut r = CaseResult::new(case, verdict, detector, e.to_string());
    if detector == Detector::GuardPage {
        r.detail = format!("guard page hit: {e}");
    }
    Executed {
        result: r,
        context_dead: dead,
    }
}

fn execute_inner(reg: &Registry, dev: &mut Device, case: &Case) -> Executed {
    let (op, imp) = match reg.resolve(case) {
        Ok(x) => x,
        Err(e) => {
            return Executed {
                result: CaseResult::new(case, Verdict::Unsupported, Detector::Impl, e.to_string()),
                context_dead: false,
            }
        }
    };
    let limits = dev.limits.clone();
    let plan = match plan_case(imp, case, &limits) {
        Ok(p) => p,
        Err(r) => {
            return Executed {
                result: *r,
                context_dead: false,
            }
        }
    };
    let specs = match op.tensors(case) {
        Ok(s) => s,
        Err(e) => {
            return Executed {
                result: CaseResult::new(
                    case,
                    Verdict::Unsupported,
                    Detector::Impl,
                    format!("bad input: {e}"),
                ),
                context_dead: false,
            }
        }
    };
    let inputs = match op.inputs(case, &specs) {
        Ok(i) => i,
        Err(e) => {
            return Executed {
                result: CaseResult::new(
                    case,
                    Verdict::Unsupported,
                    Detector::Impl,
                    format!("bad input: {e}"),
                ),
                context_dead: false,
            }
        }
    };
    // Allocate every tensor in the case's mode, upload inputs, poison outputs.
    let mut allocs: Vec<DeviceAlloc> = Vec::with_capacity(specs.len());
    let mut slack = Vec::new();
    for s in &specs {
        match dev.alloc(&s.name, s.bytes, case.alloc, s.dtype.size()) {
            Ok(a) => {
                if let Some(g) = a.guard_slack() {
                    if g > 0 {
                        slack.push(format!(
                            "{}: {g} bytes between its end and the guard page (alignment)",
                            s.name
                        ));
                    }
                }
                allocs.push(a)
            }
            Err(e) => return fail(case, e, case.alloc),
        }
    }
    let mut input_iter = inputs.iter();
    for (s, a) in specs.iter().zip(&allocs) {
        let r = match s.role {
            Role::Input => match input_iter.next() {
                Some(h) => dev.upload(a, &h.bytes),
                None => Err(RunError::Unsupported(format!(
                    "op gave no data for input {}",
                    s.name
                ))),
            },
            Role::Output => dev.fill_pattern(a, &poison_pattern(s.dtype)),
        };
        if let Err(e) = r {
            return fail(case, e, case.alloc);
        }
    }
    if let Err(e) = dev.synchronize("upload") {
        return fail(case, e, case.alloc);
    }
    // Run.
    let mut ctx = RunCtx {
        dev,
        tensors: &allocs,
        alloc: case.alloc,
        scratch: Vec::new(),
        launched: Vec::new(),
        extra: Default::default(),
    };
    let run = imp
        .run(&mut ctx, case, &plan)
        .and_then(|_| ctx.dev.synchronize("run"));
    let launched = std::mem::take(&mut ctx.launched);
    let extra = std::mem::take(&mut ctx.extra);
    let scratch = std::mem::take(&mut ctx.scratch);
    let dev = ctx.dev;
    if let Err(e) = run {
        let mut ex = fail(case, e, case.alloc);
        ex.result.extra = extra;
        ex.result.extra.insert("launches".into(), launched.into());
        ex.result.alloc_note = op.alloc_note(case);
        ex.result.reach = op.reach(case);
        return ex;
    }
    // Canaries (inputs, outputs and scratch).
    let mut canary_hits = Vec::new();
    for a in allocs.iter().chain(scratch.iter()) {
        match dev.check_canary(a) {
            Ok(Some(msg)) => canary_hits.push(msg),
            Ok(None) => {}
            Err(e) => return fail(case, e, case.alloc),
        }
    }
    // Copy outputs back.
    let mut outs = Vec::new();
    for (s, a) in specs.iter().zip(&allocs) {
        if s.role == Role::Output {
            match dev.download(a) {
                Ok(b) => outs.push((s.clone(), HostTensor::from_bytes(s.dtype, s.ne, s.nb, b))),
                Err(e) => return fail(case, e, case.alloc),
            }
        }
    }
    drop(scratch);
    drop(allocs);
    let digests: Vec<String> = outs
        .iter()
        .map(|(s, o)| format!("{}:{}", s.name, crate::compare::digest(o)))
        .collect();
    // Every output still entirely poison: the op did no work at all. That verdict needs no
    // reference, and skipping it matters: the shape an impl silently refused can be the one
    // whose reference is the most expensive (sdpa_prefill's fallback past its buffer limit).
    let untouched = (canary_hits.is_empty() && !outs.is_empty())
        .then(|| {
            let counts: Vec<(u64, u64)> = outs
                .iter()
                .map(|(_, o)| crate::compare::poisoned_elements(o))
                .collect();
            counts
                .iter()
                .all(|&(hit, n)| n > 0 && hit == n)
                .then(|| crate::compare::nothing_written(&outs[0].0.name, counts[0].1))
        })
        .flatten();
    let cmp = match untouched {
        Some(c) => c,
        None => {
            let reference = match op.reference(case, &inputs) {
                Ok(r) => r,
                Err(e) => {
                    return Executed {
                        result: CaseResult::new(
                            case,
                            Verdict::Unsupported,
                            Detector::Impl,
                            format!("bad input: {e}"),
                        ),
                        context_dead: false,
                    }
                }
            };
            let tol = op.tolerance(case);
            let mut worst: Option<crate::compare::Comparison> = None;
            for ((s, out), r) in outs.iter().zip(reference.iter()) {
                let c = compare(&s.name, out, r, tol);
                let replace = match &worst {
                    None => true,
                    Some(w) => c.verdict.severity() > w.verdict.severity(),
                };
                if replace {
                    worst = Some(c);
                }
            }
            match worst {
                Some(c) => c,
                None => {
                    return Executed {
                        result: CaseResult::new(
                            case,
                            Verdict::SilentFailure,
                            Detector::Reference,
                            "the op produced no output tensors",
                        ),
                        context_dead: false,
                    }
                }
            }
        }
    };
    let detector = match cmp.verdict {
        Verdict::Pass => Detector::None,
        // Both are seen by the poison: elements no thread wrote.
        Verdict::UnwrittenOutput | Verdict::SilentFailure => Detector::Poison,
        _ => Detector::Reference,
    };
    let mut r = if !canary_hits.is_empty() {
        let mut r = CaseResult::new(
            case,
            Verdict::OobWrite,
            Detector::Canary,
            canary_hits.join("; "),
        );
        if cmp.verdict != Verdict::Pass {
            r.also.push(detector);
        }
        r
    } else {
        CaseResult::new(case, cmp.verdict, detector, cmp.detail)
    };
    r.numbers = Some(cmp.numbers);
    r.extra = extra;
    r.extra.insert("launches".into(), launched.into());
    r.extra.insert("output_digest".into(), digests.into());
    if !slack.is_empty() {
        r.extra
            .insert("guard_slack".into(), slack.join("; ").into());
    }
    r.reach = op.reach(case);
    r.alloc_note = op.alloc_note(case);
    Executed {
        result: r,
        context_dead: false,
    }
}
