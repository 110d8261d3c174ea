//! What the host side of a big case costs, op by op: drawing the inputs, the f64 reference,
//! the comparison and the output digest, each timed on its own (the output is the reference
//! rounded to the output's dtype, so the comparison passes). No GPU is needed: this is the
//! part of a big case's time that the device does not set.
//!
//!     cargo run --release -p kedge-ops --example host_phases [LOG2_ELEMENTS] [OP...]
//!
//! LOG2_ELEMENTS (default 26) sizes the row ops' shapes the way the sweep's 2^31-element
//! probes are shaped (64-element rows, 32 for softmax, 16 × 16 for tri). OP picks ops by
//! name (default: every op the big probes reach).

use kedge_core::judge::compare::{compare, digest};
use kedge_core::{Case, DType, HostTensor, Op};
use std::process::ExitCode;
use std::time::Instant;

fn shapes(log2: u32) -> Vec<(&'static str, [i64; 4])> {
    let n = 1i64 << log2;
    vec![
        ("rms_norm_mul_add", [64, n / 64, 1, 1]),
        ("rms_norm", [64, n / 64, 1, 1]),
        ("rms_norm", [4096, n / 4096, 1, 1]),
        ("norm", [64, n / 64, 1, 1]),
        ("l2_norm", [64, n / 64, 1, 1]),
        ("softmax", [32, n / 32, 1, 1]),
        ("cumsum", [64, n / 64, 1, 1]),
        ("cumsum", [1024, n / 1024, 1, 1]),
        ("tri", [16, 16, n / 256, 1]),
        ("add_id", [64, 4, n / 256, 1]),
    ]
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let log2: u32 = match args.next().map(|s| s.parse()) {
        None => 26,
        Some(Ok(v)) if (8..=34).contains(&v) => v,
        Some(_) => {
            eprintln!("host_phases: LOG2_ELEMENTS must be a number from 8 to 34");
            return ExitCode::from(2);
        }
    };
    let only: Vec<String> = args.collect();
    let reg = kedge_ops::registry();
    println!(
        "2^{log2} elements, {} threads; seconds: inputs, reference, compare, digest (GB/s of the output)",
        rayon::current_num_threads()
    );
    for (name, ne) in shapes(log2) {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let op: &dyn Op = match reg.op(name) {
            Ok(op) => op,
            Err(e) => {
                eprintln!("host_phases: {e}");
                return ExitCode::from(2);
            }
        };
        let case = match reg.validate(&Case::new(name, "ggml", DType::F32, ne)) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("host_phases: {name} {ne:?}: {e}");
                return ExitCode::from(2);
            }
        };
        let run = || -> Result<String, kedge_core::CaseError> {
            let specs = op.tensors(&case)?;
            let t = Instant::now();
            let inputs = op.inputs(&case, &specs)?;
            let t_in = secs(t);
            let t = Instant::now();
            let refs = op.reference(&case, &inputs)?;
            let t_ref = secs(t);
            let out_spec = specs
                .iter()
                .find(|s| s.role == kedge_core::Role::Output)
                .ok_or_else(|| kedge_core::CaseError::BadInput {
                    op: name.into(),
                    msg: "no output tensor".into(),
                })?;
            let vals: Vec<f32> = refs[0].iter().map(|&v| v as f32).collect();
            let out = HostTensor::from_f32(out_spec.dtype, out_spec.ne, &vals);
            drop(vals);
            let t = Instant::now();
            let c = compare(&out_spec.name, &out, &refs[0], op.tolerance(&case));
            let t_cmp = secs(t);
            let t = Instant::now();
            let d = digest(&out);
            let t_dig = secs(t);
            Ok(format!(
                "{t_in:.3} {t_ref:.3} {t_cmp:.3} {t_dig:.3} ({:.1} GB/s)  {} {d}",
                out.bytes.len() as f64 / t_dig / 1e9,
                c.verdict
            ))
        };
        match run() {
            Ok(line) => println!("{name:>16} {ne:?}: {line}"),
            Err(e) => {
                eprintln!("host_phases: {name} {ne:?}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
