// ---- ops/catalog/src/elem.cuh: the element types of kedge's row-op kernels (put before each op's
// .cu file by `row_kernel_source!`, ops/catalog/src/rows.rs) ----
//
// Each kernel is a template on its element type T: it loads T, computes in float and stores
// T. f32 is `float`; f16 and bf16 are 16-bit storage types converted here (f16 through PTX's
// cvt, bf16 by its bits), so the kernels need neither cuda_fp16.h nor cuda_bf16.h: NVRTC has
// neither built in, and kedge runs where only libnvrtc is installed. Entries come in three
// twins named by the element type: `NAME` (float), `NAME_f16` (kedge_f16), `NAME_bf16`
// (kedge_bf16).

struct __align__(2) kedge_f16 { unsigned short bits; };
struct __align__(2) kedge_bf16 { unsigned short bits; };

__device__ __forceinline__ float kedge_float(const float x) { return x; }
__device__ __forceinline__ float kedge_float(const kedge_f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}
__device__ __forceinline__ float kedge_float(const kedge_bf16 x) {
    return __uint_as_float(((unsigned int) x.bits) << 16);
}

// float -> T, rounded to nearest even (NaN stays NaN; f16 overflows to infinity as IEEE says).
template <typename T> __device__ T kedge_elem(const float x);
template <> __device__ __forceinline__ float kedge_elem<float>(const float x) { return x; }
template <> __device__ __forceinline__ kedge_f16 kedge_elem<kedge_f16>(const float x) {
    kedge_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
    return h;
}
template <> __device__ __forceinline__ kedge_bf16 kedge_elem<kedge_bf16>(const float x) {
    unsigned int u = __float_as_uint(x);
    kedge_bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short) ((u >> 16) | 0x40u);
        return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = (unsigned short) (u >> 16);
    return b;
}

// A read the compiler may not drop or move (the planted calibration kernels' stray reads).
__device__ __forceinline__ float kedge_float_volatile(const float * p) { return *(volatile const float *) p; }
__device__ __forceinline__ float kedge_float_volatile(const kedge_f16 * p) {
    kedge_f16 h;
    h.bits = *(volatile const unsigned short *) p;
    return kedge_float(h);
}
__device__ __forceinline__ float kedge_float_volatile(const kedge_bf16 * p) {
    kedge_bf16 b;
    b.bits = *(volatile const unsigned short *) p;
    return kedge_float(b);
}

// ---- end of ops/catalog/src/elem.cuh; the op's own file follows ----
