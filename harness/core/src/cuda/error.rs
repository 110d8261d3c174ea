//! What can go wrong on the device, typed: the driver is missing or refuses (`DeviceError`),
//! or a case's run fails (`RunError`), with whether the context survived.

use crate::cuda::nvrtc::NvrtcError;
use cudarc::driver::sys;
use thiserror::Error;

/// Why a device cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DeviceError {
    /// libcuda is not on this machine.
    #[error("no CUDA driver: libcuda.so could not be loaded (this machine has no NVIDIA driver)")]
    NoDriver,
    /// The driver is there; the device is not, or cannot be opened.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The driver is older than this build needs (`cuDriverGetVersion`).
    #[error("the NVIDIA driver supports {} (cuDriverGetVersion {found}); this kedge is built for CUDA 13.0 and needs a driver that supports CUDA 13.0 or newer (R580 or later): update the driver (`kedge plan` and `kedge sweep --cpu` need no GPU)", cuda_version_text(*found))]
    OldDriver {
        /// What the driver reports.
        found: i32,
    },
    /// A driver call failed while opening the device.
    #[error("{call} failed: {name} ({msg})")]
    Driver {
        /// The call.
        call: &'static str,
        /// The error's name (`CUDA_ERROR_INVALID_VALUE`).
        name: String,
        /// The driver's description of it.
        msg: String,
    },
}

/// What went wrong while running a case on the device.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RunError {
    /// The driver refused the launch itself (bad grid/block/shared memory).
    #[error("launch of {kernel} refused: {name} ({msg}); launch was {plan}")]
    LaunchRefused {
        /// The kernel's entry.
        kernel: String,
        /// The error's name.
        name: String,
        /// The driver's description of it.
        msg: String,
        /// The launch as planned.
        plan: String,
    },
    /// An error surfaced at synchronization after `during`.
    #[error("device fault after {during}: {name} ({msg})")]
    Fault {
        /// What ran before the fault surfaced.
        during: String,
        /// The error's name.
        name: String,
        /// Its code.
        code: u32,
        /// The driver's description of it.
        msg: String,
        /// The context is dead (every later call fails).
        sticky: bool,
    },
    /// A kernel did not compile.
    #[error(transparent)]
    Compile(#[from] NvrtcError),
    /// A driver call failed.
    #[error("{call} failed: {name} ({msg})")]
    Driver {
        /// The call.
        call: String,
        /// The error's name.
        name: String,
        /// Its code.
        code: u32,
        /// The driver's description of it.
        msg: String,
        /// The context is dead (every later call fails).
        sticky: bool,
    },
    /// Out of memory or another resource the device does not have.
    #[error("resource limit: {0}")]
    Resource(String),
    /// A buffer past a limit the device has whatever runs beside the case (a backend's
    /// maximum buffer length, modelled by the impl; exact mode's address range, which holds
    /// one case's buffers and no other process's): the same verdict as `Resource`, but the
    /// case run alone would get it again (`FIXED_LIMIT`).
    #[error("resource limit: {0}")]
    OverLimit(String),
    /// The impl refused the case with a reason (cuBLASLt has no algorithm, say).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The impl's own code reported an error (a plugin's KEDGE_ERROR, with its message).
    #[error("impl error: {0}")]
    Impl(String),
}

impl RunError {
    /// After a sticky error the context is dead: the worker must exit.
    pub(crate) fn is_sticky(&self) -> bool {
        match self {
            RunError::Fault { sticky, .. } | RunError::Driver { sticky, .. } => *sticky,
            _ => false,
        }
    }
}

pub(crate) fn err_name(r: sys::CUresult) -> (String, String) {
    let e = cudarc::driver::result::DriverError(r);
    let name = e
        .error_name()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{r:?}"));
    let msg = e
        .error_string()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    (name, msg)
}

/// Errors after which every later call in the process fails (seen on an H200: after memcheck
/// aborts a kernel, everything returns CUDA_ERROR_LAUNCH_FAILED).
pub fn is_sticky(r: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        r,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
    )
}

pub(crate) fn driver(call: &'static str, r: sys::CUresult) -> Result<(), RunError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, msg) = err_name(r);
    if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return Err(RunError::Resource(format!("{call}: {name} ({msg})")));
    }
    Err(RunError::Driver {
        call: call.into(),
        name,
        code: r as u32,
        msg,
        sticky: is_sticky(r),
    })
}

pub(crate) fn dev_err(call: &'static str, r: sys::CUresult) -> Result<(), DeviceError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, msg) = err_name(r);
    Err(DeviceError::Driver { call, name, msg })
}

/// `13000` as `CUDA 13.0`, `12040` as `CUDA 12.4` (cuDriverGetVersion's encoding:
/// 1000 * major + 10 * minor). `0` (unknown) as `CUDA ?`.
pub(crate) fn cuda_version_text(v: i32) -> String {
    if v <= 0 {
        return "CUDA ?".into();
    }
    format!("CUDA {}.{}", v / 1000, (v % 1000) / 10)
}
