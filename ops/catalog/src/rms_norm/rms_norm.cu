// rms_norm kernels. One block per row; the row's sum of squares is reduced in a block, then
// each element is scaled by rsqrt(mean + eps). The kernels are templates on the element type
// T (ops/catalog/src/elem.cuh): they load T, compute in float and store T, and every f32 entry has
// `_f16` and `_bf16` twins with the same parameters and launch.
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

template <int block_size, typename T>
__device__ void rms_norm_row(const T * x, T * dst, const int ncols, const float eps) {
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
        dst[col] = kedge_elem<T>(scale * kedge_float(x[col]));
    }
}

// ggml's launch: extents from gridDim (norm.cu: `const int nrows = gridDim.x; const int nchannels = gridDim.y;`).
template <int block_size, typename T>
__device__ void rms_norm_ggml(const T * x, T * dst, const int ncols, const long long stride_row,
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
extern "C" __global__ void rms_norm_ggml_256_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<256>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_ggml_256_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<256>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_ggml_1024(const float * x, float * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_ggml_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_ggml_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_ggml<1024>(x, dst, ncols, stride_row, stride_channel, stride_sample, eps);
}

// The fix: true extents passed in, grid clamped, grid-stride loops over channels and samples.
// Row offsets are 64-bit so ne[2]*ne[1]*ne[0] past 2^31 stays correct.
template <int block_size, typename T>
__device__ void rms_norm_clamped(const T * x, T * dst, const int ncols, const long long nrows,
                                 const long long nchannels, const long long nsamples, const long long stride_row,
                                 const long long stride_channel, const long long stride_sample, const float eps) {
    const long long row = blockIdx.x;
    for (long long sample = blockIdx.z; sample < nsamples; sample += gridDim.z) {
        for (long long channel = blockIdx.y; channel < nchannels; channel += gridDim.y) {
            const T * xr = x + sample*stride_sample + channel*stride_channel + row*stride_row;
            T * dr = dst + ((sample*nchannels + channel)*nrows + row)*ncols;
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
extern "C" __global__ void rms_norm_clamped_256_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<256>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_clamped_256_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<256>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_clamped_1024(const float * x, float * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_clamped_1024_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}
extern "C" __global__ void rms_norm_clamped_1024_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row, const long long stride_channel,
        const long long stride_sample, const float eps) {
    rms_norm_clamped<1024>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
}

// CALIBRATION: the clamped kernel plus one read past the end of the input (one element of
// T), on the tensor's last row only. The value read is discarded unless it equals an
// impossible sentinel, so the comparison passes and only a memory detector can see the read.
template <typename T>
__device__ void rms_norm_planted_read_past_end_t(const T * x, T * dst, const int ncols, const long long nrows,
        const long long nchannels, const long long nsamples, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_clamped<256>(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel, stride_sample, eps);
    const bool last = blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1;
    if (last && threadIdx.x == 0) {
        const T * end = x + (nsamples - 1)*stride_sample + (nchannels - 1)*stride_channel + (nrows - 1)*stride_row + ncols;
        const float past = kedge_float_volatile(end);
        if (past == 1.0e-38f * 3.0f) {
            dst[0] = kedge_elem<T>(past); // never taken for real data; keeps the read alive
        }
    }
}

extern "C" __global__ void rms_norm_planted_read_past_end(const float * x, float * dst, const int ncols,
        const long long nrows, const long long nchannels, const long long nsamples, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_planted_read_past_end_t(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                     stride_sample, eps);
}
extern "C" __global__ void rms_norm_planted_read_past_end_f16(const kedge_f16 * x, kedge_f16 * dst, const int ncols,
        const long long nrows, const long long nchannels, const long long nsamples, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_planted_read_past_end_t(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                     stride_sample, eps);
}
extern "C" __global__ void rms_norm_planted_read_past_end_bf16(const kedge_bf16 * x, kedge_bf16 * dst, const int ncols,
        const long long nrows, const long long nchannels, const long long nsamples, const long long stride_row,
        const long long stride_channel, const long long stride_sample, const float eps) {
    rms_norm_planted_read_past_end_t(x, dst, ncols, nrows, nchannels, nsamples, stride_row, stride_channel,
                                     stride_sample, eps);
}
