//! `results.jsonl`: written one verdict per line as they arrive (flushed, so an interrupted
//! sweep loses nothing and `--resume` skips what finished), read back and merged across shards.

use std::collections::HashSet;
use std::io::{BufRead, Write};

use kedge_core::CaseResult;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a kedge result line: {msg}")]
    Malformed {
        path: PathBuf,
        line: usize,
        msg: String,
    },
}

/// Merged results, in first-seen order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultSet {
    pub results: Vec<CaseResult>,
    /// Lines replaced by a later line of the same case (re-runs, overlapping shards).
    pub replaced: usize,
    /// Things a person should know that did not stop the merge (a cut-off last line).
    pub warnings: Vec<String>,
}

impl ResultSet {
    /// Merge files in order. A case (id) run the same way (`under`) twice keeps the last
    /// line, in the position of the first; the same case under memcheck and natively are two
    /// results.
    pub fn load(paths: &[PathBuf]) -> Result<ResultSet, ResultsError> {
        let mut set = ResultSet::default();
        let mut index: HashMap<(String, String), usize> = HashMap::new();
        for p in paths {
            let text = std::fs::read_to_string(p).map_err(|source| ResultsError::Io {
                path: p.clone(),
                source,
            })?;
            set.add_text(p, &text, &mut index)?;
        }
        Ok(set)
    }

    /// Merge from in-memory text (tests, stdin). `name` is used in messages.
    pub fn from_texts(texts: &[(&str, &str)]) -> Result<ResultSet, ResultsError> {
        let mut set = ResultSet::default();
        let mut index = HashMap::new();
        for (name, text) in texts {
            set.add_text(Path::new(name), text, &mut index)?;
        }
        Ok(set)
    }

    fn add_text(
        &mut self,
        path: &Path,
        text: &str,
        index: &mut HashMap<(String, String), usize>,
    ) -> Result<(), ResultsError> {
        let lines: Vec<&str> = text.lines().collect();
        let cut_off_tail = !text.is_empty() && !text.ends_with('\n');
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let r: CaseResult = match serde_json::from_str(t) {
                Ok(r) => r,
                // A sweep killed mid-write leaves half a last line: say so, keep the rest.
                Err(e) if cut_off_tail && i + 1 == lines.len() => {
                    self.warnings.push(format!(
                        "{}:{}: ignored a cut-off last line ({e})",
                        path.display(),
                        i + 1
                    ));
                    continue;
                }
                Err(e) => {
                    return Err(ResultsError::Malformed {
                        path: path.to_path_buf(),
                        line: i + 1,
                        msg: e.to_string(),
                    })
                }
            };
            let key = (r.id.clone(), r.under.clone());
            match index.get(&key) {
                Some(&at) => {
                    self.results[at] = r;
                    self.replaced += 1;
                }
                None => {
                    index.insert(key, self.results.len());
                    self.results.push(r);
                }
            }
        }
        Ok(())
    }
}

/// One shell word: `'...'` with any `'` inside escaped.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The one-line command that re-runs a case.
pub fn rerun_command(r: &CaseResult) -> String {
    let mut cmd = format!("kedge run --case {}", shell_quote(&r.case.to_line()));
    if crate::sanitizer::Tool::parse_list(&r.under).is_ok() {
        // A sanitizer finding needs the sanitizer to be seen again.
        cmd.push_str(&format!(" --sanitize {}", r.under));
    }
    cmd
}

pub struct ResultsWriter {
    file: std::fs::File,
    pub written: usize,
}

impl ResultsWriter {
    /// Open for appending (`resume`) or start fresh.
    pub fn open(path: &Path, resume: bool) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        if resume {
            drop_torn_tail(path)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(resume)
            .write(true)
            .truncate(!resume)
            .open(path)?;
        Ok(ResultsWriter { file, written: 0 })
    }
    pub fn write(&mut self, r: &CaseResult) -> std::io::Result<()> {
        writeln!(self.file, "{}", r.to_line())?;
        self.file.flush()?;
        self.written += 1;
        Ok(())
    }
}

/// An interrupted write can leave a last line without its newline: cut it off, so the next
/// verdict starts on a line of its own (that case simply runs again).
fn drop_torn_tail(path: &Path) -> std::io::Result<()> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(());
    };
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(keep as u64)
}

/// Read results, skipping a torn last line (an interrupted write) rather than failing.
pub fn read(path: &Path) -> std::io::Result<Vec<CaseResult>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(r) = serde_json::from_str::<CaseResult>(&line) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Ids of cases already finished in `path` (for `--resume`), per `under` (native, memcheck...).
pub fn finished_ids(path: &Path, under: &str) -> HashSet<String> {
    read(path)
        .map(|rs| {
            rs.into_iter()
                .filter(|r| r.under == under)
                .map(|r| r.id)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, DType, Detector, Verdict};

    fn line(ne2: i64, v: Verdict, under: &str) -> String {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]);
        let mut r = CaseResult::new(&c, v, Detector::Reference, format!("{v}"));
        r.under = under.into();
        r.to_line()
    }

    #[test]
    fn merge_keeps_last_per_case_and_run() {
        let a = format!(
            "{}\n{}\n",
            line(1, Verdict::Pass, "native"),
            line(2, Verdict::WrongValues, "native")
        );
        let b = format!(
            "{}\n{}\n",
            line(2, Verdict::Pass, "native"),
            line(2, Verdict::OobRead, "memcheck")
        );
        let s = ResultSet::from_texts(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(s.results.len(), 3);
        assert_eq!(s.replaced, 1);
        assert_eq!(s.results[1].verdict, Verdict::Pass);
        assert_eq!(s.results[1].case.ne[2], 2);
        assert_eq!(s.results[2].under, "memcheck");
    }

    #[test]
    fn malformed_line_names_file_and_line_but_cut_tail_is_a_warning() {
        let good = line(1, Verdict::Pass, "native");
        let text = format!("{good}\n{{\"id\":1}}\n{good}\n");
        let e = ResultSet::from_texts(&[("r.jsonl", &text)]).unwrap_err();
        assert!(e.to_string().starts_with("r.jsonl:2:"), "{e}");
        let cut = format!("{good}\n{}", &good[..good.len() / 2]);
        let s = ResultSet::from_texts(&[("r.jsonl", &cut)]).unwrap();
        assert_eq!(s.results.len(), 1);
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("r.jsonl:2"), "{:?}", s.warnings);
    }

    #[test]
    fn the_gpu_is_recorded_and_older_lines_without_it_still_load() {
        let old = line(1, Verdict::Pass, "native");
        assert!(!old.contains("\"gpu\""), "{old}");
        let mut r: CaseResult = serde_json::from_str(&old).unwrap();
        assert_eq!(r.gpu, None);
        r.gpu = Some(3);
        let new = r.to_line();
        assert!(new.contains("\"gpu\":3"), "{new}");
        let s = ResultSet::from_texts(&[("r", &format!("{old}\n{new}\n"))]).unwrap();
        // The same case run again on another GPU replaces the earlier line.
        assert_eq!(s.results.len(), 1);
        assert_eq!(s.results[0].gpu, Some(3));
    }

    #[test]
    fn rerun_command_quotes_the_case_line() {
        let mut c = Case::new("x", "y", DType::F32, [1, 1, 1, 1]);
        c.params.insert("name".into(), "it's".into());
        let r = CaseResult::new(&c, Verdict::Pass, Detector::None, "");
        let cmd = rerun_command(&r);
        assert!(cmd.starts_with("kedge run --case '{"), "{cmd}");
        assert!(cmd.contains(r"it'\''s"), "{cmd}");
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
