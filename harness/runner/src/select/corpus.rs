//! Corpus files: one case per line (bare, or `{"case": ..., ...}` as incidents, fuzz finds and
//! verdict lines write it), blank lines and `#` comments skipped. The incidents corpus is
//! built into kedge; a file given on the command line replaces it.

use super::SelectError;
use kedge_core::model::case::parse_corpus;
use kedge_core::{Case, CaseError, Detector, Verdict};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// corpora/incidents.jsonl as this kedge was built with it (through the crate's link to it,
/// so the packaged crate carries its own copy).
const INCIDENTS: &str = include_str!("../../incidents.jsonl");

/// Where a corpus came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The incidents corpus built into kedge.
    BuiltinIncidents,
    /// A file, as its path was given.
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::BuiltinIncidents => f.write_str("the built-in incidents corpus"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A corpus's text and where it came from.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Where it came from: its messages name it.
    pub(crate) source: Source,
    /// The whole file, unparsed.
    pub text: String,
}

impl Corpus {
    /// The corpus file at `path`; one that cannot be read is bad input
    /// ([`SelectError::Corpus`]).
    pub fn read(path: &Path) -> Result<Corpus, SelectError> {
        let text = std::fs::read_to_string(path).map_err(|source| SelectError::Corpus {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Corpus {
            source: Source::File(path.to_path_buf()),
            text,
        })
    }
    /// The incidents corpus: `path` when given, else the built-in one.
    pub fn incidents(path: Option<&Path>) -> Result<Corpus, SelectError> {
        match path {
            Some(p) => Corpus::read(p),
            None => Ok(Corpus {
                source: Source::BuiltinIncidents,
                text: INCIDENTS.to_string(),
            }),
        }
    }
    /// Its cases with their 1-based line numbers. A corpus with no case at all (empty, or only
    /// comments) is an error: it would select nothing.
    pub fn cases(&self) -> Result<Vec<(usize, Case)>, SelectError> {
        let cases = parse_corpus(&self.text).map_err(|error| SelectError::InCorpus {
            source_name: self.source.to_string(),
            error: Box::new(error),
        })?;
        if cases.is_empty() {
            return Err(SelectError::EmptyCorpus {
                source_name: self.source.to_string(),
            });
        }
        Ok(cases)
    }
    /// Its lines as incident expectations (none at all is an error, as for `cases`).
    pub fn expectations(&self) -> Result<Vec<Expectation>, SelectError> {
        let mut out = Vec::new();
        for (i, line) in self.text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let e: Expectation = serde_json::from_str(t).map_err(|e| SelectError::InCorpus {
                source_name: self.source.to_string(),
                error: Box::new(CaseError::MalformedJson {
                    line: i + 1,
                    msg: e.to_string(),
                }),
            })?;
            out.push(e);
        }
        if out.is_empty() {
            return Err(SelectError::EmptyCorpus {
                source_name: self.source.to_string(),
            });
        }
        Ok(out)
    }
}

/// An incident entry: the case and what kedge must say about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expectation {
    /// The case that reproduces the incident.
    pub case: Case,
    /// The incident's name; the several cases of one incident (both sides of its boundary,
    /// its fix) share it.
    pub incident: String,
    /// Verdict and detector expected natively (no sanitizer).
    pub expect: Expected,
    /// What the CPU alone must say (plan and reference).
    #[serde(default)]
    pub expect_cpu: Option<Expected>,
    /// Why the case says what it says, for people.
    #[serde(default)]
    pub note: String,
}

/// A verdict and the detector that must give it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Expected {
    /// The verdict the case must get.
    pub verdict: Verdict,
    /// What must see it: `none` for a pass or a skip.
    pub detector: Detector,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_incidents_parse_and_an_empty_corpus_is_refused() {
        let c = Corpus::incidents(None).unwrap();
        assert!(!c.cases().unwrap().is_empty());
        assert!(!c.expectations().unwrap().is_empty());
        let empty = Corpus {
            source: Source::File("e.jsonl".into()),
            text: "# only a comment\n\n".into(),
        };
        let e = empty.cases().unwrap_err();
        assert!(e.to_string().contains("e.jsonl"), "{e}");
        assert!(e.to_string().contains("no case"), "{e}");
    }
}
