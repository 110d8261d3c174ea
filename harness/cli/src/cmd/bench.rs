use crate::args::{in_range, range, selection, AllocArg, CaseArgs, ExecArgs, ExtArgs, FilterArgs};
use kedge_runner::console::Out;
use kedge_runner::results::OutDir;
use kedge_runner::run::{BenchSpec, Executor, Gpus, RunEngine};
use kedge_runner::select::{profile, Suite};
use kedge_runner::workflow::bench::render;
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

pub fn run(a: Args) -> Result<Status, Error> {
    let ext = a.ext.spec(&a.filter.ops.names())?;
    let (reg, added) = ext.registry()?;
    for x in &added {
        note!("{}", x.note);
    }
    // The output directory is checked and locked before anything runs.
    let out = match &a.out {
        Some(dir) => Some(
            OutDir::open(dir)?
                .reading(a.cases.corpus.as_deref())
                .writes(&["bench.jsonl", "bench.md"])?,
        ),
        None => None,
    };
    let sel = a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc));
    // Without cases given, the smoke suite; a case named in `OP(vars)` form is looked for
    // among the default suite's (its boundaries too).
    let suite = if sel.names_cases() {
        Suite::Default
    } else {
        Suite::Smoke
    };
    let mut cases = sel.cases(&reg, suite, &profile("h200")?, None)?;
    // One worker: timings of cases sharing a GPU would measure each other.
    let mut opts = a.exec.engine();
    opts.jobs = 1;
    let engine = RunEngine::builder("bench")
        .external(ext)
        .options(opts)
        .bench(BenchSpec {
            warmup: a.warmup,
            reps: a.reps,
        })
        .gpus(Gpus::One(a.exec.device.unwrap_or(0)))
        .build()?;
    if !sel.is_explicit() {
        cases = sel.cases(&reg, suite, engine.limits(), None)?;
    }
    let mut results = Vec::new();
    let mut ex = engine.executor(None)?;
    ex.run(&cases, &mut |r| {
        results.push(r);
        Ok(())
    })?;
    let md = render(&results);
    Out::stdout().text(&md);
    if let Some(out) = &out {
        let lines: String = results
            .iter()
            .map(|r| format!("{}\n", r.to_line()))
            .collect();
        note!("wrote {}", out.write("bench.jsonl", &lines)?.display());
        note!("wrote {}", out.write("bench.md", &md)?.display());
    }
    let failures = results.iter().filter(|r| r.verdict.is_failure()).count();
    Ok(Status::failed_if(failures > 0))
}
