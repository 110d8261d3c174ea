use crate::args::{in_range, range, ExecArgs, ExtArgs, ProfileArg};
use kedge_runner::console::Out;
use kedge_runner::workflow::minimize::{
    found_transition, render, run as minimize, MinimizeRequest,
};
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
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

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let prof = a.profile.get()?;
    let outcome = minimize(&MinimizeRequest {
        input: a.input,
        cpu: a.cpu,
        profile: prof.clone(),
        budget: a.budget,
        tool: if a.cpu {
            None
        } else {
            a.exec.tools()?.first().copied()
        },
        external: a.ext.spec(&[])?,
        engine: a.exec.engine(),
        device: a.exec.device.unwrap_or(0),
        out: a.out,
    })?;
    let report = &outcome.report;
    Out::stdout().text(&format!("{}\n", render(report)));
    for p in &outcome.written {
        note!("wrote {}", p.display());
    }
    let m = &report.minimized;
    super::repro::show(
        &outcome.registry,
        &m.case,
        &prof,
        Some(&m.result),
        found_transition(report),
        outcome.out.as_ref(),
    )?;
    Ok(Status::Ok)
}
