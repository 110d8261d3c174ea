//! Plugins: shared libraries that implement `harness/include/kedge.h`.
//!
//! `Plugin::load` opens the library, reads its `kedge_plugin_info()` answer and checks every
//! field before any of it is trusted: the ABI version first (it is the struct's first member
//! in every version), then the name, the op table, each op name against the registry, each
//! dtype mask against the op's dtypes, and each entry function pointer. `register` turns
//! every op entry into a `PluginImpl` and adds it to a `Registry`, where it is an impl like
//! any other: the engine allocates in the case's mode, poisons, calls, syncs, checks canaries
//! and compares. Only the launch contract is skipped (the plugin launches its own kernels)
//! and the plan says so.
//!
//! Loading a library runs its initializers, and calling an entry runs its code in this
//! process: plugins are trusted code. Workers are where they run, so a plugin that segfaults
//! costs one worker; nothing here catches signals.

use kedge_core::contract::op::CField;
use kedge_core::contract::run::RunCtx;
use kedge_core::cuda::error::is_sticky;
use kedge_core::cuda::RunError;
use kedge_core::{
    Case, CaseError, DType, Impl, ImplRole, LimitsProfile, Op, Plan, Refusal, Registry, Role,
    TensorSpec,
};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// The ABI version this kedge speaks (`KEDGE_ABI_VERSION` in kedge.h).
pub const ABI_VERSION: u32 = 1;
/// `KEDGE_OK`, `KEDGE_UNSUPPORTED`, `KEDGE_ERROR`.
const STATUS_OK: c_int = 0;
const STATUS_UNSUPPORTED: c_int = 1;
const STATUS_ERROR: c_int = 2;
/// The symbol every plugin exports.
const INFO_SYMBOL: &str = "kedge_plugin_info";
/// Size of the message buffer handed to an entry.
pub const MSG_LEN: usize = 4096;
/// Longest name or message kedge reads from a plugin's own strings: a string without a NUL
/// within this many bytes is garbage, not a name.
const MAX_STR: usize = 4096;
/// More op entries than this is a garbage count, not a plugin.
const MAX_OPS: u32 = 4096;

/// `kedge_tensor`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct KedgeTensor {
    data: *mut c_void,
    dtype: i32,
    reserved: i32,
    ne: [i64; 4],
    nb: [u64; 4],
    name: *const c_char,
}

/// `kedge_params_json`.
#[repr(C)]
#[derive(Debug)]
pub struct ParamsJson {
    json: *const c_char,
}

/// `kedge_entry_fn`.
type EntryFn = unsafe extern "C" fn(
    inputs: *const KedgeTensor,
    n_in: c_int,
    outputs: *mut KedgeTensor,
    n_out: c_int,
    params: *const c_void,
    cuda_stream: *mut c_void,
    msg: *mut c_char,
    msg_len: usize,
) -> c_int;

/// `kedge_op_entry`. The entry is an `Option` so a NULL pointer is a value we can test, not
/// undefined behaviour.
#[repr(C)]
struct RawOpEntry {
    op: *const c_char,
    variant: *const c_char,
    dtypes: u32,
    entry: Option<EntryFn>,
}

/// `kedge_plugin`. Only `abi_version` may be read before the version is checked.
#[repr(C)]
struct RawPlugin {
    abi_version: u32,
    name: *const c_char,
    about: *const c_char,
    n_ops: u32,
    ops: *const RawOpEntry,
}

type InfoFn = unsafe extern "C" fn() -> *const RawPlugin;

/// Why a plugin could not be loaded or registered. Every variant names the file as given.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PluginError {
    /// No file at the path (a directory is `NotALibrary`).
    #[error("plugin {path}: file not found")]
    NotFound {
        /// The plugin file as given.
        path: PathBuf,
    },
    /// The dynamic loader refused the file: not a shared library, or an unresolved symbol.
    #[error("plugin {path}: could not be loaded as a shared library: {msg}")]
    NotALibrary {
        /// The plugin file as given.
        path: PathBuf,
        /// The loader's message.
        msg: String,
    },
    /// The library does not export `kedge_plugin_info`.
    #[error("plugin {path}: no symbol `kedge_plugin_info` (export it with extern \"C\" and default visibility, see harness/include/kedge.h): {msg}")]
    MissingInfo {
        /// The plugin file as given.
        path: PathBuf,
        /// The loader's message.
        msg: String,
    },
    /// `kedge_plugin_info()` returned a NULL table.
    #[error("plugin {path}: kedge_plugin_info() returned NULL")]
    NullInfo {
        /// The plugin file as given.
        path: PathBuf,
    },
    /// The table's `abi_version` is not [`ABI_VERSION`]; nothing else of it was read.
    #[error("plugin {path}: built for kedge ABI version {found}, but this kedge speaks ABI version {expected}; rebuild it against this kedge's harness/include/kedge.h")]
    AbiMismatch {
        /// The plugin file as given.
        path: PathBuf,
        /// The version the plugin was built for.
        found: u32,
        /// The version this kedge speaks.
        expected: u32,
    },
    /// A pointer of the table that must not be NULL is.
    #[error("plugin {path}: {what} is NULL")]
    NullPointer {
        /// The plugin file as given.
        path: PathBuf,
        /// Which pointer, in words (`op entry 2 (rms_norm): the entry function pointer`).
        what: String,
    },
    /// A string of the plugin is not valid UTF-8 or has no NUL within 4096 bytes, or a name
    /// or variant is empty or has characters outside `[A-Za-z0-9_.-]`.
    #[error("plugin {path}: {what} is not a usable string: {why}")]
    BadString {
        /// The plugin file as given.
        path: PathBuf,
        /// Which string, in words (`the plugin's name`).
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// The op table is empty, or says it has more than 4096 entries (garbage, not a count).
    #[error("plugin {path}: {what}")]
    BadTable {
        /// The plugin file as given.
        path: PathBuf,
        /// What is wrong with the table.
        what: String,
    },
    /// An op entry names an op the registry does not have.
    #[error("plugin {path}: op entry {index} names op '{op}', which kedge does not know (known: {known})")]
    UnknownOp {
        /// The plugin file as given.
        path: PathBuf,
        /// The entry's position in the op table, from 0.
        index: usize,
        /// The op name the entry gives.
        op: String,
        /// The ops kedge knows, comma separated.
        known: String,
    },
    /// An op entry's dtype mask has bits kedge.h does not define, or covers none of the op's
    /// dtypes.
    #[error("plugin {path}: op entry {index} ({op}): dtype mask {mask:#x}: {why}")]
    BadDtypes {
        /// The plugin file as given.
        path: PathBuf,
        /// The entry's position in the op table, from 0.
        index: usize,
        /// The entry's op.
        op: String,
        /// The mask as the plugin gave it (bit n: `KEDGE_DTYPE` code n).
        mask: u32,
        /// What is wrong with it.
        why: String,
    },
    /// Two entries, or an entry and an impl already registered, would have the same impl
    /// name; nothing of the plugin was added.
    #[error("plugin {path}: impl name '{name}' of op {op} is taken (by the plugin itself or an impl already registered); give entries distinct variants or choose another name")]
    NameTaken {
        /// The plugin file as given.
        path: PathBuf,
        /// The op of the clashing impl.
        op: String,
        /// The impl name that is taken.
        name: String,
    },
    /// The registry refused an impl.
    #[error("plugin {path}: {error}")]
    Registry {
        /// The plugin file as given.
        path: PathBuf,
        /// The registry's error.
        error: Box<CaseError>,
    },
}

/// How one call of an entry ended, when it did not end in `KEDGE_OK`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EntryError {
    /// `KEDGE_UNSUPPORTED` and the plugin's reason.
    #[error("{0}")]
    Unsupported(String),
    /// `KEDGE_ERROR` (or any status kedge does not know, named in the message).
    #[error("{0}")]
    Failed(String),
}

/// One op a loaded plugin provides.
#[derive(Clone)]
pub struct PluginEntry {
    /// The op the entry implements (checked against the registry).
    pub op: &'static dyn Op,
    /// The entry's variant name, which its impl name ends with (`plugin:<name>:<variant>`);
    /// `None`: the plugin's one entry for this op.
    pub variant: Option<String>,
    /// The op's dtypes that the entry's mask covers.
    pub dtypes: Vec<DType>,
    entry: EntryFn,
}

/// A loaded, checked plugin.
pub struct Plugin {
    path: PathBuf,
    /// The plugin's own name (`[A-Za-z0-9_.-]`); its impls are `plugin:<name>` by default.
    pub name: String,
    /// Its one-line description, if it gives one.
    pub about: Option<String>,
    /// The ABI version its table declares (always [`ABI_VERSION`]: another is refused).
    pub abi_version: u32,
    /// Its op entries, in table order.
    pub entries: Vec<PluginEntry>,
    lib: Arc<Library>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("about", &self.about)
            .field("abi_version", &self.abi_version)
            .field(
                "entries",
                &self
                    .entries
                    .iter()
                    .map(|e| (e.op.name(), e.variant.clone(), e.dtypes.clone()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// kedge.h's `KEDGE_DTYPE_*` code of a dtype (its bit in an entry's mask). The ABI has codes
/// for the plain types only; a block format (ggml's quantized types) gets -1, no bit.
fn dtype_code(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
        DType::I32 => 3,
        DType::U8 => 4,
        _ => -1,
    }
}

const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::Bf16, DType::I32, DType::U8];

/// Read a NUL-terminated string a plugin owns, refusing NULL, a missing NUL within
/// `MAX_STR` bytes, and invalid UTF-8. (A pointer into unmapped memory cannot be detected
/// from here; it crashes the worker, which is what workers are for.)
///
/// # Safety
/// `p` is NULL or points to readable bytes up to its NUL or `MAX_STR` bytes.
unsafe fn read_str(p: *const c_char) -> Result<String, String> {
    if p.is_null() {
        return Err("NULL".into());
    }
    let mut bytes = Vec::new();
    for i in 0..MAX_STR {
        // SAFETY: the caller promises readable bytes up to the NUL; we stop at it.
        let b = unsafe { *p.add(i) } as u8;
        if b == 0 {
            return String::from_utf8(bytes).map_err(|e| format!("not UTF-8 ({e})"));
        }
        bytes.push(b);
    }
    Err(format!("no NUL terminator within {MAX_STR} bytes"))
}

fn check_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("empty".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "'{s}' has the character {c:?}; names use [A-Za-z0-9_.-]"
        ));
    }
    Ok(())
}

impl Plugin {
    /// Load and check a plugin. `reg` is used to check that every op it names exists.
    pub fn load(path: &Path, reg: &Registry) -> Result<Plugin, PluginError> {
        let p = path.to_path_buf();
        let lib = open_plugin(path)?;
        let raw = info_table(&lib, path)?;
        let found = raw.abi_version;
        let faults = Faults(path);
        // SAFETY: `raw` is the table the plugin's own info function returned, its version
        // checked to be this kedge's.
        let (name, about, table) = unsafe { header(raw, &faults) }?;
        let mut entries = Vec::with_capacity(table.len());
        for (index, e) in table.iter().enumerate() {
            // SAFETY: `e` is an entry of the op table `header` checked.
            entries.push(unsafe { entry(index, e, reg, &faults) }?);
        }
        Ok(Plugin {
            path: p,
            name,
            about,
            abi_version: found,
            entries,
            lib: Arc::new(lib),
        })
    }

    /// The impl name of an entry: `<base>` or `<base>:<variant>`, where base is the
    /// user's choice or `plugin:<plugin name>`.
    fn impl_name(&self, e: &PluginEntry, base: Option<&str>) -> String {
        let base = base
            .map(str::to_string)
            .unwrap_or_else(|| format!("plugin:{}", self.name));
        match &e.variant {
            Some(v) => format!("{base}:{v}"),
            None => base,
        }
    }

    /// One impl per entry, named as `impl_name` says.
    pub fn impls(&self, base: Option<&str>) -> Vec<PluginImpl> {
        self.entries
            .iter()
            .map(|e| {
                let name = self.impl_name(e, base);
                let about = format!(
                    "external plugin {} ({}){}",
                    self.name,
                    self.path.display(),
                    self.about
                        .as_deref()
                        .map(|a| format!(": {a}"))
                        .unwrap_or_default()
                );
                PluginImpl {
                    op: e.op,
                    // Impl names are &'static like the built-ins'; a plugin's impls live
                    // for the whole process (the registry leaks them), so leaking is exact.
                    name: Box::leak(name.into_boxed_str()),
                    about: Box::leak(about.into_boxed_str()),
                    plugin: self.name.clone(),
                    dtypes: e.dtypes.clone(),
                    entry: e.entry,
                    _lib: self.lib.clone(),
                }
            })
            .collect()
    }
}

/// The errors of a plugin's table, each naming the plugin file as given.
struct Faults<'a>(&'a Path);

impl Faults<'_> {
    /// A string of the table that is not usable.
    fn bad_str(&self, what: &str, why: String) -> PluginError {
        PluginError::BadString {
            path: self.0.to_path_buf(),
            what: what.to_string(),
            why,
        }
    }

    /// A pointer of the table that is NULL and must not be.
    fn null(&self, what: String) -> PluginError {
        PluginError::NullPointer {
            path: self.0.to_path_buf(),
            what,
        }
    }
}

/// The plugin file opened as a shared library: a directory or a missing file is refused
/// before the dynamic loader sees it.
fn open_plugin(path: &Path) -> Result<Library, PluginError> {
    let p = path.to_path_buf();
    if path.is_dir() {
        return Err(PluginError::NotALibrary {
            path: p,
            msg: "it is a directory, not a file".into(),
        });
    }
    if !path.is_file() {
        return Err(PluginError::NotFound { path: p });
    }
    // dlopen searches the library path for a bare name; an absolute path loads this file.
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| p.clone());
    open_library(&abs).map_err(|e| PluginError::NotALibrary {
        path: p.clone(),
        msg: e.to_string(),
    })
}

/// The library's `kedge_plugin_info()` answer, once it is known not to be NULL and to be of
/// this kedge's ABI version; nothing but the version is read before that.
fn info_table<'l>(lib: &'l Library, path: &Path) -> Result<&'l RawPlugin, PluginError> {
    let p = path.to_path_buf();
    // SAFETY: the symbol's type is the one kedge.h declares; a plugin that exports a
    // different thing under this name breaks its own contract.
    let info: InfoFn = unsafe {
        *lib.get::<InfoFn>(INFO_SYMBOL.as_bytes())
            .map_err(|e| PluginError::MissingInfo {
                path: p.clone(),
                msg: e.to_string(),
            })?
    };
    // SAFETY: calling the plugin's own info function, as kedge.h specifies.
    let raw = unsafe { info() };
    if raw.is_null() {
        return Err(PluginError::NullInfo { path: p });
    }
    // Only the first member is read before the version is known to match.
    // SAFETY: raw is non-null and points to a kedge_plugin of some version; abi_version
    // is its first member in all of them.
    let found = unsafe { std::ptr::read(raw as *const u32) };
    if found != ABI_VERSION {
        return Err(PluginError::AbiMismatch {
            path: p,
            found,
            expected: ABI_VERSION,
        });
    }
    // SAFETY: version 1 layout confirmed by the version field.
    Ok(unsafe { &*raw })
}

/// The plugin's name and description, and its op table, checked: a usable name, a count of
/// ops that is not 0 nor garbage, a table that is not NULL.
///
/// # Safety
/// `raw` is a version-checked `kedge_plugin` a plugin returned: its strings are NULL or the
/// plugin's own, and `ops` is NULL or points to `n_ops` entries (kedge.h).
unsafe fn header<'t>(
    raw: &'t RawPlugin,
    faults: &Faults<'_>,
) -> Result<(String, Option<String>, &'t [RawOpEntry]), PluginError> {
    if raw.name.is_null() {
        return Err(faults.null("the plugin's name".into()));
    }
    // SAFETY: non-null string owned by the plugin (static storage per kedge.h).
    let name =
        unsafe { read_str(raw.name) }.map_err(|why| faults.bad_str("the plugin's name", why))?;
    check_name(&name).map_err(|why| faults.bad_str("the plugin's name", why))?;
    let about = if raw.about.is_null() {
        None
    } else {
        // SAFETY: as above.
        Some(
            unsafe { read_str(raw.about) }
                .map_err(|why| faults.bad_str("the plugin's about", why))?,
        )
    };
    if raw.n_ops == 0 {
        return Err(PluginError::BadTable {
            path: faults.0.to_path_buf(),
            what: "provides no ops (n_ops is 0)".into(),
        });
    }
    if raw.n_ops > MAX_OPS {
        return Err(PluginError::BadTable {
            path: faults.0.to_path_buf(),
            what: format!("n_ops is {} (more than {MAX_OPS}: garbage?)", raw.n_ops),
        });
    }
    if raw.ops.is_null() {
        return Err(faults.null(format!("the op table (n_ops = {})", raw.n_ops)));
    }
    // SAFETY: non-null table of n_ops entries, per kedge.h.
    let table = unsafe { std::slice::from_raw_parts(raw.ops, raw.n_ops as usize) };
    Ok((name, about, table))
}

/// Op entry `index` of the table, checked: its op name is an op of `reg`, its variant a
/// usable name, its entry function not NULL, and its dtype mask names kedge dtypes and
/// covers at least one of the op's.
///
/// # Safety
/// `e` is an entry of a version-checked plugin's op table: its strings are NULL or the
/// plugin's own (kedge.h).
unsafe fn entry(
    index: usize,
    e: &RawOpEntry,
    reg: &Registry,
    faults: &Faults<'_>,
) -> Result<PluginEntry, PluginError> {
    let what = format!("op entry {index}: op name");
    // SAFETY: the plugin's static string or NULL.
    let op_name = unsafe { read_str(e.op) }.map_err(|why| {
        if e.op.is_null() {
            faults.null(what.clone())
        } else {
            faults.bad_str(&what, why)
        }
    })?;
    let op = reg.op(&op_name).map_err(|err| PluginError::UnknownOp {
        path: faults.0.to_path_buf(),
        index,
        op: op_name.clone(),
        known: match err {
            CaseError::UnknownOp { known, .. } => known,
            other => other.to_string(),
        },
    })?;
    let variant = if e.variant.is_null() {
        None
    } else {
        let what = format!("op entry {index} ({op_name}): variant");
        // SAFETY: the plugin's static string.
        let v = unsafe { read_str(e.variant) }.map_err(|why| faults.bad_str(&what, why))?;
        check_name(&v).map_err(|why| faults.bad_str(&what, why))?;
        Some(v)
    };
    let entry = e.entry.ok_or_else(|| {
        faults.null(format!(
            "op entry {index} ({op_name}): the entry function pointer"
        ))
    })?;
    let dtypes = entry_dtypes(op, e.dtypes).map_err(|why| PluginError::BadDtypes {
        path: faults.0.to_path_buf(),
        index,
        op: op_name.clone(),
        mask: e.dtypes,
        why,
    })?;
    Ok(PluginEntry {
        op,
        variant,
        dtypes,
        entry,
    })
}

/// The op's dtypes an entry's dtype `mask` covers; what is wrong with the mask when it has
/// bits kedge.h does not define or covers none of them.
fn entry_dtypes(op: &dyn Op, mask: u32) -> Result<Vec<DType>, String> {
    let known_bits = (1u32 << ALL_DTYPES.len()) - 1;
    if mask & !known_bits != 0 {
        return Err(format!(
            "bits {:#x} name no kedge dtype (KEDGE_DTYPE_BIT of 0..={})",
            mask & !known_bits,
            ALL_DTYPES.len() - 1
        ));
    }
    let dtypes: Vec<DType> = op
        .dtypes()
        .iter()
        .copied()
        .filter(|d| dtype_code(*d) >= 0 && mask & (1 << dtype_code(*d)) != 0)
        .collect();
    if dtypes.is_empty() {
        return Err(format!(
            "covers none of the op's dtypes ({})",
            op.dtypes()
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(dtypes)
}

#[cfg(unix)]
fn open_library(path: &Path) -> Result<Library, libloading::Error> {
    use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
    // RTLD_NOW: an unresolved symbol (a missing libcudart, say) fails here, with its name,
    // instead of in the middle of a case.
    // SAFETY: loading a library runs its initializers: plugins are trusted code.
    unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Library::from)
}

#[cfg(not(unix))]
fn open_library(path: &Path) -> Result<Library, libloading::Error> {
    // SAFETY: as above.
    unsafe { Library::new(path) }
}

/// Load a plugin and add each of its entries to `reg` as an impl. `name` replaces the
/// default `plugin:<plugin name>` base. Returns the impl names added, as `(op, impl)`.
pub fn register(
    reg: &mut Registry,
    path: &Path,
    name: Option<&str>,
) -> Result<Vec<(String, String)>, PluginError> {
    let plugin = Plugin::load(path, reg)?;
    let impls = plugin.impls(name);
    // Check every name before adding any, so a failed registration adds nothing.
    let mut seen: Vec<(String, String)> = Vec::new();
    for i in &impls {
        let key = (i.op.name().to_string(), i.name.to_string());
        if seen.contains(&key) || reg.imp(i.op, i.name).is_ok() {
            return Err(PluginError::NameTaken {
                path: plugin.path.clone(),
                op: key.0,
                name: key.1,
            });
        }
        seen.push(key);
    }
    for i in impls {
        let op = i.op.name();
        reg.add_impl(op, Box::new(i))
            .map_err(|error| PluginError::Registry {
                path: plugin.path.clone(),
                error: Box::new(error),
            })?;
    }
    Ok(seen)
}

/// The `params` an entry receives: the op's kedge.h struct (its 4-byte fields in order, as
/// the op's `ExternalAbi` describes them), or the case's parameters as JSON.
#[derive(Debug)]
pub enum EntryParams {
    /// The struct's fields, each 4 bytes (`float` bits or `int32_t`), in declaration order.
    Struct(Vec<u32>),
    /// Every other op: the case's params as one JSON object. `raw` points into `text`, whose
    /// heap buffer does not move when the enum does.
    Json {
        /// The JSON text, NUL-terminated.
        text: CString,
        /// The `kedge_params_json` struct the entry receives a pointer to.
        raw: ParamsJson,
    },
}

impl EntryParams {
    /// The params of a validated case of `op`; `specs` are its tensors (a softmax mask).
    pub fn for_case(op: &dyn Op, case: &Case, specs: &[TensorSpec]) -> EntryParams {
        let value = |name: &str| {
            case.params.get(name).cloned().or_else(|| {
                op.params()
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.default_value())
            })
        };
        let abi = kedge_ops::external::abi(op).and_then(|a| a.params);
        match abi {
            Some(cp) => EntryParams::Struct(
                cp.fields
                    .iter()
                    .map(|f| match f {
                        CField::F32(name) => {
                            let x = value(name).and_then(|v| v.as_f64()).unwrap_or(0.0);
                            (x as f32).to_bits()
                        }
                        CField::I32(name) => {
                            let x = value(name)
                                .and_then(|v| v.as_i64().or(v.as_bool().map(i64::from)))
                                .unwrap_or(0);
                            x as i32 as u32
                        }
                        CField::HasInput(t) => {
                            u32::from(specs.iter().any(|s| s.role == Role::Input && s.name == *t))
                        }
                    })
                    .collect(),
            ),
            None => {
                // Params is a BTreeMap: keys come out sorted. Its JSON has no NUL byte
                // (serde_json escapes control characters), so CString::new cannot fail on it.
                let text = serde_json::to_string(&case.params).unwrap_or_else(|_| "{}".into());
                let text = CString::new(text).unwrap_or_default();
                let raw = ParamsJson {
                    json: text.as_ptr(),
                };
                EntryParams::Json { text, raw }
            }
        }
    }

    /// The `params` pointer an entry receives.
    fn as_ptr(&self) -> *const c_void {
        match self {
            EntryParams::Struct(words) => words.as_ptr() as *const c_void,
            EntryParams::Json { raw, .. } => raw as *const ParamsJson as *const c_void,
        }
    }
}

/// A case's tensors as kedge.h descriptors: inputs and outputs in the op's order. Holds the
/// name strings the descriptors point to.
pub struct TensorDescs {
    _names: Vec<CString>,
    inputs: Vec<KedgeTensor>,
    outputs: Vec<KedgeTensor>,
}

impl TensorDescs {
    /// Descriptors for `specs` at device addresses `ptrs` (one per spec, same order).
    pub fn new(specs: &[TensorSpec], ptrs: &[u64]) -> Result<TensorDescs, String> {
        if specs.len() != ptrs.len() {
            return Err(format!(
                "{} tensor specs but {} allocations",
                specs.len(),
                ptrs.len()
            ));
        }
        let mut names = Vec::with_capacity(specs.len());
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for (s, &ptr) in specs.iter().zip(ptrs) {
            let name = CString::new(s.name.as_str())
                .map_err(|_| format!("tensor name {:?} has a NUL byte", s.name))?;
            let t = KedgeTensor {
                data: ptr as usize as *mut c_void,
                dtype: dtype_code(s.dtype),
                reserved: 0,
                ne: s.ne,
                nb: s.nb,
                // The CString's buffer is on the heap and is kept in `_names`.
                name: name.as_ptr(),
            };
            names.push(name);
            match s.role {
                Role::Input => inputs.push(t),
                Role::Output => outputs.push(t),
            }
        }
        Ok(TensorDescs {
            _names: names,
            inputs,
            outputs,
        })
    }
}

/// One entry of a plugin, as a kedge impl.
pub struct PluginImpl {
    op: &'static dyn Op,
    name: &'static str,
    about: &'static str,
    plugin: String,
    dtypes: Vec<DType>,
    entry: EntryFn,
    /// Keeps the library mapped while the impl exists (for the process: impls are leaked).
    _lib: Arc<Library>,
}

impl PluginImpl {
    /// The op this entry implements.
    pub fn op(&self) -> &'static dyn Op {
        self.op
    }
    /// The name of the plugin the entry comes from (its own name, not the file).
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }
    /// The op's dtypes the entry's mask covers; a case of any other is refused at plan.
    pub fn dtypes(&self) -> &[DType] {
        &self.dtypes
    }

    /// What `Impl::plan` says is not checked.
    fn unchecked_note(&self) -> String {
        format!(
            "plugin {} launches its own kernels: launch contract not checked",
            self.plugin
        )
    }

    /// How an entry's answer reaches the verdict: unsupported with the plugin's reason, or
    /// an impl error (verdict `launch-error`, detector `impl`) with its message.
    pub fn run_error(&self, e: EntryError) -> RunError {
        match e {
            EntryError::Unsupported(m) => RunError::Unsupported(m),
            EntryError::Failed(m) => RunError::Impl(format!("plugin {}: {m}", self.plugin)),
        }
    }

    /// Call the entry with descriptors, params and a stream; map its status. No GPU work is
    /// done here beyond what the plugin itself does, so tests can call it with fake
    /// descriptors against a plugin that only looks at them.
    ///
    /// # Safety
    /// The descriptors' `data` pointers and `stream` must be what the plugin may use: device
    /// allocations of the described spans on the current context, and a stream of it (or
    /// NULL). A test plugin that never dereferences them may get any values.
    pub unsafe fn call_entry(
        &self,
        descs: &mut TensorDescs,
        params: &EntryParams,
        stream: *mut c_void,
    ) -> Result<(), EntryError> {
        let mut msg = vec![0 as c_char; MSG_LEN];
        // SAFETY: the arrays live for the call and their lengths are passed; msg is a
        // zeroed buffer of MSG_LEN bytes; params points to the op's struct.
        let status = unsafe {
            (self.entry)(
                descs.inputs.as_ptr(),
                descs.inputs.len() as c_int,
                descs.outputs.as_mut_ptr(),
                descs.outputs.len() as c_int,
                params.as_ptr(),
                stream,
                msg.as_mut_ptr(),
                MSG_LEN,
            )
        };
        let text = message(&msg);
        match status {
            STATUS_OK => Ok(()),
            STATUS_UNSUPPORTED => Err(EntryError::Unsupported(if text.is_empty() {
                format!("plugin {} gave no reason", self.plugin)
            } else {
                text
            })),
            STATUS_ERROR => Err(EntryError::Failed(if text.is_empty() {
                format!(
                    "plugin {} returned KEDGE_ERROR with no message",
                    self.plugin
                )
            } else {
                text
            })),
            other => Err(EntryError::Failed(format!(
                "plugin {} returned status {other}, which is not KEDGE_OK/UNSUPPORTED/ERROR{}",
                self.plugin,
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {text}")
                }
            ))),
        }
    }
}

/// The plugin's message: up to the first NUL or the buffer's end (a plugin that fills the
/// buffer without a terminator is cut at its end, never read past it), lossy UTF-8, trimmed.
fn message(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

impl Impl for PluginImpl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        ImplRole::External
    }
    fn about(&self) -> &str {
        self.about
    }
    fn plan(&self, case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        if !self.dtypes.contains(&case.dtype) {
            return Err(Refusal(format!(
                "plugin {} does not provide {} for {} (its entry covers: {})",
                self.plugin,
                self.op.name(),
                case.dtype,
                self.dtypes
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(Plan {
            unchecked: vec![self.unchecked_note()],
            ..Plan::default()
        })
    }
    fn run(&self, ctx: &mut RunCtx<'_>, case: &Case, _plan: &Plan) -> Result<(), RunError> {
        let specs = self
            .op
            .tensors(case)
            .map_err(|e| RunError::Unsupported(format!("bad input: {e}")))?;
        let ptrs: Vec<u64> = ctx.tensors.iter().map(|a| a.ptr).collect();
        let mut descs = TensorDescs::new(&specs, &ptrs)
            .map_err(|e| RunError::Unsupported(format!("internal: {e}")))?;
        let params = EntryParams::for_case(self.op, case, &specs);
        // The plugin uses the CUDA runtime, which launches on the thread's current context:
        // make sure that is kedge's.
        ctx.dev.ctx.bind_to_thread().map_err(|e| RunError::Driver {
            call: "cuCtxSetCurrent (before the plugin call)".into(),
            name: format!("{:?}", e.0),
            code: e.0 as u32,
            msg: String::new(),
            sticky: is_sticky(e.0),
        })?;
        ctx.fact("plugin", self.plugin.clone());
        // SAFETY: descriptors point at this case's allocations (exact spans, current
        // context), params at the op's struct, and the stream is the device's.
        let r = unsafe { self.call_entry(&mut descs, &params, ctx.stream() as *mut c_void) };
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                // A plugin that reports a failure may have faulted the context on the way:
                // a fault at sync is the more precise answer (guard page, sticky context).
                ctx.dev
                    .synchronize(&format!("plugin {} (which answered: {e})", self.plugin))?;
                Err(self.run_error(e))
            }
        }
    }
}
