//! The parameter list of an `extern "C" __global__` entry as its `.cu` file writes it, read
//! from the source text, so a plan's argument list can be checked against the kernel it
//! launches without compiling anything.

use kedge_core::{Kernel, KernelArg, LaunchPlan};

/// One declared parameter, by the C type it is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Ptr,
    I32,
    U32,
    I64,
    U64,
    F32,
}

impl Param {
    fn of_c(decl: &str) -> Result<Param, String> {
        if decl.contains('*') {
            return Ok(Param::Ptr);
        }
        // Drop qualifiers and the parameter's own name (the last word).
        let words: Vec<&str> = decl
            .split_whitespace()
            .filter(|w| *w != "const" && *w != "volatile")
            .collect();
        let ty = words[..words.len().saturating_sub(1)].join(" ");
        match ty.as_str() {
            "int" => Ok(Param::I32),
            "unsigned int" | "unsigned" => Ok(Param::U32),
            "long long" | "long long int" => Ok(Param::I64),
            "unsigned long long" | "unsigned long long int" => Ok(Param::U64),
            "float" => Ok(Param::F32),
            _ => Err(format!(
                "parameter `{decl}`: type `{ty}` is not one kedge passes"
            )),
        }
    }

    /// The parameter a planned argument fills.
    pub fn of_arg(a: &KernelArg) -> Param {
        match a {
            KernelArg::Tensor(_) | KernelArg::TensorAt { .. } | KernelArg::Scratch { .. } => {
                Param::Ptr
            }
            KernelArg::I32(_) => Param::I32,
            KernelArg::U32(_) => Param::U32,
            KernelArg::I64(_) => Param::I64,
            KernelArg::U64(_) => Param::U64,
            KernelArg::F32(_) => Param::F32,
        }
    }
}

/// The parameters of `kernel.entry` as declared in `kernel.source`.
pub fn declared(kernel: &Kernel) -> Result<Vec<Param>, String> {
    let head = format!("extern \"C\" __global__ void {}(", kernel.entry);
    let start = kernel
        .source
        .find(&head)
        .ok_or_else(|| format!("{}: no `{head}` in {}", kernel.entry, kernel.file))?
        + head.len();
    let len = kernel.source[start..]
        .find(')')
        .ok_or_else(|| format!("{}: parameter list does not end", kernel.entry))?;
    let list = kernel.source[start..start + len].trim();
    if list.is_empty() || list == "void" {
        return Ok(Vec::new());
    }
    list.split(',').map(|p| Param::of_c(p.trim())).collect()
}

/// Does the launch's argument list fill its kernel's declared parameters, one for one and
/// kind for kind? The error names the launch and both lists.
pub fn check_launch(l: &LaunchPlan) -> Result<(), String> {
    let want = declared(&l.kernel)?;
    let got: Vec<Param> = l.args.iter().map(Param::of_arg).collect();
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{}: the plan passes {got:?}, {} declares {want:?}",
            l.name(),
            l.kernel.file
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    kedge_core::kernel_source!(SRC = "ops/src/zoo/zoo_rows.cu", "zoo/zoo_rows.cu");

    #[test]
    fn reads_a_declaration_across_lines() {
        let k = SRC.entry("zoo_rows_uninit_global_read");
        assert_eq!(
            declared(&k).unwrap(),
            [Param::Ptr, Param::Ptr, Param::I32, Param::I64, Param::Ptr]
        );
        assert!(declared(&SRC.entry("no_such_kernel")).is_err());
    }

    #[test]
    fn names_a_mismatch() {
        let l = LaunchPlan::new(SRC.entry("zoo_rows_clean"), [1, 1, 1], [128, 1, 1], 0).args(vec![
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
}
