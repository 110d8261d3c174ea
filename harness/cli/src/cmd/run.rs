use crate::args::{selection, AllocArg, CaseArgs, ExecArgs, ExtArgs, FilterArgs};
use kedge_runner::console::{detail_lines, result_line, summary_text, Out, Style};
use kedge_runner::workflow::run::{run as run_cases, RunRequest};
use kedge_runner::{Error, Status};
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
    /// Append results to this file as well.
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// human: one line per result as it finishes (coloured on a terminal unless NO_COLOR),
    /// what failed and how to re-run it, and the failures again at the end; json: one
    /// verdict line (JSON) per result, as results.jsonl holds them.
    #[arg(long, value_enum, default_value_t = RunFormat::Human)]
    format: RunFormat,
    #[command(flatten)]
    ext: ExtArgs,
}

/// How `kedge run` prints its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RunFormat {
    Human,
    Json,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let req = RunRequest {
        external: a.ext.spec(&a.filter.ops.names())?,
        selection: a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc)),
        tools: a.exec.tools()?,
        engine: a.exec.engine(),
        device: a.exec.device.unwrap_or(0),
        results: a.results,
    };
    let mut out = Out::stdout();
    let style = Style::stdout();
    let mut all: Vec<kedge_core::CaseResult> = Vec::new();
    let outcome = run_cases(&req, &mut |r| match a.format {
        RunFormat::Json => out.line(r.to_line()),
        RunFormat::Human => {
            out.line(result_line(style, r));
            if r.verdict.is_failure() || !r.findings.is_empty() {
                for l in detail_lines(r) {
                    out.line(format!("{:>11}   {l}", ""));
                }
            }
            all.push(r.clone());
        }
    })?;
    if a.format == RunFormat::Human {
        out.text(&summary_text(
            style,
            &all,
            Some(outcome.wall_ms),
            usize::MAX,
            |_| String::new(),
        ));
    }
    Ok(outcome.status)
}
