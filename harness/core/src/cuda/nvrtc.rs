//! NVRTC compilation with an on-disk cache keyed on source, options, arch and NVRTC version.
//! Works without a GPU (CI compiles every kernel for compute_90 with the NVRTC wheel).

use crate::cuda::kernel::Kernel;
use cudarc::nvrtc::sys as nsys;
use sha2::{Digest, Sha256};
use std::ffi::{c_char, CString};
use std::path::PathBuf;
use thiserror::Error;

/// What can go wrong compiling a kernel.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NvrtcError {
    /// libnvrtc is not on this machine.
    #[error("NVRTC (libnvrtc.so) was not found. Install the wheel `pip install nvidia-cuda-nvrtc==13.0.88` and put its nvidia/cu13/lib on LD_LIBRARY_PATH, or install the CUDA toolkit")]
    Missing,
    /// The source did not compile.
    #[error("NVRTC could not compile {file} for {arch}:\n{log}")]
    Compile {
        /// The source file's path.
        file: String,
        /// The architecture compiled for.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// An NVRTC call failed.
    #[error("NVRTC call {call} failed: {msg}")]
    Call {
        /// The call.
        call: &'static str,
        /// NVRTC's words.
        msg: String,
    },
}

/// Compiled code for one source file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// PTX text (for `compute_XY`) or a cubin (for `sm_XY`).
    pub image: Vec<u8>,
    /// Whether `image` is a cubin (else PTX text).
    pub is_cubin: bool,
    /// NVRTC's log (warnings).
    pub log: String,
    /// Read from the on-disk cache rather than compiled.
    pub from_cache: bool,
}

/// Is libnvrtc on this machine?
pub fn present() -> bool {
    // SAFETY: only probes for the shared library with dlopen.
    unsafe { nsys::is_culib_present() }
}

/// NVRTC's version (major, minor).
fn version() -> Result<(i32, i32), NvrtcError> {
    if !present() {
        return Err(NvrtcError::Missing);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: library present; out-pointers are valid.
    let r = unsafe { nsys::nvrtcVersion(&mut major, &mut minor) };
    check(r, "nvrtcVersion")?;
    Ok((major, minor))
}

fn check(r: nsys::nvrtcResult, call: &'static str) -> Result<(), NvrtcError> {
    if r == nsys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(NvrtcError::Call {
            call,
            msg: format!("{r:?}"),
        })
    }
}

/// Extra include directories: `KEDGE_CUDA_INCLUDE`, `$CUDA_HOME/include`, /usr/local/cuda/include,
/// and the nvidia-cuda-runtime wheel's include dir if one is found next to the NVRTC wheel.
fn include_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("KEDGE_CUDA_INCLUDE") {
        v.extend(std::env::split_paths(&p));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(p) = std::env::var(var) {
            v.push(PathBuf::from(p).join("include"));
        }
    }
    v.push(PathBuf::from("/usr/local/cuda/include"));
    if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
        for p in std::env::split_paths(&ld) {
            // .../nvidia/cu13/lib -> .../nvidia/cu13/include
            if p.ends_with("lib") {
                if let Some(parent) = p.parent() {
                    v.push(parent.join("include"));
                }
            }
        }
    }
    v.retain(|p| p.join("cuda_fp16.h").exists() || p.join("cuda_runtime.h").exists());
    v.dedup();
    v
}

fn cache_dir() -> PathBuf {
    crate::model::cache::dir("KEDGE_CACHE_DIR", "nvrtc")
}

/// Compile a kernel's source for `arch` (`compute_90` gives PTX, `sm_90` a cubin).
pub fn compile(k: &Kernel, arch: &str, defines: &[(&str, String)]) -> Result<Compiled, NvrtcError> {
    compile_source(k.file, k.source, arch, defines)
}

/// Compile CUDA source text `source` (named `file` in messages) for `arch`, with `-D`
/// defines, through the on-disk cache.
pub fn compile_source(
    file: &str,
    source: &str,
    arch: &str,
    defines: &[(&str, String)],
) -> Result<Compiled, NvrtcError> {
    compile_source_in(&cache_dir(), file, source, arch, defines)
}

/// [`compile_source`] through the cache in `dir`.
fn compile_source_in(
    dir: &std::path::Path,
    file: &str,
    source: &str,
    arch: &str,
    defines: &[(&str, String)],
) -> Result<Compiled, NvrtcError> {
    let (maj, min) = version()?;
    let mut opts: Vec<String> = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "-default-device".into(),
        "-lineinfo".into(),
    ];
    for d in include_dirs() {
        opts.push(format!("--include-path={}", d.display()));
    }
    for (k, v) in defines {
        opts.push(format!("-D{k}={v}"));
    }
    let is_cubin = arch.starts_with("sm_");
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    for o in &opts {
        h.update(o.as_bytes());
        h.update([0]);
    }
    h.update(format!("nvrtc {maj}.{min}").as_bytes());
    let key: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(format!("{key}.{}", if is_cubin { "cubin" } else { "ptx" }));
    if let Ok(image) = std::fs::read(&path) {
        if !image.is_empty() {
            return Ok(Compiled {
                image,
                is_cubin,
                log: String::new(),
                from_cache: true,
            });
        }
    }
    let src = CString::new(source).map_err(|_| NvrtcError::Compile {
        file: file.into(),
        arch: arch.into(),
        log: "source contains a NUL byte".into(),
    })?;
    let name = CString::new(file.rsplit('/').next().unwrap_or(file)).unwrap_or_default();
    let mut prog: nsys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid C strings; prog is an out-pointer.
    let r = unsafe {
        nsys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    check(r, "nvrtcCreateProgram")?;
    let c_opts: Vec<CString> = opts
        .iter()
        .filter_map(|o| CString::new(o.as_str()).ok())
        .collect();
    let ptrs: Vec<*const c_char> = c_opts.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: prog is live; option pointers outlive the call.
    let cr = unsafe { nsys::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()) };
    let log = program_log(prog);
    let out = if cr != nsys::nvrtcResult::NVRTC_SUCCESS {
        Err(NvrtcError::Compile {
            file: file.into(),
            arch: arch.into(),
            log: if log.is_empty() {
                format!("{cr:?}")
            } else {
                log.clone()
            },
        })
    } else {
        get_image(prog, is_cubin)
    };
    // SAFETY: prog was created above and is destroyed once.
    unsafe {
        nsys::nvrtcDestroyProgram(&mut prog);
    }
    let image = out?;
    if std::fs::create_dir_all(dir).is_ok() {
        // Write-then-rename so concurrent workers never read a half-written file.
        let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
        if std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(Compiled {
        image,
        is_cubin,
        log,
        from_cache: false,
    })
}

/// What compiling ahead did ([`compile_ahead`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ahead {
    /// Distinct source files asked for.
    pub files: usize,
    /// Of them, compiled now (the rest were in the cache already, or failed).
    pub compiled: usize,
    /// Those that did not compile, with NVRTC's words: the worker that launches one says so
    /// again for its case, so this only counts them.
    pub failed: Vec<String>,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// Compile every distinct source file among `kernels` for `arch` into the on-disk cache, all
/// at once on the host's cores, so the workers that launch them find each in the cache.
///
/// A worker compiles a kernel's file the first time it launches one unless the cache holds
/// it (0.1 to 0.8 s a file for sm_90 on the CPU machine): on a fresh cache every worker of a
/// sweep meets the same files at about the same time and compiles each itself, inside the
/// case that happens to launch it first. A file already in the cache costs a read.
pub fn compile_ahead(kernels: &[Kernel], arch: &str) -> Ahead {
    compile_ahead_in(&cache_dir(), kernels, arch)
}

/// [`compile_ahead`] into the cache in `dir`.
pub fn compile_ahead_in(dir: &std::path::Path, kernels: &[Kernel], arch: &str) -> Ahead {
    use rayon::prelude::*;
    let t0 = std::time::Instant::now();
    let mut files: Vec<&Kernel> = Vec::new();
    for k in kernels {
        if !files
            .iter()
            .any(|f| f.file == k.file && f.source == k.source)
        {
            files.push(k);
        }
    }
    let done: Vec<Result<Compiled, NvrtcError>> = files
        .par_iter()
        .map(|k| compile_source_in(dir, k.file, k.source, arch, &[]))
        .collect();
    let mut ahead = Ahead {
        files: files.len(),
        ..Ahead::default()
    };
    for d in done {
        match d {
            Ok(c) if !c.from_cache => ahead.compiled += 1,
            Ok(_) => {}
            Err(e) => ahead.failed.push(e.to_string()),
        }
    }
    ahead.seconds = t0.elapsed().as_secs_f64();
    ahead
}

fn program_log(prog: nsys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: prog is live.
    unsafe {
        if nsys::nvrtcGetProgramLogSize(prog, &mut size) != nsys::nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        if nsys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char)
            != nsys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        String::from_utf8_lossy(&buf)
            .trim_end_matches('\0')
            .trim()
            .to_string()
    }
}

fn get_image(prog: nsys::nvrtcProgram, cubin: bool) -> Result<Vec<u8>, NvrtcError> {
    let mut size = 0usize;
    // SAFETY: prog compiled successfully; buffers sized by NVRTC.
    unsafe {
        if cubin {
            check(
                nsys::nvrtcGetCUBINSize(prog, &mut size),
                "nvrtcGetCUBINSize",
            )?;
            let mut buf = vec![0u8; size];
            check(
                nsys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char),
                "nvrtcGetCUBIN",
            )?;
            Ok(buf)
        } else {
            check(nsys::nvrtcGetPTXSize(prog, &mut size), "nvrtcGetPTXSize")?;
            let mut buf = vec![0u8; size];
            check(
                nsys::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut c_char),
                "nvrtcGetPTX",
            )?;
            Ok(buf)
        }
    }
}
