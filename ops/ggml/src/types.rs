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
            pub fn raw(self) -> c_int {
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
    F32 = 0, "f32", 1, 4;
    F16 = 1, "f16", 1, 2;
    /// 32-element blocks, an f16 scale and 32 nibbles (18 bytes).
    Q4_0 = 2, "q4_0", 32, 18;
    Q4_1 = 3, "q4_1", 32, 20;
    Q5_0 = 6, "q5_0", 32, 22;
    Q5_1 = 7, "q5_1", 32, 24;
    /// 32-element blocks, an f16 scale and 32 int8 values (34 bytes).
    Q8_0 = 8, "q8_0", 32, 34;
    Q2K = 10, "q2_K", 256, 84;
    Q3K = 11, "q3_K", 256, 110;
    Q4K = 12, "q4_K", 256, 144;
    Q5K = 13, "q5_K", 256, 176;
    Q6K = 14, "q6_K", 256, 210;
    Iq2Xxs = 16, "iq2_xxs", 256, 66;
    Iq2Xs = 17, "iq2_xs", 256, 74;
    Iq3Xxs = 18, "iq3_xxs", 256, 98;
    Iq1S = 19, "iq1_s", 256, 50;
    Iq4Nl = 20, "iq4_nl", 32, 18;
    Iq3S = 21, "iq3_s", 256, 110;
    Iq2S = 22, "iq2_s", 256, 82;
    Iq4Xs = 23, "iq4_xs", 256, 136;
    I8 = 24, "i8", 1, 1;
    I16 = 25, "i16", 1, 2;
    I32 = 26, "i32", 1, 4;
    I64 = 27, "i64", 1, 8;
    F64 = 28, "f64", 1, 8;
    Iq1M = 29, "iq1_m", 256, 56;
    BF16 = 30, "bf16", 1, 2;
    Tq1_0 = 34, "tq1_0", 256, 54;
    Tq2_0 = 35, "tq2_0", 256, 66;
    Mxfp4 = 39, "mxfp4", 32, 17;
    Nvfp4 = 40, "nvfp4", 64, 36;
    Q1_0 = 41, "q1_0", 128, 18;
    Q2_0 = 42, "q2_0", 64, 18;
}

impl Type {
    /// Whether the type stores blocks rather than single elements.
    pub fn is_quantized(self) -> bool {
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
    Asc = 0,
    Desc = 1,
}

/// `enum ggml_op_pool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    Max = 0,
    Avg = 1,
}

/// `enum ggml_scale_mode` (explicit values); flags such as align-corners are or-ed into
/// [`Graph::interpolate`](crate::Graph::interpolate)'s `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleMode {
    Nearest = 0,
    Bilinear = 1,
    Bicubic = 2,
}

/// `GGML_SCALE_FLAG_ALIGN_CORNERS`.
pub const SCALE_FLAG_ALIGN_CORNERS: u32 = 1 << 8;
/// `GGML_SCALE_FLAG_ANTIALIAS`.
pub const SCALE_FLAG_ANTIALIAS: u32 = 1 << 9;

/// `enum ggml_prec` (explicit values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prec {
    Default = 0,
    F32 = 10,
}

/// RoPE modes (`GGML_ROPE_TYPE_*`, plain defines in the header).
pub mod rope_mode {
    pub const NORMAL: i32 = 0;
    pub const NEOX: i32 = 2;
    pub const MROPE: i32 = 8;
    pub const VISION: i32 = 24;
    pub const IMROPE: i32 = 40;
}

/// The element-wise unary ops, each built through its own ggml entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Abs,
    Sgn,
    Neg,
    Step,
    Tanh,
    Elu,
    Relu,
    Sigmoid,
    Gelu,
    GeluQuick,
    GeluErf,
    Silu,
    Hardswish,
    Hardsigmoid,
    Exp,
    Expm1,
    Softplus,
    Floor,
    Ceil,
    Round,
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
    Reglu,
    Geglu,
    Swiglu,
    GegluErf,
    GegluQuick,
}

/// Where a device sits (`enum ggml_backend_dev_type`, in the pinned header's numbering; IGPU
/// was inserted before ACCEL in 2025, so an older build's accelerator reads as `Igpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
    Igpu,
    Accel,
    Meta,
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
    None,
    Debug,
    Info,
    Warn,
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
    AllocFailed,
    Failed,
    Success,
    Aborted,
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
