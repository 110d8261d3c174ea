//! Element types and the small enums some ops take, with the values the pinned `ggml.h` gives.
//!
//! Only enums whose values ggml fixes (explicit values, or append-only by the header's own rule)
//! cross the C boundary as numbers. `ggml_unary_op` and `ggml_glu_op` are not among them: values
//! were inserted mid-enum between releases (EXPM1 and SOFTPLUS before GELU_ERF), so [`UnaryOp`]
//! and [`GluOp`] are dispatched to ggml's named entry points (`ggml_silu`, `ggml_swiglu`, ...)
//! and a build without one reports it by name.

use std::ffi::c_int;

macro_rules! types {
    ($( $(#[$doc:meta])* $var:ident = $raw:literal, $name:literal, $block:literal, $bytes:literal; )*) => {
        /// A tensor element type (`enum ggml_type`; "always add types at the end of the enum").
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Type {
            $( $(#[$doc])* $var, )*
        }

        impl Type {
            /// Every variant, for lookups.
            pub const ALL: &'static [Type] = &[ $( Type::$var, )* ];

            /// The `enum ggml_type` value.
            pub(crate) fn raw(self) -> c_int {
                match self { $( Type::$var => $raw, )* }
            }

            /// ggml's name for the type (`ggml_type_name`).
            pub fn name(self) -> &'static str {
                match self { $( Type::$var => $name, )* }
            }

            /// Elements per block: 1 for plain types (`ggml_blck_size`).
            pub fn block_size(self) -> i64 {
                match self { $( Type::$var => $block, )* }
            }

            /// Bytes per block (`ggml_type_size`), as the pinned header defines it.
            pub fn type_size(self) -> usize {
                match self { $( Type::$var => $bytes, )* }
            }
        }
    };
}

types! {
    /// IEEE 754 single precision (4 bytes).
    F32 = 0, "f32", 1, 4;
    /// IEEE 754 half precision (2 bytes).
    F16 = 1, "f16", 1, 2;
    /// 32-element blocks, an f16 scale and 32 nibbles (18 bytes).
    Q4_0 = 2, "q4_0", 32, 18;
    /// 32-element blocks: an f16 scale, an f16 minimum and 32 nibbles (20 bytes).
    Q4_1 = 3, "q4_1", 32, 20;
    /// 32-element blocks: an f16 scale, 32 nibbles and 32 fifth bits (22 bytes).
    Q5_0 = 6, "q5_0", 32, 22;
    /// 32-element blocks: f16 scale and minimum, 32 nibbles and 32 fifth bits (24 bytes).
    Q5_1 = 7, "q5_1", 32, 24;
    /// 32-element blocks, an f16 scale and 32 int8 values (34 bytes).
    Q8_0 = 8, "q8_0", 32, 34;
    /// k-quant, 256-element super-blocks of 2-bit values with 4-bit sub-block scales and mins
    /// (84 bytes).
    Q2K = 10, "q2_K", 256, 84;
    /// k-quant, 256-element super-blocks of 3-bit values with 6-bit sub-block scales (110 bytes).
    Q3K = 11, "q3_K", 256, 110;
    /// k-quant, 256-element super-blocks of 4-bit values with 6-bit sub-block scales and mins
    /// (144 bytes).
    Q4K = 12, "q4_K", 256, 144;
    /// k-quant, 256-element super-blocks of 5-bit values with 6-bit sub-block scales and mins
    /// (176 bytes).
    Q5K = 13, "q5_K", 256, 176;
    /// k-quant, 256-element super-blocks of 6-bit values with 8-bit sub-block scales (210 bytes).
    Q6K = 14, "q6_K", 256, 210;
    /// i-quant, 256-element blocks at about 2.06 bits per value (66 bytes); quantizing it needs
    /// an importance matrix.
    Iq2Xxs = 16, "iq2_xxs", 256, 66;
    /// i-quant, 256-element blocks at about 2.31 bits per value (74 bytes); quantizing it needs
    /// an importance matrix.
    Iq2Xs = 17, "iq2_xs", 256, 74;
    /// i-quant, 256-element blocks at about 3.06 bits per value (98 bytes).
    Iq3Xxs = 18, "iq3_xxs", 256, 98;
    /// i-quant, 256-element blocks at about 1.56 bits per value (50 bytes); quantizing it needs
    /// an importance matrix.
    Iq1S = 19, "iq1_s", 256, 50;
    /// 32-element blocks: an f16 scale and 32 4-bit indices into a non-linear table (18 bytes).
    Iq4Nl = 20, "iq4_nl", 32, 18;
    /// i-quant, 256-element blocks at about 3.44 bits per value (110 bytes).
    Iq3S = 21, "iq3_s", 256, 110;
    /// i-quant, 256-element blocks at about 2.56 bits per value (82 bytes).
    Iq2S = 22, "iq2_s", 256, 82;
    /// 256-element blocks of 4-bit non-linear indices with 6-bit sub-block scales (136 bytes).
    Iq4Xs = 23, "iq4_xs", 256, 136;
    /// Signed 8-bit integer.
    I8 = 24, "i8", 1, 1;
    /// Signed 16-bit integer.
    I16 = 25, "i16", 1, 2;
    /// Signed 32-bit integer: what index tensors (`get_rows`, `argsort` results) hold.
    I32 = 26, "i32", 1, 4;
    /// Signed 64-bit integer.
    I64 = 27, "i64", 1, 8;
    /// IEEE 754 double precision (8 bytes).
    F64 = 28, "f64", 1, 8;
    /// i-quant, 256-element blocks at 1.75 bits per value (56 bytes).
    Iq1M = 29, "iq1_m", 256, 56;
    /// bfloat16: f32's exponent with a 7-bit mantissa (2 bytes).
    BF16 = 30, "bf16", 1, 2;
    /// Ternary, 256-element blocks at about 1.69 bits per value (54 bytes).
    Tq1_0 = 34, "tq1_0", 256, 54;
    /// Ternary, 256-element blocks of 2-bit values and an f16 scale (66 bytes).
    Tq2_0 = 35, "tq2_0", 256, 66;
    /// OCP microscaling FP4: 32 E2M1 values sharing one E8M0 scale (17 bytes).
    Mxfp4 = 39, "mxfp4", 32, 17;
    /// NVIDIA's FP4: 64 E2M1 values, with a UE4M3 scale for each 16 (36 bytes).
    Nvfp4 = 40, "nvfp4", 64, 36;
    /// 128-element blocks: an f16 scale and one bit per value (18 bytes).
    Q1_0 = 41, "q1_0", 128, 18;
    /// 64-element blocks: an f16 scale and two bits per value (18 bytes).
    Q2_0 = 42, "q2_0", 64, 18;
}

impl Type {
    /// Whether the type stores blocks rather than single elements.
    pub(crate) fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// The type of an `enum ggml_type` value.
    pub fn from_raw(raw: c_int) -> Option<Type> {
        Type::ALL.iter().copied().find(|t| t.raw() == raw)
    }
}

/// `enum ggml_tri_type` (explicit values in the header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriType {
    /// Keep the upper triangle and the diagonal.
    UpperDiag = 0,
    /// Keep the strict upper triangle.
    Upper = 1,
    /// Keep the lower triangle and the diagonal.
    LowerDiag = 2,
    /// Keep the strict lower triangle.
    Lower = 3,
}

/// `enum ggml_sort_order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortOrder {
    /// Smallest first.
    Asc = 0,
    /// Largest first.
    Desc = 1,
}

/// `enum ggml_op_pool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    /// The largest value of each window.
    Max = 0,
    /// The mean of each window.
    Avg = 1,
}

/// `enum ggml_scale_mode` (explicit values); flags such as align-corners are or-ed into
/// [`Graph::interpolate`](crate::Graph::interpolate)'s `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleMode {
    /// Nearest neighbour.
    Nearest = 0,
    /// Linear in each of the two image dimensions.
    Bilinear = 1,
    /// Cubic in each of the two image dimensions.
    Bicubic = 2,
}

/// `GGML_SCALE_FLAG_ALIGN_CORNERS`, or-ed into an interpolation mode: the corner pixels of
/// source and result line up, instead of their outer edges.
pub const SCALE_FLAG_ALIGN_CORNERS: u32 = 1 << 8;
/// `GGML_SCALE_FLAG_ANTIALIAS`, or-ed into [`ScaleMode::Bilinear`]: each result pixel
/// averages the source pixels it covers, so shrinking does not alias.
pub const SCALE_FLAG_ANTIALIAS: u32 = 1 << 9;

/// `enum ggml_prec` (explicit values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prec {
    /// Whatever the backend's kernel uses by default, which may accumulate in less than f32.
    Default = 0,
    /// Ask for f32 accumulation.
    F32 = 10,
}

/// RoPE modes (`GGML_ROPE_TYPE_*`, plain defines in the header).
pub mod rope_mode {
    /// Rotates adjacent pairs of a head's dimensions (0 and 1, 2 and 3, ...).
    pub const NORMAL: i32 = 0;
    /// GPT-NeoX style: rotates dimension `i` with `i + n_dims / 2`.
    pub const NEOX: i32 = 2;
    /// Multi-section RoPE (a bit, also set in `VISION` and `IMROPE`): four positions per token.
    pub(crate) const MROPE: i32 = 8;
    /// Multi-section RoPE for vision encoders; needs `ggml_rope_multi`, which this crate does
    /// not wrap.
    pub const VISION: i32 = 24;
    /// Interleaved multi-section RoPE; needs `ggml_rope_multi`, which this crate does not wrap.
    pub const IMROPE: i32 = 40;
}

/// The element-wise unary ops, each built through its own ggml entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `|x|`.
    Abs,
    /// The sign: -1, 0 or 1.
    Sgn,
    /// `-x`.
    Neg,
    /// 1 where `x > 0`, else 0.
    Step,
    /// Hyperbolic tangent.
    Tanh,
    /// ELU: `x` where positive, `exp(x) - 1` elsewhere.
    Elu,
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// GELU, tanh approximation.
    Gelu,
    /// GELU, sigmoid approximation `x * sigmoid(1.702 x)`.
    GeluQuick,
    /// GELU, exact (with `erf`).
    GeluErf,
    /// SiLU (swish): `x * sigmoid(x)`.
    Silu,
    /// `x * hardsigmoid(x)`.
    Hardswish,
    /// `clamp((x + 3) / 6, 0, 1)`.
    Hardsigmoid,
    /// `exp(x)`.
    Exp,
    /// `exp(x) - 1`, accurate near 0.
    Expm1,
    /// `log(1 + exp(x))`.
    Softplus,
    /// Rounds down.
    Floor,
    /// Rounds up.
    Ceil,
    /// Rounds to the nearest integer, halves away from zero.
    Round,
    /// Rounds towards zero.
    Trunc,
}

impl UnaryOp {
    /// Every variant.
    pub const ALL: [UnaryOp; 21] = [
        UnaryOp::Abs,
        UnaryOp::Sgn,
        UnaryOp::Neg,
        UnaryOp::Step,
        UnaryOp::Tanh,
        UnaryOp::Elu,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::GeluQuick,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Hardswish,
        UnaryOp::Hardsigmoid,
        UnaryOp::Exp,
        UnaryOp::Expm1,
        UnaryOp::Softplus,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Trunc,
    ];

    /// The name `ggml_op_desc` gives a node of this op (`GGML_UNARY_OP_NAME`).
    pub fn ggml_name(self) -> &'static str {
        match self {
            UnaryOp::Abs => "ABS",
            UnaryOp::Sgn => "SGN",
            UnaryOp::Neg => "NEG",
            UnaryOp::Step => "STEP",
            UnaryOp::Tanh => "TANH",
            UnaryOp::Elu => "ELU",
            UnaryOp::Relu => "RELU",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Gelu => "GELU",
            UnaryOp::GeluQuick => "GELU_QUICK",
            UnaryOp::GeluErf => "GELU_ERF",
            UnaryOp::Silu => "SILU",
            UnaryOp::Hardswish => "HARDSWISH",
            UnaryOp::Hardsigmoid => "HARDSIGMOID",
            UnaryOp::Exp => "EXP",
            UnaryOp::Expm1 => "EXPM1",
            UnaryOp::Softplus => "SOFTPLUS",
            UnaryOp::Floor => "FLOOR",
            UnaryOp::Ceil => "CEIL",
            UnaryOp::Round => "ROUND",
            UnaryOp::Trunc => "TRUNC",
        }
    }
}

/// The gated linear units (`ggml_glu_op`), each built through its own ggml entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluOp {
    /// Gate through ReLU.
    Reglu,
    /// Gate through GELU (tanh approximation).
    Geglu,
    /// Gate through SiLU.
    Swiglu,
    /// Gate through exact GELU.
    GegluErf,
    /// Gate through the sigmoid approximation of GELU.
    GegluQuick,
}

/// Where a device sits (`enum ggml_backend_dev_type`, in the pinned header's numbering; IGPU
/// was inserted before ACCEL in 2025, so an older build's accelerator reads as `Igpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// The CPU, on system memory.
    Cpu,
    /// A GPU with its own memory.
    Gpu,
    /// A GPU that uses host memory.
    Igpu,
    /// An accelerator used alongside the CPU backend (BLAS, AMX).
    Accel,
    /// A device standing for several others (tensor parallelism).
    Meta,
    /// A value this crate does not know, from a newer build.
    Other(i32),
}

impl DeviceKind {
    pub(crate) fn from_raw(v: c_int) -> Self {
        match v {
            0 => DeviceKind::Cpu,
            1 => DeviceKind::Gpu,
            2 => DeviceKind::Igpu,
            3 => DeviceKind::Accel,
            4 => DeviceKind::Meta,
            other => DeviceKind::Other(other),
        }
    }
}

/// A ggml log level (`enum ggml_log_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// No level given (and any value this crate does not know).
    None,
    /// Detail for debugging ggml itself.
    Debug,
    /// Progress and configuration.
    Info,
    /// Something may be wrong; kept in the ring of recent lines.
    Warn,
    /// Something failed; kept in the ring of recent lines.
    Error,
    /// Continues the previous message (ggml splits some messages over several calls).
    Cont,
}

impl LogLevel {
    pub(crate) fn from_raw(v: c_int) -> Self {
        match v {
            1 => LogLevel::Debug,
            2 => LogLevel::Info,
            3 => LogLevel::Warn,
            4 => LogLevel::Error,
            5 => LogLevel::Cont,
            _ => LogLevel::None,
        }
    }
}

/// `enum ggml_status`, the result of a compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// A buffer could not be allocated (-2).
    AllocFailed,
    /// The compute failed (-1).
    Failed,
    /// The compute ran (0).
    Success,
    /// The compute stopped early because the backend's abort callback asked it to (1).
    Aborted,
    /// A value this crate does not know, from a newer build.
    Other(i32),
}

impl Status {
    pub(crate) fn from_raw(v: c_int) -> Self {
        match v {
            -2 => Status::AllocFailed,
            -1 => Status::Failed,
            0 => Status::Success,
            1 => Status::Aborted,
            other => Status::Other(other),
        }
    }
}
