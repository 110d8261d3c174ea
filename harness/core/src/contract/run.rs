//! What an impl sees while it runs a case: the device, the case's tensors (inputs then outputs,
//! in the op's spec order), scratch allocated in the case's mode, and a record of what it
//! launched. A plan runs here as stated: its arguments resolved, its repeats unrolled, each
//! launch checked.

use crate::contract::plan::{KernelArg, LaunchPlan, Plan};
use crate::cuda::alloc::DeviceAlloc;
use crate::cuda::device::Device;
use crate::cuda::error::RunError;
use crate::cuda::kernel::KArg;
use crate::model::case::AllocMode;
use cudarc::driver::sys;

/// What an impl's run has to work with: the device, the case's tensors in their allocation
/// mode, and a record of what it launched.
pub struct RunCtx<'a> {
    /// The device.
    pub dev: &'a mut Device,
    /// The case's tensors, in `Op::tensors` order.
    pub tensors: &'a [DeviceAlloc],
    /// The case's allocation mode (scratch buffers get it too).
    alloc: AllocMode,
    /// Synchronize and check after every launch (the default). Kernel timing turns it off and
    /// checks once after the timed region, so the host's wait is not timed.
    pub(crate) sync_each_launch: bool,
    scratch: Vec<DeviceAlloc>,
    launched: Vec<String>,
    facts: serde_json::Map<String, serde_json::Value>,
}

/// What a run leaves behind for the verdict: the launches as issued, the op's own facts, and
/// the scratch buffers (kept alive until their canaries are read).
pub(crate) struct RunRecord {
    /// The launches as issued (a repeated launch once, with its count).
    pub(crate) launched: Vec<String>,
    /// The op's own facts about the run.
    pub(crate) facts: serde_json::Map<String, serde_json::Value>,
    /// Scratch buffers the run allocated.
    pub(crate) scratch: Vec<DeviceAlloc>,
}

impl<'a> RunCtx<'a> {
    /// A context that synchronizes after every launch.
    pub(crate) fn new(dev: &'a mut Device, tensors: &'a [DeviceAlloc], alloc: AllocMode) -> Self {
        RunCtx {
            dev,
            tensors,
            alloc,
            sync_each_launch: true,
            scratch: Vec::new(),
            launched: Vec::new(),
            facts: serde_json::Map::new(),
        }
    }

    /// Device address of tensor `i`.
    pub fn ptr(&self, i: usize) -> u64 {
        self.tensors[i].ptr
    }

    /// The stream launches go on.
    pub fn stream(&self) -> sys::CUstream {
        self.dev.cu_stream()
    }

    /// Scratch of exactly `bytes`, in the case's allocation mode; kept until the case ends.
    /// A second request by the same name gets the same buffer.
    pub fn scratch(&mut self, name: &str, bytes: u64, align: u64) -> Result<u64, RunError> {
        if let Some(a) = self.scratch.iter().find(|a| a.name == name) {
            if a.bytes == bytes {
                return Ok(a.ptr);
            }
            return Err(RunError::Unsupported(format!(
                "scratch {name} asked for with {bytes} bytes, allocated with {}",
                a.bytes
            )));
        }
        let a = self.dev.alloc(name, bytes, self.alloc, align)?;
        let p = a.ptr;
        self.scratch.push(a);
        Ok(p)
    }

    /// An op-specific fact for the verdict line (cuBLASLt's kernel name, a score buffer's size).
    pub fn fact(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.facts.insert(key.to_string(), value.into());
    }

    /// Arguments as data to kernel arguments, at repeat point `at`: tensors by index (stepped
    /// per repeat level), scratch allocated once per name in the case's mode.
    pub fn resolve(&mut self, args: &[KernelArg], at: [u64; 3]) -> Result<Vec<KArg>, RunError> {
        args.iter()
            .map(|a| {
                Ok(match a {
                    KernelArg::Tensor(i) => KArg::Ptr(self.tensor_ptr(*i)?),
                    KernelArg::TensorAt {
                        index,
                        offset,
                        step,
                    } => {
                        let base = self.tensor_ptr(*index)? as i128;
                        let off = *offset as i128
                            + (0..3)
                                .map(|l| step[l] as i128 * at[l] as i128)
                                .sum::<i128>();
                        KArg::Ptr(u64::try_from(base + off).map_err(|_| {
                            RunError::Unsupported(format!(
                                "argument offset {off} leaves tensor {index}'s address space"
                            ))
                        })?)
                    }
                    KernelArg::Scratch { name, bytes } => {
                        KArg::Ptr(self.scratch(name, *bytes, 256)?)
                    }
                    KernelArg::I32(x) => KArg::I32(*x),
                    KernelArg::U32(x) => KArg::U32(*x),
                    KernelArg::I64(x) => KArg::I64(*x),
                    KernelArg::U64(x) => KArg::U64(*x),
                    KernelArg::F32(x) => KArg::F32(*x),
                })
            })
            .collect()
    }

    fn tensor_ptr(&self, i: usize) -> Result<u64, RunError> {
        self.tensors.get(i).map(|t| t.ptr).ok_or_else(|| {
            RunError::Unsupported(format!(
                "argument names tensor {i} but the case has {}",
                self.tensors.len()
            ))
        })
    }

    /// Launch one planned kernel with its planned arguments; checked, then synchronized.
    pub fn launch(&mut self, l: &LaunchPlan) -> Result<(), RunError> {
        let mut args = self.resolve(&l.args, [0, 0, 0])?;
        self.launched.push(l.to_string());
        let sync = self.sync_each_launch;
        self.dev
            .launch(&l.kernel, l.grid, l.block, l.smem, &mut args, l, sync)
    }

    /// Launch a planned kernel with arguments known only at run time (a plugin's, a library
    /// workspace's). Impls that do this also name the work in `Plan::unchecked`, since a
    /// standalone repro cannot launch it.
    pub fn launch_with(&mut self, l: &LaunchPlan, args: &[KArg]) -> Result<(), RunError> {
        let mut a = args.to_vec();
        self.launched.push(l.to_string());
        let sync = self.sync_each_launch;
        self.dev
            .launch(&l.kernel, l.grid, l.block, l.smem, &mut a, l, sync)
    }

    /// Run a plan as stated: the launch list once per repeat point, innermost level first.
    pub fn run_plan(&mut self, plan: &Plan) -> Result<(), RunError> {
        let [n1, n2, n3] = plan.repeat;
        let reps = plan.repetitions();
        for l in &plan.launches {
            self.launched.push(if reps > 1 {
                format!("{l} x{reps}")
            } else {
                l.to_string()
            });
        }
        for i3 in 0..n3 {
            for i2 in 0..n2 {
                for i1 in 0..n1 {
                    for l in &plan.launches {
                        let mut args = self.resolve(&l.args, [i1, i2, i3])?;
                        let sync = self.sync_each_launch;
                        self.dev
                            .launch(&l.kernel, l.grid, l.block, l.smem, &mut args, l, sync)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// What the run leaves for the verdict.
    pub(crate) fn finish(self) -> RunRecord {
        RunRecord {
            launched: self.launched,
            facts: self.facts,
            scratch: self.scratch,
        }
    }
}
