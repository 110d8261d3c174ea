//! Libraries are opened first in a short-lived child process (`kedge probe-external`,
//! hidden), one per plugin and one for a ggml build: loading runs the library's initializers,
//! and reading a plugin's table follows its pointers, so a truncated file (SIGBUS), a table
//! pointing at bad memory (SIGSEGV) or an initializer that calls `exit(0)` would end kedge
//! itself, silently or with a signal. The child does all of it, reports each file before it
//! opens it, and says when it is done; only a library the child got through is loaded by
//! kedge (and its workers). A child that did not get through is a clear error naming the
//! file (exit 2), never a signal of kedge.
//!
//! The child's lines on stdout: `{"opening":PATH}` before each file, then
//! `{"done":true,"error":null|MESSAGE}`. A clean error (a missing symbol, a bad table) is
//! left to the in-process load to report, typed, exactly as before: the child got through it.

use super::{ExternalError, ExternalSpec};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "probe-external";

/// How long one library may take to load before it counts as hung (a ggml build with a CUDA
/// backend opens every GPU while registering).
const PROBE_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum ProbeLine {
    Opening { opening: PathBuf },
    Done { done: bool, error: Option<String> },
}

fn say(line: &ProbeLine) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string(line).unwrap_or_default());
    let _ = out.flush();
}

fn say_opening(path: &Path) {
    say(&ProbeLine::Opening {
        opening: path.to_path_buf(),
    });
}

/// The child: read one `ExternalSpec` line on stdin, load what it names as kedge would, and
/// report. Its exit status is the load's (0, or the error's).
pub fn child_main() -> i32 {
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return crate::exit::ENVIRONMENT;
    }
    let spec: ExternalSpec = match serde_json::from_str(&line) {
        Ok(s) => s,
        Err(e) => {
            say(&ProbeLine::Done {
                done: true,
                error: Some(format!("bad probe spec: {e}")),
            });
            return crate::exit::ENVIRONMENT;
        }
    };
    kedge_ggml::on_open(say_opening);
    for p in &spec.plugins {
        say_opening(p);
    }
    match spec.registry_here() {
        Ok(_) => {
            say(&ProbeLine::Done {
                done: true,
                error: None,
            });
            0
        }
        Err(e) => {
            say(&ProbeLine::Done {
                done: true,
                error: Some(e.to_string()),
            });
            e.exit_code()
        }
    }
}

/// What kind of library a probe is for, in messages.
fn what(spec: &ExternalSpec) -> &'static str {
    if spec.ggml.is_some() {
        "ggml build"
    } else {
        "plugin"
    }
}

/// A signal in words.
fn signal_words(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV (a segmentation fault: it read memory it does not own)",
        libc::SIGBUS => "SIGBUS (a bus error: a truncated or damaged library file?)",
        libc::SIGABRT => "SIGABRT (it aborted)",
        libc::SIGILL => "SIGILL (an illegal instruction: built for another CPU?)",
        libc::SIGFPE => "SIGFPE (an arithmetic fault)",
        libc::SIGKILL => "SIGKILL (killed: out of memory?)",
        _ => "",
    };
    if name.is_empty() {
        format!("signal {sig}")
    } else {
        name.to_string()
    }
}

/// Load each library of `spec` in a child process of `exe` first; `Ok` when every child got
/// through (the load itself may still report a typed error, which the caller's in-process
/// load will give).
pub(crate) fn check(spec: &ExternalSpec, exe: &Path) -> Result<(), ExternalError> {
    let mut units: Vec<ExternalSpec> = spec
        .plugins
        .iter()
        .map(|p| ExternalSpec {
            plugins: vec![p.clone()],
            ..ExternalSpec::default()
        })
        .collect();
    if let Some(g) = &spec.ggml {
        units.push(ExternalSpec {
            ggml: Some(g.clone()),
            ..ExternalSpec::default()
        });
    }
    for u in &units {
        check_one(u, exe)?;
    }
    Ok(())
}

fn check_one(unit: &ExternalSpec, exe: &Path) -> Result<(), ExternalError> {
    let named = unit
        .plugins
        .first()
        .cloned()
        .or_else(|| unit.ggml.as_ref().map(|g| g.dir.clone()))
        .unwrap_or_default();
    let spawn_err = |e: std::io::Error| ExternalError::ProbeFailed {
        path: named.clone(),
        msg: format!("could not start {} {SUBCOMMAND}: {e}", exe.display()),
    };
    let mut child = Command::new(exe)
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so Ctrl-C of kedge ends it (kedge kills its workers' groups).
        .process_group(0)
        .spawn()
        .map_err(spawn_err)?;
    let pid = child.id() as i32;
    crate::run::lifecycle::worker_started(pid);
    let line = serde_json::to_string(unit).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{line}");
    }
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut last_opened: Option<PathBuf> = None;
        let mut done: Option<Option<String>> = None;
        if let Some(out) = stdout {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                match serde_json::from_str::<ProbeLine>(&l) {
                    Ok(ProbeLine::Opening { opening }) => last_opened = Some(opening),
                    Ok(ProbeLine::Done { error, .. }) => done = Some(error),
                    Err(_) => {}
                }
            }
        }
        (last_opened, done)
    });
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut text);
        }
        text
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if t0.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Ok(None) | Err(_) => {
                // SAFETY: plain syscall on the group this process created.
                unsafe {
                    libc::killpg(pid, libc::SIGKILL);
                }
                let _ = child.wait();
                break None;
            }
        }
    };
    crate::run::lifecycle::worker_ended(pid);
    let (last_opened, done) = reader.join().unwrap_or((None, None));
    let stderr = err_reader.join().unwrap_or_default();
    let file = last_opened.unwrap_or_else(|| named.clone());
    let said = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(" (its last words: \"{}\")", l.trim()))
        .unwrap_or_default();
    let what = what(unit);
    let Some(status) = status else {
        return Err(ExternalError::LoadFailed {
            what,
            path: file,
            how: format!(
                "loading it did not finish within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
        });
    };
    if done.is_some() {
        // Through, with or without an error the in-process load will report, typed.
        return Ok(());
    }
    let how = match (status.signal(), status.code()) {
        (Some(sig), _) => format!("loading it killed the process with {}{said}", signal_words(sig)),
        (None, Some(code)) => format!(
            "the library ended the process (exit status {code}) while it was being loaded: its initializer (or kedge_plugin_info) exits{said}"
        ),
        (None, None) => format!("loading it ended the process ({status}){said}"),
    };
    Err(ExternalError::LoadFailed {
        what,
        path: file,
        how,
    })
}
