use kedge_runner::results::{OutDir, ResultSet};
use kedge_runner::workflow::sweep::write_reports;
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// results.jsonl files (shards are merged; the same case run again keeps its last line).
    #[arg(required = true)]
    results: Vec<PathBuf>,
    #[arg(long, default_value = "kedge-out")]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<Status, Error> {
    let set = ResultSet::load(&a.results)?;
    for t in &set.torn {
        note!("{t}");
    }
    let out = OutDir::open(&a.out)?;
    write_reports(&out, &set)?;
    Ok(Status::Ok)
}
