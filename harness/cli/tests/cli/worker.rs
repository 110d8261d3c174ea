//! `kedge worker` (hidden) reads a typed `WorkerSpec` line first: the GPU and the impls of the
//! command line (plugins, source kernels) that its registry must hold.

use kedge_runner::external::ExternalSpec;
use kedge_runner::run::{FatalKind, WorkerMsg, WorkerSpec};
use std::io::Write;
use std::process::{Command, Stdio};

/// Start a worker, write `input`, read its first message.
fn worker(input: &str) -> (i32, WorkerMsg) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .arg("worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker");
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or_default();
    let msg = serde_json::from_str(first).unwrap_or_else(|e| panic!("{first}: {e}"));
    (out.status.code().unwrap_or(-1), msg)
}

#[test]
fn the_worker_builds_its_registry_from_the_spec() {
    let mut ext = ExternalSpec::default();
    ext.plugins.push("/nonexistent/libplug.so".into());
    let (rc, msg) = worker(&format!("{}\n", WorkerSpec::new(0, ext).to_line()));
    let WorkerMsg::Fatal { message, kind } = msg else {
        panic!("{msg:?}")
    };
    assert_eq!(kind, FatalKind::Setup);
    assert!(message.contains("/nonexistent/libplug.so"), "{message}");
    assert_eq!(rc, 5);
}

#[test]
fn a_bad_or_missing_spec_is_refused() {
    for input in ["", "{\"device\":0}\n", "--device 0\n"] {
        let (rc, msg) = worker(input);
        assert!(
            matches!(
                msg,
                WorkerMsg::Fatal {
                    kind: FatalKind::Setup,
                    ..
                }
            ),
            "{input:?}: {msg:?}"
        );
        assert_eq!(rc, 5);
    }
    let mut s = WorkerSpec::new(0, ExternalSpec::default());
    s.protocol = 99;
    let (_, msg) = worker(&format!("{}\n", s.to_line()));
    let WorkerMsg::Fatal { message, .. } = msg else {
        panic!("{msg:?}")
    };
    assert!(message.contains("protocol 99"), "{message}");
}

#[test]
fn without_a_driver_the_worker_says_so() {
    if kedge_core::cuda::driver_present() {
        return;
    }
    let (rc, msg) = worker(&format!(
        "{}\n",
        WorkerSpec::new(0, ExternalSpec::default()).to_line()
    ));
    assert!(
        matches!(
            msg,
            WorkerMsg::Fatal {
                kind: FatalKind::NoDriver,
                ..
            }
        ),
        "{msg:?}"
    );
    assert_eq!(rc, 3);
}
