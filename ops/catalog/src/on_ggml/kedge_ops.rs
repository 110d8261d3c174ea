//! kedge's own ops as ggml graphs, from the same tensors kedge's impls see.

use super::GraphFn;
use kedge_core::OpParams;
use kedge_core::*;
use kedge_ggml::{Graph, GraphError, Tensor};

fn rms_norm(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    Ok(vec![g.rms_norm(
        x[0],
        crate::rms_norm::RmsNormParams::of(c).eps as f32,
    )?])
}

fn norm(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    Ok(vec![
        g.norm(x[0], crate::norm::NormParams::of(c).eps as f32)?
    ])
}

fn l2_norm(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    Ok(vec![g.l2_norm(
        x[0],
        crate::l2_norm::L2NormParams::of(c).eps as f32,
    )?])
}

/// x, w, b: `add(mul(rms_norm(x), w), b)`, the graph ggml fuses into one kernel.
fn rms_norm_mul_add(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    let eps = crate::rms_norm_mul_add::RmsNormMulAddParams::of(c).eps as f32;
    let n = g.rms_norm(x[0], eps)?;
    let m = g.mul(n, x[1])?;
    Ok(vec![g.add(m, x[2])?])
}

/// x [, mask]: `soft_max_ext(x, mask, scale, max_bias)`.
fn softmax(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    let p = crate::softmax::SoftmaxParams::of(c);
    let mask = if p.mask { x.get(1).copied() } else { None };
    Ok(vec![g.soft_max_ext(
        x[0],
        mask,
        p.scale as f32,
        p.max_bias as f32,
    )?])
}

fn cumsum(g: &mut Graph, _c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    Ok(vec![g.cumsum(x[0])?])
}

fn tri(g: &mut Graph, c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    use kedge_ggml::TriType;
    let kind = match crate::tri::TriParams::of(c).mode {
        "lower_diag" => TriType::LowerDiag,
        "upper" => TriType::Upper,
        "upper_diag" => TriType::UpperDiag,
        _ => TriType::Lower,
    };
    Ok(vec![g.tri(x[0], kind)?])
}

/// a, b, ids (a view of [n_experts, n_tokens] when fewer experts are used): `add_id`.
fn add_id(g: &mut Graph, _c: &Case, x: &[Tensor]) -> Result<Vec<Tensor>, GraphError> {
    Ok(vec![g.add_id(x[0], x[1], x[2])?])
}

/// The dtypes ggml computes kedge's ops in: f32. ggml-cpu's forward functions for all eight
/// switch on `GGML_TYPE_F32` and abort otherwise, ggml-cuda asserts f32 the same way, and
/// test-backend-ops declares them in f32 only; yet both backends' `supports_op` accept any type.
/// kedge's f16/bf16 cases of these ops run on kedge's own kernels, not on ggml's.
pub(crate) const GGML_DTYPES: &[DType] = &[DType::F32];

/// Each of kedge's ops that ggml has, with its graph.
pub(crate) fn graphs() -> Vec<(&'static str, GraphFn)> {
    vec![
        ("rms_norm", rms_norm as GraphFn),
        ("rms_norm_mul_add", rms_norm_mul_add),
        ("norm", norm),
        ("l2_norm", l2_norm),
        ("softmax", softmax),
        ("cumsum", cumsum),
        ("tri", tri),
        ("add_id", add_id),
    ]
}
