/* opc_kernel.h -- the C interface of a device's own kernels.
 *
 * A device file may bring its own implementation of an op:
 *
 *     [external.fused_gemm_epilogue]
 *     source = "npu_fused_gemm_epilogue.c"    # relative to the .toml
 *     symbol = "npu_fused_gemm_epilogue"
 *     dtypes = ["f32", "f16", "bf16"]         # element type of the op's first operand
 *     activation = ["none"]                   # attribute values it supports
 *
 * opc compiles the source (with this header on the include path) into every
 * module that uses it, and wherever the op runs with a matching dtype and
 * attributes it calls
 *
 *     int npu_fused_gemm_epilogue(const opc_kernel_call *call);
 *
 * once per op instance, from the thread that called the compiled function.
 *
 * Tensors.  call->inputs are the op's operands in the order of its MLIR form,
 * call->outputs its results (fused_gemm_epilogue: inputs x, y, bias; outputs
 * out, plus reserve_space when the activation is relu or gelu). Every tensor
 * is dense, row-major and contiguous; inputs are read-only; outputs never
 * alias an input and arrive uninitialised, so the kernel writes every element.
 * Shapes are static: a kernel sees the shapes of the instance it runs.
 *   f16, bf16   raw 16-bit storage (uint16_t); convert with opc_f16_to_f32,
 *               opc_f32_to_f16, opc_bf16_to_f32, opc_f32_to_bf16 (round to
 *               nearest even, like opc's own code; from opc_runtime.h)
 *   bool (i1)   one byte holding 0 or 1;  i8/ui8/i16/i32/i64: <stdint.h> types
 *
 * Attributes.  Every property of the op, by name (absent ones take the op's
 * default, which opc passes too): opc_attr_bool(call, "trans_x", 0),
 * opc_attr_string(call, "activation", "none"), opc_attr_int, opc_attr_float,
 * opc_attr_dtype (cast's target type), opc_attr_ints (axes, perm).
 *
 * Errors.  Return 0 on success. On failure return opc_kernel_fail(call, fmt,
 * ...): the compiled function stops, frees its buffers and raises
 * RuntimeError("SYMBOL: <your message>") in Python. A kernel must not exit,
 * abort or print.
 *
 * Threads.  Modules are built with -O3 -fopenmp: a kernel may use OpenMP.
 */
#ifndef OPC_KERNEL_H
#define OPC_KERNEL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "opc_runtime.h"

#define OPC_KERNEL_MAX_RANK 8
#define OPC_KERNEL_MESSAGE_SIZE 512

/* Element types, in the order of SPEC.md's type list. */
typedef enum {
    OPC_DTYPE_BOOL = 0, OPC_DTYPE_I8, OPC_DTYPE_U8, OPC_DTYPE_I16, OPC_DTYPE_I32, OPC_DTYPE_I64,
    OPC_DTYPE_F16, OPC_DTYPE_BF16, OPC_DTYPE_F32, OPC_DTYPE_F64,
    /* low precision, one byte an element (opc_lowp.h): float8, float4, int4/uint4, int2/uint2 */
    OPC_DTYPE_F8E4M3FN, OPC_DTYPE_F8E4M3FNUZ, OPC_DTYPE_F8E5M2, OPC_DTYPE_F8E5M2FNUZ, OPC_DTYPE_F8E8M0FNU,
    OPC_DTYPE_F4E2M1FN, OPC_DTYPE_I4, OPC_DTYPE_U4, OPC_DTYPE_I2, OPC_DTYPE_U2,
    OPC_DTYPE_F6E2M3FN, OPC_DTYPE_F6E3M2FN
} opc_dtype;

typedef struct {
    void *data;                           /* const for inputs */
    opc_dtype dtype;
    int32_t rank;                         /* 0..OPC_KERNEL_MAX_RANK */
    int64_t shape[OPC_KERNEL_MAX_RANK];   /* the first `rank` entries */
} opc_tensor;

typedef enum {
    OPC_ATTR_BOOL = 0,  /* i: 0 or 1 */
    OPC_ATTR_INT,       /* i */
    OPC_ATTR_FLOAT,     /* f */
    OPC_ATTR_STRING,    /* s */
    OPC_ATTR_DTYPE,     /* i: an opc_dtype */
    OPC_ATTR_INTS       /* ints[0..count) */
} opc_attr_kind;

typedef struct {
    const char *name;
    opc_attr_kind kind;
    int64_t i;
    double f;
    const char *s;
    const int64_t *ints;
    int32_t count;
} opc_attr;

typedef struct {
    const char *op;                       /* "fused_gemm_epilogue" */
    int32_t num_inputs, num_outputs, num_attrs;
    const opc_tensor *inputs;
    const opc_tensor *outputs;
    const opc_attr *attrs;
    char *message;                        /* OPC_KERNEL_MESSAGE_SIZE bytes, for opc_kernel_fail */
} opc_kernel_call;

typedef int (*opc_kernel_fn)(const opc_kernel_call *call);

static inline int64_t opc_numel(const opc_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

static inline const char *opc_dtype_name(opc_dtype t) {
    static const char *const names[] = {"i1", "i8", "ui8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static inline const opc_attr *opc_find_attr(const opc_kernel_call *call, const char *name) {
    for (int32_t i = 0; i < call->num_attrs; i++)
        if (strcmp(call->attrs[i].name, name) == 0) return &call->attrs[i];
    return NULL;
}

static inline int opc_attr_bool(const opc_kernel_call *call, const char *name, int fallback) {
    const opc_attr *a = opc_find_attr(call, name);
    return a && a->kind == OPC_ATTR_BOOL ? (int)a->i : fallback;
}

static inline int64_t opc_attr_int(const opc_kernel_call *call, const char *name, int64_t fallback) {
    const opc_attr *a = opc_find_attr(call, name);
    return a && a->kind == OPC_ATTR_INT ? a->i : fallback;
}

static inline double opc_attr_float(const opc_kernel_call *call, const char *name, double fallback) {
    const opc_attr *a = opc_find_attr(call, name);
    return a && a->kind == OPC_ATTR_FLOAT ? a->f : fallback;
}

static inline const char *opc_attr_string(const opc_kernel_call *call, const char *name, const char *fallback) {
    const opc_attr *a = opc_find_attr(call, name);
    return a && a->kind == OPC_ATTR_STRING ? a->s : fallback;
}

static inline opc_dtype opc_attr_dtype(const opc_kernel_call *call, const char *name, opc_dtype fallback) {
    const opc_attr *a = opc_find_attr(call, name);
    return a && a->kind == OPC_ATTR_DTYPE ? (opc_dtype)a->i : fallback;
}

/* The attribute's integers and their count (0 and NULL when absent). */
static inline const int64_t *opc_attr_ints(const opc_kernel_call *call, const char *name, int32_t *count) {
    const opc_attr *a = opc_find_attr(call, name);
    int ok = a && a->kind == OPC_ATTR_INTS;
    *count = ok ? a->count : 0;
    return ok ? a->ints : NULL;
}

/* Record an error message (printf format) and return the failure status. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int opc_kernel_fail(const opc_kernel_call *call, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(call->message, OPC_KERNEL_MESSAGE_SIZE, fmt, args);
    va_end(args);
    return 1;
}

#endif /* OPC_KERNEL_H */
