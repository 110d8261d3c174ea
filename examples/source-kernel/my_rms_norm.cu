// An example NVRTC source kernel for kedge: rms_norm with the published row-op kernel ABI
// (harness/include/kedge.h, "Row-op kernel ABI"; examples/README.md).
//
//   kedge sweep --op rms_norm --kernel examples/source-kernel/my_rms_norm.cu \
//       --entry my_rms_norm --geometry clamped
//
// kedge compiles this file with NVRTC (cached like its own kernels), launches it with one
// row per block and blockDim.x threads, and checks every launch against the device limits
// before issuing it. The kernel grid-strides over channels (y) and samples (z), so it is
// correct under both published geometries: `ggml` (grid = (nrows, nchannels, nsamples),
// which the launch-contract check refuses past 65535 on y/z, as the hardware would) and
// `clamped` (y/z clamped to the device's limits).
//
// Element types: `my_rms_norm` is the f32 kernel; `my_rms_norm_f16` and `my_rms_norm_bf16`,
// with the same parameters and x, dst of 16-bit types, make kedge run this file's f16 and bf16
// cases too (a file without them gets f32 cases only; the others are `unsupported`).
//
// No includes: NVRTC compiles it without the CUDA toolkit's headers, so the 16-bit types are
// converted here by hand. With the headers on kedge's include path (KEDGE_CUDA_INCLUDE,
// CUDA_HOME, or the nvidia-cuda-runtime wheel beside libnvrtc), `#include <cuda_fp16.h>` and
// `const __half *x` work the same.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o, 32);
    }
    return v;
}

// Sum over a block of any multiple of 32 threads up to 1024; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) {
        partial[warp] = v;
    }
    __syncthreads();
    v = lane < nwarps ? partial[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads(); // `partial` is reused by the next row
    return v;
}

// 16-bit storage: f16 converted with PTX's cvt, bf16 by its bits (round to nearest even).
struct f16_bits { unsigned short v; };
struct bf16_bits { unsigned short v; };

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(f16_bits x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.v));
    return f;
}
__device__ __forceinline__ float load(bf16_bits x) { return __uint_as_float(((unsigned int) x.v) << 16); }

__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(f16_bits *p, float v) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(p->v) : "f"(v)); }
__device__ __forceinline__ void store(bf16_bits *p, float v) {
    unsigned int u = __float_as_uint(v);
    p->v = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short) ((u >> 16) | 0x40u)
                                            : (unsigned short) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename T>
__device__ void rms_norm_rows(const T *x, T *dst, int ncols, long long nrows, long long nchannels,
                              long long nsamples, long long stride_row, long long stride_channel,
                              long long stride_sample, float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            // 64-bit offsets: rows * channels * samples * ncols can pass 2^31.
            const T *xr = x + sample * stride_sample + channel * stride_channel + row * stride_row;
            T *dr = dst + ((sample * nchannels + channel) * nrows + row) * ncols;
            float s = 0.0f;
            for (int c = threadIdx.x; c < ncols; c += blockDim.x) {
                const float v = load(xr[c]);
                s += v * v;
            }
            s = block_sum(s);
            const float scale = rsqrtf(s / ncols + eps);
            for (int c = threadIdx.x; c < ncols; c += blockDim.x) {
                store(&dr[c], scale * load(xr[c]));
            }
        }
    }
}

extern "C" __global__ void my_rms_norm(const float *x, float *dst, int ncols, long long nrows,
                                       long long nchannels, long long nsamples, long long stride_row,
                                       long long stride_channel, long long stride_sample, float eps) {
    rms_norm_rows(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}

extern "C" __global__ void my_rms_norm_f16(const f16_bits *x, f16_bits *dst, int ncols, long long nrows,
                                           long long nchannels, long long nsamples, long long stride_row,
                                           long long stride_channel, long long stride_sample, float eps) {
    rms_norm_rows(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}

extern "C" __global__ void my_rms_norm_bf16(const bf16_bits *x, bf16_bits *dst, int ncols, long long nrows,
                                            long long nchannels, long long nsamples, long long stride_row,
                                            long long stride_channel, long long stride_sample, float eps) {
    rms_norm_rows(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
