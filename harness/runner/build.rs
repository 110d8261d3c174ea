//! Sets `cfg(kedge_have_nvrtc)` and `cfg(kedge_have_nvcc)` for the tests that compile
//! kernels (see harness/build-support/cuda_tools.rs).

// A link to harness/build-support/cuda_tools.rs, so the packaged crate has its own copy.
include!("cuda_tools.rs");

fn main() {
    nvrtc_probe();
    nvcc_probe();
}
