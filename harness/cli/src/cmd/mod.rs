//! One file per command: its flags and how they become a workflow request.

mod bench;
mod compare_runs;
mod fuzz;
mod gate;
mod limits;
mod list;
mod minimize;
mod plan;
mod report;
mod repro;
mod run;
mod selftest;
mod sweep;
mod worker;

use kedge_runner::Error;

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Print a device's limits: the live device, or a built-in profile (--profile).
    Limits(limits::Args),
    /// List ops, impls and their roles, params, boundaries with reachability.
    List(list::Args),
    /// Check the launches and buffers impls plan against a limits profile; no GPU needed.
    Plan(plan::Args),
    /// Run cases on the GPU (each in a worker process) and print their verdict lines.
    Run(run::Args),
    /// Run a suite: on a GPU every check; without one, the CPU-side checks.
    Sweep(sweep::Args),
    /// Reports from results.jsonl files (shards are merged): report.md, report.json, junit.xml.
    Report(report::Args),
    /// Exit 0 only when there are results and every failure in them is a known one.
    Gate(gate::Args),
    /// Shrink a failing case (keeping its verdict and detector), find the transition from
    /// both sides, and print the repro.
    Minimize(minimize::Args),
    /// Print a case's repro: test-backend-ops line(s) and command, kedge one-liner, and a
    /// standalone .cu file with its nvcc command.
    Repro(repro::Args),
    /// Calibration: every planted bug must be found by its detector, every fixed impl must
    /// pass, every incident must say what it must.
    Selftest(selftest::Args),
    /// Boundary-biased random cases; failures are shrunk and appended to a finds corpus.
    Fuzz(fuzz::Args),
    /// Kernel timing: each case judged, then timed after a warm-up (CUDA events around the
    /// impl's launches); median, spread, bytes moved and GB/s against the device's copy
    /// bandwidth, impls of one shape side by side.
    Bench(bench::Args),
    /// Wall time of sweeps side by side (from their sweep-summary.json files), as Markdown.
    CompareRuns(compare_runs::Args),
    /// A worker: reads its spec and case lines on stdin, writes verdict lines on stdout.
    #[command(hide = true)]
    Worker,
    /// Loads the libraries of one spec line on stdin and reports how far it got (kedge
    /// opens every plugin and ggml build this way first).
    #[command(hide = true, name = "probe-external")]
    ProbeExternal,
}

impl Command {
    /// Whether this process may start workers and temporary directories: then Ctrl-C and
    /// SIGTERM end them before kedge exits (a worker is itself watched from inside).
    pub(crate) fn supervises(&self) -> bool {
        !matches!(self, Command::Worker | Command::ProbeExternal)
    }

    /// The subcommand's name as typed.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Command::Limits(_) => "limits",
            Command::List(_) => "list",
            Command::Plan(_) => "plan",
            Command::Run(_) => "run",
            Command::Sweep(_) => "sweep",
            Command::Report(_) => "report",
            Command::Gate(_) => "gate",
            Command::Minimize(_) => "minimize",
            Command::Repro(_) => "repro",
            Command::Selftest(_) => "selftest",
            Command::Fuzz(_) => "fuzz",
            Command::Bench(_) => "bench",
            Command::CompareRuns(_) => "compare-runs",
            Command::Worker => "worker",
            Command::ProbeExternal => kedge_runner::external::probe::SUBCOMMAND,
        }
    }
}

/// Run a command; its exit status.
pub(crate) fn dispatch(cmd: Command) -> Result<i32, Error> {
    let status = match cmd {
        Command::Limits(a) => limits::run(a)?,
        Command::List(a) => list::run(a)?,
        Command::Plan(a) => plan::run(a)?,
        Command::Run(a) => run::run(a)?,
        Command::Sweep(a) => sweep::run(a)?,
        Command::Report(a) => report::run(a)?,
        Command::Gate(a) => gate::run(a)?,
        Command::Minimize(a) => minimize::run(a)?,
        Command::Repro(a) => repro::run(a)?,
        Command::Selftest(a) => selftest::run(a)?,
        Command::Fuzz(a) => fuzz::run(a)?,
        Command::Bench(a) => bench::run(a)?,
        Command::CompareRuns(a) => compare_runs::run(a)?,
        Command::Worker => return Ok(worker::run()),
        Command::ProbeExternal => return Ok(kedge_runner::external::probe::child_main()),
    };
    Ok(status.exit_code())
}
