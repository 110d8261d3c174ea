/*
 * kedge.h: the C ABI between kedge and external kernels.
 *
 * Two ways to put your own kernel under kedge's checks:
 *
 *   1. A plugin: a shared library that exports `kedge_plugin_info` (below). kedge loads it
 *      with `--plugin PATH`, allocates the case's tensors in the chosen allocation mode
 *      (exact, guard, guard-front, canary), fills the inputs, poisons the outputs, calls your
 *      entry function, synchronizes, and compares with its CPU reference exactly as for a
 *      built-in impl. The launch-contract check is skipped (your code launches its own
 *      kernels, kedge cannot see the grid) and every report says it was skipped; every other
 *      detector applies, compute-sanitizer included.
 *
 *   2. An NVRTC source kernel (`--kernel FILE.cu --entry NAME --geometry G`) for the row
 *      ops whose kernel signature kedge publishes (section "Row-op kernel ABI" at the end).
 *      kedge compiles it (cached like the built-ins), plans the launch itself, so the launch
 *      contract IS checked.
 *
 * A plugin runs inside a kedge worker process. A plugin that crashes, hangs or corrupts the
 * CUDA context costs that worker only; the supervisor starts another. Do not install signal
 * handlers in a plugin.
 *
 * Rules of the ABI (version 1):
 *   - Plain C, fixed-width integer types, no C++ types cross the boundary.
 *   - Strings are NUL-terminated UTF-8, owned by the side that made them, and valid for as
 *     long as kedge says below.
 *   - `kedge_plugin.abi_version` is the first member and stays the first member in every
 *     version, so kedge can read it from any plugin and refuse a mismatch with both numbers.
 *   - Adding an op (a new params struct, a new op name) does not change the version. Changing
 *     a struct that exists does.
 */
#ifndef KEDGE_H
#define KEDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KEDGE_ABI_VERSION 1

/* ---------------------------------------------------------------------------------------
 * Status codes an entry function returns.
 * ------------------------------------------------------------------------------------- */
#define KEDGE_OK 0
/* The plugin refuses this case (shape, dtype, params) on purpose. Put the reason in `msg`.
 * Verdict `unsupported`: allowed, not a failure. */
#define KEDGE_UNSUPPORTED 1
/* Something went wrong (a launch error from cudaGetLastError, a bad argument). Put the
 * message in `msg`; kedge passes it through into the verdict line. Any other return value
 * is treated as KEDGE_ERROR with the value named. */
#define KEDGE_ERROR 2

/* ---------------------------------------------------------------------------------------
 * Element types. Values are fixed; the dtype mask of an op entry is a bitwise OR of
 * KEDGE_DTYPE_BIT(KEDGE_DTYPE_*).
 * ------------------------------------------------------------------------------------- */
#define KEDGE_DTYPE_F32 0
#define KEDGE_DTYPE_F16 1
#define KEDGE_DTYPE_BF16 2
#define KEDGE_DTYPE_I32 3
#define KEDGE_DTYPE_U8 4 /* raw bytes: packed FP4, FP8 staging */
#define KEDGE_DTYPE_BIT(d) (1u << (d))

/* ---------------------------------------------------------------------------------------
 * A tensor as the device sees it, in ggml order: ne[0] is the contiguous dimension.
 *
 * Element (i0, i1, i2, i3) lives at byte offset i0*nb[0] + i1*nb[1] + i2*nb[2] + i3*nb[3]
 * from `data`. Strides may describe a padded, non-contiguous view (test-backend-ops v=1):
 * always index with nb, never assume density. The allocation holds exactly the bytes the
 * view spans, no more: in `guard` mode the byte after the last element is an unmapped page,
 * so one element read past the end faults.
 * ------------------------------------------------------------------------------------- */
typedef struct kedge_tensor {
    void *data;       /* device pointer (CUdeviceptr / the pointer cudaMalloc would give) */
    int32_t dtype;    /* KEDGE_DTYPE_* */
    int32_t reserved; /* 0 */
    int64_t ne[4];    /* elements per dimension, each >= 1 */
    uint64_t nb[4];   /* byte strides */
    const char *name; /* the op's name for this tensor ("x", "dst", "mask"); valid during the call */
} kedge_tensor;

/* ---------------------------------------------------------------------------------------
 * Parameters: one struct per op that has typed parameters. The entry's `params` argument
 * points to the struct of its op. For ops that have no struct here, `params` points to a
 * kedge_params_json holding all of the case's parameters as one JSON object (keys sorted,
 * every default filled in), e.g. {"eps":1e-06,"row_pad":0}.
 * Parameters that only shape the tensors (row_pad: a padded input view) are not repeated
 * here: they are visible in the tensors' ne/nb.
 * ------------------------------------------------------------------------------------- */
typedef struct kedge_params_rms_norm {
    float eps; /* dst = x / sqrt(mean(x^2) + eps), per row of ne[0] */
} kedge_params_rms_norm;

typedef struct kedge_params_norm {
    float eps; /* dst = (x - mean) / sqrt(var + eps), per row */
} kedge_params_norm;

typedef struct kedge_params_l2_norm {
    float eps; /* dst = x / max(sqrt(sum(x^2)), eps), per row */
} kedge_params_l2_norm;

typedef struct kedge_params_softmax {
    float scale;      /* logits are x*scale (+ slope*mask) */
    float max_bias;   /* ALiBi max bias; 0 = none */
    int32_t has_mask; /* 1 when inputs[1] is the mask */
} kedge_params_softmax;

/* Every other op. */
typedef struct kedge_params_json {
    const char *json; /* valid during the call */
} kedge_params_json;

/* ---------------------------------------------------------------------------------------
 * The per-op entry function.
 *
 *   inputs, n_in     the op's input tensors, in the op's order (`kedge list` names them)
 *   outputs, n_out   its outputs; poisoned with a NaN payload before the call, so an output
 *                    element you never write is reported as `unwritten-output`
 *   params           the op's params struct (above)
 *   cuda_stream      the cudaStream_t / CUstream to launch on; NULL is the legacy default
 *                    stream. kedge's context (the device's primary context) is current on
 *                    the calling thread, so the CUDA runtime API works as usual.
 *   msg, msg_len     a zeroed buffer for a NUL-terminated message (reason or error)
 *
 * Launch asynchronously on `cuda_stream` and return; kedge synchronizes and attributes a
 * fault to this call. Check `cudaGetLastError()` after each launch and return KEDGE_ERROR
 * with its string, so a refused launch is reported as one. Do not free, reallocate or
 * cache the tensors' pointers: they belong to kedge and change between cases.
 * ------------------------------------------------------------------------------------- */
typedef int (*kedge_entry_fn)(const kedge_tensor *inputs, int n_in, kedge_tensor *outputs,
                              int n_out, const void *params, void *cuda_stream, char *msg,
                              size_t msg_len);

/* One op a plugin provides. */
typedef struct kedge_op_entry {
    const char *op;       /* a kedge op name: "rms_norm", "softmax", ... (`kedge list`) */
    const char *variant;  /* NULL, or a short name [A-Za-z0-9_.-] when one plugin provides
                           * several entries for the same op */
    uint32_t dtypes;      /* mask of KEDGE_DTYPE_BIT(...) this entry handles */
    kedge_entry_fn entry; /* must not be NULL */
} kedge_op_entry;

/* What a plugin is, returned by kedge_plugin_info(). The struct and every string it points
 * to must stay valid for the life of the process (static storage). */
typedef struct kedge_plugin {
    uint32_t abi_version;       /* KEDGE_ABI_VERSION; FIRST MEMBER IN EVERY VERSION */
    const char *name;           /* [A-Za-z0-9_.-]+; impls are named plugin:<name>[:<variant>] */
    const char *about;          /* one line, or NULL */
    uint32_t n_ops;             /* entries in `ops` */
    const kedge_op_entry *ops;  /* n_ops entries */
} kedge_plugin;

/* The one symbol a plugin exports. Called once, at load. */
typedef const kedge_plugin *(*kedge_plugin_info_fn)(void);
#define KEDGE_PLUGIN_INFO_SYMBOL "kedge_plugin_info"

#if defined(_WIN32)
#define KEDGE_EXPORT __declspec(dllexport)
#else
#define KEDGE_EXPORT __attribute__((visibility("default")))
#endif

/* The plugin defines it (NULL is refused):
 *   KEDGE_EXPORT const kedge_plugin *kedge_plugin_info(void) { return &my_plugin; } */
KEDGE_EXPORT const kedge_plugin *kedge_plugin_info(void);

/* =======================================================================================
 * Row-op kernel ABI (NVRTC source kernels: --kernel FILE.cu --entry NAME --geometry G)
 * =======================================================================================
 *
 * For the row ops rms_norm, norm, l2_norm (the scalar is eps) and softmax without a mask
 * (the scalar is scale), your file defines, for T = float:
 *
 *   extern "C" __global__ void NAME(const T *x, T *dst, int ncols,
 *                                   long long nrows, long long nchannels, long long nsamples,
 *                                   long long stride_row, long long stride_channel,
 *                                   long long stride_sample, float eps_or_scale);
 *
 *   ncols                      ne[0], elements per row
 *   nrows, nchannels, nsamples ne[1], ne[2], ne[3]
 *   stride_*                   x's strides in ELEMENTS (nb[1..3] / sizeof(T)); x may be padded
 *   dst                        dense: row (r, c, s) starts at ((s*nchannels + c)*nrows + r)*ncols
 *
 * Element types: the entry's name says its T. NAME takes float (f32 cases), NAME_f16 a 16-bit
 * IEEE half (f16 cases: __half, or any 2-byte storage type), NAME_bf16 a bfloat16 (bf16 cases:
 * __nv_bfloat16, or any 2-byte type); every other parameter is the same. --entry NAME names
 * the family: kedge runs the dtypes whose entries the file defines (at least one) and reports
 * the others as unsupported. cuda_fp16.h and cuda_bf16.h compile where kedge finds the CUDA
 * headers (KEDGE_CUDA_INCLUDE, CUDA_HOME, /usr/local/cuda, or the nvidia-cuda-runtime wheel
 * beside libnvrtc); NVRTC has neither built in.
 *
 * One row per block. blockDim = (B, 1, 1), B = 256 unless --block says otherwise (a multiple
 * of 32 up to 1024): loop over columns with blockDim.x, do not assume a fixed B. No dynamic
 * shared memory. The grid mapping is the --geometry you choose:
 *
 *   ggml     grid = (nrows, nchannels, nsamples), like ggml's norm.cu. Your kernel may take
 *            row/channel/sample straight from blockIdx. kedge's launch-contract check
 *            reports ne[2] or ne[3] > 65535 as a launch error, as the hardware would.
 *   clamped  grid = (nrows, min(nchannels, max grid.y), min(nsamples, max grid.z)). Your
 *            kernel MUST grid-stride: for (c = blockIdx.y; c < nchannels; c += gridDim.y)
 *            and the same over z. Cases with nrows > max grid.x are refused (unsupported).
 *
 * kedge checks each compiled entry's parameter list against this signature when it loads the
 * file, so a mismatch is an error at load, not garbage at run time.
 */

#ifdef __cplusplus
}
#endif

#endif /* KEDGE_H */
