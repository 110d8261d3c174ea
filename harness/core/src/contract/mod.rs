//! The contract between kedge's engine and its ops: what an op declares (tensors, reference,
//! parameters, impls, boundaries, the upstream repro format), what an impl promises before it
//! runs (its plan: launches, arguments, buffers) and how a plan runs on a device.

pub mod boundary;
pub mod imp;
pub mod op;
pub mod plan;
pub(crate) mod registry;
pub mod run;
mod tensor;
pub mod upstream;
