//! Allocation modes (`model::case::AllocMode`): each tensor and scratch buffer of a case is
//! placed so that an overrun is seen: exactly its bytes (for compute-sanitizer), against an
//! unmapped page at its end or front (a native fault), or between red zones (checked after).

use crate::cuda::device::{Device, Download, STAGED_FROM};
use crate::cuda::error::{driver, RunError};
use crate::cuda::guard_pool::{self, Mapping, SharedGuardPool};
use crate::model::case::AllocMode;
use cudarc::driver::sys;
use std::ffi::c_void;

impl Device {
    /// Allocate `bytes` in `mode`. Allocation failures are `RunError::Resource`.
    ///
    /// Exact mode packs the case's buffers in the arena natively (see `cuda::arena`), and
    /// uses `cuMemAlloc` when [`Device::packed_exact`] is off (under a sanitizer).
    pub(crate) fn alloc(
        &self,
        name: &str,
        bytes: u64,
        mode: AllocMode,
        align: u64,
    ) -> Result<DeviceAlloc, RunError> {
        let bytes_us = usize::try_from(bytes)
            .map_err(|_| RunError::Resource(format!("{name}: {bytes} bytes")))?;
        match mode {
            AllocMode::Exact if self.packed_exact => {
                let p = crate::cuda::arena::alloc(
                    &self.arena,
                    bytes,
                    align,
                    self.limits.device_memory_bytes.value as usize,
                    self.granularity,
                    self.alloc_prop(),
                )
                .map_err(|e| annotate_oom(e, name, bytes))?;
                Ok(DeviceAlloc {
                    name: name.into(),
                    ptr: p,
                    bytes,
                    kind: AllocKind::Arena(self.arena.clone()),
                })
            }
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
        let pooled = guard_pool::lock(&self.guard_pool.0).take(mapped, front);
        let mapping = match pooled {
            Some(m) => {
                // What a fresh mapping holds: nothing a previous case wrote survives.
                // SAFETY: memset within the mapping, which no other buffer uses.
                if let Err(e) = driver("cuMemsetD8", unsafe {
                    sys::cuMemsetD8_v2(m.map_at, 0, m.mapped)
                }) {
                    // SAFETY: taken out of the pool, used by nothing.
                    unsafe { m.release() };
                    return Err(e);
                }
                m
            }
            None => match self.map_guarded(mapped, front) {
                Err(RunError::Resource(_)) if self.guard_pool.flush() => {
                    self.map_guarded(mapped, front)
                }
                r => r,
            }
            .map_err(|e| annotate_oom(e, name, bytes as u64))?,
        };
        let align = align.max(1);
        let ptr = if front {
            mapping.map_at
        } else {
            // The tensor's last byte is the last mapped byte, unless alignment forces a gap.
            let end = mapping.map_at + mapped as u64;
            (end - bytes as u64) / align * align
        };
        Ok(DeviceAlloc {
            name: name.into(),
            ptr,
            bytes: bytes as u64,
            kind: AllocKind::Vmm {
                mapping,
                pool: self.guard_pool.0.clone(),
            },
        })
    }

    /// A fresh mapping of `mapped` bytes with an unmapped granule behind it (or, with
    /// `front`, before it).
    fn map_guarded(&self, mapped: usize, front: bool) -> Result<Mapping, RunError> {
        let g = self.granularity.max(1);
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
                return Err(e);
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
            Ok(Mapping {
                reserve_base: base,
                reserve,
                map_at,
                mapped,
                handle,
                front,
            })
        }
    }

    pub(crate) fn alloc_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: plain-old-data struct; zero is a valid starting point for every field.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.ordinal;
        prop
    }

    /// Red zones that changed, as (allocation, "front"/"back", first changed offset).
    pub(crate) fn check_canary(&self, a: &DeviceAlloc) -> Result<Option<String>, RunError> {
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
}

fn annotate_oom(e: RunError, name: &str, bytes: u64) -> RunError {
    match e {
        RunError::Resource(m) => {
            RunError::Resource(format!("allocating {name} ({bytes} bytes): {m}"))
        }
        RunError::OverLimit(m) => {
            RunError::OverLimit(format!("allocating {name} ({bytes} bytes): {m}"))
        }
        other => other,
    }
}

/// Size of each canary red zone.
const CANARY_BYTES: usize = 4096;
/// The byte red zones are filled with.
const CANARY_BYTE: u8 = 0xCA;

/// How an allocation was made, so it is freed the same way.
#[derive(Debug)]
pub(crate) enum AllocKind {
    /// `cuMemAlloc`.
    Plain {
        /// What `cuMemAlloc` returned.
        base: sys::CUdeviceptr,
    },
    /// `cuMemAlloc` with red zones around the tensor.
    Canary {
        /// What `cuMemAlloc` returned (the front red zone's start).
        base: sys::CUdeviceptr,
        /// Bytes allocated, red zones included.
        total: usize,
    },
    /// Packed in the device's exact-mode arena (`cuda::arena`).
    Arena(crate::cuda::arena::SharedArena),
    /// Driver virtual memory with an unmapped guard page; freed, the mapping goes back to
    /// the device's pool (`cuda::guard_pool`).
    Vmm {
        /// The mapping.
        mapping: Mapping,
        /// Where it goes when the buffer is dropped.
        pool: SharedGuardPool,
    },
}

/// A device allocation; `ptr` is where the tensor starts, `bytes` its exact size.
#[derive(Debug)]
pub struct DeviceAlloc {
    /// The tensor's or buffer's name.
    pub(crate) name: String,
    /// Where the tensor starts.
    pub ptr: sys::CUdeviceptr,
    /// Its exact size in bytes.
    pub(crate) bytes: u64,
    /// How it was made.
    pub(crate) kind: AllocKind,
}

impl DeviceAlloc {
    /// Bytes between the tensor's end and the first unmapped byte (guard mode), if any.
    pub(crate) fn guard_slack(&self) -> Option<u64> {
        match self.kind {
            AllocKind::Vmm { mapping: m, .. } if self.ptr != m.map_at => {
                Some(m.map_at + m.mapped as u64 - (self.ptr + self.bytes))
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
            match &self.kind {
                AllocKind::Plain { base } | AllocKind::Canary { base, .. } => {
                    sys::cuMemFree_v2(*base);
                }
                AllocKind::Arena(a) => crate::cuda::arena::release(a),
                AllocKind::Vmm { mapping, pool } => {
                    let evicted = guard_pool::lock(pool).put(*mapping);
                    guard_pool::release_all(evicted);
                }
            }
        }
    }
}

/// What a device does with one of its allocations: copies in and out, the poison fill. Here,
/// beside the allocation, so the device knows nothing of how its memory is allocated.
impl Device {
    /// Copy `bytes` into the allocation.
    pub(crate) fn upload(&self, a: &DeviceAlloc, bytes: &[u8]) -> Result<(), RunError> {
        if bytes.len() as u64 > a.bytes {
            return Err(RunError::Unsupported(format!(
                "upload of {} bytes into {} ({} bytes)",
                bytes.len(),
                a.name,
                a.bytes
            )));
        }
        if bytes.len() >= STAGED_FROM {
            if let Some(r) = self.with_staging(|st| self.upload_staged(st, a.ptr, bytes)) {
                return r;
            }
        }
        // SAFETY: destination holds at least bytes.len() bytes.
        driver("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(a.ptr, bytes.as_ptr() as *const c_void, bytes.len())
        })
    }

    /// Copy the whole allocation back.
    pub fn download(&self, a: &DeviceAlloc) -> Result<Vec<u8>, RunError> {
        self.download_compared(a).map(|d| d.bytes)
    }

    /// Copy the whole allocation back, saying whether it is the same, byte for byte, as the
    /// buffer handed back last ([`Device::hand_back`]).
    pub(crate) fn download_compared(&self, a: &DeviceAlloc) -> Result<Download, RunError> {
        let n = a.bytes as usize;
        if n >= STAGED_FROM {
            if let Some(r) = self.with_staging(|st| self.download_staged(st, a.ptr, n)) {
                return r;
            }
        }
        let mut out = crate::model::host::zeroed_bytes(a.bytes as usize);
        // SAFETY: source holds a.bytes bytes; out sized to match.
        driver("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, a.ptr, out.len())
        })?;
        Ok(Download {
            bytes: out,
            same_as: None,
            digest: None,
        })
    }

    /// Fill with a repeating pattern (the poison), element by element.
    pub(crate) fn fill_pattern(&self, a: &DeviceAlloc, pattern: &[u8]) -> Result<(), RunError> {
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
}
