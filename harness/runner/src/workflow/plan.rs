//! `kedge plan`: each case's launches and buffers against a limits profile, on the CPU. A
//! launch past a limit names the dimension and the limit; a buffer past the profile's largest
//! one is an allocation-contract violation.

use kedge_core::contract::plan::{grouped, human_bytes};
use kedge_core::engine::check_on_cpu;
use kedge_core::{Case, CaseResult, LimitsProfile, Plan, Registry, Verdict};
use std::fmt::Write as _;

/// One case planned.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The case.
    case: Case,
    /// The CPU-side check (`launch-error` / `resource-limit` when the plan breaks the profile,
    /// `unsupported` when the impl refuses, `skipped` when it fits).
    pub result: CaseResult,
    /// Its launches and buffers; `None` when the impl refuses the case.
    plan: Option<Plan>,
}

impl Planned {
    /// Does the plan break the profile?
    pub fn broken(&self) -> bool {
        !self.result.violations.is_empty() || !self.result.buffer_violations.is_empty()
    }

    /// The case's label, then one indented line per launch, buffer, unchecked part and
    /// violation (or `ok` / `unsupported`).
    pub fn render(&self, profile: &str) -> String {
        let mut s = format!("{}\n", self.case.label());
        if let Some(plan) = &self.plan {
            let reps = plan.repetitions();
            for l in &plan.launches {
                if reps > 1 {
                    let _ = writeln!(s, "  launch {l} x{reps}");
                } else {
                    let _ = writeln!(s, "  launch {l}");
                }
            }
            for b in &plan.buffers {
                let _ = writeln!(
                    s,
                    "  buffer {} ({} bytes): {}",
                    human_bytes(b.bytes),
                    grouped(b.bytes),
                    b.name
                );
            }
            for u in &plan.unchecked {
                let _ = writeln!(s, "  not checked: {u}");
            }
        }
        if self.broken() {
            for v in &self.result.violations {
                let _ = writeln!(s, "  VIOLATION {v} (profile {profile})");
            }
            for v in &self.result.buffer_violations {
                let _ = writeln!(s, "  VIOLATION {} {v}", self.case.imp);
            }
        } else if self.result.verdict == Verdict::Unsupported {
            let _ = writeln!(s, "  unsupported: {}", self.result.detail);
        } else {
            let _ = writeln!(s, "  ok: fits profile {profile}");
        }
        s
    }
}

/// Plan one case against `limits`.
pub fn plan_case(reg: &Registry, case: &Case, limits: &LimitsProfile) -> Planned {
    let result = check_on_cpu(reg, case, limits, false);
    let plan = reg
        .resolve(case)
        .ok()
        .and_then(|(_, imp)| imp.plan(case, limits).ok());
    Planned {
        case: case.clone(),
        result,
        plan,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::DType;

    #[test]
    fn the_incident_names_grid_y_and_its_neighbour_fits() {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let c = |ne2| {
            reg.validate(&Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]))
                .unwrap()
        };
        let bad = plan_case(&reg, &c(65536), &h200);
        assert!(bad.broken());
        assert!(bad.render("h200").contains(
            "VIOLATION rms_norm_ggml_256: grid.y = 65536 exceeds the limit 65535 (profile h200)"
        ));
        let ok = plan_case(&reg, &c(65535), &h200);
        assert!(!ok.broken());
        assert!(ok.render("h200").contains("ok: fits profile h200"));
    }
}
