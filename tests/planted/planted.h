/* The planted-bug catalogue's helpers: loads and stores of f32, f16, bf16 and
 * f64 through double (opc's conversions, round to nearest even), and
 * planted("NAME"): whether the environment variable OPC_PLANTED names this
 * bug. Each kernel file is the correct kernel with its bugs beside it, one
 * `if (planted("..."))` each, so the catalogue builds every file once and
 * tests/test_planted.py runs each bug by setting OPC_PLANTED; without it the
 * file is the bug's correct twin. */
#ifndef PLANTED_H
#define PLANTED_H

#include <math.h>
#include <stdlib.h>

#include "opc_kernel.h"

static inline int planted(const char *name) {
    const char *bug = getenv("OPC_PLANTED");
    return bug != NULL && strcmp(bug, name) == 0;
}

static inline double load(const opc_tensor *t, int64_t i) {
    switch (t->dtype) {
    case OPC_DTYPE_F16: return opc_f16_to_f32(((const uint16_t *)t->data)[i]);
    case OPC_DTYPE_BF16: return opc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case OPC_DTYPE_F64: return ((const double *)t->data)[i];
    default: return ((const float *)t->data)[i];
    }
}

/* Stores round once: an f16 or bf16 result computed in f32 goes f32 -> f16 (to nearest even). */
static inline void store(const opc_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case OPC_DTYPE_F16: ((uint16_t *)t->data)[i] = opc_f32_to_f16((float)v); break;
    case OPC_DTYPE_BF16: ((uint16_t *)t->data)[i] = opc_f32_to_bf16((float)v); break;
    case OPC_DTYPE_F64: ((double *)t->data)[i] = v; break;
    default: ((float *)t->data)[i] = (float)v; break;
    }
}

/* f32 -> f16 by dropping the low mantissa bits (the classic hand-written conversion). */
static inline uint16_t f16_truncate(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    if (((u >> 23) & 0xff) == 0xff) return sign | 0x7c00u | ((u & 0x7fffffu) ? 0x200u : 0u);
    if (exp >= 31) return sign | 0x7c00u;
    if (exp <= 0) return opc_f32_to_f16(f);  /* subnormals as opc does */
    return sign | (uint16_t)(exp << 10) | (uint16_t)((u & 0x7fffffu) >> 13);
}

/* A row of a tensor along `axis`: `outer` rows of `len` elements `stride` apart. */
typedef struct { int64_t outer, len, inner; } rows;

static inline rows rows_along(const opc_tensor *t, int64_t axis) {
    rows r = {1, 1, 1};
    if (axis < 0) axis += t->rank;
    for (int32_t d = 0; d < t->rank; d++) {
        if (d < axis) r.outer *= t->shape[d];
        else if (d == axis) r.len = t->shape[d];
        else r.inner *= t->shape[d];
    }
    return r;
}

#endif
