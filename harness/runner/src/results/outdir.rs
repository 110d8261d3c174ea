//! An output directory with one writer: `OutDir::open` takes an advisory lock (`flock`) on
//! `DIR/.kedge.lock` for as long as the value lives (the kernel drops it when the process
//! ends, however it ends), so a second kedge writing there is refused with who holds it.
//! An existing `results.jsonl` is continued only with `--resume` and replaced only with
//! `--force`.

use super::writer::ResultsWriter;
use crate::errors::OutputError;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// What to do with a results file that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutMode {
    /// Refuse to touch it (exit 2, naming `--resume` and `--force`).
    Fresh,
    /// Keep it and append; finished cases are skipped.
    Resume,
    /// Start it over.
    Force,
}

impl OutMode {
    pub fn of_flags(resume: bool, force: bool) -> OutMode {
        match (resume, force) {
            (true, _) => OutMode::Resume,
            (false, true) => OutMode::Force,
            (false, false) => OutMode::Fresh,
        }
    }
}

/// The lock file's name inside an output directory.
pub const LOCK_FILE: &str = ".kedge.lock";

/// Take an exclusive advisory lock on `file` without waiting. `Ok(false)`: someone holds it.
pub(crate) fn try_lock(file: &File) -> std::io::Result<bool> {
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

/// A locked output directory.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    _lock: File,
}

impl OutDir {
    /// Create `dir` if needed and lock it for this process.
    pub fn open(dir: &Path) -> Result<OutDir, OutputError> {
        std::fs::create_dir_all(dir).map_err(|e| OutputError::write(dir, e))?;
        let path = dir.join(LOCK_FILE);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| OutputError::write(&path, e))?;
        if !try_lock(&f).map_err(|e| OutputError::write(&path, e))? {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(OutputError::Locked {
                dir: dir.to_path_buf(),
                holder: if holder.is_empty() {
                    format!("it holds {}", path.display())
                } else {
                    holder.to_string()
                },
            });
        }
        let me = format!(
            "pid {}: {}",
            std::process::id(),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        let _ = f
            .set_len(0)
            .and_then(|_| f.rewind())
            .and_then(|_| writeln!(f, "{me}"));
        Ok(OutDir {
            dir: dir.to_path_buf(),
            _lock: f,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `DIR/results.jsonl`.
    pub fn results_path(&self) -> PathBuf {
        self.dir.join("results.jsonl")
    }

    /// Does `results.jsonl` hold anything?
    pub fn has_results(&self) -> bool {
        std::fs::metadata(self.results_path()).is_ok_and(|m| m.len() > 0)
    }

    /// Check, before any work, that `mode` allows writing `results.jsonl`.
    pub fn check_results(&self, mode: OutMode) -> Result<(), OutputError> {
        if mode == OutMode::Fresh && self.has_results() {
            return Err(OutputError::ResultsExist {
                path: self.results_path(),
            });
        }
        Ok(())
    }

    /// The results writer, as `mode` says (see `check_results`).
    pub fn results(&self, mode: OutMode) -> Result<ResultsWriter, OutputError> {
        self.check_results(mode)?;
        let p = self.results_path();
        match mode {
            OutMode::Resume => ResultsWriter::append(&p),
            OutMode::Fresh | OutMode::Force => ResultsWriter::create(&p),
        }
    }

    /// Write a file in the directory.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, OutputError> {
        self.write_bytes(name, text.as_bytes())
    }

    /// A file of raw bytes in the directory (a repro's inputs).
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, OutputError> {
        let p = self.dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| OutputError::write(parent, e))?;
        }
        std::fs::write(&p, bytes).map_err(|e| OutputError::write(&p, e))?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_writer_per_directory_and_results_are_not_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let a = OutDir::open(d.path()).unwrap();
        let e = OutDir::open(d.path()).unwrap_err();
        assert!(matches!(e, OutputError::Locked { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(a);
        let a = OutDir::open(d.path()).unwrap();
        std::fs::write(a.results_path(), "{}\n").unwrap();
        let e = a.results(OutMode::Fresh).unwrap_err();
        assert!(matches!(e, OutputError::ResultsExist { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), "{}\n");
        drop(a.results(OutMode::Resume).unwrap());
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), "{}\n");
        drop(a.results(OutMode::Force).unwrap());
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), "");
    }
}
