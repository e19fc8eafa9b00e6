/* Prototypes of the GEMM entry points that generated modules call.
 *
 * The GEMM (opc_gemm.h) is compiled once into an object per toolchain and
 * linked into every module (opc_gemm_lib.c): compiling it with each model
 * would cost about a second of -O3 per build. Arguments: see opc_gemm.h. */
#ifndef OPC_GEMM_API_H
#define OPC_GEMM_API_H
#include <stdint.h>

/* act 4: relu6; act | OPC_GEMM_ROW_BIAS: the bias is the rows' (opc_gemm.h) */
#define OPC_GEMM_RELU6 4
#define OPC_GEMM_ROW_BIAS 0x100

#define OPC_GEMM_PROTO(SUFFIX, T)                                                        \
    void opc_rt_gemm_##SUFFIX(int64_t batch, int64_t M, int64_t N, int64_t K,            \
                              const T *A, int64_t a_batch_stride, int trans_a,           \
                              const T *B, int64_t b_batch_stride, int trans_b,           \
                              const T *bias, int act, T *out, T *reserve)

/* The same with an epilogue on each finished block of out (opc_gemm.h): a generated module's
   pointwise chain on the GEMM's result. */
typedef void (*opc_rt_gemm_epilogue)(void *ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
#define OPC_GEMM_EP_PROTO(SUFFIX, T)                                                     \
    void opc_rt_gemm_ep_##SUFFIX(int64_t batch, int64_t M, int64_t N, int64_t K,         \
                                 const T *A, int64_t a_batch_stride, int trans_a,        \
                                 const T *B, int64_t b_batch_stride, int trans_b,        \
                                 const T *bias, int act, T *out, T *reserve,             \
                                 opc_rt_gemm_epilogue ep, void *ep_ctx)

OPC_GEMM_PROTO(f32, float);
OPC_GEMM_PROTO(f64, double);
OPC_GEMM_PROTO(f16, uint16_t);
OPC_GEMM_PROTO(bf16, uint16_t);
OPC_GEMM_EP_PROTO(f32, float);
OPC_GEMM_EP_PROTO(f64, double);
OPC_GEMM_EP_PROTO(f16, uint16_t);
OPC_GEMM_EP_PROTO(bf16, uint16_t);

#endif
