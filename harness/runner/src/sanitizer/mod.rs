//! compute-sanitizer: build the command line that wraps a worker, parse the XML it saves
//! (and the text it prints), attribute every record to exactly one case, and turn records
//! into `Finding`s and a verdict.
//!
//! Attribution does not depend on timing: the worker calls `kedge_case_marker(seq)` before
//! each case, a deliberate API error that the sanitizer records (in order) with a host frame
//! named `kedge_case_marker`. Records between marker k and marker k+1 belong to case k.

mod attribute;
mod command;
mod run;
mod text;
mod xml;

pub use attribute::{
    attribute, case_findings, findings_to_verdict, Attribution, CaseFindings, RecordClass,
};
pub(crate) use command::{accepts_option, find_sanitizer, EXCLUDE_OPTION};
pub use command::{parse_tools, SanitizerConfig, Tool};
pub(crate) use run::merge_into_result;
pub use run::{analyze_run, SanitizedRun};
pub use text::{enrich_from_text, parse_text, TextRecord};
pub use xml::{parse_xml, parse_xml_file, ParsedXml};

use command::SANITIZER_ENV;
use std::fmt;
use std::path::PathBuf;

/// The host frame that marks the start of a case in the sanitizer's record stream.
const MARKER_FRAME: &str = "kedge_case_marker";

/// compute-sanitizer could not be found, set up as asked, or read.
#[derive(Debug, thiserror::Error)]
pub enum SanitizerError {
    /// No compute-sanitizer executable in any place searched.
    #[error(
        "compute-sanitizer not found: install the CUDA toolkit (it ships in $CUDA_HOME/bin) \
         or set {SANITIZER_ENV} (looked in: {looked})"
    )]
    NotFound {
        /// The places searched, in words.
        looked: String,
    },
    /// `KEDGE_COMPUTE_SANITIZER` names something that is not an executable file; no other
    /// place is searched then.
    #[error("{SANITIZER_ENV}={path} does not name an executable file")]
    BadOverride {
        /// The path the variable gives.
        path: PathBuf,
    },
    /// A `--sanitize` list with a name that is not a tool.
    #[error("unknown sanitizer tool '{0}' (known: memcheck, initcheck, racecheck, synccheck)")]
    UnknownTool(String),
    /// An option kedge sets itself (`--tool`, `--xml`, `--save`, `--log-file`), or an attempt
    /// to drop `--report-api-errors`, which attribution needs.
    #[error("sanitizer option '{0}' is set by kedge itself and cannot be overridden")]
    ReservedOption(String),
    /// Extra sanitizer options that cannot be used: not `--option value`, an empty option
    /// name, a missing value, or a value that would hide the case markers.
    #[error("sanitizer option '{opt}': {msg}")]
    BadOption {
        /// The option (or token) at fault.
        opt: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A saved XML file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not compute-sanitizer XML, or XML that is wrong somewhere other than a cut-off end.
    #[error("malformed compute-sanitizer XML at line {line}, column {column}: {msg}")]
    Malformed {
        /// 1-based line of the error in the file.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What is wrong there.
        msg: String,
    },
}

impl SanitizerError {
    /// A missing or unreadable tool is the environment (5); options the user gave are bad
    /// input (2).
    pub(crate) fn exit_code(&self) -> i32 {
        use crate::exit;
        match self {
            SanitizerError::UnknownTool(_)
            | SanitizerError::ReservedOption(_)
            | SanitizerError::BadOption { .. } => exit::BAD_INPUT,
            SanitizerError::NotFound { .. }
            | SanitizerError::BadOverride { .. }
            | SanitizerError::Io { .. }
            | SanitizerError::Malformed { .. } => exit::ENVIRONMENT,
        }
    }
}

/// `<kind>` of a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// A precise memory-access error (memcheck, initcheck).
    Precise,
    /// An imprecise error (a hardware exception the tool could not pin to an access).
    Imprecise,
    /// A CUDA API call returned an error.
    Api,
    /// A racecheck hazard.
    Hazard,
    /// A leak-check record at exit.
    Leak,
    /// Any other `<kind>`, as the XML writes it.
    Other(String),
}

impl RecordKind {
    fn parse(s: &str) -> RecordKind {
        match s {
            "Precise" => RecordKind::Precise,
            "Imprecise" => RecordKind::Imprecise,
            "Api" => RecordKind::Api,
            "Hazard" | "RaceHazard" => RecordKind::Hazard,
            "Leak" | "MemoryLeak" => RecordKind::Leak,
            other => RecordKind::Other(other.to_string()),
        }
    }
    /// The kind as kedge names it (`Hazard` for racecheck's `RaceHazard`); another kind's own
    /// text.
    fn name(&self) -> &str {
        match self {
            RecordKind::Precise => "Precise",
            RecordKind::Imprecise => "Imprecise",
            RecordKind::Api => "Api",
            RecordKind::Hazard => "Hazard",
            RecordKind::Leak => "Leak",
            RecordKind::Other(s) => s,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a bad access read or wrote memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// The access read.
    Read,
    /// The access wrote.
    Write,
}

impl Direction {
    /// `read` or `write`, as messages say it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// The failing CUDA call of an `Api` record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiError {
    /// `cuStreamSynchronize`.
    pub api: String,
    /// `CUDA_ERROR_LAUNCH_FAILED`.
    pub error: String,
    /// `unspecified launch failure`.
    pub message: Option<String>,
    /// 719.
    pub result: Option<i64>,
}

/// "N bytes after the nearest allocation at A of size S bytes": how far past which allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllocationHint {
    /// How many bytes past the allocation's end (or before its start) the access landed.
    pub distance: u64,
    /// `true`: past the end ("after"); `false`: before the start.
    pub after: bool,
    /// The allocation's start address, as the tool prints it (`0x7f...`).
    pub base: String,
    /// The allocation's size in bytes.
    pub size: u64,
}

impl fmt::Display for AllocationHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes {} the nearest allocation at {} of size {} bytes",
            self.distance,
            if self.after { "after" } else { "before" },
            self.base,
            self.size
        )
    }
}

/// One `<record>` of compute-sanitizer XML, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `<kind>`: what sort of record.
    pub kind: RecordKind,
    /// `Error`, `Warning` ...
    pub level: Option<String>,
    /// `<what><text>`: the sentence the tool prints.
    pub text: String,
    /// `__global__`, `__shared__` ...
    pub space: Option<String>,
    /// `<what><size>`: bytes of the access.
    pub size: Option<u64>,
    /// `<what><direction>`: whether the access read or wrote.
    pub direction: Option<Direction>,
    /// `<what><error>`: `out of bounds`, `misaligned` ... (for `Api` records see `api`).
    pub error: Option<String>,
    /// `<what><address>` (or `accessAddress`): the address accessed, `0x...`.
    pub address: Option<String>,
    /// `<where><func>`: the kernel.
    pub kernel: Option<String>,
    /// `<where><pc>`: the faulting instruction's offset in the kernel.
    pub pc: Option<String>,
    /// `<who><threadIdx>`: the thread, (x, y, z).
    pub thread: Option<[u64; 3]>,
    /// `<who><blockIdx>`: the block, (x, y, z).
    pub block: Option<[u64; 3]>,
    /// Host stack, innermost first; frames without a symbol are left out.
    pub host_frames: Vec<String>,
    /// The failing call, for an `Api` record (or any record with `<what><api>`).
    pub api: Option<ApiError>,
    /// How far past which allocation the access landed, where a field of the record says so
    /// (or, after [`enrich_from_text`], the tool's printed text).
    pub allocation: Option<AllocationHint>,
    /// Every leaf under the record as (path, text), e.g. (`what/text`, ...), so a field this
    /// parser does not type (hazard details, synccheck specifics) is still available.
    fields: Vec<(String, String)>,
    /// 1-based line of `<record>` in the file.
    pub(crate) line: usize,
}

impl Record {
    /// Is this the `kedge_case_marker` API error that separates cases? Recognised by its host
    /// frame, or, in a binary without symbols (stripped, as packagers ship it), by the call and
    /// its error alone: nothing else in a worker asks the driver for device ordinal -1, so a
    /// failed `cuDeviceGet` with `CUDA_ERROR_INVALID_DEVICE` is the marker.
    pub fn is_marker(&self) -> bool {
        if self.kind != RecordKind::Api {
            return false;
        }
        if self.host_frames.iter().any(|f| f.contains(MARKER_FRAME)) {
            return true;
        }
        self.api
            .as_ref()
            .is_some_and(|a| a.api == "cuDeviceGet" && a.error == "CUDA_ERROR_INVALID_DEVICE")
    }
    /// The first leaf whose path ends with `suffix` (`"hazard/type"`).
    pub fn field(&self, suffix: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(p, _)| p == suffix || p.ends_with(&format!("/{suffix}")))
            .map(|(_, v)| v.as_str())
    }
}
