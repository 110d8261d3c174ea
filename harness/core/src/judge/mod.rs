//! Judging a run: outputs against the reference (NMSE as test-backend-ops computes it, max
//! error, the first bad element), poison survivors, and the result record every verdict is
//! written as.

pub mod abort;
pub mod compare;
pub mod result;
pub(crate) mod run_info;
pub mod sample;
