//! One writer per output directory, and results never replaced unasked, through the binary.

use crate::kedge;
use std::os::fd::AsRawFd;

#[test]
fn a_directory_held_by_another_kedge_is_refused_with_status_5() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".kedge.lock"), "pid 4242: kedge sweep\n").unwrap();
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join(".kedge.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let d = dir.path().to_str().unwrap();
    for args in [
        &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", d][..],
        &["selftest", "--cpu", "-o", "rms_norm", "--out", d][..],
    ] {
        let (rc, _, err) = kedge(args);
        assert_eq!(rc, 5, "{args:?}: {err}");
        assert!(
            err.contains("is in use by another kedge (pid 4242: kedge sweep)"),
            "{err}"
        );
    }
    drop(lock);
    let (rc, _, err) = kedge(&["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", d]);
    assert_eq!(rc, 4, "{err}");
}

#[test]
fn results_are_continued_with_resume_and_replaced_with_force_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let sweep = |extra: &[&str]| {
        let mut a = vec!["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", d];
        a.extend_from_slice(extra);
        kedge(&a)
    };
    let (rc, _, err) = sweep(&[]);
    assert_eq!(rc, 4, "{err}");
    let results = dir.path().join("results.jsonl");
    let first = std::fs::read_to_string(&results).unwrap();
    let (rc, _, err) = sweep(&[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("--resume") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&results).unwrap(), first);
    // Killed after two results and half of the third: --resume runs the rest.
    let lines: Vec<&str> = first.lines().collect();
    std::fs::write(
        &results,
        format!("{}\n{}\n{}", lines[0], lines[1], &lines[2][..10]),
    )
    .unwrap();
    let (rc, _, err) = sweep(&["--resume"]);
    assert_eq!(rc, 4, "{err}");
    assert!(err.contains("cut off"), "{err}");
    assert!(
        err.contains(&format!(
            "2 cases already finished, {} to run",
            lines.len() - 2
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "cpu: {} of {} cases have results",
            lines.len(),
            lines.len()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&results).unwrap().lines().count(),
        lines.len()
    );
    let (rc, _, err) = sweep(&["--force"]);
    assert_eq!(rc, 4, "{err}");
    let (rc, _, err) = sweep(&["--force", "--resume"]);
    assert_eq!(rc, 2, "{err}");
}
