// ggml_pool_2d's output height past 2^24 rows: no memory is allocated, nothing is computed.
#include <stdio.h>
#include "ggml.h"
int main(void) {
    struct ggml_init_params ip = { 16 * 1024 * 1024, NULL, /*no_alloc*/ true };
    struct ggml_context * ctx = ggml_init(ip);
    const int64_t hs[] = { 16777216, 16777217, 16777218, 71582788 };
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        // k = 3, s = 1, p = 1: the output has as many rows as the input.
        struct ggml_tensor * a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 10, hs[i], 3, 1);
        struct ggml_tensor * r = ggml_pool_2d(ctx, a, GGML_OP_POOL_AVG, 3, 3, 1, 1, 1, 1);
        printf("input H %lld -> output H %lld (expected %lld)%s\n", (long long) hs[i],
               (long long) r->ne[1], (long long) hs[i], r->ne[1] == hs[i] ? "" : "  WRONG");
        bad += r->ne[1] != hs[i];
    }
    ggml_free(ctx);
    return bad ? 1 : 0;
}
