//! kedge-ops' integration tests, in one binary: every op's declarations through the registry,
//! its kernels through NVRTC (ignored when the build found no libnvrtc), the incident corpus.

mod corpus;
mod declarations;
mod half;
mod nvrtc_compile;
mod row_ops;
mod sampling;

use kedge_core::contract::boundary::generated;
use kedge_core::{Boundary, DType, LimitsProfile, Op};

/// An op's boundaries on a profile for one of its dtypes: its own, then those generated from
/// its probe base for that dtype's element size.
pub fn boundaries(op: &dyn Op, limits: &LimitsProfile, dtype: DType) -> Vec<Boundary> {
    let mut v = op.boundaries(limits);
    if let Some(base) = op.probe_base() {
        v.extend(generated(&base, limits, dtype));
    }
    v
}
