use crate::args::{in_range, range, selection, AllocArg, ExecArgs, FilterArgs, ProfileArg};
use kedge_runner::console::Out;
use kedge_runner::workflow::fuzz::{fuzz, FuzzEvent, FuzzRequest, UNSHRUNK_LISTED};
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    filter: FilterArgs,
    /// Allocation modes to draw from (default exact,guard).
    #[command(flatten)]
    alloc: AllocArg,
    /// Cases to generate.
    #[arg(long, default_value_t = 200, value_parser = in_range(range::CASES.0, range::CASES.1))]
    cases: usize,
    /// The generator's seed (each generated case draws its own input seed).
    #[arg(long, default_value_t = 1, value_parser = in_range(range::SEED.0, range::SEED.1))]
    fuzz_seed: u64,
    /// CPU-side checks only (launch contract against --profile).
    #[arg(long)]
    cpu: bool,
    #[command(flatten)]
    profile: ProfileArg,
    /// Predicate runs per failure when shrinking it.
    #[arg(long, default_value_t = 200, value_parser = in_range(range::BUDGET.0, range::BUDGET.1))]
    budget: usize,
    /// Shrink at most this many failures (the rest are listed, not shrunk).
    #[arg(long, default_value_t = 20, value_parser = in_range(range::MAX_SHRINKS.0, range::MAX_SHRINKS.1))]
    max_shrinks: usize,
    #[command(flatten)]
    exec: ExecArgs,
    /// Where finds are appended.
    #[arg(long, default_value = "corpora/fuzz-finds.jsonl")]
    finds: PathBuf,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let req = FuzzRequest {
        selection: selection(&a.filter, None, &a.alloc),
        cases: a.cases,
        fuzz_seed: a.fuzz_seed,
        cpu: a.cpu,
        profile: a.profile.get()?,
        budget: a.budget,
        max_shrinks: a.max_shrinks,
        max_elements: a.exec.max_elements,
        finds: a.finds.clone(),
        engine: a.exec.engine(),
        device: a.exec.device.unwrap_or(0),
        exe: None,
    };
    let mut out = Out::stdout();
    let o = fuzz(&req, &mut |e| match e {
        FuzzEvent::Unshrunk(r, why) => out.line(format!("{why}: {}", r.to_line())),
        FuzzEvent::NewFind(f) => out.line(format!(
            "find: {} {} ({}){}",
            f.case.label(),
            f.verdict,
            f.detector,
            f.transition
                .as_ref()
                .map(|t| format!("; {t}"))
                .unwrap_or_default()
        )),
    })?;
    note!(
        "fuzz: {} new finds appended to {} ({} already known, {} not shrunk{})",
        o.new_finds,
        a.finds.display(),
        o.known,
        o.unshrunk,
        if o.unshrunk > UNSHRUNK_LISTED {
            format!(
                "; the first {UNSHRUNK_LISTED} listed, the same --fuzz-seed makes the rest again"
            )
        } else {
            String::new()
        }
    );
    Ok(o.status)
}
