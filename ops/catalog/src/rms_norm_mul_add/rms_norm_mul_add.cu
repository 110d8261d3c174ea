// rms_norm_mul_add kernels: the fusion ggml's CUDA backend applies to RMS_NORM -> MUL -> ADD,
// dst = rms_norm(x) * w + b, with w and b broadcast over rows, channels and samples by modulo
// (ggml's repeat rule; w and b share one shape here: [ncols, w_nrows, w_nchannels, w_nsamples]).
//
// `rms_norm_mul_add_ggml_*` reproduces upstream's launch (norm.cu, rms_norm_mul_f32_cuda with
// an add: `rms_norm_f32<block_size, true, true>`): grid (nrows, nchannels, nsamples), extents
// from gridDim, 256 threads below ncols 1024 and 1024 from there. ne[2] or ne[3] above 65535
// cannot be launched: the incident's second test line.
// `rms_norm_mul_add_clamped_*` is the fix: clamped grid, true extents, grid-stride loops,
// 64-bit offsets.
// The kernels are templates on the element type T of x, w, b and dst (ops/catalog/src/elem.cuh): they
// load T, compute in float and store T, and every f32 entry has `_f16` and `_bf16` twins with
// the same parameters.

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

// `w` and `b` already point at the broadcast row that belongs to this x row.
template <int block_size, typename T>
__device__ void rms_norm_mul_add_row(const T * x, const T * w, const T * b, T * dst,
                                     const int ncols, const float eps) {
    const int tid = threadIdx.x;
    float tmp = 0.0f;
    for (int col = tid; col < ncols; col += block_size) {
        const float xi = kedge_float(x[col]);
        tmp += xi * xi;
    }
    tmp = block_reduce_sum<block_size>(tmp);
    const float mean  = tmp / ncols;
    const float scale = rsqrtf(mean + eps);
    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = kedge_elem<T>(scale * kedge_float(x[col]) * kedge_float(w[col]) + kedge_float(b[col]));
    }
}

// ggml's launch: extents from gridDim, 32-bit row/channel/sample indices as upstream has them.
template <int block_size, typename T>
__device__ void rms_norm_mul_add_ggml(const T * x, const T * w, const T * b, T * dst,
                                      const int ncols, const long long stride_row, const long long stride_channel,
                                      const long long stride_sample, const float eps, const int w_nrows,
                                      const int w_nchannels, const int w_nsamples) {
    const int nrows     = gridDim.x;
    const int nchannels = gridDim.y;
    const int row       = blockIdx.x;
    const int channel   = blockIdx.y;
    const int sample    = blockIdx.z;
    x   += sample*stride_sample + channel*stride_channel + row*stride_row;
    dst += ((sample*nchannels + channel)*nrows + row)*ncols;
    const long long w_row = ((long long) (sample % w_nsamples)*w_nchannels + channel % w_nchannels)*w_nrows + row % w_nrows;
    rms_norm_mul_add_row<block_size>(x, w + w_row*ncols, b + w_row*ncols, dst, ncols, eps);
}

extern "C" __global__ void rms_norm_mul_add_ggml_256(const float * x, const float * w, const float * b, float * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<256>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                               w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_ggml_256_f16(const kedge_f16 * x, const kedge_f16 * w, const kedge_f16 * b, kedge_f16 * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<256>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                               w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_ggml_256_bf16(const kedge_bf16 * x, const kedge_bf16 * w, const kedge_bf16 * b, kedge_bf16 * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<256>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                               w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_ggml_1024(const float * x, const float * w, const float * b, float * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<1024>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                                w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_ggml_1024_f16(const kedge_f16 * x, const kedge_f16 * w, const kedge_f16 * b, kedge_f16 * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<1024>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                                w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_ggml_1024_bf16(const kedge_bf16 * x, const kedge_bf16 * w, const kedge_bf16 * b, kedge_bf16 * dst,
        const int ncols, const long long stride_row, const long long stride_channel, const long long stride_sample,
        const float eps, const int w_nrows, const int w_nchannels, const int w_nsamples) {
    rms_norm_mul_add_ggml<1024>(x, w, b, dst, ncols, stride_row, stride_channel, stride_sample, eps, w_nrows,
                                w_nchannels, w_nsamples);
}

// The fix: true extents, clamped grid, grid-stride loops, 64-bit offsets. The broadcast row of
// w and b is taken from the loop's channel and sample, never from blockIdx (which repeats once
// the grid is clamped).
template <int block_size, typename T>
__device__ void rms_norm_mul_add_clamped(const T * x, const T * w, const T * b, T * dst,
                                         const int ncols, const long long nrows, const long long nchannels,
                                         const long long nsamples, const long long stride_row,
                                         const long long stride_channel, const long long stride_sample,
                                         const float eps, const long long w_nrows, const long long w_nchannels,
                                         const long long w_nsamples) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            const T * xr = x + sample*stride_sample + channel*stride_channel + row*stride_row;
            T * dr = dst + ((sample*nchannels + channel)*nrows + row)*ncols;
            const long long w_row = ((sample % w_nsamples)*w_nchannels + channel % w_nchannels)*w_nrows + row % w_nrows;
            rms_norm_mul_add_row<block_size>(xr, w + w_row*ncols, b + w_row*ncols, dr, ncols, eps);
            __syncthreads(); // s_sum is reused by the next iteration
        }
    }
}

extern "C" __global__ void rms_norm_mul_add_clamped_256(const float * x, const float * w, const float * b, float * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<256>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                  stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_clamped_256_f16(const kedge_f16 * x, const kedge_f16 * w, const kedge_f16 * b, kedge_f16 * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<256>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                  stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_clamped_256_bf16(const kedge_bf16 * x, const kedge_bf16 * w, const kedge_bf16 * b, kedge_bf16 * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<256>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                  stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_clamped_1024(const float * x, const float * w, const float * b, float * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<1024>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                   stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_clamped_1024_f16(const kedge_f16 * x, const kedge_f16 * w, const kedge_f16 * b, kedge_f16 * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<1024>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                   stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
extern "C" __global__ void rms_norm_mul_add_clamped_1024_bf16(const kedge_bf16 * x, const kedge_bf16 * w, const kedge_bf16 * b, kedge_bf16 * dst,
        const int ncols, const long long nrows, const long long nchannels, const long long nsamples,
        const long long stride_row, const long long stride_channel, const long long stride_sample, const float eps,
        const long long w_nrows, const long long w_nchannels, const long long w_nsamples) {
    rms_norm_mul_add_clamped<1024>(x, w, b, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                   stride_sample, eps, w_nrows, w_nchannels, w_nsamples);
}
