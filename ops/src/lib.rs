//! kedge's ops. Each module holds one op: its f64 reference, its impls (the `.cu` file beside
//! the Rust that launches it), its boundaries and its test-backend-ops repro format.

pub mod add_id;
pub mod cumsum;
pub mod ggml;
pub mod l2_norm;
pub mod norm;
pub mod rms_norm;
pub mod rms_norm_mul_add;
pub mod row_norm;
pub mod rows;
pub mod softmax;
pub mod tri;

#[cfg(test)]
mod signature;

use kedge_core::{Op, Registry};

/// Every op kedge ships, in report order.
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
    ];
    ops.extend(ggml::table::TABLE.iter().map(|e| e as &'static dyn Op));
    ops
}

pub fn registry() -> Registry {
    Registry::new(all_ops())
}
