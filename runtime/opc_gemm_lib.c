/* The GEMM entry points, compiled once per toolchain (see opc_gemm_api.h).
 * Hidden visibility keeps each extension's copy its own. */
#include "opc_runtime.h"
#include "opc_gemm.h"
#include "opc_gemm_api.h"

#define OPC_GEMM_DEFINE(SUFFIX, T)                                                           \
    __attribute__((visibility("hidden"))) OPC_GEMM_PROTO(SUFFIX, T) {                        \
        opc_gemm_##SUFFIX(batch, M, N, K, A, a_batch_stride, trans_a, B, b_batch_stride,     \
                          trans_b, bias, act, out, reserve);                                 \
    }

OPC_GEMM_DEFINE(f32, float)
OPC_GEMM_DEFINE(f64, double)
OPC_GEMM_DEFINE(f16, uint16_t)
OPC_GEMM_DEFINE(bf16, uint16_t)

#define OPC_GEMM_EP_DEFINE(SUFFIX, T)                                                        \
    __attribute__((visibility("hidden"))) OPC_GEMM_EP_PROTO(SUFFIX, T) {                     \
        opc_gemm_ep_##SUFFIX(batch, M, N, K, A, a_batch_stride, trans_a, B, b_batch_stride,  \
                             trans_b, bias, act, out, reserve, ep, ep_ctx);                  \
    }

OPC_GEMM_EP_DEFINE(f32, float)
OPC_GEMM_EP_DEFINE(f64, double)
OPC_GEMM_EP_DEFINE(f16, uint16_t)
OPC_GEMM_EP_DEFINE(bf16, uint16_t)
