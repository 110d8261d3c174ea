//! f16 and bf16 on the CPU, for kedge's row ops: an output that is the f64 reference rounded
//! once to the type, as a right kernel stores it, passes the op's tolerance on every smoke case
//! and every boundary probe small enough to judge here (the device-wide cumsum's output, whose
//! tiles are rounded twice, included); the same output with its last row off (as a wrapped row
//! offset leaves it) fails it. The kernels themselves run on a GPU (the runner's ignored
//! `half_types_on_the_gpu` test); this checks that the bounds they are judged by are right.

use crate::boundaries;
use kedge_core::judge::compare::compare;
use kedge_core::model::host::{round_to, HostTensor};
use kedge_core::{Case, DType, LimitsProfile, Op, Registry, Role, Verdict};
use kedge_ops::cumsum::{strategy, Strategy, TILE};

const OPS: &[&str] = &[
    "rms_norm",
    "rms_norm_mul_add",
    "norm",
    "l2_norm",
    "softmax",
    "cumsum",
    "tri",
    "add_id",
];

/// Cases past this many output elements are left to the GPU (their references take long here).
const MAX_ELEMENTS: u64 = 1 << 21;

/// Every smoke case and boundary probe of `op` in `dtype`, validated, up to `MAX_ELEMENTS`.
fn cases(reg: &Registry, op: &dyn Op, dtype: DType) -> Vec<Case> {
    let h200 = LimitsProfile::builtin("h200").expect("h200");
    let imp = op.impls()[0].name();
    let mut raw = Vec::new();
    for (ne, params) in op.smoke() {
        let mut c = Case::new(op.name(), imp, dtype, ne);
        c.params = params;
        raw.push(c);
    }
    for b in boundaries(op, &h200, dtype) {
        raw.extend(b.cases(op.name(), imp, dtype));
    }
    raw.into_iter()
        .map(|c| reg.validate(&c).expect("a declared case validates"))
        .filter(|c| {
            op.tensors(c)
                .expect("tensors")
                .iter()
                .all(|t| t.role == Role::Input || t.nelements() <= MAX_ELEMENTS)
        })
        .collect()
}

/// A dense output of `dtype` holding `vals`, each rounded to the type.
fn output(dtype: DType, ne: kedge_core::Ne, vals: impl Iterator<Item = f64>) -> HostTensor {
    let v: Vec<f32> = vals.map(|x| round_to(dtype, x) as f32).collect();
    HostTensor::from_f32(dtype, ne, &v)
}

/// The device-wide scan as its kernels store a 16-bit row: each tile's prefix (summed in f32)
/// stored in the type, then the f32 sum of the tiles before it added to the stored value and
/// stored again.
fn tiled_cumsum(dtype: DType, x: &HostTensor) -> Vec<f64> {
    let [n0, n1, n2, n3] = x.ne.map(|d| d as usize);
    let mut out = Vec::with_capacity(n0 * n1 * n2 * n3);
    let mut row = vec![0.0; n0];
    for r in 0..n1 * n2 * n3 {
        x.row_f64(r % n1, (r / n1) % n2, r / (n1 * n2), &mut row);
        let mut offset = 0.0f32;
        for tile in row.chunks(TILE as usize) {
            let mut local = 0.0f32;
            for &v in tile {
                local += v as f32;
                let stored = round_to(dtype, local as f64) as f32;
                out.push(round_to(dtype, (stored + offset) as f64));
            }
            offset += local;
        }
    }
    out
}

#[test]
fn half_outputs_rounded_once_pass_and_a_wrong_row_fails() {
    let reg = kedge_ops::registry();
    let mut judged = 0;
    let mut tiled = 0;
    for &name in OPS {
        let op = reg.op(name).expect("op");
        for dtype in [DType::F16, DType::Bf16] {
            assert!(op.dtypes().contains(&dtype), "{name} lacks {dtype}");
            let mut worst = 0.0f64;
            for c in cases(&reg, op, dtype) {
                let specs = op.tensors(&c).expect("tensors");
                let inputs = op.inputs(&c, &specs).expect("inputs");
                let reference = op.reference(&c, &inputs).expect("reference").remove(0);
                let out_spec = specs.iter().find(|s| s.role == Role::Output).expect("out");
                assert_eq!(out_spec.dtype, dtype, "{}", c.label());
                let tol = op.tolerance(&c);
                let right = output(dtype, out_spec.ne, reference.iter().copied());
                let cmp = compare(&out_spec.name, &right, &reference, tol);
                assert_eq!(cmp.verdict, Verdict::Pass, "{}: {}", c.label(), cmp.detail);
                worst = worst.max(cmp.numbers.nmse / tol.nmse);
                judged += 1;
                if name == "cumsum" {
                    let l = kedge_ops::rows::RowLayout::of(&c);
                    if strategy(l.ncols, l.total_rows()) == Strategy::DeviceScan {
                        let twice = output(
                            dtype,
                            out_spec.ne,
                            tiled_cumsum(dtype, &inputs[0]).into_iter(),
                        );
                        let cmp = compare(&out_spec.name, &twice, &reference, tol);
                        assert_eq!(
                            cmp.verdict,
                            Verdict::Pass,
                            "{} tiled: {}",
                            c.label(),
                            cmp.detail
                        );
                        worst = worst.max(cmp.numbers.nmse / tol.nmse);
                        tiled += 1;
                    }
                }
                // The last row off by more than its own size.
                let n0 = out_spec.ne[0] as usize;
                let last = reference.len() - n0;
                let wrong = output(
                    dtype,
                    out_spec.ne,
                    reference
                        .iter()
                        .enumerate()
                        .map(|(i, &r)| if i >= last { r + r.abs() + 1.0 } else { r }),
                );
                let cmp = compare(&out_spec.name, &wrong, &reference, tol);
                assert_eq!(
                    cmp.verdict,
                    Verdict::WrongValues,
                    "{}: {}",
                    c.label(),
                    cmp.detail
                );
            }
            // How close a right output comes to the bound (seen with --nocapture).
            println!("{name} {dtype}: worst NMSE / bound {worst:.3}");
        }
    }
    assert!(judged > 300, "only {judged} cases judged");
    println!("{judged} cases, {tiled} device-wide cumsum cases");
    assert!(tiled >= 4, "only {tiled} device-wide cumsum cases");
}

/// The generated boundaries follow the element size: a row filling the shared-memory opt-in
/// limit is twice as long in a 16-bit type, and 2^31 bytes are 2^30 elements, while the
/// element-count probes stay at 2^31 and 2^32. softmax's own shared-memory threshold does not
/// move: its kernels keep the row in f32 for every type, and at the threshold each type's
/// plan asks for exactly the opt-in limit and one column more takes the uncached kernel.
#[test]
fn generated_boundaries_follow_the_element_size() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").expect("h200");
    let optin = h200.shared_per_block_optin.value as i64;
    for &name in OPS {
        let op = reg.op(name).expect("op");
        let Some(base) = op.probe_base() else {
            continue;
        };
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            let es = dtype.size() as i64;
            let b = boundaries(op, &h200, dtype);
            let values = |what: &str| {
                b.iter()
                    .find(|b| b.label.contains(what) && b.label.contains("(generated)"))
                    .map(|b| b.probe_values())
            };
            if base.row_dim {
                // The row's ladder: the limit in elements, its halves, quarters and eighths.
                let n = optin / es;
                let ladder = b
                    .iter()
                    .find(|b| {
                        b.label.starts_with("ne[0]: the")
                            && b.label.contains("shared-memory opt-in")
                    })
                    .map(|b| b.probe_values());
                assert_eq!(
                    ladder,
                    Some(vec![
                        n / 8,
                        n / 8 + 1,
                        n / 4,
                        n / 4 + 1,
                        n / 2,
                        n / 2 + 1,
                        n,
                        n + 1
                    ]),
                    "{name} {dtype}"
                );
            }
            if let Some(d) = base.count_dim {
                let others: i64 = (0..4)
                    .filter(|&i| i != d)
                    .map(|i| base.ne[i].max(1))
                    .product();
                let lo = |t: i64| (t - 1) / others;
                assert_eq!(
                    values("bytes across 2^31"),
                    Some(vec![lo((1 << 31) / es), lo((1 << 31) / es) + 1]),
                    "{name} {dtype}"
                );
                // Both sides, and one more row along the count dimension so the last row
                // starts at 2^31.
                let below: i64 = (0..d).map(|i| base.ne[i].max(1)).product();
                assert_eq!(
                    values(&format!("ne[{d}]: elements across 2^31")),
                    Some(vec![lo(1 << 31), lo(1 << 31) + 1, (1 << 31) / below + 1]),
                    "{name} {dtype}"
                );
            }
        }
    }
    let softmax = reg.op("softmax").expect("softmax");
    let t = kedge_ops::softmax::smem_threshold(&h200);
    for dtype in [DType::F32, DType::F16, DType::Bf16] {
        let own = softmax
            .boundaries(&h200)
            .into_iter()
            .find(|b| b.label.contains("shared-memory threshold of h200"))
            .expect("the threshold boundary");
        assert_eq!(own.at, t);
        for imp in ["ggml", "clamped"] {
            let plan = |n0| {
                let c = Case::new("softmax", imp, dtype, [n0, 2, 2, 1]).with_param("scale", 0.5);
                let c = reg.validate(&c).expect("valid");
                let p = reg
                    .imp(softmax, imp)
                    .expect("impl")
                    .plan(&c, &h200)
                    .expect("plan");
                p.launches[0].clone()
            };
            let suffix = match dtype {
                DType::F16 => "_f16",
                DType::Bf16 => "_bf16",
                _ => "",
            };
            let at = plan(t);
            assert_eq!(at.name(), format!("softmax_{imp}_shared{suffix}"));
            assert_eq!(at.smem as i64, optin, "{dtype}");
            assert!(at.check(&h200).is_empty());
            assert_eq!(plan(t + 1).name(), format!("softmax_{imp}_global{suffix}"));
        }
    }
}
