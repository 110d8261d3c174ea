//! The result record streamed to `results.jsonl`: a case, its verdict and detector, the
//! numbers behind them, and what was observed while it ran.

use crate::contract::plan::{grouped, BufferViolation, LaunchViolation};
use crate::model::case::Case;
use crate::model::shape::Ne;
use crate::model::words::{Detector, Under, Verdict};
use serde::{Deserialize, Serialize};

/// The numbers of a value comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Numbers {
    /// Normalized mean squared error against the reference, as test-backend-ops computes it.
    pub nmse: f64,
    /// Largest absolute difference from the reference.
    pub max_abs: f64,
    /// Largest difference relative to the reference value (where it is not zero).
    pub max_rel: f64,
    /// First flat index (in the output's logical order) that failed, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<u64>,
    /// The flat index of the element farthest from its reference among those past the element
    /// tolerance, where it is not `first_bad` (a few values far off among many a rounding
    /// step off: a row never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_bad: Option<u64>,
    /// The output tensor these numbers are of (the worst one, when the op has several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// That output's shape, so `first_bad` can be named as coordinates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ne: Option<Ne>,
    /// The device's value at `first_bad` (non-finite values written as "NaN", "inf", "-inf").
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "finite_or_word"
    )]
    pub first_bad_got: Option<f64>,
    /// The reference's value at `first_bad`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "finite_or_word"
    )]
    pub first_bad_expected: Option<f64>,
    /// The element tolerance `first_bad` is judged by: |got - expected| > abs + rel * |expected|.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elem_tolerance: Option<[f64; 2]>,
    /// Elements that still hold the poison pattern (never written).
    pub unwritten: u64,
    /// Non-finite values where the reference is finite (or another non-finite value).
    pub nonfinite: u64,
    /// Elements compared.
    pub compared: u64,
    /// The NMSE bound the verdict was judged by.
    pub threshold_nmse: f64,
}

impl Numbers {
    /// `first_bad` as coordinates `[i0, i1, i2, i3]` of the output (ne0 the contiguous
    /// dimension), when the output's shape is known.
    pub(crate) fn first_bad_coords(&self) -> Option<[u64; 4]> {
        let flat = self.first_bad?;
        let ne = self.output_ne?;
        let n: Vec<u64> = ne.iter().map(|&x| x.max(1) as u64).collect();
        let total = n.iter().try_fold(1u64, |a, &x| a.checked_mul(x))?;
        if flat >= total {
            return None;
        }
        Some([
            flat % n[0],
            flat / n[0] % n[1],
            flat / (n[0] * n[1]) % n[2],
            flat / (n[0] * n[1] * n[2]),
        ])
    }

    /// The first bad element as a person reads it: "first bad element (1024, 0, 0, 0) of
    /// `dst`: got 7, expected 0.5 (element tolerance 1e-5 + 1e-3 * |expected|)". `None` when
    /// no element was bad.
    pub fn first_bad_sentence(&self) -> Option<String> {
        let flat = self.first_bad?;
        let mut s = match self.first_bad_coords() {
            Some([a, b, c, d]) => format!("first bad element ({a}, {b}, {c}, {d})"),
            None => format!("first bad element at flat index {flat}"),
        };
        if let Some(o) = &self.output {
            s.push_str(&format!(" of `{o}`"));
        }
        match (self.first_bad_got, self.first_bad_expected) {
            (Some(g), Some(e)) => s.push_str(&format!(": got {}, expected {}", num(g), num(e))),
            (None, Some(e)) => s.push_str(&format!(": expected {}", num(e))),
            _ => {}
        }
        if let Some([abs, rel]) = self.elem_tolerance {
            s.push_str(&format!(
                " (element tolerance {abs:e} + {rel:e} * |expected|; NMSE {:.3e}, bound {:.1e})",
                self.nmse, self.threshold_nmse
            ));
        }
        Some(s)
    }
}

/// A value as a person reads it: shortest round-trip form, `NaN`, `inf`.
fn num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x}")
    }
}

/// `Option<f64>` that keeps non-finite values through JSON: a number when finite, else the
/// word `"NaN"`, `"inf"` or `"-inf"` (JSON has no such numbers; serde_json would write null).
mod finite_or_word {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) if x.is_finite() => s.serialize_f64(*x),
            Some(x) => s.serialize_str(&super::num(*x)),
            None => s.serialize_none(),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(f64),
        Word(String),
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(match Option::<Repr>::deserialize(d)? {
            None => None,
            Some(Repr::Num(x)) => Some(x),
            Some(Repr::Word(w)) => Some(match w.as_str() {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                _ => f64::NAN,
            }),
        })
    }
}

/// What kind of record a sanitizer finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A bad access, hazard or barrier error inside a kernel.
    Kernel,
    /// A CUDA API call that failed.
    Api,
    /// A leak report at exit (`--leak-check full`): memory the process never freed. It fails
    /// no case, and it is not a pass either.
    Leak,
}

impl FindingKind {
    /// `kernel`, `api`, `leak`.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Kernel => "kernel",
            FindingKind::Api => "api",
            FindingKind::Leak => "leak",
        }
    }
}

/// One sanitizer finding, attributed to the case it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The tool that reported it.
    pub tool: Detector,
    /// What it means for the case (`pass` for a leak report, which fails nothing).
    pub verdict: Verdict,
    /// What kind of record it is; absent in results written before kinds were recorded
    /// (`Finding::kind` infers it then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FindingKind>,
    /// The tool's own words.
    pub text: String,
    /// The kernel the record names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Bytes of the access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The device address accessed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The thread's index in its block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<[u64; 3]>,
    /// The block's index in the grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<[u64; 3]>,
    /// "N bytes after the nearest allocation at A of size S" when the tool says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<String>,
    /// How many identical records were folded into this one.
    pub count: u64,
}

impl Finding {
    /// What kind of record this is: as recorded, or for older results inferred from its
    /// words (a leak report says "leak"; a record naming no kernel is an API error).
    pub fn kind(&self) -> FindingKind {
        if let Some(k) = self.kind {
            return k;
        }
        if self.text.to_ascii_lowercase().contains("leak") {
            FindingKind::Leak
        } else if self.kernel.is_some() {
            FindingKind::Kernel
        } else {
            FindingKind::Api
        }
    }

    /// The device address the record names, parsed (`0x7f4c0012c000`).
    fn address_value(&self) -> Option<u64> {
        let a = self.address.as_deref()?.trim();
        let hex = a.strip_prefix("0x").or_else(|| a.strip_prefix("0X"))?;
        u64::from_str_radix(hex, 16).ok()
    }

    /// Where the record's address lies relative to the case's allocations, naming the nearest
    /// tensor: "4 bytes past the end of `x` (a 1,048,576-byte allocation)". `None` when the
    /// record names no address or the case recorded no allocations.
    pub fn locate(&self, allocations: &[Allocation]) -> Option<String> {
        locate_address(self.address_value()?, allocations)
    }
}

/// Where `addr` lies relative to `allocations`: inside one, or past the end / before the start
/// of the nearest one.
fn locate_address(addr: u64, allocations: &[Allocation]) -> Option<String> {
    enum Place {
        Inside(u64),
        Past(u64),
        Before(u64),
    }
    let place = |a: &Allocation| {
        let end = a.base.saturating_add(a.bytes);
        if addr >= a.base && addr < end {
            Place::Inside(addr - a.base)
        } else if addr >= end {
            Place::Past(addr - end)
        } else {
            Place::Before(a.base - addr)
        }
    };
    let distance = |p: &Place| match p {
        Place::Inside(_) => 0,
        Place::Past(d) => d.saturating_add(1),
        Place::Before(d) => *d,
    };
    let (a, p) = allocations
        .iter()
        .map(|a| (a, place(a)))
        .min_by_key(|(_, p)| distance(p))?;
    let size = format!("a {}-byte allocation", grouped(a.bytes));
    Some(match p {
        Place::Inside(off) => format!(
            "inside `{}`, {} bytes from its start ({size})",
            a.name,
            grouped(off)
        ),
        Place::Past(d) => format!("{} bytes past the end of `{}` ({size})", grouped(d), a.name),
        Place::Before(d) => format!(
            "{} bytes before the start of `{}` ({size})",
            grouped(d),
            a.name
        ),
    })
}

/// The fact (`CaseResult::facts`, value `true`) of a `resource-limit` the case would get run
/// alone too: a limit of the device's, not memory the cases beside it hold. A sweep runs a
/// `resource-limit` it got beside other cases again alone, except one with this fact.
pub const FIXED_LIMIT: &str = "fixed_limit";

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// The case's id (a hash of its canonical line).
    pub id: String,
    /// The case.
    pub case: Case,
    /// What happened.
    pub verdict: Verdict,
    /// Which layer saw it.
    pub detector: Detector,
    /// One sentence a person reads: what failed and where.
    pub detail: String,
    /// Launch limits the plan breaks (detector `launch-contract`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<LaunchViolation>,
    /// Buffers the plan allocates that the profile cannot hold (verdict `resource-limit`,
    /// detector `alloc-contract`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buffer_violations: Vec<BufferViolation>,
    /// The comparison's numbers, when outputs were compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbers: Option<Numbers>,
    /// Sanitizer records attributed to the case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// What else saw something (a guard fault *and* a memcheck record, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Detector>,
    /// Which real workload reaches this shape, or "synthetic: ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<String>,
    /// What the allocation mode can and cannot see (e.g. a pool that hides overruns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_note: Option<String>,
    /// Which run produced it: "native", "memcheck", "cpu" ...
    pub under: Under,
    /// The GPU (ordinal) it ran on, in a sweep; absent for CPU-side checks and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// Wall time of the case in milliseconds.
    pub ms: f64,
    /// What was seen while it ran, beside the verdict.
    #[serde(default, skip_serializing_if = "Observed::is_empty")]
    pub observed: Observed,
    /// The op's own facts, which kedge records and does not interpret (fp8_gemm: bytes its
    /// plan reads past the staging buffer, the cuBLASLt kernel; sdpa_prefill: the score
    /// buffer's size), and the engine's `FIXED_LIMIT`.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub facts: serde_json::Map<String, serde_json::Value>,
    /// The run that wrote the verdict: kedge's build, the profile, the run mode, where the
    /// impls came from, the suite. Absent in results of older kedges and of single runs
    /// written without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::judge::run_info::RunInfo>,
}

/// What the engine saw while a case ran, typed: launches, output digests, allocations, where
/// the time went, and the library that ran it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// Launches as issued (a repeated launch once, with its count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<String>,
    /// `name:digest` of each output (a 64-bit hash of its bytes, `judge::compare::digest`):
    /// equal digests are bit-identical.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_digests: Vec<String>,
    /// Outputs judged by an earlier case's comparison: the same key, and the download found
    /// every byte the same as that case's output (so the comparison, a function of the bytes,
    /// the reference and the tolerance, holds as it was made).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_output_as: Vec<String>,
    /// Tensors whose end is not the last mapped byte in guard mode (alignment), and by how much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guard_slack: Vec<String>,
    /// Every allocation of the case, so a sanitizer address can be named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<Allocation>,
    /// Where the time went.
    #[serde(default, skip_serializing_if = "Timings::is_empty")]
    pub timings: Timings,
    /// The library that ran the case (a ggml build), when it was not kedge's own kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<LibraryInfo>,
    /// Allocation modes that did not apply (the library owns its memory), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applied: Option<String>,
    /// What the reference was, when it was not kedge's f64 CPU reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Kernel timing, when the case was timed (`kedge bench`), or why it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<Bench>,
}

/// One case timed: its runs after a warm-up, the bytes its tensors move, and the device's
/// copy bandwidth measured by the same process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bench {
    /// Every timed repetition, in milliseconds.
    pub times_ms: Vec<f64>,
    /// The median repetition, in milliseconds.
    pub median_ms: f64,
    /// The fastest repetition.
    pub min_ms: f64,
    /// The slowest repetition.
    pub max_ms: f64,
    /// Bytes of every tensor of the case (inputs read once, outputs written once).
    pub bytes: u64,
    /// `bytes` over the median time.
    pub gb_per_s: f64,
    /// The op's floating-point operations, where it counts them (a GEMM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<u64>,
    /// `flops` over the median time, in TFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflop_per_s: Option<f64>,
    /// "cuda-events" (around the impl's launches) or "host-wall" (a library's compute call).
    pub method: String,
    /// The device's copy bandwidth (read + write bytes of a device-to-device copy), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_gb_per_s: Option<f64>,
    /// Why the case has no times (its judged run failed, the library cannot be timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_timed: Option<String>,
}

impl Observed {
    /// Nothing observed?
    fn is_empty(&self) -> bool {
        self == &Observed::default()
    }
}

/// One allocation of a case: a tensor or a scratch buffer, where it starts and how big it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The tensor's or buffer's name.
    pub name: String,
    /// Device address of the tensor's first byte.
    pub base: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// A library build that ran a case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryInfo {
    /// "ggml"
    pub name: String,
    /// The build's version.
    pub version: String,
    /// The build's source commit.
    pub commit: String,
    /// The backend device that ran it ("CUDA0: NVIDIA H200").
    pub device: String,
}

/// Where a case's time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Planning, drawing the inputs (or taking them from the worker's cache) and allocating
    /// the tensors.
    #[serde(default)]
    pub setup: f64,
    /// Writing inputs and poisoning outputs.
    #[serde(default)]
    pub upload: f64,
    /// The impl's run, synchronized.
    #[serde(default)]
    pub run: f64,
    /// Copying outputs back.
    #[serde(default)]
    pub download: f64,
    /// Computing the reference.
    #[serde(default)]
    pub reference: f64,
    /// Comparing.
    #[serde(default)]
    pub compare: f64,
}

impl Timings {
    /// No time recorded?
    fn is_empty(&self) -> bool {
        self == &Timings::default()
    }
}

impl CaseResult {
    /// A result with nothing but its verdict, detector and detail.
    pub fn new(
        case: &Case,
        verdict: Verdict,
        detector: Detector,
        detail: impl Into<String>,
    ) -> Self {
        CaseResult {
            id: case.id(),
            case: case.clone(),
            verdict,
            detector,
            detail: detail.into(),
            violations: Vec::new(),
            buffer_violations: Vec::new(),
            numbers: None,
            findings: Vec::new(),
            also: Vec::new(),
            reach: None,
            alloc_note: None,
            under: Under::Native,
            gpu: None,
            ms: 0.0,
            observed: Observed::default(),
            facts: serde_json::Map::new(),
            run: None,
        }
    }
    /// The result as one line of `results.jsonl`.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(name: &str, base: u64, bytes: u64) -> Allocation {
        Allocation {
            name: name.into(),
            base,
            bytes,
        }
    }

    #[test]
    fn a_sanitizer_address_is_named_by_the_nearest_tensor() {
        let allocs = [
            alloc("x", 0x7f00_0000_0000, 1 << 20),
            alloc("dst", 0x7f00_0020_0000, 4096),
        ];
        let past = locate_address(0x7f00_0000_0000 + (1 << 20) + 4, &allocs);
        assert_eq!(
            past.as_deref(),
            Some("4 bytes past the end of `x` (a 1,048,576-byte allocation)")
        );
        let before = locate_address(0x7f00_0020_0000 - 8, &allocs);
        assert_eq!(
            before.as_deref(),
            Some("8 bytes before the start of `dst` (a 4,096-byte allocation)")
        );
        let inside = locate_address(0x7f00_0020_0010, &allocs);
        assert_eq!(
            inside.as_deref(),
            Some("inside `dst`, 16 bytes from its start (a 4,096-byte allocation)")
        );
        assert_eq!(locate_address(1, &[]), None);
        let f = Finding {
            tool: Detector::Memcheck,
            verdict: Verdict::OobRead,
            kind: None,
            text: "Invalid __global__ read of size 4 bytes".into(),
            kernel: Some("k".into()),
            size: Some(4),
            address: Some("0x7f0000100000".into()),
            thread: None,
            block: None,
            allocation: None,
            count: 1,
        };
        assert_eq!(f.kind(), FindingKind::Kernel);
        assert_eq!(
            f.locate(&allocs).as_deref(),
            Some("0 bytes past the end of `x` (a 1,048,576-byte allocation)")
        );
        let leak = Finding {
            verdict: Verdict::Pass,
            kernel: None,
            text: "Leaked 1024 bytes at 0x7f0000300000".into(),
            ..f
        };
        assert_eq!(leak.kind(), FindingKind::Leak);
        assert_eq!(grouped(1_228_800), "1,228,800");
    }
}
