//! Runs a CI example's jobs on this machine as a GitHub runner would (the runner the CLI tests
//! use, harness/cli/tests/cli/ci_runner.rs): every `run:` step is the workflow's own script.
//!
//! ```sh
//! cargo build --release -p kedge --example ci_local
//! target/release/examples/ci_local examples/ci/kedge-gpu.yml --state /tmp/ci \
//!     --kedge-dir target/release --env KEDGE_BASELINE=corpora/baselines/kedge-h200-native.jsonl
//! ```
//!
//! Flags: `--repo DIR` (the checkout the jobs link to; default: the current directory),
//! `--state DIR` (where the jobs' checkouts, artifacts and caches go; required), `--kedge-dir DIR`
//! (a built kedge that stands in for the steps that build it), `--env NAME=VALUE` (a workflow
//! `env` value, repeatable), `--pass NAME` (pass this environment variable to every step,
//! repeatable: an offline ggml archive, library paths), `--restore PATH=DIR` (DIR linked at PATH
//! in every job's checkout, as a cache hit restores it: a ggml build), `--job ID` (only these
//! jobs, repeatable). Prints every step and ends 0 when every job passed, 1 when one failed, 2
//! on bad flags.

#[path = "../tests/cli/ci_runner.rs"]
mod ci_runner;

use std::path::PathBuf;

fn usage(msg: &str) -> ! {
    eprintln!("ci_local: {msg}");
    eprintln!("usage: ci_local WORKFLOW --state DIR [--repo DIR] [--kedge-dir DIR] [--env NAME=VALUE]... [--pass NAME]... [--restore PATH=DIR]... [--job ID]...");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut opts = ci_runner::Options {
        repo: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        echo: true,
        ..ci_runner::Options::default()
    };
    let mut workflow = None;
    let mut state = None;
    while let Some(a) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let pair = |v: String, flag: &str| -> (String, String) {
            match v.split_once('=') {
                Some((k, x)) => (k.to_string(), x.to_string()),
                None => usage(&format!("{flag} takes NAME=VALUE, got {v}")),
            }
        };
        match a.as_str() {
            "--repo" => opts.repo = PathBuf::from(value("--repo")),
            "--state" => state = Some(PathBuf::from(value("--state"))),
            "--kedge-dir" => opts.kedge_dir = Some(PathBuf::from(value("--kedge-dir"))),
            "--env" => {
                let (k, v) = pair(value("--env"), "--env");
                opts.env.insert(k, v);
            }
            "--pass" => {
                let name = value("--pass");
                if let Ok(v) = std::env::var(&name) {
                    opts.extra_env.insert(name, v);
                }
            }
            "--restore" => {
                let (k, v) = pair(value("--restore"), "--restore");
                opts.restore.push((k, PathBuf::from(v)));
            }
            "--job" => opts.jobs.push(value("--job")),
            "-h" | "--help" => usage("runs a workflow's jobs here"),
            f if f.starts_with('-') => usage(&format!("unknown flag {f}")),
            w => {
                if workflow.replace(PathBuf::from(w)).is_some() {
                    usage("one workflow only");
                }
            }
        }
    }
    let Some(workflow) = workflow else {
        usage("no workflow given")
    };
    let Some(state) = state else {
        usage("--state DIR is required")
    };
    let abs = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    opts.workflow = abs(workflow);
    opts.repo = abs(opts.repo);
    opts.kedge_dir = opts.kedge_dir.map(abs);
    opts.restore = opts.restore.into_iter().map(|(k, d)| (k, abs(d))).collect();
    if let Err(e) = std::fs::create_dir_all(&state) {
        usage(&format!("{}: {e}", state.display()));
    }
    opts.state = abs(state);
    match ci_runner::run(&opts) {
        Ok(r) => {
            print!("{}", r.render());
            for (job, summary) in &r.summaries {
                let p = opts.state.join(format!(
                    "summary-{}.md",
                    job.replace([' ', '(', ')', ','], "")
                ));
                let _ = std::fs::write(&p, summary);
            }
            std::process::exit(if r.passed() { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("ci_local: {e}");
            std::process::exit(2);
        }
    }
}
