// An example kedge plugin: rms_norm in CUDA C++, behind the C ABI of harness/include/kedge.h.
//
// Build (see README.md):
//   nvcc -O2 -arch=sm_90 -Xcompiler -fPIC -shared -I../../harness/include rmsnorm_plugin.cu -o libkedge_rmsnorm.so
// Test:
//   kedge sweep --op rms_norm --plugin ./libkedge_rmsnorm.so --impl plugin:example-rmsnorm
//
// What the plugin has to do, and nothing more: read the tensor descriptors (pointer, ne,
// byte strides nb), launch on the stream it is given, check the launch, and answer with a
// status and a message. kedge allocates, fills, poisons, synchronizes and compares.

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>

#include "kedge.h"

#define BLOCK 256

// Sum over the block; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float partial[BLOCK / 32];
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
        partial[warp] = v;
    }
    __syncthreads();
    v = lane < BLOCK / 32 ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    __syncthreads(); // `partial` is reused by the next row
    return v;
}

// One block per row; rows are numbered 0..nrows_total-1 over (ne1, ne2, ne3) and the grid
// strides over them, so any shape launches with a 1-D grid that fits every device limit.
// Offsets are 64-bit byte offsets from the descriptors' strides: padded views work.
__global__ void rms_norm_rows(const char *x, char *dst, long long ncols, long long ne1, long long ne2,
                              long long nrows_total, uint64_t xnb1, uint64_t xnb2, uint64_t xnb3,
                              uint64_t dnb1, uint64_t dnb2, uint64_t dnb3, float eps) {
    for (long long r = blockIdx.x; r < nrows_total; r += gridDim.x) {
        const long long i1 = r % ne1;
        const long long i2 = (r / ne1) % ne2;
        const long long i3 = r / (ne1 * ne2);
        const float *xr = (const float *)(x + i1 * xnb1 + i2 * xnb2 + i3 * xnb3);
        float *dr = (float *)(dst + i1 * dnb1 + i2 * dnb2 + i3 * dnb3);
        float s = 0.0f;
        for (long long c = threadIdx.x; c < ncols; c += BLOCK) {
            const float v = xr[c];
            s += v * v;
        }
        s = block_sum(s);
        const float scale = rsqrtf(s / (float)ncols + eps);
        for (long long c = threadIdx.x; c < ncols; c += BLOCK) {
            dr[c] = scale * xr[c];
        }
    }
}

static int rms_norm_entry(const kedge_tensor *inputs, int n_in, kedge_tensor *outputs, int n_out,
                          const void *params, void *cuda_stream, char *msg, size_t msg_len) {
    if (n_in != 1 || n_out != 1) {
        snprintf(msg, msg_len, "rms_norm takes 1 input and 1 output, got %d and %d", n_in, n_out);
        return KEDGE_ERROR;
    }
    const kedge_tensor *x = &inputs[0];
    const kedge_tensor *d = &outputs[0];
    if (x->dtype != KEDGE_DTYPE_F32 || d->dtype != KEDGE_DTYPE_F32) {
        snprintf(msg, msg_len, "only f32 (dtypes %d -> %d)", (int)x->dtype, (int)d->dtype);
        return KEDGE_UNSUPPORTED;
    }
    if (x->nb[0] != sizeof(float) || d->nb[0] != sizeof(float)) {
        snprintf(msg, msg_len, "rows must be contiguous (nb[0] = %llu, %llu)",
                 (unsigned long long)x->nb[0], (unsigned long long)d->nb[0]);
        return KEDGE_UNSUPPORTED;
    }
    const float eps = ((const kedge_params_rms_norm *)params)->eps;
    const long long nrows_total = x->ne[1] * x->ne[2] * x->ne[3];
    // A 1-D grid of at most 65535 blocks fits grid.x on every device; the kernel strides.
    const unsigned int grid = (unsigned int)(nrows_total < 65535 ? nrows_total : 65535);
    rms_norm_rows<<<grid, BLOCK, 0, (cudaStream_t)cuda_stream>>>(
        (const char *)x->data, (char *)d->data, x->ne[0], x->ne[1], x->ne[2], nrows_total, x->nb[1],
        x->nb[2], x->nb[3], d->nb[1], d->nb[2], d->nb[3], eps);
    // A refused launch (bad configuration, no kernel image for this GPU, a driver too old for
    // this toolkit) shows up here; a fault inside the kernel shows up at kedge's sync.
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        snprintf(msg, msg_len, "rms_norm_rows<<<%u, %d>>> failed: %s (%s)", grid, BLOCK,
                 cudaGetErrorName(err), cudaGetErrorString(err));
        return KEDGE_ERROR;
    }
    return KEDGE_OK;
}

static const kedge_op_entry OPS[] = {
    {"rms_norm", NULL, KEDGE_DTYPE_BIT(KEDGE_DTYPE_F32), rms_norm_entry},
};

static const kedge_plugin PLUGIN = {
    KEDGE_ABI_VERSION,
    "example-rmsnorm",
    "example plugin: rms_norm, one block per row, 1-D grid-stride over rows",
    sizeof(OPS) / sizeof(OPS[0]),
    OPS,
};

extern "C" KEDGE_EXPORT const kedge_plugin *kedge_plugin_info(void) { return &PLUGIN; }
