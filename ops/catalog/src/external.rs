//! How external code implements kedge's ops (harness/include/kedge.h): the params struct a
//! plugin's entry receives and the row-op kernel ABI of NVRTC source kernels. An op declares
//! its own with `Op::external_abi`; the ops below that do not declare one yet are described
//! here, by name, as kedge.h publishes them.

use kedge_core::contract::op::{CField, CParams, ExternalAbi};
use kedge_core::Op;

/// `kedge_params_rms_norm`, `kedge_params_norm` and `kedge_params_l2_norm`: `float eps`.
const EPS: &[CField] = &[CField::F32("eps")];
/// `kedge_params_softmax`: `float scale; float max_bias; int32_t has_mask`.
const SOFTMAX: &[CField] = &[
    CField::F32("scale"),
    CField::F32("max_bias"),
    CField::HasInput("mask"),
];

/// kedge.h's description of an op that does not declare `Op::external_abi` itself.
fn published(op: &str) -> Option<ExternalAbi> {
    let row = |c_name, scalar| ExternalAbi {
        params: Some(CParams {
            c_name,
            fields: EPS,
        }),
        row_kernel_scalar: Some(scalar),
    };
    Some(match op {
        "rms_norm" => row("kedge_params_rms_norm", "eps"),
        "norm" => row("kedge_params_norm", "eps"),
        "l2_norm" => row("kedge_params_l2_norm", "eps"),
        "softmax" => ExternalAbi {
            params: Some(CParams {
                c_name: "kedge_params_softmax",
                fields: SOFTMAX,
            }),
            row_kernel_scalar: Some("scale"),
        },
        _ => return None,
    })
}

/// The op's external ABI: its own declaration, else kedge.h's.
pub fn abi(op: &dyn Op) -> Option<ExternalAbi> {
    op.external_abi().or_else(|| published(op.name()))
}

/// Ops with a published row-op kernel ABI (for messages).
pub fn row_kernel_ops(ops: &[&'static dyn Op]) -> Vec<&'static str> {
    ops.iter()
        .filter(|o| abi(**o).is_some_and(|a| a.row_kernel_scalar.is_some()))
        .map(|o| o.name())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_norms_pass_eps_and_others_json() {
        let reg = crate::registry();
        for name in ["rms_norm", "norm", "l2_norm"] {
            let a = abi(reg.op(name).unwrap()).unwrap();
            assert_eq!(a.row_kernel_scalar, Some("eps"));
            assert_eq!(a.params.unwrap().fields, EPS);
            assert_eq!(a.params.unwrap().c_name, format!("kedge_params_{name}"));
        }
        assert_eq!(
            published("softmax").unwrap().row_kernel_scalar,
            Some("scale")
        );
        assert_eq!(published("cumsum"), None);
        assert_eq!(
            row_kernel_ops(reg.ops()),
            ["rms_norm", "norm", "l2_norm", "softmax"]
        );
    }
}
