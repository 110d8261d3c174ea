// fp8_gemm staging kernels: the W4A8 prefill path of the incident (a plan cache that rounds M
// up to a bucket, so the GEMM reads past the staging buffer). The GEMM itself is cuBLASLt's; these
// kernels fill the one staging buffer it reads:
//
//   [ W region: N x K e4m3, upcast from FP4 e2m1 x UE8M0 block scales ][ pad to 256 ]
//   [ A region: staged_rows x K e4m3, BF16 activations / (amax / 448)               ]
//
// The A region is last, so a GEMM that reads more rows than were staged runs off the end of
// the buffer. No CUDA headers: bf16 and e4m3 are handled with bit operations and the
// sm_89+ conversion instruction `cvt.rn.satfinite.e4m3x2.f32` (round to nearest even,
// saturating to +-448, NaN stays NaN). The CPU mirror is ops/catalog/src/fp8_gemm/quant.rs.

__device__ __forceinline__ float bf16_bits_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

__device__ __forceinline__ unsigned char f32_to_e4m3_rn_satfinite(float x) {
    unsigned short r;
    // Two values per instruction; the low byte takes the second source operand.
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
    return (unsigned char)(r & 0xFF);
}

// UE8M0: 2^(e - 127); 0xFF is NaN; e = 0 is the f32 subnormal 2^-127.
__device__ __forceinline__ float ue8m0_to_f32(unsigned char e) {
    if (e == 0) return __uint_as_float(0x00400000u);
    if (e == 255) return __uint_as_float(0x7FC00000u);
    return __uint_as_float(((unsigned int)e) << 23);
}

__device__ __forceinline__ float e2m1_to_f32(unsigned int code) {
    float mag;
    switch (code & 7u) {
        case 0: mag = 0.0f; break;
        case 1: mag = 0.5f; break;
        case 2: mag = 1.0f; break;
        case 3: mag = 1.5f; break;
        case 4: mag = 2.0f; break;
        case 5: mag = 3.0f; break;
        case 6: mag = 4.0f; break;
        default: mag = 6.0f; break;
    }
    return (code & 8u) ? -mag : mag;
}

// W upcast: one thread per element of the N x K weight. Packed FP4 rows of `row_bytes`
// bytes (element 2i in the low nibble of byte i), one UE8M0 scale per `block` elements.
extern "C" __global__ void fp8_gemm_upcast_w(const unsigned char * w, const unsigned char * w_scale,
                                             unsigned char * w8, const long long n_rows, const long long k,
                                             const long long row_bytes, const long long nblocks,
                                             const int block) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * k) {
        return;
    }
    const long long n  = i / k;
    const long long kk = i - n * k;
    const unsigned char byte = w[n * row_bytes + kk / 2];
    const unsigned int code  = (kk & 1) ? (unsigned int)(byte >> 4) : (unsigned int)(byte & 0x0F);
    const float s = ue8m0_to_f32(w_scale[n * nblocks + kk / block]);
    w8[i] = f32_to_e4m3_rn_satfinite(e2m1_to_f32(code) * s);
}

// Activation scale of one chunk: amax(|a|) / 448 over rows x k BF16 values, one block of
// 1024 threads (deterministic: no atomics). Writes scales[0] = activation scale (1 for an
// all-zero chunk) and scales[64] = 1, the per-tensor weight scale (block scales are folded
// into the e4m3 weights by the upcast). The weight scale sits 256 bytes in so that each scale
// pointer cuBLASLt gets is as aligned as a cudaMalloc'd one (lt.rs, W_SCALE_OFFSET).
extern "C" __global__ void fp8_gemm_act_scale(const unsigned short * a, const long long n, float * scales) {
    __shared__ float s_max[32];
    float m = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        m = fmaxf(m, fabsf(bf16_bits_to_f32(a[i])));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off, 32));
    }
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
        s_max[warp] = m;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)(blockDim.x / 32) ? s_max[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off, 32));
        }
        if (lane == 0) {
            const float s = m / 448.0f;
            scales[0] = (s > 0.0f && s < 3.4e38f) ? s : 1.0f;
            scales[64] = 1.0f; // W_SCALE_OFFSET (256 bytes) in: see lt.rs
        }
    }
}

// Activation quantization: q = e4m3(a / scale) for the chunk's `rows` rows into the A region,
// `a_offset` bytes into the staging buffer; rows in [rows, staged_rows) are zeroed (the
// `bucketed` fix stages whole buckets, so the padding the GEMM reads is defined memory).
extern "C" __global__ void fp8_gemm_quantize_a(const unsigned short * a, const float * scales,
                                               unsigned char * staging, const long long a_offset,
                                               const long long rows, const long long staged_rows,
                                               const long long k) {
    unsigned char * q = staging + a_offset;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= staged_rows * k) {
        return;
    }
    if (i / k >= rows) {
        q[i] = 0;
        return;
    }
    q[i] = f32_to_e4m3_rn_satfinite(bf16_bits_to_f32(a[i]) / scales[0]);
}

// ---- kedge's own SIMT FP8 GEMM (param gemm=simt): a calibration path, not what an engine ships.
// Reads exactly what the cuBLASLt plan reads (plan_rows rows of the activation region, N rows
// of the weight region) but through plain global loads, which compute-sanitizer memcheck
// instruments, so a read past the staging (or past an NVTX sub-allocation) is a precise
// record. D[row][col] = sa * sw * sum_k e4m3(a8[row][k]) * e4m3(w8[col][k]), f32 accumulation
// in k order (every product of two e4m3 values is exact in f32), rounded to BF16 (RNE).
__device__ __forceinline__ float e4m3_to_f32(unsigned char b) {
    const float sign = (b & 0x80) ? -1.0f : 1.0f;
    const int e = (b >> 3) & 0xF;
    const int m = b & 0x7;
    if (e == 0xF && m == 0x7) {
        return __int_as_float(0x7fc00000);
    }
    if (e == 0) {
        return sign * ldexpf((float)m, -9);
    }
    return sign * ldexpf((float)(8 + m), e - 10);
}

__device__ __forceinline__ unsigned short f32_to_bf16_rn(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fc0;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// grid = (ceil(n / blockDim.x), plan_rows), one thread per output element. `w8` is the
// staging buffer (W region first); the A region starts `a_offset` bytes into it.
extern "C" __global__ void fp8_gemm_simt(const unsigned char * w8, const long long a_offset,
                                         const float * scales, unsigned short * d,
                                         const long long n, const long long k) {
    const unsigned char * a8 = w8 + a_offset;
    const long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = blockIdx.y;
    if (col >= n) {
        return;
    }
    const unsigned char * a = a8 + row * k;
    const unsigned char * w = w8 + col * k;
    float acc = 0.0f;
    for (long long i = 0; i < k; i++) {
        acc += e4m3_to_f32(a[i]) * e4m3_to_f32(w[i]);
    }
    d[row * n + col] = f32_to_bf16_rn(acc * scales[0] * scales[64]);
}
