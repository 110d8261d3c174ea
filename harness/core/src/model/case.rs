//! The case: op + impl + dtype + shape + params + seed + allocation mode. One JSON object per
//! line; the same line replays the same inputs bit for bit.

use crate::error::CaseError;
use crate::model::dtype::DType;
use crate::model::params::{HasParams, Params};
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

impl HasParams for Case {
    fn params(&self) -> &Params {
        &self.params
    }
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
    /// The same case with some of the op's parameters set, typed: `set` gets them as they
    /// are (unset ones at their defaults) and changes what it names, e.g.
    /// `.with_params(|p: &mut SoftmaxParams| p.mask = true)`.
    pub fn with_params<P: crate::model::params::OpParams>(
        mut self,
        set: impl FnOnce(&mut P),
    ) -> Self {
        self.params = P::set_in(&self.params, set);
        self
    }
    /// The same case in another allocation mode.
    pub fn with_alloc(mut self, alloc: AllocMode) -> Self {
        self.alloc = alloc;
        self
    }

    /// Parse one line of a corpus (1-based `line` for messages).
    pub fn parse_line(line: usize, text: &str) -> Result<Case, CaseError> {
        let malformed = |msg: String| CaseError::MalformedJson { line, msg };
        check_unique_keys(text).map_err(malformed)?;
        serde_json::from_str(text).map_err(|e| malformed(e.to_string()))
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

/// Refuse JSON with a key twice in one object (`{"ne":[1],"ne":[2]}`, or twice in
/// `params`): a JSON reader keeps one of them silently, so the line would not say what it
/// runs. Malformed JSON passes here, for the parser to name.
pub fn check_unique_keys(text: &str) -> Result<(), String> {
    use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

    struct Unique;
    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
            d.deserialize_any(UniqueVisitor)
        }
    }
    struct UniqueVisitor;
    impl<'de> Visitor<'de> for UniqueVisitor {
        type Value = Unique;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Unique, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = m.next_key::<String>()? {
                if !seen.insert(k.clone()) {
                    return Err(de::Error::custom(format!(
                        "the key \"{k}\" appears twice in one object (which one was meant?)"
                    )));
                }
                m.next_value::<Unique>()?;
            }
            Ok(Unique)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Unique, A::Error> {
            while s.next_element::<Unique>()?.is_some() {}
            Ok(Unique)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_unit<E>(self) -> Result<Unique, E> {
            Ok(Unique)
        }
    }
    match serde_json::from_str::<Unique>(text) {
        Err(e) if e.to_string().contains("appears twice") => Err(e.to_string()),
        _ => Ok(()),
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
        check_unique_keys(t).map_err(|msg| CaseError::MalformedJson { line: i + 1, msg })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_in_a_case_line_is_refused() {
        let ok = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"params":{"eps":1e-6}}"#;
        assert!(Case::parse_line(1, ok).is_ok());
        for bad in [
            r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"ne":[64,1,65536,1]}"#,
            r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"params":{"eps":1,"eps":-1}}"#,
        ] {
            let e = Case::parse_line(3, bad).unwrap_err();
            assert!(e.to_string().contains("appears twice"), "{e}");
            let e = parse_corpus(&format!("{ok}\n{bad}\n")).unwrap_err();
            assert!(e.to_string().contains("line 2"), "{e}");
        }
        // Malformed JSON is left for the parser to name.
        assert!(check_unique_keys("{nope").is_ok());
    }
}
