//! Driver versions as a person reads them, and the oldest driver this build can use.
//!
//! kedge binds the driver through cudarc's `cuda-13000` bindings, loaded at run time: each
//! entry point is looked up by name on its first call. Every driver entry point kedge calls
//! exists in 12.x drivers too except one (`cuEventElapsedTime_v2`, 12.8 and later), but
//! NVRTC and cuBLASLt 13 produce code and need a driver that a 12.x driver is not:
//! a 12.x driver refuses NVRTC 13's PTX and cuBLASLt 13 does not initialize. So the worker
//! checks `cuDriverGetVersion` before it opens a context and refuses an older driver with a
//! plain message (`DeviceError::OldDriver`, exit status 3), instead of failing every case.

use crate::cuda::error::DeviceError;

/// The oldest driver this build runs on, as `cuDriverGetVersion` reports it: CUDA 13.0.
const MIN_DRIVER_CUDA: i32 = 13000;

use crate::cuda::error::cuda_version_text;

/// The kernel-mode driver's version (`580.159.04`) from `/proc/driver/nvidia/version`, which
/// the driver API does not report. `None` where that file is absent (not Linux, a container
/// without it).
pub(crate) fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_kernel_driver_version(&text)
}

/// The version in the `NVRM version:` line of `/proc/driver/nvidia/version`: the first word
/// made of dot-separated numbers.
fn parse_kernel_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// `driver 580.159.04 (CUDA 13.0)`, or `CUDA 13.0` when the kernel-mode version is unknown.
pub fn driver_text(kernel: Option<&str>, cuda: i32) -> String {
    match kernel {
        Some(k) => format!("driver {k} ({})", cuda_version_text(cuda)),
        None => cuda_version_text(cuda),
    }
}

/// `Ok` when a driver reporting `cuda` (cuDriverGetVersion) can run this build.
pub(crate) fn check_driver_version(cuda: i32) -> Result<(), DeviceError> {
    if cuda >= MIN_DRIVER_CUDA {
        Ok(())
    } else {
        Err(DeviceError::OldDriver { found: cuda })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(cuda_version_text(13000), "CUDA 13.0");
        assert_eq!(cuda_version_text(12040), "CUDA 12.4");
        assert_eq!(cuda_version_text(12090), "CUDA 12.9");
        assert_eq!(cuda_version_text(0), "CUDA ?");
        assert_eq!(
            driver_text(Some("580.159.04"), 13000),
            "driver 580.159.04 (CUDA 13.0)"
        );
        assert_eq!(driver_text(None, 13000), "CUDA 13.0");
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(
            parse_kernel_driver_version(proprietary).as_deref(),
            Some("580.159.04")
        );
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n";
        assert_eq!(
            parse_kernel_driver_version(open).as_deref(),
            Some("580.65.06")
        );
        assert_eq!(parse_kernel_driver_version("nothing here"), None);
    }

    #[test]
    fn a_driver_older_than_cuda_13_is_refused_plainly() {
        assert!(check_driver_version(13000).is_ok());
        assert!(check_driver_version(13020).is_ok());
        let e = check_driver_version(12040).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("CUDA 12.4"), "{msg}");
        assert!(msg.contains("CUDA 13.0 or newer"), "{msg}");
        assert!(msg.contains("R580"), "{msg}");
    }
}
