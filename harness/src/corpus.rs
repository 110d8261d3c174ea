//! Corpus files: one case per line (bare, or `{"case": ..., "expect": ...}`), `#` comments.

use kedge_core::case::parse_corpus;
use kedge_core::Case;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("cannot read {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse {
        path: String,
        err: kedge_core::CaseError,
    },
}

pub fn read_cases(path: &Path) -> Result<Vec<Case>, CorpusError> {
    Ok(read_numbered(path)?.into_iter().map(|(_, c)| c).collect())
}

pub fn read_numbered(path: &Path) -> Result<Vec<(usize, Case)>, CorpusError> {
    let text = std::fs::read_to_string(path).map_err(|err| CorpusError::Io {
        path: path.display().to_string(),
        err,
    })?;
    parse_corpus(&text).map_err(|err| CorpusError::Parse {
        path: path.display().to_string(),
        err,
    })
}

/// An incident entry: the case and what kedge must say about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expectation {
    pub case: Case,
    pub incident: String,
    /// Verdict and detector expected natively (no sanitizer).
    pub expect: Expected,
    /// What the CPU alone must say (plan and reference).
    #[serde(default)]
    pub expect_cpu: Option<Expected>,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Expected {
    pub verdict: kedge_core::Verdict,
    pub detector: kedge_core::Detector,
}

pub fn read_expectations(path: &Path) -> Result<Vec<Expectation>, CorpusError> {
    let text = std::fs::read_to_string(path).map_err(|err| CorpusError::Io {
        path: path.display().to_string(),
        err,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let e: Expectation = serde_json::from_str(t).map_err(|e| CorpusError::Parse {
            path: path.display().to_string(),
            err: kedge_core::CaseError::MalformedJson {
                line: i + 1,
                msg: e.to_string(),
            },
        })?;
        out.push(e);
    }
    Ok(out)
}
