// Causal prefill attention kernels, f32 or bf16 in and out (scores and accumulation in f32;
// `_bf16` entries). q, out: ne = [head_dim, L, n_head, 1], so element (d, i, h) is at
// (h*L + i)*D + d; k, v: ne = [head_dim, L, n_kv_head, 1] (GQA: query head h reads kv head
// h / group, group = n_head / n_kv_head). Row i attends to keys j <= i with weights
// softmax_j(scale * q_i . k_j), scale = 1/sqrt(D).
//
// `sdpa_fused_causal`: flash-style, one block per (query row, head), online softmax over the
// keys, no score buffer. Like MLX's fused causal SDPA it is only built for head_dim 64, 80 and
// 128 (the host refuses every other head_dim before launching).
// `sdpa_scores` + `sdpa_softmax_pv`: the unfused path. The first writes a block of the score
// matrix S = [n_head, rows, L] (masked keys get -inf) into a scratch buffer, the second turns
// each row of S into probabilities in place and multiplies by V. The unfused fallback runs
// them once over all L query rows (S is [n_head, L, L]: quadratic in L); the chunked fix runs
// them once per block of q_chunk rows, the same two launches repeated with the block's row
// pointer stepped (`q_block` = q at the block's first query row `row0`, `out_block` = out at
// it, so the causal mask is offset per block). Every block has the same grid; rows of the
// last block at or past L return at once. Every score and every reduction depends only on
// (h, i) and the keys, never on the block, so both give bit-identical results.

#define SDPA_FUSED_THREADS 128
#define SDPA_FUSED_WARPS (SDPA_FUSED_THREADS / 32)
// Largest head_dim the fused kernel holds in registers (4 per lane).
#define SDPA_FUSED_MAX_D 128
#define SDPA_FUSED_PER_LANE (SDPA_FUSED_MAX_D / 32)
#define SDPA_UNFUSED_THREADS 256
// -inf without <cmath> (NVRTC compiles these files with no headers).
#define SDPA_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float sdpa_ld(const float * p, long long i) { return p[i]; }
__device__ __forceinline__ float sdpa_ld(const unsigned short * p, long long i) {
    return __uint_as_float(((unsigned int)p[i]) << 16);
}
__device__ __forceinline__ void sdpa_st(float * p, long long i, float x) { p[i] = x; }
// f32 -> bf16, round to nearest even (NaN stays NaN).
__device__ __forceinline__ void sdpa_st(unsigned short * p, long long i, float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p[i] = 0x7fc0;
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    p[i] = (unsigned short)(u >> 16);
}

__device__ __forceinline__ float sdpa_warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    }
    return x;
}

__device__ __forceinline__ float sdpa_warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, 32));
    }
    return x;
}

// Block-wide reductions for SDPA_UNFUSED_THREADS threads; every thread gets the result.
// `s` holds one float per warp; the leading __syncthreads lets callers reuse it back to back.
__device__ float sdpa_block_sum(float x, float * s) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    x = sdpa_warp_sum(x);
    __syncthreads();
    if (lane == 0) {
        s[warp] = x;
    }
    __syncthreads();
    x = lane < SDPA_UNFUSED_THREADS / 32 ? s[lane] : 0.0f;
    return sdpa_warp_sum(x);
}

__device__ float sdpa_block_max(float x, float * s) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    x = sdpa_warp_max(x);
    __syncthreads();
    if (lane == 0) {
        s[warp] = x;
    }
    __syncthreads();
    x = lane < SDPA_UNFUSED_THREADS / 32 ? s[lane] : SDPA_NEG_INF;
    return sdpa_warp_max(x);
}

// grid (L, n_head), block SDPA_FUSED_THREADS. Each warp walks keys j = warp, warp + 4, ...
// <= i with its own online softmax (max m, sum l, unnormalized output acc); lanes split the
// head_dim (d = lane + 32 t). The four warps' states are merged at the end.
template <typename T>
__device__ void sdpa_fused_causal_t(const T * q, const T * k, const T * v, T * out,
                                    const int D, const long long L, const float scale, const int group) {
    const long long i = blockIdx.x;
    const long long h = blockIdx.y;
    const long long hk = h / group;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    const long long qrow = (h*L + i)*D;
    float qr[SDPA_FUSED_PER_LANE];
    float acc[SDPA_FUSED_PER_LANE];
#pragma unroll
    for (int t = 0; t < SDPA_FUSED_PER_LANE; t++) {
        const int d = lane + 32*t;
        qr[t] = d < D ? sdpa_ld(q, qrow + d) : 0.0f;
        acc[t] = 0.0f;
    }
    float m = SDPA_NEG_INF;
    float l = 0.0f;
    for (long long j = warp; j <= i; j += SDPA_FUSED_WARPS) {
        const long long krow = (hk*L + j)*D;
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < SDPA_FUSED_PER_LANE; t++) {
            const int d = lane + 32*t;
            if (d < D) {
                dot += qr[t]*sdpa_ld(k, krow + d);
            }
        }
        const float s = sdpa_warp_sum(dot)*scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new); // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l*corr + p;
#pragma unroll
        for (int t = 0; t < SDPA_FUSED_PER_LANE; t++) {
            const int d = lane + 32*t;
            if (d < D) {
                acc[t] = acc[t]*corr + p*sdpa_ld(v, krow + d);
            }
        }
        m = m_new;
    }

    __shared__ float s_m[SDPA_FUSED_WARPS];
    __shared__ float s_l[SDPA_FUSED_WARPS];
    __shared__ float s_acc[SDPA_FUSED_WARPS][SDPA_FUSED_MAX_D];
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < SDPA_FUSED_PER_LANE; t++) {
        const int d = lane + 32*t;
        if (d < D) {
            s_acc[warp][d] = acc[t];
        }
    }
    __syncthreads();

    // Key 0 always goes to warp 0, so the merged max is finite; a warp that saw no key
    // (i < warp) has m = -inf, l = 0 and weight exp(-inf) = 0.
    float m_all = SDPA_NEG_INF;
    for (int w = 0; w < SDPA_FUSED_WARPS; w++) {
        m_all = fmaxf(m_all, s_m[w]);
    }
    float l_all = 0.0f;
    for (int w = 0; w < SDPA_FUSED_WARPS; w++) {
        l_all += s_l[w]*expf(s_m[w] - m_all);
    }
    const long long orow = (h*L + i)*D;
    for (int d = threadIdx.x; d < D; d += SDPA_FUSED_THREADS) {
        float o = 0.0f;
        for (int w = 0; w < SDPA_FUSED_WARPS; w++) {
            o += s_acc[w][d]*expf(s_m[w] - m_all);
        }
        sdpa_st(out, orow + d, o / l_all);
    }
}

extern "C" __global__ void sdpa_fused_causal(const float * q, const float * k, const float * v, float * out,
                                             const int D, const long long L, const float scale, const int group) {
    sdpa_fused_causal_t(q, k, v, out, D, L, scale, group);
}
extern "C" __global__ void sdpa_fused_causal_bf16(const unsigned short * q, const unsigned short * k,
                                                  const unsigned short * v, unsigned short * out,
                                                  const int D, const long long L, const float scale, const int group) {
    sdpa_fused_causal_t(q, k, v, out, D, L, scale, group);
}

// grid (rows, n_head), block SDPA_UNFUSED_THREADS, dynamic shared memory D floats (the query
// row). `q_block` points at query row row0 of head 0 (q + row0*D). Block (r, h) fills row r of
// head h's score block: S[(h*rows + r)*L + j] for all L keys, scale * q_{row0 + r} . k_j where
// j <= row0 + r and -inf (the causal mask) elsewhere.
template <typename T>
__device__ void sdpa_scores_t(const T * q, const T * q_block, const T * k, float * S, const int D,
                              const long long L, const long long rows, const float scale, const int group) {
    extern __shared__ float s_q[];
    const long long row0 = (q_block - q) / D;
    const long long r = blockIdx.x;
    const long long h = blockIdx.y;
    const long long hk = h / group;
    const long long i = row0 + r;
    if (i >= L) {
        return; // the last block's rows past L (the whole block returns: no barrier is skipped)
    }
    const long long qrow = (h*L + i)*D;
    for (int d = threadIdx.x; d < D; d += SDPA_UNFUSED_THREADS) {
        s_q[d] = sdpa_ld(q, qrow + d);
    }
    __syncthreads();
    float * srow = S + (h*rows + r)*L;
    for (long long j = threadIdx.x; j < L; j += SDPA_UNFUSED_THREADS) {
        if (j > i) {
            srow[j] = SDPA_NEG_INF;
            continue;
        }
        const long long krow = (hk*L + j)*D;
        float dot = 0.0f;
        for (int d = 0; d < D; d++) {
            dot += s_q[d]*sdpa_ld(k, krow + d);
        }
        srow[j] = dot*scale;
    }
}

extern "C" __global__ void sdpa_scores(const float * q, const float * q_block, const float * k, float * S,
                                       const int D, const long long L, const long long rows,
                                       const float scale, const int group) {
    sdpa_scores_t(q, q_block, k, S, D, L, rows, scale, group);
}
extern "C" __global__ void sdpa_scores_bf16(const unsigned short * q, const unsigned short * q_block,
                                            const unsigned short * k, float * S, const int D,
                                            const long long L, const long long rows, const float scale,
                                            const int group) {
    sdpa_scores_t(q, q_block, k, S, D, L, rows, scale, group);
}

// grid (rows, n_head), block SDPA_UNFUSED_THREADS. `out_block` points at output row row0 of
// head 0 (out + row0*D). Block (r, h) turns its row of S into exp(s - max) in place over the
// causal prefix j <= i (the masked tail is -inf and would add exact zeros), then writes
// out_i = sum_j p_j v_j / sum_j p_j.
template <typename T>
__device__ void sdpa_softmax_pv_t(float * S, const T * v, T * out, const T * out_block, const int D,
                                  const long long L, const long long rows, const int group) {
    __shared__ float s_red[SDPA_UNFUSED_THREADS / 32];
    const long long row0 = (out_block - out) / D;
    const long long r = blockIdx.x;
    const long long h = blockIdx.y;
    const long long hk = h / group;
    const long long i = row0 + r;
    if (i >= L) {
        return; // the last block's rows past L (the whole block returns: no barrier is skipped)
    }
    const long long nkeys = i + 1;
    float * srow = S + (h*rows + r)*L;

    float mx = SDPA_NEG_INF;
    for (long long j = threadIdx.x; j < nkeys; j += SDPA_UNFUSED_THREADS) {
        mx = fmaxf(mx, srow[j]);
    }
    mx = sdpa_block_max(mx, s_red);

    float sum = 0.0f;
    for (long long j = threadIdx.x; j < nkeys; j += SDPA_UNFUSED_THREADS) {
        const float p = expf(srow[j] - mx);
        srow[j] = p;
        sum += p;
    }
    sum = sdpa_block_sum(sum, s_red);
    // The probabilities written above are read by other threads of the block below.
    __syncthreads();

    const long long orow = (h*L + i)*D;
    for (int d = threadIdx.x; d < D; d += SDPA_UNFUSED_THREADS) {
        float acc = 0.0f;
        for (long long j = 0; j < nkeys; j++) {
            acc += srow[j]*sdpa_ld(v, (hk*L + j)*D + d);
        }
        sdpa_st(out, orow + d, acc / sum);
    }
}

extern "C" __global__ void sdpa_softmax_pv(float * S, const float * v, float * out, const float * out_block,
                                           const int D, const long long L, const long long rows,
                                           const int group) {
    sdpa_softmax_pv_t(S, v, out, out_block, D, L, rows, group);
}
extern "C" __global__ void sdpa_softmax_pv_bf16(float * S, const unsigned short * v, unsigned short * out,
                                                const unsigned short * out_block, const int D,
                                                const long long L, const long long rows, const int group) {
    sdpa_softmax_pv_t(S, v, out, out_block, D, L, rows, group);
}
