//! The CUDA backend: context, module cache, allocation modes, checked launches.
//!
//! Every driver call's status is checked. cudarc is loaded dynamically, and calling into a
//! missing library panics inside cudarc, so `Device::open` checks that libcuda is present
//! first and answers `DeviceError::NoDriver`.

use crate::case::AllocMode;
use crate::launch::{Kernel, LaunchPlan, ReproArg};
use crate::limits::{LimitsProfile, Sourced};
use crate::nvrtc::{self, NvrtcError};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum DeviceError {
    #[error("no CUDA driver: libcuda.so could not be loaded (this machine has no NVIDIA driver)")]
    NoDriver,
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("{call} failed: {name} ({msg})")]
    Driver {
        call: &'static str,
        name: String,
        msg: String,
    },
}

/// What went wrong while running a case on the device.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RunError {
    /// The driver refused the launch itself (bad grid/block/shared memory).
    #[error("launch of {kernel} refused: {name} ({msg}); launch was {plan}")]
    LaunchRefused {
        kernel: String,
        name: String,
        msg: String,
        plan: String,
    },
    /// An error surfaced at synchronization after `during`.
    #[error("device fault after {during}: {name} ({msg})")]
    Fault {
        during: String,
        name: String,
        code: u32,
        msg: String,
        sticky: bool,
    },
    #[error(transparent)]
    Compile(#[from] NvrtcError),
    #[error("{call} failed: {name} ({msg})")]
    Driver {
        call: String,
        name: String,
        code: u32,
        msg: String,
        sticky: bool,
    },
    /// Out of memory or another resource the device does not have.
    #[error("resource limit: {0}")]
    Resource(String),
    /// The impl refused the case with a reason (cuBLASLt has no algorithm, say).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The impl's own code reported an error (a plugin's KEDGE_ERROR, with its message).
    #[error("impl error: {0}")]
    Impl(String),
}

impl RunError {
    /// After a sticky error the context is dead: the worker must exit.
    pub fn is_sticky(&self) -> bool {
        match self {
            RunError::Fault { sticky, .. } | RunError::Driver { sticky, .. } => *sticky,
            _ => false,
        }
    }
}

fn err_name(r: sys::CUresult) -> (String, String) {
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

fn driver(call: &'static str, r: sys::CUresult) -> Result<(), RunError> {
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

fn dev_err(call: &'static str, r: sys::CUresult) -> Result<(), DeviceError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, msg) = err_name(r);
    Err(DeviceError::Driver { call, name, msg })
}

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
    pub ctx: Arc<cudarc::driver::CudaContext>,
    pub stream: Arc<cudarc::driver::CudaStream>,
    pub ordinal: i32,
    pub limits: LimitsProfile,
    pub arch: String,
    pub driver_version: i32,
    modules: HashMap<(&'static str, String), sys::CUmodule>,
    functions: HashMap<(&'static str, String, String), sys::CUfunction>,
    granularity: usize,
}

impl Device {
    pub fn open(ordinal: usize) -> Result<Device, DeviceError> {
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        let ctx = cudarc::driver::CudaContext::new(ordinal)
            .map_err(|e| DeviceError::NoDevice(format!("{e:?}")))?;
        let stream = ctx.default_stream();
        let limits = read_limits(&ctx)?;
        let cc = limits.compute_capability.value;
        let arch = format!("sm_{cc}");
        let mut driver_version = 0;
        // SAFETY: out-pointer valid; driver initialized by CudaContext::new.
        dev_err("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        let granularity = limits.vmm_granularity.value as usize;
        Ok(Device {
            ctx,
            stream,
            ordinal: ordinal as i32,
            limits,
            arch,
            driver_version,
            modules: HashMap::new(),
            functions: HashMap::new(),
            granularity,
        })
    }

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

    /// Allocate `bytes` in `mode`. Allocation failures are `RunError::Resource`.
    pub fn alloc(
        &self,
        name: &str,
        bytes: u64,
        mode: AllocMode,
        align: u64,
    ) -> Result<DeviceAlloc, RunError> {
        let bytes_us = usize::try_from(bytes)
            .map_err(|_| RunError::Resource(format!("{name}: {bytes} bytes")))?;
        match mode {
            AllocMode::Exact => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: out-pointer valid.
                driver("cuMemAlloc", unsafe {
                    sys::cuMemAlloc_v2(&mut p, bytes_us.max(1))
                })
                .map_err(|e| annotate_oom(e, name, bytes))?;
                Ok(DeviceAlloc {
                    name: name.into(),
                    ptr: p,
                    bytes,
                    kind: AllocKind::Plain { base: p },
                })
            }
            AllocMode::Canary => {
                let total = bytes_us + 2 * CANARY_BYTES;
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: out-pointers valid; memset within the allocation.
                unsafe {
                    driver("cuMemAlloc", sys::cuMemAlloc_v2(&mut p, total))
                        .map_err(|e| annotate_oom(e, name, bytes))?;
                    driver("cuMemsetD8", sys::cuMemsetD8_v2(p, CANARY_BYTE, total))?;
                }
                Ok(DeviceAlloc {
                    name: name.into(),
                    ptr: p + CANARY_BYTES as u64,
                    bytes,
                    kind: AllocKind::Canary { base: p, total },
                })
            }
            AllocMode::Guard | AllocMode::GuardFront => {
                self.alloc_guarded(name, bytes_us, mode == AllocMode::GuardFront, align)
            }
        }
    }

    fn alloc_guarded(
        &self,
        name: &str,
        bytes: usize,
        front: bool,
        align: u64,
    ) -> Result<DeviceAlloc, RunError> {
        let g = self.granularity.max(1);
        let mapped = bytes.max(1).div_ceil(g) * g;
        let reserve = mapped + g;
        let prop = self.alloc_prop();
        let mut base: sys::CUdeviceptr = 0;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: standard VMM sequence; each step's failure unwinds the earlier ones.
        unsafe {
            driver(
                "cuMemAddressReserve",
                sys::cuMemAddressReserve(&mut base, reserve, g, 0, 0),
            )?;
            if let Err(e) = driver(
                "cuMemCreate",
                sys::cuMemCreate(&mut handle, mapped, &prop, 0),
            ) {
                sys::cuMemAddressFree(base, reserve);
                return Err(annotate_oom(e, name, bytes as u64));
            }
            let map_at = if front { base + g as u64 } else { base };
            if let Err(e) = driver("cuMemMap", sys::cuMemMap(map_at, mapped, 0, handle, 0)) {
                sys::cuMemRelease(handle);
                sys::cuMemAddressFree(base, reserve);
                return Err(e);
            }
            let desc = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            if let Err(e) = driver(
                "cuMemSetAccess",
                sys::cuMemSetAccess(map_at, mapped, &desc, 1),
            ) {
                sys::cuMemUnmap(map_at, mapped);
                sys::cuMemRelease(handle);
                sys::cuMemAddressFree(base, reserve);
                return Err(e);
            }
            let align = align.max(1);
            let ptr = if front {
                map_at
            } else {
                // The tensor's last byte is the last mapped byte, unless alignment forces a gap.
                let end = map_at + mapped as u64;
                (end - bytes as u64) / align * align
            };
            Ok(DeviceAlloc {
                name: name.into(),
                ptr,
                bytes: bytes as u64,
                kind: AllocKind::Vmm {
                    reserve_base: base,
                    reserve,
                    map_at,
                    mapped,
                    handle,
                },
            })
        }
    }

    fn alloc_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: plain-old-data struct; zero is a valid starting point for every field.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.ordinal;
        prop
    }

    pub fn upload(&self, a: &DeviceAlloc, bytes: &[u8]) -> Result<(), RunError> {
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

    pub fn download(&self, a: &DeviceAlloc) -> Result<Vec<u8>, RunError> {
        let mut out = vec![0u8; a.bytes as usize];
        // SAFETY: source holds a.bytes bytes; out sized to match.
        driver("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, a.ptr, out.len())
        })?;
        Ok(out)
    }

    /// Fill with a repeating pattern (the poison), element by element.
    pub fn fill_pattern(&self, a: &DeviceAlloc, pattern: &[u8]) -> Result<(), RunError> {
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

    /// Red zones that changed, as (allocation, "front"/"back", first changed offset).
    pub fn check_canary(&self, a: &DeviceAlloc) -> Result<Option<String>, RunError> {
        let AllocKind::Canary { base, total } = a.kind else {
            return Ok(None);
        };
        let mut zone = vec![0u8; CANARY_BYTES];
        for (which, at) in [
            ("before", base),
            ("after", base + (total - CANARY_BYTES) as u64),
        ] {
            // SAFETY: both zones lie inside the allocation.
            driver("cuMemcpyDtoH", unsafe {
                sys::cuMemcpyDtoH_v2(zone.as_mut_ptr() as *mut c_void, at, CANARY_BYTES)
            })?;
            if let Some(i) = zone.iter().position(|&b| b != CANARY_BYTE) {
                let off = if which == "before" {
                    CANARY_BYTES - i
                } else {
                    i
                };
                return Ok(Some(format!(
                    "{}: red zone {which} the tensor was written ({} bytes {which} it, {} bytes changed)",
                    a.name,
                    off,
                    zone.iter().filter(|&&b| b != CANARY_BYTE).count()
                )));
            }
        }
        Ok(None)
    }

    /// A raw launch with the driver's answer checked: a refused launch is `LaunchRefused`.
    pub fn launch_raw(&mut self, plan: &LaunchPlan, args: &mut [KArg]) -> Result<(), RunError> {
        let k = plan.source.ok_or_else(|| {
            RunError::Unsupported(format!("{} has no kernel source", plan.kernel))
        })?;
        let f = self.function(&k, &[])?;
        self.launch_fn(f, plan, args)
    }

    fn launch_fn(
        &mut self,
        f: sys::CUfunction,
        plan: &LaunchPlan,
        args: &mut [KArg],
    ) -> Result<(), RunError> {
        if plan.smem > 48 * 1024 {
            // SAFETY: f is a loaded function.
            driver("cuFuncSetAttribute", unsafe {
                sys::cuFuncSetAttribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    plan.smem.min(i32::MAX as u64) as i32,
                )
            })?;
        }
        let mut ptrs: Vec<*mut c_void> = args.iter_mut().map(|a| a.as_ptr()).collect();
        let clamp = |x: u64| x.min(u32::MAX as u64) as u32;
        // SAFETY: argument pointers point into `args`, alive for the call; the driver copies them.
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                clamp(plan.grid[0]),
                clamp(plan.grid[1]),
                clamp(plan.grid[2]),
                clamp(plan.block[0]),
                clamp(plan.block[1]),
                clamp(plan.block[2]),
                clamp(plan.smem),
                self.cu_stream(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            let (name, msg) = err_name(r);
            if is_sticky(r) {
                return Err(RunError::Fault {
                    during: format!("launch of {}", plan.kernel),
                    name,
                    code: r as u32,
                    msg,
                    sticky: true,
                });
            }
            return Err(RunError::LaunchRefused {
                kernel: plan.kernel.clone(),
                name,
                msg,
                plan: plan.to_string(),
            });
        }
        // Check after every launch: a fault is attributed to the launch that caused it.
        self.synchronize(&format!("launch of {plan}"))
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

fn annotate_oom(e: RunError, name: &str, bytes: u64) -> RunError {
    match e {
        RunError::Resource(m) => {
            RunError::Resource(format!("allocating {name} ({bytes} bytes): {m}"))
        }
        other => other,
    }
}

pub const CANARY_BYTES: usize = 4096;
pub const CANARY_BYTE: u8 = 0xCA;

#[derive(Debug)]
pub enum AllocKind {
    Plain {
        base: sys::CUdeviceptr,
    },
    Canary {
        base: sys::CUdeviceptr,
        total: usize,
    },
    Vmm {
        reserve_base: sys::CUdeviceptr,
        reserve: usize,
        map_at: sys::CUdeviceptr,
        mapped: usize,
        handle: sys::CUmemGenericAllocationHandle,
    },
}

/// A device allocation; `ptr` is where the tensor starts, `bytes` its exact size.
#[derive(Debug)]
pub struct DeviceAlloc {
    pub name: String,
    pub ptr: sys::CUdeviceptr,
    pub bytes: u64,
    pub kind: AllocKind,
}

impl DeviceAlloc {
    /// Bytes between the tensor's end and the first unmapped byte (guard mode), if any.
    pub fn guard_slack(&self) -> Option<u64> {
        match self.kind {
            AllocKind::Vmm { map_at, mapped, .. } if self.ptr != map_at => {
                Some(map_at + mapped as u64 - (self.ptr + self.bytes))
            }
            _ => None,
        }
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // Errors are ignored: after a sticky fault every call fails and the process exits.
        // SAFETY: each handle/pointer was created by this allocation and is released once.
        unsafe {
            match self.kind {
                AllocKind::Plain { base } | AllocKind::Canary { base, .. } => {
                    sys::cuMemFree_v2(base);
                }
                AllocKind::Vmm {
                    reserve_base,
                    reserve,
                    map_at,
                    mapped,
                    handle,
                } => {
                    sys::cuMemUnmap(map_at, mapped);
                    sys::cuMemRelease(handle);
                    sys::cuMemAddressFree(reserve_base, reserve);
                }
            }
        }
    }
}

/// A kernel argument, owned so its address is stable for `cuLaunchKernel`.
#[derive(Debug, Clone, Copy)]
pub enum KArg {
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
}

impl KArg {
    fn as_ptr(&mut self) -> *mut c_void {
        match self {
            KArg::Ptr(x) | KArg::U64(x) => x as *mut u64 as *mut c_void,
            KArg::I32(x) => x as *mut i32 as *mut c_void,
            KArg::U32(x) => x as *mut u32 as *mut c_void,
            KArg::I64(x) => x as *mut i64 as *mut c_void,
            KArg::F32(x) => x as *mut f32 as *mut c_void,
        }
    }
}

/// What an impl sees while it runs a case: the device, the case's tensors (inputs then
/// outputs, in the op's spec order), and scratch allocated in the case's mode.
pub struct RunCtx<'a> {
    pub dev: &'a mut Device,
    pub tensors: &'a [DeviceAlloc],
    pub alloc: AllocMode,
    pub scratch: Vec<DeviceAlloc>,
    /// Launches issued, for the record.
    pub launched: Vec<String>,
    /// Op-specific facts the impl wants in the verdict line.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl<'a> RunCtx<'a> {
    pub fn ptr(&self, i: usize) -> u64 {
        self.tensors[i].ptr
    }
    /// Launch one planned kernel with its arguments; checked, then synchronized.
    pub fn launch(
        &mut self,
        plan: &crate::launch::LaunchPlan,
        args: &[KArg],
    ) -> Result<(), RunError> {
        let mut a = args.to_vec();
        self.launched.push(plan.to_string());
        self.dev.launch_raw(plan, &mut a)
    }
    /// Scratch of exactly `bytes`, in the case's allocation mode; kept until the case ends.
    pub fn scratch(&mut self, name: &str, bytes: u64, align: u64) -> Result<u64, RunError> {
        let a = self.dev.alloc(name, bytes, self.alloc, align)?;
        let p = a.ptr;
        self.scratch.push(a);
        Ok(p)
    }
    pub fn stream(&self) -> sys::CUstream {
        self.dev.cu_stream()
    }
    /// Turn symbolic arguments (the ones `Impl::args_for_repro` returns) into kernel
    /// arguments: tensors by index, scratch allocated now in the case's mode.
    pub fn resolve_args(&mut self, args: &[ReproArg]) -> Result<Vec<KArg>, RunError> {
        args.iter()
            .map(|a| {
                Ok(match a {
                    ReproArg::Tensor(i) => match self.tensors.get(*i) {
                        Some(t) => KArg::Ptr(t.ptr),
                        None => {
                            return Err(RunError::Unsupported(format!(
                                "argument names tensor {i} but the case has {}",
                                self.tensors.len()
                            )))
                        }
                    },
                    ReproArg::Scratch { name, bytes } => {
                        KArg::Ptr(self.scratch(name, *bytes, 256)?)
                    }
                    ReproArg::I32(x) => KArg::I32(*x),
                    ReproArg::U32(x) => KArg::U32(*x),
                    ReproArg::I64(x) => KArg::I64(*x),
                    ReproArg::U64(x) => KArg::U64(*x),
                    ReproArg::F32(x) => KArg::F32(*x),
                })
            })
            .collect()
    }
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
