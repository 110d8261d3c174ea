//! A kernel as kedge launches it: a CUDA source file compiled by NVRTC and one `extern "C"`
//! entry in it, and its arguments as the driver takes them.

use std::ffi::c_void;

/// A CUDA source file compiled by NVRTC and one `extern "C"` entry in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Path of the `.cu` file in the repository (for messages and repros).
    pub file: &'static str,
    /// Its text (`include_str!` of the file beside the launcher).
    pub source: &'static str,
    /// The `extern "C"` entry's name.
    pub entry: &'static str,
}

impl Kernel {
    /// The same file, another entry: ops declare their source once and name entries from it.
    pub const fn entry(self, entry: &'static str) -> Kernel {
        Kernel { entry, ..self }
    }
}

/// Declare a kernel source beside the Rust that launches it:
/// `kedge_core::kernel_source!(SRC = "ops/catalog/src/rms_norm/rms_norm.cu", "rms_norm.cu");`
/// gives `SRC: Kernel` (with an empty entry), and `SRC.entry("name")` each kernel in it.
#[macro_export]
macro_rules! kernel_source {
    ($name:ident = $file:literal, $rel:literal) => {
        const $name: $crate::cuda::kernel::Kernel = $crate::cuda::kernel::Kernel {
            file: $file,
            source: include_str!($rel),
            entry: "",
        };
    };
}

/// A kernel argument, owned so its address is stable for `cuLaunchKernel`.
#[derive(Debug, Clone, Copy)]
pub enum KArg {
    /// A device pointer.
    Ptr(u64),
    /// A 32-bit signed integer.
    I32(i32),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A 64-bit signed integer.
    I64(i64),
    /// A 64-bit unsigned integer.
    U64(u64),
    /// A 32-bit float.
    F32(f32),
}

impl KArg {
    pub(crate) fn as_ptr(&mut self) -> *mut c_void {
        match self {
            KArg::Ptr(x) | KArg::U64(x) => x as *mut u64 as *mut c_void,
            KArg::I32(x) => x as *mut i32 as *mut c_void,
            KArg::U32(x) => x as *mut u32 as *mut c_void,
            KArg::I64(x) => x as *mut i64 as *mut c_void,
            KArg::F32(x) => x as *mut f32 as *mut c_void,
        }
    }
}
