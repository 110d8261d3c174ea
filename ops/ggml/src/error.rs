//! Errors: each says what failed in terms a user can act on (which file, which symbol, which
//! tensor, which backend this build has instead).

use std::path::PathBuf;

use thiserror::Error;

use crate::types::Status;

/// Loading a ggml build failed.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The directory given does not exist.
    #[error("ggml build directory {0} does not exist")]
    DirMissing(PathBuf),
    /// The path given is a file (often a library itself); the directory holding the
    /// libraries is wanted.
    #[error(
        "{0} is a file, not a ggml build directory (give the directory holding its libraries)"
    )]
    NotADirectory(PathBuf),
    /// Reading a candidate directory (the one given, or its `lib/`) failed: listing it, or
    /// resolving its real path.
    #[error("reading {dir}: {source}")]
    Io {
        /// The directory being read.
        dir: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// Neither the directory nor its `lib/` holds both `libggml-base.so` and `libggml.so`
    /// (plain or versioned).
    #[error("not a ggml build: expected libggml-base.so and libggml.so in {0} (or its lib/)")]
    NotGgmlBuild(PathBuf),
    /// The dynamic linker refused one of the build's libraries.
    #[error("could not load {library}: {reason}")]
    Open {
        /// The library (or, for a path with a NUL byte, the directory) being opened.
        library: PathBuf,
        /// The loader's error with its sources, `dlerror`'s words included.
        reason: String,
    },
    /// A core symbol (see [`required_symbols`](crate::required_symbols)) is missing: the
    /// library is not ggml, or predates the backend registry.
    #[error(
        "{library} has no symbol {symbol}: not a ggml build, or one older than this crate supports"
    )]
    MissingSymbol {
        /// The C function's name, e.g. `ggml_backend_dev_count`.
        symbol: String,
        /// The library it was looked up in (`libggml-base.so` or `libggml.so`).
        library: PathBuf,
    },
    /// This process already holds a different build; one process can hold only one.
    #[error(
        "another ggml build ({loaded}) is already loaded in this process; ggml keeps process-global \
         state and its libraries share sonames, so one process runs one build (requested {requested})"
    )]
    AnotherBuildLoaded {
        /// The library directory of the build already loaded.
        loaded: PathBuf,
        /// The library directory asked for now.
        requested: PathBuf,
    },
}

/// Getting a backend failed.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The registry has no device of that name.
    #[error(
        "this ggml build has no backend device {name:?}; it has: {}{}",
        list(available),
        problems_suffix(problems)
    )]
    Unknown {
        /// The name asked for.
        name: String,
        /// The device names the registry does list ("CPU", "CUDA0", ...).
        available: Vec<String>,
        /// Backend modules that did not register, with ggml's reason
        /// ([`Ggml::module_problems`](crate::Ggml::module_problems)): often why a device is absent.
        problems: Vec<String>,
    },
    /// `ggml_backend_dev_init` returned no backend, or the backend has no default buffer type.
    #[error("ggml could not start backend {name}{}", log_suffix(log))]
    InitFailed {
        /// The device's registry name.
        name: String,
        /// The warning and error lines ggml logged while trying.
        log: Vec<String>,
    },
    /// The name cannot be passed to C.
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
    /// The loaded build lacks the op's entry point (named: `ggml_top_k`, ...), usually because it
    /// is older than the op.
    #[error("this ggml build has no {0}")]
    MissingOp(&'static str),
    /// A [`Tensor`](crate::Tensor) from one graph was given to another.
    #[error("tensor handle belongs to another graph")]
    ForeignTensor,
    /// The context has no room for another tensor.
    #[error("graph is full: room for {capacity} tensors (raise GraphOptions::max_tensors)")]
    CapacityExceeded {
        /// How many tensors the graph was sized for.
        capacity: usize,
    },
    /// `ggml_init` returned no context.
    #[error("ggml_init could not allocate a context of {bytes} bytes")]
    ContextInit {
        /// The metadata pool size asked for.
        bytes: usize,
    },
    /// Arguments this crate refused before ggml saw them: shapes, types or parameters that would
    /// make ggml abort (`GGML_ASSERT`) or a view read out of bounds.
    #[error("{op}: {reason}")]
    Shape {
        /// The op or method that refused (`ggml_mul_mat`, `view`, ...).
        op: &'static str,
        /// What is wrong, with the shapes involved.
        reason: String,
    },
    /// A ggml constructor (named) returned null: a tensor's, or the graph's.
    #[error("{0} returned no tensor")]
    NullResult(&'static str),
    /// The call needs [`Graph::build`](crate::Graph::build) first.
    #[error("the graph has not been built yet (call build)")]
    NotBuilt,
    /// Tensors and ops can no longer be added: the graph is built.
    #[error("the graph is already built; no tensors can be added")]
    AlreadyBuilt,
    /// The call needs [`Graph::alloc`](crate::Graph::alloc) first.
    #[error("the graph's tensors are not allocated yet (call alloc)")]
    NotAllocated,
    /// A graph is allocated once.
    #[error("the graph's tensors are already allocated")]
    AlreadyAllocated,
    /// An earlier allocation failed after some tensors got memory; ggml cannot take it back, so
    /// the graph is unusable.
    #[error("an allocation of this graph failed part-way; build a new graph")]
    AllocFailed,
    /// Data given for (or read from) a tensor is not the tensor's size.
    #[error("tensor {tensor}: {what} is {got} bytes, the tensor is {expected}")]
    SizeMismatch {
        /// The tensor's name.
        tensor: String,
        /// What was measured: "data", "fill pattern", "f32 view", ...
        what: &'static str,
        /// The size in bytes the tensor needs.
        expected: usize,
        /// The size in bytes given.
        got: usize,
    },
    /// A tensor name cannot be passed to C.
    #[error("name {0:?} contains a NUL byte")]
    BadName(String),
    /// Quantizing or dequantizing refused: a type the build lacks, rows that are not whole
    /// blocks, a missing importance matrix, type traits this crate does not recognise.
    #[error("{ty}: {reason}")]
    Quantize {
        /// ggml's name of the element type ("q4_K").
        ty: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The backend's buffer type could not allocate a tensor's buffer.
    #[error(
        "allocating tensor {tensor} ({bytes} bytes) on {buffer_type} failed{}",
        log_suffix(log)
    )]
    OutOfMemory {
        /// The tensor's name.
        tensor: String,
        /// The buffer size asked for.
        bytes: usize,
        /// The buffer type's name ("CPU", "CUDA0").
        buffer_type: String,
        /// The warning and error lines ggml logged meanwhile.
        log: Vec<String>,
    },
    /// A [`Placement`](crate::Placement) could not be honoured: host placement on a device
    /// backend, caller memory too small or misaligned, a guard mapping refused.
    #[error("placing tensor {tensor}: {reason}")]
    Placement {
        /// The tensor's name.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// `ggml_backend_tensor_alloc` or `ggml_backend_view_init` returned an error status.
    #[error("ggml refused tensor {tensor}: {status}")]
    TensorInit {
        /// The tensor's name.
        tensor: String,
        /// `ggml_status_to_string` of the status.
        status: String,
    },
}

/// Running a graph failed.
#[derive(Debug, Error)]
pub enum ComputeError {
    /// The graph was not ready to run (not built, not allocated).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The backend is not on the device the graph's buffers live on.
    #[error("the graph was allocated for {allocated_for}, not for backend {backend}")]
    WrongBackend {
        /// The backend the graph was allocated for.
        allocated_for: String,
        /// The backend asked to run it.
        backend: String,
    },
    /// `ggml_backend_graph_compute` returned a status other than success.
    #[error("compute on {backend} returned {status:?} ({text}){}", log_suffix(log))]
    Failed {
        /// The backend's name.
        backend: String,
        /// The status ggml returned.
        status: Status,
        /// `ggml_status_to_string` of it.
        text: String,
        /// The warning and error lines ggml logged during the compute.
        log: Vec<String>,
    },
}
