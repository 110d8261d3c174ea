//! Host memory for a tensor, next to a page no one may touch.
//!
//! A CPU kernel that reads one element past its tensor usually reads the next tensor's bytes
//! and changes no value. Placing the tensor so that its last byte is the last byte before a
//! `PROT_NONE` page turns that read into a SIGSEGV at the faulting instruction; placing it right
//! after such a page does the same for a read before the start. ggml's CPU buffers can wrap
//! caller memory (`ggml_backend_cpu_buffer_from_ptr`), which is how [`Placement`] puts a tensor
//! there.
//!
//! ggml requires a CPU buffer's start to be aligned to its buffer type's alignment (32 bytes
//! in the pinned snapshot), so a tensor whose size is not a multiple of that ends up to
//! `alignment - 1` bytes short of the guard page; [`AllocationInfo::slack`] says how many.
//!
//! [`Placement`]: crate::Placement
//! [`AllocationInfo::slack`]: crate::AllocationInfo::slack

use std::io;
use std::ptr::NonNull;

/// Memory a caller provides for a CPU tensor.
///
/// # Safety
/// `as_ptr()` must point to `len()` bytes that are valid for reads and writes, do not move, and
/// stay so for as long as the value is alive; nothing else may use them meanwhile.
pub unsafe trait HostMemory: Send {
    /// The first byte.
    fn as_ptr(&self) -> *mut u8;
    /// How many bytes from [`as_ptr`](HostMemory::as_ptr) may be used.
    fn len(&self) -> usize;
    /// Whether there are no bytes at all (such memory can hold no tensor).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which side of the usable bytes the inaccessible page is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GuardSide {
    /// The page follows the usable bytes: a read past the end faults.
    After,
    /// The page precedes the usable bytes: a read before the start faults.
    Before,
}

/// An anonymous mapping: `len` usable bytes (rounded up to whole pages) and one `PROT_NONE`
/// page on one side. Unmapped on drop.
#[derive(Debug)]
pub(crate) struct GuardedRegion {
    map: NonNull<u8>,
    map_len: usize,
    usable: NonNull<u8>,
    usable_len: usize,
    side: GuardSide,
}

// SAFETY: the region is plain memory owned by this value; nothing in it is tied to a thread.
unsafe impl Send for GuardedRegion {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

impl GuardedRegion {
    /// Maps at least `len` usable bytes (at least one page) with a guard page on `side`.
    pub(crate) fn new(len: usize, side: GuardSide) -> io::Result<Self> {
        let page = page_size();
        let usable_len = len
            .max(1)
            .div_ceil(page)
            .checked_mul(page)
            .ok_or_else(|| io::Error::other("size overflows"))?;
        let map_len = usable_len
            .checked_add(page)
            .ok_or_else(|| io::Error::other("size overflows"))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = map.cast::<u8>();
        let (guard, usable) = match side {
            // SAFETY: both offsets are inside the mapping of `map_len` bytes.
            GuardSide::After => (unsafe { map.add(usable_len) }, map),
            GuardSide::Before => (map, unsafe { map.add(page) }),
        };
        // SAFETY: `guard` is a page-aligned page inside the mapping.
        if unsafe { libc::mprotect(guard.cast(), page, libc::PROT_NONE) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: unmapping exactly what was mapped above.
            unsafe { libc::munmap(map.cast(), map_len) };
            return Err(e);
        }
        Ok(Self {
            // mmap never returns null on success (MAP_FAILED is checked above).
            map: NonNull::new(map).ok_or_else(|| io::Error::other("mmap returned null"))?,
            map_len,
            usable: NonNull::new(usable).ok_or_else(|| io::Error::other("mmap returned null"))?,
            usable_len,
            side,
        })
    }

    /// The address of the first inaccessible byte after the usable bytes (for `After`), or of
    /// the first usable byte, just past the guard (for `Before`).
    pub(crate) fn boundary(&self) -> usize {
        match self.side {
            GuardSide::After => self.usable.as_ptr() as usize + self.usable_len,
            GuardSide::Before => self.usable.as_ptr() as usize,
        }
    }
}

// SAFETY: `usable` points to `usable_len` read-write bytes of a mapping this value owns and
// unmaps only on drop.
unsafe impl HostMemory for GuardedRegion {
    fn as_ptr(&self) -> *mut u8 {
        self.usable.as_ptr()
    }
    fn len(&self) -> usize {
        self.usable_len
    }
}

impl Drop for GuardedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`, once.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_bytes_are_writable_and_page_rounded() {
        for side in [GuardSide::After, GuardSide::Before] {
            let r = GuardedRegion::new(100, side).unwrap();
            assert!(r.len() >= 100 && r.len().is_multiple_of(page_size()));
            // SAFETY: inside the usable bytes.
            unsafe {
                r.as_ptr().write_bytes(0xab, r.len());
                assert_eq!(*r.as_ptr().add(r.len() - 1), 0xab);
            }
            match side {
                GuardSide::After => assert_eq!(r.boundary(), r.as_ptr() as usize + r.len()),
                GuardSide::Before => assert_eq!(r.boundary(), r.as_ptr() as usize),
            }
        }
    }
}
