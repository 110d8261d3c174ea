//! How workers and temporary directories end when kedge does.
//!
//! - Ctrl-C, SIGTERM or SIGHUP: one thread of the supervising process waits for the signal,
//!   kills every live worker's process group (compute-sanitizer and its child included: each
//!   worker leads its own group, so a terminal's Ctrl-C does not reach it directly), removes
//!   kedge's temporary directories, says what was kept, and exits 130 (SIGINT) or 128 + the
//!   signal. Results already written stay: a sweep continues with `--resume`.
//! - The supervising process killed outright (`kill -9`, an OOM kill): no code of its own runs,
//!   so each worker watches it: a thread in the worker polls the supervisor's pid and ends the
//!   worker (a kernel that hangs included) within a fraction of a second once it is gone.
//! - A normal end: a temporary work directory is removed, or kept and named when a case in it
//!   failed (its worker logs and sanitizer XML are what a person reads next).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The environment variable that tells a worker which process supervises it.
pub(crate) const SUPERVISOR_PID_ENV: &str = "KEDGE_SUPERVISOR_PID";

static LIVE_WORKERS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Held while a line or a file is written: a signal's exit waits for it, so what is written
/// is whole (`hold_exit`).
static WRITING: Mutex<()> = Mutex::new(());
/// What a command wants said when a signal ends it (fuzz: the finds written so far).
static ON_SIGNAL: Mutex<Vec<Box<dyn Fn() -> String + Send>>> = Mutex::new(Vec::new());

/// While the guard lives, a signal's exit waits (up to two seconds) for the write it covers to
/// finish: a results or finds line is written whole, a file replaced or not.
pub(crate) fn hold_exit() -> std::sync::MutexGuard<'static, ()> {
    WRITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Add a line to what is said when a signal ends this process (how much was written, and
/// where).
pub(crate) fn on_signal(note: impl Fn() -> String + Send + 'static) {
    if let Ok(mut v) = ON_SIGNAL.lock() {
        v.push(Box::new(note));
    }
}

/// Wait for a write in progress to finish, up to `limit`.
fn wait_for_writes(limit: Duration) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        match WRITING.try_lock() {
            Ok(g) => {
                // Keep it: no new write starts while the process exits.
                std::mem::forget(g);
                return;
            }
            Err(std::sync::TryLockError::Poisoned(p)) => {
                std::mem::forget(p.into_inner());
                return;
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
static TEMP_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A worker started: its process group is ended on a signal.
pub(crate) fn worker_started(pgid: i32) {
    if let Ok(mut v) = LIVE_WORKERS.lock() {
        v.push(pgid);
    }
}

/// A worker was reaped.
pub(crate) fn worker_ended(pgid: i32) {
    if let Ok(mut v) = LIVE_WORKERS.lock() {
        v.retain(|&p| p != pgid);
    }
}

/// Workers alive now (for tests and the interrupt message).
pub fn live_workers() -> usize {
    LIVE_WORKERS.lock().map_or(0, |v| v.len())
}

/// Kill every live worker's process group. Returns how many there were.
fn kill_every_worker() -> usize {
    let pids: Vec<i32> = LIVE_WORKERS
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    kill_groups(&pids);
    pids.len()
}

fn kill_groups(pids: &[i32]) {
    for &p in pids {
        // SAFETY: plain syscall; each pid leads a process group this process created.
        unsafe {
            libc::killpg(p, libc::SIGKILL);
        }
    }
}

/// A temporary work directory (`kedge-COMMAND-XXXX` in the system's temporary directory):
/// removed when the last holder drops it, unless a case failed in it, and removed on a
/// signal either way.
#[derive(Debug)]
pub(crate) struct TempWorkDir {
    path: PathBuf,
    keep: AtomicBool,
}

impl TempWorkDir {
    /// Create `kedge-{command}-XXXXXX` under the temporary directory.
    pub(crate) fn create(command: &str) -> std::io::Result<Arc<TempWorkDir>> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("kedge-{command}-"))
            .tempdir()?;
        let path = dir.keep();
        if let Ok(mut v) = TEMP_DIRS.lock() {
            v.push(path.clone());
        }
        Ok(Arc::new(TempWorkDir {
            path,
            keep: AtomicBool::new(false),
        }))
    }
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
    /// A case failed: keep the directory and name it at the end.
    pub(crate) fn keep(&self) {
        self.keep.store(true, Ordering::Relaxed);
    }
}

impl Drop for TempWorkDir {
    fn drop(&mut self) {
        if let Ok(mut v) = TEMP_DIRS.lock() {
            v.retain(|p| p != &self.path);
        }
        if self.keep.load(Ordering::Relaxed) {
            crate::note!(
                "worker logs of the failing cases kept in {} (remove it when done)",
                self.path.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn remove_temp_dirs() -> usize {
    let dirs: Vec<PathBuf> = TEMP_DIRS
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    dirs.len()
}

/// A file-size limit (`ulimit -f`) makes a write past it fail with `EFBIG`, which kedge
/// reports as a write error (exit 5, what was written so far kept), instead of the kernel
/// ending kedge with SIGXFSZ. Call first, before any thread starts.
pub fn ignore_file_size_signal() {
    // SAFETY: sets one signal's disposition to "ignore"; no handler code runs.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// In the supervising process, before any other thread starts: block SIGINT, SIGTERM and
/// SIGHUP in every thread and take them in one thread that ends the workers, removes the
/// temporary directories and exits. (Children get an empty signal mask: the standard
/// library's process spawning resets it.)
pub fn handle_signals() {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the calling thread, before
    // other threads exist, so every thread spawned later inherits the mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    let spawned = std::thread::Builder::new()
        .name("kedge-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid, initialised signal set; `sig` an out-parameter.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            let workers = kill_every_worker();
            wait_for_writes(Duration::from_secs(2));
            let dirs = remove_temp_dirs();
            let name = match sig {
                libc::SIGINT => "interrupted (SIGINT)",
                libc::SIGTERM => "terminated (SIGTERM)",
                _ => "hung up (SIGHUP)",
            };
            crate::note!(
                "{name}: {workers} worker(s) stopped, {dirs} temporary director{} removed; results written so far are kept (a sweep continues with --resume)",
                if dirs == 1 { "y" } else { "ies" }
            );
            if let Ok(notes) = ON_SIGNAL.lock() {
                for n in notes.iter() {
                    crate::note!("{}", n());
                }
            }
            std::process::exit(if sig == libc::SIGINT { 130 } else { 128 + sig });
        });
    if spawned.is_err() {
        // No thread: give the signals back their default action rather than ignore them.
        // SAFETY: as above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

/// In a worker: end this process when its supervisor is gone (`kill -9` of kedge). Polls
/// the supervisor's pid, named in the environment by the supervisor that started it.
pub(crate) fn watch_supervisor() {
    let Some(pid) = std::env::var(SUPERVISOR_PID_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|&p| p > 1)
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("kedge-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: signal 0 only checks that the process exists.
            let gone = unsafe { libc::kill(pid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                // SAFETY: ends the process at once, without unwinding other threads (one may
                // be inside a hung kernel launch).
                unsafe { libc::_exit(ORPHANED_EXIT) }
            }
        });
}

/// A worker's exit status when its supervisor is gone: as if it had been killed (128 + 9).
const ORPHANED_EXIT: i32 = 137;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_work_dir_is_removed_unless_a_case_failed_in_it() {
        let d = TempWorkDir::create("lifecycle-test").expect("tempdir");
        let p = d.path().to_path_buf();
        assert!(p.is_dir());
        assert!(p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kedge-lifecycle-test-")));
        std::fs::write(p.join("worker-0.log"), "x").expect("write");
        drop(d);
        assert!(!p.exists());

        let d = TempWorkDir::create("lifecycle-test").expect("tempdir");
        let p = d.path().to_path_buf();
        d.keep();
        drop(d);
        assert!(p.is_dir(), "a failing run's directory is kept");
        std::fs::remove_dir_all(&p).expect("cleanup");
    }

    #[test]
    fn killing_a_worker_ends_its_process_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        worker_started(pid);
        assert!(LIVE_WORKERS.lock().expect("lock").contains(&pid));
        // Only this test's group: other tests may have workers of their own.
        kill_groups(&[pid]);
        let status = child.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        worker_ended(pid);
        assert!(!LIVE_WORKERS.lock().expect("lock").contains(&pid));
    }
}
