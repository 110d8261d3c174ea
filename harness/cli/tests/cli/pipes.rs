//! A closed stdout (`kedge plan --suite boundary | head -1`) ends the command quietly with
//! the status it would have had: no panic, no error.

use crate::{cpu_results, root};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// Run kedge with stdout a pipe whose reader is already gone; (status, stderr).
fn into_closed_pipe(args: &[&str]) -> (i32, String) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe() fills two descriptors this test then owns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the descriptors are fresh and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let out = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(args)
        .current_dir(root())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .expect("run kedge");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn plan_into_a_closed_pipe_keeps_its_status() {
    let (rc, err) = into_closed_pipe(&["plan", "--suite", "boundary"]);
    // The boundary suite has launches past the limits: status 1, as with a reader.
    assert_eq!(rc, 1, "{err}");
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

#[test]
fn gate_and_list_into_a_closed_pipe_keep_their_status() {
    let dir = tempfile::tempdir().unwrap();
    let results = cpu_results(&dir.path().join("s"));
    let baseline = dir.path().join("known.jsonl");
    let (rc, err) = into_closed_pipe(&[
        "gate",
        "--write-baseline",
        baseline.to_str().unwrap(),
        results.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    let (rc, err) = into_closed_pipe(&[
        "gate",
        "--baseline",
        baseline.to_str().unwrap(),
        results.to_str().unwrap(),
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (rc, err) = into_closed_pipe(&[
        "gate",
        "--baseline",
        baseline.to_str().unwrap(),
        results.to_str().unwrap(),
        "--expect",
        "smoke",
    ]);
    assert_eq!(rc, 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (rc, err) = into_closed_pipe(&["list"]);
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The shell's `| head -1`: a reader that takes one line and goes.
#[test]
fn plan_piped_into_head_ends_quietly() {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} plan --suite boundary | head -1 >/dev/null",
            env!("CARGO_BIN_EXE_kedge")
        ))
        .current_dir(root())
        .output()
        .expect("sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
