//! ggml's ops beyond kedge's own, declared as data, one entry each: their tensors, parameters,
//! graph, test-backend-ops line and the small base the generated boundaries start from. Their
//! reference is ggml's CPU backend from the same build (test-backend-ops' method), so they run
//! only when a ggml build is loaded (`--ggml DIR`), and never on the CPU backend itself.

use super::exec::cpu_reference;
use super::GraphFn;
use kedge_core::contract::upstream::{cpp_ne, vars_ne};
use kedge_core::*;
use kedge_ggml::{Graph, GraphError, Tensor};

/// Inputs for ops whose inputs need a domain.
pub type InputsFn = fn(&Case, &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError>;

/// One ggml op as data.
pub struct GgmlOpEntry {
    /// kedge's name: ggml's, in lower case (`gelu`, `sum_rows`).
    pub name: &'static str,
    /// ggml's op name as test-backend-ops' `-o` takes it (`GELU`, `SUM_ROWS`).
    pub upstream: &'static str,
    pub about: &'static str,
    pub dtypes: &'static [DType],
    /// Declared with `kedge_core::params!` (`XParams::SPECS`).
    pub params: &'static [ParamSpec],
    /// The case's tensors: inputs (in the graph's argument order), then outputs.
    pub tensors: fn(&Case) -> Result<Vec<TensorSpec>, CaseError>,
    /// Inputs that need a domain (indices in range, positive values); `None`: uniform in
    /// [-1, 1), never all zero.
    pub inputs: Option<InputsFn>,
    pub graph: GraphFn,
    /// Where the generated boundaries start (`None`: the op's dimensions are not free).
    pub probe: fn() -> Option<ProbeBase>,
    /// Small shapes every backend must pass.
    pub smoke: &'static [Ne],
    /// The op's own documented thresholds (beyond the generated boundaries).
    pub boundaries: fn(&LimitsProfile) -> Vec<Boundary>,
    /// test-backend-ops' constructor line and `vars()` for the case.
    pub upstream_line: fn(&Case) -> UpstreamRepro,
    /// test-backend-ops' `max_nmse_err()` for the op.
    pub nmse: f64,
    /// Which workload reaches the case's shape, where one is known.
    pub reach: fn(&Case) -> Option<String>,
}

impl Op for GgmlOpEntry {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn upstream_name(&self) -> Option<&'static str> {
        Some(self.upstream)
    }
    fn dtypes(&self) -> &'static [DType] {
        self.dtypes
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
    /// Added at run time, one per backend device of the loaded build.
    fn impls(&self) -> Vec<&'static dyn Impl> {
        Vec::new()
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        (self.tensors)(case)
    }
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        match self.inputs {
            Some(f) => f(case, specs),
            None => Ok(kedge_core::contract::op::random_inputs(case.seed, specs)),
        }
    }
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let specs = (self.tensors)(case)?;
        cpu_reference(case, &specs, inputs, self.graph)
    }
    fn reference_source(&self) -> &'static str {
        "ggml's CPU backend from the same build (test-backend-ops' reference)"
    }
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::for_dtype(case.dtype).with_nmse(self.nmse)
    }
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary> {
        (self.boundaries)(limits)
    }
    fn probe_base(&self) -> Option<ProbeBase> {
        (self.probe)()
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        self.smoke.iter().map(|&ne| (ne, Params::new())).collect()
    }
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro> {
        Some((self.upstream_line)(case))
    }
    fn reach(&self, case: &Case) -> Option<String> {
        (self.reach)(case)
    }
}

// ---- shared pieces of entries ---------------------------------------------------------------

/// No boundaries beyond the generated ones.
pub fn none(_: &LimitsProfile) -> Vec<Boundary> {
    Vec::new()
}

/// No workload known.
pub fn no_reach(_: &Case) -> Option<String> {
    None
}

/// One input `x` and one output `dst` of the case's shape and dtype.
pub fn same_shape(case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    Ok(vec![
        TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?,
        TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
    ])
}

/// An elementwise op: every dimension free, the element count on ne[1].
pub fn elementwise_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        row_dim: false,
        ..ProbeBase::rows([64, 1, 1, 1])
    })
}

/// `type=f32,ne=[...]`-style vars and `test_x(GGML_TYPE_F32, {...})` lines.
pub fn type_ne_line(ctor: &str, op: &str, case: &Case) -> UpstreamRepro {
    UpstreamRepro {
        test_case_line: format!(
            "test_cases.emplace_back(new {ctor}({}, {}));",
            case.dtype.ggml_type(),
            cpp_ne(&case.ne)
        ),
        op_name: op.to_string(),
        vars: format!("type={},ne={}", case.dtype, vars_ne(&case.ne)),
    }
}

// ---- unary ops -----------------------------------------------------------------------------

/// test_unary(op, type, ne_a, v): `GELU(type=f32,ne_a=[...],v=0)`.
fn unary_line(case: &Case, op: &str) -> UpstreamRepro {
    UpstreamRepro {
        test_case_line: format!(
            "test_cases.emplace_back(new test_unary(GGML_UNARY_OP_{op}, {}, {}, 0));",
            case.dtype.ggml_type(),
            cpp_ne(&case.ne)
        ),
        op_name: op.to_string(),
        vars: format!("type={},ne_a={},v=0", case.dtype, vars_ne(&case.ne)),
    }
}

macro_rules! unary_entry {
    ($name:literal, $op:literal, $method:ident, $about:literal) => {
        GgmlOpEntry {
            name: $name,
            upstream: $op,
            about: $about,
            dtypes: &[DType::F32, DType::F16],
            params: &[],
            tensors: same_shape,
            inputs: None,
            graph: {
                fn g(g: &mut Graph, _c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
                    Ok(vec![g.unary(x[0], kedge_ggml::UnaryOp::$method)?])
                }
                g
            },
            probe: elementwise_probe,
            smoke: &[[128, 2, 2, 2], [5, 7, 3, 1], [1, 1, 1, 1]],
            boundaries: none,
            upstream_line: {
                fn l(c: &Case) -> UpstreamRepro {
                    unary_line(c, $op)
                }
                l
            },
            nmse: 1e-7,
            reach: no_reach,
        }
    };
}

/// Every declared op.
pub static TABLE: &[GgmlOpEntry] = &[
    unary_entry!(
        "gelu",
        "GELU",
        Gelu,
        "GELU (tanh approximation), elementwise (ggml UNARY GELU)"
    ),
    unary_entry!(
        "silu",
        "SILU",
        Silu,
        "SiLU x*sigmoid(x), elementwise (ggml UNARY SILU)"
    ),
];
