//! The `kedge` command line: flags in, a runner workflow, output and an exit status out.
//! Every error knows its exit status (README, "Exit statuses").

mod args;
mod cmd;

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kedge",
    version,
    about = "Kernel conformance and fuzzing harness: finds kernels that break at the edges"
)]
struct Cli {
    #[command(subcommand)]
    cmd: cmd::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cmd::dispatch(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
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
