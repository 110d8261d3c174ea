// zoo_rows: CALIBRATION kernels for `kedge selftest`. The op is deliberately trivial,
// dst[row][col] = x[row][col] * 2 + row (row = flat row index over ne1..ne3), so that each
// planted bug below is the only thing wrong with its kernel.
//
// One block of ZOO_BLOCK threads per row; columns are walked with a block-stride loop.
// Every planted kernel computes the right values except where its bug is meant to change
// them (unwritten tail, wrong at one size). Reads that must not change any value are
// `volatile` and compared with an impossible sentinel, so the compiler keeps the access and
// the output stays right: only the detector named for the bug can see it.

#define ZOO_BLOCK 128
// Never produced by x*2+row for x in [-1, 1): keeps a discarded read alive.
#define ZOO_SENTINEL 3.0e-38f

__device__ __forceinline__ void zoo_row(const float * x, float * dst, const int ncols, const long long row) {
    for (int col = threadIdx.x; col < ncols; col += blockDim.x) {
        dst[row*ncols + col] = x[row*ncols + col]*2.0f + (float) row;
    }
}

// The fixed impl: nothing planted.
extern "C" __global__ void zoo_rows_clean(const float * x, float * dst, const int ncols, const long long nrows) {
    zoo_row(x, dst, ncols, blockIdx.x);
}

// PLANTED: in the last block only, thread 0 reads one element past its row's end. The last
// block's row is the tensor's last row, so the read is one f32 past the end of x.
// Seen by: a guard page after x (alloc guard), memcheck (exact allocations + padding).
extern "C" __global__ void zoo_rows_read_past_row_end_last_block(const float * x, float * dst, const int ncols,
                                                                 const long long nrows) {
    const long long row = blockIdx.x;
    zoo_row(x, dst, ncols, row);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        const float past = *(volatile const float *) (x + row*ncols + ncols);
        if (past == ZOO_SENTINEL) {
            dst[row*ncols] = past;
        }
    }
}

// PLANTED: block 0, thread 0 reads x[-1].
// Seen by: a guard page before x (alloc guard-front), memcheck.
extern "C" __global__ void zoo_rows_read_before_start(const float * x, float * dst, const int ncols,
                                                      const long long nrows) {
    zoo_row(x, dst, ncols, blockIdx.x);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const float before = *(volatile const float *) (x - 1);
        if (before == ZOO_SENTINEL) {
            dst[0] = before;
        }
    }
}

// PLANTED: every block reads one element of a device scratch buffer that nothing ever
// wrote (kedge allocates it with cuMemAlloc and never fills it).
// Seen by: initcheck (uninitialized __global__ memory read). initcheck tracks global memory
// only; an uninitialized *shared* memory read has no compute-sanitizer tool that names it.
extern "C" __global__ void zoo_rows_uninit_global_read(const float * x, float * dst, const int ncols,
                                                       const long long nrows, const float * scratch) {
    zoo_row(x, dst, ncols, blockIdx.x);
    if (threadIdx.x == 0) {
        const float junk = *(volatile const float *) (scratch + blockIdx.x);
        if (junk == ZOO_SENTINEL) {
            dst[(long long) blockIdx.x*ncols] = junk;
        }
    }
}

// PLANTED: a shared-memory exchange with the __syncthreads() missing. Each thread writes its
// slot and then reads the slot of a thread one warp away, with no barrier between the write
// and the read (a read-after-write hazard across warps). The value read is discarded.
// Seen by: racecheck.
extern "C" __global__ void zoo_rows_missing_syncthreads(const float * x, float * dst, const int ncols,
                                                        const long long nrows) {
    __shared__ float exchange[ZOO_BLOCK];
    volatile float * s = exchange;
    const long long row = blockIdx.x;
    const int tid = threadIdx.x;
    s[tid] = tid < ncols ? x[row*ncols + tid] : 1.0f;
    // __syncthreads() belongs here.
    const float other = s[(tid + 32) % ZOO_BLOCK];
    if (other == ZOO_SENTINEL) {
        dst[row*ncols] = other;
    }
    zoo_row(x, dst, ncols, row);
}

// PLANTED: the last element of the whole output is never written.
// Seen by: the poisoned output (detector poison, verdict unwritten-output).
extern "C" __global__ void zoo_rows_unwritten_tail(const float * x, float * dst, const int ncols,
                                                   const long long nrows) {
    const long long row = blockIdx.x;
    for (int col = threadIdx.x; col < ncols; col += blockDim.x) {
        if (row == nrows - 1 && col == ncols - 1) {
            continue; // the planted bug: the tail is skipped
        }
        dst[row*ncols + col] = x[row*ncols + col]*2.0f + (float) row;
    }
}

// PLANTED: wrong only when ncols == 1000: the row index is added twice to the last column.
// Every other size is right. Seen by: the reference comparison.
extern "C" __global__ void zoo_rows_wrong_at_one_size(const float * x, float * dst, const int ncols,
                                                      const long long nrows) {
    const long long row = blockIdx.x;
    for (int col = threadIdx.x; col < ncols; col += blockDim.x) {
        float v = x[row*ncols + col]*2.0f + (float) row;
        if (ncols == 1000 && col == ncols - 1) {
            v += (float) row + 1.0f;
        }
        dst[row*ncols + col] = v;
    }
}

// PLANTED: the last block writes one f32 past the end of dst (all values are right).
// Seen by: canaries (alloc canary), memcheck (exact allocations + padding).
extern "C" __global__ void zoo_rows_write_past_end(const float * x, float * dst, const int ncols,
                                                   const long long nrows) {
    const long long row = blockIdx.x;
    zoo_row(x, dst, ncols, row);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        dst[nrows*ncols] = 1.0f;
    }
}
