use crate::args::{in_range, range, selection, AllocArg, CaseArgs, ExecArgs, ExtArgs, FilterArgs};
use kedge_runner::console::Out;
use kedge_runner::workflow::bench::{bench, BenchRequest};
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    cases: CaseArgs,
    #[command(flatten)]
    alloc: AllocArg,
    #[command(flatten)]
    exec: ExecArgs,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 5, value_parser = in_range(range::WARMUP.0, range::WARMUP.1))]
    warmup: u32,
    /// Timed runs; the median is reported, with min and max.
    #[arg(long, default_value_t = 50, value_parser = in_range(range::REPS.0, range::REPS.1))]
    reps: u32,
    /// Write bench.jsonl (every result, its times in `observed.bench`) and bench.md here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    ext: ExtArgs,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let outcome = bench(&BenchRequest {
        external: a.ext.spec(&a.filter.ops.names())?,
        selection: a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc)),
        engine: a.exec.engine(),
        device: a.exec.device.unwrap_or(0),
        warmup: a.warmup,
        reps: a.reps,
        out: a.out,
    })?;
    Out::stdout().text(&outcome.markdown);
    for p in &outcome.written {
        note!("wrote {}", p.display());
    }
    Ok(outcome.status)
}
