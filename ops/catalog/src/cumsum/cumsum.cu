// cumsum kernels (ggml CUMSUM): inclusive prefix sum along ne0, one row at a time.
//
// ggml's cumsum.cu picks a strategy by row length (contiguous f32, CUB available):
//   - a device-wide scan per row (host loop over rows, `cub::DeviceScan::InclusiveSum`) when
//     `(nrows == 1 && ne00 > 1024) || ne00 / nrows > 4096`;
//   - else, for ne00 >= 1024, a block scan of 256 threads over 256-element chunks with a carry
//     (`cumsum_cub_kernel`, CUB's BlockScan);
//   - else a block of min(pad(ne00, 32), 256) threads, 4 elements per thread in registers, warp
//     scans and a scan of warp sums in dynamic shared memory (`cumsum_kernel`).
// The row kernels launch grid (ne01, ne02, ne03): ne[2] on grid.y and ne[3] on grid.z.
//
// NVRTC has no CUB here, so the CUB pieces are stood in for: the chunked block scan is written
// out (same block size, same chunk, same carry), and the device-wide scan is a reduce-then-scan
// over a 1-D grid of 1024-element tiles (three launches per row) instead of CUB's single-pass
// decoupled look-back. The launch geometry class is the same: a 1-D grid over tiles.
//
// `cumsum_clamped_*`: the same bodies with the grid clamped and rows walked with grid-stride
// loops over ne[2] and ne[3]; offsets in 64 bits.
// `cumsum_int32_index`: the block scan with every flat element offset computed in `int`, as
// many kernels do. It is right below 2^31 elements and wraps past it.
//
// The kernels are templates on the element type T of src and dst (ops/catalog/src/elem.cuh): they
// load T, sum in float and store T, and every f32 entry has `_f16` and `_bf16` twins with the
// same parameters. The device-wide scan's tile totals stay f32 for every T; its last launch
// adds a tile's offset to the tile's stored prefix, so a 16-bit dst is rounded twice there
// (within the tolerance: ops/catalog/src/cumsum/mod.rs).

#define WARP_SIZE 32
#define BLOCK_CARRY 256
#define TILE 1024

__device__ __forceinline__ float warp_prefix_inclusive_sum(float x) {
    const int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int offset = 1; offset < WARP_SIZE; offset <<= 1) {
        const float y = __shfl_up_sync(0xffffffff, x, offset, WARP_SIZE);
        if (lane >= offset) {
            x += y;
        }
    }
    return x;
}

// ggml's short-row kernel body: each thread scans 4 consecutive elements in registers, then a
// warp scan of the thread totals and a scan of the warp totals in shared memory; chunks of
// 4*blockDim elements carry into the next. smem: blockDim + warps + 2 floats.
template <typename T>
__device__ void cumsum_small_row(const T * src_row, T * dst_row, const long long ne00, float * smem) {
    const int tid             = threadIdx.x;
    const int lane            = tid % WARP_SIZE;
    const int warp            = tid / WARP_SIZE;
    const int warps_per_block = blockDim.x / WARP_SIZE;
    float * s_warp_sums   = smem + blockDim.x;
    float * s_carry       = smem + blockDim.x + warps_per_block;
    float * s_chunk_total = s_carry + 1;

    if (tid == 0) {
        *s_carry = 0.0f;
    }
    __syncthreads();

    const int num_unroll = 4;
    float temp[4];
    for (long long i = 0; i < ne00; i += num_unroll*blockDim.x) {
        const long long idx = i + (long long) tid*num_unroll;
        temp[0] = idx < ne00 ? kedge_float(src_row[idx]) : 0.0f;
#pragma unroll
        for (int j = 1; j < num_unroll; j++) {
            temp[j] = temp[j - 1] + (idx + j < ne00 ? kedge_float(src_row[idx + j]) : 0.0f);
        }
        float val = idx < ne00 ? temp[num_unroll - 1] : 0.0f;
        val = warp_prefix_inclusive_sum(val);
        if (lane == WARP_SIZE - 1) {
            s_warp_sums[warp] = val;
        }
        __syncthreads();
        if (warp == 0) {
            const float w   = tid < warps_per_block ? s_warp_sums[tid] : 0.0f;
            const float inc = warp_prefix_inclusive_sum(w);
            if (tid < warps_per_block) {
                s_warp_sums[tid] = inc - w;
            }
            if (tid == warps_per_block - 1) {
                *s_chunk_total = inc;
            }
        }
        __syncthreads();
        const float offset = val + s_warp_sums[warp] + *s_carry - temp[num_unroll - 1];
#pragma unroll
        for (int j = 0; j < num_unroll; j++) {
            if (idx + j < ne00) {
                dst_row[idx + j] = kedge_elem<T>(temp[j] + offset);
            }
        }
        __syncthreads();
        if (tid == 0) {
            *s_carry += *s_chunk_total;
        }
    }
    __syncthreads(); // the carry and warp sums are reused by the block's next row
}

// The chunked block scan of 256 threads with a carry (stands in for cumsum_cub_kernel).
// `idx_t` is the type of element offsets inside the row. Returns the row total to every thread.
template <typename idx_t, typename T>
__device__ float cumsum_block_row(const T * src_row, T * dst_row, const idx_t ne00) {
    __shared__ float s_warp[BLOCK_CARRY / WARP_SIZE];
    __shared__ float s_carry;
    const int tid  = threadIdx.x;
    const int lane = tid % WARP_SIZE;
    const int warp = tid / WARP_SIZE;
    if (tid == 0) {
        s_carry = 0.0f;
    }
    __syncthreads();
    for (idx_t start = 0; start < ne00; start += BLOCK_CARRY) {
        const idx_t idx = start + tid;
        const float x   = idx < ne00 ? kedge_float(src_row[idx]) : 0.0f;
        const float inc = warp_prefix_inclusive_sum(x);
        if (lane == WARP_SIZE - 1) {
            s_warp[warp] = inc;
        }
        __syncthreads();
        if (warp == 0) {
            const float w  = lane < BLOCK_CARRY / WARP_SIZE ? s_warp[lane] : 0.0f;
            const float ws = warp_prefix_inclusive_sum(w);
            __syncwarp();
            if (lane < BLOCK_CARRY / WARP_SIZE) {
                s_warp[lane] = ws;
            }
        }
        __syncthreads();
        const float carry = s_carry;
        const float total = s_warp[BLOCK_CARRY / WARP_SIZE - 1];
        if (idx < ne00) {
            dst_row[idx] = kedge_elem<T>(inc + (warp > 0 ? s_warp[warp - 1] : 0.0f) + carry);
        }
        __syncthreads();
        if (tid == 0) {
            s_carry = carry + total;
        }
        __syncthreads();
    }
    const float row_total = s_carry;
    __syncthreads(); // s_carry is reset by the block's next row
    return row_total;
}

// ---- ggml's launches: grid (ne01, ne02, ne03) ----

template <typename T>
__device__ void cumsum_ggml_small_t(const T * src, T * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    extern __shared__ float smem_cumsum[];
    const long long i1 = blockIdx.x;
    const long long i2 = blockIdx.y;
    const long long i3 = blockIdx.z;
    if (i1 >= ne01 || i2 >= ne02 || i3 >= ne03) {
        return;
    }
    const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
    cumsum_small_row(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00, smem_cumsum);
}

template <typename T>
__device__ void cumsum_ggml_block_carry_t(const T * src, T * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    const long long i1 = blockIdx.x;
    const long long i2 = blockIdx.y;
    const long long i3 = blockIdx.z;
    if (i1 >= ne01 || i2 >= ne02 || i3 >= ne03) {
        return;
    }
    const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
    cumsum_block_row<long long>(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00);
}

extern "C" __global__ void cumsum_ggml_small(const float * src, float * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_ggml_small_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_ggml_small_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}

extern "C" __global__ void cumsum_ggml_block_carry(const float * src, float * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_ggml_block_carry_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_ggml_block_carry_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_ggml_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}

// ---- device-wide scan of one row (stands in for cub::DeviceScan::InclusiveSum) ----

// Tile t of the row: scanned on its own into dst; its total into tile_sums[t].
template <typename T>
__device__ void cumsum_row_tiles_t(const T * src_row, T * dst_row, float * tile_sums, const long long ne00) {
    const long long start = (long long) blockIdx.x*TILE;
    const long long n     = min((long long) TILE, ne00 - start);
    const float total = cumsum_block_row<long long>(src_row + start, dst_row + start, n);
    if (threadIdx.x == 0) {
        tile_sums[blockIdx.x] = total;
    }
}

extern "C" __global__ void cumsum_row_tiles(const float * src_row, float * dst_row, float * tile_sums,
        const long long ne00) {
    cumsum_row_tiles_t(src_row, dst_row, tile_sums, ne00);
}
extern "C" __global__ void cumsum_row_tiles_f16(const kedge_f16 * src_row, kedge_f16 * dst_row, float * tile_sums,
        const long long ne00) {
    cumsum_row_tiles_t(src_row, dst_row, tile_sums, ne00);
}
extern "C" __global__ void cumsum_row_tiles_bf16(const kedge_bf16 * src_row, kedge_bf16 * dst_row, float * tile_sums,
        const long long ne00) {
    cumsum_row_tiles_t(src_row, dst_row, tile_sums, ne00);
}

// One block: inclusive scan of the tile totals, in place.
extern "C" __global__ void cumsum_tile_sums(float * tile_sums, const long long ntiles) {
    cumsum_block_row<long long>(tile_sums, tile_sums, ntiles);
}

// Tile blockIdx.x + 1 gets the sum of every tile before it.
template <typename T>
__device__ void cumsum_add_tile_offsets_t(T * dst_row, const float * tile_sums, const long long ne00) {
    const long long t     = (long long) blockIdx.x + 1;
    const float     add   = tile_sums[t - 1];
    const long long start = t*TILE;
    const long long end   = min(start + TILE, ne00);
    for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        dst_row[i] = kedge_elem<T>(kedge_float(dst_row[i]) + add);
    }
}

extern "C" __global__ void cumsum_add_tile_offsets(float * dst_row, const float * tile_sums, const long long ne00) {
    cumsum_add_tile_offsets_t(dst_row, tile_sums, ne00);
}
extern "C" __global__ void cumsum_add_tile_offsets_f16(kedge_f16 * dst_row, const float * tile_sums, const long long ne00) {
    cumsum_add_tile_offsets_t(dst_row, tile_sums, ne00);
}
extern "C" __global__ void cumsum_add_tile_offsets_bf16(kedge_bf16 * dst_row, const float * tile_sums, const long long ne00) {
    cumsum_add_tile_offsets_t(dst_row, tile_sums, ne00);
}

// ---- the fix: grid clamped, grid-stride loops over ne[2] and ne[3] ----

template <typename T>
__device__ void cumsum_clamped_small_t(const T * src, T * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    extern __shared__ float smem_cumsum[];
    const long long i1 = blockIdx.x;
    for (long long i3 = blockIdx.z; i3 < ne03; i3 += gridDim.z) {
        for (long long i2 = blockIdx.y; i2 < ne02; i2 += gridDim.y) {
            const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
            cumsum_small_row(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00, smem_cumsum);
        }
    }
}

template <typename T>
__device__ void cumsum_clamped_block_carry_t(const T * src, T * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    const long long i1 = blockIdx.x;
    for (long long i3 = blockIdx.z; i3 < ne03; i3 += gridDim.z) {
        for (long long i2 = blockIdx.y; i2 < ne02; i2 += gridDim.y) {
            const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
            cumsum_block_row<long long>(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00);
        }
    }
}

extern "C" __global__ void cumsum_clamped_small(const float * src, float * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_clamped_small_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_clamped_small_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_small_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}

extern "C" __global__ void cumsum_clamped_block_carry(const float * src, float * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_clamped_block_carry_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_clamped_block_carry_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00,
        const long long ne01, const long long ne02, const long long ne03,
        const long long s01, const long long s02, const long long s03) {
    cumsum_clamped_block_carry_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}

// ---- 32-bit index arithmetic: the bug class the >2^31-element boundary exists for ----
// Same grid and loops as cumsum_clamped_block_carry, but the row's flat offsets and the
// element index inside the row are `int`: past 2^31 elements the offset wraps negative and the
// row is read from and written to the wrong place (or faults).
template <typename T>
__device__ void cumsum_int32_index_t(const T * src, T * dst, const int ne00,
        const int ne01, const int ne02, const int ne03, const int s01, const int s02, const int s03) {
    const int i1 = blockIdx.x;
    for (int i3 = blockIdx.z; i3 < ne03; i3 += gridDim.z) {
        for (int i2 = blockIdx.y; i2 < ne02; i2 += gridDim.y) {
            const int soff = i1*s01 + i2*s02 + i3*s03;
            const int doff = ((i3*ne02 + i2)*ne01 + i1)*ne00;
            cumsum_block_row<int>(src + soff, dst + doff, ne00);
        }
    }
}

extern "C" __global__ void cumsum_int32_index(const float * src, float * dst, const int ne00,
        const int ne01, const int ne02, const int ne03, const int s01, const int s02, const int s03) {
    cumsum_int32_index_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_int32_index_f16(const kedge_f16 * src, kedge_f16 * dst, const int ne00,
        const int ne01, const int ne02, const int ne03, const int s01, const int s02, const int s03) {
    cumsum_int32_index_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
extern "C" __global__ void cumsum_int32_index_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const int ne00,
        const int ne01, const int ne02, const int ne03, const int s01, const int s02, const int s03) {
    cumsum_int32_index_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03);
}
