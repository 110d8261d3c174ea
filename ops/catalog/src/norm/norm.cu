// norm kernels (ggml NORM): per row of ncols, subtract the mean and divide by sqrt(var + eps).
// One block per row; the row's sum and sum of squares are reduced in a block.
//
// `norm_ggml_*` reproduces ggml's CUDA launch as upstream ships it (norm.cu, norm_f32_cuda):
// grid (nrows, nchannels, nsamples), extents read back from gridDim, WARP_SIZE (32) threads
// below ncols 1024 and 1024 threads from there, and a 32-bit dst row offset. ne[2] or ne[3]
// above 65535 cannot be launched at all.
// `norm_clamped_*` is the fix: the grid is clamped to the device's limits, the true extents
// are passed in, channels and samples are walked with grid-stride loops, offsets are 64-bit.
// The kernels are templates on the element type T (ops/catalog/src/elem.cuh): they load T, compute in
// float and store T, and every f32 entry has `_f16` and `_bf16` twins with the same parameters.

#define WARP_SIZE 32

__device__ __forceinline__ float2 warp_reduce_sum2(float2 a) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        a.x += __shfl_xor_sync(0xffffffff, a.x, offset, 32);
        a.y += __shfl_xor_sync(0xffffffff, a.y, offset, 32);
    }
    return a;
}

template <int block_size>
__device__ __forceinline__ float2 block_reduce_sum2(float2 v) {
    v = warp_reduce_sum2(v);
    if (block_size > WARP_SIZE) {
        __shared__ float2 s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = v;
        }
        __syncthreads();
        v = lane_id < block_size / WARP_SIZE ? s_sum[lane_id] : make_float2(0.0f, 0.0f);
        v = warp_reduce_sum2(v);
    }
    return v;
}

// Mean and variance as upstream computes them: E[x] and E[x^2] - E[x]^2 in f32.
template <int block_size, typename T>
__device__ void norm_row(const T * x, T * dst, const int ncols, const float eps) {
    const int tid = threadIdx.x;
    float2 mean_var = make_float2(0.0f, 0.0f);
    for (int col = tid; col < ncols; col += block_size) {
        const float xi = kedge_float(x[col]);
        mean_var.x += xi;
        mean_var.y += xi * xi;
    }
    mean_var = block_reduce_sum2<block_size>(mean_var);
    const float mean    = mean_var.x / ncols;
    const float var     = mean_var.y / ncols - mean * mean;
    const float inv_std = rsqrtf(var + eps);
    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = kedge_elem<T>((kedge_float(x[col]) - mean) * inv_std);
    }
}

// ggml's launch: extents from gridDim (`const int nrows = gridDim.x; const int nchannels = gridDim.y;`).
template <int block_size, typename T>
__device__ void norm_ggml(const T * x, T * dst, const int ncols, const long long stride_row,
                          const long long stride_channel, const long long stride_sample, const float eps) {
    const int nrows     = gridDim.x;
    const int nchannels = gridDim.y;
    const int row       = blockIdx.x;
    const int channel   = blockIdx.y;
    const int sample    = blockIdx.z;
    x   += sample*stride_sample + channel*stride_channel + row*stride_row;
    dst += ((sample*nchannels + channel)*nrows + row)*ncols;
    norm_row<block_size>(x, dst, ncols, eps);
}

extern "C" __global__ void norm_ggml_32(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_ggml_32_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_ggml_32_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<WARP_SIZE>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_ggml_1024(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_ggml_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_ggml_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}

// The fix: true extents passed in, grid clamped, grid-stride loops over channels and samples,
// 64-bit row offsets so ne[0]*ne[1]*ne[2]*ne[3] past 2^31 stays correct.
template <int block_size, typename T>
__device__ void norm_clamped(const T * x, T * dst, const int ncols, const long long nrows,
                             const long long nchannels, const long long nsamples, const long long stride_row,
                             const long long stride_channel, const long long stride_sample, const float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            const T * xr = x + sample*stride_sample + channel*stride_channel + row*stride_row;
            T * dr = dst + ((sample*nchannels + channel)*nrows + row)*ncols;
            norm_row<block_size>(xr, dr, ncols, eps);
            __syncthreads(); // s_sum is reused by the next iteration
        }
    }
}

extern "C" __global__ void norm_clamped_32(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_clamped_32_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_clamped_32_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<WARP_SIZE>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_clamped_1024(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_clamped_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void norm_clamped_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
