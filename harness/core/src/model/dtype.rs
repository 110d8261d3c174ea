//! Element types kedge moves between host and device.
//!
//! Besides the plain types, ggml's block formats are dtypes too (`q4_0`, `q4_K`, `iq2_xxs`,
//! `mxfp4`, ...): a tensor of one is stored as blocks of `block()` elements in `size()` bytes
//! each, as ggml stores it. kedge does not decode them itself: a case in a block dtype is made
//! and read through the ggml build it runs on (quantized with its `ggml_quantize_chunk`,
//! dequantized with its type traits), so only ops judged by a ggml build declare them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// One dtype's facts: its name as ggml spells it, ggml's `enum ggml_type` value, elements per
/// block and bytes per block (1 element per block for the plain types).
struct Facts {
    name: &'static str,
    ggml: i32,
    block: u64,
    bytes: u64,
}

macro_rules! dtypes {
    ($( $(#[$doc:meta])* $var:ident = $name:literal, $ggml:literal, $block:literal, $bytes:literal; )*) => {
        /// An element type, spelled as ggml spells it (`f32`, `f16`, `bf16`, `i32`, `q4_0`,
        /// `q4_K`, ...). `u8` is raw bytes: packed FP4 weights, FP8 staging.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DType {
            $( $(#[$doc])* $var, )*
        }

        impl DType {
            /// Every dtype, the plain ones first.
            pub const ALL: &'static [DType] = &[ $( DType::$var, )* ];

            fn facts(self) -> Facts {
                match self {
                    $( DType::$var => Facts { name: $name, ggml: $ggml, block: $block, bytes: $bytes }, )*
                }
            }
        }
    };
}

dtypes! {
    /// 32-bit float.
    F32 = "f32", 0, 1, 4;
    /// 16-bit float (IEEE half).
    F16 = "f16", 1, 1, 2;
    /// bfloat16.
    Bf16 = "bf16", 30, 1, 2;
    /// 32-bit signed integer.
    I32 = "i32", 26, 1, 4;
    /// Raw bytes (ggml's i8 where a ggml type is needed).
    U8 = "u8", 24, 1, 1;
    /// 8-bit signed integer.
    I8 = "i8", 24, 1, 1;
    /// 16-bit signed integer.
    I16 = "i16", 25, 1, 2;
    /// 64-bit signed integer.
    I64 = "i64", 27, 1, 8;
    /// 32 values: an f16 scale and 4-bit quants.
    Q4_0 = "q4_0", 2, 32, 18;
    /// 32 values: f16 scale and minimum, 4-bit quants.
    Q4_1 = "q4_1", 3, 32, 20;
    /// 32 values: an f16 scale, 5-bit quants.
    Q5_0 = "q5_0", 6, 32, 22;
    /// 32 values: f16 scale and minimum, 5-bit quants.
    Q5_1 = "q5_1", 7, 32, 24;
    /// 32 values: an f16 scale and 8-bit quants.
    Q8_0 = "q8_0", 8, 32, 34;
    /// 256-value super-blocks, 2-bit quants.
    Q2K = "q2_K", 10, 256, 84;
    /// 256-value super-blocks, 3-bit quants.
    Q3K = "q3_K", 11, 256, 110;
    /// 256-value super-blocks, 4-bit quants.
    Q4K = "q4_K", 12, 256, 144;
    /// 256-value super-blocks, 5-bit quants.
    Q5K = "q5_K", 13, 256, 176;
    /// 256-value super-blocks, 6-bit quants.
    Q6K = "q6_K", 14, 256, 210;
    /// 256 values, 2.06 bits each.
    Iq2Xxs = "iq2_xxs", 16, 256, 66;
    /// 256 values, 2.31 bits each.
    Iq2Xs = "iq2_xs", 17, 256, 74;
    /// 256 values, 3.06 bits each.
    Iq3Xxs = "iq3_xxs", 18, 256, 98;
    /// 256 values, 1.56 bits each.
    Iq1S = "iq1_s", 19, 256, 50;
    /// 32 values, non-linear 4-bit quants.
    Iq4Nl = "iq4_nl", 20, 32, 18;
    /// 256 values, 3.44 bits each.
    Iq3S = "iq3_s", 21, 256, 110;
    /// 256 values, 2.5 bits each.
    Iq2S = "iq2_s", 22, 256, 82;
    /// 256 values, non-linear 4-bit quants with 6-bit scales.
    Iq4Xs = "iq4_xs", 23, 256, 136;
    /// 256 values, 1.75 bits each.
    Iq1M = "iq1_m", 29, 256, 56;
    /// 256 values, ternary, 1.69 bits each.
    Tq1_0 = "tq1_0", 34, 256, 54;
    /// 256 values, ternary, 2 bits each.
    Tq2_0 = "tq2_0", 35, 256, 66;
    /// 32 values: an E8M0 scale and FP4 (E2M1) values.
    Mxfp4 = "mxfp4", 39, 32, 17;
    /// 64 values: four E4M3 scales and FP4 (E2M1) values.
    Nvfp4 = "nvfp4", 40, 64, 36;
    /// 128 values: an f16 scale and 1-bit quants.
    Q1_0 = "q1_0", 41, 128, 18;
    /// 64 values: an f16 scale and 2-bit quants.
    Q2_0 = "q2_0", 42, 64, 18;
}

impl DType {
    /// The block formats of ggml's quantized types, in `enum ggml_type` order.
    pub fn quantized() -> impl Iterator<Item = DType> {
        DType::ALL.iter().copied().filter(|d| d.is_block())
    }
    /// Bytes per element, or for a block format bytes per block of `block()` elements
    /// (ggml's `ggml_type_size`).
    pub fn size(self) -> u64 {
        self.facts().bytes
    }
    /// Elements per block: 1 for the plain types (ggml's `ggml_blck_size`).
    pub fn block(self) -> u64 {
        self.facts().block
    }
    /// A block format (a quantized ggml type): stored as blocks, not decoded by kedge.
    pub fn is_block(self) -> bool {
        self.facts().block > 1
    }
    /// Bytes of `n` elements (a multiple of `block()`; rounded up otherwise).
    pub fn bytes_of(self, n: u64) -> u64 {
        n.div_ceil(self.block()).saturating_mul(self.size())
    }
    /// As ggml spells it: `f32`, `f16`, `bf16`, `i32`, `u8`, `q4_0`, `q4_K`, `iq2_xxs`.
    pub fn name(self) -> &'static str {
        self.facts().name
    }
    /// ggml's `enum ggml_type` value.
    pub fn ggml_value(self) -> i32 {
        self.facts().ggml
    }
    /// The `GGML_TYPE_*` spelling used in test-backend-ops constructors.
    pub fn ggml_type(self) -> String {
        match self {
            DType::U8 => "GGML_TYPE_I8".into(),
            d => format!("GGML_TYPE_{}", d.name().to_uppercase()),
        }
    }
    /// An integer type (raw bytes included): drawn as integers in [0, 16), compared exactly.
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DType::I32 | DType::U8 | DType::I8 | DType::I16 | DType::I64
        )
    }
    /// Is this a floating type whose outputs can be poisoned with a NaN payload?
    pub(crate) const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16)
    }
    /// Whether one element's little-endian bytes `x` are an infinity or a NaN (every bit of
    /// the exponent set); never for a type that is not a float.
    pub(crate) fn is_nonfinite(self, x: &[u8]) -> bool {
        match self {
            DType::F32 => !f32::from_le_bytes([x[0], x[1], x[2], x[3]]).is_finite(),
            DType::F16 => u16::from_le_bytes([x[0], x[1]]) & 0x7C00 == 0x7C00,
            DType::Bf16 => u16::from_le_bytes([x[0], x[1]]) & 0x7F80 == 0x7F80,
            _ => false,
        }
    }
    /// Every known spelling, for error messages.
    fn known() -> String {
        DType::ALL
            .iter()
            .map(|d| d.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    /// ggml's spelling; the block formats also in lower case (`q4_k`) and as
    /// `GGML_TYPE_Q4_K`.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.strip_prefix("GGML_TYPE_").unwrap_or(s);
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == t || d.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| format!("unknown dtype '{s}' (known: {})", DType::known()))
    }
}

impl Serialize for DType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for &d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
            if d != DType::U8 {
                assert_eq!(d.ggml_type().parse::<DType>(), Ok(d), "{}", d.ggml_type());
            }
            let j = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<DType>(&j).unwrap(), d);
        }
        assert_eq!("q4_k".parse::<DType>(), Ok(DType::Q4K));
        assert_eq!(DType::Q4K.to_string(), "q4_K");
        assert_eq!(DType::Q4K.ggml_type(), "GGML_TYPE_Q4_K");
        assert_eq!(DType::U8.ggml_type(), "GGML_TYPE_I8");
        let e = "q9_0".parse::<DType>().unwrap_err();
        assert!(
            e.contains("unknown dtype 'q9_0'") && e.contains("iq4_xs"),
            "{e}"
        );
    }

    #[test]
    fn block_formats_count_bytes_by_block() {
        assert!(!DType::F16.is_block());
        assert_eq!(DType::F16.bytes_of(3), 6);
        assert!(DType::Q4_0.is_block());
        assert_eq!(DType::Q4_0.bytes_of(64), 36);
        assert_eq!(DType::Q6K.bytes_of(512), 420);
        assert_eq!(DType::quantized().count(), DType::ALL.len() - 8);
        // ggml's enum values are distinct (but u8's: raw bytes, which ggml calls i8).
        let mut v: Vec<i32> = DType::ALL
            .iter()
            .filter(|&&d| d != DType::U8)
            .map(|d| d.ggml_value())
            .collect();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), DType::ALL.len() - 1);
    }
}
