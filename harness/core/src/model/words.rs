//! The words a verdict is made of: what happened (`Verdict`) and which layer saw it
//! (`Detector`). Every other part of kedge speaks these.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What happened to a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every check passed.
    Pass,
    /// Values off the reference past the tolerance.
    WrongValues,
    /// Some output elements were never written (the poison survived).
    UnwrittenOutput,
    /// Non-finite values where the reference is finite.
    Nonfinite,
    /// The driver refused a launch, or the plan breaks a launch limit.
    LaunchError,
    /// The device faulted (the context died).
    DeviceFault,
    /// A read out of bounds.
    OobRead,
    /// A write out of bounds.
    OobWrite,
    /// A read of uninitialized device memory.
    UninitRead,
    /// A shared-memory data race.
    Race,
    /// A barrier or synchronization error.
    SyncError,
    /// The case did not finish in time.
    Timeout,
    /// A buffer or launch resource past what the device has.
    ResourceLimit,
    /// The impl refused the shape with a clear error: allowed, not a failure.
    Unsupported,
    /// No error, but no work done.
    SilentFailure,
    /// The library under test aborted the process on a case its backend said it supports (a
    /// failed assertion): no verdict of the device's, but a crash a user would hit.
    Crash,
    /// The CPU-side checks ran (plan and reference) but the device part was skipped.
    Skipped,
}

impl Verdict {
    /// Every verdict.
    const ALL: [Verdict; 17] = [
        Verdict::Pass,
        Verdict::WrongValues,
        Verdict::UnwrittenOutput,
        Verdict::Nonfinite,
        Verdict::LaunchError,
        Verdict::DeviceFault,
        Verdict::OobRead,
        Verdict::OobWrite,
        Verdict::UninitRead,
        Verdict::Race,
        Verdict::SyncError,
        Verdict::Timeout,
        Verdict::ResourceLimit,
        Verdict::Unsupported,
        Verdict::SilentFailure,
        Verdict::Crash,
        Verdict::Skipped,
    ];
    /// The verdict as written: `pass`, `wrong-values`, ...
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::WrongValues => "wrong-values",
            Verdict::UnwrittenOutput => "unwritten-output",
            Verdict::Nonfinite => "nonfinite",
            Verdict::LaunchError => "launch-error",
            Verdict::DeviceFault => "device-fault",
            Verdict::OobRead => "oob-read",
            Verdict::OobWrite => "oob-write",
            Verdict::UninitRead => "uninit-read",
            Verdict::Race => "race",
            Verdict::SyncError => "sync-error",
            Verdict::Timeout => "timeout",
            Verdict::ResourceLimit => "resource-limit",
            Verdict::Unsupported => "unsupported",
            Verdict::SilentFailure => "silent-failure",
            Verdict::Crash => "crash",
            Verdict::Skipped => "skipped",
        }
    }
    /// Does this verdict fail a gate? `unsupported` and `skipped` do not.
    pub fn is_failure(self) -> bool {
        !matches!(
            self,
            Verdict::Pass | Verdict::Unsupported | Verdict::Skipped
        )
    }
    /// Worse verdicts win when several detectors fire: memory errors over value errors.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Pass | Verdict::Skipped => 0,
            Verdict::Unsupported => 1,
            Verdict::WrongValues | Verdict::Nonfinite => 3,
            Verdict::UnwrittenOutput | Verdict::SilentFailure => 4,
            Verdict::Race | Verdict::SyncError | Verdict::UninitRead => 5,
            Verdict::LaunchError | Verdict::ResourceLimit => 6,
            Verdict::OobRead | Verdict::OobWrite => 7,
            Verdict::DeviceFault | Verdict::Timeout | Verdict::Crash => 8,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Verdict::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| format!("unknown verdict '{s}'"))
    }
}

/// Which layer saw the failure: the detectors, in layers (the README's "Detectors and
/// allocation modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Detector {
    /// Layer 1: f64 CPU reference comparison.
    Reference,
    /// Layer 2: poisoned outputs that survived the run.
    Poison,
    /// Layer 3, CPU side: the plan broke the limits profile.
    LaunchContract,
    /// Layer 3, CPU side: a buffer the plan allocates is larger than the profile's largest
    /// single buffer (or than the device's memory).
    AllocContract,
    /// Layer 3, GPU side: the driver refused the launch.
    Driver,
    /// A fault seen at synchronization with no guard page involved.
    DeviceSync,
    /// Layer 5: a guard page turned an overrun into a native fault.
    GuardPage,
    /// Layer 6: red zones changed.
    Canary,
    /// Layer 7: compute-sanitizer tools.
    Memcheck,
    /// compute-sanitizer's initcheck.
    Initcheck,
    /// compute-sanitizer's racecheck.
    Racecheck,
    /// compute-sanitizer's synccheck.
    Synccheck,
    /// The supervisor: a worker that hung or died.
    Supervisor,
    /// The impl itself (a clear refusal: `unsupported`).
    Impl,
    /// The library's abort hook: its own words as it aborted the process (ggml's
    /// `ggml_set_abort_callback`), which name a CUDA error or a failed assertion.
    Abort,
    /// Nothing looked (pass verdicts name no detector).
    None,
}

impl Detector {
    /// The detector as written: `reference`, `memcheck`, ...
    pub fn name(self) -> &'static str {
        match self {
            Detector::Reference => "reference",
            Detector::Poison => "poison",
            Detector::LaunchContract => "launch-contract",
            Detector::AllocContract => "alloc-contract",
            Detector::Driver => "driver",
            Detector::DeviceSync => "device-sync",
            Detector::GuardPage => "guard-page",
            Detector::Canary => "canary",
            Detector::Memcheck => "memcheck",
            Detector::Initcheck => "initcheck",
            Detector::Racecheck => "racecheck",
            Detector::Synccheck => "synccheck",
            Detector::Supervisor => "supervisor",
            Detector::Impl => "impl",
            Detector::Abort => "abort",
            Detector::None => "none",
        }
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A compute-sanitizer tool kedge runs cases under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// Out-of-bounds and misaligned accesses, leaks.
    Memcheck,
    /// Reads of uninitialized memory.
    Initcheck,
    /// Shared-memory hazards.
    Racecheck,
    /// Barrier misuse.
    Synccheck,
}

impl Tool {
    /// Every tool.
    const ALL: [Tool; 4] = [
        Tool::Memcheck,
        Tool::Initcheck,
        Tool::Racecheck,
        Tool::Synccheck,
    ];
    /// The tool as `--tool` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Memcheck => "memcheck",
            Tool::Initcheck => "initcheck",
            Tool::Racecheck => "racecheck",
            Tool::Synccheck => "synccheck",
        }
    }
    /// The detector a tool's findings are credited to.
    pub fn detector(self) -> Detector {
        match self {
            Tool::Memcheck => Detector::Memcheck,
            Tool::Initcheck => Detector::Initcheck,
            Tool::Racecheck => Detector::Racecheck,
            Tool::Synccheck => Detector::Synccheck,
        }
    }
    /// The tool a detector belongs to, if it is a sanitizer's.
    pub fn of_detector(d: Detector) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.detector() == d)
    }
    /// `memcheck,initcheck`: each name once, in the order given.
    pub fn parse_list(s: &str) -> Result<Vec<Tool>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let t: Tool = part.parse()?;
            if !out.contains(&t) {
                out.push(t);
            }
        }
        if out.is_empty() {
            return Err(
                "no sanitizer tool named (known: memcheck, initcheck, racecheck, synccheck)".into(),
            );
        }
        Ok(out)
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Tool::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| {
            format!("unknown sanitizer tool '{s}' (known: memcheck, initcheck, racecheck, synccheck)")
        })
    }
}

/// How a case ran: its CPU side only, natively on a GPU, or under a sanitizer tool. Written as
/// `cpu`, `native` or the tool's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Under {
    /// The CPU side only (plan and reference).
    Cpu,
    /// Natively on a GPU.
    Native,
    /// Under a compute-sanitizer tool.
    Tool(Tool),
}

impl Under {
    /// `cpu`, `native` or the tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Under::Cpu => "cpu",
            Under::Native => "native",
            Under::Tool(t) => t.name(),
        }
    }
    /// The tool, when run under one.
    pub fn tool(self) -> Option<Tool> {
        match self {
            Under::Tool(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Display for Under {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Under {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Under::Cpu),
            "native" => Ok(Under::Native),
            t => t.parse().map(Under::Tool).map_err(|_| {
                format!("unknown run kind '{s}' (known: cpu, native, memcheck, initcheck, racecheck, synccheck)")
            }),
        }
    }
}

impl From<Under> for String {
    fn from(u: Under) -> String {
        u.name().to_string()
    }
}

impl TryFrom<String> for Under {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}
