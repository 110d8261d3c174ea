use crate::args::{
    in_range, range, selection, AllocArg, CaseArgs, ExecArgs, ExtArgs, FilterArgs, ProfileArg,
    ResumeArgs,
};
use kedge_runner::events::{Events, Progress};
use kedge_runner::run::{DeviceList, Gpus, MaxTime, TimeBudget};
use kedge_runner::select::{Shard, Suite};
use kedge_runner::workflow::sweep::{sweep, SweepRequest};
use kedge_runner::{Error, Status};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// smoke, boundary, incidents, selftest or default (smoke + boundary).
    #[arg(default_value = "default")]
    suite: Suite,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    cases: CaseArgs,
    #[command(flatten)]
    alloc: AllocArg,
    #[command(flatten)]
    exec: ExecArgs,
    /// Output directory: plan.jsonl, results.jsonl, sweep-summary.json, reports, worker logs.
    #[arg(long, default_value = "kedge-out")]
    out: PathBuf,
    #[command(flatten)]
    resume: ResumeArgs,
    /// Profile for the CPU-side checks when no GPU is used.
    #[command(flatten)]
    profile: ProfileArg,
    /// Run only the CPU-side checks even if a GPU is present.
    #[arg(long)]
    cpu: bool,
    /// Run shard K of N (1-based); `kedge report` merges the shards' results.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Only the cases whose largest tensor has more elements than N: the ones a sweep with
    /// `--max-elements N` leaves out. A scheduled job sweeps these beside a pull request's
    /// `--max-elements N` tier instead of running that tier again; the suite's name carries
    /// both bounds, so a baseline knows its tier.
    #[arg(long, value_name = "N", value_parser = in_range(range::MAX_ELEMENTS.0, range::MAX_ELEMENTS.1))]
    over_elements: Option<u64>,
    /// GPUs to spread the sweep over, e.g. 0,1 (default: every GPU the driver shows;
    /// `--device N` is the list N). Each GPU has its own workers and pulls cases from one
    /// queue; a GPU lost mid-sweep hands its unfinished cases to the others.
    #[arg(long, value_name = "LIST", conflicts_with = "device")]
    devices: Option<DeviceList>,
    /// Stop starting cases after this long (90s, 5m, 1h30m), counted from the start: cases
    /// run in order of expected yield (both sides of each boundary crossing, those with a big
    /// case judged whole, or under a sanitizer with 1,024 host-side launches or more, after the
    /// others, then dtypes other than each op's first, then the rest), running ones finish, the
    /// rest are named in
    /// OUT/not-run.jsonl and the exit status is 6; --resume runs them.
    #[arg(long, value_name = "DURATION")]
    max_time: Option<MaxTime>,
    /// human: what happens on stderr as a person reads it (a progress bar on a terminal,
    /// a line per case otherwise); json: the same on stderr, and every event (plan ready,
    /// each case's verdict, GPUs lost, phase timings, the summary) as one JSON object a line
    /// on stdout, for programs.
    #[arg(long, value_enum, default_value_t = SweepFormat::Human)]
    format: SweepFormat,
    #[command(flatten)]
    ext: ExtArgs,
}

/// How `kedge sweep` tells what happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SweepFormat {
    Human,
    Json,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    // The time limit counts from here.
    let budget = a.max_time.map(|t| Arc::new(TimeBudget::new(t.duration())));
    let mut engine = a.exec.engine();
    engine.budget = budget;
    if a.format == SweepFormat::Json {
        engine.events = Events::console_and_json(Progress::auto());
    }
    let gpus = match (&a.devices, a.exec.device) {
        (Some(l), _) => Gpus::Listed(l.ordinals().to_vec()),
        (None, Some(d)) => Gpus::Listed(vec![d]),
        (None, None) => Gpus::All,
    };
    let req = SweepRequest {
        suite: a.suite,
        selection: a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc)),
        profile: a.profile.get()?,
        shard: a.shard,
        max_elements: a.exec.max_elements,
        over_elements: a.over_elements,
        tools: a.exec.tools()?,
        cpu: a.cpu,
        gpus,
        external: a.ext.spec(&a.filter.ops.names())?,
        engine,
        out: a.out,
        mode: a.resume.mode(),
        exe: None,
    };
    Ok(sweep(&req)?.status)
}
