//! kedge's ops. Each module holds one op: its f64 reference, its impls (the `.cu` file beside
//! the Rust that launches it), its boundaries and its test-backend-ops repro format.

#![warn(missing_docs)]

pub(crate) mod add_id;
pub mod cumsum;
pub mod external;
pub(crate) mod fp8_gemm;
pub mod fuzz_models;
pub(crate) mod l2_norm;
pub(crate) mod norm;
pub mod on_ggml;
pub(crate) mod rms_norm;
pub(crate) mod rms_norm_mul_add;
pub(crate) mod row_norm;
pub mod rows;
pub(crate) mod sdpa_prefill;
#[cfg(test)]
mod signature;
pub mod softmax;
pub(crate) mod tri;
pub(crate) mod zoo;

use kedge_core::{Op, OpParams, Params, Registry};

/// An op's parameters as a case's map, set typed: `P`'s defaults, changed by `set`
/// (`params_with(|p: &mut SoftmaxParams| p.mask = true)`); every parameter is written.
pub(crate) fn params_with<P: OpParams>(set: impl FnOnce(&mut P)) -> Params {
    P::set_in(&Params::new(), set)
}

/// Every op kedge ships, in report order; then ggml's other ops, which run only on a ggml build.
pub fn all_ops() -> Vec<&'static dyn Op> {
    let mut ops: Vec<&'static dyn Op> = vec![
        &rms_norm::OP,
        &rms_norm_mul_add::OP,
        &norm::OP,
        &l2_norm::OP,
        &softmax::OP,
        &cumsum::OP,
        &tri::OP,
        &add_id::OP,
        &fp8_gemm::OP,
        &zoo::OP,
        &sdpa_prefill::OP,
    ];
    ops.extend(on_ggml::table::TABLE.iter().map(|e| e as &'static dyn Op));
    ops
}

/// A registry of [`all_ops`] with their built-in impls; a ggml build's impls are added to it by
/// [`on_ggml::register`], a plugin's or a source kernel's by `Registry::add_impl`.
pub fn registry() -> Registry {
    Registry::new(all_ops())
}
