//! NVRTC source impls: a user's `.cu` file with one `extern "C"` kernel that follows the row-op
//! kernel ABI kedge publishes (harness/include/kedge.h, "Row-op kernel ABI";
//! examples/README.md). kedge compiles it through the same NVRTC cache as its built-in
//! kernels and launches it itself, so unlike a plugin its launch IS planned and checked
//! against the limits profile.
//!
//! The signature is checked when the file is added (compiled for `compute_90`, the entry's
//! PTX parameter list compared with the ABI), so a kernel with the wrong parameters is an
//! error at load with both lists shown, not wrong values in every case.
//!
//! Element types follow kedge's own kernels: `--entry NAME` names the f32 kernel, and the file
//! declares f16 and bf16 kernels by defining `NAME_f16` and `NAME_bf16` with the same
//! parameters (x and dst of that type). The impl runs the dtypes whose entries the file has
//! (read from the compiled PTX; without NVRTC, from the source text) and refuses the others.

use kedge_core::cuda::nvrtc::{self, NvrtcError};
use kedge_core::model::shape::dense_strides;
use kedge_core::{
    Case, CaseError, DType, Impl, ImplRole, Kernel, KernelArg, LaunchPlan, LimitsProfile, Op, Plan,
    Refusal, Registry, Role, TensorSpec,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use thiserror::Error;

/// The row ABI's parameter list as PTX types: x, dst, ncols, nrows, nchannels, nsamples,
/// stride_row, stride_channel, stride_sample, eps_or_scale.
const ROW_ABI_PTX: [&str; 10] = [
    ".u64", ".u64", ".u32", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".f32",
];
/// The same, as C, for messages (T: float for `NAME`, a 16-bit type for `NAME_f16` and
/// `NAME_bf16`).
const ROW_ABI_C: &str = "extern \"C\" __global__ void NAME(const T* x, T* dst, int ncols, long long nrows, long long nchannels, long long nsamples, long long stride_row, long long stride_channel, long long stride_sample, float eps_or_scale)";

/// The element types a source kernel may provide, each with its entry's suffix: `NAME` is
/// f32, `NAME_f16` f16 and `NAME_bf16` bf16 (as kedge's own kernels are named).
const ENTRY_SUFFIXES: [(DType, &str); 3] = [
    (DType::F32, ""),
    (DType::F16, "_f16"),
    (DType::Bf16, "_bf16"),
];

/// The architecture the signature check compiles for (PTX, no GPU needed).
const CHECK_ARCH: &str = "compute_90";

/// How rows map onto the grid (one row per block either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Geometry {
    /// grid = (nrows, nchannels, nsamples): ggml's norm.cu launch. Breaks past 65535 on y/z.
    Ggml,
    /// grid clamped to the device limits on y and z; the kernel grid-strides over them.
    Clamped,
}

impl Geometry {
    const ALL: [Geometry; 2] = [Geometry::Ggml, Geometry::Clamped];
    fn name(self) -> &'static str {
        match self {
            Geometry::Ggml => "ggml",
            Geometry::Clamped => "clamped",
        }
    }
}

impl FromStr for Geometry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Geometry::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| format!("unknown geometry '{s}' (known: ggml, clamped)"))
    }
}

/// What the user asked for: `--kernel FILE --entry NAME --kernel-op OP --geometry G
/// [--block B]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceSpec {
    op: String,
    pub(crate) file: PathBuf,
    entry: String,
    geometry: Geometry,
    /// Threads per block (a multiple of 32, at most 1024).
    pub block: u32,
    /// Impl name; default `source:<entry>:<geometry>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl SourceSpec {
    /// A spec with the default block (256 threads) and impl name (`source:<entry>:<geometry>`).
    pub fn new(op: &str, file: &Path, entry: &str, geometry: Geometry) -> Self {
        SourceSpec {
            op: op.to_string(),
            file: file.to_path_buf(),
            entry: entry.to_string(),
            geometry,
            block: 256,
            name: None,
        }
    }
    fn impl_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("source:{}:{}", self.entry, self.geometry.name()))
    }
}

/// Why a source kernel could not be added.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SourceError {
    /// The op has no row-kernel ABI that a source kernel could follow.
    #[error("op '{op}' has no published kernel ABI for source kernels (ops with one: {known})")]
    NoAbi {
        /// The op given with `--kernel-op`.
        op: String,
        /// The ops that have one, comma separated.
        known: String,
    },
    /// The op is unknown, or the registry refused the impl.
    #[error(transparent)]
    Registry(#[from] CaseError),
    /// The `.cu` file could not be read.
    #[error("kernel file {path}: {msg}")]
    Read {
        /// The file as given.
        path: PathBuf,
        /// The I/O error.
        msg: String,
    },
    /// `--entry` is not a C identifier, so it cannot name an `extern "C"` kernel.
    #[error("entry '{0}' is not a C identifier")]
    BadEntry(String),
    /// `--block` is not a multiple of 32 from 32 to 1024.
    #[error("block size {0}: must be a multiple of 32 from 32 to 1024")]
    BadBlock(u32),
    /// NVRTC could not compile the file for the signature check.
    #[error("{0}")]
    Compile(#[from] NvrtcError),
    /// The compiled PTX has none of the entries `NAME`, `NAME_f16`, `NAME_bf16`.
    #[error("{file}: no kernel entry '{entry}' (nor '{entry}_f16' or '{entry}_bf16') in the compiled PTX (entries found: {found}); declare it extern \"C\" __global__ so its name is not mangled")]
    EntryMissing {
        /// The `.cu` file.
        file: String,
        /// The entry name looked for.
        entry: String,
        /// The entries the PTX has, comma separated, or `none`.
        found: String,
    },
    /// An entry's PTX parameter types differ from the row ABI's.
    #[error("{file}: entry '{entry}' has parameters ({found}) but the row ABI is ({expected}): {abi}", abi = ROW_ABI_C)]
    Signature {
        /// The `.cu` file.
        file: String,
        /// The entry whose parameters differ.
        entry: String,
        /// Its PTX parameter types, space separated (`.u64 .u64 .u32 ...`).
        found: String,
        /// The row ABI's PTX parameter types, space separated.
        expected: String,
    },
    /// The registry already has an impl of this name for the op.
    #[error("impl '{name}' of op {op} already exists; choose another name")]
    NameTaken {
        /// The op.
        op: String,
        /// The impl name that is taken.
        name: String,
    },
}

/// What `add_source_impl` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub(crate) op: String,
    /// The impl's name in the registry.
    pub name: String,
    /// Whether the compile and signature check ran (false: NVRTC is not installed here; the
    /// kernel is compiled when first launched, on the GPU machine).
    pub checked: bool,
    /// The element types the file has an entry for.
    pub dtypes: Vec<DType>,
}

/// Add a source kernel as an impl of its op.
pub fn add_source_impl(reg: &mut Registry, spec: &SourceSpec) -> Result<Added, SourceError> {
    let mut imp = SourceImpl::new(reg, spec)?;
    let checked = if nvrtc::present() {
        imp.check_signature()?;
        true
    } else {
        false
    };
    let dtypes = imp.dtypes();
    let op = imp.op.name();
    if reg.imp(imp.op, imp.name).is_ok() {
        return Err(SourceError::NameTaken {
            op: op.to_string(),
            name: imp.name.to_string(),
        });
    }
    let name = imp.name.to_string();
    reg.add_impl(op, Box::new(imp))?;
    Ok(Added {
        op: op.to_string(),
        name,
        checked,
        dtypes,
    })
}

/// A row-op kernel from a user's file, launched by kedge with a published geometry.
pub struct SourceImpl {
    op: &'static dyn Op,
    name: &'static str,
    about: &'static str,
    /// The f32 entry `NAME` (whether or not the file defines it).
    kernel: Kernel,
    /// The entry of each element type the file defines, f32 first.
    kernels: Vec<(DType, Kernel)>,
    geometry: Geometry,
    block: u64,
    /// The parameter passed as the kernel's last argument (the op's `ExternalAbi`).
    scalar: &'static str,
}

fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Leak a string for the `&'static str` fields of `Kernel` and `Impl`. Source impls live for
/// the whole process (the registry leaks them too), so nothing is lost that would be freed.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl SourceImpl {
    /// Read the file and build the impl (no compilation).
    pub fn new(reg: &Registry, spec: &SourceSpec) -> Result<SourceImpl, SourceError> {
        let op = reg.op(&spec.op)?;
        let scalar = kedge_ops::external::abi(op)
            .and_then(|a| a.row_kernel_scalar)
            .ok_or_else(|| SourceError::NoAbi {
                op: op.name().to_string(),
                known: kedge_ops::external::row_kernel_ops(reg.ops()).join(", "),
            })?;
        if !is_identifier(&spec.entry) {
            return Err(SourceError::BadEntry(spec.entry.clone()));
        }
        if !(32..=1024).contains(&spec.block) || spec.block & 31 != 0 {
            return Err(SourceError::BadBlock(spec.block));
        }
        let source = std::fs::read_to_string(&spec.file).map_err(|e| SourceError::Read {
            path: spec.file.clone(),
            msg: e.to_string(),
        })?;
        let file = spec.file.display().to_string();
        let about = format!(
            "external NVRTC source kernel {} in {} ({} geometry, {} threads per block)",
            spec.entry,
            file,
            spec.geometry.name(),
            spec.block
        );
        let kernel = Kernel {
            file: leak(file),
            source: leak(source),
            entry: leak(spec.entry.clone()),
        };
        // Until the PTX says otherwise (`check_signature`), the entries the text declares.
        let kernels = typed_entries(kernel, |e| declares_kernel(kernel.source, e));
        Ok(SourceImpl {
            op,
            name: leak(spec.impl_name()),
            about: leak(about),
            kernel,
            kernels,
            geometry: spec.geometry,
            block: spec.block as u64,
            scalar,
        })
    }

    /// The f32 entry `NAME`.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The element types the file has an entry for.
    pub fn dtypes(&self) -> Vec<DType> {
        self.kernels.iter().map(|(d, _)| *d).collect()
    }

    /// Compile for `CHECK_ARCH` (through the cache), find the entries `NAME`, `NAME_f16` and
    /// `NAME_bf16` in the PTX (at least one must be there) and compare each one's parameters
    /// with the row ABI. The entries found are the impl's element types.
    fn check_signature(&mut self) -> Result<(), SourceError> {
        let c = nvrtc::compile(&self.kernel, CHECK_ARCH, &[])?;
        let ptx = String::from_utf8_lossy(&c.image);
        let entries = ptx_entries(&ptx);
        let kernels = typed_entries(self.kernel, |e| entries.iter().any(|(n, _)| n == e));
        if kernels.is_empty() {
            // Names the entries there are.
            return check_ptx_signature(&ptx, self.kernel.file, self.kernel.entry);
        }
        for (_, k) in &kernels {
            check_ptx_signature(&ptx, k.file, k.entry)?;
        }
        self.kernels = kernels;
        Ok(())
    }
}

/// The entries of `base`'s element types (`NAME`, `NAME_f16`, `NAME_bf16`) that `has` finds.
fn typed_entries(base: Kernel, has: impl Fn(&str) -> bool) -> Vec<(DType, Kernel)> {
    ENTRY_SUFFIXES
        .iter()
        .filter_map(|&(d, suffix)| {
            let name = format!("{}{suffix}", base.entry);
            has(&name).then(|| {
                let entry = if suffix.is_empty() {
                    base.entry
                } else {
                    leak(name)
                };
                (d, base.entry(entry))
            })
        })
        .collect()
}

/// Does `source` declare a `__global__` function named `name`? A reading of the text, for
/// machines without NVRTC: the name as a whole word followed by `(`, in a declaration (the
/// text since the last `;`, `{` or `}`) that says `__global__`. A kernel whose name a macro
/// builds is found only in the PTX.
pub fn declares_kernel(source: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = source[from..].find(name) {
        let at = from + i;
        from = at + name.len();
        let before_ok = !source[..at].ends_with(is_ident);
        let after = source[from..].trim_start();
        if !before_ok || !after.starts_with('(') {
            continue;
        }
        let decl_start = source[..at].rfind([';', '{', '}']).map_or(0, |j| j + 1);
        if source[decl_start..at].contains("__global__") {
            return true;
        }
    }
    false
}

/// Every `.entry` in a PTX text with its parameter types, in order.
fn ptx_entries(ptx: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(i) = rest.find(".entry ") {
        rest = &rest[i + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        let params = &rest[open + 1..open + close];
        let types = params
            .split(',')
            .filter_map(|p| {
                let mut toks = p.split_whitespace();
                // `.param .u64 .ptr .align 1 name` or `.param .u32 name`: the type follows .param.
                toks.find(|t| *t == ".param")?;
                toks.next().map(str::to_string)
            })
            .collect();
        out.push((name, types));
        rest = &rest[open + close..];
    }
    out
}

/// The named entry's parameters match `ROW_ABI_PTX`.
fn check_ptx_signature(ptx: &str, file: &str, entry: &str) -> Result<(), SourceError> {
    let entries = ptx_entries(ptx);
    let Some((_, types)) = entries.iter().find(|(n, _)| n == entry) else {
        return Err(SourceError::EntryMissing {
            file: file.to_string(),
            entry: entry.to_string(),
            found: if entries.is_empty() {
                "none".into()
            } else {
                entries
                    .iter()
                    .map(|e| e.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    };
    if types
        .iter()
        .map(String::as_str)
        .ne(ROW_ABI_PTX.iter().copied())
    {
        return Err(SourceError::Signature {
            file: file.to_string(),
            entry: entry.to_string(),
            found: types.join(" "),
            expected: ROW_ABI_PTX.join(" "),
        });
    }
    Ok(())
}

/// The row ABI's extents and element strides, taken from the op's own tensor specs, or why
/// this case does not fit the ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowArgs {
    /// Elements per row (`ne[0]`); at most `i32::MAX`, as the ABI passes an `int`.
    pub ncols: i64,
    /// Rows per channel (`ne[1]`).
    pub nrows: i64,
    /// Channels per sample (`ne[2]`).
    pub nchannels: i64,
    /// Samples (`ne[3]`).
    pub nsamples: i64,
    /// Elements (not bytes) from one row of `x` to the next.
    pub stride_row: i64,
    /// Elements from one channel of `x` to the next.
    pub stride_channel: i64,
    /// Elements from one sample of `x` to the next.
    pub stride_sample: i64,
}

impl RowArgs {
    /// One input `x` (any element strides) and one dense output of the same float type (f32,
    /// f16 or bf16): anything else (a softmax mask, mixed or integer types) is not what the
    /// published ABI passes.
    pub fn of(specs: &[TensorSpec]) -> Result<RowArgs, String> {
        let ins: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Input).collect();
        let outs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
        if ins.len() != 1 || outs.len() != 1 {
            return Err(format!(
                "the row kernel ABI passes one input and one output; this case has inputs [{}] and outputs [{}] (a softmax mask needs a plugin)",
                ins.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
                outs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        let (x, dst) = (ins[0], outs[0]);
        for t in [x, dst] {
            if !ENTRY_SUFFIXES.iter().any(|(d, _)| *d == t.dtype) {
                return Err(format!(
                    "the row kernel ABI is f32, f16 or bf16; tensor {} is {}",
                    t.name, t.dtype
                ));
            }
        }
        if x.dtype != dst.dtype {
            return Err(format!(
                "the row kernel ABI passes x and dst of one type; {} is {} and {} is {}",
                x.name, x.dtype, dst.name, dst.dtype
            ));
        }
        let es = x.dtype.size();
        if x.ne != dst.ne {
            return Err(format!(
                "input and output shapes differ ({:?} vs {:?})",
                x.ne, dst.ne
            ));
        }
        if dst.nb != dense_strides(&dst.ne, dst.dtype) {
            return Err(format!("output {} is not dense", dst.name));
        }
        if x.nb[0] != es || x.nb[1..].iter().any(|b| b % es != 0) {
            return Err(format!(
                "input {} has byte strides {:?}: the ABI needs contiguous rows and element strides",
                x.name, x.nb
            ));
        }
        let elems = |b: u64| -> Result<i64, String> {
            i64::try_from(b / es).map_err(|_| format!("stride {b} bytes does not fit long long"))
        };
        if x.ne[0] > i32::MAX as i64 {
            return Err(format!(
                "ncols {} does not fit the ABI's int ncols",
                x.ne[0]
            ));
        }
        Ok(RowArgs {
            ncols: x.ne[0],
            nrows: x.ne[1],
            nchannels: x.ne[2],
            nsamples: x.ne[3],
            stride_row: elems(x.nb[1])?,
            stride_channel: elems(x.nb[2])?,
            stride_sample: elems(x.nb[3])?,
        })
    }
}

impl SourceImpl {
    fn row_args(&self, case: &Case) -> Result<RowArgs, Refusal> {
        let specs = self.op.tensors(case).map_err(|e| Refusal(e.to_string()))?;
        RowArgs::of(&specs).map_err(Refusal)
    }

    /// The file's entry for the case's element type, or why there is none.
    fn kernel_for(&self, dtype: DType) -> Result<Kernel, Refusal> {
        if let Some((_, k)) = self.kernels.iter().find(|(d, _)| *d == dtype) {
            return Ok(*k);
        }
        let suffix = ENTRY_SUFFIXES
            .iter()
            .find(|(d, _)| *d == dtype)
            .map(|(_, s)| *s);
        let has = self
            .kernels
            .iter()
            .map(|(d, k)| format!("{} ({d})", k.entry))
            .collect::<Vec<_>>()
            .join(", ");
        Err(Refusal(match suffix {
            Some(s) => format!(
                "{} has no {dtype} kernel: define {}{s} for it (it has {has})",
                self.kernel.file, self.kernel.entry
            ),
            None => format!("the row kernel ABI is f32, f16 or bf16; case is {dtype}"),
        }))
    }
}

impl SourceImpl {
    /// The case's value of the ABI's scalar parameter (validated cases name every one; the
    /// op's default otherwise).
    fn scalar_value(&self, case: &Case) -> f32 {
        case.params
            .get(self.scalar)
            .cloned()
            .or_else(|| {
                self.op
                    .params()
                    .iter()
                    .find(|p| p.name == self.scalar)
                    .map(|p| p.default_value())
            })
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0) as f32
    }
}

impl Impl for SourceImpl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        ImplRole::External
    }
    fn about(&self) -> &str {
        self.about
    }
    /// One launch with the ABI's arguments: kedge plans it, so it is checked against the
    /// profile, run as stated, and written out by `kedge repro` like a built-in kernel.
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
        let kernel = self.kernel_for(case.dtype)?;
        let a = self.row_args(case)?;
        let grid = match self.geometry {
            Geometry::Ggml => [a.nrows as u64, a.nchannels as u64, a.nsamples as u64],
            Geometry::Clamped => {
                if a.nrows as u64 > limits.grid_limit(0) {
                    return Err(Refusal(format!(
                        "ne[1] = {} rows exceeds grid.x {}; the clamped geometry keeps one row per block.x",
                        a.nrows,
                        limits.grid_limit(0)
                    )));
                }
                [
                    a.nrows as u64,
                    (a.nchannels as u64).min(limits.grid_limit(1)),
                    (a.nsamples as u64).min(limits.grid_limit(2)),
                ]
            }
        };
        let args = vec![
            KernelArg::Tensor(0),
            KernelArg::Tensor(1),
            KernelArg::I32(a.ncols as i32),
            KernelArg::I64(a.nrows),
            KernelArg::I64(a.nchannels),
            KernelArg::I64(a.nsamples),
            KernelArg::I64(a.stride_row),
            KernelArg::I64(a.stride_channel),
            KernelArg::I64(a.stride_sample),
            KernelArg::F32(self.scalar_value(case)),
        ];
        Ok(Plan::single(
            LaunchPlan::new(kernel, grid, [self.block, 1, 1], 0).args(args),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.visible .entry good(
	.param .u64 .ptr .align 1 good_param_0,
	.param .u64 .ptr .align 1 good_param_1,
	.param .u32 good_param_2,
	.param .u64 good_param_3,
	.param .u64 good_param_4,
	.param .u64 good_param_5,
	.param .u64 good_param_6,
	.param .u64 good_param_7,
	.param .u64 good_param_8,
	.param .f32 good_param_9
)
{
	ret;
}
.visible .entry short_one(
	.param .u64 short_one_param_0,
	.param .u64 short_one_param_1,
	.param .u32 short_one_param_2,
	.param .f32 short_one_param_3
)
{
	ret;
}
"#;

    #[test]
    fn ptx_signatures_are_read_and_compared() {
        let e = ptx_entries(PTX);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, "good");
        assert_eq!(e[0].1, ROW_ABI_PTX.map(String::from).to_vec());
        assert_eq!(e[1].1, vec![".u64", ".u64", ".u32", ".f32"]);
        assert!(check_ptx_signature(PTX, "f.cu", "good").is_ok());
        match check_ptx_signature(PTX, "f.cu", "short_one") {
            Err(SourceError::Signature { found, .. }) => assert_eq!(found, ".u64 .u64 .u32 .f32"),
            other => panic!("expected a signature error, got {other:?}"),
        }
        match check_ptx_signature(PTX, "f.cu", "absent") {
            Err(SourceError::EntryMissing { found, .. }) => assert_eq!(found, "good, short_one"),
            other => panic!("expected a missing entry, got {other:?}"),
        }
    }

    #[test]
    fn geometry_names_round_trip() {
        for g in Geometry::ALL {
            assert_eq!(g.name().parse::<Geometry>(), Ok(g));
        }
        assert!("grid".parse::<Geometry>().is_err());
        assert!(is_identifier("my_rms_norm2"));
        assert!(!is_identifier("2x"));
        assert!(!is_identifier("a-b"));
    }
}
