// l2_norm kernels (ggml L2_NORM): per row of ncols, dst = x / max(sqrt(sum x^2), eps), computed
// as upstream does: x * rsqrt(max(sum x^2, eps^2)). One block per row.
//
// `l2_norm_ggml_*` reproduces ggml's CUDA launch as upstream ships it (norm.cu, l2_norm_f32_cuda):
// grid (nrows, nchannels, nsamples), extents read back from gridDim, WARP_SIZE (32) threads
// below ncols 1024 and 1024 threads from there. ne[2] or ne[3] above 65535 cannot be launched.
// `l2_norm_clamped_*` is the fix: grid clamped to the device's limits, true extents passed in,
// grid-stride loops over channels and samples, 64-bit offsets.
// The kernels are templates on the element type T (ops/catalog/src/elem.cuh): they load T, compute in
// float and store T, and every f32 entry has `_f16` and `_bf16` twins with the same parameters.

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

template <int block_size, typename T>
__device__ void l2_norm_row(const T * x, T * dst, const int ncols, const float eps) {
    const int tid = threadIdx.x;
    float tmp = 0.0f;
    for (int col = tid; col < ncols; col += block_size) {
        const float xi = kedge_float(x[col]);
        tmp += xi * xi;
    }
    tmp = block_reduce_sum<block_size>(tmp);
    // torch.nn.functional.normalize: x / max(||x||, eps)
    const float scale = rsqrtf(fmaxf(tmp, eps * eps));
    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = kedge_elem<T>(scale * kedge_float(x[col]));
    }
}

// ggml's launch: extents from gridDim.
template <int block_size, typename T>
__device__ void l2_norm_ggml(const T * x, T * dst, const int ncols, const long long stride_row,
                             const long long stride_channel, const long long stride_sample, const float eps) {
    const int nrows     = gridDim.x;
    const int nchannels = gridDim.y;
    const int row       = blockIdx.x;
    const int channel   = blockIdx.y;
    const int sample    = blockIdx.z;
    x   += sample*stride_sample + channel*stride_channel + row*stride_row;
    dst += ((sample*nchannels + channel)*nrows + row)*ncols;
    l2_norm_row<block_size>(x, dst, ncols, eps);
}

extern "C" __global__ void l2_norm_ggml_32(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_ggml_32_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_ggml_32_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_ggml_1024(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_ggml_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_ggml_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    l2_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}

// The fix: true extents, clamped grid, grid-stride loops, 64-bit row offsets.
template <int block_size, typename T>
__device__ void l2_norm_clamped(const T * x, T * dst, const int ncols, const long long nrows,
                                const long long nchannels, const long long nsamples, const long long stride_row,
                                const long long stride_channel, const long long stride_sample, const float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            const T * xr = x + sample*stride_sample + channel*stride_channel + row*stride_row;
            T * dr = dst + ((sample*nchannels + channel)*nrows + row)*ncols;
            l2_norm_row<block_size>(xr, dr, ncols, eps);
            __syncthreads(); // s_sum is reused by the next iteration
        }
    }
}

extern "C" __global__ void l2_norm_clamped_32(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_clamped_32_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_clamped_32_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_clamped_1024(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_clamped_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void l2_norm_clamped_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    l2_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
