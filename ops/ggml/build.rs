//! Sets `cfg(kedge_have_ggml)` and `cfg(kedge_have_ggml_dl)` for the tests that drive a real
//! ggml build (see harness/build-support/cuda_tools.rs).

// A link to harness/build-support/cuda_tools.rs, so the packaged crate has its own copy.
include!("cuda_tools.rs");

fn main() {
    ggml_probe();
}
