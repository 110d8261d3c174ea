//! Every op kedge knows, and the impls added at run time (plugins, source kernels, a ggml
//! build's backends). Names resolve here, in kedge's spelling or ggml's.

use crate::contract::imp::Impl;
use crate::contract::op::Op;
use crate::error::CaseError;
use crate::model::case::Case;
use crate::model::params::check_params;
use crate::model::shape::nbytes;

/// All ops kedge knows, by name.
pub struct Registry {
    ops: Vec<&'static dyn Op>,
    /// Impls added at run time (plugins, NVRTC source impls), by op name.
    extra: Vec<(String, &'static dyn Impl)>,
}

impl Registry {
    /// A registry of these ops, each with its own impls.
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
    /// Every op, in registration order.
    pub fn ops(&self) -> &[&'static dyn Op] {
        &self.ops
    }
    /// Ops a name selects: kedge's name, or ggml's spelling (`RMS_NORM`, case-insensitive),
    /// which repro lines print and test-backend-ops' `-o` takes.
    pub fn ops_named(&self, name: &str) -> Vec<&'static dyn Op> {
        if let Some(o) = self.ops.iter().copied().find(|o| o.name() == name) {
            return vec![o];
        }
        self.ops
            .iter()
            .copied()
            .filter(|o| {
                o.name().eq_ignore_ascii_case(name)
                    || o.upstream_name()
                        .is_some_and(|u| u.eq_ignore_ascii_case(name))
            })
            .collect()
    }

    /// The one op a name means (see `ops_named`).
    pub fn op(&self, name: &str) -> Result<&'static dyn Op, CaseError> {
        let found = self.ops_named(name);
        match found.as_slice() {
            [one] => return Ok(*one),
            [] => {}
            many => {
                return Err(CaseError::AmbiguousOp {
                    op: name.to_string(),
                    candidates: many.iter().map(|o| o.name()).collect::<Vec<_>>().join(", "),
                })
            }
        }
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
    /// An impl of `op` by name; the error names the known ones.
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
    /// Validate a case: known op (either spelling) and impl, a dtype the op has, shape counts
    /// that fit, known parameters with good values. Returns the canonical case: kedge's op
    /// name, every parameter's default filled.
    pub fn validate(&self, case: &Case) -> Result<Case, CaseError> {
        let op = self.op(&case.op)?;
        self.imp(op, &case.imp)?;
        if !op.dtypes().contains(&case.dtype) {
            return Err(CaseError::UnsupportedDtype {
                op: op.name().to_string(),
                dtype: case.dtype,
                known: op
                    .dtypes()
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        nbytes(&case.ne, case.dtype)?;
        let mut out = case.clone();
        out.op = op.name().to_string();
        out.params = check_params(op.name(), op.params(), &case.params)?;
        // Op-specific checks (byte counts of every tensor, ids in range).
        op.tensors(&out)?;
        Ok(out)
    }

    /// Op and impl of a case, validated.
    pub fn resolve(&self, case: &Case) -> Result<(&'static dyn Op, &'static dyn Impl), CaseError> {
        let op = self.op(&case.op)?;
        let imp = self.imp(op, &case.imp)?;
        Ok((op, imp))
    }
}
