// Standalone cuBLASLt FP8 probe: the same GEMM kedge's fp8_gemm issues (e4m3 x e4m3 -> bf16,
// TN, FP32 compute, scalar f32 scale pointers), in variants, each step's status printed.
// Build: nvcc -O2 -arch=sm_90 scripts/fp8-lt-probe.cu -lcublasLt -o fp8-lt-probe
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

static int g_scale_off = 1;      // A scale's offset from B's, in floats
static bool g_separate = false;  // each scale its own cudaMalloc (as NVIDIA's FP8 sample)
static int g_which = 3;          // bit 0: set A scale pointer, bit 1: set B scale pointer
static int run(const char* name, int m, int n, int k, bool scales, bool fast_accum_attr, cudaDataType_t dtype, bool separate_c) {
  cublasLtHandle_t h; cublasLtCreate(&h);
  void *a, *b, *c, *d, *ws; float* sc;
  size_t wsz = 32u << 20;
  CK(cudaMalloc(&a, (size_t)m * k)); CK(cudaMalloc(&b, (size_t)n * k));
  CK(cudaMalloc(&c, (size_t)m * n * 4)); CK(cudaMalloc(&d, (size_t)m * n * 4)); CK(cudaMalloc(&ws, wsz));
  CK(cudaMalloc(&sc, 1024)); float one[65]; for (int i = 0; i < 65; i++) one[i] = 1.f; CK(cudaMemcpy(sc, one, sizeof one, cudaMemcpyHostToDevice));
  CK(cudaMemset(a, 0x38, (size_t)m * k)); CK(cudaMemset(b, 0x38, (size_t)n * k));
  cublasLtMatmulDesc_t desc; cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (fast_accum_attr) { int8_t fa = 0; cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa); }
  if (scales) {
    float* sa = sc + g_scale_off;
    if (g_separate) { CK(cudaMalloc(&sa, 16)); CK(cudaMemcpy(sa, one, 4, cudaMemcpyHostToDevice)); }
    const void* pa = sa; const void* pb = sc;
    if (g_which & 1) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa);
    if (g_which & 2) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb);
  }
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&lc, dtype, m, n, m);
  cublasLtMatrixLayoutCreate(&ld, dtype, m, n, m);
  cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
  uint64_t w = wsz; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w);
  cublasLtMatmulHeuristicResult_t r = {}; int cnt = 0;
  s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &r, &cnt);
  printf("%-40s heuristic=%d count=%d ws=%zu", name, (int)s, cnt, r.workspaceSize);
  if (s != CUBLAS_STATUS_SUCCESS || cnt == 0) { printf("\n"); return 0; }
  float alpha = 1.f, beta = 0.f;
  s = cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, separate_c ? c : d, lc, d, ld, &r.algo, ws, r.workspaceSize, 0);
  cudaError_t e = cudaDeviceSynchronize();
  printf(" matmul=%d sync=%s\n", (int)s, cudaGetErrorString(e));
  return 0;
}

int main() {
  printf("cublasLt version %zu\n", cublasLtGetVersion());
  run("kedge's config (bf16 D==C, scales, fast_accum=0)", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  run("no FAST_ACCUM attribute", 3072, 512, 3072, true, false, CUDA_R_16BF, false);
  run("no scale pointers", 3072, 512, 3072, false, true, CUDA_R_16BF, false);
  run("separate C buffer", 3072, 512, 3072, true, true, CUDA_R_16BF, true);
  run("fp16 D", 3072, 512, 3072, true, true, CUDA_R_16F, false);
  run("fp32 D", 3072, 512, 3072, true, true, CUDA_R_32F, false);
  run("small 256x16x3072", 256, 16, 3072, true, true, CUDA_R_16BF, false);
  g_scale_off = 4;
  run("A scale pointer 16 bytes in", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  g_scale_off = 8;
  run("A scale pointer 32 bytes in", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  g_scale_off = 64;
  run("A scale pointer 256 bytes in (kedge)", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  run("A 256 bytes in, 300 rows (incident M)", 3072, 300, 3072, true, true, CUDA_R_16BF, false);
  g_separate = true;
  run("scales in separate cudaMallocs", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  g_separate = false; g_which = 2;
  run("B scale pointer only (aligned)", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  g_which = 1; g_scale_off = 0;
  run("A scale pointer only (aligned)", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  g_which = 1; g_scale_off = 1;
  run("A scale pointer only (4 bytes in)", 3072, 512, 3072, true, true, CUDA_R_16BF, false);
  return 0;
}
