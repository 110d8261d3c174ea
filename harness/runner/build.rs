//! Sets `cfg(kedge_have_nvrtc)` and `cfg(kedge_have_nvcc)` for the tests that compile
//! kernels (see harness/build-support/cuda_tools.rs).

include!("../build-support/cuda_tools.rs");

fn main() {
    nvrtc_probe();
    nvcc_probe();
}
