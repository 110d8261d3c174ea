//! Typed errors of the case model. The CLI maps each family to its own exit status.

use crate::model::dtype::DType;
use crate::model::shape::{fmt_ne, Ne};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CaseError {
    #[error("line {line}: malformed case JSON: {msg}")]
    MalformedJson { line: usize, msg: String },
    #[error("dimension ne[{dim}] is {value}: every dimension must be at least 1")]
    NonPositiveDim { dim: usize, value: i64 },
    #[error("shape {} has more elements than fit in 64 bits", fmt_ne(.ne))]
    ElementCountOverflow { ne: Ne },
    #[error("shape {} of {dtype} has more bytes than fit in 64 bits", fmt_ne(.ne))]
    ByteCountOverflow { ne: Ne, dtype: DType },
    #[error("unknown op '{op}' (known: {known})")]
    UnknownOp { op: String, known: String },
    #[error("op name '{op}' is ambiguous: it names {candidates}; use kedge's name")]
    AmbiguousOp { op: String, candidates: String },
    #[error("op '{op}' has no impl '{imp}' (known: {known})")]
    UnknownImpl {
        op: String,
        imp: String,
        known: String,
    },
    #[error("op '{op}' has no parameter '{param}' (known: {known})")]
    UnknownParam {
        op: String,
        param: String,
        known: String,
    },
    #[error("op '{op}': parameter '{param}': {msg}")]
    BadParam {
        op: String,
        param: String,
        msg: String,
    },
    #[error("op '{op}' does not support dtype {dtype} (supported: {known})")]
    UnsupportedDtype {
        op: String,
        dtype: DType,
        known: String,
    },
    #[error("op '{op}': {msg}")]
    BadInput { op: String, msg: String },
}

impl CaseError {
    /// Attach a line number to an error found while reading a corpus file.
    pub fn at_line(self, line: usize) -> LineError {
        LineError { line, error: self }
    }
}

/// A case error located in a corpus file.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("line {line}: {error}")]
pub struct LineError {
    pub line: usize,
    pub error: CaseError,
}
