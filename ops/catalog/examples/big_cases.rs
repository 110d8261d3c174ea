//! How the ggml table's big cases are judged on a limits profile: per op, the cases whose
//! largest tensor has 2^26 elements or more (`--judge auto` samples from there), how many of
//! them a CUDA device judges on sampled rows, planes or batches (`judge::sample`), and how
//! many whole, each of those paying for a CPU reference of the whole case. No ggml build and
//! no GPU needed: it reads the declarations.
//!
//!     cargo run --release -p kedge-ops --example big_cases [PROFILE] > big-cases.md
//!
//! With `--whole`, it lists the big cases still judged whole instead, one label a line (what
//! to look at when making an op's cases cheaper).

use kedge_core::judge::sample::{sampled, slicing_of, Judging};
use kedge_core::{LimitsProfile, Op};
use kedge_ops::on_ggml::table::{cases, TABLE};
use std::process::ExitCode;

/// `judge::sample`'s threshold for `--judge auto`.
const BIG: u64 = 1 << 26;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list_whole = args.iter().any(|a| a == "--whole");
    let name = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "h200".into());
    let Some(limits) = LimitsProfile::builtin(&name) else {
        eprintln!(
            "big_cases: no built-in profile {name} (known: {})",
            LimitsProfile::BUILTIN.join(", ")
        );
        return ExitCode::from(2);
    };
    if !list_whole {
        println!("| op | cases | big | rows | planes | batches | whole |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
    }
    let mut total = [0usize; 6];
    for e in TABLE {
        let mut n = [0usize; 6];
        for (c, _) in cases(e, &limits) {
            n[0] += 1;
            let Ok(specs) = e.tensors(&c) else {
                continue;
            };
            if specs.iter().map(|s| s.nelements()).max().unwrap_or(0) < BIG {
                continue;
            }
            n[1] += 1;
            match slicing_of(e, &c).filter(|_| sampled(e, &c, Judging::Auto)) {
                Some(sl) => n[1 + sl.from] += 1,
                None => {
                    n[5] += 1;
                    if list_whole {
                        println!("{}", c.label());
                    }
                }
            }
        }
        if list_whole {
            continue;
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            e.name(),
            n[0],
            n[1],
            n[2],
            n[3],
            n[4],
            n[5]
        );
        for (t, x) in total.iter_mut().zip(n) {
            *t += x;
        }
    }
    if list_whole {
        return ExitCode::SUCCESS;
    }
    println!(
        "| **all {} ops** | {} | {} | {} | {} | {} | {} |",
        TABLE.len(),
        total[0],
        total[1],
        total[2],
        total[3],
        total[4],
        total[5]
    );
    ExitCode::SUCCESS
}
