//! Element types and the small enums some ops take, with the values the pinned `ggml.h` gives.
//!
//! Only enums whose values ggml fixes (explicit values, or append-only by the header's own rule)
//! cross the C boundary as numbers. `ggml_unary_op` and `ggml_glu_op` are not among them: values
//! were inserted mid-enum between releases (EXPM1 and SOFTPLUS before GELU_ERF), so [`UnaryOp`]
//! and [`GluOp`] are dispatched to ggml's named entry points (`ggml_silu`, `ggml_swiglu`, ...)
//! and a build without one reports it by name.

use std::ffi::c_int;

/// A tensor element type (`enum ggml_type`; "always add types at the end of the enum").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Type {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    /// 32-element blocks, an f16 scale and 32 int8 values (34 bytes).
    Q8_0,
    /// 32-element blocks, an f16 scale and 32 nibbles (18 bytes).
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
}

impl Type {
    /// Every variant, for lookups.
    pub const ALL: [Type; 13] = [
        Type::F32,
        Type::F16,
        Type::BF16,
        Type::F64,
        Type::I8,
        Type::I16,
        Type::I32,
        Type::I64,
        Type::Q8_0,
        Type::Q4_0,
        Type::Q4_1,
        Type::Q5_0,
        Type::Q5_1,
    ];

    /// The `enum ggml_type` value.
    pub fn raw(self) -> c_int {
        match self {
            Type::F32 => 0,
            Type::F16 => 1,
            Type::Q4_0 => 2,
            Type::Q4_1 => 3,
            Type::Q5_0 => 6,
            Type::Q5_1 => 7,
            Type::Q8_0 => 8,
            Type::I8 => 24,
            Type::I16 => 25,
            Type::I32 => 26,
            Type::I64 => 27,
            Type::F64 => 28,
            Type::BF16 => 30,
        }
    }

    /// Elements per block: 1 for plain types, 32 for the quantized ones here.
    pub fn block_size(self) -> i64 {
        if self.is_quantized() {
            32
        } else {
            1
        }
    }

    /// Whether the type stores blocks rather than single elements.
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            Type::Q8_0 | Type::Q4_0 | Type::Q4_1 | Type::Q5_0 | Type::Q5_1
        )
    }

    /// ggml's name for the type (`ggml_type_name`).
    pub fn name(self) -> &'static str {
        match self {
            Type::F32 => "f32",
            Type::F16 => "f16",
            Type::BF16 => "bf16",
            Type::F64 => "f64",
            Type::I8 => "i8",
            Type::I16 => "i16",
            Type::I32 => "i32",
            Type::I64 => "i64",
            Type::Q8_0 => "q8_0",
            Type::Q4_0 => "q4_0",
            Type::Q4_1 => "q4_1",
            Type::Q5_0 => "q5_0",
            Type::Q5_1 => "q5_1",
        }
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
