//! Drives a ggml build through ggml's C API, loaded at run time.
//!
//! kedge checks upstream kernels where they break; for ggml that means running ggml's own ops,
//! built from whatever source the user has, without linking ggml into kedge. This crate is the
//! thin, typed layer for that:
//!
//! - [`Ggml::load`] opens a build directory (linked backends, or `GGML_BACKEND_DL` modules as
//!   llama.cpp releases ship them) and resolves the symbols it needs, naming any that is
//!   missing; op entry points are optional, so an older build fails only the ops it lacks;
//! - [`Graph`] builds a one-op (or few-op) graph over a metadata-only context, gives **each
//!   tensor its own buffer** of exactly its alloc size (test-backend-ops puts a case's tensors
//!   in one buffer, which hides a read past one tensor inside the next), and records every
//!   buffer's address so a sanitizer report can name the tensor;
//! - on the CPU backend a tensor can sit right before (or after) a `PROT_NONE` page
//!   ([`Placement::GuardAfter`]), so a read past its end faults;
//! - [`Ggml::install_hooks`] routes ggml's log and abort callbacks, so a worker process can
//!   write ggml's own words ("CUDA error: invalid argument ... at common.cuh:1668") before ggml
//!   calls `abort()`.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kedge_ggml::{Ggml, GraphOptions, Type};
//! let ggml = Ggml::load(std::path::Path::new("/opt/ggml"))?;
//! let cpu = ggml.backend("CPU")?;
//! let mut g = ggml.graph(GraphOptions::default())?;
//! let x = g.new_tensor_2d(Type::F32, 64, 4)?;
//! g.set_name(x, "x")?;
//! let y = g.rms_norm(x, 1e-6)?;
//! g.build(&[y])?;
//! assert!(g.unsupported(&cpu).is_empty());
//! g.alloc(&cpu)?;
//! g.set_f32(x, &vec![1.0; 256])?;
//! g.fill(y, &f32::NAN.to_le_bytes())?;
//! g.compute(&cpu)?;
//! let out = g.get_f32(y)?;
//! # Ok(()) }
//! ```
//!
//! ggml's structs are treated as opaque: everything about a tensor is asked through ggml's
//! functions, so the crate does not depend on the struct layout of the build it loads.
//!
//! Threads: a [`Ggml`] is shared freely; a [`Backend`] and a [`Graph`] move between threads but
//! are used by one at a time. ggml's log and abort hooks are process-global, and a process loads
//! one ggml build.

#![warn(missing_docs)]

mod backend;
mod elf;
mod error;
mod ffi;
mod graph;
mod guard;
mod hooks;
mod load;
mod ops;
mod types;

pub use backend::Backend;
pub use error::{BackendError, ComputeError, GraphError, LoadError};
pub use graph::{
    c_string, AllocationInfo, Graph, GraphOptions, Located, Placement, PlacementKind, Recording,
    Tensor, TensorInfo, Unsupported,
};
pub use guard::HostMemory;
pub use hooks::{clear_recent_log, recent_log, AbortHook, AbortReport, LogHook, LogLine};
pub use load::{on_open, required_symbols, DeviceInfo, Ggml, Layout};
pub use ops::RopeParams;
pub use types::{
    rope_mode, DeviceKind, GluOp, LogLevel, PoolOp, Prec, ScaleMode, SortOrder, Status, TriType,
    Type, UnaryOp, SCALE_FLAG_ALIGN_CORNERS, SCALE_FLAG_ANTIALIAS,
};
