//! cuBLASLt FP8 GEMM through `cudarc::cublaslt::{result, sys}` (cudarc's safe `Matmul` has no
//! FP8), with the incident's plan cache.
//!
//! Layout (cuBLASLt is column-major; FP8 on Hopper needs TN):
//! - cuBLASLt's A = the e4m3 weights W, stored N rows of K bytes: a K x N column-major
//!   matrix, ld = K, TRANSA = T, so op(A) is N x K.
//! - cuBLASLt's B = the e4m3 activations, `plan_rows` rows of K bytes: K x plan_rows, ld = K,
//!   TRANSB = N. **This is where the bucket matters: the layout says plan_rows rows, so the
//!   kernel reads plan_rows x K bytes from the activation region whatever was staged.**
//! - D (and C, beta = 0) = BF16, N x plan_rows column-major, ld = N: row-major
//!   \[plan_rows\]\[N\], i.e. ggml ne = \[N, rows\] for the rows the caller asked for.
//!
//! D = scale_A * scale_B * (op(A) . op(B)); scale_A (the weights' per-tensor scale, 1: the
//! block scales are folded into the e4m3 values) and scale_B (the activations' amax/448) are
//! device pointers. FP32 compute (CUBLAS_COMPUTE_32F), f32 scale type, fast accumulation
//! off.

use cudarc::cublaslt::{result, sys};
use kedge_core::cuda::RunError;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// Largest workspace the heuristic may ask for.
pub(crate) const MAX_WORKSPACE: u64 = 32 << 20;

/// Byte offset of the weight scale in the scales buffer (the activation scale is at 0; the
/// act-scale kernel writes `scales[W_SCALE_OFFSET / 4]`). cuBLASLt 13.1 on the H200 refused
/// (`CUBLAS_STATUS_NOT_SUPPORTED` at `cublasLtMatmul`) an FP8 GEMM whose A scale pointer sat
/// 4 bytes into the buffer, and ran the same GEMM without scale pointers
/// (reports/h200-2026-12-02-run5-selftest-sdpa). Each scale therefore gets its own 256-byte
/// boundary, the alignment of a `cudaMalloc`'d scale as in NVIDIA's FP8 sample; the probe
/// (scripts/fp8-lt-probe.cu) measures which offsets cuBLASLt accepts.
pub(crate) const W_SCALE_OFFSET: u64 = 256;
/// Bytes of the scales scratch: the activation scale at 0, the weight scale at W_SCALE_OFFSET.
pub(crate) const SCALES_BYTES: u64 = W_SCALE_OFFSET * 2;

struct Handle(sys::cublasLtHandle_t);
// SAFETY: a cuBLASLt handle may be used from any thread (calls are serialized by the worker).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

static HANDLE: OnceLock<Result<Handle, String>> = OnceLock::new();

/// The process's cuBLASLt handle, created on first use.
fn handle() -> Result<sys::cublasLtHandle_t, RunError> {
    // SAFETY: only probes for the library with dlopen.
    if !unsafe { sys::is_culib_present() } {
        return Err(RunError::Unsupported(
            "libcublasLt not found (install the CUDA toolkit's cuBLAS or the nvidia-cublas wheel)"
                .into(),
        ));
    }
    match HANDLE.get_or_init(|| {
        result::create_handle()
            .map(Handle)
            .map_err(|e| status_text(e.0))
    }) {
        Ok(h) => Ok(h.0),
        Err(m) => Err(RunError::Driver {
            call: "cublasLtCreate".into(),
            name: m.clone(),
            code: 0,
            msg: String::new(),
            sticky: false,
        }),
    }
}

/// Load cuBLASLt and create the process's handle, if it is not done yet (what the first
/// matmul of a fresh worker would otherwise wait for). An error is the first case's to report.
pub(crate) fn load() {
    let _ = handle();
}

/// cuBLASLt's version number (e.g. 130100), for the record.
pub(crate) fn version() -> Option<usize> {
    // SAFETY: probe first; cublasLtGetVersion has no preconditions.
    unsafe { sys::is_culib_present().then(|| sys::cublasLtGetVersion()) }
}

fn status_text(s: sys::cublasStatus_t) -> String {
    // SAFETY: cublasLtGetStatusName/String return static strings for any status.
    unsafe {
        let name = sys::cublasLtGetStatusName(s);
        let text = sys::cublasLtGetStatusString(s);
        let f = |p: *const std::ffi::c_char| {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        format!("{} ({})", f(name), f(text))
    }
}

/// A refusal (NOT_SUPPORTED, INVALID_VALUE for a shape) is `unsupported`; out of memory is a
/// resource limit; anything else is a library error.
fn lt_error(call: &str, s: sys::cublasStatus_t, what: &str) -> RunError {
    use sys::cublasStatus_t::*;
    let text = status_text(s);
    match s {
        CUBLAS_STATUS_NOT_SUPPORTED | CUBLAS_STATUS_INVALID_VALUE | CUBLAS_STATUS_ARCH_MISMATCH => {
            RunError::Unsupported(format!("cuBLASLt {call} refused {what}: {text}"))
        }
        CUBLAS_STATUS_ALLOC_FAILED => RunError::Resource(format!("cuBLASLt {call}: {text}")),
        _ => RunError::Driver {
            call: call.to_string(),
            name: format!("{s:?}"),
            code: s as u32,
            msg: format!("{text}; {what}"),
            sticky: false,
        },
    }
}

fn check(call: &str, s: sys::cublasStatus_t, what: &str) -> Result<(), RunError> {
    if s == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(lt_error(call, s, what))
    }
}

/// The algorithm cuBLASLt's heuristic chose, as far as the API describes it. (The kernel's
/// symbol name is not exposed by cuBLASLt; compute-sanitizer's record names it.)
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AlgoInfo {
    pub(crate) algo_id: Option<u64>,
    pub(crate) tile_id: Option<u64>,
    pub(crate) stages_id: Option<u64>,
    pub(crate) splitk_num: Option<u64>,
    pub(crate) reduction_scheme: Option<u64>,
    pub(crate) cta_swizzling: Option<u64>,
    pub(crate) custom_option: Option<u64>,
    pub(crate) inner_shape_id: Option<u64>,
    pub(crate) cluster_shape_id: Option<u64>,
    pub(crate) workspace_bytes: u64,
    pub(crate) waves_count: f32,
    /// Which of the heuristic's results this is (0: its first choice).
    pub(crate) heuristic_index: usize,
}

impl AlgoInfo {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "algo_id": self.algo_id,
            "tile_id": self.tile_id,
            "stages_id": self.stages_id,
            "splitk_num": self.splitk_num,
            "reduction_scheme": self.reduction_scheme,
            "cta_swizzling": self.cta_swizzling,
            "custom_option": self.custom_option,
            "inner_shape_id": self.inner_shape_id,
            "cluster_shape_id": self.cluster_shape_id,
            "workspace_bytes": self.workspace_bytes,
            "waves_count": self.waves_count,
            "heuristic_index": self.heuristic_index,
        })
    }
}

fn algo_attr(
    algo: &sys::cublasLtMatmulAlgo_t,
    attr: sys::cublasLtMatmulAlgoConfigAttributes_t,
) -> Option<u64> {
    let mut size = 0usize;
    // SAFETY: size query (buf NULL, sizeInBytes 0), then a read into an 8-byte buffer of the
    // exact size reported.
    unsafe {
        let s = sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            std::ptr::null_mut(),
            0,
            &mut size,
        );
        if s != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || size == 0 || size > 8 {
            return None;
        }
        let mut buf = [0u8; 8];
        let mut written = 0usize;
        let s = sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            buf.as_mut_ptr() as *mut c_void,
            size,
            &mut written,
        );
        (s == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS).then(|| u64::from_le_bytes(buf))
    }
}

/// One cached plan: descriptors built at `plan_rows` and the heuristic's algorithm.
pub(crate) struct LtPlan {
    desc: sys::cublasLtMatmulDesc_t,
    a_layout: sys::cublasLtMatrixLayout_t,
    b_layout: sys::cublasLtMatrixLayout_t,
    d_layout: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
    pub(crate) plan_rows: u64,
    pub(crate) k: u64,
    pub(crate) n: u64,
    pub(crate) info: AlgoInfo,
}

// SAFETY: descriptors are plain heap objects of cuBLASLt, used under the cache's mutex.
unsafe impl Send for LtPlan {}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // Errors ignored: destroying descriptors cannot leave the device in a bad state.
        // SAFETY: each descriptor was created by LtPlan::build and is destroyed once.
        unsafe {
            let _ = result::destroy_matrix_layout(self.a_layout);
            let _ = result::destroy_matrix_layout(self.b_layout);
            let _ = result::destroy_matrix_layout(self.d_layout);
            let _ = result::destroy_matmul_desc(self.desc);
        }
    }
}

/// Owns descriptors while a plan is half built, so an error frees them.
struct Partial {
    desc: Option<sys::cublasLtMatmulDesc_t>,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Drop for Partial {
    fn drop(&mut self) {
        // SAFETY: each was created below and not yet handed to an LtPlan.
        unsafe {
            for l in self.layouts.drain(..) {
                let _ = result::destroy_matrix_layout(l);
            }
            if let Some(d) = self.desc.take() {
                let _ = result::destroy_matmul_desc(d);
            }
            if let Some(p) = self.pref.take() {
                let _ = result::destroy_matmul_pref(p);
            }
        }
    }
}

fn set_desc<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
    what: &str,
) -> Result<(), RunError> {
    // SAFETY: v points to a value of the attribute's type, alive for the call.
    let s = unsafe {
        sys::cublasLtMatmulDescSetAttribute(
            desc,
            attr,
            v as *const T as *const c_void,
            std::mem::size_of::<T>(),
        )
    };
    check("cublasLtMatmulDescSetAttribute", s, what)
}

impl LtPlan {
    /// Build the descriptors for an FP8 e4m3 x e4m3 -> BF16 GEMM of N x plan_rows x K and ask
    /// the heuristic for an algorithm. A shape cuBLASLt refuses comes back `Unsupported`.
    ///
    /// `scales` (two device f32, as for `matmul`) is set as the scale pointers before the
    /// heuristic runs, as NVIDIA's FP8 sample does, so the algorithm is chosen for a scaled
    /// GEMM; `matmul` sets the pointers of each call again.
    pub(crate) fn build(
        n: u64,
        k: u64,
        plan_rows: u64,
        scales: u64,
        algo_index: usize,
    ) -> Result<LtPlan, RunError> {
        let h = handle()?;
        use sys::cublasLtMatmulDescAttributes_t::*;
        use sys::cudaDataType_t::*;
        let what = format!("FP8 e4m3 TN GEMM m=N={n} n=rows={plan_rows} k=K={k} (BF16 out)");
        let mut p = Partial {
            desc: None,
            layouts: Vec::new(),
            pref: None,
        };
        let desc =
            result::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, CUDA_R_32F)
                .map_err(|e| lt_error("cublasLtMatmulDescCreate", e.0, &what))?;
        p.desc = Some(desc);
        // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (int32 attributes).
        set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, &1i32, &what)?;
        set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, &0i32, &what)?;
        set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &0i8, &what)?;
        let (w_scale_ptr, a_scale_ptr) = (
            (scales + W_SCALE_OFFSET) as *const c_void,
            scales as *const c_void,
        );
        set_desc(
            desc,
            CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            &w_scale_ptr,
            &what,
        )?;
        set_desc(
            desc,
            CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            &a_scale_ptr,
            &what,
        )?;
        let mk = |t,
                  rows: u64,
                  cols: u64,
                  ld: u64,
                  p: &mut Partial|
         -> Result<sys::cublasLtMatrixLayout_t, RunError> {
            let l = result::create_matrix_layout(t, rows, cols, ld as i64)
                .map_err(|e| lt_error("cublasLtMatrixLayoutCreate", e.0, &what))?;
            p.layouts.push(l);
            Ok(l)
        };
        let a_layout = mk(CUDA_R_8F_E4M3, k, n, k, &mut p)?;
        let b_layout = mk(CUDA_R_8F_E4M3, k, plan_rows, k, &mut p)?;
        let d_layout = mk(CUDA_R_16BF, n, plan_rows, n, &mut p)?;
        let pref = result::create_matmul_pref()
            .map_err(|e| lt_error("cublasLtMatmulPreferenceCreate", e.0, &what))?;
        p.pref = Some(pref);
        // SAFETY: u64 attribute, pointer valid for the call.
        let s = unsafe {
            sys::cublasLtMatmulPreferenceSetAttribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &MAX_WORKSPACE as *const u64 as *const c_void,
                8,
            )
        };
        check("cublasLtMatmulPreferenceSetAttribute", s, &what)?;
        // Ask for algo_index + 1 results and take the last: index 0 is the heuristic's
        // first choice (what an engine ships); others let a run pick a different kernel.
        let want = algo_index + 1;
        // SAFETY: zeroed POD out-structures; the array holds `want` results; count valid.
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            (0..want).map(|_| unsafe { std::mem::zeroed() }).collect();
        let mut count = 0i32;
        let s = unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                h,
                desc,
                a_layout,
                b_layout,
                d_layout,
                d_layout,
                pref,
                want.min(i32::MAX as usize) as i32,
                results.as_mut_ptr(),
                &mut count,
            )
        };
        check("cublasLtMatmulAlgoGetHeuristic", s, &what)?;
        if count == 0 {
            return Err(RunError::Unsupported(format!(
                "cuBLASLt cublasLtMatmulAlgoGetHeuristic returned no algorithm for {what}"
            )));
        }
        if (count as usize) <= algo_index {
            return Err(RunError::Unsupported(format!(
                "cuBLASLt's heuristic returned {count} algorithm(s) for {what}; algo index {algo_index} asked for"
            )));
        }
        let heur = results[algo_index];
        check(
            "cublasLtMatmulAlgoGetHeuristic (result state)",
            heur.state,
            &what,
        )?;
        let algo = heur.algo;
        use sys::cublasLtMatmulAlgoConfigAttributes_t::*;
        let info = AlgoInfo {
            algo_id: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_ID),
            tile_id: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
            stages_id: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
            splitk_num: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            reduction_scheme: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
            cta_swizzling: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
            custom_option: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
            inner_shape_id: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
            cluster_shape_id: algo_attr(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
            workspace_bytes: heur.workspaceSize as u64,
            waves_count: heur.wavesCount,
            heuristic_index: algo_index,
        };
        // The plan owns the descriptors now; the preference is no longer needed.
        p.layouts.clear();
        p.desc = None;
        drop(p);
        Ok(LtPlan {
            desc,
            a_layout,
            b_layout,
            d_layout,
            algo,
            plan_rows,
            k,
            n,
            info,
        })
    }

    /// Enqueue D = scale_w * scale_a * (W . A^T) on `stream`. `scales` points at two device
    /// f32: [activation scale, weight scale].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul(
        &self,
        w8: u64,
        a8: u64,
        d: u64,
        scales: u64,
        workspace: u64,
        workspace_bytes: u64,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), RunError> {
        let h = handle()?;
        use sys::cublasLtMatmulDescAttributes_t::*;
        let what = format!(
            "FP8 e4m3 TN GEMM m=N={} n=rows={} k=K={}",
            self.n, self.plan_rows, self.k
        );
        // Scale pointers are per call (the case's scratch), set under the cache's lock.
        let w_scale_ptr = (scales + W_SCALE_OFFSET) as *const c_void;
        let a_scale_ptr = scales as *const c_void;
        set_desc(
            self.desc,
            CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            &w_scale_ptr,
            &what,
        )?;
        set_desc(
            self.desc,
            CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            &a_scale_ptr,
            &what,
        )?;
        let alpha = 1.0f32;
        let beta = 0.0f32;
        // SAFETY: descriptors alive (self); device pointers are live allocations of the sizes
        // the layouts describe -- except the activation region in `bucketed-short`, which is
        // the bug under test and is read, never written, by the GEMM.
        let r = unsafe {
            result::matmul(
                h,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                w8 as *const c_void,
                self.a_layout,
                a8 as *const c_void,
                self.b_layout,
                d as *const c_void,
                self.d_layout,
                d as *mut c_void,
                self.d_layout,
                &self.algo,
                workspace as *mut c_void,
                workspace_bytes as usize,
                stream as sys::cudaStream_t,
            )
        };
        r.map_err(|e| lt_error("cublasLtMatmul", e.0, &what))
    }
}

/// (plan rows, K, N, heuristic index).
type PlanKey = (u64, u64, u64, usize);

/// The plan cache of the incident: one plan per (bucket rows, K, N), built on first use and
/// kept for the process.
pub(crate) struct PlanCache {
    plans: Mutex<HashMap<PlanKey, LtPlan>>,
}

static CACHE: OnceLock<PlanCache> = OnceLock::new();

pub(crate) fn cache() -> &'static PlanCache {
    CACHE.get_or_init(|| PlanCache {
        plans: Mutex::new(HashMap::new()),
    })
}

impl PlanCache {
    /// Run `f` with the plan for `plan_rows` (and heuristic result `algo_index`) (building it on a miss). Returns f's answer and
    /// whether the plan came from the cache.
    pub(crate) fn with_plan<R>(
        &self,
        n: u64,
        k: u64,
        plan_rows: u64,
        scales: u64,
        algo_index: usize,
        f: impl FnOnce(&LtPlan) -> Result<R, RunError>,
    ) -> Result<(R, bool), RunError> {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let key = (plan_rows, k, n, algo_index);
        let hit = plans.contains_key(&key);
        if !hit {
            let p = LtPlan::build(n, k, plan_rows, scales, algo_index)?;
            plans.insert(key, p);
        }
        match plans.get(&key) {
            Some(p) => Ok((f(p)?, hit)),
            None => Err(RunError::Unsupported("plan cache lost a plan".into())),
        }
    }
}
