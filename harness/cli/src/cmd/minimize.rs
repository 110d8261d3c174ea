use crate::args::{in_range, range, ExecArgs, ExtArgs, ProfileArg};
use kedge_runner::console::Out;
use kedge_runner::results::OutDir;
use kedge_runner::run::{Gpus, Progress, RunEngine};
use kedge_runner::workflow::case_input;
use kedge_runner::workflow::minimize::{found_transition, minimize, render, Probes};
use kedge_runner::workflow::repro::INPUTS_FILE;
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A case (JSON line), a verdict line from results.jsonl (its case and outcome), or a file
    /// whose first case line is either.
    input: String,
    /// Use the CPU-side checks as the predicate (launch contract against --profile): finds
    /// launch-limit failures without a GPU.
    #[arg(long)]
    cpu: bool,
    /// Profile for --cpu and for the repro's limit comment.
    #[command(flatten)]
    profile: ProfileArg,
    /// Most predicate runs (each is one case run; cached, never repeated).
    #[arg(long, default_value_t = 400, value_parser = in_range(range::BUDGET.0, range::BUDGET.1))]
    budget: usize,
    #[command(flatten)]
    exec: ExecArgs,
    /// Write minimize.json (every probe), repro.txt and repro.cu here.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    ext: ExtArgs,
}

pub fn run(a: Args) -> Result<Status, Error> {
    let ext = a.ext.spec(&[])?;
    let (reg, _) = ext.registry()?;
    let prof = a.profile.get()?;
    let (case, given) = case_input(&a.input, &reg)?;
    let out = match &a.out {
        Some(dir) => Some(
            OutDir::open(dir)?
                .reading(Some(std::path::Path::new(&a.input)))
                .writes(&["minimize.json", "repro.txt", "repro.cu", INPUTS_FILE])?,
        ),
        None => None,
    };
    let report = if a.cpu {
        // A GPU result's outcome (driver) differs from the CPU's (launch-contract): only the
        // case is taken from it.
        if let Some(r) = &given {
            note!(
                "--cpu: shrinking on the launch contract; the given result ({} / {}) is not compared",
                r.verdict,
                r.detector
            );
        }
        minimize(&reg, &case, None, &prof, a.budget, Probes::Cpu(&prof))?
    } else {
        let tools = a.exec.tools()?;
        let tool = tools
            .first()
            .copied()
            .or_else(|| given.as_ref().and_then(|r| r.under.tool()));
        let engine = RunEngine::builder("minimize")
            .external(ext)
            .options(a.exec.engine())
            .gpus(Gpus::One(a.exec.device.unwrap_or(0)))
            .keep_workers(false)
            .build()?;
        let mut ex = engine.executor(tool)?;
        ex.set_progress(Progress::Off);
        minimize(
            &reg,
            &case,
            given.as_ref(),
            engine.limits(),
            a.budget,
            Probes::Gpu(&mut ex),
        )?
    };
    Out::stdout().text(&format!("{}\n", render(&report)));
    if let Some(dir) = &out {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        note!("wrote {}", dir.write("minimize.json", &json)?.display());
    }
    let m = &report.minimized;
    super::repro::show(
        &reg,
        &m.case,
        &prof,
        Some(&m.result),
        found_transition(&report),
        out.as_ref(),
    )?;
    Ok(Status::Ok)
}
