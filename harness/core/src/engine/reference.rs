//! Inputs and references computed once per (op, dtype, shape, params, seed) and shared by every
//! impl, allocation mode and tool that runs the same case. A sweep hands a worker the cases of
//! one key together, so the worker keeps the last key's inputs and reference.

use crate::contract::op::{Op, TensorSpec};
use crate::error::CaseError;
use crate::model::case::{AllocMode, Case};
use crate::model::host::HostTensor;
use std::sync::Arc;

/// What makes two cases share inputs and a reference: everything but the impl and the
/// allocation mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReferenceKey(String);

impl ReferenceKey {
    /// The key of a case.
    pub fn of(case: &Case) -> ReferenceKey {
        let mut c = case.clone();
        c.imp.clear();
        c.alloc = AllocMode::Exact;
        ReferenceKey(c.to_line())
    }
}

struct Entry {
    key: ReferenceKey,
    specs: Vec<TensorSpec>,
    inputs: Arc<Vec<HostTensor>>,
    reference: Option<Arc<Vec<Vec<f64>>>>,
    /// Put here for the case being judged (computed while the device had it): its first
    /// use is not a reuse.
    fresh: bool,
}

/// The last key's inputs and reference.
#[derive(Default)]
pub struct ReferenceCache {
    last: Option<Entry>,
    /// References computed, and reused, in this cache's life (for the sweep summary).
    pub computed: u64,
    /// References reused from the cache.
    pub reused: u64,
}

impl ReferenceCache {
    /// The case's tensor specs and its inputs (cached when the key and the specs match).
    pub fn inputs(
        &mut self,
        op: &dyn Op,
        case: &Case,
    ) -> Result<(Vec<TensorSpec>, Arc<Vec<HostTensor>>), CaseError> {
        let specs = op.tensors(case)?;
        let key = ReferenceKey::of(case);
        if let Some(e) = &self.last {
            if e.key == key && e.specs == specs {
                return Ok((specs, e.inputs.clone()));
            }
        }
        // Let the last key's tensors go first: with the next key's they could be twice what
        // admission counted on (a 2^32-element case holds 48 GiB of inputs and reference).
        self.last = None;
        let inputs = Arc::new(op.inputs(case, &specs)?);
        self.last = Some(Entry {
            key,
            specs: specs.clone(),
            inputs: inputs.clone(),
            reference: None,
            fresh: false,
        });
        Ok((specs, inputs))
    }

    /// Is the case's reference (for these inputs) already here?
    pub fn has_reference(&self, case: &Case, inputs: &Arc<Vec<HostTensor>>) -> bool {
        self.last.as_ref().is_some_and(|e| {
            e.reference.is_some()
                && e.key == ReferenceKey::of(case)
                && Arc::ptr_eq(&e.inputs, inputs)
        })
    }

    /// Keep a reference computed from `inputs` elsewhere (while the device had the case), for
    /// the judge and the key's other impls. Dropped when the cache holds another key now.
    pub fn put_reference(
        &mut self,
        case: &Case,
        inputs: &Arc<Vec<HostTensor>>,
        reference: Vec<Vec<f64>>,
    ) {
        let key = ReferenceKey::of(case);
        if let Some(e) = &mut self.last {
            if e.key == key && Arc::ptr_eq(&e.inputs, inputs) {
                e.reference = Some(Arc::new(reference));
                e.fresh = true;
                self.computed += 1;
            }
        }
    }

    /// The case's reference, computed from `inputs` once per key.
    pub fn reference(
        &mut self,
        op: &dyn Op,
        case: &Case,
        inputs: &[HostTensor],
    ) -> Result<Arc<Vec<Vec<f64>>>, CaseError> {
        let key = ReferenceKey::of(case);
        if let Some(e) = &mut self.last {
            if e.key == key && std::ptr::eq(e.inputs.as_ptr(), inputs.as_ptr()) {
                if let Some(r) = &e.reference {
                    if !std::mem::take(&mut e.fresh) {
                        self.reused += 1;
                    }
                    return Ok(r.clone());
                }
            }
        }
        let r = Arc::new(op.reference(case, inputs)?);
        self.computed += 1;
        match &mut self.last {
            Some(e) if e.key == key => e.reference = Some(r.clone()),
            _ => {}
        }
        Ok(r)
    }
}

/// The threads a reference computed ahead runs on: a pool of its own, as many threads as the
/// worker's, so the device's part of the case (whose staged copies use the worker's pool)
/// does not queue behind the reference's tasks. Its threads run at a lower CPU priority
/// (nice 10): the staged copies that keep the device busy come first, the reference takes
/// the cycles they leave (on the H200, at equal priority, a 2^31-element case's upload took
/// 0.75 s beside the reference against 0.17 s alone, and the first one 3.3 s). `None` if it
/// cannot be built (the reference is then computed by the judge, as for any case).
pub(crate) fn ahead_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("kedge-reference-{i}"))
            .start_handler(|_| lower_this_threads_priority())
            .build()
            .ok()
    })
    .as_ref()
}

/// Nice 10 (or the nice value it had, if higher) for the calling thread only: Linux gives
/// each thread its own. A failure leaves the priority as it was: the reference is then only
/// slower to yield.
fn lower_this_threads_priority() {
    // SAFETY: gettid has no preconditions; getpriority and setpriority take the thread id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, now.max(10));
    }
}

#[cfg(test)]
mod tests {
    fn nice_of_this_thread() -> i32 {
        // SAFETY: as in lower_this_threads_priority.
        unsafe {
            libc::getpriority(
                libc::PRIO_PROCESS,
                libc::syscall(libc::SYS_gettid) as libc::id_t,
            )
        }
    }

    #[test]
    fn the_reference_threads_yield_and_the_caller_keeps_its_priority() {
        let before = nice_of_this_thread();
        let pool = super::ahead_pool().expect("a pool");
        let theirs: Vec<i32> = pool.broadcast(|_| nice_of_this_thread());
        assert!(theirs.iter().all(|&n| n >= 10), "{theirs:?}");
        assert_eq!(nice_of_this_thread(), before);
    }
}
