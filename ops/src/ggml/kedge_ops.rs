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

/// Each of kedge's ops that ggml has, with its graph.
pub fn graphs() -> Vec<(&'static str, GraphFn)> {
    vec![
        ("rms_norm", rms_norm as GraphFn),
        ("norm", norm),
        ("l2_norm", l2_norm),
    ]
}
