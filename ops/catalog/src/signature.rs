//! Kernel signatures read from the `.cu` text, so a plan's argument list can be checked
//! against the kernel it launches without compiling anything: the parameters of an
//! `extern "C" __global__` entry, in order, by the width and kind `cuLaunchKernel` copies.

use kedge_core::{KernelArg, LaunchPlan, Plan};

/// How a kernel parameter is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamKind {
    Ptr,
    I32,
    U32,
    I64,
    U64,
    F32,
}

/// The parameters of `entry` as declared in `source` (`extern "C" __global__ void entry(...)`),
/// or `None` when the source declares no such entry or a parameter type is not one kedge
/// passes.
pub(crate) fn params(source: &str, entry: &str) -> Option<Vec<ParamKind>> {
    let mut rest = source;
    while let Some(at) = rest.find("extern \"C\"") {
        let decl = &rest[at..];
        let open = decl.find('(')?;
        let head = &decl[..open];
        let name = head.split_whitespace().last().unwrap_or("");
        if head.contains("__global__") && name == entry {
            let body = &decl[open + 1..];
            let close = body.find(')')?;
            let list = body[..close].trim();
            if list.is_empty() || list == "void" {
                return Some(Vec::new());
            }
            return list.split(',').map(kind).collect();
        }
        rest = &decl[open..];
    }
    None
}

fn kind(param: &str) -> Option<ParamKind> {
    let words: Vec<&str> = param
        .split(|c: char| c.is_whitespace() || c == '*')
        .filter(|w| !w.is_empty() && *w != "const")
        .collect();
    if param.contains('*') {
        return Some(ParamKind::Ptr);
    }
    // The last word is the parameter's name.
    let ty = words.get(..words.len().checked_sub(1)?)?.join(" ");
    Some(match ty.as_str() {
        "int" => ParamKind::I32,
        "unsigned int" | "unsigned" => ParamKind::U32,
        "long long" | "int64_t" => ParamKind::I64,
        "unsigned long long" | "size_t" | "uint64_t" => ParamKind::U64,
        "float" => ParamKind::F32,
        _ => return None,
    })
}

/// Does `arg` fill a parameter of kind `p`? A pointer takes a tensor, a scratch buffer, or
/// `U64(0)` (a null pointer: 8 zero bytes).
fn fits(arg: &KernelArg, p: ParamKind) -> bool {
    matches!(
        (arg, p),
        (
            KernelArg::Tensor(_) | KernelArg::TensorAt { .. } | KernelArg::Scratch { .. },
            ParamKind::Ptr
        ) | (KernelArg::U64(0), ParamKind::Ptr)
            | (KernelArg::I32(_), ParamKind::I32)
            | (KernelArg::U32(_), ParamKind::U32)
            | (KernelArg::I64(_), ParamKind::I64)
            | (KernelArg::U64(_), ParamKind::U64)
            | (KernelArg::F32(_), ParamKind::F32)
    )
}

/// Every launch of the plan passes exactly the parameters its kernel declares: as many, and
/// each of the declared kind.
pub(crate) fn check_plan(plan: &Plan) -> Result<(), String> {
    if plan.launches.is_empty() {
        return Err("the plan launches nothing".into());
    }
    plan.launches.iter().try_for_each(check_launch)
}

/// Does the launch's argument list fill its kernel's declared parameters, one for one and
/// kind for kind? The error names the kernel, its file and the first disagreement.
pub(crate) fn check_launch(l: &LaunchPlan) -> Result<(), String> {
    let k = &l.kernel;
    let declared = params(k.source, k.entry)
        .ok_or_else(|| format!("{} declares no entry {}", k.file, k.entry))?;
    if declared.len() != l.args.len() {
        return Err(format!(
            "{}: {} parameters declared in {}, {} arguments planned",
            k.entry,
            declared.len(),
            k.file,
            l.args.len()
        ));
    }
    for (i, (a, p)) in l.args.iter().zip(&declared).enumerate() {
        if !fits(a, *p) {
            return Err(format!(
                "{}: parameter {i} is declared {p:?}, planned {a:?}",
                k.entry
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
// extern "C" in a comment (
__device__ void device_fn(const float * x, int n) {}
extern "C" __global__ void k_a(const float * x, float * dst, const int n,
        const long long s, const unsigned long long nb, const float eps, const unsigned int h) {}
extern "C" __global__ void k_none() {}
"#;

    #[test]
    fn parses_declared_parameters() {
        use ParamKind::*;
        assert_eq!(
            params(SRC, "k_a"),
            Some(vec![Ptr, Ptr, I32, I64, U64, F32, U32])
        );
        assert_eq!(params(SRC, "k_none"), Some(vec![]));
        assert_eq!(params(SRC, "k_missing"), None);
        assert_eq!(params(SRC, "device_fn"), None);
    }

    #[test]
    fn a_plan_that_disagrees_with_its_kernel_is_named() {
        use kedge_core::{Kernel, LaunchPlan, Plan};
        const K: Kernel = Kernel {
            file: "test.cu",
            source: SRC,
            entry: "k_a",
        };
        let good = vec![
            KernelArg::Tensor(0),
            KernelArg::U64(0),
            KernelArg::I32(1),
            KernelArg::I64(2),
            KernelArg::U64(3),
            KernelArg::F32(1e-6),
            KernelArg::U32(4),
        ];
        let plan = |args: Vec<KernelArg>| {
            Plan::single(LaunchPlan::new(K, [1, 1, 1], [32, 1, 1], 0).args(args))
        };
        check_plan(&plan(good.clone())).unwrap();
        let short = plan(good[..6].to_vec());
        assert!(check_plan(&short)
            .unwrap_err()
            .contains("7 parameters declared"));
        let mut wide = good.clone();
        wide[2] = KernelArg::I64(1);
        assert!(check_plan(&plan(wide)).unwrap_err().contains("parameter 2"));
        let mut bad_ptr = good;
        bad_ptr[1] = KernelArg::U64(8);
        assert!(check_plan(&plan(bad_ptr)).is_err());
    }

    kedge_core::kernel_source!(ZOO = "ops/catalog/src/zoo/zoo_rows.cu", "zoo/zoo_rows.cu");

    #[test]
    fn reads_a_declaration_across_lines_in_a_kernel_file() {
        use ParamKind::*;
        let k = ZOO.entry("zoo_rows_uninit_global_read");
        assert_eq!(
            params(k.source, k.entry),
            Some(vec![Ptr, Ptr, I32, I64, Ptr])
        );
        assert_eq!(params(k.source, "no_such_kernel"), None);
    }

    #[test]
    fn a_launch_with_a_missing_argument_is_named() {
        let l = LaunchPlan::new(ZOO.entry("zoo_rows_clean"), [1, 1, 1], [128, 1, 1], 0).args(vec![
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::I32(4),
        ]);
        let e = check_launch(&l).unwrap_err();
        assert!(e.contains("zoo_rows_clean"), "{e}");
        let l = l.args(vec![
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::I32(4),
            KernelArg::I64(1),
        ]);
        assert_eq!(check_launch(&l), Ok(()));
    }

    /// Every launch every kernel impl plans, at each op's smoke cases and in each dtype the op
    /// takes, passes what its kernel declares. (A library impl plans no kernel launches.)
    #[test]
    fn every_kernel_impl_plans_the_arguments_its_kernel_declares() {
        let h = kedge_core::LimitsProfile::builtin("h200").unwrap();
        let reg = crate::registry();
        let mut launches = 0;
        for &op in reg.ops() {
            for imp in reg.impls_of(op) {
                for &dtype in op.dtypes() {
                    for (ne, params) in op.smoke() {
                        let mut case = kedge_core::Case::new(op.name(), imp.name(), dtype, ne);
                        case.params = params.clone();
                        let Ok(plan) = imp.plan(&case, &h) else {
                            continue;
                        };
                        for l in &plan.launches {
                            launches += 1;
                            if let Err(e) = check_launch(l) {
                                panic!("{}/{} {dtype} {ne:?}: {e}", op.name(), imp.name());
                            }
                        }
                    }
                }
            }
        }
        assert!(launches > 100, "only {launches} launches planned");
    }
}
