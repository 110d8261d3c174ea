//! The launch contract: an impl states every launch it will issue (kernel, grid, block,
//! dynamic shared memory, arguments) and every buffer it will allocate before issuing any, so
//! the plan can be checked against a limits profile on a machine without a GPU, run by the
//! engine as stated, and written out as a standalone `.cu` file (`kedge repro`) that launches
//! exactly what kedge launched.

use crate::cuda::kernel::Kernel;
use crate::model::limits::LimitsProfile;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One kernel launch: what, how big, with which arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlan {
    /// The kernel to launch.
    pub kernel: Kernel,
    /// Grid dimensions (x, y, z).
    pub grid: [u64; 3],
    /// Block dimensions (x, y, z).
    pub block: [u64; 3],
    /// Dynamic shared memory in bytes.
    pub smem: u64,
    /// The kernel's arguments as data, in parameter order. `run` resolves them to device
    /// pointers and values; `repro` writes them out as C.
    pub args: Vec<KernelArg>,
}

impl LaunchPlan {
    /// A launch without arguments (add them with `args`).
    pub fn new(kernel: Kernel, grid: [u64; 3], block: [u64; 3], smem: u64) -> Self {
        LaunchPlan {
            kernel,
            grid,
            block,
            smem,
            args: Vec::new(),
        }
    }
    /// The same launch with its argument list.
    pub fn args(mut self, args: Vec<KernelArg>) -> Self {
        self.args = args;
        self
    }
    /// The kernel's entry name.
    pub fn name(&self) -> &'static str {
        self.kernel.entry
    }

    /// Every way this launch breaks the profile's limits (empty when it is legal).
    pub fn check(&self, p: &LimitsProfile) -> Vec<LaunchViolation> {
        let mut v = Vec::new();
        for (i, axis) in ["x", "y", "z"].into_iter().enumerate() {
            let lim = p.max_grid[i].value;
            if self.grid[i] == 0 || self.grid[i] > lim {
                v.push(self.violation(
                    format!("grid.{axis}"),
                    self.grid[i],
                    lim,
                    self.grid[i] == 0,
                ));
            }
            let blim = p.max_block[i].value;
            if self.block[i] == 0 || self.block[i] > blim {
                v.push(self.violation(
                    format!("block.{axis}"),
                    self.block[i],
                    blim,
                    self.block[i] == 0,
                ));
            }
        }
        let threads = self.block.iter().product::<u64>();
        if threads > p.max_threads_per_block.value {
            v.push(self.violation(
                "threads per block".into(),
                threads,
                p.max_threads_per_block.value,
                false,
            ));
        }
        if self.smem > p.shared_per_block_optin.value {
            v.push(self.violation(
                "dynamic shared memory".into(),
                self.smem,
                p.shared_per_block_optin.value,
                false,
            ));
        }
        v
    }

    fn violation(&self, dim: String, value: u64, limit: u64, zero: bool) -> LaunchViolation {
        LaunchViolation {
            kernel: self.kernel.entry.to_string(),
            dim,
            value,
            limit,
            zero,
        }
    }
}

impl fmt::Display for LaunchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} grid=({},{},{}) block=({},{},{}) smem={}",
            self.kernel.entry,
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.block[0],
            self.block[1],
            self.block[2],
            self.smem
        )
    }
}

/// One broken limit: the dimension, the value asked for and the limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchViolation {
    /// The kernel whose launch breaks it.
    pub kernel: String,
    /// The dimension (`grid.y`, `block.x`, `shared memory`).
    pub dim: String,
    /// The value asked for.
    pub value: u64,
    /// The profile's limit.
    pub limit: u64,
    /// The value is 0, which no launch may have.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zero: bool,
}

impl fmt::Display for LaunchViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.zero {
            write!(f, "{}: {} = 0 (must be at least 1)", self.kernel, self.dim)
        } else {
            write!(
                f,
                "{}: {} = {} exceeds the limit {}",
                self.kernel, self.dim, self.value, self.limit
            )
        }
    }
}

/// A buffer an impl allocates besides the case's tensors (a score matrix, a staging area):
/// the allocation half of the contract, checked like a launch against the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BufferPlan {
    /// What it holds, with its shape: "scores [16 heads, 25600, 25600] f32".
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// A planned buffer the profile cannot hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BufferViolation {
    /// The buffer's name.
    pub buffer: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// "largest single buffer" or "device memory".
    pub limit_name: String,
    /// The limit in bytes.
    pub limit: u64,
    /// The profile the limit is from.
    pub profile: String,
}

/// Bytes as a person reads them: decimal GB/MB with two decimals (41.94 GB), as the
/// incidents and the vendors quote them.
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else {
        format!("{} bytes", b as u64)
    }
}

/// 41753200896 -> "41,753,200,896".
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for BufferViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "needs a {} buffer ({} bytes: {}); profile {} allows {} ({} bytes, {})",
            human_bytes(self.bytes),
            grouped(self.bytes),
            self.buffer,
            self.profile,
            human_bytes(self.limit),
            grouped(self.limit),
            self.limit_name
        )
    }
}

/// What an impl answers when asked to plan a case. Its size does not grow with the shape: a
/// launch list repeated per row is one list and a `repeat` count, not one entry per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The kernel launches, in order.
    pub launches: Vec<LaunchPlan>,
    /// The launch list runs once per point of this loop nest, innermost level first
    /// (`[rows, channels, samples]`, say); `[1, 1, 1]` runs it once. Tensor arguments step by
    /// `KernelArg::TensorAt::step` per level.
    pub repeat: [u64; 3],
    /// Work the impl does that is not a kernel kedge launches (a cuBLASLt matmul, a plugin):
    /// named so that `kedge plan` says what it could not check.
    pub unchecked: Vec<String>,
    /// Buffers the impl allocates besides the case's tensors.
    pub buffers: Vec<BufferPlan>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            launches: Vec::new(),
            repeat: [1, 1, 1],
            unchecked: Vec::new(),
            buffers: Vec::new(),
        }
    }
}

impl Plan {
    /// A plan of kernel launches, run once.
    pub fn kernels(launches: Vec<LaunchPlan>) -> Self {
        Plan {
            launches,
            ..Plan::default()
        }
    }
    /// One launch.
    pub fn single(launch: LaunchPlan) -> Self {
        Plan::kernels(vec![launch])
    }
    /// The same plan with buffers it allocates besides the case's tensors.
    pub fn with_buffers(mut self, buffers: Vec<BufferPlan>) -> Self {
        self.buffers = buffers;
        self
    }
    /// Run the launch list once per point of `[n1, n2, n3]` (innermost first).
    pub fn repeated(mut self, repeat: [u64; 3]) -> Self {
        self.repeat = repeat;
        self
    }
    /// How many times the launch list runs.
    pub fn repetitions(&self) -> u64 {
        self.repeat.iter().fold(1u64, |a, &n| a.saturating_mul(n))
    }
    /// Launches issued in all, repetitions counted.
    pub fn launch_count(&self) -> u64 {
        (self.launches.len() as u64).saturating_mul(self.repetitions())
    }
    /// Can a standalone `.cu` file launch exactly this plan? Not when part of the work is a
    /// library call or a plugin's own launches. A plan that launches nothing can: its file
    /// shows that nothing runs (a silent fallback's repro).
    pub fn standalone(&self) -> Result<(), String> {
        if !self.unchecked.is_empty() {
            return Err(format!(
                "part of the work is not a kernel kedge launches: {}",
                self.unchecked.join(", ")
            ));
        }
        Ok(())
    }
    /// Every broken launch limit of the plan.
    pub fn violations(&self, p: &LimitsProfile) -> Vec<LaunchViolation> {
        self.launches.iter().flat_map(|l| l.check(p)).collect()
    }
    /// Each buffer against the profile's largest single buffer, and all of them together
    /// (plus `tensor_bytes`, the case's own tensors) against the device's memory.
    pub(crate) fn buffer_violations(
        &self,
        p: &LimitsProfile,
        tensor_bytes: u64,
    ) -> Vec<BufferViolation> {
        let mut v: Vec<BufferViolation> = self
            .buffers
            .iter()
            .filter(|b| b.bytes > p.max_alloc_bytes.value)
            .map(|b| BufferViolation {
                buffer: b.name.clone(),
                bytes: b.bytes,
                limit_name: format!("largest single buffer: {}", p.max_alloc_bytes.source),
                limit: p.max_alloc_bytes.value,
                profile: p.name.clone(),
            })
            .collect();
        let total = self
            .buffers
            .iter()
            .fold(tensor_bytes, |a, b| a.saturating_add(b.bytes));
        if v.is_empty() && total > p.device_memory_bytes.value {
            v.push(BufferViolation {
                buffer: format!(
                    "{} planned buffers and the case's tensors together",
                    self.buffers.len()
                ),
                bytes: total,
                limit_name: format!("device memory: {}", p.device_memory_bytes.source),
                limit: p.device_memory_bytes.value,
                profile: p.name.clone(),
            });
        }
        v
    }
}

/// Ceiling division for grid sizes.
pub const fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// One kernel argument as data, so a launch can be written out as C (`kedge repro`'s
/// standalone `.cu`) as well as issued by kedge: both read the same list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelArg {
    /// Device pointer to the case's tensor `i` (index into `Op::tensors`, inputs first).
    Tensor(usize),
    /// Device pointer `offset` bytes into tensor `index`, advanced by `step[l]` bytes per
    /// iteration of the plan's repeat level `l` (a per-row launch's row pointer).
    TensorAt {
        /// The tensor's index.
        index: usize,
        /// Bytes from the tensor's start.
        offset: i64,
        /// Bytes added per iteration of each repeat level.
        step: [i64; 3],
    },
    /// Device pointer to a scratch buffer of exactly `bytes`, allocated for the case in its
    /// allocation mode and never written by kedge. Arguments naming the same scratch share it.
    Scratch {
        /// The scratch buffer's name.
        name: String,
        /// Its size in bytes.
        bytes: u64,
    },
    /// A 32-bit signed integer.
    I32(i32),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A 64-bit signed integer.
    I64(i64),
    /// A 64-bit unsigned integer.
    U64(u64),
    /// A 32-bit float.
    F32(f32),
}
