//! The `kedge` command line: flags in, a runner workflow, output and an exit status out.
//! Every error knows its exit status (README, "Exit statuses").
//!
//! The binary is `main` below. The parser is public so a command line can be checked without
//! running it (`Cli::try_parse_from`): the tests check every `kedge` line of the CI examples
//! that way.

#![warn(missing_docs)]

mod args;
mod cmd;

use clap::Parser;
use std::process::ExitCode;

/// kedge's version and the commit it was built from (harness/cli/build.rs).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KEDGE_COMMIT"),
    ")"
);

/// kedge's command line.
#[derive(Parser)]
#[command(
    name = "kedge",
    version = VERSION,
    about = "Kernel conformance and fuzzing harness: finds kernels that break at the edges"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: cmd::Command,
}

impl Cli {
    /// The subcommand's name (`sweep`, `gate`, ...).
    pub fn command_name(&self) -> &'static str {
        self.cmd.name()
    }
}

/// Parse the process's arguments, run the command, and end with its exit status.
pub fn main() -> ExitCode {
    kedge_runner::run::lifecycle::ignore_file_size_signal();
    clamp_env_threads();
    kedge_runner::provenance::set_build(env!("CARGO_PKG_VERSION"), env!("KEDGE_COMMIT"));
    let cli = Cli::parse();
    if cli.cmd.supervises() {
        kedge_runner::run::lifecycle::handle_signals();
    }
    let code = match cmd::dispatch(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    };
    // What the command said did not all reach its reader (a full disk, not a closed pipe):
    // the environment failed it, whatever it found.
    let code = if kedge_runner::console::failed_stream() {
        kedge_runner::exit::ENVIRONMENT
    } else {
        code
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Thread counts from the environment are clamped to the CPUs this process may use, with a
/// warning: `RAYON_NUM_THREADS=100000` would make the thread pool fail to start (a panic in
/// a thread, then a hang), and more threads than CPUs buy nothing here. Called first, before
/// any thread or worker starts (workers inherit the clamped value).
fn clamp_env_threads() {
    const VAR: &str = "RAYON_NUM_THREADS";
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(asked) = std::env::var(VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u128>().ok())
    else {
        return;
    };
    if asked > cpus as u128 {
        kedge_runner::note!(
            "warning: {VAR}={asked} is more than the {cpus} CPUs this process may use; using {cpus}"
        );
        std::env::set_var(VAR, cpus.to_string());
    }
}

/// The error, then each cause it does not already say.
fn report(e: &kedge_runner::Error) {
    let top = e.to_string();
    kedge_runner::note!("error: {top}");
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !top.contains(&text) {
            kedge_runner::note!("  caused by: {text}");
        }
        cause = c.source();
    }
}
