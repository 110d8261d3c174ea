//! Finding and loading a ggml build.
//!
//! Two layouts are in use:
//! - linked (`BUILD_SHARED_LIBS=ON`): `libggml.so` links its backends (`libggml-cpu.so`,
//!   `libggml-cuda.so`, ...) and registers them when the registry is first used;
//! - modules (`GGML_BACKEND_DL=ON`, what llama.cpp releases ship): `libggml.so` registers
//!   nothing by itself; each backend is a module ggml loads with
//!   `ggml_backend_load_all_from_path`, choosing the best-scoring CPU variant.
//!
//! Both are driven through the registry and device API only, so the same code serves both.
//!
//! The libraries are opened in dependency order (`libggml-base.so`, the backends `libggml.so`
//! names, `libggml.so`) with `RTLD_GLOBAL`, so each soname is already satisfied when a library
//! that needs it is opened: no `LD_LIBRARY_PATH` needed. Once loaded, a build stays loaded for
//! the life of the process: ggml keeps process-global state (the registry, the logger, the
//! abort callback, CPU thread pools) that cannot be torn down safely, and a second build's
//! libraries would share the first one's sonames. So a process loads one build; loading the
//! same directory again returns the same handle.

use std::ffi::{c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::error::{BackendError, LoadError};
use crate::ffi::{self, Api, Home, Ops};
use crate::hooks::{self, AbortHook, LogHook};
use crate::types::{DeviceKind, LogLevel, Type};
use crate::Backend;

/// How the build's backends are packaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Backends linked into `libggml.so`.
    Linked,
    /// Backends as modules loaded at run time (`GGML_BACKEND_DL`).
    Modules,
}

/// One device of the build, as the registry lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The name backends are requested by: "CPU", "CUDA0", ...
    pub name: String,
    /// The device's own description ("NVIDIA H200", the CPU model).
    pub description: String,
    pub kind: DeviceKind,
}

pub(crate) struct Loaded {
    pub dir: PathBuf,
    pub layout: Layout,
    pub api: Api,
    pub ops: Ops,
    pub libraries: Vec<PathBuf>,
    pub module_problems: Vec<String>,
    /// Kept open for the life of the process (this struct is leaked).
    pub libs: Vec<Library>,
}

/// A loaded ggml build. Cheap to copy; every copy refers to the same process-wide build.
#[derive(Clone, Copy)]
pub struct Ggml {
    pub(crate) inner: &'static Loaded,
}

impl std::fmt::Debug for Ggml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ggml")
            .field("dir", &self.inner.dir)
            .field("layout", &self.inner.layout)
            .finish()
    }
}

static LOADED: Mutex<Option<&'static Loaded>> = Mutex::new(None);

/// Told each library file just before it is opened, and the directory just before ggml loads
/// its backend modules from it (`on_open`).
static ON_OPEN: Mutex<Option<fn(&Path)>> = Mutex::new(None);

/// Be told each file (or module directory) this crate is about to load. A process that dies
/// while loading a build (a truncated library, an initializer that exits) can then say which
/// file it was at: kedge loads a build first in a short-lived process that reports this.
pub fn on_open(observer: fn(&Path)) {
    *ON_OPEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(observer);
}

fn opening(path: &Path) {
    let f = *ON_OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = f {
        f(path);
    }
}

/// The core symbols this crate resolves at load, each with the library it is looked up in
/// (`libggml-base.so` or `libggml.so`). A build lacking one cannot be loaded.
pub fn required_symbols() -> Vec<(&'static str, &'static str)> {
    Api::SYMBOLS
        .iter()
        .map(|(s, h)| (*s, h.file_name()))
        .collect()
}

/// `stem` itself (`libggml.so`) or a versioned file of it (`libggml.so.0`), preferring the
/// plain name, then the shortest versioned one.
fn pick(names: &[String], stem: &str) -> Option<String> {
    if names.iter().any(|n| n == stem) {
        return Some(stem.to_string());
    }
    names
        .iter()
        .filter(|n| {
            n.strip_prefix(stem)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
        .min_by_key(|n| n.len())
        .cloned()
}

/// The directory (`dir` or `dir/lib`) holding both core libraries, with their paths.
fn find_libraries(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf), LoadError> {
    if dir.exists() && !dir.is_dir() {
        return Err(LoadError::NotADirectory(dir.to_path_buf()));
    }
    if !dir.is_dir() {
        return Err(LoadError::DirMissing(dir.to_path_buf()));
    }
    for cand in [dir.to_path_buf(), dir.join("lib")] {
        if !cand.is_dir() {
            continue;
        }
        let names: Vec<String> = std::fs::read_dir(&cand)
            .map_err(|source| LoadError::Io {
                dir: cand.clone(),
                source,
            })?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if let (Some(base), Some(main)) =
            (pick(&names, "libggml-base.so"), pick(&names, "libggml.so"))
        {
            return Ok((cand.clone(), cand.join(base), cand.join(main)));
        }
    }
    Err(LoadError::NotGgmlBuild(dir.to_path_buf()))
}

fn open_global(path: &Path) -> Result<Library, LoadError> {
    opening(path);
    // SAFETY: loading a library runs its initializers; a ggml build's initializers set up
    // ggml's own static state and nothing else. The caller asked for this directory.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| LoadError::Open {
        library: path.to_path_buf(),
        reason: with_sources(&e),
    })
}

/// An error and its sources: libloading puts the dynamic linker's own words (`dlerror`) in the
/// source of a "dlopen failed".
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn symbol(lib: &Library, name: &str) -> Option<*mut c_void> {
    // SAFETY: only the symbol's address is taken here; it is called with the signature the
    // pinned header declares (see ffi.rs).
    let s = unsafe { lib.get::<*mut c_void>(name.as_bytes()) }.ok()?;
    let p = *s;
    (!p.is_null()).then_some(p)
}

/// Backend modules in `dir`, grouped by backend (`cpu` for `libggml-cpu.so` and
/// `libggml-cpu-haswell.so`), each group's plain module first.
fn module_groups(dir: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut groups: Vec<(String, Vec<PathBuf>)> = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return groups;
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by_key(|n| (n.len(), n.clone()));
    for n in names {
        let Some(stem) = n
            .strip_prefix("libggml-")
            .and_then(|r| r.strip_suffix(".so"))
        else {
            continue;
        };
        if stem == "base" || stem.is_empty() {
            continue;
        }
        let backend = stem.split('-').next().unwrap_or(stem).to_string();
        match groups.iter_mut().find(|(b, _)| *b == backend) {
            Some((_, v)) => v.push(dir.join(&n)),
            None => groups.push((backend, vec![dir.join(&n)])),
        }
    }
    groups
}

fn open(dir: PathBuf, base_path: PathBuf, main_path: PathBuf) -> Result<Loaded, LoadError> {
    let base = open_global(&base_path)?;
    let mut libs = vec![base];
    let mut libraries = vec![base_path.clone()];
    // Backends that libggml.so links: open them from this directory first, by the soname it
    // asks for, so the dynamic linker finds them already loaded.
    for soname in crate::elf::needed(&main_path).unwrap_or_default() {
        if soname.starts_with("libggml-") && !soname.starts_with("libggml-base.") {
            let p = dir.join(&soname);
            if p.exists() {
                libs.push(open_global(&p)?);
                libraries.push(p);
            }
        }
    }
    let main = open_global(&main_path)?;
    libs.push(main);
    libraries.push(main_path.clone());
    let (base, main) = (&libs[0], &libs[libs.len() - 1]);

    let mut lookup = |name: &'static str, home: Home| match home {
        Home::Base => symbol(base, name),
        Home::Registry => symbol(main, name),
    };
    // SAFETY: every symbol in the table is declared with the pinned header's signature.
    let api = unsafe { Api::resolve(&mut lookup) }.map_err(|(symbol, home)| {
        LoadError::MissingSymbol {
            symbol: symbol.to_string(),
            library: match home {
                Home::Base => base_path.clone(),
                Home::Registry => main_path.clone(),
            },
        }
    })?;
    // SAFETY: as above; a lookup through libggml.so also finds what libggml-base.so defines.
    let ops = unsafe { Ops::resolve(&mut |name| symbol(main, name)) };

    // From here on every message ggml logs passes through the ring.
    // SAFETY: a valid callback for the life of the process; null user data is never read.
    unsafe { (api.ggml_log_set)(Some(hooks::log_trampoline), std::ptr::null_mut()) };

    let cdir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| LoadError::Open {
        library: dir.clone(),
        reason: "path contains a NUL byte".into(),
    })?;
    hooks::start_capture();
    // SAFETY: registry functions take no arguments; the first call builds ggml's registry.
    let layout = if unsafe { (api.ggml_backend_reg_count)() } == 0 {
        Layout::Modules
    } else {
        Layout::Linked
    };
    let mut module_problems = Vec::new();
    if layout == Layout::Modules {
        opening(&dir);
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { (api.ggml_backend_load_all_from_path)(cdir.as_ptr()) };
        module_problems = diagnose_modules(&api, &dir);
    }
    hooks::take_capture();

    Ok(Loaded {
        dir,
        layout,
        api,
        ops,
        libraries,
        module_problems,
        libs,
    })
}

/// ggml's module loader is silent in release builds. For each module group that registered
/// nothing, load it again through `ggml_backend_load`, which logs why it fails ("libcudart.so.13:
/// cannot open shared object file", "not supported on this system"), and keep those words.
/// A module that loads now is registered (ggml ignores a second registration of the same one).
fn diagnose_modules(api: &Api, dir: &Path) -> Vec<String> {
    let registered: Vec<String> = (0..unsafe { (api.ggml_backend_reg_count)() })
        .map(|i| {
            // SAFETY: i < reg_count; the name is a static string of the registry entry.
            unsafe { ffi::string((api.ggml_backend_reg_name)((api.ggml_backend_reg_get)(i))) }
                .to_ascii_lowercase()
        })
        .collect();
    let mut problems = Vec::new();
    for (backend, files) in module_groups(dir) {
        if registered.contains(&backend) {
            continue;
        }
        let mut words = Vec::new();
        let mut ok = false;
        for f in &files {
            hooks::take_capture();
            hooks::start_capture();
            let Ok(c) = CString::new(f.as_os_str().as_bytes()) else {
                continue;
            };
            opening(f);
            // SAFETY: a NUL-terminated path that outlives the call.
            if !unsafe { (api.ggml_backend_load)(c.as_ptr()) }.is_null() {
                ok = true;
                break;
            }
            let said: Vec<String> = hooks::take_capture()
                .into_iter()
                .filter(|l| l.level != LogLevel::Debug)
                .map(|l| l.text.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect();
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            words.push(if said.is_empty() {
                format!("{name}: did not register")
            } else {
                format!("{name}: {}", said.join(" "))
            });
        }
        hooks::start_capture();
        if !ok {
            problems.extend(words);
        }
    }
    problems
}

impl Ggml {
    /// Loads the ggml build in `dir` (or `dir/lib`).
    ///
    /// Loading the directory already loaded returns the same build; loading another one in the
    /// same process is refused ([`LoadError::AnotherBuildLoaded`]).
    pub fn load(dir: &Path) -> Result<Ggml, LoadError> {
        let (libdir, base, main) = find_libraries(dir)?;
        let libdir = libdir.canonicalize().map_err(|source| LoadError::Io {
            dir: libdir.clone(),
            source,
        })?;
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = *loaded {
            return if l.dir == libdir {
                Ok(Ggml { inner: l })
            } else {
                Err(LoadError::AnotherBuildLoaded {
                    loaded: l.dir.clone(),
                    requested: libdir,
                })
            };
        }
        let l: &'static Loaded = Box::leak(Box::new(open(libdir, base, main)?));
        *loaded = Some(l);
        Ok(Ggml { inner: l })
    }

    /// The build already loaded in this process, if any.
    pub fn loaded() -> Option<Ggml> {
        LOADED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|inner| Ggml { inner })
    }

    pub(crate) fn api(&self) -> &'static Api {
        &self.inner.api
    }

    pub(crate) fn ops(&self) -> &'static Ops {
        &self.inner.ops
    }

    /// The directory the libraries were loaded from.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn layout(&self) -> Layout {
        self.inner.layout
    }

    /// The libraries this crate opened, in load order (backend modules ggml opened itself are
    /// not listed).
    pub fn libraries(&self) -> &[PathBuf] {
        &self.inner.libraries
    }

    /// Backend modules of a [`Layout::Modules`] build that did not register, with ggml's
    /// reason ("libggml-cuda.so: ... libcudart.so.13: cannot open shared object file").
    pub fn module_problems(&self) -> &[String] {
        &self.inner.module_problems
    }

    /// The optional entry points (ops, and the version, commit and abort-callback functions)
    /// this crate knows that the build lacks.
    pub fn missing_ops(&self) -> Vec<&'static str> {
        self.inner.ops.missing()
    }

    /// `ggml_version()`, e.g. "0.21.0" ("unknown" for a build older than that function).
    pub fn version(&self) -> String {
        match self.ops().ggml_version {
            // SAFETY: returns a static string.
            Some(f) => unsafe { ffi::string(f()) },
            None => "unknown".to_string(),
        }
    }

    /// `ggml_commit()`: the short commit the build was made from ("unknown" when its build
    /// could not ask git, or predates the function).
    pub fn commit(&self) -> String {
        match self.ops().ggml_commit {
            // SAFETY: returns a static string.
            Some(f) => unsafe { ffi::string(f()) },
            None => "unknown".to_string(),
        }
    }

    /// `ggml_type_size`: bytes per block of `ty`.
    pub fn type_size(&self, ty: Type) -> usize {
        // SAFETY: a valid ggml_type value.
        unsafe { (self.api().ggml_type_size)(ty.raw()) }
    }

    /// `ggml_blck_size`: elements per block of `ty`.
    pub fn block_size(&self, ty: Type) -> i64 {
        // SAFETY: a valid ggml_type value.
        unsafe { (self.api().ggml_blck_size)(ty.raw()) }
    }

    /// `ggml_row_size`: bytes of `ne` elements of `ty`, the stride of a contiguous row. `None`
    /// when `ne` is negative or not a whole number of blocks (ggml would abort).
    pub fn row_size(&self, ty: Type, ne: i64) -> Option<usize> {
        if ne < 0 || ne % self.block_size(ty).max(1) != 0 {
            return None;
        }
        // SAFETY: a valid type and a whole number of blocks.
        Some(unsafe { (self.api().ggml_row_size)(ty.raw(), ne) })
    }

    /// `ggml_type_name` ("f32", "q8_0").
    pub fn type_name(&self, ty: Type) -> String {
        // SAFETY: a valid ggml_type value; a static string.
        unsafe { ffi::string((self.api().ggml_type_name)(ty.raw())) }
    }

    /// Every device the registry lists.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let api = self.api();
        // SAFETY: registry enumeration; each device pointer is valid for the process and its
        // strings are owned by the device.
        unsafe {
            (0..(api.ggml_backend_dev_count)())
                .map(|i| (api.ggml_backend_dev_get)(i))
                .filter(|d| !d.is_null())
                .map(|d| DeviceInfo {
                    name: ffi::string((api.ggml_backend_dev_name)(d)),
                    description: ffi::string((api.ggml_backend_dev_description)(d)),
                    kind: DeviceKind::from_raw((api.ggml_backend_dev_type)(d)),
                })
                .collect()
        }
    }

    /// Starts a backend on the device named `name` ("CPU", "CUDA0"; ggml compares names
    /// without regard to case).
    pub fn backend(&self, name: &str) -> Result<Backend, BackendError> {
        let c = CString::new(name).map_err(|_| BackendError::BadName(name.to_string()))?;
        // SAFETY: a NUL-terminated name that outlives the call.
        let dev = unsafe { (self.api().ggml_backend_dev_by_name)(c.as_ptr()) };
        if dev.is_null() {
            return Err(BackendError::Unknown {
                name: name.to_string(),
                available: self.devices().into_iter().map(|d| d.name).collect(),
                problems: self.inner.module_problems.clone(),
            });
        }
        Backend::init(*self, dev)
    }

    /// Routes ggml's log and aborts to `on_log` and `on_abort` (see [`crate::hooks`]).
    ///
    /// Without an `on_log`, warnings and errors go to stderr; without an `on_abort`, the
    /// [`AbortReport`](crate::AbortReport) goes to stderr. Either way the abort trampoline
    /// replaces ggml's default, which prints a backtrace by attaching gdb to the process.
    /// Process-global: the last call wins.
    ///
    /// Returns whether the abort hook is in place: `false` for a build older than
    /// `ggml_set_abort_callback`, where `on_log` still receives ggml's error lines, which ggml
    /// writes before it aborts.
    pub fn install_hooks(&self, on_log: Option<LogHook>, on_abort: Option<AbortHook>) -> bool {
        hooks::set_hooks(on_log, on_abort);
        match self.ops().ggml_set_abort_callback {
            Some(f) => {
                // SAFETY: a valid callback for the life of the process.
                unsafe { f(Some(hooks::abort_trampoline)) };
                true
            }
            None => false,
        }
    }

    /// The address of any symbol of the build, as a function pointer type `T`, for entry
    /// points this crate does not wrap.
    ///
    /// # Safety
    /// `T` must be a function pointer type (or pointer) matching the symbol's C declaration.
    pub unsafe fn raw_symbol<T: Copy>(&self, name: &str) -> Option<T> {
        if std::mem::size_of::<T>() != std::mem::size_of::<*mut c_void>() {
            return None;
        }
        let main = self.inner.libs.last()?;
        let p = symbol(main, name)?;
        // SAFETY: same size; the caller vouches for the type.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_prefers_the_plain_name_then_the_shortest_version() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pick(&names(&["libggml.so.0", "libggml.so"]), "libggml.so").as_deref(),
            Some("libggml.so")
        );
        assert_eq!(
            pick(&names(&["libggml.so.0.21.0", "libggml.so.0"]), "libggml.so").as_deref(),
            Some("libggml.so.0")
        );
        assert_eq!(pick(&names(&["libggml-base.so"]), "libggml.so"), None);
        assert_eq!(pick(&names(&["libggml.so.bak"]), "libggml.so"), None);
    }

    #[test]
    fn module_groups_group_variants_under_their_backend() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "libggml-base.so",
            "libggml.so",
            "libggml-cpu-haswell.so",
            "libggml-cpu.so",
            "libggml-cuda.so",
            "libggml-cpu.so.0",
        ] {
            std::fs::write(d.path().join(n), b"").unwrap();
        }
        let g = module_groups(d.path());
        let names: Vec<(String, Vec<String>)> = g
            .into_iter()
            .map(|(b, v)| {
                (
                    b,
                    v.iter()
                        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    "cpu".to_string(),
                    vec![
                        "libggml-cpu.so".to_string(),
                        "libggml-cpu-haswell.so".to_string()
                    ]
                ),
                ("cuda".to_string(), vec!["libggml-cuda.so".to_string()]),
            ]
        );
    }
}
