//! Reading `results.jsonl` files back, merged in order. A line that is not a result is an
//! error naming its file and line; a cut-off last line (a sweep killed mid-write) is kept
//! aside as `TornLine` and reported, never silently dropped.

use kedge_core::{CaseResult, Under};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A results file that cannot be read back (bad input: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The file cannot be read.
    #[error("cannot read results {path}: {source}")]
    Io {
        /// The file as given.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A complete line that is not a result (a cut-off last line is a `TornLine` instead).
    #[error("{path}:{line}: not a kedge result line: {msg}")]
    Malformed {
        /// The file as given.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// Why it does not parse.
        msg: String,
    },
    /// Stored ids that are not their case's id: written by another kedge (another id
    /// scheme) or edited. Such a result cannot be matched to its case.
    #[error("{path}: {count} result(s) whose stored id is not the id of their case ({}{}): results from another kedge version, or edited; run the cases again (a sweep: --force)", first.join("; "), if *count > first.len() { "; ..." } else { "" })]
    IdMismatch {
        /// The file as given.
        path: PathBuf,
        /// How many lines of it have a stored id that is not their case's.
        count: usize,
        /// The first few, as "line N: stored X, its case's id is Y".
        first: Vec<String>,
    },
}

/// Mismatched ids named in an error, at most.
const MISMATCHES_NAMED: usize = 3;

/// A last line without its newline that does not parse: an interrupted write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// The results file.
    pub path: PathBuf,
    /// The cut-off line's number, from 1.
    pub line: usize,
    /// What is wrong with it: the parse error, or how many bytes lack their newline.
    pub msg: String,
}

impl std::fmt::Display for TornLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: the last line was cut off mid-write ({}); that case has no result",
            self.path.display(),
            self.line,
            self.msg
        )
    }
}

/// Merged results, in first-seen order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultSet {
    /// One result per case and run kind (`under`): the last line read of each.
    pub results: Vec<CaseResult>,
    /// Lines replaced by a later line of the same case and run (re-runs, overlapping shards).
    pub replaced: usize,
    /// Cut-off last lines, one per file at most.
    pub torn: Vec<TornLine>,
}

impl ResultSet {
    /// Merge files in order. A case (id) run the same way (`under`) twice keeps the last
    /// line, in the position of the first; the same case under memcheck and natively are two
    /// results.
    pub fn load(paths: &[PathBuf]) -> Result<ResultSet, ResultsError> {
        let mut set = ResultSet::default();
        let mut index = HashMap::new();
        for p in paths {
            let text = std::fs::read_to_string(p).map_err(|source| ResultsError::Io {
                path: p.clone(),
                source,
            })?;
            set.add_text(p, &text, &mut index)?;
        }
        Ok(set)
    }

    /// Merge from in-memory text; `name` is used in messages.
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
        index: &mut HashMap<(String, Under), usize>,
    ) -> Result<(), ResultsError> {
        let lines: Vec<&str> = text.lines().collect();
        let cut_off_tail = !text.is_empty() && !text.ends_with('\n');
        let mut mismatched = 0usize;
        let mut first = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let r: CaseResult = match serde_json::from_str(t) {
                Ok(r) => r,
                Err(e) if cut_off_tail && i + 1 == lines.len() => {
                    self.torn.push(TornLine {
                        path: path.to_path_buf(),
                        line: i + 1,
                        msg: e.to_string(),
                    });
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
            // The id is a function of the case: recomputed, never trusted.
            let id = r.case.id();
            if id != r.id {
                mismatched += 1;
                if first.len() < MISMATCHES_NAMED {
                    first.push(format!(
                        "line {}: stored {}, its case's id is {id}",
                        i + 1,
                        r.id
                    ));
                }
                continue;
            }
            let key = (r.id.clone(), r.under);
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
        if mismatched > 0 {
            return Err(ResultsError::IdMismatch {
                path: path.to_path_buf(),
                count: mismatched,
                first,
            });
        }
        Ok(())
    }
}

/// Ids of the cases `path` has a result for under `under` (for `--resume`), and the torn last
/// line if there is one (that case runs again). A missing file has none.
pub(crate) fn finished_ids(
    path: &Path,
    under: Under,
) -> Result<(HashSet<String>, Option<TornLine>), ResultsError> {
    if !path.exists() {
        return Ok((HashSet::new(), None));
    }
    let set = ResultSet::load(&[path.to_path_buf()])?;
    let ids = set
        .results
        .into_iter()
        .filter(|r| r.under == under)
        .map(|r| r.id)
        .collect();
    Ok((ids, set.torn.into_iter().next()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, DType, Detector, Tool, Verdict};

    fn line(ne2: i64, v: Verdict, under: Under) -> String {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]);
        let mut r = CaseResult::new(&c, v, Detector::Reference, format!("{v}"));
        r.under = under;
        r.to_line()
    }

    #[test]
    fn merge_keeps_last_per_case_and_run() {
        let a = format!(
            "{}\n{}\n",
            line(1, Verdict::Pass, Under::Native),
            line(2, Verdict::WrongValues, Under::Native)
        );
        let b = format!(
            "{}\n{}\n",
            line(2, Verdict::Pass, Under::Native),
            line(2, Verdict::OobRead, Under::Tool(Tool::Memcheck))
        );
        let s = ResultSet::from_texts(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(s.results.len(), 3);
        assert_eq!(s.replaced, 1);
        assert_eq!(s.results[1].verdict, Verdict::Pass);
        assert_eq!(s.results[1].case.ne[2], 2);
        assert_eq!(s.results[2].under, Under::Tool(Tool::Memcheck));
    }

    #[test]
    fn malformed_line_names_file_and_line_and_a_cut_tail_is_kept_aside() {
        let good = line(1, Verdict::Pass, Under::Native);
        let text = format!("{good}\n{{\"id\":1}}\n{good}\n");
        let e = ResultSet::from_texts(&[("r.jsonl", &text)]).unwrap_err();
        assert!(e.to_string().starts_with("r.jsonl:2:"), "{e}");
        let cut = format!("{good}\n{}", &good[..good.len() / 2]);
        let s = ResultSet::from_texts(&[("r.jsonl", &cut)]).unwrap();
        assert_eq!(s.results.len(), 1);
        assert_eq!(s.torn.len(), 1);
        assert_eq!(s.torn[0].line, 2);
        assert!(s.torn[0].to_string().contains("r.jsonl:2"), "{}", s.torn[0]);
    }

    #[test]
    fn stored_ids_are_rechecked_and_mismatches_named() {
        let good = line(1, Verdict::Pass, Under::Native);
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["id"] = "000000000000".into();
        let text = format!("{good}\n{v}\n");
        let e = ResultSet::from_texts(&[("r.jsonl", &text)]).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, ResultsError::IdMismatch { count: 1, .. }),
            "{msg}"
        );
        assert!(
            msg.contains("line 2: stored 000000000000, its case's id is"),
            "{msg}"
        );
        // The same case under another id is not counted twice: it is refused.
        let mut other = v.clone();
        other["case"]["ne"][2] = 2.into();
        let text = format!("{v}\n{other}\n{other}\n{other}\n{other}\n");
        let e = ResultSet::from_texts(&[("r.jsonl", &text)]).unwrap_err();
        assert!(
            e.to_string().contains("5 result(s)") && e.to_string().contains("; ..."),
            "{e}"
        );
    }

    #[test]
    fn the_gpu_is_recorded_and_lines_without_it_still_load() {
        let old = line(1, Verdict::Pass, Under::Native);
        assert!(!old.contains("\"gpu\""), "{old}");
        let mut r: CaseResult = serde_json::from_str(&old).unwrap();
        assert_eq!(r.gpu, None);
        r.gpu = Some(3);
        let new = r.to_line();
        assert!(new.contains("\"gpu\":3"), "{new}");
        let s = ResultSet::from_texts(&[("r", &format!("{old}\n{new}\n"))]).unwrap();
        assert_eq!(s.results.len(), 1);
        assert_eq!(s.results[0].gpu, Some(3));
    }
}
