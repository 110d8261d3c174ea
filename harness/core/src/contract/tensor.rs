//! A case's tensors as the device sees them: what an op declares and an impl allocates. Its own
//! module so the op (which lists its impls) and the impl (which takes the tensors) do not
//! depend on each other.

use crate::error::CaseError;
use crate::model::dtype::DType;
use crate::model::shape::{dense_strides, span_bytes, Ne};

/// Whether a tensor is read or written by the op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read: filled with seeded random data before the run.
    Input,
    /// Written: poisoned before the run, compared after it.
    Output,
}

/// One tensor of a case, as the device will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// The tensor's name (`x`, `dst`), as reports and repros name it.
    pub name: String,
    /// Input or output.
    pub role: Role,
    /// Element type.
    pub dtype: DType,
    /// Shape, ggml order.
    pub ne: Ne,
    /// Byte strides (ggml `nb`); may describe a padded, non-contiguous view.
    pub nb: [u64; 4],
    /// Bytes the allocation must hold (the view's span).
    pub bytes: u64,
}

impl TensorSpec {
    /// A contiguous tensor.
    pub fn dense(name: &str, role: Role, dtype: DType, ne: Ne) -> Result<Self, CaseError> {
        let nb = dense_strides(&ne, dtype);
        Self::strided(name, role, dtype, ne, nb)
    }
    /// A tensor with byte strides `nb` (a padded or transposed view).
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
    /// Elements in the tensor.
    pub fn nelements(&self) -> u64 {
        self.ne.iter().map(|&x| x as u64).product()
    }
}
