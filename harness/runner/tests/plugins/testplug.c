/*
 * A kedge plugin for the loader tests, in plain C with no CUDA: it never touches the
 * tensors' memory. Its rms_norm entry checks the descriptors kedge passes and answers by
 * eps, so each ABI path can be driven from Rust:
 *
 *   eps == 1  KEDGE_UNSUPPORTED with a reason
 *   eps == 2  KEDGE_ERROR with a message
 *   eps == 3  status 7 (not a kedge status) with a message
 *   eps == 4  KEDGE_ERROR, message filling the whole buffer with no NUL
 *   eps == 5  KEDGE_ERROR with an empty message
 *   otherwise KEDGE_OK if the descriptors are what kedge.h promises, else KEDGE_ERROR
 *             naming the first thing that is wrong
 *
 * Built several times with one of these defined, for the loader's error paths:
 *   BAD_VERSION      abi_version 99
 *   NO_INFO          no kedge_plugin_info symbol
 *   NULL_INFO        kedge_plugin_info returns NULL
 *   NULL_ENTRY       an op entry with a NULL function pointer
 *   UNKNOWN_OP       an op entry naming an op kedge does not have
 *   NULL_NAME        plugin name NULL
 *   BAD_UTF8_NAME    plugin name not UTF-8
 *   NO_DTYPES        an entry whose mask covers none of the op's dtypes
 *   DUPLICATE        two entries that would get the same impl name
 *   WILD_TABLE       the op table pointer points at unmapped memory (reading it faults)
 *   EXIT_ON_LOAD     an initializer that calls exit(0) when the library is loaded
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kedge.h"

static int check_desc(const kedge_tensor *t, const char *name, int64_t ne0, char *msg, size_t len) {
    if (t->dtype != KEDGE_DTYPE_F32) {
        snprintf(msg, len, "tensor %s: dtype %d, expected f32", name, (int)t->dtype);
        return 0;
    }
    if (t->name == NULL || strcmp(t->name, name) != 0) {
        snprintf(msg, len, "tensor name %s, expected %s", t->name ? t->name : "(null)", name);
        return 0;
    }
    if (t->ne[0] != ne0 || t->nb[0] != 4) {
        snprintf(msg, len, "tensor %s: ne0 %lld nb0 %llu", name, (long long)t->ne[0],
                 (unsigned long long)t->nb[0]);
        return 0;
    }
    return 1;
}

static int rms_norm_entry(const kedge_tensor *inputs, int n_in, kedge_tensor *outputs, int n_out,
                          const void *params, void *cuda_stream, char *msg, size_t msg_len) {
    const kedge_params_rms_norm *p = (const kedge_params_rms_norm *)params;
    (void)cuda_stream;
    if (p->eps == 1.0f) {
        snprintf(msg, msg_len, "testplug: eps %g is not supported by this plugin", p->eps);
        return KEDGE_UNSUPPORTED;
    }
    if (p->eps == 2.0f) {
        snprintf(msg, msg_len, "testplug: launch failed: invalid configuration argument");
        return KEDGE_ERROR;
    }
    if (p->eps == 3.0f) {
        snprintf(msg, msg_len, "testplug: odd status");
        return 7;
    }
    if (p->eps == 4.0f) {
        memset(msg, 'A', msg_len);
        return KEDGE_ERROR;
    }
    if (p->eps == 5.0f) {
        return KEDGE_ERROR;
    }
    if (n_in != 1 || n_out != 1) {
        snprintf(msg, msg_len, "testplug: n_in %d n_out %d, expected 1 and 1", n_in, n_out);
        return KEDGE_ERROR;
    }
    /* The shape the test passes: ne0 = 64 with a padded input row (nb1 = 4*(64+3)). */
    if (!check_desc(&inputs[0], "x", 64, msg, msg_len) || !check_desc(&outputs[0], "dst", 64, msg, msg_len)) {
        return KEDGE_ERROR;
    }
    if (inputs[0].nb[1] != 4 * 67 || outputs[0].nb[1] != 4 * 64) {
        snprintf(msg, msg_len, "testplug: nb1 %llu/%llu, expected 268/256",
                 (unsigned long long)inputs[0].nb[1], (unsigned long long)outputs[0].nb[1]);
        return KEDGE_ERROR;
    }
    if (inputs[0].data != (void *)0x1000 || outputs[0].data != (void *)0x2000) {
        snprintf(msg, msg_len, "testplug: data pointers %p/%p", inputs[0].data, outputs[0].data);
        return KEDGE_ERROR;
    }
    if (p->eps != 1e-6f) {
        snprintf(msg, msg_len, "testplug: eps %g, expected 1e-6", p->eps);
        return KEDGE_ERROR;
    }
    return KEDGE_OK;
}

#if defined(NULL_ENTRY)
#define ENTRY NULL
#else
#define ENTRY rms_norm_entry
#endif

#if defined(UNKNOWN_OP)
#define OP2 "no_such_op"
#else
#define OP2 "rms_norm"
#endif

#if defined(DUPLICATE)
#define VARIANT2 NULL
#else
#define VARIANT2 "alt"
#endif

#if defined(NO_DTYPES)
#define DTYPES2 KEDGE_DTYPE_BIT(KEDGE_DTYPE_I32)
#else
/* i32 is not an rms_norm dtype: kedge keeps f32 and f16 from this mask. */
#define DTYPES2 (KEDGE_DTYPE_BIT(KEDGE_DTYPE_F32) | KEDGE_DTYPE_BIT(KEDGE_DTYPE_F16) | KEDGE_DTYPE_BIT(KEDGE_DTYPE_I32))
#endif

static const kedge_op_entry OPS[] = {
    {"rms_norm", NULL, KEDGE_DTYPE_BIT(KEDGE_DTYPE_F32), rms_norm_entry},
    {OP2, VARIANT2, DTYPES2, ENTRY},
};

#if defined(BAD_VERSION)
#define VERSION 99
#else
#define VERSION KEDGE_ABI_VERSION
#endif

#if defined(NULL_NAME)
#define NAME NULL
#elif defined(BAD_UTF8_NAME)
#define NAME "test\xff\xfeplug"
#else
#define NAME "testplug"
#endif

#if defined(WILD_TABLE)
#define TABLE ((const kedge_op_entry *)(void *)0x10)
#else
#define TABLE OPS
#endif

static const kedge_plugin INFO = {VERSION, NAME, "loader test plugin (no CUDA)", 2, TABLE};

#if defined(WILD_TABLE)
/* OPS itself is unused then. */
const kedge_op_entry *testplug_ops_unused(void) { return OPS; }
#endif

#if defined(EXIT_ON_LOAD)
__attribute__((constructor)) static void testplug_exit_on_load(void) { exit(0); }
#endif

#if !defined(NO_INFO)
KEDGE_EXPORT const kedge_plugin *kedge_plugin_info(void) {
#if defined(NULL_INFO)
    (void)INFO;
    return NULL;
#else
    return &INFO;
#endif
}
#else
/* Something exported, so the library is valid and only the info symbol is missing. */
KEDGE_EXPORT int not_the_info_symbol(void) { return INFO.n_ops; }
#endif
