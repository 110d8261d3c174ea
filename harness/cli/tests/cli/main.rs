//! The `kedge` binary's contract, through the real binary, on a machine without a GPU: exit
//! statuses, selection, output directories, pipes, the worker's spec. One test binary.

mod basics;
mod ci_examples;
mod ci_runner;
mod devices;
mod events;
mod exit_status;
mod findings_script;
mod ggml;
mod nothing_lost;
mod out_dir;
mod pipes;
mod provenance;
mod worker;
mod workflows;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root: commands run there, as a user runs them.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run kedge in the repository root: (status, stdout, stderr).
pub fn kedge(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run kedge");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A CPU sweep of rms_norm's boundary cases into `dir`: its results.jsonl.
pub fn cpu_results(dir: &Path) -> PathBuf {
    let (rc, _, err) = kedge(&[
        "sweep",
        "boundary",
        "--cpu",
        "-o",
        "rms_norm",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(rc, 4, "{err}");
    dir.join("results.jsonl")
}
