//! Prints the test-backend-ops line of every case kedge derives for ggml's ops: kedge's own
//! ops that upstream has (rms_norm, softmax, ...) and the ggml table; smoke cases and every
//! boundary case, declared and generated on a limits profile.
//! One line per constructor: `CONSTRUCTOR<TAB>OP<TAB>VARS`, where `VARS` is the `vars()`
//! string kedge expects upstream to print for it. `scripts/check-upstream-lines.sh` builds
//! test-backend-ops with these constructors and compares.
//!
//!     cargo run -p kedge-ops --example upstream_lines [PROFILE] > cases.txt
//!
//! PROFILE is a built-in limits profile (default h200). Exit status 1 when two cases give one
//! constructor different vars (kedge would be inconsistent with itself).

use kedge_core::contract::boundary::generated;
use kedge_core::{Case, LimitsProfile, Op};
use kedge_ops::ggml::table::{cases, TABLE};
use std::collections::HashMap;
use std::process::ExitCode;

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_else(|| "h200".into());
    let Some(limits) = LimitsProfile::builtin(&name) else {
        eprintln!(
            "upstream_lines: no built-in profile {name} (known: {})",
            LimitsProfile::BUILTIN.join(", ")
        );
        return ExitCode::from(2);
    };
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut bad = 0;
    // kedge's own ops with an upstream line, then the table: every smoke and boundary case.
    let reg = kedge_ops::registry();
    let mut all: Vec<(&'static dyn Op, Case, String)> = Vec::new();
    for op in reg.ops() {
        if op.impls().is_empty() || op.upstream_name().is_none() {
            continue;
        }
        for &d in op.dtypes() {
            for (i, (ne, params)) in op.smoke().into_iter().enumerate() {
                let mut c = Case::new(op.name(), "ggml", d, ne);
                c.params = params;
                all.push((*op, c, format!("smoke {i}")));
            }
            let mut bounds: Vec<_> = op
                .boundaries(&limits)
                .into_iter()
                .filter(|b| b.dtype.is_none_or(|x| x == d))
                .collect();
            if let Some(base) = op.probe_base() {
                bounds.extend(generated(&base, &limits, d));
            }
            for b in bounds {
                for c in b.cases(op.name(), "ggml", d) {
                    all.push((*op, c, b.label.clone()));
                }
            }
        }
    }
    for e in TABLE {
        for (case, origin) in cases(e, &limits) {
            all.push((e as &'static dyn Op, case, origin));
        }
    }
    for (op, case, origin) in all {
        {
            // A generated probe the op's shape rules refuse is left out, as a sweep does.
            let generated = origin.contains("(generated)") || case.dtype != op.dtypes()[0];
            let case = match reg.validate(&case) {
                Ok(c) => c,
                Err(_) if op.impls().is_empty() => case,
                Err(_) if generated => continue,
                Err(err) => {
                    eprintln!("upstream_lines: {} {origin}: {err}", op.name());
                    bad += 1;
                    continue;
                }
            };
            if let Err(err) = op.tensors(&case) {
                if generated {
                    continue;
                }
                eprintln!("upstream_lines: {} {origin}: {err}", op.name());
                bad += 1;
                continue;
            }
            let Some(u) = op.upstream(&case) else {
                continue;
            };
            let full = format!("{}({})", u.op_name, u.vars);
            match seen.get(&u.test_case_line) {
                Some(prev) if *prev != full => {
                    eprintln!(
                        "upstream_lines: {} {origin}: {} prints {full} here and {prev} for another case",
                        op.name(), u.test_case_line
                    );
                    bad += 1;
                }
                Some(_) => {}
                None => {
                    println!("{}\t{}\t{}", u.test_case_line, u.op_name, u.vars);
                    seen.insert(u.test_case_line, full);
                }
            }
        }
    }
    if bad > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
