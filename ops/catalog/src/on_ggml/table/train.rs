//! Training ops: CROSS_ENTROPY_LOSS and its gradient, the optimizer steps OPT_STEP_ADAMW and
//! OPT_STEP_SGD (in place on the parameter, as ggml makes them).

use super::elementwise::type_ne_line;
use super::*;

/// A row op over logits: rows of 64, every dimension above free; `ne0` probed across the
/// shared-memory limits (cross-entropy-loss.cu stages a row in shared memory when it fits).
fn logits_probe() -> Option<ProbeBase> {
    Some(ProbeBase::rows([64, 1, 1, 1]))
}

/// `row` made its softmax in place (max subtracted first, as ggml does).
fn softmax_in_place(row: &mut [f64]) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
}

/// The number of rows of a case's logits and their length.
fn logit_rows(x: &HostTensor) -> (usize, usize) {
    let n = x.ne.map(|n| n.max(0) as usize);
    (n[1] * n[2] * n[3], n[0])
}

/// CROSS_ENTROPY_LOSS in f64 on every core: -(1 / rows) times the sum over rows of
/// softmax(labels) · log_softmax(logits), the labels' softmax being the graph's. ggml's CPU
/// backend sums each thread's rows in one f32, so at millions of rows its own rounding is not
/// small beside test-backend-ops' 1e-7 and depends on its thread count; a case of 2^29 values
/// spent 6.4 s of 7.6 s in it on the GPU machine.
fn cross_entropy_loss_f64(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let [logits, labels] = inputs else {
        return Err(bad(c, "cross_entropy_loss has logits and labels"));
    };
    let (rows, n0) = logit_rows(logits);
    let sum = (0..rows)
        .into_par_iter()
        .with_min_len(1024)
        .map_init(
            || (vec![0f64; n0], vec![0f64; n0]),
            |(l, y), r| {
                logits.flat_row_f64(r, l);
                labels.flat_row_f64(r, y);
                softmax_in_place(y);
                let max = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let log_sum = l.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                l.iter()
                    .zip(y.iter())
                    .map(|(v, p)| (v - max - log_sum) * p)
                    .sum::<f64>()
            },
        )
        .sum::<f64>();
    Ok(vec![vec![-sum / rows.max(1) as f64]])
}

/// CROSS_ENTROPY_LOSS_BACK in f64 on every core: (softmax(logits) - softmax(labels)) times
/// grad / rows, row by row.
fn cross_entropy_loss_back_f64(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let [grad, logits, labels] = inputs else {
        return Err(bad(
            c,
            "cross_entropy_loss_back has grad, logits and labels",
        ));
    };
    let (rows, n0) = logit_rows(logits);
    let scale = grad.get(0, 0, 0, 0) / rows.max(1) as f64;
    let mut out = kedge_core::model::host::zeroed_f64(rows * n0);
    if n0 > 0 {
        out.par_chunks_mut(n0)
            .with_min_len(1024)
            .enumerate()
            .for_each_init(
                || vec![0f64; n0],
                |y, (r, d)| {
                    logits.flat_row_f64(r, d);
                    labels.flat_row_f64(r, y);
                    softmax_in_place(d);
                    softmax_in_place(y);
                    for (d, p) in d.iter_mut().zip(y.iter()) {
                        *d = (*d - p) * scale;
                    }
                },
            );
    }
    Ok(vec![out])
}

/// Each training op's host reference, named in every result it judges.
const CROSS_ENTROPY_SOURCE: &str = "kedge's f64 cross-entropy on every core (ggml's CPU backend, test-backend-ops' reference, sums each thread's rows in one f32)";

pub(crate) const CROSS_ENTROPY_LOSS: GgmlOpEntry = GgmlOpEntry {
    name: "cross_entropy_loss",
    upstream: "CROSS_ENTROPY_LOSS",
    about: "the cross-entropy of softmax(logits) against labels made probabilities by a softmax in the graph (test_cross_entropy_loss), one element; a row in shared memory while ne0 * 4 bytes fit, from global memory past it; inputs in [-100, 100) as test-backend-ops draws them",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("logits", c.dtype, c.ne)?,
            input("labels", c.dtype, c.ne)?,
            output("loss", c.dtype, [1, 1, 1, 1])?,
        ])
    },
    inputs: Inputs::Uniform(-100.0, 100.0),
    graph: |g, _c, x| {
        let labels = g.soft_max_ext(x[1], None, 1.0, 0.0)?;
        Ok(vec![g.cross_entropy_loss(x[0], labels)?])
    },
    probe: logits_probe,
    smoke: &[s([10, 5, 4, 3]), s([30000, 1, 1, 1]), s([1, 4, 1, 1])],
    boundaries: none,
    upstream_line: |c| type_ne_line("test_cross_entropy_loss", "CROSS_ENTROPY_LOSS", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: cross_entropy_loss_f64,
        source: CROSS_ENTROPY_SOURCE,
    },
    rows: Rows::Whole,
    reach: no_reach,
};

pub(crate) const CROSS_ENTROPY_LOSS_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "cross_entropy_loss_back",
    upstream: "CROSS_ENTROPY_LOSS_BACK",
    about: "the gradient of cross_entropy_loss: (softmax(logits) - labels) * grad / rows, labels made probabilities by a softmax in the graph; a row in shared memory while it fits",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("grad", DType::F32, [1, 1, 1, 1])?,
            input("logits", c.dtype, c.ne)?,
            input("labels", c.dtype, c.ne)?,
            output("dlogits", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| {
        let labels = g.soft_max_ext(x[2], None, 1.0, 0.0)?;
        Ok(vec![g.cross_entropy_loss_back(x[0], x[1], labels)?])
    },
    probe: logits_probe,
    smoke: &[s([10, 5, 4, 3]), s([30000, 1, 1, 1]), s([1, 4, 1, 1])],
    boundaries: none,
    upstream_line: |c| {
        type_ne_line(
            "test_cross_entropy_loss_back",
            "CROSS_ENTROPY_LOSS_BACK",
            c,
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |_| true,
        compute: cross_entropy_loss_back_f64,
        source: CROSS_ENTROPY_SOURCE,
    },
    // Every row is scaled by 1 / rows: a case of some rows computes other values.
    rows: Rows::Whole,
    reach: no_reach,
};

pub(crate) const OPT_STEP_ADAMW: GgmlOpEntry = GgmlOpEntry {
    name: "opt_step_adamw",
    upstream: "OPT_STEP_ADAMW",
    about: "one AdamW step on the parameter x, in place (the moments m and v updated too), with seven f32 hyperparameters; every input in [0, 1) as test-backend-ops draws them (v and the hyperparameters must not be negative)",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            input("grad", c.dtype, c.ne)?,
            input("m", c.dtype, c.ne)?,
            input("v", c.dtype, c.ne)?,
            input("adamw_params", DType::F32, [7, 1, 1, 1])?,
            output("x_new", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Uniform(0.0, 1.0),
    graph: |g, _c, x| {
        g.set_param(x[0])?;
        Ok(vec![g.opt_step_adamw(x[0], x[1], x[2], x[3], x[4])?])
    },
    probe: elementwise_probe,
    smoke: &[s([10, 5, 4, 3]), s([1, 1, 1, 1]), s([257, 3, 1, 1])],
    boundaries: none,
    upstream_line: |c| type_ne_line("test_opt_step_adamw", "OPT_STEP_ADAMW", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

pub(crate) const OPT_STEP_SGD: GgmlOpEntry = GgmlOpEntry {
    name: "opt_step_sgd",
    upstream: "OPT_STEP_SGD",
    about: "one SGD step with weight decay on the parameter x, in place; every input in [0, 1) as test-backend-ops draws them",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            input("grad", c.dtype, c.ne)?,
            input("sgd_params", DType::F32, [2, 1, 1, 1])?,
            output("x_new", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Uniform(0.0, 1.0),
    graph: |g, _c, x| {
        g.set_param(x[0])?;
        Ok(vec![g.opt_step_sgd(x[0], x[1], x[2])?])
    },
    probe: elementwise_probe,
    smoke: &[s([10, 5, 4, 3]), s([1, 1, 1, 1]), s([257, 3, 1, 1])],
    boundaries: none,
    upstream_line: |c| type_ne_line("test_opt_step_sgd", "OPT_STEP_SGD", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};
