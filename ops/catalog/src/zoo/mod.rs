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
//! An "uninitialized shared-memory read" is planted as an uninitialized *global*
//! read: initcheck checks global memory only and no compute-sanitizer tool reports an
//! uninitialized shared-memory read, so planting one would only test luck.

use kedge_core::model::host::HostTensor;
use kedge_core::*;

kedge_core::kernel_source!(SRC = "ops/catalog/src/zoo/zoo_rows.cu", "zoo_rows.cu");

/// Threads per block (`ZOO_BLOCK` in the kernel file).
const BLOCK: u64 = 128;

pub(crate) struct ZooRows;
pub(crate) static OP: ZooRows = ZooRows;

/// The ncols at which `planted-wrong-at-one-size` is wrong (a smoke shape has it).
pub(crate) const WRONG_SIZE: i64 = 1000;

/// A zoo impl as data: its kernel and whether the kernel takes a scratch buffer. Its run is
/// its plan: one block per row, every kernel taking (x, dst, ncols, nrows[, scratch]).
pub(crate) struct ZooImpl {
    pub(crate) name: &'static str,
    pub(crate) kernel: Kernel,
    pub(crate) role: ImplRole,
    pub(crate) about: &'static str,
    pub(crate) scratch: bool,
}

impl ZooImpl {
    /// The one launch: rows on grid.x, refused past the kernel's int column index or grid.x.
    pub(crate) fn launch(
        &self,
        case: &Case,
        limits: &LimitsProfile,
    ) -> Result<LaunchPlan, Refusal> {
        let [n0, n1, n2, n3] = case.ne;
        if n0 > i32::MAX as i64 {
            return Err(format!("ne[0] = {n0} does not fit the kernel's int column index").into());
        }
        let nrows = n1
            .checked_mul(n2)
            .and_then(|v| v.checked_mul(n3))
            .ok_or_else(|| Refusal::from("row count overflows"))?;
        if nrows as u64 > limits.grid_limit(0) {
            return Err(format!(
                "{nrows} rows exceed grid.x {}; zoo_rows keeps one row per block",
                limits.grid_limit(0)
            )
            .into());
        }
        let mut args = vec![
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::I32(n0 as i32),
            KernelArg::I64(nrows),
        ];
        if self.scratch {
            args.push(KernelArg::Scratch {
                name: "never_written".into(),
                bytes: nrows as u64 * 4,
            });
        }
        Ok(LaunchPlan::new(self.kernel, [nrows as u64, 1, 1], [BLOCK, 1, 1], 0).args(args))
    }
}

impl Impl for ZooImpl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        self.role
    }
    fn about(&self) -> &str {
        self.about
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
        Ok(Plan::single(self.launch(case, limits)?))
    }
}

pub(crate) static CLEAN: ZooImpl = ZooImpl {
    name: "clean",
    kernel: SRC.entry("zoo_rows_clean"),
    role: ImplRole::Fixed,
    about: "the zoo's reference kernel: nothing planted",
    scratch: false,
};

pub(crate) static READ_PAST_ROW_END_LAST_BLOCK: ZooImpl = ZooImpl {
    name: "planted-read-past-row-end-last-block",
    kernel: SRC.entry("zoo_rows_read_past_row_end_last_block"),
    role: ImplRole::Planted {
        bug: "the last block reads one f32 past its row's end (= past the end of x); the value is discarded",
        expect: &[Detector::GuardPage, Detector::Memcheck],
    },
    about: "CALIBRATION: one-element read past the input's end, last block only",
    scratch: false,
};

pub(crate) static READ_BEFORE_START: ZooImpl = ZooImpl {
    name: "planted-read-before-start",
    kernel: SRC.entry("zoo_rows_read_before_start"),
    role: ImplRole::Planted {
        bug: "block 0 reads x[-1]; the value is discarded",
        expect: &[Detector::GuardPage, Detector::Memcheck],
    },
    about: "CALIBRATION: one-element read before the input's start",
    scratch: false,
};

pub(crate) static UNINIT_GLOBAL_READ: ZooImpl = ZooImpl {
    name: "planted-uninit-global-read",
    kernel: SRC.entry("zoo_rows_uninit_global_read"),
    role: ImplRole::Planted {
        bug: "every block reads a device scratch buffer nothing wrote; the value is discarded",
        expect: &[Detector::Initcheck],
    },
    about: "CALIBRATION: uninitialized global-memory read",
    scratch: true,
};

pub(crate) static MISSING_SYNCTHREADS: ZooImpl = ZooImpl {
    name: "planted-missing-syncthreads",
    kernel: SRC.entry("zoo_rows_missing_syncthreads"),
    role: ImplRole::Planted {
        bug: "shared-memory exchange across warps with no __syncthreads between write and read",
        expect: &[Detector::Racecheck],
    },
    about: "CALIBRATION: a missing __syncthreads (shared-memory race)",
    scratch: false,
};

pub(crate) static UNWRITTEN_TAIL: ZooImpl = ZooImpl {
    name: "planted-unwritten-tail",
    kernel: SRC.entry("zoo_rows_unwritten_tail"),
    role: ImplRole::Planted {
        bug: "the output's last element is never written",
        expect: &[Detector::Poison],
    },
    about: "CALIBRATION: skips the last output element",
    scratch: false,
};

pub(crate) static WRONG_AT_ONE_SIZE: ZooImpl = ZooImpl {
    name: "planted-wrong-at-one-size",
    kernel: SRC.entry("zoo_rows_wrong_at_one_size"),
    role: ImplRole::Planted {
        bug: "wrong last column only when ne[0] == 1000",
        expect: &[Detector::Reference],
    },
    about: "CALIBRATION: a wrong result at one size only",
    scratch: false,
};

pub(crate) static WRITE_PAST_END: ZooImpl = ZooImpl {
    name: "planted-write-past-end",
    kernel: SRC.entry("zoo_rows_write_past_end"),
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
    /// None: a calibration op. Its planted impls are wrong by design at every shape, so
    /// probing them at the device's grid and element-count limits would test nothing kedge
    /// claims; selftest runs their smoke shapes.
    fn probe_base(&self) -> Option<ProbeBase> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::check_launch;

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
            let entry = plan.launches[0].name();
            assert!(
                SRC.source.contains(&format!("void {entry}(")),
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
    fn planted_impls_keep_their_detectors() {
        let want: &[(&str, &[Detector])] = &[
            (
                "planted-read-past-row-end-last-block",
                &[Detector::GuardPage, Detector::Memcheck],
            ),
            (
                "planted-read-before-start",
                &[Detector::GuardPage, Detector::Memcheck],
            ),
            ("planted-uninit-global-read", &[Detector::Initcheck]),
            ("planted-missing-syncthreads", &[Detector::Racecheck]),
            ("planted-unwritten-tail", &[Detector::Poison]),
            ("planted-wrong-at-one-size", &[Detector::Reference]),
            (
                "planted-write-past-end",
                &[Detector::Canary, Detector::Memcheck],
            ),
        ];
        let planted: Vec<(&str, &[Detector])> = OP
            .impls()
            .into_iter()
            .filter_map(|i| match i.role() {
                ImplRole::Planted { expect, .. } => Some((i.name(), expect)),
                _ => None,
            })
            .collect();
        assert_eq!(planted, want);
        assert_eq!(CLEAN.role(), ImplRole::Fixed);
    }

    #[test]
    fn every_plan_is_what_runs_and_fills_its_kernels_parameters() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        for imp in OP.impls() {
            for (ne, _) in OP.smoke() {
                let c = Case::new("zoo_rows", imp.name(), DType::F32, ne);
                let plan = imp.plan(&c, &h200).unwrap();
                assert_eq!(plan.standalone(), Ok(()), "{}", imp.name());
                assert_eq!(plan.repeat, [1, 1, 1]);
                for l in &plan.launches {
                    assert_eq!(check_launch(l), Ok(()), "{}", imp.name());
                }
            }
        }
        // The uninitialized read's scratch: one f32 per row, never written.
        let c = Case::new(
            "zoo_rows",
            "planted-uninit-global-read",
            DType::F32,
            [64, 5, 4, 3],
        );
        let plan = UNINIT_GLOBAL_READ.plan(&c, &h200).unwrap();
        assert_eq!(
            plan.launches[0].args[4],
            KernelArg::Scratch {
                name: "never_written".into(),
                bytes: 60 * 4
            }
        );
    }

    #[test]
    fn refuses_what_the_kernel_cannot_index() {
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let wide = Case::new("zoo_rows", "clean", DType::F32, [1 << 31, 1, 1, 1]);
        assert!(CLEAN.plan(&wide, &h200).is_err());
        let tall = Case::new("zoo_rows", "clean", DType::F32, [1, 1 << 31, 1, 1]);
        assert!(CLEAN.plan(&tall, &h200).is_err());
        assert_eq!(OP.probe_base(), None);
        assert_eq!(OP.upstream_name(), None);
    }

    #[test]
    fn smoke_has_the_one_wrong_size() {
        assert!(OP.smoke().iter().any(|(ne, _)| ne[0] == WRONG_SIZE));
    }
}
