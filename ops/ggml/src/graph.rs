//! Graphs: build one over a metadata-only ggml context, give every tensor its own buffer, move
//! data, run it.
//!
//! Why one buffer per tensor: test-backend-ops allocates all tensors of a case in one buffer
//! (`ggml_backend_alloc_ctx_tensors`), so a kernel that reads past its input reads the next
//! tensor and neither the values nor compute-sanitizer's memcheck notice. Here each tensor
//! gets a buffer of exactly `ggml_backend_buft_get_alloc_size` bytes, so the first byte past a
//! tensor is outside any allocation. Views share their source's buffer, as in ggml.
//!
//! The graph keeps the base address and size of every buffer ([`Graph::allocations`]), so an
//! address from a sanitizer report can be turned into a tensor name ([`Graph::locate`]).
//!
//! Checks: ggml validates shapes with `GGML_ASSERT`, which aborts the process. This crate checks
//! beforehand what its own plumbing relies on (data sizes, views inside their source, reshapes,
//! copies, capacity) and, for the ops it wraps, the preconditions that are cheap to state; an op
//! precondition it does not check still ends in ggml's abort, which the hooks
//! ([`Ggml::install_hooks`](crate::Ggml::install_hooks)) report in ggml's words.

use std::ffi::{c_void, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{ComputeError, GraphError};
use crate::ffi::{self, InitParams};
use crate::guard::{GuardSide, GuardedRegion, HostMemory};
use crate::hooks;
use crate::types::{Status, Type};
use crate::{Backend, Ggml};

/// Sizing for a graph's context.
#[derive(Clone, Copy, Debug)]
pub struct GraphOptions {
    /// How many tensors (inputs, views, results) the graph may hold, at least.
    pub max_tensors: usize,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions { max_tensors: 256 }
    }
}

/// A tensor of one [`Graph`]: a handle, checked against the graph it is used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    graph: u64,
    index: u32,
}

impl Tensor {
    /// Its number in its graph, in the order tensors were made (`t[i]` in a [`Recording`]).
    pub fn index(self) -> u32 {
        self.index
    }
}

/// What a tensor's memory is, as far as this crate knows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ViewState {
    /// Owns its memory.
    Own,
    /// Shares the memory of record `base` (never itself a view), from byte `offset`.
    Of { base: usize, offset: usize },
    /// A view whose source and offset this crate did not see made.
    Unknown,
}

pub(crate) struct Rec {
    pub(crate) ptr: NonNull<c_void>,
    pub(crate) ty: Option<Type>,
    /// The shape, where this crate set it (inputs, views, reshapes); ggml is asked otherwise.
    pub(crate) ne: Option<[i64; 4]>,
    pub(crate) view: ViewState,
}

/// Where a tensor's memory comes from (see [`Graph::alloc_with`]).
pub enum Placement {
    /// A buffer of the backend's buffer type, of exactly the tensor's alloc size.
    Device,
    /// Host memory whose last byte is followed by a `PROT_NONE` page (host backends only).
    GuardAfter,
    /// Host memory whose first byte follows a `PROT_NONE` page (host backends only).
    GuardBefore,
    /// Caller memory at `offset`: for placements the guard modes do not cover. `offset` must
    /// keep the tensor inside `memory` and aligned to the backend's alignment.
    Host {
        /// The memory; the graph keeps it alive until its buffers are freed.
        memory: Box<dyn HostMemory>,
        /// Where in `memory` the tensor starts, in bytes.
        offset: usize,
    },
}

/// The kind of [`Placement`] a tensor got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementKind {
    /// A buffer of the backend's buffer type ([`Placement::Device`]).
    Device,
    /// Host memory ending at a `PROT_NONE` page ([`Placement::GuardAfter`]).
    GuardAfter,
    /// Host memory starting right after a `PROT_NONE` page ([`Placement::GuardBefore`]).
    GuardBefore,
    /// Caller memory ([`Placement::Host`]).
    Host,
}

/// What a placement policy is told about a tensor.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// The tensor's name (ggml's, or the one this crate gave an unnamed tensor).
    pub name: String,
    /// The handle, for tensors made through this crate (some ops make an extra tensor of their own).
    pub tensor: Option<Tensor>,
    /// `ggml_op_desc`: "NONE" for inputs, "RMS_NORM", "SILU", ...
    pub op: String,
    /// `ggml_nbytes`.
    pub nbytes: usize,
    /// `ggml_backend_buft_get_alloc_size` for the backend's buffer type: what is allocated.
    pub alloc_size: usize,
}

/// One tensor's own buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationInfo {
    /// The tensor's name (see [`TensorInfo::name`]).
    pub name: String,
    /// Address of the tensor's first byte (a device address for device buffers).
    pub base: usize,
    /// The tensor's alloc size: the bytes it may touch.
    pub bytes: usize,
    /// `ggml_nbytes` (smaller than `bytes` where the buffer type pads, e.g. CUDA's quantized rows).
    pub nbytes: usize,
    /// The buffer's size as ggml reports it (`bytes`, or 1 for an empty tensor: ggml gives a
    /// zero-size buffer no address).
    pub buffer_bytes: usize,
    /// For [`PlacementKind::GuardAfter`]: bytes between the tensor's end and the guard page,
    /// left by the buffer alignment ggml requires (0 when the size is a multiple of it).
    pub slack: usize,
    /// Where the memory came from.
    pub placement: PlacementKind,
}

/// Where an address falls, relative to a graph's allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// Inside tensor `name`'s bytes, at `offset`.
    Inside {
        /// The tensor whose buffer holds the address.
        name: String,
        /// Bytes from the tensor's first byte.
        offset: usize,
    },
    /// `past_end` bytes past the end of tensor `name` (the nearest allocation below).
    After {
        /// The tensor whose buffer ends closest below the address.
        name: String,
        /// Bytes from the tensor's end (0: the first byte past it).
        past_end: usize,
    },
}

/// An op node the backend cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The tensor's name: the one given with [`Graph::set_name`], else the one this crate
    /// made ("RMS_NORM#3").
    pub name: String,
    /// `ggml_op_desc` of it ("SOFT_MAX", "MUL_MAT", ...).
    pub op: String,
}

struct Alloc {
    device: NonNull<c_void>,
    backend: String,
    buffers: Vec<(NonNull<c_void>, AllocationInfo)>,
    memory: Vec<Box<dyn HostMemory>>,
    complete: bool,
}

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// A graph's ggml calls as C statements ([`Graph::record`]): replayed in a standalone program
/// against ggml's public API, they build the same graph, views and strides included. In the
/// statements, tensor `i` of the graph is `t[i]`, the context is `ctx`, and a float argument is
/// `kedge_f32(BITS)` (exact: the program defines it as the float with those bits).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// The statements, in call order.
    pub lines: Vec<String>,
    /// The tensors made (`t` needs this many entries).
    pub tensors: u32,
    /// The outputs given to [`Graph::build`], as tensor numbers.
    pub outputs: Vec<u32>,
    /// Why the statements do not rebuild the graph, when they do not (a call made through
    /// [`Graph::raw_op`], which this crate cannot write down).
    pub broken: Option<String>,
}

/// A C string literal of `s` (octal escapes for anything but printable ASCII).
pub fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// A ggml graph: tensors and ops over one no-alloc context, then buffers, data and compute.
///
/// Lifecycle: make tensors and ops, [`build`](Graph::build) with the outputs, [`alloc`](Graph::alloc)
/// for a backend, [`set_data`](Graph::set_data), [`compute`](Graph::compute),
/// [`get_data`](Graph::get_data). Dropping it frees the buffers, then the context.
///
/// `Send` but not `Sync`: a context is used by one thread at a time.
pub struct Graph {
    ggml: Ggml,
    id: u64,
    ctx: NonNull<c_void>,
    slots: usize,
    recs: Vec<Rec>,
    cgraph: Option<NonNull<c_void>>,
    alloc: Option<Alloc>,
    /// The calls made so far, as C, when recording ([`Graph::record`]).
    recording: Option<Recording>,
    /// The call about to make the next tensor (its C expression), when recording.
    pending: Option<String>,
}

// SAFETY: the context, graph and buffers are plain heap objects of ggml, not tied to a thread;
// `Graph` is not `Sync`, so one thread uses them at a time.
unsafe impl Send for Graph {}

fn shape_err(op: &'static str, reason: impl Into<String>) -> GraphError {
    GraphError::Shape {
        op,
        reason: reason.into(),
    }
}

impl Ggml {
    /// A new, empty graph.
    pub fn graph(&self, options: GraphOptions) -> Result<Graph, GraphError> {
        Graph::new(*self, options)
    }
}

impl Graph {
    /// A new, empty graph with room for `options.max_tensors` tensors.
    pub(crate) fn new(ggml: Ggml, options: GraphOptions) -> Result<Graph, GraphError> {
        let api = ggml.api();
        // Room for what the caller asked plus the extra tensors some ops make, and the graph itself.
        let slots = options.max_tensors.max(1).saturating_add(3);
        // SAFETY: size queries without preconditions.
        let bytes = unsafe { (api.ggml_tensor_overhead)() }
            .checked_mul(slots)
            .and_then(|t| t.checked_add(unsafe { (api.ggml_graph_overhead_custom)(slots, false) }))
            .ok_or(GraphError::CapacityExceeded {
                capacity: options.max_tensors,
            })?;
        // SAFETY: no_alloc context: ggml allocates only the metadata pool of `bytes`.
        let ctx = unsafe {
            (api.ggml_init)(InitParams {
                mem_size: bytes,
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            })
        };
        let ctx = NonNull::new(ctx).ok_or(GraphError::ContextInit { bytes })?;
        Ok(Graph {
            ggml,
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            ctx,
            slots,
            recs: Vec::new(),
            cgraph: None,
            alloc: None,
            recording: None,
            pending: None,
        })
    }

    /// Write down every call from here on as C ([`Recording`]). Must come before the first
    /// tensor is made.
    pub fn record(&mut self) {
        let mut r = Recording::default();
        if !self.recs.is_empty() {
            r.broken = Some(format!(
                "recording started after {} tensors were made",
                self.recs.len()
            ));
        }
        self.recording = Some(r);
    }

    /// The calls written down so far, when recording.
    pub fn recording(&self) -> Option<&Recording> {
        self.recording.as_ref()
    }

    pub(crate) fn is_recording(&self) -> bool {
        self.recording.is_some()
    }

    /// The C expression of the call that makes the next tensor (`ggml_sub(ctx, t[0], t[1])`).
    pub(crate) fn note_call(&mut self, sym: &str, args: &[String]) {
        if self.recording.is_some() {
            let mut call = format!("{sym}(ctx");
            for a in args {
                call.push_str(", ");
                call.push_str(a);
            }
            call.push(')');
            self.pending = Some(call);
        }
    }

    /// A statement that makes no tensor (`ggml_set_name(t[3], "x");`).
    pub(crate) fn note_stmt(&mut self, stmt: String) {
        if let Some(r) = self.recording.as_mut() {
            r.lines.push(stmt);
        }
    }

    /// A tensor's C name: `t[i]`.
    pub(crate) fn c_tensor(&self, t: Tensor) -> String {
        format!("t[{}]", t.index)
    }

    pub(crate) fn api(&self) -> &'static ffi::Api {
        self.ggml.api()
    }

    pub(crate) fn ops_table(&self) -> &'static ffi::Ops {
        self.ggml.ops()
    }

    pub(crate) fn ctx(&self) -> *mut c_void {
        self.ctx.as_ptr()
    }

    pub(crate) fn rec(&self, t: Tensor) -> Result<&Rec, GraphError> {
        if t.graph != self.id {
            return Err(GraphError::ForeignTensor);
        }
        self.recs
            .get(t.index as usize)
            .ok_or(GraphError::ForeignTensor)
    }

    pub(crate) fn ptr(&self, t: Tensor) -> Result<*mut c_void, GraphError> {
        Ok(self.rec(t)?.ptr.as_ptr())
    }

    /// Refuses to make a tensor when the context could not hold it (ggml would abort), or
    /// once the graph is built.
    pub(crate) fn reserve(&self) -> Result<(), GraphError> {
        if self.cgraph.is_some() {
            return Err(GraphError::AlreadyBuilt);
        }
        let api = self.api();
        // SAFETY: size queries on a live context.
        let (used, size, per, graph) = unsafe {
            (
                (api.ggml_used_mem)(self.ctx()),
                (api.ggml_get_mem_size)(self.ctx()),
                (api.ggml_tensor_overhead)(),
                (api.ggml_graph_overhead_custom)(self.slots, false),
            )
        };
        // An op may make up to three tensors (top_k, views of views); keep room for the graph.
        if used
            .saturating_add(graph)
            .saturating_add(per.saturating_mul(3))
            > size
        {
            return Err(GraphError::CapacityExceeded {
                capacity: self.slots - 3,
            });
        }
        Ok(())
    }

    /// Records a tensor ggml just made.
    pub(crate) fn push(
        &mut self,
        r: *mut c_void,
        sym: &'static str,
        ty: Option<Type>,
        ne: Option<[i64; 4]>,
        view: ViewState,
    ) -> Result<Tensor, GraphError> {
        let ptr = NonNull::new(r).ok_or(GraphError::NullResult(sym))?;
        let view = match view {
            // SAFETY: a tensor of this context.
            ViewState::Own if unsafe { (self.api().ggml_is_view)(r) } => ViewState::Unknown,
            v => v,
        };
        let index = u32::try_from(self.recs.len()).map_err(|_| GraphError::CapacityExceeded {
            capacity: self.slots - 3,
        })?;
        let pending = self.pending.take();
        if let Some(r) = self.recording.as_mut() {
            match pending {
                Some(call) => r.lines.push(format!("t[{index}] = {call};")),
                None => {
                    r.broken.get_or_insert_with(|| {
                        format!("tensor {index} was made by {sym}, which is not written down")
                    });
                }
            }
            r.tensors = index + 1;
        }
        // Name it now, so ggml's build does not call it "node_3" or "leaf_1": an allocation
        // named after its op says more when a sanitizer reports an address in it.
        let api = self.api();
        // SAFETY: a live tensor; strings owned by it or static.
        unsafe {
            if ffi::string((api.ggml_get_name)(r)).is_empty() {
                let op = ffi::string((api.ggml_op_desc)(r));
                let name = if op == "NONE" {
                    format!("in#{index}")
                } else {
                    format!("{op}#{index}")
                };
                if let Ok(c) = CString::new(name.clone()) {
                    (api.ggml_set_name)(r, c.as_ptr());
                    if let Some(rec) = self.recording.as_mut() {
                        rec.lines
                            .push(format!("ggml_set_name(t[{index}], {});", c_string(&name)));
                    }
                }
            }
        }
        self.recs.push(Rec { ptr, ty, ne, view });
        Ok(Tensor {
            graph: self.id,
            index,
        })
    }

    /// The view state a view of `a` at byte `offset` gets.
    pub(crate) fn view_of(&self, a: Tensor, offset: usize) -> Result<ViewState, GraphError> {
        Ok(match self.rec(a)?.view {
            ViewState::Own => ViewState::Of {
                base: a.index as usize,
                offset,
            },
            ViewState::Of { base, offset: o } => match o.checked_add(offset) {
                Some(offset) => ViewState::Of { base, offset },
                None => return Err(shape_err("view", "offset overflows")),
            },
            ViewState::Unknown => ViewState::Unknown,
        })
    }

    // ---- what a tensor is -------------------------------------------------------------

    /// `ggml_get_name`.
    pub(crate) fn name(&self, t: Tensor) -> Result<String, GraphError> {
        let p = self.ptr(t)?;
        // SAFETY: a live tensor; the name is a buffer inside it.
        Ok(unsafe { ffi::string((self.api().ggml_get_name)(p)) })
    }

    /// Names a tensor (ggml keeps up to 63 bytes). Returns the tensor, for chaining.
    pub fn set_name(&mut self, t: Tensor, name: &str) -> Result<Tensor, GraphError> {
        let p = self.ptr(t)?;
        let c = CString::new(name).map_err(|_| GraphError::BadName(name.to_string()))?;
        // SAFETY: a live tensor; ggml copies the name.
        unsafe { (self.api().ggml_set_name)(p, c.as_ptr()) };
        let stmt = format!("ggml_set_name({}, {});", self.c_tensor(t), c_string(name));
        self.note_stmt(stmt);
        Ok(t)
    }

    /// The element type, where this crate knows it (inputs, views, and ops whose result type
    /// is fixed by the op or by an input).
    pub fn tensor_type(&self, t: Tensor) -> Result<Option<Type>, GraphError> {
        Ok(self.rec(t)?.ty)
    }

    pub(crate) fn ty_of(&self, t: Tensor) -> Option<Type> {
        self.rec(t).ok().and_then(|r| r.ty)
    }

    /// `ggml_nbytes`: the bytes from a tensor's first element to the end of its last (a view's
    /// span, gaps between its rows included).
    pub fn nbytes(&self, t: Tensor) -> Result<usize, GraphError> {
        let p = self.ptr(t)?;
        // SAFETY: a live tensor.
        Ok(unsafe { (self.api().ggml_nbytes)(p) })
    }

    /// `ggml_nelements`.
    pub fn nelements(&self, t: Tensor) -> Result<i64, GraphError> {
        let p = self.ptr(t)?;
        // SAFETY: a live tensor.
        Ok(unsafe { (self.api().ggml_nelements)(p) })
    }

    /// `ggml_op_desc`: "NONE", "RMS_NORM", "SILU", ...
    pub fn op(&self, t: Tensor) -> Result<String, GraphError> {
        let p = self.ptr(t)?;
        // SAFETY: a live tensor; the description is a static string.
        Ok(unsafe { ffi::string((self.api().ggml_op_desc)(p)) })
    }

    /// `ggml_is_contiguous`.
    pub fn is_contiguous(&self, t: Tensor) -> Result<bool, GraphError> {
        let p = self.ptr(t)?;
        // SAFETY: a live tensor.
        Ok(unsafe { (self.api().ggml_is_contiguous)(p) })
    }

    /// The shape `[ne0, ne1, ne2, ne3]`, asked of ggml (`ggml_unravel_index` of the last
    /// element) so the tensor struct stays opaque. An empty tensor's shape is known only where
    /// this crate set it.
    pub fn shape(&self, t: Tensor) -> Result<[i64; 4], GraphError> {
        let rec = self.rec(t)?;
        let api = self.api();
        let p = rec.ptr.as_ptr();
        // SAFETY: a live tensor.
        let n = unsafe { (api.ggml_nelements)(p) };
        if n <= 0 {
            return rec.ne.ok_or_else(|| {
                shape_err(
                    "shape",
                    "an empty op result's shape is not observable through ggml's API",
                )
            });
        }
        let mut i = [0i64; 4];
        // SAFETY: 0 <= n - 1 < nelements; four valid out-pointers.
        unsafe { (api.ggml_unravel_index)(p, n - 1, &mut i[0], &mut i[1], &mut i[2], &mut i[3]) };
        Ok([i[0] + 1, i[1] + 1, i[2] + 1, i[3] + 1])
    }

    // ---- inputs, views, copies --------------------------------------------------------

    /// A new tensor of `ty` with 1 to 4 dimensions (`ggml_new_tensor_Nd`).
    pub fn new_tensor(&mut self, ty: Type, ne: &[i64]) -> Result<Tensor, GraphError> {
        const OP: &str = "new_tensor";
        if ne.is_empty() || ne.len() > 4 {
            return Err(shape_err(
                OP,
                format!("{} dimensions; ggml has 1 to 4", ne.len()),
            ));
        }
        if let Some(d) = ne.iter().find(|&&d| d < 0) {
            return Err(shape_err(OP, format!("negative dimension {d}")));
        }
        if ty.is_quantized() && ne[0] % ty.block_size() != 0 {
            return Err(shape_err(
                OP,
                format!(
                    "ne0 = {} is not a multiple of {}'s block of {}",
                    ne[0],
                    ty.name(),
                    ty.block_size()
                ),
            ));
        }
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        self.check_bytes(OP, ty, full)?;
        self.reserve()?;
        let mut args = vec![crate::ops::c_type(ty)];
        args.extend(ne.iter().map(|d| format!("{d}LL")));
        self.note_call(&format!("ggml_new_tensor_{}d", ne.len()), &args);
        let (api, ctx, t) = (self.api(), self.ctx(), ty.raw());
        // SAFETY: a live context with room (reserve); dimensions and type validated above.
        let r = unsafe {
            match ne.len() {
                1 => (api.ggml_new_tensor_1d)(ctx, t, ne[0]),
                2 => (api.ggml_new_tensor_2d)(ctx, t, ne[0], ne[1]),
                3 => (api.ggml_new_tensor_3d)(ctx, t, ne[0], ne[1], ne[2]),
                _ => (api.ggml_new_tensor_4d)(ctx, t, ne[0], ne[1], ne[2], ne[3]),
            }
        };
        self.push(r, "ggml_new_tensor", Some(ty), Some(full), ViewState::Own)
    }

    /// The byte size of a contiguous `ty` tensor of shape `ne` must fit in `usize`.
    fn check_bytes(&self, op: &'static str, ty: Type, ne: [i64; 4]) -> Result<(), GraphError> {
        let elements = ne
            .iter()
            .try_fold(1u128, |acc, &d| acc.checked_mul(u128::try_from(d).ok()?));
        let bytes = elements
            .and_then(|e| e.checked_mul(ty_size(ty) as u128))
            .map(|b| b / ty.block_size() as u128)
            .filter(|&b| b <= isize::MAX as u128);
        match bytes {
            Some(_) => Ok(()),
            None => Err(shape_err(
                op,
                format!(
                    "{ne:?} of {} does not fit in memory's address range",
                    ty.name()
                ),
            )),
        }
    }

    /// A vector of `ne0` elements (`ggml_new_tensor_1d`).
    pub fn new_tensor_1d(&mut self, ty: Type, ne0: i64) -> Result<Tensor, GraphError> {
        self.new_tensor(ty, &[ne0])
    }
    /// `ne1` rows of `ne0` elements (`ggml_new_tensor_2d`).
    pub fn new_tensor_2d(&mut self, ty: Type, ne0: i64, ne1: i64) -> Result<Tensor, GraphError> {
        self.new_tensor(ty, &[ne0, ne1])
    }
    /// A tensor of shape `[ne0, ne1, ne2]` (`ggml_new_tensor_3d`).
    pub fn new_tensor_3d(
        &mut self,
        ty: Type,
        ne0: i64,
        ne1: i64,
        ne2: i64,
    ) -> Result<Tensor, GraphError> {
        self.new_tensor(ty, &[ne0, ne1, ne2])
    }
    /// A tensor of shape `[ne0, ne1, ne2, ne3]` (`ggml_new_tensor_4d`).
    pub fn new_tensor_4d(
        &mut self,
        ty: Type,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
    ) -> Result<Tensor, GraphError> {
        self.new_tensor(ty, &[ne0, ne1, ne2, ne3])
    }

    /// A strided view of `a`: `ne` (1 to 4 dims), byte strides `nb` for dims 1.. (`nb.len() ==
    /// ne.len() - 1`), starting `offset` bytes into `a`. The whole view, strides included,
    /// must lie inside `a`: checked wherever `a`'s element type is known ([`tensor_type`]),
    /// which is stricter than ggml's own check (a strided view's dense size), so an
    /// out-of-bounds view is refused here rather than read out of bounds by a kernel.
    ///
    /// [`tensor_type`]: Graph::tensor_type
    pub fn view(
        &mut self,
        a: Tensor,
        ne: &[i64],
        nb: &[usize],
        offset: usize,
    ) -> Result<Tensor, GraphError> {
        const OP: &str = "view";
        if ne.is_empty() || ne.len() > 4 || nb.len() + 1 != ne.len() {
            return Err(shape_err(OP, format!("{} dims with {} strides; need 1 to 4 dims and one stride per dim after the first", ne.len(), nb.len())));
        }
        if let Some(d) = ne.iter().find(|&&d| d < 0) {
            return Err(shape_err(OP, format!("negative dimension {d}")));
        }
        let pa = self.ptr(a)?;
        let ty = self.ty_of(a);
        let state = self.view_of(a, offset)?;
        let api = self.api();
        if let Some(ty) = ty {
            if ty.is_quantized() && ne[0] % ty.block_size() != 0 {
                return Err(shape_err(
                    OP,
                    format!("ne0 = {} is not a multiple of {}'s block", ne[0], ty.name()),
                ));
            }
            // SAFETY: ne0 is a whole number of blocks (checked above).
            let row = unsafe { (api.ggml_row_size)(ty.raw(), ne[0]) };
            // SAFETY: a live tensor.
            let src_bytes = unsafe { (api.ggml_nbytes)(pa) };
            if ne.iter().all(|&d| d > 0) {
                // The last byte the view can touch, from its strides.
                let extent =
                    ne[1..]
                        .iter()
                        .zip(nb)
                        .try_fold(offset.checked_add(row), |acc, (&d, &s)| {
                            Some(acc.and_then(|a| a.checked_add((d as usize - 1).checked_mul(s)?)))
                        });
                match extent.flatten() {
                    Some(end) if end <= src_bytes => {}
                    Some(end) => {
                        return Err(shape_err(
                            OP,
                            format!("the view reaches byte {end} of a {src_bytes}-byte tensor"),
                        ));
                    }
                    None => return Err(shape_err(OP, "the view's extent overflows")),
                }
            }
            // ggml's own check (GGML_ASSERT in ggml_new_tensor_impl): the contiguous size of the
            // view from its absolute offset must fit in the base tensor.
            if let ViewState::Of { base, offset: abs } = state {
                let dense = ne[1..]
                    .iter()
                    .try_fold(row, |acc, &d| acc.checked_mul(d as usize));
                // SAFETY: a live tensor.
                let base_bytes = unsafe { (api.ggml_nbytes)(self.recs[base].ptr.as_ptr()) };
                match dense.and_then(|d| if d == 0 { Some(0) } else { d.checked_add(abs) }) {
                    Some(end) if end <= base_bytes => {}
                    _ => {
                        return Err(shape_err(
                            OP,
                            format!("ggml requires rows x row size + offset ({abs}) within the source's {base_bytes} bytes"),
                        ))
                    }
                }
            }
        }
        self.reserve()?;
        if self.is_recording() {
            let mut args = vec![self.c_tensor(a)];
            args.extend(ne.iter().map(|d| format!("{d}LL")));
            args.extend(nb.iter().map(|b| format!("(size_t) {b}ull")));
            args.push(format!("(size_t) {offset}ull"));
            self.note_call(&format!("ggml_view_{}d", ne.len()), &args);
        }
        let ctx = self.ctx();
        let n = |i: usize| ne.get(i).copied().unwrap_or(1);
        let s = |i: usize| nb.get(i).copied().unwrap_or(0);
        // SAFETY: a live context with room; the view checked against its source above.
        let r = unsafe {
            match ne.len() {
                1 => (api.ggml_view_1d)(ctx, pa, n(0), offset),
                2 => (api.ggml_view_2d)(ctx, pa, n(0), n(1), s(0), offset),
                3 => (api.ggml_view_3d)(ctx, pa, n(0), n(1), n(2), s(0), s(1), offset),
                _ => (api.ggml_view_4d)(ctx, pa, n(0), n(1), n(2), n(3), s(0), s(1), s(2), offset),
            }
        };
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        self.push(r, "ggml_view", ty, Some(full), state)
    }

    /// `ne0` contiguous elements of `a` from byte `offset` (`ggml_view_1d`).
    pub fn view_1d(&mut self, a: Tensor, ne0: i64, offset: usize) -> Result<Tensor, GraphError> {
        self.view(a, &[ne0], &[], offset)
    }
    /// `ne1` rows of `ne0` elements, rows `nb1` bytes apart, from byte `offset` of `a`
    /// (`ggml_view_2d`).
    pub fn view_2d(
        &mut self,
        a: Tensor,
        ne0: i64,
        ne1: i64,
        nb1: usize,
        offset: usize,
    ) -> Result<Tensor, GraphError> {
        self.view(a, &[ne0, ne1], &[nb1], offset)
    }
    /// A `[ne0, ne1, ne2]` view with byte strides `nb1`, `nb2`, from byte `offset` of `a`
    /// (`ggml_view_3d`).
    #[allow(clippy::too_many_arguments)]
    pub fn view_3d(
        &mut self,
        a: Tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Result<Tensor, GraphError> {
        self.view(a, &[ne0, ne1, ne2], &[nb1, nb2], offset)
    }
    /// A view of shape `ne` with byte strides `nb1`, `nb2`, `nb3`, from byte `offset` of `a`
    /// (`ggml_view_4d`).
    #[allow(clippy::too_many_arguments)]
    pub fn view_4d(
        &mut self,
        a: Tensor,
        ne: [i64; 4],
        nb1: usize,
        nb2: usize,
        nb3: usize,
        offset: usize,
    ) -> Result<Tensor, GraphError> {
        self.view(a, &ne, &[nb1, nb2, nb3], offset)
    }

    /// `ggml_reshape_4d` (fewer dims are padded with 1): `a` must be contiguous and keep its
    /// element count.
    pub fn reshape(&mut self, a: Tensor, ne: &[i64]) -> Result<Tensor, GraphError> {
        const OP: &str = "reshape";
        if ne.is_empty() || ne.len() > 4 || ne.iter().any(|&d| d < 0) {
            return Err(shape_err(
                OP,
                format!("shape {ne:?}: need 1 to 4 non-negative dims"),
            ));
        }
        let pa = self.ptr(a)?;
        let api = self.api();
        // SAFETY: a live tensor.
        if !unsafe { (api.ggml_is_contiguous)(pa) } {
            return Err(shape_err(
                OP,
                "the source is not contiguous (cont it first)",
            ));
        }
        let want = ne.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
        // SAFETY: a live tensor.
        let have = unsafe { (api.ggml_nelements)(pa) };
        if want != Some(have) {
            return Err(shape_err(
                OP,
                format!("{ne:?} does not hold the source's {have} elements"),
            ));
        }
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        let state = self.view_of(a, 0)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        let mut args = vec![self.c_tensor(a)];
        args.extend(full.iter().map(|d| format!("{d}LL")));
        self.note_call("ggml_reshape_4d", &args);
        // SAFETY: contiguous source with the same element count; room reserved.
        let r =
            unsafe { (api.ggml_reshape_4d)(self.ctx(), pa, full[0], full[1], full[2], full[3]) };
        self.push(r, "ggml_reshape_4d", ty, Some(full), state)
    }

    /// [`reshape`](Graph::reshape) to a vector of `ne0` elements.
    pub fn reshape_1d(&mut self, a: Tensor, ne0: i64) -> Result<Tensor, GraphError> {
        self.reshape(a, &[ne0])
    }
    /// [`reshape`](Graph::reshape) to `[ne0, ne1]`.
    pub fn reshape_2d(&mut self, a: Tensor, ne0: i64, ne1: i64) -> Result<Tensor, GraphError> {
        self.reshape(a, &[ne0, ne1])
    }
    /// [`reshape`](Graph::reshape) to `[ne0, ne1, ne2]`.
    pub fn reshape_3d(
        &mut self,
        a: Tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
    ) -> Result<Tensor, GraphError> {
        self.reshape(a, &[ne0, ne1, ne2])
    }
    /// [`reshape`](Graph::reshape) to `[ne0, ne1, ne2, ne3]`.
    pub fn reshape_4d(
        &mut self,
        a: Tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
    ) -> Result<Tensor, GraphError> {
        self.reshape(a, &[ne0, ne1, ne2, ne3])
    }

    /// `ggml_permute`: source dim `i` becomes dim `axes[i]`; the axes must be 0..4 in some order.
    pub fn permute(&mut self, a: Tensor, axes: [i32; 4]) -> Result<Tensor, GraphError> {
        let mut seen = [false; 4];
        for &x in &axes {
            match usize::try_from(x).ok().filter(|&x| x < 4) {
                Some(x) if !seen[x] => seen[x] = true,
                _ => {
                    return Err(shape_err(
                        "permute",
                        format!("axes {axes:?} are not a permutation of 0..4"),
                    ))
                }
            }
        }
        let pa = self.ptr(a)?;
        let state = self.view_of(a, 0)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        let mut args = vec![self.c_tensor(a)];
        args.extend(axes.iter().map(i32::to_string));
        self.note_call("ggml_permute", &args);
        // SAFETY: a valid permutation; room reserved.
        let r = unsafe {
            (self.api().ggml_permute)(self.ctx(), pa, axes[0], axes[1], axes[2], axes[3])
        };
        self.push(r, "ggml_permute", ty, None, state)
    }

    /// `ggml_transpose`: swaps dims 0 and 1 (a view).
    pub fn transpose(&mut self, a: Tensor) -> Result<Tensor, GraphError> {
        let pa = self.ptr(a)?;
        let state = self.view_of(a, 0)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call("ggml_transpose", &[self.c_tensor(a)]);
        // SAFETY: room reserved.
        let r = unsafe { (self.api().ggml_transpose)(self.ctx(), pa) };
        self.push(r, "ggml_transpose", ty, None, state)
    }

    /// `ggml_cont`: a contiguous copy.
    pub fn cont(&mut self, a: Tensor) -> Result<Tensor, GraphError> {
        let pa = self.ptr(a)?;
        let ty = self.ty_of(a);
        self.reserve()?;
        self.note_call("ggml_cont", &[self.c_tensor(a)]);
        // SAFETY: room reserved.
        let r = unsafe { (self.api().ggml_cont)(self.ctx(), pa) };
        self.push(r, "ggml_cont", ty, None, ViewState::Own)
    }

    /// `ggml_cpy`: copies `a` into `b` (converting the type); the result is a view of `b`.
    pub fn cpy(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, GraphError> {
        let (pa, pb) = (self.ptr(a)?, self.ptr(b)?);
        let api = self.api();
        // SAFETY: live tensors.
        let (na, nb) = unsafe { ((api.ggml_nelements)(pa), (api.ggml_nelements)(pb)) };
        if na != nb {
            return Err(shape_err("cpy", format!("{na} elements into {nb}")));
        }
        let state = self.view_of(b, 0)?;
        let ty = self.ty_of(b);
        self.reserve()?;
        self.note_call("ggml_cpy", &[self.c_tensor(a), self.c_tensor(b)]);
        // SAFETY: equal element counts; room reserved.
        let r = unsafe { (api.ggml_cpy)(self.ctx(), pa, pb) };
        self.push(r, "ggml_cpy", ty, None, state)
    }

    // ---- graph ------------------------------------------------------------------------

    /// Builds the forward graph of `outputs` (`ggml_new_graph_custom` +
    /// `ggml_build_forward_expand`, each output marked with `ggml_set_output`). After this no
    /// tensors can be added.
    pub fn build(&mut self, outputs: &[Tensor]) -> Result<(), GraphError> {
        if self.cgraph.is_some() {
            return Err(GraphError::AlreadyBuilt);
        }
        if outputs.is_empty() {
            return Err(shape_err("build", "no outputs"));
        }
        let ptrs = outputs
            .iter()
            .map(|&t| self.ptr(t))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(r) = self.recording.as_mut() {
            r.outputs = outputs.iter().map(|t| t.index).collect();
        }
        let api = self.api();
        // SAFETY: the graph's memory was reserved when the context was sized (every `reserve`
        // keeps room for it); its size covers every tensor the context can hold.
        let g = unsafe { (api.ggml_new_graph_custom)(self.ctx(), self.slots, false) };
        let g = NonNull::new(g).ok_or(GraphError::NullResult("ggml_new_graph_custom"))?;
        for p in ptrs {
            // SAFETY: live tensors of this context and a graph sized for all of them.
            unsafe {
                (api.ggml_set_output)(p);
                (api.ggml_build_forward_expand)(g.as_ptr(), p);
            }
        }
        self.cgraph = Some(g);
        Ok(())
    }

    /// Whether [`build`](Graph::build) has run: no more tensors can be added.
    pub fn is_built(&self) -> bool {
        self.cgraph.is_some()
    }

    /// The graph's op nodes in execution order, as (name, op).
    pub fn nodes(&self) -> Result<Vec<(String, String)>, GraphError> {
        let g = self.cgraph.ok_or(GraphError::NotBuilt)?;
        let api = self.api();
        // SAFETY: a built graph; nodes are live tensors of this context.
        unsafe {
            Ok((0..(api.ggml_graph_n_nodes)(g.as_ptr()))
                .map(|i| (api.ggml_graph_node)(g.as_ptr(), i))
                .map(|n| {
                    (
                        ffi::string((api.ggml_get_name)(n)),
                        ffi::string((api.ggml_op_desc)(n)),
                    )
                })
                .collect())
        }
    }

    /// Every tensor of the context, in creation order (so a view's source comes before it).
    fn ctx_tensors(&self) -> Vec<*mut c_void> {
        let api = self.api();
        let mut v = Vec::new();
        // SAFETY: context enumeration on a live context.
        let mut t = unsafe { (api.ggml_get_first_tensor)(self.ctx()) };
        while !t.is_null() {
            v.push(t);
            // SAFETY: `t` is a tensor of this context.
            t = unsafe { (api.ggml_get_next_tensor)(self.ctx(), t) };
        }
        v
    }

    fn handle_of(&self, p: *mut c_void) -> Option<Tensor> {
        self.recs
            .iter()
            .position(|r| r.ptr.as_ptr() == p)
            .map(|i| Tensor {
                graph: self.id,
                index: i as u32,
            })
    }

    /// Whether `backend`'s device can run `node` (`ggml_backend_dev_supports_op`).
    pub fn supports(&self, backend: &Backend, node: Tensor) -> Result<bool, GraphError> {
        let p = self.ptr(node)?;
        // SAFETY: a live device and tensor.
        Ok(unsafe { (self.api().ggml_backend_dev_supports_op)(backend.dev.as_ptr(), p) })
    }

    /// Every tensor of the graph the backend cannot run, as test-backend-ops asks before a
    /// case: an empty list means the graph is supported.
    pub fn unsupported(&self, backend: &Backend) -> Vec<Unsupported> {
        let api = self.api();
        self.ctx_tensors()
            .into_iter()
            // SAFETY: a live device and tensors of this context.
            .filter(|&t| !unsafe { (api.ggml_backend_dev_supports_op)(backend.dev.as_ptr(), t) })
            // SAFETY: live tensors; strings owned by them or static.
            .map(|t| unsafe {
                Unsupported {
                    name: ffi::string((api.ggml_get_name)(t)),
                    op: ffi::string((api.ggml_op_desc)(t)),
                }
            })
            .collect()
    }

    // ---- allocation -------------------------------------------------------------------

    /// Gives every tensor its own buffer of the backend's buffer type (views share their
    /// source's).
    pub fn alloc(&mut self, backend: &Backend) -> Result<(), GraphError> {
        self.alloc_with(backend, |_| Placement::Device)
    }

    /// As [`alloc`](Graph::alloc), with `policy` choosing each non-view tensor's [`Placement`]
    /// (e.g. every input before a guard page: `|t| if t.op == "NONE" { GuardAfter } else { Device }`).
    ///
    /// If it fails before any tensor got memory (a refused placement, the first allocation
    /// failing), the graph can be allocated again; a failure part-way leaves tensors that ggml
    /// will not let go of, and the graph answers [`GraphError::AllocFailed`] from then on.
    pub fn alloc_with(
        &mut self,
        backend: &Backend,
        policy: impl FnMut(&TensorInfo) -> Placement,
    ) -> Result<(), GraphError> {
        if self.alloc.is_some() {
            return Err(GraphError::AlreadyAllocated);
        }
        let r = self.alloc_inner(backend, policy);
        if r.is_err() && self.alloc.as_ref().is_some_and(|a| a.buffers.is_empty()) {
            self.alloc = None;
        }
        r
    }

    fn alloc_inner(
        &mut self,
        backend: &Backend,
        mut policy: impl FnMut(&TensorInfo) -> Placement,
    ) -> Result<(), GraphError> {
        let api = self.api();
        let buft = backend.buft.as_ptr();
        let host = backend.is_host();
        // SAFETY: the CPU buffer type is a static object; its alignment is what
        // ggml_backend_cpu_buffer_from_ptr checks.
        let host_align =
            unsafe { (api.ggml_backend_buft_get_alignment)((api.ggml_backend_cpu_buffer_type)()) }
                .max(1);
        self.alloc = Some(Alloc {
            device: backend.dev,
            backend: backend.name().to_string(),
            buffers: Vec::new(),
            memory: Vec::new(),
            complete: false,
        });
        let tensors = self.ctx_tensors();
        for (i, &t) in tensors.iter().enumerate() {
            let name = self.ensure_name(t, i);
            // SAFETY: a tensor of this context. Views come after their sources (creation
            // order), so the source already has memory.
            if unsafe { (api.ggml_is_view)(t) } {
                // SAFETY: as above.
                let st = unsafe { (api.ggml_backend_view_init)(t) };
                if st != 0 {
                    return Err(self.status_err(&name, st));
                }
                continue;
            }
            // SAFETY: a live buffer type and tensor.
            let (size, nbytes, op) = unsafe {
                (
                    (api.ggml_backend_buft_get_alloc_size)(buft, t),
                    (api.ggml_nbytes)(t),
                    ffi::string((api.ggml_op_desc)(t)),
                )
            };
            let info = TensorInfo {
                name: name.clone(),
                tensor: self.handle_of(t),
                op,
                nbytes,
                alloc_size: size,
            };
            // ggml gives a zero-size buffer no address; one byte keeps the tensor addressable.
            let n = size.max(1);
            let placement = policy(&info);
            let kind = match &placement {
                Placement::Device => PlacementKind::Device,
                Placement::GuardAfter => PlacementKind::GuardAfter,
                Placement::GuardBefore => PlacementKind::GuardBefore,
                Placement::Host { .. } => PlacementKind::Host,
            };
            if kind != PlacementKind::Device && !host {
                return Err(GraphError::Placement {
                    tensor: name,
                    reason: format!(
                        "backend {} does not use host memory; only Placement::Device applies",
                        backend.name()
                    ),
                });
            }
            let place_err = |reason: String| GraphError::Placement {
                tensor: name.clone(),
                reason,
            };
            let (buffer, addr, slack, memory): (
                *mut c_void,
                *mut c_void,
                usize,
                Option<Box<dyn HostMemory>>,
            ) = match placement {
                Placement::Device => {
                    let mark = hooks::mark();
                    // SAFETY: a live buffer type; n > 0.
                    let b = unsafe { (api.ggml_backend_buft_alloc_buffer)(buft, n) };
                    if b.is_null() {
                        return Err(GraphError::OutOfMemory {
                            tensor: name,
                            bytes: n,
                            buffer_type: backend.buffer_type(),
                            log: hooks::since(mark),
                        });
                    }
                    // SAFETY: a live buffer of n > 0 bytes.
                    (b, unsafe { (api.ggml_backend_buffer_get_base)(b) }, 0, None)
                }
                Placement::GuardAfter | Placement::GuardBefore => {
                    let side = if kind == PlacementKind::GuardAfter {
                        GuardSide::After
                    } else {
                        GuardSide::Before
                    };
                    let want = n
                        .checked_add(host_align)
                        .ok_or_else(|| place_err("size overflows".into()))?;
                    let region = GuardedRegion::new(want, side)
                        .map_err(|e| place_err(format!("mapping guarded memory: {e}")))?;
                    let (addr, slack) = match side {
                        GuardSide::After => {
                            let start = (region.boundary() - n) / host_align * host_align;
                            (start, region.boundary() - start - n)
                        }
                        GuardSide::Before => (region.boundary(), 0),
                    };
                    // SAFETY: [addr, addr + n) lies in the region's usable bytes, aligned.
                    let b =
                        unsafe { (api.ggml_backend_cpu_buffer_from_ptr)(addr as *mut c_void, n) };
                    (
                        b,
                        addr as *mut c_void,
                        slack,
                        Some(Box::new(region) as Box<dyn HostMemory>),
                    )
                }
                Placement::Host { memory, offset } => {
                    let base = memory.as_ptr() as usize;
                    let addr = base
                        .checked_add(offset)
                        .ok_or_else(|| place_err("offset overflows".into()))?;
                    if base == 0 || offset.checked_add(n).is_none_or(|end| end > memory.len()) {
                        return Err(place_err(format!(
                            "{n} bytes at offset {offset} do not fit in {} bytes of memory",
                            memory.len()
                        )));
                    }
                    if addr % host_align != 0 {
                        return Err(place_err(format!(
                            "address {addr:#x} is not aligned to {host_align}"
                        )));
                    }
                    // SAFETY: [addr, addr + n) lies inside `memory`, which the trait vouches for
                    // and which the graph keeps alive until the buffer is freed; aligned.
                    let b =
                        unsafe { (api.ggml_backend_cpu_buffer_from_ptr)(addr as *mut c_void, n) };
                    (b, addr as *mut c_void, 0, Some(memory))
                }
            };
            let buffer = match NonNull::new(buffer) {
                Some(b) => b,
                None => return Err(place_err("ggml returned no buffer".into())),
            };
            // SAFETY: a live buffer.
            let buffer_bytes = unsafe { (api.ggml_backend_buffer_get_size)(buffer.as_ptr()) };
            let alloc = self.alloc.as_mut().ok_or(GraphError::NotAllocated)?;
            alloc.memory.extend(memory);
            alloc.buffers.push((
                buffer,
                AllocationInfo {
                    name: name.clone(),
                    base: addr as usize,
                    bytes: size,
                    nbytes,
                    buffer_bytes,
                    slack,
                    placement: kind,
                },
            ));
            // SAFETY: an unallocated, non-view tensor and a buffer whose [addr, addr + size)
            // holds it (ggml asserts the same).
            let st = unsafe { (api.ggml_backend_tensor_alloc)(buffer.as_ptr(), t, addr) };
            if st != 0 {
                return Err(self.status_err(&name, st));
            }
        }
        if let Some(a) = self.alloc.as_mut() {
            a.complete = true;
        }
        Ok(())
    }

    fn status_err(&self, tensor: &str, st: i32) -> GraphError {
        // SAFETY: returns a static string for any value.
        let text = unsafe { ffi::string((self.api().ggml_status_to_string)(st)) };
        GraphError::TensorInit {
            tensor: tensor.to_string(),
            status: text,
        }
    }

    /// The tensor's name, giving an unnamed one "OP#index" so every allocation has a name.
    fn ensure_name(&self, t: *mut c_void, i: usize) -> String {
        let api = self.api();
        // SAFETY: a live tensor; strings owned by it or static.
        unsafe {
            let name = ffi::string((api.ggml_get_name)(t));
            if !name.is_empty() {
                return name;
            }
            let name = format!("{}#{i}", ffi::string((api.ggml_op_desc)(t)));
            if let Ok(c) = CString::new(name.clone()) {
                (api.ggml_set_name)(t, c.as_ptr());
            }
            name
        }
    }

    /// Each tensor's own buffer: name, base address, bytes (views have none of their own).
    pub fn allocations(&self) -> Vec<AllocationInfo> {
        self.alloc
            .as_ref()
            .map(|a| a.buffers.iter().map(|(_, i)| i.clone()).collect())
            .unwrap_or_default()
    }

    /// Which tensor an address belongs to, or is just past (for reading sanitizer reports).
    pub fn locate(&self, addr: usize) -> Option<Located> {
        let allocs = self.allocations();
        if let Some(a) = allocs
            .iter()
            .find(|a| addr >= a.base && addr < a.base + a.bytes.max(1))
        {
            return Some(Located::Inside {
                name: a.name.clone(),
                offset: addr - a.base,
            });
        }
        allocs
            .iter()
            .filter(|a| a.base + a.bytes <= addr)
            .max_by_key(|a| a.base + a.bytes)
            .map(|a| Located::After {
                name: a.name.clone(),
                past_end: addr - (a.base + a.bytes),
            })
    }

    // ---- data -------------------------------------------------------------------------

    fn allocated(&self) -> Result<&Alloc, GraphError> {
        match &self.alloc {
            Some(a) if a.complete => Ok(a),
            Some(_) => Err(GraphError::AllocFailed),
            None => Err(GraphError::NotAllocated),
        }
    }

    /// Writes all of a tensor's bytes (`ggml_backend_tensor_set`); `data` must be exactly
    /// `nbytes` long.
    pub fn set_data(&mut self, t: Tensor, data: &[u8]) -> Result<(), GraphError> {
        self.allocated()?;
        let n = self.nbytes(t)?;
        if data.len() != n {
            return Err(GraphError::SizeMismatch {
                tensor: self.name(t)?,
                what: "data",
                expected: n,
                got: data.len(),
            });
        }
        self.set_range(t, 0, data)
    }

    /// The address of an allocated tensor's first byte in its buffer (`ggml_get_data`): a
    /// device address for a GPU backend's buffer, which code of the same CUDA context may read
    /// and write (kedge draws big inputs there).
    pub fn data_ptr(&self, t: Tensor) -> Result<u64, GraphError> {
        self.allocated()?;
        let p = self.ptr(t)?;
        // SAFETY: an allocated tensor of this graph.
        Ok(unsafe { (self.api().ggml_get_data)(p) } as u64)
    }

    /// Reads all of a tensor's bytes (`ggml_backend_tensor_get`).
    pub fn get_data(&self, t: Tensor) -> Result<Vec<u8>, GraphError> {
        self.allocated()?;
        let n = self.nbytes(t)?;
        self.get_range(t, 0, n)
    }

    /// Writes `data` at byte `offset` of an allocated tensor (a range of it: a row of a view
    /// whose rows lie far apart, without writing the gaps between them).
    pub fn set_range(&mut self, t: Tensor, offset: usize, data: &[u8]) -> Result<(), GraphError> {
        self.allocated()?;
        let p = self.ptr(t)?;
        self.in_range(t, offset, data.len(), "range written")?;
        if !data.is_empty() {
            // SAFETY: an allocated tensor; [offset, offset + len) lies within its nbytes.
            unsafe {
                (self.api().ggml_backend_tensor_set)(p, data.as_ptr().cast(), offset, data.len())
            };
        }
        Ok(())
    }

    /// Reads `len` bytes at byte `offset` of an allocated tensor (`set_range`'s counterpart).
    pub fn get_range(&self, t: Tensor, offset: usize, len: usize) -> Result<Vec<u8>, GraphError> {
        self.allocated()?;
        let p = self.ptr(t)?;
        self.in_range(t, offset, len, "range read")?;
        let mut out = vec![0u8; len];
        if len > 0 {
            // SAFETY: an allocated tensor; `out` has room for `len` bytes, which lie within
            // its nbytes from `offset`.
            unsafe {
                (self.api().ggml_backend_tensor_get)(p, out.as_mut_ptr().cast(), offset, len)
            };
        }
        Ok(out)
    }

    fn in_range(
        &self,
        t: Tensor,
        offset: usize,
        len: usize,
        what: &'static str,
    ) -> Result<(), GraphError> {
        let n = self.nbytes(t)?;
        if offset.checked_add(len).is_none_or(|end| end > n) {
            return Err(GraphError::SizeMismatch {
                tensor: self.name(t)?,
                what,
                expected: n.saturating_sub(offset),
                got: len,
            });
        }
        Ok(())
    }

    /// Fills a tensor with `pattern` repeated (the last repeat cut short): poison before a
    /// compute, so bytes an op should write but does not are recognisable afterwards.
    pub fn fill(&mut self, t: Tensor, pattern: &[u8]) -> Result<(), GraphError> {
        let n = self.nbytes(t)?;
        self.fill_range(t, 0, n, pattern)
    }

    /// Fills `len` bytes at byte `offset` of a tensor with `pattern` repeated from its start
    /// (`fill` of a range: a row of a view whose rows lie far apart).
    pub fn fill_range(
        &mut self,
        t: Tensor,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<(), GraphError> {
        if pattern.is_empty() {
            return Err(GraphError::SizeMismatch {
                tensor: self.name(t)?,
                what: "fill pattern",
                expected: 1,
                got: 0,
            });
        }
        // A chunk of whole patterns at a time, written again and again: a multi-gigabyte
        // output is never built in host memory, nor byte by byte.
        const CHUNK: usize = 16 << 20;
        let per = (CHUNK / pattern.len()).max(1) * pattern.len();
        let chunk: Vec<u8> = pattern.repeat(per.min(len).div_ceil(pattern.len()));
        let mut done = 0;
        while done < len {
            let n = (len - done).min(per);
            self.set_range(t, offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Writes f32 values (the tensor's bytes reinterpreted; its type is the caller's business).
    pub fn set_f32(&mut self, t: Tensor, v: &[f32]) -> Result<(), GraphError> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.set_data(t, &bytes)
    }

    /// Reads the tensor's bytes as f32 values.
    pub fn get_f32(&self, t: Tensor) -> Result<Vec<f32>, GraphError> {
        let b = self.get_data(t)?;
        if b.len() % 4 != 0 {
            return Err(GraphError::SizeMismatch {
                tensor: self.name(t)?,
                what: "f32 view",
                expected: b.len() / 4 * 4,
                got: b.len(),
            });
        }
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Writes i32 values.
    pub fn set_i32(&mut self, t: Tensor, v: &[i32]) -> Result<(), GraphError> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.set_data(t, &bytes)
    }

    /// Reads the tensor's bytes as i32 values.
    pub fn get_i32(&self, t: Tensor) -> Result<Vec<i32>, GraphError> {
        let b = self.get_data(t)?;
        if b.len() % 4 != 0 {
            return Err(GraphError::SizeMismatch {
                tensor: self.name(t)?,
                what: "i32 view",
                expected: b.len() / 4 * 4,
                got: b.len(),
            });
        }
        Ok(b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    // ---- compute ----------------------------------------------------------------------

    /// Runs the graph on `backend` (`ggml_backend_graph_compute`, which waits for the result).
    /// The graph must have been allocated for the same device.
    pub fn compute(&mut self, backend: &Backend) -> Result<(), ComputeError> {
        let g = self.cgraph.ok_or(GraphError::NotBuilt)?;
        let a = self.allocated()?;
        if a.device != backend.dev {
            return Err(ComputeError::WrongBackend {
                allocated_for: a.backend.clone(),
                backend: backend.name().to_string(),
            });
        }
        let api = self.api();
        let mark = hooks::mark();
        // SAFETY: a built graph whose tensors all have memory on this backend's device.
        let st = unsafe { (api.ggml_backend_graph_compute)(backend.ptr.as_ptr(), g.as_ptr()) };
        let status = Status::from_raw(st);
        if status == Status::Success {
            return Ok(());
        }
        Err(ComputeError::Failed {
            backend: backend.name().to_string(),
            status,
            // SAFETY: returns a static string for any value.
            text: unsafe { ffi::string((api.ggml_status_to_string)(st)) },
            log: hooks::since(mark),
        })
    }
}

/// Bytes per block of `ty` as the pinned header defines them (for overflow checks before ggml
/// is asked anything).
fn ty_size(ty: Type) -> usize {
    ty.type_size()
}

impl Drop for Graph {
    fn drop(&mut self) {
        let api = self.api();
        if let Some(a) = self.alloc.take() {
            for (b, _) in a.buffers.iter().rev() {
                // SAFETY: buffers this graph allocated, freed once, before the memory some of
                // them wrap is released (below) and before the context.
                unsafe { (api.ggml_backend_buffer_free)(b.as_ptr()) };
            }
            drop(a.memory);
        }
        // SAFETY: the context this graph created, freed once, after its buffers.
        unsafe { (api.ggml_free)(self.ctx.as_ptr()) };
    }
}
