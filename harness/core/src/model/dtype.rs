//! Element types kedge moves between host and device.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An element type, spelled as ggml spells it (`f32`, `f16`, `bf16`, `i32`).
/// `u8` is raw bytes: packed FP4 weights, FP8 staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float (IEEE half).
    F16,
    /// bfloat16.
    Bf16,
    /// 32-bit signed integer.
    I32,
    /// Raw bytes.
    U8,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 => 1,
        }
    }
    /// As ggml spells it: `f32`, `f16`, `bf16`, `i32`, `u8`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }
    /// The `GGML_TYPE_*` spelling used in test-backend-ops constructors.
    pub const fn ggml_type(self) -> &'static str {
        match self {
            DType::F32 => "GGML_TYPE_F32",
            DType::F16 => "GGML_TYPE_F16",
            DType::Bf16 => "GGML_TYPE_BF16",
            DType::I32 => "GGML_TYPE_I32",
            DType::U8 => "GGML_TYPE_I8",
        }
    }
    /// Is this a floating type whose outputs can be poisoned with a NaN payload?
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::Bf16,
            "i32" => DType::I32,
            "u8" => DType::U8,
            _ => {
                return Err(format!(
                    "unknown dtype '{s}' (known: f32, f16, bf16, i32, u8)"
                ))
            }
        })
    }
}
