//! An output directory with one writer: `OutDir::open` takes an advisory lock (`flock`) on
//! `DIR/.kedge.lock` for as long as the value lives (the kernel drops it when the process
//! ends, however it ends), so a second kedge writing there is refused with who holds it.
//! An existing `results.jsonl` is continued only with `--resume` and replaced only with
//! `--force`.
//!
//! One rule for every command that writes: it takes the lock of the directory it writes into
//! (`OutDir::open`, or `OutDir::for_file` for a single file such as a baseline or a finds
//! corpus), it names its inputs (`reading`) and never writes over one of them, and it writes
//! only through this type, whose files are never written through a link and are replaced
//! atomically (`outfile`).

use super::kind::FileKind;
use super::outfile::{self, try_lock};
use super::writer::ResultsWriter;
use super::OutputError;
use std::fs::File;
use std::io::{Read, Seek, Write};
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
    /// From `--resume` and `--force`; `--resume` wins when both are given.
    pub fn of_flags(resume: bool, force: bool) -> OutMode {
        match (resume, force) {
            (true, _) => OutMode::Resume,
            (false, true) => OutMode::Force,
            (false, false) => OutMode::Fresh,
        }
    }
}

/// The lock file's name inside an output directory.
const LOCK_FILE: &str = ".kedge.lock";

/// The reports `kedge sweep` and `kedge report` write.
pub const REPORT_FILES: [&str; 4] = ["report.md", "summary.md", "report.json", "junit.xml"];

/// A locked output directory.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    _lock: File,
    /// The command's input files, by identity (device, inode), with the name given.
    inputs: Vec<((u64, u64), PathBuf)>,
}

impl OutDir {
    /// Create `dir` if needed and lock it for this process. `dir` may be a link to a
    /// directory; something else there (a file, `/dev/null`) is refused.
    pub fn open(given: &Path) -> Result<OutDir, OutputError> {
        // A bare file name's directory is the current one; names in it stay bare.
        let dir = if given.as_os_str().is_empty() {
            Path::new(".")
        } else {
            given
        };
        if let Ok(m) = std::fs::metadata(dir) {
            if !m.is_dir() {
                return Err(OutputError::NotADirectory {
                    path: dir.to_path_buf(),
                    what: outfile::what(&m),
                });
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| OutputError::write(dir, e))?;
        let path = given.join(LOCK_FILE);
        let mut f = outfile::open_rw(&path)?;
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
            dir: given.to_path_buf(),
            _lock: f,
            inputs: Vec::new(),
        })
    }

    /// The directory a single output file is written in (`gate --write-baseline FILE`,
    /// `fuzz --finds FILE`), locked, and the file's name in it. A FILE that is a directory
    /// is refused (exit 2), as `command` (the flag) takes a file.
    pub fn for_file(file: &Path, command: &'static str) -> Result<(OutDir, String), OutputError> {
        let is_dir = std::fs::symlink_metadata(file).is_ok_and(|m| m.is_dir());
        let name = match file.file_name() {
            Some(n) if !is_dir => n.to_string_lossy().into_owned(),
            _ => {
                return Err(OutputError::WrongKind {
                    path: file.to_path_buf(),
                    found: FileKind::Directory.words(),
                    writes: "a file",
                    command,
                })
            }
        };
        let dir = file.parent().unwrap_or(Path::new(""));
        Ok((OutDir::open(dir)?, name))
    }

    /// The command's input files: none of them is ever written, under any name (a hard link,
    /// a link to it).
    pub fn reading<'p>(mut self, inputs: impl IntoIterator<Item = &'p Path>) -> OutDir {
        for p in inputs {
            if let Some(id) = outfile::identity(p) {
                self.inputs.push((id, p.to_path_buf()));
            }
        }
        self
    }

    /// The files the command will write here: each is checked now, before anything runs (an
    /// input, a link, a hard-linked file is refused).
    pub fn writes(self, names: &[&str]) -> Result<OutDir, OutputError> {
        for name in names {
            self.check_target(name, None)?;
        }
        Ok(self)
    }

    fn check_not_input(&self, target: &Path) -> Result<(), OutputError> {
        if let Some(id) = outfile::identity(target) {
            if let Some((_, input)) = self.inputs.iter().find(|(i, _)| *i == id) {
                return Err(OutputError::OwnInput {
                    path: target.to_path_buf(),
                    input: input.clone(),
                });
            }
        }
        Ok(())
    }

    /// Check that `name` can be written here: not a link, a hard-linked file or something
    /// other than a file, not one of the inputs, and (with `kind`) not another kind of file.
    pub fn check_target(
        &self,
        name: &str,
        kind: Option<(FileKind, &'static str)>,
    ) -> Result<PathBuf, OutputError> {
        let p = self.dir.join(name);
        self.check_not_input(&p)?;
        if let Some((want, command)) = kind {
            FileKind::expect(&p, want, command)?;
        }
        outfile::check_target(&p)?;
        Ok(p)
    }

    /// The directory, as given to `open`.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The path of `name` in the directory (nothing is checked: see `check_target`).
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A directory inside this one (`workers/native/gpu0`), made when missing; a link or a
    /// file anywhere along it is refused, as is a link anywhere under it (worker logs are
    /// written there).
    pub(crate) fn subdir(&self, rel: &str) -> Result<PathBuf, OutputError> {
        let p = outfile::make_dirs(&self.dir, Path::new(rel))?;
        if let Some(link) = outfile::first_link_under(&p) {
            return Err(OutputError::Link { path: link });
        }
        Ok(p)
    }

    /// `DIR/results.jsonl`.
    pub(crate) fn results_path(&self) -> PathBuf {
        self.dir.join("results.jsonl")
    }

    /// Does `results.jsonl` hold anything?
    fn has_results(&self) -> bool {
        std::fs::symlink_metadata(self.results_path()).is_ok_and(|m| m.len() > 0)
    }

    /// Check, before any work, that `mode` allows writing `results.jsonl`: it is not a link
    /// or an input, it is only replaced with `--force` and only continued with `--resume`,
    /// and what is replaced or continued is a results file.
    /// With `--resume`, what is there is read now (each stored id rechecked against its
    /// case), before anything is written.
    pub(crate) fn check_results(&self, mode: OutMode) -> Result<(), crate::Error> {
        self.check_results_file(mode)?;
        if mode == OutMode::Resume && self.has_results() {
            super::ResultSet::load(std::slice::from_ref(&self.results_path()))?;
        }
        Ok(())
    }

    fn check_results_file(&self, mode: OutMode) -> Result<(), OutputError> {
        self.check_target("results.jsonl", None)?;
        if mode == OutMode::Fresh && self.has_results() {
            return Err(OutputError::ResultsExist {
                path: self.results_path(),
            });
        }
        let how = match mode {
            OutMode::Resume => "--resume",
            _ => "--force",
        };
        FileKind::expect(&self.results_path(), FileKind::Results, how)?;
        Ok(())
    }

    /// The results writer, as `mode` says (see `check_results`).
    pub(crate) fn results(&self, mode: OutMode) -> Result<ResultsWriter, OutputError> {
        self.check_results_file(mode)?;
        let p = self.results_path();
        match mode {
            OutMode::Resume => ResultsWriter::append(&p),
            OutMode::Fresh | OutMode::Force => ResultsWriter::create(&p),
        }
    }

    /// Write a file in the directory, replacing what was there atomically.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, OutputError> {
        self.write_bytes(name, text.as_bytes())
    }

    /// A file of raw bytes in the directory (a repro's inputs), replaced atomically.
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, OutputError> {
        let p = match Path::new(name).parent() {
            Some(sub) if !sub.as_os_str().is_empty() => {
                outfile::make_dirs(&self.dir, sub)?;
                self.dir.join(name)
            }
            _ => self.dir.join(name),
        };
        self.check_not_input(&p)?;
        outfile::replace(&p, bytes)?;
        Ok(p)
    }

    /// A file lines are appended to (a finds corpus), never through a link; with `kind`, a
    /// file of another kind is refused.
    pub(crate) fn append(
        &self,
        name: &str,
        kind: Option<(FileKind, &'static str)>,
    ) -> Result<(PathBuf, File), OutputError> {
        let p = self.check_target(name, kind)?;
        let f = outfile::open_append(&p)?;
        Ok((p, f))
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
        let c = kedge_core::Case::new("rms_norm", "ggml", kedge_core::DType::F32, [64, 1, 1, 1]);
        let line = kedge_core::CaseResult::new(
            &c,
            kedge_core::Verdict::Pass,
            kedge_core::Detector::None,
            "",
        )
        .to_line()
            + "\n";
        std::fs::write(a.results_path(), &line).unwrap();
        let e = a.results(OutMode::Fresh).unwrap_err();
        assert!(matches!(e, OutputError::ResultsExist { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), line);
        drop(a.results(OutMode::Resume).unwrap());
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), line);
        drop(a.results(OutMode::Force).unwrap());
        assert_eq!(std::fs::read_to_string(a.results_path()).unwrap(), "");
        // Something else named results.jsonl is neither continued nor replaced.
        std::fs::write(a.results_path(), "# notes\nmy own text\n").unwrap();
        for mode in [OutMode::Resume, OutMode::Force] {
            let e = a.results(mode).unwrap_err();
            assert!(matches!(e, OutputError::WrongKind { .. }), "{e}");
            assert_eq!(e.exit_code(), 2);
        }
        assert_eq!(
            std::fs::read_to_string(a.results_path()).unwrap(),
            "# notes\nmy own text\n"
        );
    }

    #[test]
    fn inputs_and_non_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = OutDir::open(Path::new("/dev/null")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/dev/null: it is a character device, not a directory"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 5);
        let input = d.path().join("plan.jsonl");
        std::fs::write(&input, "x\n").unwrap();
        let e = OutDir::open(d.path())
            .unwrap()
            .reading([input.as_path()])
            .writes(&["plan.jsonl"])
            .unwrap_err();
        assert!(matches!(e, OutputError::OwnInput { .. }), "{e}");
        // Under another name too (a hard link is refused as a link before that).
        let other = d.path().join("elsewhere.jsonl");
        std::fs::write(&other, "y\n").unwrap();
        let out = OutDir::open(d.path()).unwrap().reading([other.as_path()]);
        out.write("report.md", "fine").unwrap();
        drop(out);
        let (dir, name) = OutDir::for_file(&other, "gate --write-baseline").unwrap();
        let dir = dir.reading([other.as_path()]);
        let e = dir.write(&name, "z").unwrap_err();
        assert!(matches!(e, OutputError::OwnInput { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "y\n");
        drop(dir);
        let e = OutDir::for_file(d.path(), "fuzz --finds").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }
}
