//! Sets `cfg(kedge_have_nvrtc)` when libnvrtc is installed, for the tests that compile
//! kernels (see harness/build-support/nvrtc_probe.rs).

include!("../build-support/nvrtc_probe.rs");

fn main() {
    nvrtc_probe();
}
