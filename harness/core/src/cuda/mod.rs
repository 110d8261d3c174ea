//! How a plan runs on an NVIDIA GPU: the driver (loaded at run time, so kedge builds and runs
//! its CPU side without CUDA), one device's context, NVRTC compilation with an on-disk cache,
//! allocation modes, and launches whose every status is checked.

pub(crate) mod alloc;
mod arena;
pub mod big;
pub(crate) mod device;
pub mod error;
pub mod guard_pool;
pub mod kernel;
pub mod nvrtc;
mod version;

pub use alloc::DeviceAlloc;
pub use device::{device_count, driver_present, kedge_case_marker, Device};
pub use error::{DeviceError, RunError};
pub use kernel::{KArg, Kernel};
pub use version::driver_text;
