// softmax kernels (ggml SOFT_MAX): dst = softmax(x*scale + slope*mask) per row of ncols.
//
// One block per row. `softmax_ggml_*` reproduces ggml's softmax.cu launch as upstream ships it:
// grid (ne01, ne02, ne03), so heads (ne[2]) sit on grid.y and ne[3] on grid.z, both capped at
// 65535; the flat row index is derived from gridDim. `*_shared` keeps the row in dynamic shared
// memory ((pad(ncols, 32) + 32) floats: 32 for the inter-warp buffer, then the row); `*_global`
// is the path upstream takes when that does not fit the device's opt-in shared memory: only the
// 32-float inter-warp buffer is shared and the row is cached in dst (global memory) between the
// max, exp and normalize passes.
// `softmax_clamped_*` is the fix: grid clamped to the device limits, true extents passed in,
// heads and ne[3] walked with grid-stride loops, row offsets in 64 bits.
//
// The kernels are templates on the element type T of x and dst (ops/catalog/src/elem.cuh; the mask is
// f32): they load T, compute in float and store T, and every f32 entry has `_f16` and `_bf16`
// twins with the same parameters. The shared row holds floats for every T, so the
// shared-memory size and threshold are the same for every T. On the uncached path a 16-bit
// dst cannot hold the intermediate values without rounding them, so those rows are recomputed
// from x in each pass instead of cached in dst (x read three times, dst written once).

#define WARP_SIZE 32
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    }
    return x;
}

__device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, 32));
    }
    return x;
}

// ggml's get_alibi_slope: 1 without ALiBi; otherwise m0^(h+1) for the first n_head_log2 heads
// and m1^(2*(h - n_head_log2) + 1) after them.
__device__ __forceinline__ float alibi_slope(const float max_bias, const unsigned int h, const unsigned int n_head_log2,
                                             const float m0, const float m1) {
    if (max_bias <= 0.0f) {
        return 1.0f;
    }
    const float base = h < n_head_log2 ? m0 : m1;
    const int   exph = h < n_head_log2 ? h + 1 : 2*(h - n_head_log2) + 1;
    return powf(base, exph);
}

// Where the uncached path keeps the row between passes: dst itself when it holds floats;
// nowhere (recompute from x) for a 16-bit dst.
__device__ __forceinline__ float * softmax_dst_cache(float * drow) { return drow; }
__device__ __forceinline__ float * softmax_dst_cache(kedge_f16 *) { return nullptr; }
__device__ __forceinline__ float * softmax_dst_cache(kedge_bf16 *) { return nullptr; }

// One row. `buf_iw` is the 32-float inter-warp buffer; `vals` caches the row between passes
// (shared memory, or dst itself), or is null: then each pass recomputes the row from x. Each
// thread only revisits the columns it wrote, so the passes need no barrier for `vals`.
template <typename T>
__device__ void softmax_row(const T * x, const float * mask, T * dst, const int ncols, const float scale,
                            const float slope, float * buf_iw, float * vals) {
    const int tid        = threadIdx.x;
    const int block_size = blockDim.x;
    const int warp_id    = tid / WARP_SIZE;
    const int lane_id    = tid % WARP_SIZE;
    auto logit = [&](const int col) { return kedge_float(x[col])*scale + (mask ? slope*mask[col] : 0.0f); };

    float max_val = NEG_INF;
    for (int col = tid; col < ncols; col += block_size) {
        const float val = logit(col);
        if (vals) {
            vals[col] = val;
        }
        max_val = fmaxf(max_val, val);
    }
    max_val = warp_reduce_max(max_val);
    if (block_size > WARP_SIZE) {
        if (warp_id == 0) {
            buf_iw[lane_id] = NEG_INF;
        }
        __syncthreads();
        if (lane_id == 0) {
            buf_iw[warp_id] = max_val;
        }
        __syncthreads();
        max_val = warp_reduce_max(buf_iw[lane_id]);
    }

    float tmp = 0.0f;
    for (int col = tid; col < ncols; col += block_size) {
        const float val = expf((vals ? vals[col] : logit(col)) - max_val);
        tmp += val;
        if (vals) {
            vals[col] = val;
        }
    }
    tmp = warp_reduce_sum(tmp);
    if (block_size > WARP_SIZE) {
        __syncthreads();
        if (warp_id == 0) {
            buf_iw[lane_id] = 0.0f;
        }
        __syncthreads();
        if (lane_id == 0) {
            buf_iw[warp_id] = tmp;
        }
        __syncthreads();
        tmp = warp_reduce_sum(buf_iw[lane_id]);
    }

    const float inv_sum = 1.0f / tmp;
    for (int col = tid; col < ncols; col += block_size) {
        const float e = vals ? vals[col] : expf(logit(col) - max_val);
        dst[col] = kedge_elem<T>(e*inv_sum);
    }
}

// ggml's launch: grid (ne01, ne02, ne03); the flat row index is an int built from gridDim
// (softmax.cu: `const int rowx = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;`).
// The mask is [ncols, ne01, 1, 1], so its row is blockIdx.x.
template <bool use_shared, typename T>
__device__ void softmax_ggml(const T * x, const float * mask, T * dst, const int ncols, const float scale,
                             const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    extern __shared__ float smem_softmax[];
    const int rowx = blockIdx.x + blockIdx.y*gridDim.x + blockIdx.z*gridDim.x*gridDim.y;
    const float slope = alibi_slope(max_bias, blockIdx.y, n_head_log2, m0, m1);
    const float * mrow = mask ? mask + (long long) blockIdx.x*ncols : nullptr;
    T * drow = dst + (long long) rowx*ncols;
    float * vals = use_shared ? smem_softmax + WARP_SIZE : softmax_dst_cache(drow);
    softmax_row(x + (long long) rowx*ncols, mrow, drow, ncols, scale, slope, smem_softmax, vals);
}

extern "C" __global__ void softmax_ggml_shared(const float * x, const float * mask, float * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<true>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_ggml_shared_f16(const kedge_f16 * x, const float * mask, kedge_f16 * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<true>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_ggml_shared_bf16(const kedge_bf16 * x, const float * mask, kedge_bf16 * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<true>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_ggml_global(const float * x, const float * mask, float * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<false>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_ggml_global_f16(const kedge_f16 * x, const float * mask, kedge_f16 * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<false>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_ggml_global_bf16(const kedge_bf16 * x, const float * mask, kedge_bf16 * dst, const int ncols,
        const float scale, const float max_bias, const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_ggml<false>(x, mask, dst, ncols, scale, max_bias, m0, m1, n_head_log2);
}

// The fix: extents passed in, grid clamped, grid-stride loops over heads and ne[3].
template <bool use_shared, typename T>
__device__ void softmax_clamped(const T * x, const float * mask, T * dst, const int ncols,
                                const long long ne1, const long long ne2, const long long ne3, const float scale,
                                const float max_bias, const float m0, const float m1,
                                const unsigned int n_head_log2) {
    extern __shared__ float smem_softmax[];
    const long long i1 = blockIdx.x;
    const float * mrow = mask ? mask + i1*ncols : nullptr;
    for (long long i3 = blockIdx.z; i3 < ne3; i3 += gridDim.z) {
        for (long long i2 = blockIdx.y; i2 < ne2; i2 += gridDim.y) {
            const long long row = (i3*ne2 + i2)*ne1 + i1;
            const float slope = alibi_slope(max_bias, (unsigned int) i2, n_head_log2, m0, m1);
            T * drow = dst + row*ncols;
            float * vals = use_shared ? smem_softmax + WARP_SIZE : softmax_dst_cache(drow);
            softmax_row(x + row*ncols, mrow, drow, ncols, scale, slope, smem_softmax, vals);
            __syncthreads(); // buf_iw and the shared row are reused by the next iteration
        }
    }
}

extern "C" __global__ void softmax_clamped_shared(const float * x, const float * mask, float * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<true>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_clamped_shared_f16(const kedge_f16 * x, const float * mask, kedge_f16 * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<true>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_clamped_shared_bf16(const kedge_bf16 * x, const float * mask, kedge_bf16 * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<true>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_clamped_global(const float * x, const float * mask, float * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<false>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_clamped_global_f16(const kedge_f16 * x, const float * mask, kedge_f16 * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<false>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
extern "C" __global__ void softmax_clamped_global_bf16(const kedge_bf16 * x, const float * mask, kedge_bf16 * dst, const int ncols,
        const long long ne1, const long long ne2, const long long ne3, const float scale, const float max_bias,
        const float m0, const float m1, const unsigned int n_head_log2) {
    softmax_clamped<false>(x, mask, dst, ncols, ne1, ne2, ne3, scale, max_bias, m0, m1, n_head_log2);
}
