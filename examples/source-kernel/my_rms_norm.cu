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
// No includes: NVRTC compiles it without the CUDA toolkit's headers.

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

extern "C" __global__ void my_rms_norm(const float *x, float *dst, int ncols, long long nrows,
                                       long long nchannels, long long nsamples, long long stride_row,
                                       long long stride_channel, long long stride_sample, float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            // 64-bit offsets: rows * channels * samples * ncols can pass 2^31.
            const float *xr = x + sample * stride_sample + channel * stride_channel + row * stride_row;
            float *dr = dst + ((sample * nchannels + channel) * nrows + row) * ncols;
            float s = 0.0f;
            for (int c = threadIdx.x; c < ncols; c += blockDim.x) {
                const float v = xr[c];
                s += v * v;
            }
            s = block_sum(s);
            const float scale = rsqrtf(s / ncols + eps);
            for (int c = threadIdx.x; c < ncols; c += blockDim.x) {
                dr[c] = scale * xr[c];
            }
        }
    }
}
