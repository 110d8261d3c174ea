// tri kernels (ggml TRI): keep the elements of each ne0 x ne1 matrix inside a triangle,
// zero the rest. Column i0, row i1:
//   LOWER: i0 < i1   LOWER_DIAG: i0 <= i1   UPPER: i0 > i1   UPPER_DIAG: i0 >= i1
// Each row is split at `split = i1 + add` (add 0 or 1): either the prefix [0, split) is kept
// and the rest zeroed (lower modes), or the prefix is zeroed and the rest kept (upper modes),
// as ggml's tri.cu templates it (`prefix_keep`, `add_to_split`).
//
// `tri_ggml`: ggml's launch, one block of 256 threads per row, grid (ne01, ne02, ne03): the
// matrix index ne[2] sits on grid.y and ne[3] on grid.z.
// `tri_clamped`: grid clamped, true extents passed, grid-stride loops over ne[2] and ne[3].
// The kernels are templates on the element type T (ops/catalog/src/elem.cuh), as upstream's tri.cu
// is (float, half, nv_bfloat16): kept elements are copied as T, the rest are T's zero; every
// f32 entry has `_f16` and `_bf16` twins with the same parameters.

template <typename T>
__device__ void tri_row(const T * src_row, T * dst_row, const long long ne00, const long long i1,
                        const int prefix_keep, const int add) {
    const long long split = min(i1 + add, ne00);
    for (long long i0 = threadIdx.x; i0 < ne00; i0 += blockDim.x) {
        const bool in_prefix = i0 < split;
        dst_row[i0] = in_prefix == (prefix_keep != 0) ? src_row[i0] : kedge_elem<T>(0.0f);
    }
}

template <typename T>
__device__ void tri_ggml_t(const T * src, T * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    const long long i1 = blockIdx.x;
    const long long i2 = blockIdx.y;
    const long long i3 = blockIdx.z;
    if (i3 >= ne03 || i2 >= ne02 || i1 >= ne01) {
        return;
    }
    const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
    tri_row(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00, i1, prefix_keep, add);
}

template <typename T>
__device__ void tri_clamped_t(const T * src, T * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    const long long i1 = blockIdx.x;
    for (long long i3 = blockIdx.z; i3 < ne03; i3 += gridDim.z) {
        for (long long i2 = blockIdx.y; i2 < ne02; i2 += gridDim.y) {
            const long long drow = ((i3*ne02 + i2)*ne01 + i1)*ne00;
            tri_row(src + i1*s01 + i2*s02 + i3*s03, dst + drow, ne00, i1, prefix_keep, add);
        }
    }
}

extern "C" __global__ void tri_ggml(const float * src, float * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_ggml_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}
extern "C" __global__ void tri_ggml_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_ggml_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}
extern "C" __global__ void tri_ggml_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_ggml_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}

extern "C" __global__ void tri_clamped(const float * src, float * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_clamped_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}
extern "C" __global__ void tri_clamped_f16(const kedge_f16 * src, kedge_f16 * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_clamped_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}
extern "C" __global__ void tri_clamped_bf16(const kedge_bf16 * src, kedge_bf16 * dst, const long long ne00, const long long ne01,
        const long long ne02, const long long ne03, const long long s01, const long long s02, const long long s03,
        const int prefix_keep, const int add) {
    tri_clamped_t(src, dst, ne00, ne01, ne02, ne03, s01, s02, s03, prefix_keep, add);
}
