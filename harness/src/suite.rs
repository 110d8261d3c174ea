//! Case generation: suites (`smoke`, `boundary`, `incidents`, `selftest`) from the ops'
//! declarations, filtered like test-backend-ops (`-o OP`), deterministic and de-duplicated.

use kedge_core::op::Axis;
use kedge_core::{AllocMode, Case, CaseError, ImplRole, LimitsProfile, Registry};
use std::collections::HashSet;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Smoke,
    Boundary,
    Incidents,
    /// Boundary + smoke of every impl, planted calibration impls included.
    Selftest,
    /// smoke + boundary.
    Default,
}

impl std::str::FromStr for Suite {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "smoke" => Suite::Smoke,
            "boundary" => Suite::Boundary,
            "incidents" => Suite::Incidents,
            "selftest" => Suite::Selftest,
            "default" => Suite::Default,
            _ => {
                return Err(format!(
                    "unknown suite '{s}' (known: smoke, boundary, incidents, selftest, default)"
                ))
            }
        })
    }
}

/// Which cases to build.
#[derive(Debug, Clone)]
pub struct Filter {
    pub ops: Vec<String>,
    pub impls: Vec<String>,
    pub allocs: Vec<AllocMode>,
    pub include_planted: bool,
    pub seed: u64,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            ops: Vec::new(),
            impls: Vec::new(),
            allocs: vec![AllocMode::Exact],
            include_planted: false,
            seed: 1,
        }
    }
}

impl Filter {
    fn op_ok(&self, op: &str) -> bool {
        self.ops.is_empty() || self.ops.iter().any(|o| o == op)
    }
    fn impl_ok(&self, imp: &str, role: ImplRole) -> bool {
        let planted_ok = self.include_planted
            || !matches!(role, ImplRole::Planted { .. })
            || self.impls.iter().any(|i| i == imp);
        planted_ok && (self.impls.is_empty() || self.impls.iter().any(|i| i == imp))
    }
}

/// Build the cases of a suite for a limits profile. Every case is validated (defaults filled).
pub fn generate(
    reg: &Registry,
    suite: Suite,
    limits: &LimitsProfile,
    f: &Filter,
    incidents: Option<&Path>,
) -> Result<Vec<Case>, anyhow::Error> {
    let mut out = Vec::new();
    let mut f = f.clone();
    if suite == Suite::Selftest {
        f.include_planted = true;
    }
    if matches!(suite, Suite::Incidents) {
        let path = incidents
            .ok_or_else(|| anyhow::anyhow!("the incidents suite needs corpora/incidents.jsonl"))?;
        for c in crate::corpus::read_cases(path)? {
            if f.op_ok(&c.op) && (f.impls.is_empty() || f.impls.contains(&c.imp)) {
                out.push(c);
            }
        }
        return Ok(dedup(out));
    }
    for op in reg.ops() {
        if !f.op_ok(op.name()) {
            continue;
        }
        let dtype = op.dtypes()[0];
        for imp in reg.impls_of(*op) {
            if !f.impl_ok(imp.name(), imp.role()) {
                continue;
            }
            let mut raw: Vec<Case> = Vec::new();
            if matches!(suite, Suite::Smoke | Suite::Default | Suite::Selftest) {
                for (ne, params) in op.smoke() {
                    let mut c = Case::new(op.name(), imp.name(), dtype, ne);
                    c.params = params;
                    raw.push(c);
                }
            }
            if matches!(suite, Suite::Boundary | Suite::Default | Suite::Selftest) {
                for b in op.boundaries(limits) {
                    if !b.impls.is_empty() && !b.impls.contains(&imp.name()) {
                        continue;
                    }
                    for v in b.probe_values() {
                        if v < 1 {
                            continue;
                        }
                        let mut c =
                            Case::new(op.name(), imp.name(), b.dtype.unwrap_or(dtype), b.base);
                        c.params = b.params.clone();
                        match b.axis {
                            Axis::Ne(d) => c.ne[d] = v,
                            Axis::Param(p) => {
                                c.params.insert(p.to_string(), v.into());
                            }
                        }
                        raw.push(c);
                    }
                }
            }
            for mut c in raw {
                c.seed = f.seed;
                for &m in &f.allocs {
                    let c = c.clone().with_alloc(m);
                    match c.validate(reg) {
                        Ok(v) => out.push(v),
                        // A generated shape an op rejects as bad input is the op's declaration
                        // being wrong: say so rather than silently dropping it.
                        Err(e) => {
                            return Err(anyhow::anyhow!(
                                "op {} declared a case it rejects: {}: {e}",
                                op.name(),
                                c.label()
                            ))
                        }
                    }
                }
            }
        }
    }
    Ok(dedup(out))
}

fn dedup(cases: Vec<Case>) -> Vec<Case> {
    let mut seen = HashSet::new();
    cases.into_iter().filter(|c| seen.insert(c.id())).collect()
}

/// Validate user-given cases, naming the line of the first bad one.
pub fn validate_all(
    reg: &Registry,
    cases: Vec<(usize, Case)>,
) -> Result<Vec<Case>, kedge_core::error::LineError> {
    cases
        .into_iter()
        .map(|(line, c)| c.validate(reg).map_err(|e: CaseError| e.at_line(line)))
        .collect()
}
