//! Shared geometry of ggml's row ops (norm, rms_norm, l2_norm, softmax, cumsum): one row of
//! ne0 elements per block, rows indexed by (ne1, ne2, ne3), input rows optionally padded so
//! the input is a non-contiguous view (test-backend-ops' `v=1`).

use kedge_core::params::ParamsExt;
use kedge_core::shape::dense_strides;
use kedge_core::{Case, CaseError, DType, Role, TensorSpec};

/// Parameter every row op takes: extra elements at the end of each input row.
pub const ROW_PAD: kedge_core::ParamSpec = kedge_core::ParamSpec::int(
    "row_pad",
    0,
    0,
    4096,
    "extra elements after each input row: a non-contiguous view (test-backend-ops v=1)",
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    pub ncols: i64,
    pub nrows: i64,
    pub nchannels: i64,
    pub nsamples: i64,
    /// Input strides in elements (row, channel, sample).
    pub stride_row: i64,
    pub stride_channel: i64,
    pub stride_sample: i64,
}

impl RowLayout {
    pub fn of(case: &Case) -> RowLayout {
        let [n0, n1, n2, n3] = case.ne;
        let pad = case.params.i64_or("row_pad", 0);
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
    pub fn total_rows(&self) -> i64 {
        self.nrows * self.nchannels * self.nsamples
    }
}

/// Input `x` (padded rows if `row_pad` > 0) and dense output `dst`, both of the case's dtype.
pub fn row_tensors(case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
    // The padded strides must fit in i64 before RowLayout computes them (found by the
    // `case_line` fuzz target: ne = [1, 2^31, 2^30, 1] with row_pad 4096 overflowed).
    let overflow = || CaseError::ByteCountOverflow {
        ne: case.ne,
        dtype: case.dtype,
    };
    let pad = case.params.i64_or("row_pad", 0);
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
pub fn map_rows(
    x: &kedge_core::host::HostTensor,
    f: impl Fn(&[f64], &mut [f64]) + Sync,
) -> Vec<f64> {
    use rayon::prelude::*;
    let [n0, n1, n2, n3] = x.ne.map(|v| v as usize);
    let mut out = vec![0.0f64; n0 * n1 * n2 * n3];
    out.par_chunks_mut(n0).enumerate().for_each_init(
        || vec![0.0f64; n0],
        |row, (r, dst)| {
            let i1 = r % n1;
            let i2 = (r / n1) % n2;
            let i3 = r / (n1 * n2);
            for (i0, v) in row.iter_mut().enumerate() {
                *v = x.get(i0, i1, i2, i3);
            }
            f(row, dst);
        },
    );
    out
}

/// ggml's float formatting in `vars()` for eps: `%f`-like with 6 decimals.
pub fn ggml_float(x: f64) -> String {
    format!("{x:.6}")
}

/// test-backend-ops' ne list: `{64, 1, 65536, 1}`.
pub fn cpp_ne(ne: &[i64; 4]) -> String {
    format!("{{{}, {}, {}, {}}}", ne[0], ne[1], ne[2], ne[3])
}

/// vars()' ne: `[64,1,65536,1]`.
pub fn vars_ne(ne: &[i64; 4]) -> String {
    format!("[{},{},{},{}]", ne[0], ne[1], ne[2], ne[3])
}

/// A C float literal for test-backend-ops constructors: `1e-6f`, `0.5f`.
pub fn cpp_float(x: f64) -> String {
    let s = format!("{x:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    if e == 0 {
        let m = if m.contains('.') {
            m.to_string()
        } else {
            format!("{m}.0")
        };
        format!("{m}f")
    } else if (-3..=3).contains(&e) && x.abs() >= 1e-3 {
        let v = format!("{x}");
        let v = if v.contains('.') { v } else { format!("{v}.0") };
        format!("{v}f")
    } else {
        format!("{m}e{e}f")
    }
}

pub const F32_ONLY: &[DType] = &[DType::F32];

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cpp_floats() {
        assert_eq!(cpp_float(1e-6), "1e-6f");
        assert_eq!(cpp_float(1e-5), "1e-5f");
        assert_eq!(cpp_float(0.5), "0.5f");
        assert_eq!(cpp_float(1.0), "1.0f");
        assert_eq!(ggml_float(1e-6), "0.000001");
    }
}
