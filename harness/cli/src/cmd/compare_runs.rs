use kedge_runner::console::Out;
use kedge_runner::workflow::compare_runs::{read, render};
use kedge_runner::{Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// sweep-summary.json files.
    #[arg(required = true)]
    summaries: Vec<PathBuf>,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let s = read(&a.summaries)?;
    Out::stdout().text(&render(&s));
    Ok(Status::Ok)
}
