// kedge repro: rms_norm/ggml f32 ne=[64,1,65536,1] eps=1e-6 row_pad=0 seed=1 (exact)
// case: {"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1],"params":{"eps":1e-6,"row_pad":0},"seed":1,"alloc":"exact"}
// build: nvcc -arch=sm_90 -o repro repro.cu && ./repro
// memory errors: compute-sanitizer --tool memcheck --padding 512 ./repro
//   (--padding keeps back-to-back allocations from hiding a one-element overrun)
//
// Tensors: one cudaMalloc each, of exactly the bytes kedge allocates (its `exact` mode).
// Inputs: the values kedge used, from the same generator (SplitMix64, seed 1).
// Outputs: filled with 0xFF bytes before the launch (a NaN for float types).
// Every launch is followed by cudaGetLastError() and cudaDeviceSynchronize(); the first
// error is printed and the exit status is 1. Values are not compared here (kedge does that).

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- kernel source: ops/src/rms_norm/rms_norm.cu ----
// rms_norm kernels. One block per row; the row's sum of squares is reduced in a block, then
// each element is scaled by rsqrt(mean + eps).
//
// `rms_norm_ggml_*` reproduces ggml's CUDA launch as upstream ships it (norm.cu): the grid is
// (nrows, nchannels, nsamples) and the kernel derives its extents from gridDim, so ne[2] or
// ne[3] above 65535 cannot be launched at all.
// `rms_norm_clamped_*` is the fix from the incident: the grid is clamped to the device's
// limits, the true extents are passed in, and channels/samples are walked with grid-stride
// loops.
// `rms_norm_planted_read_past_end` is a CALIBRATION kernel, not a real impl: on the last row
// of the tensor it reads one element past the input's end and discards the value, so every
// output stays right. kedge must catch it with a guard page and with memcheck.

#define WARP_SIZE 32

__device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    }
    return x;
}

template <int block_size>
__device__ __forceinline__ float block_reduce_sum(float tmp) {
    tmp = warp_reduce_sum(tmp);
    if (block_size > WARP_SIZE) {
        __shared__ float s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = lane_id < block_size / WARP_SIZE ? s_sum[lane_id] : 0.0f;
        tmp = warp_reduce_sum(tmp);
    }
    return tmp;
}

template <int block_size>
__device__ void rms_norm_row(const float * x, float * dst, const int ncols, const float eps) {
    const int tid = threadIdx.x;
    float tmp = 0.0f;
    for (int col = tid; col < ncols; col += block_size) {
        const float xi = x[col];
        tmp += xi * xi;
    }
    tmp = block_reduce_sum<block_size>(tmp);
    const float mean  = tmp / ncols;
    const float scale = rsqrtf(mean + eps);
    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = scale * x[col];
    }
}

// ggml's launch: extents from gridDim (norm.cu: `const int nrows = gridDim.x; const int nchannels = gridDim.y;`).
template <int block_size>
__device__ void rms_norm_ggml(const float * x, float * dst, const int ncols, const long long stride_row,
                              const long long stride_channel, const long long stride_sample, const float eps) {
    const int nrows     = gridDim.x;
    const int nchannels = gridDim.y;
    const int row       = blockIdx.x;
    const int channel   = blockIdx.y;
    const int sample    = blockIdx.z;
    x   += sample*stride_sample + channel*stride_channel + row*stride_row;
    dst += ((sample*nchannels + channel)*nrows + row)*ncols;
    rms_norm_row<block_size>(x, dst, ncols, eps);
}

extern "C" __global__ void rms_norm_ggml_256(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<256>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_ggml_1024(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}

// The fix: true extents passed in, grid clamped, grid-stride loops over channels and samples.
// Row offsets are 64-bit so ne[2]*ne[1]*ne[0] past 2^31 stays correct.
template <int block_size>
__device__ void rms_norm_clamped(const float * x, float * dst, const int ncols, const long long nrows,
                                 const long long nchannels, const long long nsamples, const long long stride_row,
                                 const long long stride_channel, const long long stride_sample, const float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            const float * xr = x + sample*stride_sample + channel*stride_channel + row*stride_row;
            float * dr = dst + ((sample*nchannels + channel)*nrows + row)*ncols;
            rms_norm_row<block_size>(xr, dr, ncols, eps);
            __syncthreads(); // s_sum is reused by the next iteration
        }
    }
}

extern "C" __global__ void rms_norm_clamped_256(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<256>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_clamped_1024(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}

// CALIBRATION: the clamped kernel plus one read past the end of the input, on the tensor's
// last row only. The value read is discarded unless it equals an impossible sentinel, so
// the comparison passes and only a memory detector can see the read.
extern "C" __global__ void rms_norm_planted_read_past_end(const float * x, float * dst, const int ncols,
        const long long nrows, const long long nchannels, const long long nsamples, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_clamped<256>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
    const bool last = blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1;
    if (last && threadIdx.x == 0) {
        const float * end = x + (nsamples - 1)*stride_sample + (nchannels - 1)*stride_channel + (nrows - 1)*stride_row + ncols;
        const float past = *(volatile const float *) end;
        if (past == 1.0e-38f * 3.0f) {
            dst[0] = past; // never taken for real data; keeps the read alive
        }
    }
}
// ---- end of ops/src/rms_norm/rms_norm.cu ----

// ---- kedge's input generator (harness/core/src/rng.rs) ----
__attribute__((unused)) static uint64_t kedge_next(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__attribute__((unused)) static uint64_t kedge_stream(uint64_t seed, uint64_t index) {
    uint64_t s = (seed + index * 0xD1B54A32D192ED03ull) ^ 0x9E3779B97F4A7C15ull;
    kedge_next(&s);
    return s;
}
__attribute__((unused)) static float kedge_uniform(uint64_t *s) {
    const float unit = (float) (kedge_next(s) >> 40) / (float) (1u << 24);
    return -1.0f + 2.0f * unit; /* exact: 2*unit is exact, one rounding either way */
}
__attribute__((unused)) static uint32_t kedge_below16(uint64_t *s) {
    return (uint32_t) (((unsigned __int128) kedge_next(s) * 16u) >> 64);
}
__attribute__((unused)) static void kedge_fill_f32(float *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = kedge_uniform(&s);
}
__attribute__((unused)) static void kedge_fill_i32(int32_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (int32_t) kedge_below16(&s);
}
__attribute__((unused)) static void kedge_fill_u8(uint8_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (uint8_t) kedge_below16(&s);
}
__attribute__((unused)) static float kedge_f32_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static int kedge_fail(const char *what, cudaError_t e) {
    fprintf(stderr, "%s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
}
#define CHECK(what, call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return kedge_fail(what, e_); } while (0)

int main(void) {
    // tensor 0: x (input, f32, ne=[64,1,65536,1], nb=[4,256,256,16777216])
    const size_t bytes_0 = 16777216ull;
    void *d_0 = NULL;
    CHECK("cudaMalloc x", cudaMalloc(&d_0, bytes_0));
    {
        void *h = malloc(bytes_0);
        if (!h) { fprintf(stderr, "out of host memory\n"); return 1; }
        kedge_fill_f32((float *) h, bytes_0 / 4, 1ull, 0ull);
        CHECK("upload x", cudaMemcpy(d_0, h, bytes_0, cudaMemcpyHostToDevice));
        free(h);
    }
    // tensor 1: dst (output, f32, ne=[64,1,65536,1], nb=[4,256,256,16777216])
    const size_t bytes_1 = 16777216ull;
    void *d_1 = NULL;
    CHECK("cudaMalloc dst", cudaMalloc(&d_1, bytes_1));
    CHECK("poison dst", cudaMemset(d_1, 0xFF, bytes_1));
    CHECK("synchronize after setup", cudaDeviceSynchronize());

    // launch 0: rms_norm_ggml_256 grid=(1,65536,1) block=(256,1,1) smem=0
    {
        void *a0 = d_0;
        void *a1 = d_1;
        int a2 = 64;
        long long a3 = 64ll;
        long long a4 = 64ll;
        long long a5 = 4194304ll;
        float a6 = kedge_f32_bits(0x358637bdu); /* 1e-6 */
        void *args[] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6};
        const dim3 grid(1u, 65536u, 1u), block(256u, 1u, 1u);
        cudaError_t e = cudaLaunchKernel((const void *) rms_norm_ggml_256, grid, block, args, 0, 0);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) return kedge_fail("launch 0: rms_norm_ggml_256 grid=(1,65536,1) block=(256,1,1) smem=0", e);
        e = cudaDeviceSynchronize();
        if (e != cudaSuccess) return kedge_fail("synchronize after launch 0: rms_norm_ggml_256 grid=(1,65536,1) block=(256,1,1) smem=0", e);
    }

    printf("%d launch(es) completed without a CUDA error\n", 1);
    return 0;
}
