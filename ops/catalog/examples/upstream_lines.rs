//! Prints the test-backend-ops line of the cases kedge derives for ggml's ops: kedge's own ops
//! that upstream has (rms_norm, softmax, ...) and the ggml table; every smoke case in every
//! dtype, and each boundary's first and last probe (declared and generated on a limits
//! profile) in the op's first dtype.
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
use kedge_ops::on_ggml::table::{cases, TABLE};
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
    // kedge's own ops with an upstream line, then the table: every smoke case in every dtype
    // (a line's text depends on the dtype's name), every boundary case in the op's first dtype
    // (the same text with other numbers in the others). kedge's own ops in f32 only: upstream's
    // graph builders of some of them assert f32 (ggml_cumsum, ggml_tri), which would abort
    // test-backend-ops itself.
    let reg = kedge_ops::registry();
    let mut all: Vec<(&'static dyn Op, Case, String)> = Vec::new();
    for op in reg.ops() {
        if op.impls().is_empty() || op.upstream_name().is_none() {
            continue;
        }
        for &d in op.dtypes().iter().take(1) {
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
            if case.dtype == e.dtypes[0] || origin.starts_with("smoke") {
                all.push((e as &'static dyn Op, case, origin));
            }
        }
    }
    // Of each boundary, its first and last probe: the line's text is the same with other
    // numbers between them (a test-backend-ops build of every probe takes tens of minutes).
    let label = |o: &str| {
        o.rsplit_once(" #")
            .map_or(o.to_string(), |(l, _)| l.to_string())
    };
    let mut last_of: HashMap<(String, String), usize> = HashMap::new();
    for (i, (op, c, origin)) in all.iter().enumerate() {
        last_of.insert((format!("{} {}", op.name(), c.dtype), label(origin)), i);
    }
    let mut first_seen: std::collections::HashSet<(String, String)> = Default::default();
    let all: Vec<_> = all
        .into_iter()
        .enumerate()
        .filter(|(i, (op, c, origin))| {
            let k = (format!("{} {}", op.name(), c.dtype), label(origin));
            origin.starts_with("smoke")
                || first_seen.insert(k.clone())
                || last_of.get(&k) == Some(i)
        })
        .map(|(_, x)| x)
        .collect();
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
