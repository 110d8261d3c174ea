//! Ops as data (PyTorch's OpInfo): one entry holds the reference, the dtypes, the params, the
//! impls, the boundaries and the upstream repro format. The engine knows nothing op-specific.

use crate::case::Case;
use crate::compare::Tolerance;
use crate::device::{RunCtx, RunError};
use crate::error::CaseError;
use crate::host::HostTensor;
use crate::launch::{Plan, ReproArg};
use crate::limits::LimitsProfile;
use crate::params::{ParamSpec, Params};
use crate::rng::Rng;
use crate::shape::{dense_strides, span_bytes, Ne};
use crate::verdict::Detector;
use crate::DType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Input,
    Output,
}

/// One tensor of a case, as the device will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub role: Role,
    pub dtype: DType,
    pub ne: Ne,
    /// Byte strides (ggml `nb`); may describe a padded, non-contiguous view.
    pub nb: [u64; 4],
    /// Bytes the allocation must hold (the view's span).
    pub bytes: u64,
}

impl TensorSpec {
    pub fn dense(name: &str, role: Role, dtype: DType, ne: Ne) -> Result<Self, CaseError> {
        let nb = dense_strides(&ne, dtype);
        Self::strided(name, role, dtype, ne, nb)
    }
    pub fn strided(
        name: &str,
        role: Role,
        dtype: DType,
        ne: Ne,
        nb: [u64; 4],
    ) -> Result<Self, CaseError> {
        let bytes = span_bytes(&ne, &nb, dtype)?;
        Ok(TensorSpec {
            name: name.to_string(),
            role,
            dtype,
            ne,
            nb,
            bytes,
        })
    }
    pub fn nelements(&self) -> u64 {
        self.ne.iter().map(|&x| x as u64).product()
    }
}

/// What an impl is, so reports and selftest can tell the upstream launch path from its fix
/// and from calibration impls with a planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImplRole {
    /// Launches the way the upstream project ships it today.
    Upstream,
    /// The fixed launch.
    Fixed,
    /// Calibration: a deliberately planted bug and the detectors that must see it.
    Planted {
        bug: &'static str,
        expect: &'static [Detector],
    },
    /// Not kedge's code: a user's plugin (C ABI) or NVRTC source kernel, added at run time.
    External,
}

impl ImplRole {
    pub fn name(&self) -> &'static str {
        match self {
            ImplRole::Upstream => "upstream",
            ImplRole::Fixed => "fixed",
            ImplRole::Planted { .. } => "planted",
            ImplRole::External => "external",
        }
    }
}

/// One device implementation of an op.
pub trait Impl: Send + Sync {
    fn name(&self) -> &'static str;
    fn role(&self) -> ImplRole;
    fn about(&self) -> &'static str;
    /// Every launch this impl will issue for the case, before any is issued. `Err` is a clear
    /// refusal (verdict `unsupported`).
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String>;
    /// Issue the plan on the device. Tensors are allocated, inputs uploaded and outputs
    /// poisoned by the engine; the impl launches through `ctx` so every launch is checked.
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError>;
    /// The argument list of each planned launch (same order as `plan.launches`), as data, so
    /// `kedge repro` can write a standalone `.cu` that launches exactly what `run` launches.
    /// `None` (the default): this impl cannot be reproduced outside kedge (a library call, a
    /// plugin), and the repro says so.
    fn args_for_repro(&self, _case: &Case, _plan: &Plan) -> Option<Vec<Vec<ReproArg>>> {
        None
    }
}

/// Which real workload puts a boundary value there, or that none is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach(pub &'static str);

impl Reach {
    pub const SYNTHETIC: Reach = Reach("synthetic: no known model reaches it");
}

/// The axis a boundary moves.
#[derive(Debug, Clone, PartialEq)]
pub enum Axis {
    Ne(usize),
    Param(&'static str),
}

/// A value where behaviour may change. The generator probes `at - 1`, `at`, `at + 1`
/// (or the explicit `values`), on `base` for the other dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Boundary {
    pub label: String,
    pub axis: Axis,
    pub at: i64,
    /// Explicit probe values instead of at-1, at, at+1 (still both sides of `at`).
    pub values: Vec<i64>,
    pub base: Ne,
    pub params: Params,
    pub dtype: Option<DType>,
    /// Only these impls (empty: all impls of the op).
    pub impls: Vec<&'static str>,
    pub reach: Reach,
}

impl Boundary {
    pub fn ne(label: impl Into<String>, dim: usize, at: i64, base: Ne, reach: Reach) -> Self {
        Boundary {
            label: label.into(),
            axis: Axis::Ne(dim),
            at,
            values: Vec::new(),
            base,
            params: Params::new(),
            dtype: None,
            impls: Vec::new(),
            reach,
        }
    }
    pub fn param(
        label: impl Into<String>,
        name: &'static str,
        at: i64,
        base: Ne,
        reach: Reach,
    ) -> Self {
        Boundary {
            axis: Axis::Param(name),
            ..Boundary::ne(label, 0, at, base, reach)
        }
    }
    pub fn with_param(mut self, name: &str, v: impl Into<serde_json::Value>) -> Self {
        self.params.insert(name.to_string(), v.into());
        self
    }
    pub fn with_values(mut self, values: Vec<i64>) -> Self {
        self.values = values;
        self
    }
    pub fn only(mut self, impls: &[&'static str]) -> Self {
        self.impls = impls.to_vec();
        self
    }
    pub fn probe_values(&self) -> Vec<i64> {
        if self.values.is_empty() {
            vec![self.at - 1, self.at, self.at + 1]
        } else {
            self.values.clone()
        }
    }
}

/// A line for upstream's own test suite.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamRepro {
    /// e.g. `test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-6f));`
    pub test_case_line: String,
    /// test-backend-ops `-o` name, e.g. `RMS_NORM`.
    pub op_name: String,
    /// The case's `vars()` string, e.g. `type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0`.
    pub vars: String,
}

/// An op: reference, dtypes, params, impls, boundaries and upstream repro format together.
pub trait Op: Send + Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn dtypes(&self) -> &'static [DType];
    fn params(&self) -> &'static [ParamSpec];
    fn impls(&self) -> Vec<&'static dyn Impl>;
    /// The case's tensors: inputs first, then outputs. Errors here are bad input.
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError>;
    /// Random, never all-zero inputs (one per input spec, in order).
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        Ok(random_inputs(case.seed, specs))
    }
    /// f64 reference, one vector per output in logical order.
    fn reference(&self, case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError>;
    fn tolerance(&self, case: &Case) -> Tolerance {
        Tolerance::for_dtype(case.dtype)
    }
    /// Boundaries for a device profile.
    fn boundaries(&self, limits: &LimitsProfile) -> Vec<Boundary>;
    /// Small shapes every impl must pass.
    fn smoke(&self) -> Vec<(Ne, Params)>;
    /// test-backend-ops line and vars for this case, if upstream has the op.
    fn upstream(&self, case: &Case) -> Option<UpstreamRepro>;
    /// Reachability of a specific case beyond its boundary's note (default: none).
    fn reach(&self, _case: &Case) -> Option<String> {
        None
    }
    /// What the case's allocation layout can hide (e.g. a pool with slack). Default: none.
    fn alloc_note(&self, _case: &Case) -> Option<String> {
        None
    }
    /// Rough multiply-adds of the f64 reference, so a CPU-only sweep can leave out the
    /// references it could not finish (attention is quadratic in L, a GEMM is K·M·N).
    /// Default: the product of `ne`.
    fn reference_work(&self, case: &Case) -> u64 {
        case.ne
            .iter()
            .fold(1u64, |a, &x| a.saturating_mul(x.max(0) as u64))
    }
}

/// Uniform [-1, 1) floats (never all zero), per tensor from its own stream. Integer tensors
/// get values in [0, 16).
pub fn random_inputs(seed: u64, specs: &[TensorSpec]) -> Vec<HostTensor> {
    specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, s)| random_tensor(seed, i as u64, s, -1.0, 1.0))
        .collect()
}

/// Fill a (possibly strided) tensor's span; padding bytes get values too, so a kernel that
/// reads padding reads plausible numbers (that is what a real engine's memory holds).
pub fn random_tensor(seed: u64, index: u64, s: &TensorSpec, lo: f32, hi: f32) -> HostTensor {
    let mut rng = Rng::stream(seed, index);
    let n = (s.bytes / s.dtype.size()) as usize;
    let vals: Vec<f32> = match s.dtype {
        DType::I32 | DType::U8 => (0..n).map(|_| rng.below(16) as f32).collect(),
        _ => (0..n).map(|_| rng.uniform(lo, hi)).collect(),
    };
    let mut t = HostTensor::from_f32(s.dtype, [n as i64, 1, 1, 1], &vals);
    t.ne = s.ne;
    t.nb = s.nb;
    t
}

/// All ops kedge knows, by name.
pub struct Registry {
    ops: Vec<&'static dyn Op>,
    /// Impls added at run time (plugins, NVRTC source impls), by op name.
    extra: Vec<(String, &'static dyn Impl)>,
}

impl Registry {
    pub fn new(ops: Vec<&'static dyn Op>) -> Self {
        Registry {
            ops,
            extra: Vec::new(),
        }
    }
    /// Add an impl of `op` that is not built in (a plugin's, an NVRTC source kernel's).
    /// It is leaked: impls live for the whole process, like the built-in statics.
    pub fn add_impl(&mut self, op: &str, imp: Box<dyn Impl>) -> Result<(), CaseError> {
        self.op(op)?;
        self.extra.push((op.to_string(), Box::leak(imp)));
        Ok(())
    }
    /// Built-in and added impls of an op.
    pub fn impls_of(&self, op: &dyn Op) -> Vec<&'static dyn Impl> {
        let mut v = op.impls();
        v.extend(
            self.extra
                .iter()
                .filter(|(o, _)| o == op.name())
                .map(|(_, i)| *i),
        );
        v
    }
    pub fn ops(&self) -> &[&'static dyn Op] {
        &self.ops
    }
    pub fn op(&self, name: &str) -> Result<&'static dyn Op, CaseError> {
        self.ops
            .iter()
            .copied()
            .find(|o| o.name() == name)
            .ok_or_else(|| CaseError::UnknownOp {
                op: name.to_string(),
                known: self
                    .ops
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
    pub fn imp(&self, op: &'static dyn Op, name: &str) -> Result<&'static dyn Impl, CaseError> {
        let impls = self.impls_of(op);
        impls
            .iter()
            .copied()
            .find(|i| i.name() == name)
            .ok_or_else(|| CaseError::UnknownImpl {
                op: op.name().to_string(),
                imp: name.to_string(),
                known: impls
                    .iter()
                    .map(|i| i.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
    /// Op and impl of a case, validated.
    pub fn resolve(&self, case: &Case) -> Result<(&'static dyn Op, &'static dyn Impl), CaseError> {
        let op = self.op(&case.op)?;
        let imp = self.imp(op, &case.imp)?;
        Ok((op, imp))
    }
}
