/* kedge: a tiny C shim over the NVTX3 memory API (header-only) so Rust can annotate
 * sub-allocations of a scratch pool for compute-sanitizer memcheck.
 *
 * A pool is registered as an NVTX heap with usage NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
 * its sub-allocations are registered as regions. Under memcheck, an access to a part of the
 * pool that is not inside a registered region is reported, which is what catches a read past
 * a staging region that still lies inside the pool's slack. Without a tool attached (no
 * NVTX_INJECTION64_PATH) every call is a cheap no-op. */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "nvToolsExtMem.h"

static nvtxDomainHandle_t kedge_domain(void) {
    static nvtxDomainHandle_t d = NULL;
    if (d == NULL) {
        d = nvtxDomainCreateA("kedge");
    }
    return d;
}

/* Register [ptr, ptr + bytes) as a sub-allocator heap. Returns the heap handle (NULL when
 * no tool is attached, which the other calls accept). */
void * kedge_nvtx_pool_register(uint64_t ptr, uint64_t bytes) {
    nvtxMemVirtualRangeDesc_t range;
    range.ptr  = (void const *)(uintptr_t)ptr;
    range.size = (size_t)bytes;
    nvtxMemHeapDesc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.extCompatID          = NVTX_EXT_COMPATID_MEM;
    desc.structSize           = sizeof(desc);
    desc.usage                = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
    desc.type                 = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    desc.typeSpecificDescSize = sizeof(range);
    desc.typeSpecificDesc     = &range;
    return (void *)nvtxMemHeapRegister(kedge_domain(), &desc);
}

/* Register one region [ptr, ptr + bytes) inside `heap` and name it. */
void kedge_nvtx_region_register(void * heap, uint64_t ptr, uint64_t bytes, const char * name) {
    nvtxMemVirtualRangeDesc_t range;
    range.ptr  = (void const *)(uintptr_t)ptr;
    range.size = (size_t)bytes;
    nvtxMemRegionsRegisterBatch_t batch;
    memset(&batch, 0, sizeof(batch));
    batch.extCompatID            = NVTX_EXT_COMPATID_MEM;
    batch.structSize             = sizeof(batch);
    batch.regionType             = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.heap                   = (nvtxMemHeapHandle_t)heap;
    batch.regionCount            = 1;
    batch.regionDescElementSize  = sizeof(range);
    batch.regionDescElements     = &range;
    batch.regionHandleElementsOut = NULL;
    nvtxMemRegionsRegister(kedge_domain(), &batch);
    if (name != NULL) {
        nvtxMemRegionNameDesc_t nd;
        memset(&nd, 0, sizeof(nd));
        nd.regionRefType  = NVTX_MEM_REGION_REF_TYPE_POINTER;
        nd.nameType       = NVTX_MESSAGE_TYPE_ASCII;
        nd.region.pointer = (void const *)(uintptr_t)ptr;
        nd.name.ascii     = name;
        nvtxMemRegionsNameBatch_t nb;
        memset(&nb, 0, sizeof(nb));
        nb.extCompatID       = NVTX_EXT_COMPATID_MEM;
        nb.structSize        = sizeof(nb);
        nb.regionCount       = 1;
        nb.regionElementSize = sizeof(nd);
        nb.regionElements    = &nd;
        nvtxMemRegionsName(kedge_domain(), &nb);
    }
}

/* Drop every region of `heap` (the pool is reused by the next chunk / layer). */
void kedge_nvtx_pool_reset(void * heap) {
    nvtxMemHeapReset(kedge_domain(), (nvtxMemHeapHandle_t)heap);
}

/* Unregister the heap before its memory is freed. */
void kedge_nvtx_pool_unregister(void * heap) {
    nvtxMemHeapUnregister(kedge_domain(), (nvtxMemHeapHandle_t)heap);
}

/* 1 when a tool attached itself through NVTX_INJECTION64_PATH (informational). */
int kedge_nvtx_injection_configured(void) {
    const char * p = getenv("NVTX_INJECTION64_PATH");
    return p != NULL && p[0] != '\0';
}
