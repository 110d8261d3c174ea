//! What the host side of a ggml-table op's big case costs: drawing the inputs and the
//! reference (the same graph on ggml's CPU backend: quantizing block-format inputs, uploading,
//! computing, reading back), each timed. A device run of the case pays the same input
//! preparation again, so this is most of a whole-judged big case's time that the GPU does not
//! set. Then the same for the case judged on sampled slices, where its op allows: the inputs
//! the op makes, the sampled slices' inputs and their reference (the rest is the device's).
//!
//!     cargo run --release -p kedge-ops --example ggml_host_phases [--sampled-only] GGML_DIR OP DTYPE NE0,NE1,NE2,NE3 [NAME=VALUE ...]
//!
//! `--sampled-only` skips the whole case: one whose inputs and reference do not fit this host.

use kedge_core::judge::sample;
use kedge_core::{Case, DType, Op};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let sampled_only = a.first().is_some_and(|x| x == "--sampled-only");
    if sampled_only {
        a.remove(0);
    }
    if a.len() < 4 {
        eprintln!("usage: ggml_host_phases [--sampled-only] GGML_DIR OP DTYPE NE0,NE1,NE2,NE3 [NAME=VALUE ...]");
        return ExitCode::from(2);
    }
    let mut reg = kedge_ops::registry();
    if let Err(e) = kedge_ops::on_ggml::register(&mut reg, std::path::Path::new(&a[0]), &[]) {
        eprintln!("ggml_host_phases: {e}");
        return ExitCode::from(2);
    }
    let Ok(dtype) = a[2].parse::<DType>() else {
        eprintln!("ggml_host_phases: unknown dtype {}", a[2]);
        return ExitCode::from(2);
    };
    let ne: Vec<i64> = a[3].split(',').filter_map(|x| x.parse().ok()).collect();
    let Ok(ne) = <[i64; 4]>::try_from(ne) else {
        eprintln!("ggml_host_phases: NE must be four numbers");
        return ExitCode::from(2);
    };
    let mut case = Case::new(&a[1], "ggml:CUDA0", dtype, ne);
    for kv in &a[4..] {
        let Some((k, v)) = kv.split_once('=') else {
            eprintln!("ggml_host_phases: {kv} is not NAME=VALUE");
            return ExitCode::from(2);
        };
        let v = serde_json::from_str(v).unwrap_or(serde_json::Value::String(v.into()));
        case = case.with_param(k, v);
    }
    let op: &dyn Op = match reg.op(&a[1]) {
        Ok(op) => op,
        Err(e) => {
            eprintln!("ggml_host_phases: {e}");
            return ExitCode::from(2);
        }
    };
    // The table's ops have no impl on the CPU backend (it is their reference), so the case's
    // parameters are checked against the op's declaration directly.
    let case = match kedge_core::model::params::check_params(op.name(), op.params(), &case.params) {
        Ok(params) => Case { params, ..case },
        Err(e) => {
            eprintln!("ggml_host_phases: {e}");
            return ExitCode::from(2);
        }
    };
    let whole = |specs: &[kedge_core::TensorSpec]| -> Result<(), kedge_core::CaseError> {
        let t = Instant::now();
        let inputs = op.inputs(&case, specs)?;
        let t_in = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let refs = op.reference(&case, &inputs)?;
        let t_ref = t.elapsed().as_secs_f64();
        println!(
            "{} {} {:?}: inputs {t_in:.3} s, reference {t_ref:.3} s ({} output values), {} threads",
            case.op,
            case.dtype,
            case.ne,
            refs.iter().map(Vec::len).sum::<usize>(),
            rayon::current_num_threads()
        );
        drop((inputs, refs));
        Ok(())
    };
    let sampled = |specs: &[kedge_core::TensorSpec]| -> Result<(), kedge_core::CaseError> {
        // The same case judged on sampled slices: the host makes only what the op makes, cuts
        // the sampled slices' inputs and computes their reference (the device draws the rest).
        let Some(sampling) = op.row_sampling(&case) else {
            println!("  sampled: the op judges this case whole");
            return Ok(());
        };
        let Some(sl) = sample::slicing_of(op, &case) else {
            println!("  sampled: its tensors are not stacks of its slices; judged whole");
            return Ok(());
        };
        let t = Instant::now();
        let made = if sampling.inputs_made() {
            op.made_inputs(&case, specs)?
        } else {
            Vec::new()
        };
        let t_made = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let slices = sample::sample_slices(&case, specs, &sl);
        let (sliced, cut) = sample::sampled_case(op, &case, specs, &sampling, &sl, &slices, &made)?;
        let t_cut = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let part = op.reference(&sliced, &cut)?;
        let t_part = t.elapsed().as_secs_f64();
        println!(
            "  sampled: {} of {} {}, made inputs {t_made:.3} s, sampled inputs {t_cut:.3} s, reference {t_part:.3} s ({} output values)",
            slices.len(),
            sl.count,
            sl.unit(),
            part.iter().map(Vec::len).sum::<usize>()
        );
        Ok(())
    };
    let run = || -> Result<(), kedge_core::CaseError> {
        let specs = op.tensors(&case)?;
        if sampled_only {
            println!(
                "{} {} {:?}: the whole case not run (--sampled-only)",
                case.op, case.dtype, case.ne
            );
        } else {
            whole(&specs)?;
        }
        sampled(&specs)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ggml_host_phases: {e}");
            ExitCode::from(1)
        }
    }
}
