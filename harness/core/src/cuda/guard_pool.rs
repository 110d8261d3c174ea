//! Guard mode's mappings, kept for the worker's next cases.
//!
//! A guard buffer is four driver calls to make (reserve an address range, create physical
//! memory, map it, grant access) and three to free, and on a GPU shared by several workers
//! these calls wait on each other: on the H200, a guard-mode sweep of 807 cases spent 84 s of
//! worker time in setup and "the rest" (freeing among it) against 8 to 9 s natively, and 9 to
//! 12 s with this. A freed mapping therefore goes back to its device's pool, and a later
//! buffer whose mapping has the same size and the same guard side takes it, zero-filled, so
//! that it holds what a fresh mapping holds. The layout is unchanged: the same mapped bytes,
//! the same unmapped page at the same side, the tensor at the same offset within the mapping.
//! Only the address differs, as it does between fresh mappings.
//!
//! The pool holds at most [`GuardPool::cap`] bytes; a mapping that does not fit is freed, the
//! oldest first. When the device runs out of memory, the pool is emptied and the allocation
//! tried once more, so cached mappings never make a case fail that would have run.

use cudarc::driver::sys;
use std::sync::{Arc, Mutex, PoisonError};

/// One guard mapping: a reserved range with `mapped` bytes mapped at `map_at` and one
/// unmapped granule at the back (or, with `front`, at the front).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Start of the reserved address range.
    pub(crate) reserve_base: sys::CUdeviceptr,
    /// Bytes reserved (mapped part and guard).
    pub(crate) reserve: usize,
    /// Where the mapping starts.
    pub(crate) map_at: sys::CUdeviceptr,
    /// Bytes mapped.
    pub(crate) mapped: usize,
    /// The physical allocation's handle.
    pub(crate) handle: sys::CUmemGenericAllocationHandle,
    /// The unmapped granule is before the mapping (guard-front mode).
    pub(crate) front: bool,
}

impl Mapping {
    /// Unmap, release and free the range. Errors are ignored: after a sticky fault every call
    /// fails and the process exits.
    ///
    /// # Safety
    /// The mapping was made by `Device::alloc` and is released once; no buffer uses it.
    pub(crate) unsafe fn release(self) {
        sys::cuMemUnmap(self.map_at, self.mapped);
        sys::cuMemRelease(self.handle);
        sys::cuMemAddressFree(self.reserve_base, self.reserve);
    }
}

/// What a pool holds: anything with a size and a guard side. Generic so the bookkeeping is
/// tested without a GPU.
pub trait Pooled {
    /// Bytes mapped.
    fn bytes(&self) -> usize;
    /// The guard is at the front.
    fn front(&self) -> bool;
}

impl Pooled for Mapping {
    fn bytes(&self) -> usize {
        self.mapped
    }
    fn front(&self) -> bool {
        self.front
    }
}

/// Freed mappings waiting for a buffer of their size, oldest first.
#[derive(Debug)]
pub struct GuardPool<M = Mapping> {
    free: Vec<M>,
    held: usize,
    cap: usize,
}

impl<M: Pooled> GuardPool<M> {
    /// A pool that holds at most `cap` bytes.
    fn new(cap: usize) -> Self {
        GuardPool {
            free: Vec::new(),
            held: 0,
            cap,
        }
    }

    /// The most bytes it holds.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes it holds now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// A mapping of exactly `bytes` with its guard on the given side, the most recently freed.
    pub(crate) fn take(&mut self, bytes: usize, front: bool) -> Option<M> {
        let i = self
            .free
            .iter()
            .rposition(|m| m.bytes() == bytes && m.front() == front)?;
        let m = self.free.remove(i);
        self.held -= m.bytes();
        Some(m)
    }

    /// Keep `m` for later; returns what must be freed now (`m` itself when it is bigger than
    /// the cap, else the oldest mappings until the pool fits its cap).
    pub(crate) fn put(&mut self, m: M) -> Vec<M> {
        if m.bytes() > self.cap {
            return vec![m];
        }
        self.held += m.bytes();
        self.free.push(m);
        let mut out = Vec::new();
        while self.held > self.cap {
            let old = self.free.remove(0);
            self.held -= old.bytes();
            out.push(old);
        }
        out
    }

    /// Everything it holds, to be freed.
    fn drain(&mut self) -> Vec<M> {
        self.held = 0;
        std::mem::take(&mut self.free)
    }
}

/// A device's pool, shared with the buffers that return their mappings to it.
pub(crate) type SharedGuardPool = Arc<Mutex<GuardPool>>;

/// Lock a shared pool (a panic elsewhere leaves the bookkeeping usable).
pub(crate) fn lock(p: &SharedGuardPool) -> std::sync::MutexGuard<'_, GuardPool> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Release every mapping in `ms`.
pub(crate) fn release_all(ms: Vec<Mapping>) {
    for m in ms {
        // SAFETY: each came out of a pool, which holds mappings no buffer uses.
        unsafe { m.release() };
    }
}

/// The device's handle on its pool: dropped before the context, it frees what the pool holds.
#[derive(Debug)]
pub(crate) struct DevicePool(pub(crate) SharedGuardPool);

impl DevicePool {
    /// A pool that holds at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        DevicePool(Arc::new(Mutex::new(GuardPool::new(cap))))
    }

    /// Free everything the pool holds (before trying an allocation again after running out
    /// of memory).
    pub(crate) fn flush(&self) -> bool {
        let all = lock(&self.0).drain();
        let any = !all.is_empty();
        release_all(all);
        any
    }
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        // Only the device's own handle frees: buffers hold clones of the inner `Arc`.
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Fake(usize, bool, u32);
    impl Pooled for Fake {
        fn bytes(&self) -> usize {
            self.0
        }
        fn front(&self) -> bool {
            self.1
        }
    }

    const G: usize = 2 << 20;

    #[test]
    fn a_mapping_is_taken_only_by_its_size_and_side() {
        let mut p = GuardPool::new(16 * G);
        assert!(p.put(Fake(G, false, 1)).is_empty());
        assert!(p.put(Fake(2 * G, false, 2)).is_empty());
        assert_eq!(p.held(), 3 * G);
        // Same size, other side: nothing; a bigger or smaller mapping would move the guard.
        assert_eq!(p.take(G, true), None);
        assert_eq!(p.take(3 * G, false), None);
        assert_eq!(p.take(G, false), Some(Fake(G, false, 1)));
        assert_eq!(p.take(G, false), None);
        assert_eq!(p.held(), 2 * G);
    }

    #[test]
    fn the_most_recently_freed_is_taken_first() {
        let mut p = GuardPool::new(16 * G);
        p.put(Fake(G, false, 1));
        p.put(Fake(G, false, 2));
        assert_eq!(p.take(G, false), Some(Fake(G, false, 2)));
        assert_eq!(p.take(G, false), Some(Fake(G, false, 1)));
    }

    #[test]
    fn past_its_cap_the_oldest_go_and_an_oversized_one_is_never_kept() {
        let mut p = GuardPool::new(3 * G);
        assert!(p.put(Fake(G, false, 1)).is_empty());
        assert!(p.put(Fake(G, true, 2)).is_empty());
        assert_eq!(p.put(Fake(2 * G, false, 3)), vec![Fake(G, false, 1)]);
        assert_eq!(p.held(), 3 * G);
        assert_eq!(p.put(Fake(4 * G, false, 4)), vec![Fake(4 * G, false, 4)]);
        assert_eq!(p.held(), 3 * G);
        let all = p.drain();
        assert_eq!(all, vec![Fake(G, true, 2), Fake(2 * G, false, 3)]);
        assert_eq!(p.held(), 0);
        assert_eq!(p.take(G, true), None);
    }
}
