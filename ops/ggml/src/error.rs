//! Errors: each says what failed in terms a user can act on (which file, which symbol, which
//! tensor, which backend this build has instead).

use std::path::PathBuf;

use thiserror::Error;

use crate::types::Status;

/// Loading a ggml build failed.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("ggml build directory {0} does not exist")]
    DirMissing(PathBuf),
    #[error(
        "{0} is a file, not a ggml build directory (give the directory holding its libraries)"
    )]
    NotADirectory(PathBuf),
    #[error("reading {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a ggml build: expected libggml-base.so and libggml.so in {0} (or its lib/)")]
    NotGgmlBuild(PathBuf),
    #[error("could not load {library}: {reason}")]
    Open { library: PathBuf, reason: String },
    #[error(
        "{library} has no symbol {symbol}: not a ggml build, or one older than this crate supports"
    )]
    MissingSymbol { symbol: String, library: PathBuf },
    #[error(
        "another ggml build ({loaded}) is already loaded in this process; ggml keeps process-global \
         state and its libraries share sonames, so one process runs one build (requested {requested})"
    )]
    AnotherBuildLoaded { loaded: PathBuf, requested: PathBuf },
}

/// Getting a backend failed.
#[derive(Debug, Error)]
pub enum BackendError {
    #[error(
        "this ggml build has no backend device {name:?}; it has: {}{}",
        list(available),
        problems_suffix(problems)
    )]
    Unknown {
        name: String,
        available: Vec<String>,
        problems: Vec<String>,
    },
    #[error("ggml could not start backend {name}{}", log_suffix(log))]
    InitFailed { name: String, log: Vec<String> },
    #[error("backend name {0:?} contains a NUL byte")]
    BadName(String),
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn problems_suffix(p: &[String]) -> String {
    if p.is_empty() {
        String::new()
    } else {
        format!(" (backend modules that did not load: {})", p.join("; "))
    }
}

fn log_suffix(log: &[String]) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!(": {}", log.join(" | "))
    }
}

/// Building a graph, allocating it or moving data failed.
#[derive(Debug, Error)]
pub enum GraphError {
    #[error("this ggml build has no {0}")]
    MissingOp(&'static str),
    #[error("tensor handle belongs to another graph")]
    ForeignTensor,
    #[error("graph is full: room for {capacity} tensors (raise GraphOptions::max_tensors)")]
    CapacityExceeded { capacity: usize },
    #[error("ggml_init could not allocate a context of {bytes} bytes")]
    ContextInit { bytes: usize },
    #[error("{op}: {reason}")]
    Shape { op: &'static str, reason: String },
    #[error("{0} returned no tensor")]
    NullResult(&'static str),
    #[error("the graph has not been built yet (call build)")]
    NotBuilt,
    #[error("the graph is already built; no tensors can be added")]
    AlreadyBuilt,
    #[error("the graph's tensors are not allocated yet (call alloc)")]
    NotAllocated,
    #[error("the graph's tensors are already allocated")]
    AlreadyAllocated,
    #[error("an allocation of this graph failed part-way; build a new graph")]
    AllocFailed,
    #[error("tensor {tensor}: {what} is {got} bytes, the tensor is {expected}")]
    SizeMismatch {
        tensor: String,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("name {0:?} contains a NUL byte")]
    BadName(String),
    #[error("{ty}: {reason}")]
    Quantize { ty: &'static str, reason: String },
    #[error(
        "allocating tensor {tensor} ({bytes} bytes) on {buffer_type} failed{}",
        log_suffix(log)
    )]
    OutOfMemory {
        tensor: String,
        bytes: usize,
        buffer_type: String,
        log: Vec<String>,
    },
    #[error("placing tensor {tensor}: {reason}")]
    Placement { tensor: String, reason: String },
    #[error("ggml refused tensor {tensor}: {status}")]
    TensorInit { tensor: String, status: String },
}

/// Running a graph failed.
#[derive(Debug, Error)]
pub enum ComputeError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("the graph was allocated for {allocated_for}, not for backend {backend}")]
    WrongBackend {
        allocated_for: String,
        backend: String,
    },
    #[error("compute on {backend} returned {status:?} ({text}){}", log_suffix(log))]
    Failed {
        backend: String,
        status: Status,
        text: String,
        log: Vec<String>,
    },
}
