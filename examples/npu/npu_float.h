/* Loads and stores of the NPU kernels' float types: f32 as is, f16 and bf16
 * as raw 16-bit storage converted through f32 (round to nearest even). */
#ifndef NPU_FLOAT_H
#define NPU_FLOAT_H

#include "opc_kernel.h"

static inline float npu_load(const opc_tensor *t, int64_t i) {
    switch (t->dtype) {
    case OPC_DTYPE_F16: return opc_f16_to_f32(((const uint16_t *)t->data)[i]);
    case OPC_DTYPE_BF16: return opc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
    }
}

static inline void npu_store(const opc_tensor *t, int64_t i, float v) {
    switch (t->dtype) {
    case OPC_DTYPE_F16: ((uint16_t *)t->data)[i] = opc_f32_to_f16(v); break;
    case OPC_DTYPE_BF16: ((uint16_t *)t->data)[i] = opc_f32_to_bf16(v); break;
    default: ((float *)t->data)[i] = v; break;
    }
}

static inline int npu_is_float(opc_dtype t) {
    return t == OPC_DTYPE_F32 || t == OPC_DTYPE_F16 || t == OPC_DTYPE_BF16;
}

#endif
