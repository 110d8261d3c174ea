//! zoo_rows: calibration for kedge itself (`kedge selftest`).
//!
//! A deliberately trivial row op, `dst[row][col] = x[row][col] * 2 + row` (row: the flat row
//! index over ne1..ne3), with one fixed impl (`clean`) and one planted impl per bug class
//! kedge claims to find. Each planted kernel (`zoo_rows.cu`) carries exactly one real bug and
//! names, in its `ImplRole::Planted`, the detectors that must see it. Selftest runs each
//! planted impl's smoke cases in the allocation mode / sanitizer those detectors need and
//! reports FOUND or MISSED; nothing in the judging knows the answer beyond that declaration.
//!
//! Which tool sees what (compute-sanitizer 2025.x):
//! - memcheck: out-of-bounds global reads/writes, outside every allocation (kedge runs it
//!   with `--padding` so adjacent exact allocations do not hide a one-element overrun);
//! - initcheck: reads of *global* memory nothing initialized (not shared memory);
//! - racecheck: shared-memory hazards between threads (a missing `__syncthreads`);
//! - kedge's own: guard pages (a read past the end / before the start faults natively),
//!   canaries (a stray write changes a red zone), poison (an output element nobody wrote),
//!   reference (a wrong value).
//!
//! The "uninitialized shared-memory read" is planted as an uninitialized *global*
//! read: initcheck checks global memory only and no compute-sanitizer tool reports an
//! uninitialized shared-memory read, so planting one would only test luck.

use kedge_core::device::{RunCtx, RunError};
use kedge_core::host::HostTensor;
use kedge_core::verdict::Detector;
use kedge_core::*;

const SRC: &str = include_str!("zoo_rows.cu");
const FILE: &str = "ops/src/zoo/zoo_rows.cu";
/// Threads per block (`ZOO_BLOCK` in the kernel file).
const BLOCK: u64 = 128;

pub struct ZooRows;
pub static OP: ZooRows = ZooRows;

/// The ncols at which `planted-wrong-at-one-size` is wrong (a smoke shape has it).
pub const WRONG_SIZE: i64 = 1000;

/// How a zoo impl launches: the kernel entry and whether it takes a scratch buffer.
pub struct ZooImpl {
    name: &'static str,
    entry: &'static str,
    role: ImplRole,
    about: &'static str,
    scratch: bool,
}

impl ZooImpl {
    fn kernel(&self) -> Kernel {
        Kernel {
            file: FILE,
            source: SRC,
            entry: self.entry,
        }
    }
    fn args(&self, case: &Case) -> Vec<ReproArg> {
        let [n0, n1, n2, n3] = case.ne;
        let nrows = n1 * n2 * n3;
        let mut a = vec![
            ReproArg::Tensor(0),
            ReproArg::Tensor(1),
            ReproArg::I32(n0 as i32),
            ReproArg::I64(nrows),
        ];
        if self.scratch {
            a.push(ReproArg::Scratch {
                name: "never_written".into(),
                bytes: nrows as u64 * 4,
            });
        }
        a
    }
}

impl Impl for ZooImpl {
    fn name(&self) -> &'static str {
        self.name
    }
    fn role(&self) -> ImplRole {
        self.role
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, String> {
        let [n0, n1, n2, n3] = case.ne;
        if n0 > i32::MAX as i64 {
            return Err(format!(
                "ne[0] = {n0} does not fit the kernel's int column index"
            ));
        }
        let nrows = n1
            .checked_mul(n2)
            .and_then(|v| v.checked_mul(n3))
            .ok_or_else(|| "row count overflows".to_string())?;
        if nrows as u64 > limits.grid_limit(0) {
            return Err(format!(
                "{nrows} rows exceed grid.x {}; zoo_rows keeps one row per block",
                limits.grid_limit(0)
            ));
        }
        Ok(Plan::kernels(vec![LaunchPlan::new(
            self.kernel(),
            [nrows as u64, 1, 1],
            [BLOCK, 1, 1],
            0,
        )]))
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, plan: &Plan) -> Result<(), RunError> {
        let args = ctx.resolve_args(&self.args(case))?;
        ctx.launch(&plan.launches[0], &args)
    }
    fn args_for_repro(&self, case: &Case, _plan: &Plan) -> Option<Vec<Vec<ReproArg>>> {
        Some(vec![self.args(case)])
    }
}

pub static CLEAN: ZooImpl = ZooImpl {
    name: "clean",
    entry: "zoo_rows_clean",
    role: ImplRole::Fixed,
    about: "the zoo's reference kernel: nothing planted",
    scratch: false,
};

pub static READ_PAST_ROW_END_LAST_BLOCK: ZooImpl = ZooImpl {
    name: "planted-read-past-row-end-last-block",
    entry: "zoo_rows_read_past_row_end_last_block",
    role: ImplRole::Planted {
        bug: "the last block reads one f32 past its row's end (= past the end of x); the value is discarded",
        expect: &[Detector::GuardPage, Detector::Memcheck],
    },
    about: "CALIBRATION: one-element read past the input's end, last block only",
    scratch: false,
};

pub static READ_BEFORE_START: ZooImpl = ZooImpl {
    name: "planted-read-before-start",
    entry: "zoo_rows_read_before_start",
    role: ImplRole::Planted {
        bug: "block 0 reads x[-1]; the value is discarded",
        expect: &[Detector::GuardPage, Detector::Memcheck],
    },
    about: "CALIBRATION: one-element read before the input's start",
    scratch: false,
};

pub static UNINIT_GLOBAL_READ: ZooImpl = ZooImpl {
    name: "planted-uninit-global-read",
    entry: "zoo_rows_uninit_global_read",
    role: ImplRole::Planted {
        bug: "every block reads a device scratch buffer nothing wrote; the value is discarded",
        expect: &[Detector::Initcheck],
    },
    about: "CALIBRATION: uninitialized global-memory read",
    scratch: true,
};

pub static MISSING_SYNCTHREADS: ZooImpl = ZooImpl {
    name: "planted-missing-syncthreads",
    entry: "zoo_rows_missing_syncthreads",
    role: ImplRole::Planted {
        bug: "shared-memory exchange across warps with no __syncthreads between write and read",
        expect: &[Detector::Racecheck],
    },
    about: "CALIBRATION: a missing __syncthreads (shared-memory race)",
    scratch: false,
};

pub static UNWRITTEN_TAIL: ZooImpl = ZooImpl {
    name: "planted-unwritten-tail",
    entry: "zoo_rows_unwritten_tail",
    role: ImplRole::Planted {
        bug: "the output's last element is never written",
        expect: &[Detector::Poison],
    },
    about: "CALIBRATION: skips the last output element",
    scratch: false,
};

pub static WRONG_AT_ONE_SIZE: ZooImpl = ZooImpl {
    name: "planted-wrong-at-one-size",
    entry: "zoo_rows_wrong_at_one_size",
    role: ImplRole::Planted {
        bug: "wrong last column only when ne[0] == 1000",
        expect: &[Detector::Reference],
    },
    about: "CALIBRATION: a wrong result at one size only",
    scratch: false,
};

pub static WRITE_PAST_END: ZooImpl = ZooImpl {
    name: "planted-write-past-end",
    entry: "zoo_rows_write_past_end",
    role: ImplRole::Planted {
        bug: "the last block writes one f32 past the end of dst; every value is right",
        expect: &[Detector::Canary, Detector::Memcheck],
    },
    about: "CALIBRATION: one-element write past the output's end",
    scratch: false,
};

impl Op for ZooRows {
    fn name(&self) -> &'static str {
        "zoo_rows"
    }
    fn about(&self) -> &'static str {
        "CALIBRATION op for kedge selftest: dst = x * 2 + row, with planted-bug impls"
    }
    fn dtypes(&self) -> &'static [DType] {
        crate::rows::F32_ONLY
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[]
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![
            &CLEAN,
            &READ_PAST_ROW_END_LAST_BLOCK,
            &READ_BEFORE_START,
            &UNINIT_GLOBAL_READ,
            &MISSING_SYNCTHREADS,
            &UNWRITTEN_TAIL,
            &WRONG_AT_ONE_SIZE,
            &WRITE_PAST_END,
        ]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        Ok(vec![
            TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
        ])
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        let x = &inputs[0];
        let [n0, n1, n2, n3] = x.ne.map(|v| v as usize);
        let mut out = Vec::with_capacity(n0 * n1 * n2 * n3);
        for i3 in 0..n3 {
            for i2 in 0..n2 {
                for i1 in 0..n1 {
                    let row = ((i3 * n2 + i2) * n1 + i1) as f64;
                    for i0 in 0..n0 {
                        out.push(x.get(i0, i1, i2, i3) * 2.0 + row);
                    }
                }
            }
        }
        Ok(vec![out])
    }
    fn boundaries(&self, _limits: &LimitsProfile) -> Vec<Boundary> {
        vec![Boundary::ne(
            "ne[0] at the one size planted-wrong-at-one-size gets wrong",
            0,
            WRONG_SIZE,
            [0, 2, 1, 1],
            Reach::SYNTHETIC,
        )]
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        vec![
            ([WRONG_SIZE, 3, 1, 1], Params::new()),
            ([64, 5, 4, 3], Params::new()),
            ([1, 1, 1, 1], Params::new()),
            ([257, 2, 2, 1], Params::new()),
        ]
    }
    fn upstream(&self, _case: &Case) -> Option<UpstreamRepro> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_by_hand() {
        // ne = [2, 2, 1, 1]: rows 0 and 1.
        let x = HostTensor::from_f32(DType::F32, [2, 2, 1, 1], &[0.5, -0.25, 0.75, 1.0]);
        let c = Case::new("zoo_rows", "clean", DType::F32, [2, 2, 1, 1]);
        let out = OP.reference(&c, &[x]).unwrap();
        assert_eq!(out[0], vec![1.0, -0.5, 2.5, 3.0]);
    }

    #[test]
    fn every_planted_impl_names_its_detectors_and_its_own_kernel() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let mut entries = std::collections::HashSet::new();
        for imp in OP.impls() {
            let c = Case::new("zoo_rows", imp.name(), DType::F32, [WRONG_SIZE, 3, 1, 1]);
            let plan = imp.plan(&c, &h200).unwrap();
            assert!(plan.violations(&h200).is_empty());
            let entry = plan.launches[0].kernel.clone();
            assert!(
                SRC.contains(&format!("void {entry}(")),
                "{entry} not in zoo_rows.cu"
            );
            assert!(entries.insert(entry), "two zoo impls share a kernel");
            if let ImplRole::Planted { expect, bug } = imp.role() {
                assert!(!expect.is_empty() && !bug.is_empty(), "{}", imp.name());
            }
        }
        assert_eq!(entries.len(), OP.impls().len());
    }

    #[test]
    fn smoke_has_the_one_wrong_size() {
        assert!(OP.smoke().iter().any(|(ne, _)| ne[0] == WRONG_SIZE));
    }
}
