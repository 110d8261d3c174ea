//! Shared geometry of ggml's row ops (norm, rms_norm, l2_norm, softmax, cumsum): one row of
//! ne0 elements per block, rows indexed by (ne1, ne2, ne3), input rows optionally padded so
//! the input is a non-contiguous view (test-backend-ops' `v=1`).

use kedge_core::model::shape::dense_strides;
use kedge_core::{Case, CaseError, DType, Kernel, KernelArg, OpParams, Refusal, Role, TensorSpec};

kedge_core::params! {
    /// The parameter every row op takes: extra elements at the end of each input row, so the
    /// input is a non-contiguous view (test-backend-ops v=1).
    pub(crate) struct RowParams {
        row_pad: int(0..=4096) = 0, "extra elements after each input row: a non-contiguous view (test-backend-ops v=1)";
    }
}

/// Where a row op's rows lie, in elements: `ncols` per row, rows indexed by (ne1, ne2, ne3),
/// input rows `row_pad` elements apart beyond their length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    /// Elements per row: `ne[0]` (ggml's `ne00`).
    pub ncols: i64,
    pub(crate) nrows: i64,
    pub(crate) nchannels: i64,
    pub(crate) nsamples: i64,
    /// Input strides in elements (row, channel, sample).
    pub(crate) stride_row: i64,
    pub(crate) stride_channel: i64,
    pub(crate) stride_sample: i64,
}

impl RowLayout {
    /// The layout of a row op's case: its shape and its `row_pad` parameter.
    pub fn of(case: &Case) -> RowLayout {
        let [n0, n1, n2, n3] = case.ne;
        let pad = RowParams::of(case).row_pad;
        let sr = n0 + pad;
        RowLayout {
            ncols: n0,
            nrows: n1,
            nchannels: n2,
            nsamples: n3,
            stride_row: sr,
            stride_channel: sr * n1,
            stride_sample: sr * n1 * n2,
        }
    }
    /// Rows in the tensor, ne1 · ne2 · ne3 (ggml's `ggml_nrows`).
    pub fn total_rows(&self) -> i64 {
        self.nrows * self.nchannels * self.nsamples
    }
    /// ne00..ne03 as the row kernels take them (`long long`).
    pub(crate) fn extent_args(&self) -> [KernelArg; 4] {
        [
            KernelArg::I64(self.ncols),
            KernelArg::I64(self.nrows),
            KernelArg::I64(self.nchannels),
            KernelArg::I64(self.nsamples),
        ]
    }
    /// The input's row, channel and sample strides in elements, as the row kernels take them.
    pub(crate) fn stride_args(&self) -> [KernelArg; 3] {
        [
            KernelArg::I64(self.stride_row),
            KernelArg::I64(self.stride_channel),
            KernelArg::I64(self.stride_sample),
        ]
    }
}

/// Input `x` (padded rows if `row_pad` > 0) and dense output `dst`, both of the case's dtype.
pub(crate) fn row_tensors(case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    // The padded strides must fit in i64 before RowLayout computes them (found by the
    // `case_line` fuzz target: ne = [1, 2^31, 2^30, 1] with row_pad 4096 overflowed).
    let overflow = || CaseError::ByteCountOverflow {
        ne: case.ne,
        dtype: case.dtype,
    };
    let pad = RowParams::of(case).row_pad;
    case.ne[0]
        .checked_add(pad)
        .and_then(|sr| sr.checked_mul(case.ne[1]))
        .and_then(|v| v.checked_mul(case.ne[2]))
        .and_then(|v| v.checked_mul(case.ne[3]))
        .and_then(|v| v.checked_mul(case.dtype.size() as i64))
        .ok_or_else(overflow)?;
    let l = RowLayout::of(case);
    let es = case.dtype.size();
    let mut nb = dense_strides(&case.ne, case.dtype);
    nb[1] = l.stride_row as u64 * es;
    nb[2] = l.stride_channel as u64 * es;
    nb[3] = l.stride_sample as u64 * es;
    Ok(vec![
        TensorSpec::strided("x", Role::Input, case.dtype, case.ne, nb)?,
        TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
    ])
}

/// Apply `f` to every row of `x` (logical order), writing rows of the dense output.
/// Rows are independent, so this runs in parallel for large shapes.
pub(crate) fn map_rows(
    x: &kedge_core::model::host::HostTensor,
    f: impl Fn(&[f64], &mut [f64]) + Sync,
) -> Vec<f64> {
    map_rows_at(x, |_, row, dst| f(row, dst))
}

/// [`map_rows`], with each row's flat row number (`i1 + ne1 * (i2 + ne2 * i3)`) passed first.
pub(crate) fn map_rows_at(
    x: &kedge_core::model::host::HostTensor,
    f: impl Fn(usize, &[f64], &mut [f64]) + Sync,
) -> Vec<f64> {
    let [n0, n1, n2, n3] = x.ne.map(|v| v as usize);
    let mut out = kedge_core::model::host::zeroed_f64(n0 * n1 * n2 * n3);
    par_rows(&mut out, n0, |row, r, dst| {
        x.row_f64(r % n1, (r / n1) % n2, r / (n1 * n2), row);
        f(r, row, dst);
    });
    out
}

/// `f(scratch, r, row)` for every row `r` of `n0` elements of `out`, in parallel. Short rows
/// are handed out several at a time (one task per 16-element row of a 2^32-element tensor was
/// most of tri's reference time); each task has a scratch row of `n0` elements.
pub(crate) fn par_rows(
    out: &mut [f64],
    n0: usize,
    f: impl Fn(&mut Vec<f64>, usize, &mut [f64]) + Sync,
) {
    use rayon::prelude::*;
    let n0 = n0.max(1);
    let per_task = (4096 / n0).max(1);
    out.par_chunks_mut(n0 * per_task).enumerate().for_each_init(
        || vec![0.0f64; n0],
        |scratch, (t, rows)| {
            for (k, row) in rows.chunks_mut(n0).enumerate() {
                f(scratch, t * per_task + k, row);
            }
        },
    );
}

pub(crate) const F32_ONLY: &[DType] = &[DType::F32];

/// The float types kedge's row ops take: f32 first (the one cases default to), then f16 and
/// bf16. Their kernels load the element type, compute in f32 and store the element type
/// (ops/catalog/src/elem.cuh).
pub(crate) const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::Bf16];

/// A kernel entry in each element type of [`FLOATS`]: the f32 entry `NAME` and its twins
/// `NAME_f16` and `NAME_bf16`, the same template instantiated for `kedge_f16` and `kedge_bf16`
/// (ops/catalog/src/elem.cuh). Built with [`typed!`](crate::rows::typed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Typed {
    /// The source file (its entry unused).
    pub(crate) src: Kernel,
    /// The f32, f16 and bf16 entries.
    pub(crate) entries: [&'static str; 3],
}

impl Typed {
    /// The entry for a case's element type; another type is refused, naming the ones there are.
    pub(crate) fn kernel(&self, dtype: DType) -> Result<Kernel, Refusal> {
        match FLOATS.iter().position(|&d| d == dtype) {
            Some(i) => Ok(self.src.entry(self.entries[i])),
            None => Err(format!(
                "{} has no {dtype} instantiation (it has f32, f16 and bf16)",
                self.entries[0]
            )
            .into()),
        }
    }
}

/// `typed!(SRC, "rms_norm_ggml_256")`: the entry and its `_f16` and `_bf16` twins in `SRC`.
macro_rules! typed {
    ($src:expr, $entry:literal) => {
        $crate::rows::Typed {
            src: $src,
            entries: [$entry, concat!($entry, "_f16"), concat!($entry, "_bf16")],
        }
    };
}
pub(crate) use typed;

/// A row op's kernel source: ops/catalog/src/elem.cuh (the element types) followed by the op's own
/// `.cu` file, as one NVRTC program (and one block of text in a standalone repro). Used like
/// `kedge_core::kernel_source!`, from a module one directory below ops/src.
macro_rules! row_kernel_source {
    ($name:ident = $file:literal, $rel:literal) => {
        const $name: kedge_core::Kernel = kedge_core::Kernel {
            file: $file,
            source: concat!(include_str!("../elem.cuh"), include_str!($rel)),
            entry: "",
        };
    };
}
pub(crate) use row_kernel_source;

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::contract::op::random_tensor;

    #[test]
    fn rows_keep_their_numbers_across_tasks() {
        // 3-element rows, 9,000 of them: several tasks of 1,365 rows and a short last one;
        // strided, so a row is gathered through `nb`.
        let spec = TensorSpec::strided(
            "x",
            Role::Input,
            DType::F32,
            [3, 5, 600, 3],
            [4, 16, 80, 48_000],
        )
        .expect("spec");
        let x = random_tensor(3, 0, &spec, -1.0, 1.0);
        let out = map_rows_at(&x, |r, row, dst| {
            for (d, v) in dst.iter_mut().zip(row) {
                *d = v + r as f64 * 10.0;
            }
        });
        let mut want = Vec::new();
        for r in 0..9000usize {
            let (i1, i2, i3) = (r % 5, (r / 5) % 600, r / 3000);
            for i0 in 0..3 {
                want.push(x.get(i0, i1, i2, i3) + r as f64 * 10.0);
            }
        }
        assert_eq!(out, want);
        assert_eq!(
            map_rows(&x, |row, dst| dst.copy_from_slice(row)),
            x.to_f64()
        );
    }
}
