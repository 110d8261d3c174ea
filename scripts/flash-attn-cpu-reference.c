// ggml's CPU flash_attn_ext (the reference kedge and test-backend-ops judge a GPU's result
// against) measured against a double-precision one, by thread count and with the CPU
// backend's reference paths (`use_ref`, what test-backend-ops sets on its CPU backend).
// One query, KV keys, NH heads, head size 128, f16 K and V, f32 Q: test_flash_attn_ext's
// (128, 128, NH, {1,1}, KV, 1, mask=false) case. Prints the NMSE of each.
//
//   cc -O2 scripts/flash-attn-cpu-reference.c -I GGML/include -L GGML/lib -lggml
//      -lggml-base -lggml-cpu -lm -Wl,-rpath,GGML/lib -o fa-ref     (one line)
//   ./fa-ref [KV] [NH]                   (default 131072 keys, 32 heads)
//
// With one query and 512 keys or more, ggml's CPU backend splits the keys over its threads
// (ops.cpp, use_split_kv_path) and accumulates each share's V rows in f16 (VKQ16): its error
// shrinks with the thread count. use_ref takes one share whatever the threads.
#include "ggml.h"
#include "ggml-cpu.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t st = 88172645463325252ull;
static float uni(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (float)((st >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

int main(int argc, char **argv) {
    const int64_t D = 128, KV = argc > 1 ? atoll(argv[1]) : 131072, NH = argc > 2 ? atoll(argv[2]) : 32;
    const size_t mem = (size_t)(2 * D * KV * NH * 2 + D * NH * 4 * 4) + (256u << 20);
    struct ggml_init_params ip = { mem, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) { fprintf(stderr, "ggml_init failed\n"); return 1; }
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, 1, NH, 1);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, KV, NH, 1);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, D, KV, NH, 1);
    float *qf = q->data; ggml_fp16_t *kf = k->data, *vf = v->data;
    for (int64_t i = 0; i < D * NH; i++) qf[i] = uni();
    for (int64_t i = 0; i < D * KV * NH; i++) kf[i] = ggml_fp32_to_fp16(uni());
    for (int64_t i = 0; i < D * KV * NH; i++) vf[i] = ggml_fp32_to_fp16(uni());
    const float scale = 1.0f / sqrtf((float)D);
    // The reference, in double, from the same f16 K/V and f32 Q.
    double *ref = calloc(D * NH, sizeof(double)), *s = malloc(KV * sizeof(double));
    for (int64_t h = 0; h < NH; h++) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < KV; j++) {
            double d = 0;
            for (int64_t c = 0; c < D; c++) d += (double)qf[h * D + c] * ggml_fp16_to_fp32(kf[(h * KV + j) * D + c]);
            s[j] = d * scale; if (s[j] > m) m = s[j];
        }
        for (int64_t j = 0; j < KV; j++) { s[j] = exp(s[j] - m); sum += s[j]; }
        for (int64_t j = 0; j < KV; j++)
            for (int64_t c = 0; c < D; c++) ref[h * D + c] += s[j] / sum * ggml_fp16_to_fp32(vf[(h * KV + j) * D + c]);
    }
    struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    int threads[] = {1, 2, 4, 8, 16, 32, 64};
    for (int use_ref = 0; use_ref < 2; use_ref++) {
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            if (use_ref && threads[t] != 1 && threads[t] != 16) continue;
            struct ggml_cplan plan = ggml_graph_plan(gf, threads[t], NULL);
            void *work = plan.work_size ? malloc(plan.work_size) : NULL;
            if (plan.work_size && !work) { fprintf(stderr, "no memory for the work buffer\n"); return 1; }
            plan.work_data = work;
            plan.use_ref = use_ref;
            if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); return 1; }
            free(work);
            const float *o = out->data; double e = 0, r = 0;
            for (int64_t i = 0; i < D * NH; i++) { double x = o[i] - ref[i]; e += x * x; r += ref[i] * ref[i]; }
            printf("kv=%lld nh=%lld threads=%2d use_ref=%d nmse=%.3e\n", (long long)KV, (long long)NH, threads[t], use_ref, e / r);
            fflush(stdout);
        }
    }
    return 0;
}
