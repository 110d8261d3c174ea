//! Shapes in ggml order: `ne = [ne0, ne1, ne2, ne3]`, ne0 contiguous. One order everywhere,
//! so a repro pastes straight into test-backend-ops.

use crate::error::CaseError;
use crate::model::dtype::DType;

pub use crate::model::ne::{fmt_ne, Ne};

/// Checked element count: every dimension positive, the product fits in u64.
fn nelements(ne: &Ne) -> Result<u64, CaseError> {
    let mut n: u64 = 1;
    for (i, &d) in ne.iter().enumerate() {
        if d <= 0 {
            return Err(CaseError::NonPositiveDim { dim: i, value: d });
        }
        n = n
            .checked_mul(d as u64)
            .ok_or(CaseError::ElementCountOverflow { ne: *ne })?;
    }
    Ok(n)
}

/// Checked byte count of a dense tensor.
pub(crate) fn nbytes(ne: &Ne, dtype: DType) -> Result<u64, CaseError> {
    whole_blocks(ne, dtype)?;
    (nelements(ne)? / dtype.block())
        .checked_mul(dtype.size())
        .ok_or(CaseError::ByteCountOverflow { ne: *ne, dtype })
}

/// A block format's rows must be whole blocks (ggml's own rule).
fn whole_blocks(ne: &Ne, dtype: DType) -> Result<(), CaseError> {
    let block = dtype.block();
    if ne[0] > 0 && !(ne[0] as u64).is_multiple_of(block) {
        return Err(CaseError::PartialBlock {
            ne: *ne,
            dtype,
            block,
        });
    }
    Ok(())
}

/// Dense byte strides `nb` (ggml's `nb[i]`): `nb[0]` is an element's bytes, or a block's for a
/// block format, whose rows are `ne[0] / block` blocks.
pub fn dense_strides(ne: &Ne, dtype: DType) -> [u64; 4] {
    let mut nb = [0u64; 4];
    nb[0] = dtype.size();
    nb[1] = dtype.bytes_of(ne[0].max(0) as u64);
    for i in 2..4 {
        nb[i] = nb[i - 1].saturating_mul(ne[i - 1].max(0) as u64);
    }
    nb
}

/// Bytes spanned by a strided tensor: offset of the last element (of the last block, for a
/// block format) plus one element (block).
pub(crate) fn span_bytes(ne: &Ne, nb: &[u64; 4], dtype: DType) -> Result<u64, CaseError> {
    nelements(ne)?;
    whole_blocks(ne, dtype)?;
    let mut last: u64 = 0;
    for i in 0..4 {
        let steps = if i == 0 {
            ne[0] as u64 / dtype.block()
        } else {
            ne[i] as u64
        };
        last = (steps - 1)
            .checked_mul(nb[i])
            .and_then(|x| x.checked_add(last))
            .ok_or(CaseError::ByteCountOverflow { ne: *ne, dtype })?;
    }
    last.checked_add(dtype.size())
        .ok_or(CaseError::ByteCountOverflow { ne: *ne, dtype })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn counts_and_errors() {
        assert_eq!(nelements(&[64, 1, 65536, 1]).unwrap(), 64 * 65536);
        assert!(matches!(
            nelements(&[0, 1, 1, 1]),
            Err(CaseError::NonPositiveDim { dim: 0, .. })
        ));
        assert!(matches!(
            nelements(&[4, -2, 1, 1]),
            Err(CaseError::NonPositiveDim { dim: 1, .. })
        ));
        assert!(matches!(
            nelements(&[i64::MAX, i64::MAX, 1, 1]),
            Err(CaseError::ElementCountOverflow { .. })
        ));
        assert!(matches!(
            nbytes(&[1 << 62, 2, 1, 1], DType::F32),
            Err(CaseError::ByteCountOverflow { .. })
        ));
        assert_eq!(dense_strides(&[3, 4, 5, 6], DType::F32), [4, 12, 48, 240]);
        assert_eq!(
            span_bytes(&[3, 4, 5, 6], &[4, 12, 48, 240], DType::F32).unwrap(),
            360 * 4
        );
        // A padded row stride spans more than the dense size.
        assert_eq!(
            span_bytes(&[3, 2, 1, 1], &[4, 64, 128, 128], DType::F32).unwrap(),
            64 + 12
        );
    }
}
