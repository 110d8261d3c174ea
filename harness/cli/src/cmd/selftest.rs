use crate::args::{ExecArgs, OpsArg, ProfileArg, ResumeArgs};
use kedge_runner::console::Out;
use kedge_runner::select::{Filters, MaxElements, Selection};
use kedge_runner::workflow::selftest::{selftest, PlanOptions, SelftestRequest, DEFAULT_TOOLS};
use kedge_runner::workflow::sweep::GPU_MAX_ELEMENTS;
use kedge_runner::{Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Only the CPU part (incident plans and references); no GPU runs.
    #[arg(long)]
    cpu: bool,
    #[command(flatten)]
    ops: OpsArg,
    /// Profile the boundary cases are generated for without a GPU.
    #[command(flatten)]
    profile: ProfileArg,
    /// --sanitize: the tools fixed impls also run under (default memcheck,initcheck,racecheck).
    #[command(flatten)]
    exec: ExecArgs,
    /// results.jsonl and selftest.md go here.
    #[arg(long, default_value = "kedge-selftest")]
    out: PathBuf,
    /// An incidents corpus instead of the one built into kedge (corpora/incidents.jsonl).
    #[arg(long, value_name = "FILE")]
    incidents: Option<PathBuf>,
    #[command(flatten)]
    resume: ResumeArgs,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let reg = kedge_ops::registry();
    let ops: Vec<String> = if a.ops.ops.is_empty() {
        Vec::new()
    } else {
        let sel = Selection {
            ops: a.ops.list(),
            ..Selection::default()
        };
        Filters::resolve(&reg, &sel)?
            .ops
            .iter()
            .map(|o| o.name().to_string())
            .collect()
    };
    let tools = match a.exec.tools()? {
        t if t.is_empty() => DEFAULT_TOOLS.to_vec(),
        t => t,
    };
    let req = SelftestRequest {
        opts: PlanOptions {
            fixed_tools: tools,
            ops,
            seed: 1,
            max_fixed_elements: MaxElements::from_flag(a.exec.max_elements, Some(GPU_MAX_ELEMENTS)),
        },
        profile: a.profile.get()?,
        cpu: a.cpu,
        device: a.exec.device.unwrap_or(0),
        engine: a.exec.engine(),
        out: a.out,
        mode: a.resume.mode(),
        incidents: a.incidents,
        exe: None,
    };
    let o = selftest(&req)?;
    Out::stdout().text(&o.text);
    Ok(o.status)
}
