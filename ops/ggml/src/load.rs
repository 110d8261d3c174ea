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

use crate::error::{GraphError, LoadError};
use crate::ffi::{self, Api, Home, Ops};
use crate::hooks::{self, AbortHook, LogHook};
use crate::types::{DeviceKind, LogLevel, Type};
use rayon::prelude::*;

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
    /// What kind of device it is (`ggml_backend_dev_type`).
    pub kind: DeviceKind,
}

pub(crate) struct Loaded {
    pub(crate) dir: PathBuf,
    pub(crate) layout: Layout,
    pub(crate) api: Api,
    pub(crate) ops: Ops,
    pub(crate) libraries: Vec<PathBuf>,
    pub(crate) module_problems: Vec<String>,
    /// The element types the build has (see [`probe_types`]).
    pub(crate) types: Vec<Type>,
    /// The CPU backend's type traits, found through libggml.so where it links the CPU backend
    /// (`None` where the CPU backend is a module ggml opened itself): its row writers.
    pub(crate) cpu_traits: Option<(ffi::GetTypeTraitsCpu, ffi::CpuInit)>,
    /// Kept open for the life of the process (this struct is leaked).
    pub(crate) libs: Vec<Library>,
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

/// The element types the build has. Every type up to TQ2_0 (value 35) is in every build with
/// a backend registry; the newer ones (MXFP4 and after) are asked of ggml by name, in a forked
/// child: `ggml_type_name` of a value past an older build's table reads past it, which can
/// crash, and only the child does. A type is present when ggml names it as this crate does.
fn probe_types(api: &Api) -> Vec<Type> {
    let mut have: Vec<Type> = Type::ALL
        .iter()
        .copied()
        .filter(|t| t.raw() <= 35)
        .collect();
    let mut newer: Vec<Type> = Type::ALL.iter().copied().filter(|t| t.raw() > 35).collect();
    newer.sort_by_key(|t| t.raw());
    let name_of = api.ggml_type_name;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: a fresh pipe; both ends closed below on every path.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return have;
    }
    // SAFETY: the child only reads ggml's static type table and writes to the pipe
    // (async-signal-safe calls), then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            libc::close(fds[0]);
            for t in &newer {
                let p = name_of(t.raw());
                if p.is_null() {
                    break;
                }
                let mut buf = [0u8; 24];
                let mut len = 0;
                while len < buf.len() - 1 {
                    let b = *p.add(len) as u8;
                    if b == 0 {
                        break;
                    }
                    buf[len] = b;
                    len += 1;
                }
                buf[len] = b'\n';
                libc::write(fds[1], buf.as_ptr() as *const c_void, len + 1);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    if pid > 0 {
        let mut buf = [0u8; 512];
        loop {
            // SAFETY: reading into a local buffer from our end of the pipe.
            let n = unsafe { libc::read(fds[0], buf.as_mut_ptr() as *mut c_void, buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    // SAFETY: our end of the pipe.
    unsafe { libc::close(fds[0]) };
    let text = String::from_utf8_lossy(&out);
    for (t, name) in newer.iter().zip(text.lines()) {
        if name == t.name() {
            have.push(*t);
        }
    }
    have
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
    // SAFETY: ggml-cpu.h declares both so; found only where libggml.so links the CPU backend.
    let cpu_traits = symbol(main, "ggml_get_type_traits_cpu")
        .zip(symbol(main, "ggml_cpu_init"))
        .map(|(t, i)| unsafe {
            (
                std::mem::transmute::<*mut c_void, ffi::GetTypeTraitsCpu>(t),
                std::mem::transmute::<*mut c_void, ffi::CpuInit>(i),
            )
        });
    let types = probe_types(&api);

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
        types,
        cpu_traits,
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

    /// How the build packages its backends, found at load: a registry that is empty before
    /// any module is loaded means [`Layout::Modules`].
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

    /// Whether the build has element type `ty` (a build older than a type lacks it).
    pub fn has_type(&self, ty: Type) -> bool {
        self.inner.types.contains(&ty)
    }

    /// `ggml_quantize_requires_imatrix`: the type cannot be quantized without an importance
    /// matrix.
    pub fn requires_imatrix(&self, ty: Type) -> Result<bool, GraphError> {
        self.check_type(ty)?;
        // SAFETY: a type the build has.
        Ok(unsafe { (self.api().ggml_quantize_requires_imatrix)(ty.raw()) })
    }

    fn check_type(&self, ty: Type) -> Result<(), GraphError> {
        if self.has_type(ty) {
            Ok(())
        } else {
            Err(GraphError::Quantize {
                ty: ty.name(),
                reason: "this ggml build has no such type".into(),
            })
        }
    }

    /// Rows of `n_per_row` f32 values quantized to `ty` with `ggml_quantize_chunk`, as
    /// test-backend-ops quantizes its inputs; `imatrix` (one weight per column) where the
    /// type needs or takes one. The whole of `src` is quantized.
    pub fn quantize(
        &self,
        ty: Type,
        src: &[f32],
        n_per_row: i64,
        imatrix: Option<&[f32]>,
    ) -> Result<Vec<u8>, GraphError> {
        self.check_type(ty)?;
        let bad = |reason: String| GraphError::Quantize {
            ty: ty.name(),
            reason,
        };
        let row = self.whole_rows(ty, src.len(), n_per_row)?;
        if let Some(im) = imatrix {
            if im.len() as i64 != n_per_row {
                return Err(bad(format!(
                    "an importance matrix of {} weights for rows of {n_per_row}",
                    im.len()
                )));
            }
        }
        if imatrix.is_none() && self.requires_imatrix(ty)? {
            return Err(bad("needs an importance matrix".into()));
        }
        let nrows = src.len() / n_per_row as usize;
        let mut dst = vec![0u8; row * nrows];
        let im = imatrix.map_or(std::ptr::null(), |m| m.as_ptr()) as usize;
        let quantize = self.api().ggml_quantize_chunk;
        let n_per_row = n_per_row as usize;
        // Rows are quantized independently of each other (and the types' tables set up once,
        // under ggml's own lock), so chunks of rows on every core give the bytes of one call:
        // a 2^32-value input takes minutes on one core in the slower formats.
        let chunk_rows = rows_per_chunk(nrows, n_per_row);
        let wrote: usize = dst
            .par_chunks_mut(row * chunk_rows)
            .zip(src.par_chunks(n_per_row * chunk_rows))
            .map(|(d, s)| {
                // SAFETY: `s` holds `d.len() / row` rows of `n_per_row` floats and `d` as many
                // rows of `row` bytes (ggml_row_size), `im` is null or n_per_row floats (checked
                // above); ggml writes only into `d`.
                unsafe {
                    quantize(
                        ty.raw(),
                        s.as_ptr(),
                        d.as_mut_ptr() as *mut c_void,
                        0,
                        (d.len() / row) as i64,
                        n_per_row as i64,
                        im as *const f32,
                    )
                }
            })
            .sum();
        if wrote != dst.len() {
            return Err(bad(format!(
                "ggml_quantize_chunk wrote {wrote} bytes, {} expected",
                dst.len()
            )));
        }
        Ok(dst)
    }

    /// The bytes of a row of `n_per_row` values of `ty`, where `values` of them are whole rows
    /// of whole blocks: what `quantize` and `cpu_write_rows` write each row into.
    fn whole_rows(&self, ty: Type, values: usize, n_per_row: i64) -> Result<usize, GraphError> {
        let bad = |reason: String| GraphError::Quantize {
            ty: ty.name(),
            reason,
        };
        let row = self
            .row_size(ty, n_per_row)
            .filter(|_| n_per_row > 0)
            .ok_or_else(|| {
                bad(format!(
                    "rows of {n_per_row} values are not whole blocks of {}",
                    self.block_size(ty)
                ))
            })?;
        if !(values as u64).is_multiple_of(n_per_row as u64) {
            return Err(bad(format!(
                "{values} values are not whole rows of {n_per_row}"
            )));
        }
        Ok(row)
    }

    /// Whether the CPU backend's own row writer for `ty` is reachable ([`Ggml::cpu_write_rows`]).
    pub fn has_cpu_row_writer(&self, ty: Type) -> bool {
        self.cpu_row_writer(ty).is_some()
    }

    /// The CPU backend's `from_float` for `ty`, where this crate found
    /// `ggml_get_type_traits_cpu` (a build that links its CPU backend) and the type has one.
    fn cpu_row_writer(&self, ty: Type) -> Option<ffi::FromFloat> {
        if !self.has_type(ty) {
            return None;
        }
        let (get, init) = self.inner.cpu_traits?;
        // The writers may read the tables the CPU backend sets up when it starts; a reference
        // can be asked before any CPU backend has.
        static INIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: takes nothing, idempotent (ggml guards it itself).
        INIT.call_once(|| unsafe { init() });
        // SAFETY: a type the build has; the CPU backend's traits are a static table.
        let traits = unsafe { get(ty.raw()).as_ref() }?;
        traits.from_float
    }

    /// Rows of `n_per_row` f32 values written in `ty` by ggml's CPU backend's own row writer
    /// (`from_float` of `ggml_get_type_traits_cpu`: what its set_rows writes each row with), on
    /// every core. The CPU backend writes set_rows on one thread; the bytes are the same, row
    /// for row. `Ok(None)`: the writer is not reachable (a build whose CPU backend is a module
    /// ggml opened itself) or the type has none.
    pub fn cpu_write_rows(
        &self,
        ty: Type,
        src: &[f32],
        n_per_row: i64,
    ) -> Result<Option<Vec<u8>>, GraphError> {
        let Some(write) = self.cpu_row_writer(ty) else {
            return Ok(None);
        };
        let row = self.whole_rows(ty, src.len(), n_per_row)?;
        let (n_per_row, nrows) = (n_per_row as usize, src.len() / n_per_row as usize);
        let mut dst = vec![0u8; row * nrows];
        dst.par_chunks_mut(row)
            .zip(src.par_chunks(n_per_row))
            .with_min_len(rows_per_chunk(nrows, n_per_row))
            .for_each(|(d, s)| {
                // SAFETY: `s` is one row of `n_per_row` floats and `d` its `row` bytes
                // (ggml_row_size); the writer writes only into `d`.
                unsafe { write(s.as_ptr(), d.as_mut_ptr() as *mut c_void, n_per_row as i64) };
            });
        Ok(Some(dst))
    }

    /// Blocks of `ty` decoded to f32 by the type's own `to_float` (ggml's type traits).
    pub fn dequantize(&self, ty: Type, bytes: &[u8]) -> Result<Vec<f32>, GraphError> {
        self.check_type(ty)?;
        let size = self.type_size(ty).max(1);
        let mut out = vec![0f32; bytes.len() / size * self.block_size(ty).max(0) as usize];
        self.dequantize_into(ty, bytes, &mut out)?;
        Ok(out)
    }

    /// [`Ggml::dequantize`] into `out`, which holds exactly the values of `bytes`' blocks: a
    /// caller that keeps the values in a buffer of its own (a tensor's bytes, a reused
    /// scratch) decodes them once, where they are to stay.
    pub fn dequantize_into(
        &self,
        ty: Type,
        bytes: &[u8],
        out: &mut [f32],
    ) -> Result<(), GraphError> {
        self.check_type(ty)?;
        let bad = |reason: String| GraphError::Quantize {
            ty: ty.name(),
            reason,
        };
        let (block, size) = (self.block_size(ty), self.type_size(ty));
        if size == 0 || !bytes.len().is_multiple_of(size) {
            return Err(bad(format!(
                "{} bytes are not whole blocks of {size}",
                bytes.len()
            )));
        }
        // SAFETY: a type the build has; the traits are static.
        let traits = unsafe { (self.api().ggml_get_type_traits)(ty.raw()).as_ref() }
            .ok_or_else(|| bad("ggml_get_type_traits returned NULL".into()))?;
        if traits.blck_size != block || traits.type_size != size {
            return Err(bad(format!(
                "its type traits say {} elements in {} bytes, ggml_blck_size/ggml_type_size {block} in {size}: a struct this crate does not know",
                traits.blck_size, traits.type_size
            )));
        }
        let to_float = traits
            .to_float
            .ok_or_else(|| bad("the type has no to_float".into()))?;
        let block = block as usize;
        let n = bytes.len() / size * block;
        if out.len() != n {
            return Err(bad(format!(
                "{} bytes hold {n} values, and {} were asked for",
                bytes.len(),
                out.len()
            )));
        }
        // Whole blocks on every core, as `quantize` does rows.
        let blocks = rows_per_chunk(n / block, block);
        out.par_chunks_mut(blocks * block)
            .zip(bytes.par_chunks(blocks * size))
            .for_each(|(o, b)| {
                // SAFETY: `b` holds o.len() / block whole blocks, `o` their o.len() floats.
                unsafe { to_float(b.as_ptr() as *const c_void, o.as_mut_ptr(), o.len() as i64) };
            });
        Ok(())
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

    /// Routes ggml's log and aborts to `on_log` and `on_abort`.
    ///
    /// `on_log` sees every message ggml logs; whether or not there is one, the last warning and
    /// error lines are kept ([`recent_log`](crate::recent_log)) and handed to `on_abort` in an
    /// [`AbortReport`](crate::AbortReport). The hooks are plain functions because ggml calls
    /// them from any of its threads, during a crash; a panic in one is caught and dropped.
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

/// Rows (or blocks) of `per` values per chunk of a parallel pass over `n` of them: chunks of
/// at least 64Ki values, about four per thread.
fn rows_per_chunk(n: usize, per: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let min = (1usize << 16).div_ceil(per.max(1));
    n.div_ceil(threads * 4).max(min).max(1)
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
