//! NVTX memory-API annotations for the grow-only scratch pool (C shim in
//! ops/catalog/csrc/nvtx_mem_shim.c over the vendored NVTX3 headers).
//!
//! compute-sanitizer loads itself into NVTX through `NVTX_INJECTION64_PATH` and, with the
//! NVTX memory API (on by default since CUDA 12), memcheck reports accesses to parts of a
//! registered sub-allocator heap that are outside every registered region. That turns the
//! pool's slack, which hides the staging overrun from exact-allocation bounds, back into
//! checked memory. Natively (no tool attached) the calls do nothing.

use std::ffi::{c_char, c_void, CString};

extern "C" {
    fn kedge_nvtx_pool_register(ptr: u64, bytes: u64) -> *mut c_void;
    fn kedge_nvtx_region_register(heap: *mut c_void, ptr: u64, bytes: u64, name: *const c_char);
    fn kedge_nvtx_pool_reset(heap: *mut c_void);
    fn kedge_nvtx_pool_unregister(heap: *mut c_void);
    fn kedge_nvtx_injection_configured() -> i32;
}

/// Is a tool (compute-sanitizer) configured to receive NVTX calls in this process?
pub(crate) fn tool_attached() -> bool {
    // SAFETY: reads an environment variable.
    unsafe { kedge_nvtx_injection_configured() != 0 }
}

/// A pool registered as an NVTX sub-allocator heap; unregistered on drop (before the
/// pool's memory is freed: the engine frees scratch after the impl returns).
pub(crate) struct NvtxPool {
    heap: *mut c_void,
}

impl NvtxPool {
    pub(crate) fn register(base: u64, bytes: u64) -> NvtxPool {
        // SAFETY: the shim only records the range; base/bytes describe a live allocation.
        let heap = unsafe { kedge_nvtx_pool_register(base, bytes) };
        NvtxPool { heap }
    }
    /// Register a sub-allocation [ptr, ptr + bytes) with a name memcheck can print.
    pub(crate) fn region(&self, ptr: u64, bytes: u64, name: &str) {
        let name = CString::new(name.replace('\0', " ")).unwrap_or_default();
        // SAFETY: heap came from register (or is NULL, which the NVTX stubs accept); the name
        // outlives the call.
        unsafe { kedge_nvtx_region_register(self.heap, ptr, bytes, name.as_ptr()) }
    }
    /// Forget every region (the pool is about to be reused).
    pub(crate) fn reset(&self) {
        // SAFETY: heap came from register.
        unsafe { kedge_nvtx_pool_reset(self.heap) }
    }
}

impl Drop for NvtxPool {
    fn drop(&mut self) {
        // SAFETY: heap came from register and is unregistered once.
        unsafe { kedge_nvtx_pool_unregister(self.heap) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_harmless_without_a_tool() {
        // No NVTX_INJECTION64_PATH here: NVTX initializes to no-op stubs and returns a null
        // heap; none of the calls may crash.
        if tool_attached() {
            return;
        }
        let p = NvtxPool::register(0x1000_0000, 4096);
        p.region(0x1000_0000, 1024, "w");
        p.region(0x1000_0400, 512, "a");
        p.reset();
        drop(p);
    }
}
