//! kedge's ops. Each module holds one op: its f64 reference, its impls (the `.cu` file beside
//! the Rust that launches it), its boundaries and its test-backend-ops repro format.

pub mod external;
pub mod fuzz_models;
pub mod l2_norm;
pub mod norm;
pub mod rms_norm;
pub mod row_norm;
pub mod rows;

use kedge_core::{Op, Registry};

/// Every op kedge ships, in report order.
pub fn all_ops() -> Vec<&'static dyn Op> {
    vec![&rms_norm::OP, &norm::OP, &l2_norm::OP]
}

pub fn registry() -> Registry {
    Registry::new(all_ops())
}
