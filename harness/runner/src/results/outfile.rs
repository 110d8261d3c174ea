//! Files kedge writes, written so that nothing outside the directory it writes into changes,
//! whatever is already there:
//!
//! - a name is never followed through a symbolic link (checked first, then opened with
//!   `O_NOFOLLOW`, and what was opened is checked again: open-then-check), and a file with
//!   other hard links, or something that is not a regular file, is not written;
//! - a whole file (a plan, a report, a baseline) is replaced atomically: written beside its
//!   name, synced, then renamed over it, so a reader sees the old file or the new one, never
//!   a part of one, and a full disk leaves the old file as it was;
//! - a file that grows a line at a time (results, finds, logs) is opened the same way and
//!   each line goes out in one write while signals wait (`lifecycle::hold_exit`).
//!
//! The directory itself may be a link (the user's choice of where output goes); the names
//! inside it may not.

use super::OutputError;
use std::fs::{File, Metadata, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a file system object is, in words.
pub fn what(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// `lstat`: what is at `path` itself (a link is not followed); `None` when nothing is.
pub fn lstat(path: &Path) -> Result<Option<Metadata>, OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(OutputError::write(path, e)),
    }
}

/// Refuse what kedge must not write at `path`: a link, something other than a regular file,
/// a file with other hard links. Nothing there is fine.
pub fn check_target(path: &Path) -> Result<(), OutputError> {
    match lstat(path)? {
        None => Ok(()),
        Some(m) => check_opened(path, &m),
    }
}

fn check_opened(path: &Path, m: &Metadata) -> Result<(), OutputError> {
    let p = path.to_path_buf();
    if m.file_type().is_symlink() {
        return Err(OutputError::Link { path: p });
    }
    if !m.is_file() {
        return Err(OutputError::NotAFile {
            path: p,
            what: what(m),
        });
    }
    if m.nlink() > 1 {
        return Err(OutputError::HardLinked {
            path: p,
            links: m.nlink(),
        });
    }
    Ok(())
}

/// An open error: a link met by `O_NOFOLLOW` (`ELOOP`) is named as such.
fn open_error(path: &Path, e: std::io::Error) -> OutputError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        OutputError::Link {
            path: path.to_path_buf(),
        }
    } else {
        OutputError::write(path, e)
    }
}

/// Open `path` for reading and writing, created when missing, never through a link; what was
/// opened must be a regular file with no other name. Nothing is truncated: the caller decides
/// (after taking a lock, say).
pub fn open_rw(path: &Path) -> Result<File, OutputError> {
    check_target(path)?;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    let m = f.metadata().map_err(|e| OutputError::write(path, e))?;
    check_opened(path, &m)?;
    Ok(f)
}

/// `open_rw` in append mode: every write goes to the end.
pub fn open_append(path: &Path) -> Result<File, OutputError> {
    check_target(path)?;
    let f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    let m = f.metadata().map_err(|e| OutputError::write(path, e))?;
    check_opened(path, &m)?;
    Ok(f)
}

/// A new file for a log, started over when one is there (a worker's log); never through a
/// link.
pub fn create_log(path: &Path) -> Result<File, OutputError> {
    let f = open_rw(path)?;
    f.set_len(0).map_err(|e| OutputError::write(path, e))?;
    Ok(f)
}

/// Append one line (the newline added) in one write, while a signal's exit waits for it.
pub fn append_line(file: &mut File, path: &Path, line: &str) -> Result<(), OutputError> {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _held = crate::run::lifecycle::hold_exit();
    file.write_all(buf.as_bytes())
        .and_then(|_| file.flush())
        .map_err(|e| OutputError::write(path, e))
}

/// Replace `path` with `bytes` atomically: written to a new file beside it (created
/// exclusively, so never through a link), synced, renamed over the name, and the directory
/// synced. A link or a hard-linked file at `path` is refused; a failure leaves what was
/// there.
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    check_target(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let _held = crate::run::lifecycle::hold_exit();
    let mut last = None;
    for _ in 0..16 {
        let tmp = dir.join(format!(
            ".{name}.kedge-tmp-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(OutputError::write(path, e)),
        };
        let done = f
            .write_all(bytes)
            .and_then(|_| f.sync_all())
            .and_then(|_| std::fs::rename(&tmp, path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(OutputError::write(path, e));
        }
        // The rename is durable once the directory is; a failure to sync it loses nothing
        // that was there before.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        return Ok(());
    }
    Err(OutputError::write(
        path,
        last.unwrap_or_else(|| std::io::Error::other("no free temporary name beside it")),
    ))
}

/// Create directory `rel` (relative, any depth) under `root`, refusing a link or a
/// non-directory at any level below `root`. `root` itself may be a link.
pub fn make_dirs(root: &Path, rel: &Path) -> Result<PathBuf, OutputError> {
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match lstat(&at)? {
            Some(m) if m.is_dir() => {}
            Some(m) if m.file_type().is_symlink() => {
                return Err(OutputError::Link { path: at });
            }
            Some(m) => {
                return Err(OutputError::NotAFile {
                    path: at,
                    what: what(&m),
                })
            }
            None => match std::fs::create_dir(&at) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // Made by someone else meanwhile: check it as above.
                    let m = lstat(&at)?;
                    if !m.as_ref().is_some_and(|m| m.is_dir()) {
                        return Err(OutputError::Link { path: at });
                    }
                }
                Err(e) => return Err(OutputError::write(&at, e)),
            },
        }
    }
    Ok(at)
}

/// The first link found anywhere under `dir` (not followed), for a tree kedge writes into
/// (worker logs): `None` when there is none or no `dir`.
pub fn first_link_under(dir: &Path) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_symlink() {
                return Some(e.path());
            }
            if t.is_dir() {
                stack.push(e.path());
            }
        }
    }
    None
}

/// A file's identity (device, inode), following links: the same file under any name.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Take an exclusive advisory lock on `file` without waiting. `Ok(false)`: someone holds it.
pub(crate) fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns; no memory is passed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_refused_and_their_targets_untouched() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "keep me\n").unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let link = out.join("report.md");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for e in [
            replace(&link, b"x").unwrap_err(),
            open_append(&link).unwrap_err(),
            open_rw(&link).unwrap_err(),
            create_log(&link).unwrap_err(),
        ] {
            assert!(matches!(e, OutputError::Link { .. }), "{e}");
            assert_eq!(e.exit_code(), 5);
            assert!(e.to_string().contains("report.md"), "{e}");
        }
        // A hard link to a file outside.
        let hard = out.join("results.jsonl");
        std::fs::hard_link(&victim, &hard).unwrap();
        for e in [
            replace(&hard, b"x").unwrap_err(),
            open_append(&hard).unwrap_err(),
        ] {
            assert!(matches!(e, OutputError::HardLinked { links: 2, .. }), "{e}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        // A link to a directory below the root is refused; the root may be one.
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("workers")).unwrap();
        let e = make_dirs(&out, Path::new("workers/native")).unwrap_err();
        assert!(matches!(e, OutputError::Link { .. }), "{e}");
        assert!(first_link_under(&out).is_some());
        let root_link = d.path().join("out-link");
        std::os::unix::fs::symlink(&out, &root_link).unwrap();
        let made = make_dirs(&root_link, Path::new("logs/gpu0")).unwrap();
        assert!(made.is_dir());
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    }

    #[test]
    fn replace_is_whole_and_leaves_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.md");
        replace(&p, b"one\n").unwrap();
        replace(&p, b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("report.md")]);
        // A directory where the file goes is named as such.
        let sub = d.path().join("junit.xml");
        std::fs::create_dir(&sub).unwrap();
        let e = replace(&sub, b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let mut f = open_append(&d.path().join("r.jsonl")).unwrap();
        append_line(&mut f, &d.path().join("r.jsonl"), "{}").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("r.jsonl")).unwrap(),
            "{}\n"
        );
    }
}
