/* Prototypes of the kernels of opc_nn.h that generated modules call (through
 * opc_loops.call); they are compiled once per toolchain and dtype into the
 * objects of opc_nn_lib.c that the module links. Arguments: see opc_nn.h. */
#ifndef OPC_NN_API_H
#define OPC_NN_API_H
#include <stdint.h>

/* a conv's geometry (opc_nn_conv.h): n, c, o, group, in[3], out[3], k[3], strides[3], dilations[3], pads[3] */
#define OPC_NN_GEOM                                                                                           \
    int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t

/* a pooling geometry (opc_nn_conv.h): 23 integers */
#define OPC_NN_POOL OPC_NN_GEOM, int64_t

/* an attention's geometry (opc_nn_attention.h): 22 integers, an operand's layout 7 (4 operands in the
 * forward, 8 in the backward), then the scale */
#define OPC_NN_AT_LAY int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t
#define OPC_NN_AT OPC_NN_GEOM, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY, double
#define OPC_NN_AT_GRAD                                                                                        \
    OPC_NN_GEOM, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY, OPC_NN_AT_LAY,    \
        OPC_NN_AT_LAY, OPC_NN_AT_LAY, double

#define OPC_NN_SCE_PROTO(SUF, T, LSUF, L)                                                                     \
    void opc_nn_softmax_cross_entropy_##SUF##_##LSUF(const T *logits, const L *label, T *loss, T *sm,       \
                                                     int64_t *record, int64_t outer, int64_t n, int64_t inner, \
                                                     int64_t code);                                          \
    void opc_nn_softmax_cross_entropy_grad_##SUF##_##LSUF(const L *label, const T *sm, const T *dloss, T *dx, \
                                                          int64_t *record, int64_t outer, int64_t n,          \
                                                          int64_t inner, int64_t code);

#define OPC_NN_PROTO(SUF, T, A)                                                                               \
    void opc_nn_softmax_##SUF(const T *x, T *y, int64_t outer, int64_t n, int64_t inner);                    \
    void opc_nn_log_softmax_##SUF(const T *x, T *y, int64_t outer, int64_t n, int64_t inner);                \
    void opc_nn_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t outer, int64_t n,             \
                                   int64_t inner);                                                           \
    void opc_nn_log_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t outer, int64_t n,         \
                                       int64_t inner);                                                       \
    void opc_nn_layer_norm_##SUF(const T *x, const T *scale, const T *bias, T *y, A *mean, A *rstd,          \
                                 int64_t rows, int64_t cols, double eps);                                    \
    void opc_nn_layer_norm_grad_##SUF(const T *x, const T *scale, const A *mean, const A *rstd, const T *dy, \
                                      T *dx, T *dscale, T *dbias, int64_t rows, int64_t cols);               \
    OPC_NN_SCE_PROTO(SUF, T, i32, int32_t)                                                                    \
    OPC_NN_SCE_PROTO(SUF, T, i64, int64_t)                                                                    \
    void opc_nn_conv_##SUF(const T *x, const T *w, T *y, OPC_NN_GEOM);                                        \
    void opc_nn_conv_ep_##SUF(const T *x, const T *w, T *y, OPC_NN_GEOM,                                     \
                              void (*ep)(void *, int64_t, int64_t, int64_t, int64_t), void *ep_ctx);          \
    void opc_nn_conv_grad_input_##SUF(const T *dy, const T *w, T *dx, OPC_NN_GEOM);                           \
    void opc_nn_conv_grad_filter_##SUF(const T *x, const T *dy, T *dw, OPC_NN_GEOM);                          \
    void opc_nn_fused_conv_epilogue_##SUF(const T *x, const T *w, const T *b, T *y, OPC_NN_GEOM, int64_t act);  \
    void opc_nn_fused_conv_epilogue_ep_##SUF(const T *x, const T *w, const T *b, T *y, OPC_NN_GEOM, int64_t act, \
                                             void (*ep)(void *, int64_t, int64_t, int64_t, int64_t), void *ep_ctx); \
    void opc_nn_fused_conv_epilogue_reserve_##SUF(const T *x, const T *w, const T *b, T *y, T *z, OPC_NN_GEOM,    \
                                                  int64_t act);                                                 \
    void opc_nn_fused_conv_epilogue_layout_##SUF(const T *x, const T *w, const T *b, T *y, OPC_NN_GEOM,       \
                                                 int64_t act, int64_t layout);                                \
    void opc_nn_fused_conv_epilogue_layout_reserve_##SUF(const T *x, const T *w, const T *b, T *y, T *z,      \
                                                         OPC_NN_GEOM, int64_t act, int64_t layout);           \
    void opc_nn_fused_conv_epilogue_layout_ep_##SUF(const T *x, const T *w, const T *b, T *y, OPC_NN_GEOM,    \
                                                    int64_t act, int64_t layout,                              \
                                                    void (*ep)(void *, int64_t, int64_t, int64_t, int64_t),   \
                                                    void *ep_ctx);                                            \
    void opc_nn_max_pool_##SUF(const T *x, T *y, int64_t *idx, OPC_NN_POOL);                                  \
    void opc_nn_max_pool_values_##SUF(const T *x, T *y, OPC_NN_POOL);                                         \
    void opc_nn_max_pool_grad_##SUF(const int64_t *idx, const T *dout, T *dx, int64_t *record, OPC_NN_POOL,   \
                                    int64_t code);                                                            \
    void opc_nn_avg_pool_##SUF(const T *x, T *y, OPC_NN_POOL);                                                \
    void opc_nn_avg_pool_grad_##SUF(const T *dout, T *dx, OPC_NN_POOL);                                       \
    void opc_nn_attention_##SUF(const T *q, const T *k, const T *v, const T *mask, T *out, A *lse, OPC_NN_AT); \
    void opc_nn_attention_grad_##SUF(const T *q, const T *k, const T *v, const T *out, const A *lse,          \
                                     const T *dout, const T *mask, T *dq, T *dk, T *dv, OPC_NN_AT_GRAD);

OPC_NN_PROTO(f32, float, float)
OPC_NN_PROTO(f16, uint16_t, float)
OPC_NN_PROTO(bf16, uint16_t, float)
OPC_NN_PROTO(f64, double, double)

#undef OPC_NN_PROTO
#undef OPC_NN_SCE_PROTO
#undef OPC_NN_GEOM
#undef OPC_NN_POOL
#undef OPC_NN_AT
#undef OPC_NN_AT_GRAD
#undef OPC_NN_AT_LAY

#endif
