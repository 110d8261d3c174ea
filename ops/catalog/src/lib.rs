//! kedge's ops. Each module holds one op: its f64 reference, its impls (the `.cu` file beside
//! the Rust that launches it), its boundaries and its test-backend-ops repro format.

pub mod add_id;
pub mod cumsum;
pub mod external;
pub mod fp8_gemm;
pub mod fuzz_models;
pub mod l2_norm;
pub mod norm;
pub mod on_ggml;
pub mod rms_norm;
pub mod rms_norm_mul_add;
pub mod row_norm;
pub mod rows;
pub mod sdpa_prefill;
#[cfg(test)]
mod signature;
pub mod softmax;
pub mod tri;
pub mod zoo;

use kedge_core::{Op, Registry};

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

pub fn registry() -> Registry {
    Registry::new(all_ops())
}
