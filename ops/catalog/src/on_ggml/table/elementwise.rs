//! Element-wise ops: ggml's unary ops, SQR..COS, CLAMP, LEAKY_RELU, SCALE, the gated linear
//! units and the broadcasting binary ops.

use super::*;
use kedge_core::OpParams;
use kedge_ggml::{GluOp, UnaryOp};

/// Where an int element count breaks the unary kernels (`unary_cuda(..., const int k)`,
/// unary.cu:131; the same `int k` in clamp.cu:19 and leaky_relu, unary.cu:548): from 2^31
/// elements `k` is negative and the grid is invalid (launch error, C5/C7/C8); past 2^32 it wraps
/// to the remainder and the rest of the output is never written (silent, C6). On
/// `[65536, ne1]`: 32767 rows fit, 32768 rows are 2^31 elements, 65537 rows are 2^32 + 65536.
/// The generated count boundary (2^31 elements on ne[1] from `[64, 1, 1, 1]`) reaches the
/// launch error as well.
pub(crate) fn int_k_bounds(tag: &'static str) -> Vec<Boundary> {
    vec![Boundary::ne(
        format!("{tag}: elements across 2^31 and 2^32 (int k in the kernel launch)"),
        1,
        32768,
        [65536, 0, 1, 1],
        Reach(REACH_BIG_ACTIVATION),
    )
    .with_values(vec![32767, 32768, 65537])]
}

pub(crate) const REACH_BIG_ACTIVATION: &str = "an activation of 2^31 elements: d_ff x tokens >= 2.1e9 (14336 x 150k tokens in one ubatch); mostly a size boundary";

/// test_unary(op, type, ne_a, v): `GELU(type=f32,ne_a=[...],v=0)`.
pub(crate) fn unary_line(case: &Case, op: &str) -> UpstreamRepro {
    repro(
        op,
        format!(
            "test_unary(GGML_UNARY_OP_{op}, {}, {}, 0)",
            case.dtype.ggml_type(),
            cpp_arr(&case.ne)
        ),
        format!("type={},ne_a={},v=0", case.dtype, vars_arr(&case.ne)),
    )
}

/// test_sqr-style constructors: `test_X(type, ne)`, `X(type=f32,ne=[...])`.
pub(crate) fn type_ne_line(ctor: &str, op: &str, case: &Case) -> UpstreamRepro {
    repro(
        op,
        format!("{ctor}({}, {})", case.dtype.ggml_type(), cpp_arr(&case.ne)),
        format!("type={},ne={}", case.dtype, vars_arr(&case.ne)),
    )
}

/// test_unary's draw: uniform in [-150, 150) ("test extended range of values to check for NaNs
/// in GELU"), f16 exp and expm1 in [-10, 10) so every backend stays finite.
fn unary_domain(c: &Case) -> (f32, f32) {
    if c.dtype == DType::F16 && matches!(c.op.as_str(), "exp" | "expm1") {
        (-10.0, 10.0)
    } else {
        (-150.0, 150.0)
    }
}

macro_rules! unary_entry {
    ($NAME:ident, $name:literal, $op:literal, $method:ident, $about:literal) => {
        pub(crate) const $NAME: GgmlOpEntry = GgmlOpEntry {
            name: $name,
            upstream: $op,
            about: $about,
            // test-backend-ops' types. (The CUDA backend's supports_op accepts any type for
            // these while its kernels assert f32 or f16: every bf16 shape would end its
            // worker the same way.)
            dtypes: &[DType::F32, DType::F16],
            params: &[],
            tensors: same_shape,
            inputs: Inputs::UniformBy(unary_domain),
            graph: |g, _c, x| Ok(vec![g.unary(x[0], UnaryOp::$method)?]),
            probe: elementwise_probe,
            smoke: &[s([128, 2, 2, 2]), s([5, 7, 3, 1]), s([1, 1, 1, 1])],
            boundaries: |_| int_k_bounds("C5/C6"),
            upstream_line: |c| unary_line(c, $op),
            nmse: Nmse::Fixed(1e-7),
            reference: Reference::CpuBackend,
            rows: Rows::Independent,
            reach: no_reach,
        };
    };
}

unary_entry!(ABS, "abs", "ABS", Abs, "|x|, elementwise (ggml UNARY ABS)");
unary_entry!(
    SGN,
    "sgn",
    "SGN",
    Sgn,
    "sign(x), elementwise (ggml UNARY SGN)"
);
unary_entry!(NEG, "neg", "NEG", Neg, "-x, elementwise (ggml UNARY NEG)");
unary_entry!(
    STEP,
    "step",
    "STEP",
    Step,
    "x > 0, elementwise (ggml UNARY STEP)"
);
unary_entry!(
    TANH,
    "tanh",
    "TANH",
    Tanh,
    "tanh(x), elementwise (ggml UNARY TANH)"
);
unary_entry!(ELU, "elu", "ELU", Elu, "ELU, elementwise (ggml UNARY ELU)");
unary_entry!(
    RELU,
    "relu",
    "RELU",
    Relu,
    "max(x, 0), elementwise (ggml UNARY RELU)"
);
unary_entry!(
    SIGMOID,
    "sigmoid",
    "SIGMOID",
    Sigmoid,
    "1/(1+exp(-x)), elementwise (ggml UNARY SIGMOID)"
);
unary_entry!(
    GELU,
    "gelu",
    "GELU",
    Gelu,
    "GELU (tanh approximation), elementwise (ggml UNARY GELU)"
);
unary_entry!(
    GELU_QUICK,
    "gelu_quick",
    "GELU_QUICK",
    GeluQuick,
    "x*sigmoid(1.702x), elementwise (ggml UNARY GELU_QUICK)"
);
unary_entry!(
    GELU_ERF,
    "gelu_erf",
    "GELU_ERF",
    GeluErf,
    "GELU (erf form), elementwise (ggml UNARY GELU_ERF)"
);
unary_entry!(
    SILU,
    "silu",
    "SILU",
    Silu,
    "SiLU x*sigmoid(x), elementwise (ggml UNARY SILU)"
);
unary_entry!(
    HARDSWISH,
    "hardswish",
    "HARDSWISH",
    Hardswish,
    "x*relu6(x+3)/6, elementwise (ggml UNARY HARDSWISH)"
);
unary_entry!(
    HARDSIGMOID,
    "hardsigmoid",
    "HARDSIGMOID",
    Hardsigmoid,
    "relu6(x+3)/6, elementwise (ggml UNARY HARDSIGMOID)"
);
unary_entry!(
    EXP,
    "exp",
    "EXP",
    Exp,
    "exp(x), elementwise (ggml UNARY EXP)"
);
unary_entry!(
    EXPM1,
    "expm1",
    "EXPM1",
    Expm1,
    "exp(x)-1, elementwise (ggml UNARY EXPM1)"
);
unary_entry!(
    SOFTPLUS,
    "softplus",
    "SOFTPLUS",
    Softplus,
    "log(1+exp(x)), elementwise (ggml UNARY SOFTPLUS)"
);
unary_entry!(
    FLOOR,
    "floor",
    "FLOOR",
    Floor,
    "floor(x), elementwise (ggml UNARY FLOOR)"
);
unary_entry!(
    CEIL,
    "ceil",
    "CEIL",
    Ceil,
    "ceil(x), elementwise (ggml UNARY CEIL)"
);
unary_entry!(
    ROUND,
    "round",
    "ROUND",
    Round,
    "round(x), elementwise (ggml UNARY ROUND)"
);
unary_entry!(
    TRUNC,
    "trunc",
    "TRUNC",
    Trunc,
    "trunc(x), elementwise (ggml UNARY TRUNC)"
);

// ---- SQR, SQRT, LOG, SIN, COS: their own ops, the unary kernels' int k ----------------------

macro_rules! math_entry {
    ($NAME:ident, $name:literal, $op:literal, $ctor:literal, $method:ident, $inputs:expr, $about:literal) => {
        pub(crate) const $NAME: GgmlOpEntry = GgmlOpEntry {
            name: $name,
            upstream: $op,
            about: $about,
            dtypes: &[DType::F32, DType::F16],
            params: &[],
            tensors: same_shape,
            inputs: $inputs,
            graph: |g, _c, x| Ok(vec![g.$method(x[0])?]),
            probe: elementwise_probe,
            smoke: &[s([10, 5, 4, 3]), s([128, 3, 1, 1]), s([1, 1, 1, 1])],
            boundaries: |_| int_k_bounds("C7"),
            upstream_line: |c| type_ne_line($ctor, $op, c),
            nmse: Nmse::Fixed(1e-7),
            reference: Reference::CpuBackend,
            rows: Rows::Independent,
            reach: no_reach,
        };
    };
}

math_entry!(
    SQR,
    "sqr",
    "SQR",
    "test_sqr",
    sqr,
    Inputs::Default,
    "x^2, elementwise (ggml SQR)"
);
math_entry!(
    SQRT,
    "sqrt",
    "SQRT",
    "test_sqrt",
    sqrt,
    Inputs::Uniform(50.0, 100.0),
    "sqrt(x), elementwise (ggml SQRT); inputs in [50, 100) as test-backend-ops draws them"
);
math_entry!(
    LOG,
    "log",
    "LOG",
    "test_log",
    log,
    Inputs::Uniform(0.9, 1.1),
    "ln(x), elementwise (ggml LOG); inputs in [0.9, 1.1) as test-backend-ops draws them"
);
math_entry!(
    SIN,
    "sin",
    "SIN",
    "test_sin",
    sin,
    Inputs::Uniform(-6.5, 6.5),
    "sin(x), elementwise (ggml SIN); inputs in [-6.5, 6.5) (two periods)"
);
math_entry!(
    COS,
    "cos",
    "COS",
    "test_cos",
    cos,
    Inputs::Uniform(-6.5, 6.5),
    "cos(x), elementwise (ggml COS); inputs in [-6.5, 6.5) (two periods)"
);

// ---- XIELU, SILU_BACK: their own kernels, the same int k ------------------------------------

/// test_xielu's constants (alpha_n, alpha_p, beta, eps): its constructor fixes them.
const XIELU_CONSTANTS: (f32, f32, f32, f32) = (4.0, 20.0, 0.5, 1e-7);

pub(crate) const XIELU: GgmlOpEntry = GgmlOpEntry {
    name: "xielu",
    upstream: "XIELU",
    about: "xIELU (Apertus' activation), elementwise, with test_xielu's constants (alpha_n 4, alpha_p 20, beta 0.5, eps 1e-7)",
    dtypes: &[DType::F32, DType::F16],
    params: &[],
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, _c, x| {
        let (an, ap, beta, eps) = XIELU_CONSTANTS;
        Ok(vec![g.xielu(x[0], an, ap, beta, eps)?])
    },
    probe: elementwise_probe,
    smoke: &[s([10, 5, 4, 3]), s([512, 16, 1, 1]), s([1, 1, 1, 1])],
    // xielu_cuda(..., const int k, ...), unary.cu:452: the unary kernels' int count.
    boundaries: |_| int_k_bounds("C25"),
    upstream_line: |c| type_ne_line("test_xielu", "XIELU", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

pub(crate) const SILU_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "silu_back",
    upstream: "SILU_BACK",
    about: "the gradient of SiLU: dy * s(x) * (1 + x * (1 - s(x))), elementwise (training)",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            input("dy", c.dtype, c.ne)?,
            output("dx", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.silu_back(x[0], x[1])?]),
    probe: elementwise_probe,
    smoke: &[s([64, 5, 4, 3]), s([10, 3, 1, 1]), s([1, 1, 1, 1])],
    // silu_back_cuda(..., const int k, ...), unary.cu:502.
    boundaries: |_| int_k_bounds("C26"),
    upstream_line: |c| {
        repro(
            "SILU_BACK",
            format!(
                "test_silu_back({}, {}, 1e-6f)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!("type={},ne={},eps=0.000001", c.dtype, vars_arr(&c.ne)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- CLAMP, LEAKY_RELU (both in place, as ggml makes them), SCALE --------------------------

kedge_core::params! {
    /// CLAMP's bounds.
    pub(crate) struct ClampParams {
        min: float = -0.5, "lower bound";
        max: float = 0.5, "upper bound";
    }
}

pub(crate) const CLAMP: GgmlOpEntry = GgmlOpEntry {
    name: "clamp",
    upstream: "CLAMP",
    about: "min(max(x, min), max), elementwise, in place (ggml_clamp's result is a view of x)",
    dtypes: &[DType::F32, DType::F16],
    params: ClampParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = ClampParams::of(c);
        Ok(vec![g.clamp(x[0], p.min as f32, p.max as f32)?])
    },
    probe: elementwise_probe,
    smoke: &[
        s([10, 5, 4, 3]),
        sp!([64, 3, 1, 1], |p: &mut ClampParams| {
            p.min = -0.1;
            p.max = 0.9;
        }),
    ],
    boundaries: |_| int_k_bounds("C8"),
    upstream_line: |c| {
        let p = ClampParams::of(c);
        repro(
            "CLAMP",
            format!(
                "test_clamp({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.min),
                cf(p.max)
            ),
            format!(
                "type={},ne={},min={},max={}",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.min),
                fl(p.max)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

kedge_core::params! {
    /// LEAKY_RELU's slope.
    pub(crate) struct LeakyReluParams {
        negative_slope: float = 0.1, "slope for x < 0";
    }
}

pub(crate) const LEAKY_RELU: GgmlOpEntry = GgmlOpEntry {
    name: "leaky_relu",
    upstream: "LEAKY_RELU",
    about: "x > 0 ? x : slope*x, elementwise, in place as test-backend-ops builds it",
    dtypes: &[DType::F32, DType::F16],
    params: LeakyReluParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = LeakyReluParams::of(c);
        Ok(vec![g.leaky_relu(x[0], p.negative_slope as f32, true)?])
    },
    probe: elementwise_probe,
    smoke: &[s([10, 5, 4, 3]), s([256, 2, 1, 1])],
    boundaries: |_| int_k_bounds("C8"),
    upstream_line: |c| {
        let p = LeakyReluParams::of(c);
        repro(
            "LEAKY_RELU",
            format!(
                "test_leaky_relu({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.negative_slope)
            ),
            format!(
                "type={},ne_a={},negative_slope={}",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.negative_slope)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

kedge_core::params! {
    /// SCALE's factor and bias.
    pub(crate) struct ScaleParams {
        scale: float = 2.0, "factor";
        bias: float = 0.0, "added after scaling";
    }
}

pub(crate) const SCALE: GgmlOpEntry = GgmlOpEntry {
    name: "scale",
    upstream: "SCALE",
    about: "scale*x + bias, elementwise (ggml_scale_bias); an int64 grid-stride kernel: a control",
    dtypes: &[DType::F32],
    params: ScaleParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = ScaleParams::of(c);
        Ok(vec![g.scale_bias(x[0], p.scale as f32, p.bias as f32)?])
    },
    probe: elementwise_probe,
    smoke: &[
        s([10, 10, 10, 10]),
        sp!([33, 3, 2, 1], |p: &mut ScaleParams| {
            p.scale = 0.5;
            p.bias = 1.25;
        }),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = ScaleParams::of(c);
        repro(
            "SCALE",
            format!(
                "test_scale({}, {}, {}, {}, false)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.scale),
                cf(p.bias)
            ),
            format!(
                "type={},ne={},scale={},bias={},inplace=0",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.scale),
                fl(p.bias)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- gated linear units ----------------------------------------------------------------------

kedge_core::params! {
    /// A GLU's form.
    pub(crate) struct GluParams {
        swapped: bool = false, "the first half of each row gates the second (fused form only)";
        split: bool = false, "the gate in its own tensor of the same shape (ggml_X_split)";
    }
}

fn glu_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let p = GluParams::of(c);
    if p.split {
        if p.swapped {
            return Err(bad(c, "the split form has no swapped variant"));
        }
        return Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, c.ne)?,
            output("dst", c.dtype, c.ne)?,
        ]);
    }
    if c.ne[0] % 2 != 0 {
        return Err(bad(
            c,
            format!(
                "ne[0] = {} must be even: each row is a value half and a gate half",
                c.ne[0]
            ),
        ));
    }
    Ok(vec![
        input("a", c.dtype, c.ne)?,
        output("dst", c.dtype, with_dim(c.ne, 0, c.ne[0] / 2))?,
    ])
}

fn glu_line(c: &Case, op: &str) -> UpstreamRepro {
    let p = GluParams::of(c);
    let (ty, ne) = (c.dtype.ggml_type(), cpp_arr(&c.ne));
    if p.split {
        repro(
            op,
            format!("test_glu_split(GGML_GLU_OP_{op}, {ty}, {ne}, 0)"),
            format!("type={},ne_a={},v=0,split", c.dtype, vars_arr(&c.ne)),
        )
    } else {
        repro(
            op,
            format!("test_glu(GGML_GLU_OP_{op}, {ty}, {ne}, 0, {})", p.swapped),
            format!(
                "type={},ne_a={},v=0,swapped={}",
                c.dtype,
                vars_arr(&c.ne),
                b01(p.swapped)
            ),
        )
    }
}

fn glu_graph(
    g: &mut kedge_ggml::Graph,
    c: &Case,
    x: &[kedge_ggml::Tensor],
    op: GluOp,
) -> Result<Vec<kedge_ggml::Tensor>, kedge_ggml::GraphError> {
    let p = GluParams::of(c);
    Ok(vec![if p.split {
        g.glu_split(x[0], x[1], op)?
    } else {
        g.glu(x[0], op, p.swapped)?
    }])
}

const GLU_SMOKE: &[Smoke] = &[
    s([128, 2, 2, 2]),
    sp!([64, 3, 1, 1], |p: &mut GluParams| p.swapped = true),
    sp!([128, 2, 2, 1], |p: &mut GluParams| p.split = true),
    sp!([7, 5, 1, 1], |p: &mut GluParams| p.split = true),
];

macro_rules! glu_entry {
    ($NAME:ident, $name:literal, $op:literal, $variant:ident, $about:literal) => {
        pub(crate) const $NAME: GgmlOpEntry = GgmlOpEntry {
            name: $name,
            upstream: $op,
            about: $about,
            dtypes: &[DType::F32, DType::F16],
            params: GluParams::SPECS,
            tensors: glu_tensors,
            // test_glu and test_glu_split draw in [-150, 150).
            inputs: Inputs::Uniform(-150.0, 150.0),
            graph: |g, c, x| glu_graph(g, c, x, GluOp::$variant),
            probe: elementwise_probe,
            smoke: GLU_SMOKE,
            boundaries: none,
            upstream_line: |c| glu_line(c, $op),
            nmse: Nmse::Fixed(1e-7),
            reference: Reference::CpuBackend,
            rows: Rows::Independent,
            reach: no_reach,
        };
    };
}

glu_entry!(
    REGLU,
    "reglu",
    "REGLU",
    Reglu,
    "relu(a)*gate: a row's first half gated by its second (or split: gate in b); int64 kernels, a control"
);
glu_entry!(
    GEGLU,
    "geglu",
    "GEGLU",
    Geglu,
    "gelu(a)*gate (tanh GELU), fused or split; int64 kernels, a control"
);
glu_entry!(
    SWIGLU,
    "swiglu",
    "SWIGLU",
    Swiglu,
    "silu(a)*gate, the feed-forward of Llama-style models, fused or split; int64 kernels, a control"
);
glu_entry!(
    GEGLU_ERF,
    "geglu_erf",
    "GEGLU_ERF",
    GegluErf,
    "gelu_erf(a)*gate, fused or split"
);
glu_entry!(
    GEGLU_QUICK,
    "geglu_quick",
    "GEGLU_QUICK",
    GegluQuick,
    "gelu_quick(a)*gate, fused or split"
);

kedge_core::params! {
    /// SWIGLU_OAI's clamp.
    pub(crate) struct SwigluOaiParams {
        alpha: float = 1.702, "sigmoid slope";
        limit: float = 7.0, "clamp of value and gate";
    }
}

pub(crate) const SWIGLU_OAI: GgmlOpEntry = GgmlOpEntry {
    name: "swiglu_oai",
    upstream: "SWIGLU_OAI",
    about: "gpt-oss' clamped SwiGLU, value in a and gate in b (same shape)",
    dtypes: &[DType::F32],
    params: SwigluOaiParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, c.ne)?,
            output("dst", c.dtype, c.ne)?,
        ])
    },
    // test_swiglu_oai draws in [-150, 150): the clamp at `limit` is reached.
    inputs: Inputs::Uniform(-150.0, 150.0),
    graph: |g, c, x| {
        let p = SwigluOaiParams::of(c);
        Ok(vec![g.swiglu_oai(
            x[0],
            x[1],
            p.alpha as f32,
            p.limit as f32,
        )?])
    },
    probe: elementwise_probe,
    smoke: &[s([128, 2, 2, 2]), s([2880, 3, 1, 1])],
    boundaries: none,
    upstream_line: |c| {
        let p = SwigluOaiParams::of(c);
        repro(
            "SWIGLU_OAI",
            format!(
                "test_swiglu_oai({}, {}, 0, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.alpha),
                cf(p.limit)
            ),
            format!(
                "type={},ne_a={},v=0,alpha={},limit={}",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.alpha),
                fl(p.limit)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- ADD, SUB, MUL, DIV with broadcast -------------------------------------------------------

kedge_core::params! {
    /// test_bin_bcast's repeat: `a` is `ne * nr`, `b` is `ne`, broadcast over `a`.
    pub(crate) struct BinParams {
        nr0: int(1..=1 << 20) = 1, "a's ne[0] is ne[0] * nr0";
        nr1: int(1..=1 << 20) = 2, "a's ne[1] is ne[1] * nr1";
        nr2: int(1..=1 << 20) = 1, "a's ne[2] is ne[2] * nr2";
        nr3: int(1..=1 << 20) = 1, "a's ne[3] is ne[3] * nr3";
    }
}

impl BinParams {
    fn nr(&self) -> [i64; 4] {
        [self.nr0, self.nr1, self.nr2, self.nr3]
    }
}

fn bin_a(c: &Case) -> Ne {
    let nr = BinParams::of(c).nr();
    [
        c.ne[0] * nr[0],
        c.ne[1] * nr[1],
        c.ne[2] * nr[2],
        c.ne[3] * nr[3],
    ]
}

fn bin_tensors(c: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    let a = bin_a(c);
    Ok(vec![
        input("a", c.dtype, a)?,
        input("b", c.dtype, c.ne)?,
        output("dst", c.dtype, a)?,
    ])
}

fn bin_line(c: &Case, op: &str, f: &str) -> UpstreamRepro {
    let nr = BinParams::of(c).nr();
    repro(
        op,
        format!(
            "test_bin_bcast({f}, {}, {}, {}, 1, false, false)",
            c.dtype.ggml_type(),
            cpp_arr(&c.ne),
            cpp_arr(&nr)
        ),
        format!(
            "type={},ne={},nr={},nf=1,perm1=0,src_overlap=0",
            c.dtype,
            vars_arr(&c.ne),
            vars_arr(&nr)
        ),
    )
}

fn bin_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        params: crate::params_with(|p: &mut BinParams| {
            p.nr0 = 1;
            p.nr1 = 1;
            p.nr2 = 1;
            p.nr3 = 1;
        }),
        ..elementwise_probe()?
    })
}

/// D4: every extent of the collapsed shape must fit in 32 bits (binbcast.cu:258), but
/// supports_op never asks, so a same-shape add of 2^32 elements aborts. 65535 rows of 65536 are
/// the control between 2^31 and 2^32.
fn bin_bounds(_: &LimitsProfile) -> Vec<Boundary> {
    vec![Boundary::ne(
        "D4: elements across 2^32 (the collapsed extent passes UINT32_MAX; GGML_ASSERT)",
        1,
        65536,
        [65536, 0, 1, 1],
        Reach::SYNTHETIC,
    )
    .with_values(vec![65535, 65537])
    .with_params(|p: &mut BinParams| p.nr1 = 1)]
}

const BIN_SMOKE: &[Smoke] = &[
    s([10, 10, 1, 1]),
    sp!([16, 5, 4, 3], |p: &mut BinParams| {
        p.nr0 = 2;
        p.nr1 = 1;
        p.nr2 = 2;
        p.nr3 = 2;
    }),
    sp!([1, 1, 8, 1], |p: &mut BinParams| {
        p.nr0 = 256;
        p.nr1 = 3;
    }),
];

macro_rules! bin_entry {
    ($NAME:ident, $name:literal, $op:literal, $method:ident, $f:literal, $inputs:expr, $about:literal) => {
        pub(crate) const $NAME: GgmlOpEntry = GgmlOpEntry {
            name: $name,
            upstream: $op,
            about: $about,
            dtypes: &[DType::F32, DType::F16],
            params: BinParams::SPECS,
            tensors: bin_tensors,
            inputs: $inputs,
            graph: |g, _c, x| Ok(vec![g.$method(x[0], x[1])?]),
            probe: bin_probe,
            smoke: BIN_SMOKE,
            boundaries: bin_bounds,
            upstream_line: |c| bin_line(c, $op, $f),
            nmse: Nmse::Fixed(1e-7),
            reference: Reference::CpuBackend,
            rows: Rows::Independent,
            reach: no_reach,
        };
    };
}

bin_entry!(
    ADD,
    "add",
    "ADD",
    add,
    "ggml_add",
    Inputs::Default,
    "a + b, b (ne) broadcast over a (ne * nr)"
);
bin_entry!(
    SUB,
    "sub",
    "SUB",
    sub,
    "ggml_sub",
    Inputs::Default,
    "a - b, b (ne) broadcast over a (ne * nr)"
);
bin_entry!(
    MUL,
    "mul",
    "MUL",
    mul,
    "ggml_mul",
    Inputs::Uniform(0.9, 1.1),
    "a * b, b (ne) broadcast over a (ne * nr); inputs in [0.9, 1.1) as test-backend-ops draws them"
);
bin_entry!(
    DIV,
    "div",
    "DIV",
    div,
    "ggml_div",
    Inputs::Uniform(0.9, 1.1),
    "a / b, b (ne) broadcast over a (ne * nr); inputs in [0.9, 1.1) as test-backend-ops draws them"
);
