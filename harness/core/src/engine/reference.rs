//! Inputs and references computed once per (op, dtype, shape, params, seed) and shared by every
//! impl, allocation mode and tool that runs the same case. A sweep hands a worker the cases of
//! one key together, so the worker keeps the last key's inputs and reference.

use crate::contract::op::{Op, TensorSpec, Tolerance};
use crate::error::CaseError;
use crate::judge::compare::Comparison;
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

/// Input buffers this big are offered to the next key's draw (smaller ones cost nothing to
/// make).
const RECYCLE_FROM: u64 = 64 << 20;

/// A comparison kept with the output bytes it judged: the engine hands that output's buffer
/// back to the device with `tag`, and a later download that finds the buffer unchanged names
/// the tag. An output of the same key, the same bytes and the same tolerance is judged the
/// same: the comparison is a function of those three alone.
struct Judged {
    tag: u64,
    key: ReferenceKey,
    output: String,
    tol: Tolerance,
    said: JudgedBefore,
}

/// What an earlier comparison of the same bytes says about an output.
#[derive(Clone)]
pub struct JudgedBefore {
    /// The output's digest.
    pub digest: String,
    /// The comparison, as it was made.
    pub comparison: Comparison,
    /// The case whose output it was: `impl (alloc)`.
    pub by: String,
}

/// The last key's inputs and reference.
#[derive(Default)]
pub struct ReferenceCache {
    last: Option<Entry>,
    judged: Option<Judged>,
    tags: u64,
    /// Comparisons that held for a later output of the same bytes (each such verdict says so
    /// in `observed.same_output_as`, which the sweep summary counts).
    pub comparisons_reused: u64,
    /// References computed, and reused, in this cache's life (for the sweep summary).
    pub computed: u64,
    /// References reused from the cache.
    pub reused: u64,
    /// Bytes of input buffers drawn into again rather than made afresh.
    pub recycled_bytes: u64,
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
        // Its big input buffers of a size the new inputs have are offered to their draw and
        // written over (no pages to fault in); the rest go now, and what the draw did not
        // take goes after it.
        let taken_before = crate::model::host::recycled_taken();
        if let Some(e) = self.last.take() {
            if let Ok(old) = Arc::try_unwrap(e.inputs) {
                for t in old {
                    let n = t.bytes.len() as u64;
                    if n >= RECYCLE_FROM && specs.iter().any(|s| s.bytes == n) {
                        crate::model::host::recycle(t.bytes);
                    }
                }
            }
        }
        let drawn = op.inputs(case, &specs);
        crate::model::host::clear_recycled();
        self.recycled_bytes += crate::model::host::recycled_taken() - taken_before;
        let inputs = Arc::new(drawn?);
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

impl ReferenceCache {
    /// Keep `comparison` of the case's output `output` (its bytes digested as `digest`): the
    /// returned tag goes with the output's buffer to `Device::hand_back`.
    /// Only the last one is kept, as the device keeps only the last buffer.
    pub fn remember_comparison(
        &mut self,
        case: &Case,
        output: &str,
        tol: Tolerance,
        digest: &str,
        comparison: &Comparison,
    ) -> u64 {
        self.tags += 1;
        self.judged = Some(Judged {
            tag: self.tags,
            key: ReferenceKey::of(case),
            output: output.to_string(),
            tol,
            said: JudgedBefore {
                digest: digest.to_string(),
                comparison: comparison.clone(),
                by: format!("{} ({})", case.imp, case.alloc),
            },
        });
        self.tags
    }

    /// The comparison kept for the bytes a download found unchanged (`same_as`, the tag it
    /// named), when it was made for the same key, output and tolerance.
    pub fn judged_before(
        &mut self,
        case: &Case,
        output: &str,
        tol: Tolerance,
        same_as: Option<u64>,
    ) -> Option<JudgedBefore> {
        let j = self.judged.as_ref()?;
        let hit = same_as == Some(j.tag)
            && j.output == output
            && j.tol == tol
            && j.key == ReferenceKey::of(case);
        if !hit {
            return None;
        }
        self.comparisons_reused += 1;
        Some(j.said.clone())
    }
}

/// The threads a reference computed ahead runs on: a pool of its own, as many threads as the
/// worker's, so the device's part of the case (whose staged copies use the worker's pool)
/// does not queue behind the reference's tasks. `None` if it cannot be built (the reference is
/// then computed by the judge, as for any case).
pub(crate) fn ahead_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("kedge-reference-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}
