use crate::args::{selection, AllocArg, CaseArgs, ExecArgs, ExtArgs, FilterArgs};
use kedge_runner::console::{detail_lines, result_line, summary_text, Out, Style};
use kedge_runner::results::{FileKind, OutDir, ResultsWriter};
use kedge_runner::run::{Executor, Gpus, RunEngine};
use kedge_runner::select::{profile, Suite};
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
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
pub enum RunFormat {
    Human,
    Json,
}

pub fn run(a: Args) -> Result<Status, Error> {
    let ext = a.ext.spec(&a.filter.ops.names())?;
    let (reg, added) = ext.registry()?;
    for x in &added {
        note!("{}", x.note);
    }
    let sel = a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc));
    // Without cases given, the smoke suite; a case named in `OP(vars)` form is looked for
    // among the default suite's (its boundaries too).
    let suite = if sel.names_cases() {
        Suite::Default
    } else {
        Suite::Smoke
    };
    // Bad input is bad input with or without a GPU: select once before looking for one.
    let mut cases = sel.cases(&reg, suite, &profile("h200")?, None)?;
    let tools = a.exec.tools()?;
    // A results file is written as every writer writes: its directory locked, never over an
    // input or a file of another kind, never through a link.
    let mut writer = match &a.results {
        Some(p) => {
            let command = "run --results";
            let (dir, name) = OutDir::for_file(p, command)?;
            let dir = dir.reading(a.cases.corpus.as_deref());
            let path = dir.check_target(&name, Some((FileKind::Results, command)))?;
            Some((ResultsWriter::append(&path)?, dir))
        }
        None => None,
    };
    let engine = RunEngine::builder("run")
        .external(ext)
        .options(a.exec.engine())
        .gpus(Gpus::One(a.exec.device.unwrap_or(0)))
        .build()?;
    if !sel.is_explicit() {
        cases = sel.cases(&reg, suite, engine.limits(), None)?;
    }
    let mut out = Out::stdout();
    let style = Style::stdout();
    let t0 = std::time::Instant::now();
    let mut all: Vec<kedge_core::CaseResult> = Vec::new();
    let mut failures = 0usize;
    let runs: Vec<Option<kedge_core::Tool>> = if tools.is_empty() {
        vec![None]
    } else {
        tools.into_iter().map(Some).collect()
    };
    for tool in runs {
        let mut ex = engine.executor(tool)?;
        ex.run(&cases, &mut |r| {
            failures += usize::from(r.verdict.is_failure());
            match a.format {
                RunFormat::Json => out.line(r.to_line()),
                RunFormat::Human => {
                    out.line(result_line(style, &r));
                    if r.verdict.is_failure() || !r.findings.is_empty() {
                        for l in detail_lines(&r) {
                            out.line(format!("{:>11}   {l}", ""));
                        }
                    }
                }
            }
            if let Some((w, _)) = writer.as_mut() {
                w.write(&r)?;
            }
            if a.format == RunFormat::Human {
                all.push(r);
            }
            Ok(())
        })?;
    }
    if a.format == RunFormat::Human {
        out.text(&summary_text(
            style,
            &all,
            Some(t0.elapsed().as_secs_f64() * 1000.0),
            usize::MAX,
            |_| String::new(),
        ));
    }
    Ok(Status::failed_if(failures > 0))
}
