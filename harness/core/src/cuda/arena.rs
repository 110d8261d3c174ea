//! Exact mode's device memory natively: each case's tensors and scratch buffers packed back to
//! back from the start of one reserved address range, mapped as far as they reach, with
//! nothing mapped after.
//!
//! `cuMemAlloc` places a buffer wherever the driver's heap has room, and that depends on
//! everything the process allocated before: a read past a buffer's end faults in one worker
//! and reads a neighbour in another, so an exact-mode verdict could change with the number of
//! workers (seen on the H200: three FP8 over-reads through cuBLASLt). Here the layout is a
//! pure function of the case (the sizes and order of its allocations), the same in a sweep's
//! busiest worker and in `kedge run` alone: a read past a buffer sees the next buffer, then
//! the rest of the last mapped granule, then an unmapped page. Under a sanitizer, exact mode
//! stays `cuMemAlloc`, whose bounds the sanitizer knows buffer by buffer.

use crate::cuda::error::{driver, RunError};
use cudarc::driver::sys;
use std::sync::{Arc, Mutex, PoisonError};

/// Where each allocation starts: the alignment `cudaMalloc` gives.
const ARENA_ALIGN: u64 = 256;

/// One reserved range, reused case after case.
#[derive(Debug)]
pub(crate) struct Arena {
    base: sys::CUdeviceptr,
    reserve: usize,
    granularity: usize,
    prop: sys::CUmemAllocationProp,
    /// Physical chunks mapped from `base` on, in order: (handle, bytes).
    chunks: Vec<(sys::CUmemGenericAllocationHandle, usize)>,
    mapped: usize,
    /// The next free offset.
    top: u64,
    /// Allocations not yet dropped; at zero everything is unmapped and `top` goes back to 0.
    live: usize,
}

// SAFETY: the raw handles are plain integers owned by this arena; every use is behind the
// mutex that holds it.
unsafe impl Send for Arena {}

/// A shared arena, one per device.
pub(crate) type SharedArena = Arc<Mutex<Option<Arena>>>;

fn lock(a: &SharedArena) -> std::sync::MutexGuard<'_, Option<Arena>> {
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Place `bytes` (aligned to `align`, at least [`ARENA_ALIGN`]) at the arena's top, mapping
/// more granules when it reaches past what is mapped. The range is reserved on first use:
/// `reserve` bytes, which bounds what one case can hold.
pub(crate) fn alloc(
    shared: &SharedArena,
    bytes: u64,
    align: u64,
    reserve: usize,
    granularity: usize,
    prop: sys::CUmemAllocationProp,
) -> Result<sys::CUdeviceptr, RunError> {
    let mut guard = lock(shared);
    if guard.is_none() {
        let g = granularity.max(1);
        let reserve = reserve.div_ceil(g) * g + g;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer valid; a reservation maps nothing.
        driver("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut base, reserve, g, 0, 0)
        })?;
        *guard = Some(Arena {
            base,
            reserve,
            granularity: g,
            prop,
            chunks: Vec::new(),
            mapped: 0,
            top: 0,
            live: 0,
        });
    }
    let Some(a) = guard.as_mut() else {
        return Err(RunError::Resource("the exact-mode arena is gone".into()));
    };
    let usable = (a.reserve - a.granularity) as u64;
    // The range holds one case's allocations at a time, and other processes' cases have
    // ranges of their own: past it, the case alone would be refused too.
    let Some(slot) = place(a.top, a.mapped, bytes, align, a.granularity, usable) else {
        return Err(RunError::OverLimit(format!(
            "{bytes} bytes do not fit in the exact-mode arena ({} of {usable} bytes in use)",
            a.top
        )));
    };
    let (start, end) = (slot.start, slot.end);
    if slot.map_more > 0 {
        let want = slot.map_more;
        let at = a.base + a.mapped as u64;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: standard VMM sequence inside the reserved range; each failure undoes the
        // steps before it.
        unsafe {
            driver(
                "cuMemCreate",
                sys::cuMemCreate(&mut handle, want, &a.prop, 0),
            )?;
            if let Err(e) = driver("cuMemMap", sys::cuMemMap(at, want, 0, handle, 0)) {
                sys::cuMemRelease(handle);
                return Err(e);
            }
            let desc = sys::CUmemAccessDesc {
                location: a.prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            if let Err(e) = driver("cuMemSetAccess", sys::cuMemSetAccess(at, want, &desc, 1)) {
                sys::cuMemUnmap(at, want);
                sys::cuMemRelease(handle);
                return Err(e);
            }
        }
        a.chunks.push((handle, want));
        a.mapped += want;
    }
    a.top = end;
    a.live += 1;
    Ok(a.base + start)
}

/// Where the next allocation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// Its offset from the arena's base.
    start: u64,
    /// Its end (the next allocation starts at or after it).
    end: u64,
    /// Bytes to map past what is mapped (whole granules), 0 when it fits.
    map_more: usize,
}

/// `bytes` at the first `align`-aligned offset (at least [`ARENA_ALIGN`]) at or after `top`,
/// with `mapped` bytes mapped; `None` past `limit`.
fn place(
    top: u64,
    mapped: usize,
    bytes: u64,
    align: u64,
    granularity: usize,
    limit: u64,
) -> Option<Slot> {
    let align = align.max(ARENA_ALIGN);
    let start = top.checked_next_multiple_of(align)?;
    let end = start.checked_add(bytes.max(1)).filter(|&e| e <= limit)?;
    let g = granularity.max(1) as u64;
    let need = end.div_ceil(g) * g;
    Some(Slot {
        start,
        end,
        map_more: need.saturating_sub(mapped as u64) as usize,
    })
}

/// One allocation is dropped; the last one unmaps everything.
pub(crate) fn release(shared: &SharedArena) {
    let mut guard = lock(shared);
    let Some(a) = guard.as_mut() else {
        return;
    };
    a.live = a.live.saturating_sub(1);
    if a.live > 0 {
        return;
    }
    let mut at = a.base;
    for (handle, bytes) in a.chunks.drain(..) {
        // Errors are ignored: after a sticky fault every call fails and the process exits.
        // SAFETY: each chunk was mapped at `at` by `alloc` and is unmapped once.
        unsafe {
            sys::cuMemUnmap(at, bytes);
            sys::cuMemRelease(handle);
        }
        at += bytes as u64;
    }
    a.mapped = 0;
    a.top = 0;
}

impl Drop for Arena {
    fn drop(&mut self) {
        let mut at = self.base;
        // SAFETY: what is still mapped was mapped by `alloc`; the range was reserved once.
        unsafe {
            for (handle, bytes) in self.chunks.drain(..) {
                sys::cuMemUnmap(at, bytes);
                sys::cuMemRelease(handle);
                at += bytes as u64;
            }
            sys::cuMemAddressFree(self.base, self.reserve);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: usize = 2 << 20;

    /// The layout of a case: each buffer's offset and the bytes mapped after each step.
    fn layout(sizes: &[u64]) -> Vec<(u64, usize)> {
        let (mut top, mut mapped) = (0u64, 0usize);
        sizes
            .iter()
            .map(|&b| {
                let s = place(top, mapped, b, 1, G, u64::MAX).expect("fits");
                top = s.end;
                mapped += s.map_more;
                (s.start, mapped)
            })
            .collect()
    }

    #[test]
    fn buffers_pack_back_to_back_and_mapping_grows_by_granules() {
        // An FP8 GEMM's three buffers: 300 x 3072 bytes of A, then B, then its output.
        let l = layout(&[921_600, 786_432, 307_200]);
        assert_eq!(l[0], (0, G));
        assert_eq!(l[1], (921_600, G));
        // 921,600 + 786,432 = 1,708,032; the output ends at 2,015,232 < 2 MiB: still one granule.
        assert_eq!(l[2], (1_708_032, G));
        // A read past the output's end sees 81,920 bytes of the mapped granule, then nothing.
        assert_eq!(G as u64 - (1_708_032 + 307_200), 81_920);
        // Offsets round up to 256 like cudaMalloc; a buffer crossing a granule maps one more.
        let l = layout(&[100, G as u64]);
        assert_eq!(l[1], (256, 2 * G));
        // The layout is a function of the sizes alone.
        assert_eq!(layout(&[7, 9, 1 << 30]), layout(&[7, 9, 1 << 30]));
    }

    #[test]
    fn past_the_limit_or_an_overflow_is_none() {
        assert_eq!(place(0, 0, 10, 1, G, 9), None);
        assert_eq!(place(u64::MAX - 10, 0, 100, 1, G, u64::MAX), None);
        assert!(
            place(0, 0, 0, 1, G, 1).is_some(),
            "an empty buffer takes one byte"
        );
    }
}
