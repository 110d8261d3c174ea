// kedge's own kernels for big cases (harness/core/src/cuda/big.rs): inputs drawn on the device
// with the same values as the host draw of the same seed (SplitMix64 is a counter: element i is
// a mix of state + (i + 1) * gamma, so every thread computes its own), and outputs scanned on
// the device for poison survivors and non-finite values, so a case of 2^31 elements moves no
// tensor across PCIe. No CUDA headers: 16-bit results are built by bit arithmetic.

#define KEDGE_GAMMA 0x9E3779B97F4A7C15ull

__device__ __forceinline__ unsigned long long kedge_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The host's `lo + (hi - lo) * unit`, each step rounded as the host rounds it (no fused
// multiply-add): unit has 24 bits, exactly representable.
__device__ __forceinline__ float kedge_uniform(unsigned long long state, unsigned long long i,
                                               float lo, float hi) {
    const unsigned long long z = kedge_mix(state + (i + 1ull) * KEDGE_GAMMA);
    const float unit = __fmul_rn((float) (z >> 40), 5.9604644775390625e-8f);  // 2^-24
    return __fadd_rn(lo, __fmul_rn(__fsub_rn(hi, lo), unit));
}

// f32 to f16, round to nearest even (the hardware's cvt.rn, as the host's half crate rounds).
__device__ __forceinline__ unsigned short kedge_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// f32 to bf16, round to nearest even (as the host's half crate).
__device__ __forceinline__ unsigned short kedge_f32_to_bf16(float f) {
    const unsigned int x = __float_as_uint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        return (unsigned short) ((x >> 16) | 0x40u);
    }
    return (unsigned short) ((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

extern "C" __global__ void kedge_draw_f32(float *p, unsigned long long n, unsigned long long state,
                                          float lo, float hi) {
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        p[i] = kedge_uniform(state, i, lo, hi);
    }
}

extern "C" __global__ void kedge_draw_f16(unsigned short *p, unsigned long long n,
                                          unsigned long long state, float lo, float hi) {
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        p[i] = kedge_f32_to_f16(kedge_uniform(state, i, lo, hi));
    }
}

extern "C" __global__ void kedge_draw_bf16(unsigned short *p, unsigned long long n,
                                           unsigned long long state, float lo, float hi) {
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        p[i] = kedge_f32_to_bf16(kedge_uniform(state, i, lo, hi));
    }
}

// Integers in [0, 16) at the tensor's width (i32; i16 and i8, concat's integer types): the
// host's `below(16)` is the top four bits of the draw.
template <typename T>
__device__ __forceinline__ void kedge_draw_int(T *p, unsigned long long n,
                                               unsigned long long state) {
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        p[i] = (T) (kedge_mix(state + (i + 1ull) * KEDGE_GAMMA) >> 60);
    }
}

extern "C" __global__ void kedge_draw_i32(int *p, unsigned long long n, unsigned long long state,
                                          float lo, float hi) {
    kedge_draw_int(p, n, state);
}

extern "C" __global__ void kedge_draw_i16(short *p, unsigned long long n, unsigned long long state,
                                          float lo, float hi) {
    kedge_draw_int(p, n, state);
}

extern "C" __global__ void kedge_draw_i8(signed char *p, unsigned long long n,
                                         unsigned long long state, float lo, float hi) {
    kedge_draw_int(p, n, state);
}

// Counts of elements still holding the poison and of non-finite ones (poison apart), for
// 4-byte (f32, i32) and 2-byte (f16, bf16) elements. `exp_mask`: the exponent bits (all ones
// is inf or NaN; 0 for an integer type).
__device__ __forceinline__ void kedge_add_counts(unsigned long long poisoned,
                                                 unsigned long long nonfinite,
                                                 unsigned long long *counts) {
    for (int o = 16; o > 0; o >>= 1) {
        poisoned += __shfl_down_sync(0xffffffffu, poisoned, o);
        nonfinite += __shfl_down_sync(0xffffffffu, nonfinite, o);
    }
    if ((threadIdx.x & 31) == 0) {
        if (poisoned) atomicAdd(&counts[0], poisoned);
        if (nonfinite) atomicAdd(&counts[1], nonfinite);
    }
}

extern "C" __global__ void kedge_scan_u32(const unsigned int *p, unsigned long long n,
                                          unsigned int poison, unsigned int exp_mask,
                                          unsigned long long *counts) {
    unsigned long long poisoned = 0, nonfinite = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        const unsigned int v = p[i];
        if (v == poison) {
            poisoned++;
        } else if (exp_mask && (v & exp_mask) == exp_mask) {
            nonfinite++;
        }
    }
    kedge_add_counts(poisoned, nonfinite, counts);
}

extern "C" __global__ void kedge_scan_u16(const unsigned short *p, unsigned long long n,
                                          unsigned int poison, unsigned int exp_mask,
                                          unsigned long long *counts) {
    unsigned long long poisoned = 0, nonfinite = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long) gridDim.x * blockDim.x) {
        const unsigned int v = p[i];
        if (v == poison) {
            poisoned++;
        } else if (exp_mask && (v & exp_mask) == exp_mask) {
            nonfinite++;
        }
    }
    kedge_add_counts(poisoned, nonfinite, counts);
}

// Count of blocks of a block format (q4_0, q8_0, the K- and i-quants: `size` bytes each) still
// holding the poison byte in every byte: a block never written. Non-finite values are not
// counted (a block's values are its scales times its quants; the sampled blocks are
// dequantized and compared on the host).
extern "C" __global__ void kedge_scan_block(const unsigned char *p, unsigned long long n_blocks,
                                            unsigned int size, unsigned int poison,
                                            unsigned long long *counts) {
    unsigned long long poisoned = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
         i < n_blocks; i += (unsigned long long) gridDim.x * blockDim.x) {
        const unsigned char *b = p + i * size;
        bool all = true;
        for (unsigned int k = 0; k < size; k++) {
            if (b[k] != (unsigned char) poison) {
                all = false;
                break;
            }
        }
        if (all) poisoned++;
    }
    kedge_add_counts(poisoned, 0, counts);
}

// A big block-format input made of its pool (contract::op::BlockPool): row r of the input is
// the pool row the picks' stream draws at r, `below(pool_rows)` of that draw (the top bits of
// its product with pool_rows), as the host's `BlockPool::pick`. A warp copies each row, so the
// pool (megabytes) crosses PCIe instead of the input (gigabytes).
extern "C" __global__ void kedge_pool_rows(unsigned char *dst, const unsigned char *pool,
                                           unsigned long long row_bytes, unsigned long long rows,
                                           unsigned long long pool_rows,
                                           unsigned long long state) {
    const unsigned long long per_block = blockDim.x / 32;
    const unsigned long long warps = (unsigned long long) gridDim.x * per_block;
    const unsigned int lane = threadIdx.x % 32;
    for (unsigned long long r = blockIdx.x * per_block + threadIdx.x / 32; r < rows; r += warps) {
        const unsigned long long k =
            __umul64hi(kedge_mix(state + (r + 1ull) * KEDGE_GAMMA), pool_rows);
        const unsigned char *from = pool + k * row_bytes;
        unsigned char *to = dst + r * row_bytes;
        for (unsigned long long b = lane; b < row_bytes; b += 32) {
            to[b] = from[b];
        }
    }
}

// An input of distinct rows (contract::op::distinct_rows: argsort, argmax, top_k), f32: row r
// is a Fisher-Yates shuffle of 0..n-1 from the stream at r * draws (draws: n - 1 for the
// shuffle, then one per padding value, uniform in [-1, 1), up to the next row at `pitch`
// elements), each rank written as `distinct_value` writes it. One thread a row, shuffling in
// the row itself: the ranks as integers in the float's bits, then made values.
extern "C" __global__ void kedge_distinct_rows(float *p, unsigned long long rows,
                                               unsigned long long n, unsigned long long pitch,
                                               unsigned long long state) {
    const unsigned long long draws = n - 1ull + (pitch > n ? pitch - n : 0ull);
    for (unsigned long long r = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
         r < rows; r += (unsigned long long) gridDim.x * blockDim.x) {
        unsigned int *row = (unsigned int *) (p + r * pitch);
        unsigned long long s = state + r * draws * KEDGE_GAMMA;
        for (unsigned long long k = 0; k < n; k++) {
            row[k] = (unsigned int) k;
        }
        for (unsigned long long i = n - 1ull; i >= 1ull; i--) {
            s += KEDGE_GAMMA;
            const unsigned long long z = kedge_mix(s);
            // below(i + 1): the top 64 bits of the 128-bit product.
            const unsigned long long j = __umul64hi(z, i + 1ull);
            const unsigned int t = row[i];
            row[i] = row[j];
            row[j] = t;
        }
        for (unsigned long long k = 0; k < n; k++) {
            row[k] = n <= (1ull << 24) ? __float_as_uint((float) row[k]) : 0x3f800000u + row[k];
        }
        // The padding after the row (none after the last).
        if (r + 1ull < rows) {
            for (unsigned long long k = n; k < pitch; k++) {
                s += KEDGE_GAMMA;
                const unsigned long long z = kedge_mix(s);
                const float unit = __fmul_rn((float) (z >> 40), 5.9604644775390625e-8f);
                p[r * pitch + k] = __fadd_rn(-1.0f, __fmul_rn(2.0f, unit));
            }
        }
    }
}
