//! Prints the test-backend-ops line of every case kedge derives for ggml's ops (the ggml
//! table): smoke cases and every boundary case, declared and generated on a limits profile.
//! One line per constructor: `CONSTRUCTOR<TAB>OP<TAB>VARS`, where `VARS` is the `vars()`
//! string kedge expects upstream to print for it. `scripts/check-upstream-lines.sh` builds
//! test-backend-ops with these constructors and compares.
//!
//!     cargo run -p kedge-ops --example upstream_lines [PROFILE] > cases.txt
//!
//! PROFILE is a built-in limits profile (default h200). Exit status 1 when two cases give one
//! constructor different vars (kedge would be inconsistent with itself).

use kedge_core::LimitsProfile;
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
    for e in TABLE {
        for (case, origin) in cases(e, &limits) {
            if let Err(err) = (e.tensors)(&case) {
                eprintln!("upstream_lines: {} {origin}: {err}", e.name);
                bad += 1;
                continue;
            }
            let u = (e.upstream_line)(&case);
            let full = format!("{}({})", u.op_name, u.vars);
            match seen.get(&u.test_case_line) {
                Some(prev) if *prev != full => {
                    eprintln!(
                        "upstream_lines: {} {origin}: {} prints {full} here and {prev} for another case",
                        e.name, u.test_case_line
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
