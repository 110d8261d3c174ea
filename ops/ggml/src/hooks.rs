//! ggml's own words before it dies.
//!
//! ggml reports a failure by logging it (`GGML_LOG_ERROR("CUDA error: invalid argument")`,
//! then where: "in function ... at common.cuh:1668") and then calling `ggml_abort`, which ends in
//! `abort()`. A worker that runs ggml wants both in its result before the process is gone. ggml
//! offers two process-global hooks for that, `ggml_log_set` and `ggml_set_abort_callback`; this
//! module installs one trampoline for each:
//!
//! - the log trampoline is installed when a build is loaded, so every message from then on is
//!   seen: warnings and errors go into a ring of the last [`RING_LINES`] lines, and every message
//!   goes to the caller's `on_log` if one is installed, else warnings and errors go to stderr
//!   (ggml's own default prints every level; the quieter default keeps test output readable);
//! - the abort trampoline, installed by [`Ggml::install_hooks`](crate::Ggml::install_hooks),
//!   hands the caller's `on_abort` an [`AbortReport`]: ggml's abort message plus the ring, that
//!   is, the lines that said what went wrong. ggml calls `abort()` when the hook returns.
//!
//! The hooks are plain `fn` pointers, not closures: they are process-global, called from
//! whatever thread ggml is on (CPU worker threads, CUDA host callbacks), and called during a
//! crash, so they can hold no state of their own. A panic in a hook is caught and dropped.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::io::Write;
use std::sync::Mutex;

use crate::types::LogLevel;

/// How many warning and error lines the ring keeps.
pub(crate) const RING_LINES: usize = 64;

/// One message from ggml's logger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The level; a continuation gets the level of the message it continues.
    pub(crate) level: LogLevel,
    /// The text as ggml wrote it, without the trailing newline.
    pub text: String,
}

/// What the abort hook receives.
#[derive(Debug)]
pub struct AbortReport<'a> {
    /// `ggml_abort`'s message: "FILE:LINE: what" (for a CUDA error, "common.cuh:..: CUDA error").
    pub message: &'a str,
    /// The last warning and error lines before the abort, oldest first.
    pub recent: &'a [LogLine],
}

impl fmt::Display for AbortReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ggml abort: {}", self.message)?;
        for l in self.recent {
            write!(f, "\n  {:?}: {}", l.level, l.text)?;
        }
        Ok(())
    }
}

/// A log hook: every message ggml logs, with its level (continuations as [`LogLevel::Cont`]).
pub type LogHook = fn(LogLevel, &str);
/// An abort hook: called once, on the aborting thread, before ggml calls `abort()`.
pub type AbortHook = fn(&AbortReport<'_>);

#[derive(Default)]
struct Ring {
    /// Each line with its sequence number, so a caller can ask what was logged since a mark.
    lines: VecDeque<(u64, LogLine)>,
    next: u64,
    /// The level of the last message, so a `Cont` joins the line it continues.
    last: Option<LogLevel>,
}

struct Hooks {
    on_log: Option<LogHook>,
    on_abort: Option<AbortHook>,
}

static RING: Mutex<Ring> = Mutex::new(Ring {
    lines: VecDeque::new(),
    next: 0,
    last: None,
});
static HOOKS: Mutex<Hooks> = Mutex::new(Hooks {
    on_log: None,
    on_abort: None,
});
/// While a build is being loaded: every message, so a backend module that fails to load can be
/// reported with ggml's reason.
static CAPTURE: Mutex<Option<Vec<LogLine>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A hook that panicked while holding a lock leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn set_hooks(on_log: Option<LogHook>, on_abort: Option<AbortHook>) {
    let mut h = lock(&HOOKS);
    h.on_log = on_log;
    h.on_abort = on_abort;
}

/// The warning and error lines ggml logged since the build was loaded (or since
/// [`clear_recent_log`]), at most the last 64, oldest first: what an [`AbortReport`] carries.
pub fn recent_log() -> Vec<LogLine> {
    lock(&RING).lines.iter().map(|(_, l)| l.clone()).collect()
}

/// A mark in the ring, for [`since`].
pub(crate) fn mark() -> u64 {
    lock(&RING).next
}

/// The warning and error lines logged after `mark` (those still in the ring).
pub(crate) fn since(mark: u64) -> Vec<String> {
    lock(&RING)
        .lines
        .iter()
        .filter(|(s, _)| *s >= mark)
        .map(|(_, l)| l.text.clone())
        .collect()
}

/// Forgets the lines [`recent_log`] holds (a worker does this between cases so a report names
/// only its own case).
pub fn clear_recent_log() {
    let mut r = lock(&RING);
    r.lines.clear();
    r.last = None;
}

pub(crate) fn start_capture() {
    *lock(&CAPTURE) = Some(Vec::new());
}

pub(crate) fn take_capture() -> Vec<LogLine> {
    lock(&CAPTURE).take().unwrap_or_default()
}

/// Records one message: ring, capture, then the hook or stderr.
pub(crate) fn record(level: LogLevel, text: &str) {
    let trimmed = text.strip_suffix('\n').unwrap_or(text);
    let effective = {
        let mut r = lock(&RING);
        let effective = match level {
            LogLevel::Cont => r.last.unwrap_or(LogLevel::Info),
            l => l,
        };
        if effective >= LogLevel::Warn && effective != LogLevel::Cont {
            let joined = level == LogLevel::Cont && r.last == Some(effective);
            match (joined, r.lines.back_mut()) {
                (true, Some((_, prev))) => prev.text.push_str(trimmed),
                _ => {
                    if r.lines.len() == RING_LINES {
                        r.lines.pop_front();
                    }
                    let seq = r.next;
                    r.next += 1;
                    r.lines.push_back((
                        seq,
                        LogLine {
                            level: effective,
                            text: trimmed.to_string(),
                        },
                    ));
                }
            }
        }
        if level != LogLevel::Cont {
            r.last = Some(level);
        }
        effective
    };
    if let Some(c) = lock(&CAPTURE).as_mut() {
        c.push(LogLine {
            level: effective,
            text: trimmed.to_string(),
        });
    }
    let hook = lock(&HOOKS).on_log;
    match hook {
        Some(f) => {
            let _ = std::panic::catch_unwind(|| f(level, text));
        }
        None if effective >= LogLevel::Warn => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
        None => {}
    }
}

/// `ggml_log_callback`.
pub(crate) unsafe extern "C" fn log_trampoline(
    level: c_int,
    text: *const c_char,
    _user: *mut c_void,
) {
    if text.is_null() {
        return;
    }
    // SAFETY: ggml passes a NUL-terminated message that lives for the call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let _ = std::panic::catch_unwind(|| record(LogLevel::from_raw(level), &text));
}

/// `ggml_abort_callback_t`.
pub(crate) unsafe extern "C" fn abort_trampoline(message: *const c_char) {
    let message = if message.is_null() {
        String::new()
    } else {
        // SAFETY: ggml passes its NUL-terminated message buffer.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    let _ = std::panic::catch_unwind(|| report_abort(&message));
}

fn report_abort(message: &str) {
    // The aborting thread may be a ggml worker while another thread logs: never wait long
    // for a lock here, a report without the ring beats a hang.
    let recent: Vec<LogLine> = (0..100)
        .find_map(|_| match RING.try_lock() {
            Ok(r) => Some(r.lines.iter().map(|(_, l)| l.clone()).collect()),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(
                p.into_inner()
                    .lines
                    .iter()
                    .map(|(_, l)| l.clone())
                    .collect(),
            ),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                None
            }
        })
        .unwrap_or_default();
    let hook = match HOOKS.try_lock() {
        Ok(h) => h.on_abort,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().on_abort,
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    let report = AbortReport {
        message,
        recent: &recent,
    };
    match hook {
        Some(f) => f(&report),
        None => {
            let _ = writeln!(std::io::stderr(), "{report}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    // One test touches the process-global ring, so nothing else races with it.
    #[test]
    fn ring_keeps_warnings_and_errors_and_joins_continuations() {
        fn quiet(_: LogLevel, _: &str) {}
        set_hooks(Some(quiet), None);
        clear_recent_log();
        let send = |level: c_int, s: &str| {
            let c = CString::new(s).unwrap();
            // SAFETY: a valid C string for the call.
            unsafe { log_trampoline(level, c.as_ptr(), std::ptr::null_mut()) };
        };
        send(2, "info line\n");
        send(4, "CUDA error: invalid argument\n");
        send(4, "  current device: 0, in function rms_norm at ");
        send(5, "common.cuh:1668\n");
        send(3, "a warning\n");
        send(2, "more info\n");
        send(5, " continued info\n");
        let r = recent_log();
        assert_eq!(
            r,
            vec![
                LogLine {
                    level: LogLevel::Error,
                    text: "CUDA error: invalid argument".into()
                },
                LogLine {
                    level: LogLevel::Error,
                    text: "  current device: 0, in function rms_norm at common.cuh:1668".into()
                },
                LogLine {
                    level: LogLevel::Warn,
                    text: "a warning".into()
                },
            ]
        );
        let m = mark();
        send(4, "after the mark\n");
        assert_eq!(since(m), vec!["after the mark".to_string()]);
        for i in 0..(RING_LINES + 5) {
            send(3, &format!("w{i}\n"));
        }
        let r = recent_log();
        assert_eq!(r.len(), RING_LINES);
        assert_eq!(
            r.last().map(|l| l.text.as_str()),
            Some(format!("w{}", RING_LINES + 4).as_str())
        );
        let report = AbortReport {
            message: "ggml.c:1: boom",
            recent: &r[..1],
        };
        assert!(report
            .to_string()
            .starts_with("ggml abort: ggml.c:1: boom\n  Warn: w"));
        clear_recent_log();
        assert!(recent_log().is_empty());
        set_hooks(None, None);
    }
}
