//! Records → cases → findings → verdict.
//!
//! The worker calls `kedge_case_marker` before each case (marker 0, case 0, marker 1,
//! case 1, ...). The sanitizer writes records in the order things happened, so splitting the
//! record list at marker records gives each case exactly its own records, however many cases
//! one worker ran: the same split a worker running a single case would give.

use super::{Direction, Record, RecordKind, Tool};
use kedge_core::judge::result::{Finding, FindingKind};
use kedge_core::{Detector, Verdict};

/// The records of one worker's run, split by case.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attribution {
    /// `per_case[k]`: the records of the k-th case this worker started, in order, markers
    /// removed. Always `n_cases_started` long.
    pub per_case: Vec<Vec<Record>>,
    /// Records before the first marker: worker start-up, before any case began.
    pub preamble: Vec<Record>,
    /// Marker records seen. Fewer than the cases started means the worker died (or the file
    /// was cut) before the later cases began; more means the caller's count is wrong and
    /// the extra records went to the last case.
    pub markers: usize,
}

/// Split `records` at `kedge_case_marker` records. Records after marker k go to case k;
/// records after the last marker go to the last started case (the one that crashed, say);
/// markers past `n_cases_started` are folded into the last case rather than dropped.
pub fn attribute(records: &[Record], n_cases_started: usize) -> Attribution {
    let mut out = Attribution {
        per_case: vec![Vec::new(); n_cases_started],
        ..Attribution::default()
    };
    let mut current: Option<usize> = None;
    for r in records {
        if r.is_marker() {
            out.markers += 1;
            if n_cases_started > 0 {
                current = Some((out.markers - 1).min(n_cases_started - 1));
            }
            continue;
        }
        match current {
            Some(k) => out.per_case[k].push(r.clone()),
            None => out.preamble.push(r.clone()),
        }
    }
    out
}

/// What a record means for the case it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordClass {
    /// A case boundary; never a finding.
    Marker,
    /// A memory access, hazard or barrier error in a kernel: `oob-read`, `oob-write`,
    /// `uninit-read`, `race`, `sync-error` (or `device-fault` for an imprecise exception).
    Kernel(Verdict),
    /// A CUDA API call that failed. `sticky` for the errors that mean the context died
    /// (`CUDA_ERROR_LAUNCH_FAILED` after memcheck aborted a kernel, ...).
    Api {
        /// `device-fault` for a sticky error, `resource-limit` for out of memory, else
        /// `launch-error`.
        verdict: Verdict,
        /// The error is one a dead context returns.
        sticky: bool,
    },
    /// A leak report at exit: kept, but it fails nothing.
    Leak,
}

/// Error codes after which every later call in the process fails: consequences of a fault.
const STICKY: [(&str, i64); 10] = [
    ("CUDA_ERROR_LAUNCH_FAILED", 719),
    ("CUDA_ERROR_ILLEGAL_ADDRESS", 700),
    ("CUDA_ERROR_MISALIGNED_ADDRESS", 716),
    ("CUDA_ERROR_ILLEGAL_INSTRUCTION", 715),
    ("CUDA_ERROR_HARDWARE_STACK_ERROR", 714),
    ("CUDA_ERROR_INVALID_PC", 718),
    ("CUDA_ERROR_ASSERT", 710),
    ("CUDA_ERROR_INVALID_ADDRESS_SPACE", 717),
    ("CUDA_ERROR_LAUNCH_TIMEOUT", 702),
    ("CUDA_ERROR_ECC_UNCORRECTABLE", 214),
];

/// Is this API error one that a dead context returns?
fn is_sticky_fault(error: &str, result: Option<i64>) -> bool {
    STICKY
        .iter()
        .any(|(name, code)| error == *name || result == Some(*code))
}

impl RecordClass {
    /// What `r` means in a worker run under `tool` (which decides a kernel record's verdict:
    /// memcheck's by the access's direction, initcheck's `uninit-read`, ...).
    pub fn of(r: &Record, tool: Tool) -> RecordClass {
        if r.is_marker() {
            return RecordClass::Marker;
        }
        if r.kind == RecordKind::Leak
            || r.text.starts_with("Leaked ")
            || r.text.to_ascii_lowercase().contains("leak")
        {
            return RecordClass::Leak;
        }
        if let Some(api) = &r.api {
            let sticky = is_sticky_fault(&api.error, api.result);
            let verdict = if sticky {
                Verdict::DeviceFault
            } else if api.error == "CUDA_ERROR_OUT_OF_MEMORY" || api.result == Some(2) {
                Verdict::ResourceLimit
            } else {
                Verdict::LaunchError
            };
            return RecordClass::Api { verdict, sticky };
        }
        let lower = r.text.to_ascii_lowercase();
        let verdict = match tool {
            Tool::Memcheck => match r.direction {
                Some(Direction::Write) => Verdict::OobWrite,
                Some(Direction::Read) => Verdict::OobRead,
                None if lower.contains(" write") => Verdict::OobWrite,
                None if lower.contains(" read") => Verdict::OobRead,
                // A hardware exception memcheck could not pin to an access.
                None => Verdict::DeviceFault,
            },
            Tool::Initcheck => Verdict::UninitRead,
            Tool::Racecheck => Verdict::Race,
            Tool::Synccheck => Verdict::SyncError,
        };
        RecordClass::Kernel(verdict)
    }
}

/// The findings of one case: `primary` decide the verdict; `secondary` are kept with the
/// case but are consequences (API errors of a context a fault killed) or fail nothing
/// (leak reports).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CaseFindings {
    /// Kernel findings and API errors, but for the sticky ones a kernel finding of the case
    /// explains.
    pub primary: Vec<Finding>,
    /// Sticky API errors that a kernel finding explains, and leak reports.
    pub secondary: Vec<Finding>,
}

impl CaseFindings {
    /// The case's sanitizer verdict: the most severe primary finding.
    pub fn verdict(&self) -> Option<(Verdict, Detector)> {
        findings_to_verdict(&self.primary)
    }
    /// Primary then secondary, for `CaseResult::findings`.
    pub fn all(&self) -> Vec<Finding> {
        self.primary
            .iter()
            .chain(self.secondary.iter())
            .cloned()
            .collect()
    }
    /// No finding at all, primary or secondary.
    pub fn is_empty(&self) -> bool {
        self.primary.is_empty() && self.secondary.is_empty()
    }
}

/// Records that are "the same finding": one kernel reading 4 bytes past the end from 1000
/// threads is one finding with count 1000.
#[derive(PartialEq)]
struct FoldKey {
    verdict: Verdict,
    kind: RecordKind,
    kernel: Option<String>,
    size: Option<u64>,
    direction: Option<Direction>,
    error: Option<String>,
    api: Option<(String, String)>,
}

fn fold_key(r: &Record, verdict: Verdict) -> FoldKey {
    FoldKey {
        verdict,
        kind: r.kind.clone(),
        kernel: r.kernel.clone(),
        size: r.size,
        direction: r.direction,
        error: r.error.clone(),
        api: r.api.as_ref().map(|a| (a.api.clone(), a.error.clone())),
    }
}

fn to_finding(r: &Record, tool: Tool, verdict: Verdict, kind: FindingKind) -> Finding {
    Finding {
        tool: tool.detector(),
        verdict,
        kind: Some(kind),
        text: if r.text.is_empty() {
            match &r.api {
                Some(a) => format!("{} returned {}", a.api, a.error),
                None => format!("{} record", r.kind),
            }
        } else {
            r.text.clone()
        },
        kernel: r.kernel.clone(),
        size: r.size,
        address: r.address.clone(),
        thread: r.thread,
        block: r.block,
        allocation: r.allocation.as_ref().map(|a| a.to_string()),
        count: 1,
    }
}

fn push_folded(
    list: &mut Vec<(FoldKey, Finding)>,
    key: FoldKey,
    r: &Record,
    tool: Tool,
    kind: FindingKind,
) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, f)) => {
            f.count += 1;
            if f.allocation.is_none() {
                f.allocation = r.allocation.as_ref().map(|a| a.to_string());
            }
        }
        None => {
            let f = to_finding(r, tool, key.verdict, kind);
            list.push((key, f));
        }
    }
}

/// Fold one case's records (from `attribute`) into findings. Markers are dropped; sticky
/// API errors are secondary when a kernel finding in the same case explains them, and the
/// primary `device-fault` finding when nothing else does.
pub fn case_findings(records: &[Record], tool: Tool) -> CaseFindings {
    let classes: Vec<RecordClass> = records.iter().map(|r| RecordClass::of(r, tool)).collect();
    let has_kernel_finding = classes
        .iter()
        .any(|c| matches!(c, RecordClass::Kernel(v) if v.is_failure()));
    let mut primary = Vec::new();
    let mut secondary = Vec::new();
    for (r, c) in records.iter().zip(classes) {
        match c {
            RecordClass::Marker => {}
            RecordClass::Kernel(v) => {
                push_folded(&mut primary, fold_key(r, v), r, tool, FindingKind::Kernel)
            }
            RecordClass::Api { verdict, sticky } => {
                let list = if sticky && has_kernel_finding {
                    &mut secondary
                } else {
                    &mut primary
                };
                push_folded(list, fold_key(r, verdict), r, tool, FindingKind::Api);
            }
            RecordClass::Leak => push_folded(
                &mut secondary,
                fold_key(r, Verdict::Pass),
                r,
                tool,
                FindingKind::Leak,
            ),
        }
    }
    CaseFindings {
        primary: primary.into_iter().map(|(_, f)| f).collect(),
        secondary: secondary.into_iter().map(|(_, f)| f).collect(),
    }
}

/// The most severe failing finding's verdict and the tool that saw it (the first such
/// finding on ties). `None` when no finding fails the case.
///
/// Safe to call on primary and secondary findings together (`CaseResult::findings`): a
/// `device-fault` from an API error (no kernel named) is a consequence when a kernel access
/// finding is present (memcheck aborted the kernel, the context died), so it does not
/// outrank the access that caused it; leak findings carry `pass` and never count.
pub fn findings_to_verdict(findings: &[Finding]) -> Option<(Verdict, Detector)> {
    let explained = findings.iter().any(|f| is_kernel_access(f.verdict));
    let mut best: Option<&Finding> = None;
    for f in findings.iter().filter(|f| f.verdict.is_failure()) {
        if explained && f.verdict == Verdict::DeviceFault && f.kernel.is_none() {
            continue;
        }
        if best.is_none_or(|b| f.verdict.severity() > b.verdict.severity()) {
            best = Some(f);
        }
    }
    best.map(|f| (f.verdict, f.tool))
}

/// A bad access or hazard inside a kernel (as opposed to an API error).
pub(crate) fn is_kernel_access(v: Verdict) -> bool {
    matches!(
        v,
        Verdict::OobRead
            | Verdict::OobWrite
            | Verdict::UninitRead
            | Verdict::Race
            | Verdict::SyncError
    )
}
