/* opc_frozen.h -- weights that never change between calls, and their packed copies made once.
 *
 * A conv packs its weights into the micro-kernel's panel layout on every call: for a small image's
 * layers (ResNet's 256- and 512-channel ones at 4x4) packing costs as much as the product, where
 * onnxruntime packs an initializer once, at session creation. opc's entry points cannot know that
 * an argument stays the same (a caller may change an array in place between calls), so the caller
 * says so: opc.load_onnx, whose weights are its own arrays that nobody else sees, registers their
 * byte ranges through the module's opc_frozen(p, bytes, 1) when it binds them and drops them
 * (opc_frozen(p, bytes, 0)) when the binding is collected. A kernel whose weight lies inside a
 * registered range asks opc_rt_frozen_packed for its packed copy: made by `pack` on the first call,
 * kept until the range is dropped. Anything else (an unregistered pointer, a full table, no
 * memory) gets NULL and packs per call as before.
 *
 * One table per extension (weak and hidden, as opc_threads.h's thread count), guarded by a spin
 * lock: lookups are a few compares per conv call (none while nothing is registered), and packing
 * under the lock happens once. C only. */
#ifndef OPC_FROZEN_H
#define OPC_FROZEN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define OPC_FROZEN_MAX 512 /* ranges, and packed copies: a network's weights fit many times over */
#define OPC_FROZEN_KEY 4

typedef struct {
    const char *lo, *hi; /* [lo, hi) */
    int64_t refs;        /* bindings that registered it */
} opc_frozen_range;

typedef struct {
    const void *w; /* the weight as the kernel saw it */
    int64_t key[OPC_FROZEN_KEY]; /* the packing: its layout, and the sizes the layout depends on */
    float *packed;
} opc_frozen_copy;

typedef struct {
    char lock;
    int nranges, ncopies;
    opc_frozen_range range[OPC_FROZEN_MAX];
    opc_frozen_copy copy[OPC_FROZEN_MAX];
} opc_frozen_table;

__attribute__((weak, visibility("hidden"))) opc_frozen_table opc_rt_frozen;

static inline void opc_frozen_lock(void) {
    while (__atomic_test_and_set(&opc_rt_frozen.lock, __ATOMIC_ACQUIRE)) {
    }
}
static inline void opc_frozen_unlock(void) { __atomic_clear(&opc_rt_frozen.lock, __ATOMIC_RELEASE); }

/* Room for a packed copy: 64-byte aligned (the GEMM's micro-kernel loads its B panels aligned);
 * one of 2 MB or more on 2 MB boundaries, with huge pages asked for, so that the first call, which
 * writes every packed copy, takes a page fault per 2 MB, not per 4 KB (ResNet-18's 45 MB of packed
 * weights: 27 -> 16 ms). */
static inline float *opc_frozen_alloc(size_t bytes) {
    const size_t huge = (size_t)1 << 21;
    if (bytes < huge) return (float *)aligned_alloc(64, (bytes + 63) / 64 * 64);
    const size_t size = (bytes + huge - 1) / huge * huge;
    float *p = (float *)aligned_alloc(huge, size);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, size, MADV_HUGEPAGE); /* advice only: without it, 4 KB pages as before */
#endif
    return p;
}

/* Whether some range is registered: read without the lock (atomically, as the writers under it
 * store it), so that a module nobody froze anything in pays no lock per conv or GEMM call. */
static inline int opc_frozen_any(void) { return __atomic_load_n(&opc_rt_frozen.nranges, __ATOMIC_ACQUIRE) > 0; }

/* Whether [lo, hi) lies inside one registered range; the lock held. */
static inline int opc_frozen_covered(const char *lo, const char *hi) {
    const opc_frozen_table *t = &opc_rt_frozen;
    for (int i = 0; i < t->nranges; i++)
        if (t->range[i].lo <= lo && hi <= t->range[i].hi) return 1;
    return 0;
}

/* Register (add) or drop one reference to the bytes [p, p + bytes); dropping the last frees the
 * packed copies of weights inside them. */
static inline void opc_rt_frozen_set(const void *p, int64_t bytes, int add) {
    opc_frozen_table *t = &opc_rt_frozen;
    const char *lo = (const char *)p, *hi = lo + bytes;
    opc_frozen_lock();
    int i = 0;
    while (i < t->nranges && !(t->range[i].lo == lo && t->range[i].hi == hi)) i++;
    if (add) {
        if (i < t->nranges)
            t->range[i].refs++;
        else if (t->nranges < OPC_FROZEN_MAX) {
            t->range[t->nranges] = (opc_frozen_range){lo, hi, 1};
            __atomic_store_n(&t->nranges, t->nranges + 1, __ATOMIC_RELEASE);
        }
    } else if (i < t->nranges && --t->range[i].refs == 0) {
        t->range[i] = t->range[t->nranges - 1];
        __atomic_store_n(&t->nranges, t->nranges - 1, __ATOMIC_RELEASE);
        for (int j = 0; j < t->ncopies;) {
            const char *w = (const char *)t->copy[j].w;
            if (w >= lo && w < hi) {
                free(t->copy[j].packed);
                t->copy[j] = t->copy[--t->ncopies];
            } else {
                j++;
            }
        }
    }
    opc_frozen_unlock();
}

/* Whether the bytes [w, w + bytes) lie inside one registered range (a kernel that reads its weights
 * in place may then leave the layer to one that packs them once). */
static inline int opc_rt_frozen_inside(const void *w, int64_t bytes) {
    if (!opc_frozen_any()) return 0;
    opc_frozen_lock();
    const int inside = opc_frozen_covered((const char *)w, (const char *)w + bytes);
    opc_frozen_unlock();
    return inside;
}

/* The packed copy (floats) of the weight w (its `bytes` bytes) under packing `key`, made by
 * pack(ctx, dst) the first time; NULL where w is not inside one registered range, or no copy can
 * be kept. */
static inline const float *opc_rt_frozen_packed(const void *w, int64_t bytes, const int64_t *key, int64_t floats,
                                                void (*pack)(const void *ctx, float *dst), const void *ctx) {
    if (!opc_frozen_any()) return NULL;
    opc_frozen_table *t = &opc_rt_frozen;
    const float *found = NULL;
    opc_frozen_lock();
    for (int j = 0; j < t->ncopies && !found; j++)
        if (t->copy[j].w == w && !memcmp(t->copy[j].key, key, sizeof t->copy[j].key)) found = t->copy[j].packed;
    if (!found && t->ncopies < OPC_FROZEN_MAX && opc_frozen_covered((const char *)w, (const char *)w + bytes)) {
        float *dst = opc_frozen_alloc(sizeof(float) * (size_t)(floats > 0 ? floats : 1));
        if (dst) {
            pack(ctx, dst);
            opc_frozen_copy *c = &t->copy[t->ncopies++];
            c->w = w;
            memcpy(c->key, key, sizeof c->key);
            c->packed = dst;
            found = dst;
        }
    }
    opc_frozen_unlock();
    return found;
}

#endif /* OPC_FROZEN_H */
