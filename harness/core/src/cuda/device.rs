//! One device: its context and stream, its limits read live, kernels compiled through NVRTC
//! and loaded once, checked launches and copies.
//!
//! Every driver call's status is checked. cudarc is loaded dynamically, and calling into a
//! missing library panics inside cudarc, so `Device::open` checks that libcuda is present
//! first and answers `DeviceError::NoDriver`.

use crate::cuda::error::{dev_err, driver, err_name, is_sticky, DeviceError, RunError};
use crate::cuda::kernel::{KArg, Kernel};
use crate::cuda::nvrtc;
use crate::model::limits::{LimitsProfile, Sourced};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// Is the CUDA driver library (libcuda) on this machine?
pub fn driver_present() -> bool {
    // SAFETY: only dlopen probes.
    unsafe { sys::is_culib_present() }
}

/// GPUs the driver shows (after `CUDA_VISIBLE_DEVICES`). Called in a worker, which has the
/// driver open already: the supervisor never initializes CUDA itself.
pub fn device_count() -> Result<usize, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    let n = cudarc::driver::CudaContext::device_count().map_err(|e| DeviceError::Driver {
        call: "cuDeviceGetCount",
        name: format!("{e:?}"),
        msg: String::new(),
    })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// One device, its context and stream, its limits read live, and loaded modules.
pub struct Device {
    /// The device's primary context.
    pub ctx: Arc<cudarc::driver::CudaContext>,
    /// The stream every launch and copy goes on.
    pub stream: Arc<cudarc::driver::CudaStream>,
    /// The device's ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: i32,
    /// Its limits, read live.
    pub limits: LimitsProfile,
    /// `sm_XY`, what NVRTC compiles for.
    pub arch: String,
    /// `cuDriverGetVersion`: the CUDA version the driver supports (13000 for 13.0).
    pub driver_version: i32,
    /// The kernel-mode driver's version (`580.159.04`), where the system says it.
    pub kernel_driver: Option<String>,
    modules: HashMap<(&'static str, String), sys::CUmodule>,
    functions: HashMap<(&'static str, String, String), sys::CUfunction>,
    pub(crate) granularity: usize,
    /// Exact mode packs each case's buffers in `arena` (on by default); off, it calls
    /// `cuMemAlloc` per buffer (what a sanitizer needs to know each buffer's bounds).
    pub packed_exact: bool,
    pub(crate) arena: crate::cuda::arena::SharedArena,
}

impl Device {
    /// Open device `ordinal`: check the driver's version, create the context and read the
    /// limits.
    pub fn open(ordinal: usize) -> Result<Device, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        // Before any context: a driver too old for this build is refused in plain words
        // rather than failing at some later call.
        let mut driver_version = 0;
        // SAFETY: out-pointer valid; cuDriverGetVersion needs no cuInit.
        dev_err("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        crate::cuda::version::check_driver_version(driver_version)?;
        let ctx = cudarc::driver::CudaContext::new(ordinal)
            .map_err(|e| DeviceError::NoDevice(format!("{e:?}")))?;
        let stream = ctx.default_stream();
        let limits = read_limits(&ctx)?;
        let cc = limits.compute_capability.value;
        let arch = format!("sm_{cc}");
        let granularity = limits.vmm_granularity.value as usize;
        Ok(Device {
            ctx,
            stream,
            ordinal: ordinal as i32,
            limits,
            arch,
            driver_version,
            kernel_driver: crate::cuda::version::kernel_driver_version(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            granularity,
            packed_exact: true,
            arena: Default::default(),
        })
    }

    /// The raw stream handle.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Compile (through the on-disk cache) and load a kernel's module, once per process.
    pub fn function(
        &mut self,
        k: &Kernel,
        defines: &[(&str, String)],
    ) -> Result<sys::CUfunction, RunError> {
        let dkey: String = defines.iter().map(|(a, b)| format!("{a}={b};")).collect();
        if let Some(f) = self
            .functions
            .get(&(k.file, dkey.clone(), k.entry.to_string()))
        {
            return Ok(*f);
        }
        let module = match self.modules.get(&(k.file, dkey.clone())) {
            Some(m) => *m,
            None => {
                let compiled = nvrtc::compile(k, &self.arch, defines)?;
                let mut image = compiled.image;
                if !compiled.is_cubin && image.last() != Some(&0) {
                    image.push(0);
                }
                let mut m: sys::CUmodule = std::ptr::null_mut();
                // SAFETY: image is a complete cubin/PTX buffer that outlives the call.
                driver("cuModuleLoadData", unsafe {
                    sys::cuModuleLoadData(&mut m, image.as_ptr() as *const c_void)
                })?;
                self.modules.insert((k.file, dkey.clone()), m);
                m
            }
        };
        let name = std::ffi::CString::new(k.entry)
            .map_err(|_| RunError::Unsupported("kernel name has a NUL".into()))?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: module loaded above; name is a valid C string.
        driver("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, module, name.as_ptr())
        })?;
        self.functions
            .insert((k.file, dkey, k.entry.to_string()), f);
        Ok(f)
    }

    /// Wait for the stream; a fault is named with what ran before it (`during`).
    pub fn synchronize(&self, during: &str) -> Result<(), RunError> {
        // SAFETY: stream belongs to this context.
        let r = unsafe { sys::cuStreamSynchronize(self.cu_stream()) };
        if r == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let (name, msg) = err_name(r);
        Err(RunError::Fault {
            during: during.into(),
            name,
            code: r as u32,
            msg,
            sticky: is_sticky(r),
        })
    }

    /// Copy `bytes` into the allocation.
    pub fn upload(
        &self,
        a: &crate::cuda::alloc::DeviceAlloc,
        bytes: &[u8],
    ) -> Result<(), RunError> {
        if bytes.len() as u64 > a.bytes {
            return Err(RunError::Unsupported(format!(
                "upload of {} bytes into {} ({} bytes)",
                bytes.len(),
                a.name,
                a.bytes
            )));
        }
        // SAFETY: destination holds at least bytes.len() bytes.
        driver("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(a.ptr, bytes.as_ptr() as *const c_void, bytes.len())
        })
    }

    /// Copy the whole allocation back.
    pub fn download(&self, a: &crate::cuda::alloc::DeviceAlloc) -> Result<Vec<u8>, RunError> {
        let mut out = crate::model::host::zeroed_bytes(a.bytes as usize);
        // SAFETY: source holds a.bytes bytes; out sized to match.
        driver("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, a.ptr, out.len())
        })?;
        Ok(out)
    }

    /// Fill with a repeating pattern (the poison), element by element.
    pub fn fill_pattern(
        &self,
        a: &crate::cuda::alloc::DeviceAlloc,
        pattern: &[u8],
    ) -> Result<(), RunError> {
        // SAFETY: memset within the allocation.
        unsafe {
            match pattern.len() {
                1 => driver(
                    "cuMemsetD8",
                    sys::cuMemsetD8_v2(a.ptr, pattern[0], a.bytes as usize),
                ),
                2 if a.ptr.is_multiple_of(2) => driver(
                    "cuMemsetD16",
                    sys::cuMemsetD16_v2(
                        a.ptr,
                        u16::from_le_bytes([pattern[0], pattern[1]]),
                        (a.bytes / 2) as usize,
                    ),
                ),
                4 if a.ptr.is_multiple_of(4) => driver(
                    "cuMemsetD32",
                    sys::cuMemsetD32_v2(
                        a.ptr,
                        u32::from_le_bytes([pattern[0], pattern[1], pattern[2], pattern[3]]),
                        (a.bytes / 4) as usize,
                    ),
                ),
                _ => {
                    let buf: Vec<u8> = pattern
                        .iter()
                        .copied()
                        .cycle()
                        .take(a.bytes as usize)
                        .collect();
                    self.upload(a, &buf)
                }
            }
        }
    }

    /// Launch `kernel` with its arguments and check the driver's answer: a refused launch is
    /// `LaunchRefused` (naming `what`, the launch as planned). With `sync`, the stream is
    /// synchronized after the launch, so a fault is attributed to the launch that caused it;
    /// without it (kernel timing), the caller synchronizes and checks after the timed region.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        kernel: &Kernel,
        grid: [u64; 3],
        block: [u64; 3],
        smem: u64,
        args: &mut [KArg],
        what: &dyn std::fmt::Display,
        sync: bool,
    ) -> Result<(), RunError> {
        let f = self.function(kernel, &[])?;
        if smem > 48 * 1024 {
            // SAFETY: f is a loaded function.
            driver("cuFuncSetAttribute", unsafe {
                sys::cuFuncSetAttribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem.min(i32::MAX as u64) as i32,
                )
            })?;
        }
        let mut ptrs: Vec<*mut c_void> = args.iter_mut().map(|a| a.as_ptr()).collect();
        // A value past u32 cannot be asked for: the driver sees u32::MAX and refuses it, which
        // is the same answer as for any value past the limit.
        let clamp = |x: u64| x.min(u32::MAX as u64) as u32;
        // SAFETY: argument pointers point into `args`, alive for the call; the driver copies them.
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                clamp(grid[0]),
                clamp(grid[1]),
                clamp(grid[2]),
                clamp(block[0]),
                clamp(block[1]),
                clamp(block[2]),
                clamp(smem),
                self.cu_stream(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            let (name, msg) = err_name(r);
            if is_sticky(r) {
                return Err(RunError::Fault {
                    during: format!("launch of {}", kernel.entry),
                    name,
                    code: r as u32,
                    msg,
                    sticky: true,
                });
            }
            return Err(RunError::LaunchRefused {
                kernel: kernel.entry.to_string(),
                name,
                msg,
                plan: what.to_string(),
            });
        }
        if sync {
            // Check after every launch: a fault is attributed to the launch that caused it.
            self.synchronize(&format!("launch of {what}"))
        } else {
            Ok(())
        }
    }

    /// A device-to-device copy of `bytes` bytes from `src` to `dst`, on the stream.
    pub fn copy_d2d(&self, dst: u64, src: u64, bytes: usize) -> Result<(), RunError> {
        // SAFETY: both ranges lie in allocations of at least `bytes` bytes (the caller's).
        driver("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.cu_stream())
        })
    }

    /// A deliberate, harmless API error between cases. compute-sanitizer records it as an
    /// `Api` record whose host stack names `kedge_case_marker`, so records can be attributed
    /// to the case that ran between two markers.
    pub fn case_marker(&self, seq: u64) {
        kedge_case_marker(seq);
    }
}

/// See `Device::case_marker`. `cuDeviceGet` with ordinal -1 returns
/// CUDA_ERROR_INVALID_DEVICE and touches nothing; the host frame name is what the sanitizer
/// parser looks for. (A zero-byte `cuMemAlloc` was used first: natively it fails, but under
/// memcheck with `--padding` the sanitizer's allocator accepts it and reports a 0-byte leak at
/// exit instead of an API error, seen on the H200; a device query involves no allocator.)
#[inline(never)]
#[no_mangle]
pub extern "C" fn kedge_case_marker(seq: u64) {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: out-pointer valid; the driver rejects the ordinal.
    let _ = unsafe { sys::cuDeviceGet(&mut dev, -1) };
    std::hint::black_box((seq, dev));
}

fn read_limits(ctx: &Arc<cudarc::driver::CudaContext>) -> Result<LimitsProfile, DeviceError> {
    use sys::CUdevice_attribute::*;
    let live = "read from the live device (cuDeviceGetAttribute)";
    let a = |attr| -> Result<u64, DeviceError> {
        ctx.attribute(attr)
            .map(|v| v as u64)
            .map_err(|e| DeviceError::Driver {
                call: "cuDeviceGetAttribute",
                name: format!("{e:?}"),
                msg: String::new(),
            })
    };
    let v = |x: u64| Sourced {
        value: x,
        source: live.to_string(),
    };
    let name = ctx.name().unwrap_or_else(|_| "unknown".into());
    let total = ctx.total_mem().unwrap_or(0) as u64;
    let dev = ctx.cu_device();
    // SAFETY: zeroed POD prop, filled for a device allocation.
    let gran = unsafe {
        let mut prop: sys::CUmemAllocationProp = std::mem::zeroed();
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        let mut g = 0usize;
        dev_err(
            "cuMemGetAllocationGranularity",
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            ),
        )?;
        g as u64
    };
    Ok(LimitsProfile {
        name: "live".into(),
        device: name,
        compute_capability: v(a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? * 10
            + a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?),
        sm_count: v(a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?),
        max_grid: [
            v(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?),
            v(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?),
            v(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?),
        ],
        max_block: [
            v(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?),
            v(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?),
            v(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?),
        ],
        max_threads_per_block: v(a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
        shared_per_block: v(a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?),
        shared_per_block_optin: v(a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?),
        max_alloc_bytes: Sourced {
            value: total,
            source: "cuDeviceTotalMem (CUDA has no smaller cap on one allocation)".into(),
        },
        device_memory_bytes: Sourced {
            value: total,
            source: "cuDeviceTotalMem".into(),
        },
        vmm_granularity: Sourced {
            value: gran,
            source: "cuMemGetAllocationGranularity (minimum)".into(),
        },
    })
}
