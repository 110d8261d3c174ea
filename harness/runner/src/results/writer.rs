//! Writing results one line at a time, flushed, each line in one write (a signal's exit waits
//! for it). The file is never opened through a link (`outfile`), and the writer holds an
//! advisory lock on it, so two kedges never interleave lines in one file.

use super::outfile::{self, try_lock};
use super::reader::TornLine;
use super::OutputError;
use kedge_core::CaseResult;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// An open, locked `results.jsonl` that verdicts are appended to.
#[derive(Debug)]
pub struct ResultsWriter {
    path: PathBuf,
    file: std::fs::File,
    /// Lines written through this writer.
    pub written: usize,
    /// A cut-off last line found (and cut) when appending: that case runs again.
    pub torn: Option<TornLine>,
}

impl ResultsWriter {
    /// Start `path` over (truncated).
    pub fn create(path: &Path) -> Result<Self, OutputError> {
        Self::open(path, false)
    }

    /// Append to `path` (created if missing). A last line without its newline (an interrupted
    /// write) is cut off first, so the next verdict starts on a line of its own; it is kept
    /// in `torn` for the caller to report.
    pub fn append(path: &Path) -> Result<Self, OutputError> {
        Self::open(path, true)
    }

    fn open(path: &Path, append: bool) -> Result<Self, OutputError> {
        let err = |e| OutputError::write(path, e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| OutputError::write(dir, e))?;
        }
        let mut file = outfile::open_append(path)?;
        if !try_lock(&file).map_err(err)? {
            return Err(OutputError::Locked {
                dir: path.to_path_buf(),
                holder: "another kedge is writing this results file".into(),
            });
        }
        let torn = if append {
            cut_torn_tail(&mut file, path).map_err(err)?
        } else {
            file.set_len(0).map_err(err)?;
            None
        };
        Ok(ResultsWriter {
            path: path.to_path_buf(),
            file,
            written: 0,
            torn,
        })
    }

    /// The results file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one verdict line (flushed, in one write).
    pub fn write(&mut self, r: &CaseResult) -> Result<(), OutputError> {
        outfile::append_line(&mut self.file, &self.path, &r.to_line())?;
        self.written += 1;
        Ok(())
    }
}

/// Cut a last line that has no newline; say what was cut. Reads through the open file, so
/// the file cut is the one that was checked and locked.
fn cut_torn_tail(file: &mut std::fs::File, path: &Path) -> std::io::Result<Option<TornLine>> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(None);
    }
    let keep = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let line = bytes[..keep].iter().filter(|&&b| b == b'\n').count() + 1;
    file.set_len(keep as u64)?;
    Ok(Some(TornLine {
        path: path.to_path_buf(),
        line,
        msg: format!("{} bytes without a newline", bytes.len() - keep),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{finished_ids, ResultSet};
    use kedge_core::{Case, DType, Detector, Under, Verdict};
    use std::io::Write;

    fn case(seed: u64) -> Case {
        let mut c = Case::new("rms_norm", "clamped", DType::F32, [64, 2, 1, 1]);
        c.seed = seed;
        c
    }

    #[test]
    fn resume_skips_finished_cases_and_reports_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let mut w = ResultsWriter::create(&path).unwrap();
        w.write(&CaseResult::new(
            &case(1),
            Verdict::Pass,
            Detector::None,
            "ok",
        ))
        .unwrap();
        drop(w);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"id\":\"tor"))
            .unwrap();
        let (done, torn) = finished_ids(&path, Under::Native).unwrap();
        assert!(done.contains(&case(1).id()));
        assert!(!done.contains(&case(2).id()));
        assert_eq!(torn.unwrap().line, 2);
        let mut w = ResultsWriter::append(&path).unwrap();
        assert_eq!(w.torn.as_ref().map(|t| t.line), Some(2));
        w.write(&CaseResult::new(
            &case(2),
            Verdict::Pass,
            Detector::None,
            "ok",
        ))
        .unwrap();
        let set = ResultSet::load(std::slice::from_ref(&path)).unwrap();
        assert_eq!(set.results.len(), 2);
        assert!(set.torn.is_empty());
        // A second writer on the same file is refused while the first holds it.
        assert!(matches!(
            ResultsWriter::append(&path),
            Err(OutputError::Locked { .. })
        ));
    }
}
