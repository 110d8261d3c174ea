//! Typed errors of the case model. The CLI maps each family to its own exit status.

use crate::model::dtype::DType;
use crate::model::ne::{fmt_ne, Ne};
use thiserror::Error;

/// Why a case is not a case kedge can run: bad input, exit status 2.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CaseError {
    /// A case line that is not a case's JSON.
    #[error("line {line}: malformed case JSON: {msg}")]
    MalformedJson {
        /// The 1-based line.
        line: usize,
        /// The parser's words.
        msg: String,
    },
    /// A dimension below 1.
    #[error("dimension ne[{dim}] is {value}: every dimension must be at least 1")]
    NonPositiveDim {
        /// Which dimension.
        dim: usize,
        /// Its value.
        value: i64,
    },
    /// More elements than a u64 counts.
    #[error("shape {} has more elements than fit in 64 bits", fmt_ne(.ne))]
    ElementCountOverflow {
        /// The shape.
        ne: Ne,
    },
    /// More bytes than a u64 counts.
    #[error("shape {} of {dtype} has more bytes than fit in 64 bits", fmt_ne(.ne))]
    ByteCountOverflow {
        /// The shape.
        ne: Ne,
        /// Its element type.
        dtype: DType,
    },
    /// A block-format tensor whose rows are not whole blocks.
    #[error("shape {} of {dtype}: ne[0] must be a multiple of its {block}-element block", fmt_ne(.ne))]
    PartialBlock {
        /// The shape.
        ne: Ne,
        /// Its element type.
        dtype: DType,
        /// Elements per block.
        block: u64,
    },
    /// No op of that name.
    #[error("unknown op '{op}' (known: {known})")]
    UnknownOp {
        /// The name given.
        op: String,
        /// The known ones.
        known: String,
    },
    /// A ggml name several of kedge's ops answer to.
    #[error("op name '{op}' is ambiguous: it names {candidates}; use kedge's name")]
    AmbiguousOp {
        /// The name given.
        op: String,
        /// The ops it names.
        candidates: String,
    },
    /// No impl of that name for the op.
    #[error("op '{op}' has no impl '{imp}' (known: {known})")]
    UnknownImpl {
        /// The op.
        op: String,
        /// The impl given.
        imp: String,
        /// The known ones.
        known: String,
    },
    /// No parameter of that name for the op.
    #[error("op '{op}' has no parameter '{param}' (known: {known})")]
    UnknownParam {
        /// The op.
        op: String,
        /// The parameter given.
        param: String,
        /// The known ones.
        known: String,
    },
    /// A parameter value of the wrong type or out of range.
    #[error("op '{op}': parameter '{param}': {msg}")]
    BadParam {
        /// The op.
        op: String,
        /// The parameter.
        param: String,
        /// What is wrong with the value.
        msg: String,
    },
    /// A dtype the op does not have.
    #[error("op '{op}' does not support dtype {dtype} (supported: {known})")]
    UnsupportedDtype {
        /// The op.
        op: String,
        /// The dtype given.
        dtype: DType,
        /// The ones it has.
        known: String,
    },
    /// A case the op cannot be built for (its shapes do not fit together, say).
    #[error("op '{op}': {msg}")]
    BadInput {
        /// The op.
        op: String,
        /// Why.
        msg: String,
    },
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
    /// The 1-based line.
    pub line: usize,
    /// What is wrong with it.
    pub error: CaseError,
}
