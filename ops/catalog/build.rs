//! Compiles the NVTX memory-API shim (ops/catalog/csrc/nvtx_mem_shim.c) against the vendored NVTX3
//! headers. NVTX3 is header-only and loads its tool at run time with dlopen, so this needs a
//! C compiler at build time and nothing from CUDA. Also sets `cfg(kedge_have_nvrtc)` for the
//! kernel-compile tests and `cfg(kedge_have_ggml)` for the tests that drive a real ggml build
//! (harness/build-support/cuda_tools.rs).

// A link to harness/build-support/cuda_tools.rs, so the packaged crate has its own copy.
include!("cuda_tools.rs");

fn main() {
    // The kernel-compile tests run where libnvrtc is (cfg(kedge_have_nvrtc)).
    nvrtc_probe();
    // The ggml tests run where a ggml build is named (cfg(kedge_have_ggml)).
    ggml_probe();
    println!("cargo:rerun-if-changed=csrc/nvtx_mem_shim.c");
    println!("cargo:rerun-if-changed=third_party/nvtx3");
    cc::Build::new()
        .file("csrc/nvtx_mem_shim.c")
        .include("third_party/nvtx3")
        .warnings(false)
        .compile("kedge_nvtx_mem");
    // dlopen/dlsym: in libc from glibc 2.34, in libdl before.
    println!("cargo:rustc-link-lib=dl");
}
