//! The case: op + impl + dtype + shape + params + seed + allocation mode. One JSON object per
//! line; the same line replays the same inputs bit for bit.

use crate::error::CaseError;
use crate::model::dtype::DType;
use crate::model::params::Params;
use crate::model::shape::{fmt_ne, Ne};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// How each tensor and staging buffer of a case is placed in device memory.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum AllocMode {
    /// Each tensor its own allocation of exactly its bytes: no pool slack absorbs an overrun,
    /// so compute-sanitizer's bounds are the tensor's bounds.
    #[default]
    Exact,
    /// Driver virtual memory: the tensor's last byte is the last mapped byte before an
    /// unmapped page, so a read past the end faults natively.
    Guard,
    /// As `Guard`, at the front: the tensor's first byte follows an unmapped page.
    GuardFront,
    /// Red zones filled with a pattern around each tensor, checked after the run.
    Canary,
}

impl AllocMode {
    /// Every mode, in the order `--alloc` lists them.
    pub const ALL: [AllocMode; 4] = [
        AllocMode::Exact,
        AllocMode::Guard,
        AllocMode::GuardFront,
        AllocMode::Canary,
    ];
    /// `exact`, `guard`, `guard-front`, `canary`.
    pub fn name(self) -> &'static str {
        match self {
            AllocMode::Exact => "exact",
            AllocMode::Guard => "guard",
            AllocMode::GuardFront => "guard-front",
            AllocMode::Canary => "canary",
        }
    }
}

impl fmt::Display for AllocMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AllocMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AllocMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown allocation mode '{s}' (known: exact, guard, guard-front, canary)")
            })
    }
}

/// One case: op, impl, dtype, shape, params, seed and allocation mode. One JSON line;
/// the same line replays it bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// kedge's op name (ggml's is accepted on the command line).
    pub op: String,
    /// The impl.
    #[serde(rename = "impl")]
    pub imp: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, ggml order (`ne[0]` contiguous).
    pub ne: Ne,
    /// The op's parameters (validation fills the defaults).
    #[serde(default)]
    pub params: Params,
    /// Seed of the inputs' SplitMix64 stream.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// How the tensors are allocated.
    #[serde(default)]
    pub alloc: AllocMode,
}

fn default_seed() -> u64 {
    1
}

impl Case {
    /// A case with no parameters, seed 1, exact allocations.
    pub fn new(op: &str, imp: &str, dtype: DType, ne: Ne) -> Self {
        Case {
            op: op.to_string(),
            imp: imp.to_string(),
            dtype,
            ne,
            params: Params::new(),
            seed: 1,
            alloc: AllocMode::Exact,
        }
    }
    /// The same case with a parameter set.
    pub fn with_param(mut self, name: &str, v: impl Into<serde_json::Value>) -> Self {
        self.params.insert(name.to_string(), v.into());
        self
    }
    /// The same case in another allocation mode.
    pub fn with_alloc(mut self, alloc: AllocMode) -> Self {
        self.alloc = alloc;
        self
    }

    /// Parse one line of a corpus (1-based `line` for messages).
    pub fn parse_line(line: usize, text: &str) -> Result<Case, CaseError> {
        serde_json::from_str(text).map_err(|e| CaseError::MalformedJson {
            line,
            msg: e.to_string(),
        })
    }

    /// Canonical one-line JSON (params sorted, defaults filled if validated).
    pub fn to_line(&self) -> String {
        // Serialization of this plain struct cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A short stable id: the first 12 hex digits of the canonical line's SHA-256.
    pub fn id(&self) -> String {
        let digest = Sha256::digest(self.to_line().as_bytes());
        digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
    }

    /// Short human label: `rms_norm/ggml f32 ne=[64,1,65536,1] eps=1e-6 (exact)`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "{}/{} {} ne={}",
            self.op,
            self.imp,
            self.dtype,
            fmt_ne(&self.ne)
        );
        for (k, v) in &self.params {
            s.push_str(&format!(" {k}={v}"));
        }
        s.push_str(&format!(" seed={} ({})", self.seed, self.alloc));
        s
    }
}

/// Read a corpus: one case per line; blank lines and `#` comments skipped. The error names
/// the line.
pub fn parse_corpus(text: &str) -> Result<Vec<(usize, Case)>, CaseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        // A corpus line may be a bare case or an object with a "case" field (incidents
        // carry their expected verdict beside the case).
        let v: serde_json::Value =
            serde_json::from_str(t).map_err(|e| CaseError::MalformedJson {
                line: i + 1,
                msg: e.to_string(),
            })?;
        let case_v = match v.get("case") {
            Some(c) => c.clone(),
            None => v,
        };
        let case: Case = serde_json::from_value(case_v).map_err(|e| CaseError::MalformedJson {
            line: i + 1,
            msg: e.to_string(),
        })?;
        out.push((i + 1, case));
    }
    Ok(out)
}
