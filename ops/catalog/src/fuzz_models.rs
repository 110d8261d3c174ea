//! Independent models of ops' outputs for the `reference_vs_naive` fuzz target: each written
//! from the op's definition, reading inputs through their byte strides, sharing no code with
//! the op's reference. A new op adds one entry to `naive_models`.

use kedge_core::model::host::HostTensor;
use kedge_core::{Case, OpParams};

/// A naive model of one op.
pub struct NaiveModel {
    /// The op's registry name (`rms_norm`); a model whose op this build lacks is left out.
    pub op: &'static str,
    /// The outputs for a validated case and the op's inputs, in f64, one `Vec` per output in
    /// the op's order (as `Op::reference` returns them).
    pub eval: fn(&Case, &[HostTensor]) -> Vec<Vec<f64>>,
}

/// Element `i` of a float tensor, decoded from its bytes by its dtype.
fn read(t: &HostTensor, i: [usize; 4]) -> f64 {
    let off: u64 = (0..4).map(|k| i[k] as u64 * t.nb[k]).sum();
    let b = &t.bytes[off as usize..];
    match t.dtype {
        kedge_core::DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
        kedge_core::DType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        _ => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
    }
}

/// Every row of `x` (in logical order) through `f`.
fn rows(case: &Case, x: &HostTensor, mut f: impl FnMut(&[f64], &mut Vec<f64>)) -> Vec<f64> {
    let [n0, n1, n2, n3] = case.ne.map(|v| v as usize);
    let mut out = Vec::with_capacity(n0 * n1 * n2 * n3);
    let mut row = Vec::with_capacity(n0);
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                row.clear();
                row.extend((0..n0).map(|i0| read(x, [i0, i1, i2, i3])));
                f(&row, &mut out);
            }
        }
    }
    out
}

fn naive_rms_norm(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let eps = crate::rms_norm::RmsNormParams::of(case).eps;
    vec![rows(case, &inputs[0], |x, out| {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let rms = (ms + eps).sqrt();
        out.extend(x.iter().map(|v| v / rms));
    })]
}

fn naive_norm(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let eps = crate::norm::NormParams::of(case).eps;
    vec![rows(case, &inputs[0], |x, out| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let d = (var + eps).sqrt();
        out.extend(x.iter().map(|v| (v - mean) / d));
    })]
}

fn naive_l2_norm(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let eps = crate::l2_norm::L2NormParams::of(case).eps;
    vec![rows(case, &inputs[0], |x, out| {
        let d = x.iter().map(|v| v * v).sum::<f64>().sqrt().max(eps);
        out.extend(x.iter().map(|v| v / d));
    })]
}

fn naive_zoo_rows(case: &Case, inputs: &[HostTensor]) -> Vec<Vec<f64>> {
    let mut r = 0usize;
    vec![rows(case, &inputs[0], |x, out| {
        out.extend(x.iter().map(|v| v * 2.0 + r as f64));
        r += 1;
    })]
}

/// The naive models of the ops this build has.
pub fn naive_models() -> Vec<NaiveModel> {
    let ops: Vec<&str> = crate::all_ops().iter().map(|o| o.name()).collect();
    let all = vec![
        NaiveModel {
            op: "rms_norm",
            eval: naive_rms_norm,
        },
        NaiveModel {
            op: "norm",
            eval: naive_norm,
        },
        NaiveModel {
            op: "l2_norm",
            eval: naive_l2_norm,
        },
        NaiveModel {
            op: "zoo_rows",
            eval: naive_zoo_rows,
        },
    ];
    all.into_iter().filter(|m| ops.contains(&m.op)).collect()
}
