// add_id kernels (ggml ADD_ID, the MoE expert bias): dst[i, e, t] = a[i, e, t] + b[i, ids[e, t]]
// with a, dst: [n_embd, n_experts_used, n_tokens], b: [n_embd, n_experts], ids: i32
// [n_experts_used, n_tokens].
//
// `add_id_ggml` reproduces upstream's add-id.cu: `dim3 blocks(ne01, ne02)`, i.e.
// n_experts_used on grid.x and n_tokens on grid.y (capped at 65535), `min(ne00, 768)` threads,
// byte strides, no check of the id (an id out of range reads b out of bounds).
// `add_id_clamped` is the fix: n_tokens on grid.x (2^31-1), n_experts_used on grid.y, both
// clamped to the device's limits and walked with grid-stride loops; an id out of range is
// skipped (its output row keeps the engine's poison, so it shows as unwritten output) rather
// than read out of bounds.
// The kernels are templates on the element type T of a, b and dst (ops/catalog/src/elem.cuh; ids are
// i32): they load T, add in float and store T; byte strides and row sizes are in bytes of T.
// Every f32 entry has `_f16` and `_bf16` twins with the same parameters.

template <typename T>
__device__ void add_id_ggml_t(const T * src0, const T * src1, const int * src2, T * dst,
        const long long ne0, const long long ne1, const unsigned long long nb01, const unsigned long long nb02,
        const unsigned long long nb11, const unsigned long long nb21) {
    const long long i1 = blockIdx.x;
    const long long i2 = blockIdx.y;

    const int i11 = *(const int *) ((const char *) src2 + i1*sizeof(int) + i2*nb21);

    const unsigned long long nb1 = ne0*sizeof(T);
    const unsigned long long nb2 = ne1*nb1;

    T * dst_row        = (T *) ((char *) dst + i1*nb1 + i2*nb2);
    const T * src0_row = (const T *) ((const char *) src0 + i1*nb01 + i2*nb02);
    const T * src1_row = (const T *) ((const char *) src1 + i11*nb11);

    for (long long i0 = threadIdx.x; i0 < ne0; i0 += blockDim.x) {
        dst_row[i0] = kedge_elem<T>(kedge_float(src0_row[i0]) + kedge_float(src1_row[i0]));
    }
}

template <typename T>
__device__ void add_id_clamped_t(const T * src0, const T * src1, const int * src2, T * dst,
        const long long ne0, const long long n_used, const long long n_tokens, const long long n_experts,
        const unsigned long long nb01, const unsigned long long nb02, const unsigned long long nb11,
        const unsigned long long nb21) {
    const unsigned long long nb1 = ne0*sizeof(T);
    const unsigned long long nb2 = n_used*nb1;
    for (long long t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        for (long long e = blockIdx.y; e < n_used; e += gridDim.y) {
            const int id = *(const int *) ((const char *) src2 + e*sizeof(int) + t*nb21);
            if (id < 0 || id >= n_experts) {
                continue; // bad input: never read b out of bounds
            }
            T * dst_row        = (T *) ((char *) dst + e*nb1 + t*nb2);
            const T * src0_row = (const T *) ((const char *) src0 + e*nb01 + t*nb02);
            const T * src1_row = (const T *) ((const char *) src1 + (unsigned long long) id*nb11);
            for (long long i0 = threadIdx.x; i0 < ne0; i0 += blockDim.x) {
                dst_row[i0] = kedge_elem<T>(kedge_float(src0_row[i0]) + kedge_float(src1_row[i0]));
            }
        }
    }
}

extern "C" __global__ void add_id_ggml(const float * src0, const float * src1, const int * src2, float * dst,
        const long long ne0, const long long ne1, const unsigned long long nb01, const unsigned long long nb02,
        const unsigned long long nb11, const unsigned long long nb21) {
    add_id_ggml_t(src0, src1, src2, dst, ne0, ne1, nb01, nb02, nb11, nb21);
}
extern "C" __global__ void add_id_ggml_f16(const kedge_f16 * src0, const kedge_f16 * src1, const int * src2, kedge_f16 * dst,
        const long long ne0, const long long ne1, const unsigned long long nb01, const unsigned long long nb02,
        const unsigned long long nb11, const unsigned long long nb21) {
    add_id_ggml_t(src0, src1, src2, dst, ne0, ne1, nb01, nb02, nb11, nb21);
}
extern "C" __global__ void add_id_ggml_bf16(const kedge_bf16 * src0, const kedge_bf16 * src1, const int * src2, kedge_bf16 * dst,
        const long long ne0, const long long ne1, const unsigned long long nb01, const unsigned long long nb02,
        const unsigned long long nb11, const unsigned long long nb21) {
    add_id_ggml_t(src0, src1, src2, dst, ne0, ne1, nb01, nb02, nb11, nb21);
}

extern "C" __global__ void add_id_clamped(const float * src0, const float * src1, const int * src2, float * dst,
        const long long ne0, const long long n_used, const long long n_tokens, const long long n_experts,
        const unsigned long long nb01, const unsigned long long nb02, const unsigned long long nb11,
        const unsigned long long nb21) {
    add_id_clamped_t(src0, src1, src2, dst, ne0, n_used, n_tokens, n_experts, nb01, nb02, nb11, nb21);
}
extern "C" __global__ void add_id_clamped_f16(const kedge_f16 * src0, const kedge_f16 * src1, const int * src2, kedge_f16 * dst,
        const long long ne0, const long long n_used, const long long n_tokens, const long long n_experts,
        const unsigned long long nb01, const unsigned long long nb02, const unsigned long long nb11,
        const unsigned long long nb21) {
    add_id_clamped_t(src0, src1, src2, dst, ne0, n_used, n_tokens, n_experts, nb01, nb02, nb11, nb21);
}
extern "C" __global__ void add_id_clamped_bf16(const kedge_bf16 * src0, const kedge_bf16 * src1, const int * src2, kedge_bf16 * dst,
        const long long ne0, const long long n_used, const long long n_tokens, const long long n_experts,
        const unsigned long long nb01, const unsigned long long nb02, const unsigned long long nb11,
        const unsigned long long nb21) {
    add_id_clamped_t(src0, src1, src2, dst, ne0, n_used, n_tokens, n_experts, nb01, nb02, nb11, nb21);
}
