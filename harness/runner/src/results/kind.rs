//! What kind of file kedge finds where it is about to write: a command writes one kind of
//! file (results, a gate baseline, a fuzz finds corpus) and refuses a target that holds
//! another, so a results file never becomes a baseline or a finds corpus by a slip of a
//! flag. The first complete line that is not blank or a `#` comment decides.

use super::OutputError;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The kinds of file kedge reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `results.jsonl`: verdict lines.
    Results,
    /// A gate baseline: known failures.
    Baseline,
    /// A fuzz finds corpus (`corpora/fuzz-finds.jsonl`).
    Finds,
    /// Case lines: a corpus or a sweep's `plan.jsonl`.
    Cases,
    /// A directory.
    Directory,
    /// Anything else: text that is none of the above, or bytes that are not text.
    Other,
}

impl FileKind {
    /// The kind in words, as an article and a noun ("a results file").
    pub(crate) fn words(self) -> &'static str {
        match self {
            FileKind::Results => "a results file (kedge verdict lines)",
            FileKind::Baseline => "a gate baseline (known failures)",
            FileKind::Finds => "a fuzz finds corpus",
            FileKind::Cases => "a corpus of case lines",
            FileKind::Directory => "a directory",
            FileKind::Other => "a file kedge did not write",
        }
    }

    /// The kind of `text`; `None` when it holds no complete line but blanks and comments (a
    /// file any kind may start as, or one whose only line was cut off mid-write).
    fn of_text(text: &str) -> Option<FileKind> {
        let mut lines = text.split_inclusive('\n');
        let line = lines.find(|l| {
            let t = l.trim();
            l.ends_with('\n') && !t.is_empty() && !t.starts_with('#')
        })?;
        Some(FileKind::of_line(line.trim()))
    }

    fn of_line(t: &str) -> FileKind {
        if serde_json::from_str::<kedge_core::CaseResult>(t).is_ok() {
            return FileKind::Results;
        }
        if serde_json::from_str::<crate::workflow::fuzz::FuzzFind>(t).is_ok() {
            return FileKind::Finds;
        }
        if crate::gate::Baseline::parse(Path::new(""), t).is_ok() {
            return FileKind::Baseline;
        }
        if kedge_core::model::case::parse_corpus(t).is_ok() {
            return FileKind::Cases;
        }
        FileKind::Other
    }

    /// The kind of the file at `path` (never through a link); `None` when there is no file or
    /// nothing that decides. Only the first megabyte is read.
    fn of_path(path: &Path) -> Result<Option<FileKind>, OutputError> {
        let Some(m) = super::outfile::lstat(path)? else {
            return Ok(None);
        };
        if m.is_dir() {
            return Ok(Some(FileKind::Directory));
        }
        super::outfile::check_target(path)?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| OutputError::write(path, e))?;
        let mut bytes = Vec::new();
        f.take(1 << 20)
            .read_to_end(&mut bytes)
            .map_err(|e| OutputError::write(path, e))?;
        match std::str::from_utf8(&bytes) {
            Ok(t) => Ok(FileKind::of_text(t)),
            // Cut inside a character at the megabyte: the part before it decides.
            Err(e) if e.error_len().is_none() => Ok(FileKind::of_text(
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
            )),
            Err(_) => Ok(Some(FileKind::Other)),
        }
    }

    /// Refuse `path` unless it is missing, undecided, or of kind `want`; `command` is what
    /// writes it, for the message.
    pub(crate) fn expect(
        path: &Path,
        want: FileKind,
        command: &'static str,
    ) -> Result<(), OutputError> {
        match FileKind::of_path(path)? {
            Some(found) if found != want => Err(OutputError::WrongKind {
                path: path.to_path_buf(),
                found: found.words(),
                writes: want.words(),
                command,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, CaseResult, DType, Detector, Verdict};

    #[test]
    fn each_kind_is_told_from_the_others() {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, 65536, 1]);
        let r = CaseResult::new(&c, Verdict::LaunchError, Detector::Driver, "x");
        let results = format!("{}\n", r.to_line());
        assert_eq!(FileKind::of_text(&results), Some(FileKind::Results));
        let b = crate::gate::Baseline::from_results(std::slice::from_ref(&r));
        let baseline = b.to_jsonl_with(Some("known"));
        assert_eq!(FileKind::of_text(&baseline), Some(FileKind::Baseline));
        let find = crate::workflow::fuzz::FuzzFind::new(
            &c,
            &c,
            crate::workflow::minimize::Outcome {
                verdict: Verdict::LaunchError,
                detector: Detector::Driver,
            },
            kedge_core::Under::Cpu,
            None,
            "x",
        );
        let finds = format!("{}\n", serde_json::to_string(&find).unwrap());
        assert_eq!(FileKind::of_text(&finds), Some(FileKind::Finds));
        assert_eq!(
            FileKind::of_text(&format!("{}\n", c.to_line())),
            Some(FileKind::Cases)
        );
        assert_eq!(FileKind::of_text("hello\n"), Some(FileKind::Other));
        assert_eq!(FileKind::of_text("# only a comment\n\n"), None);
        // A first line cut off mid-write decides nothing.
        assert_eq!(FileKind::of_text(&results[..20]), None);

        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("known.jsonl");
        std::fs::write(&p, &results).unwrap();
        let e = FileKind::expect(&p, FileKind::Baseline, "gate --write-baseline").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("is a results file")
                && e.to_string().contains("not a gate baseline"),
            "{e}"
        );
        FileKind::expect(&p, FileKind::Results, "sweep").unwrap();
        FileKind::expect(&d.path().join("missing"), FileKind::Finds, "fuzz").unwrap();
        let e = FileKind::expect(d.path(), FileKind::Finds, "fuzz").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }
}
