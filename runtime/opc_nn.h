/* opc_nn.h -- CPU kernels of opc's fused normalizations, losses and their grads.
 *
 * Generated code calls them through opc_loops.call as opc_nn_CALLEE, with the
 * op's buffers, then its integer and float arguments:
 *   opc_nn_softmax_T(x, y, outer, n, inner)            (log_softmax_T likewise)
 *   opc_nn_softmax_grad_T(out, dout, dx, outer, n, inner) (log_softmax_grad_T likewise)
 *   opc_nn_layer_norm_T(x, scale, bias, y, mean, rstd, rows, cols, eps)
 *   opc_nn_layer_norm_grad_T(x, scale, mean, rstd, dy, dx, dscale, dbias, rows, cols)
 *   opc_nn_softmax_cross_entropy_T_L(logits, label, loss, softmax, record, outer, n, inner, code)
 *   opc_nn_softmax_cross_entropy_grad_T_L(label, softmax, dloss, dlogits, record, outer, n, inner, code)
 *   opc_nn_conv_T(x, w, y, GEOM), opc_nn_conv_grad_input_T(dy, w, dx, GEOM),
 *   opc_nn_conv_grad_filter_T(x, dy, dw, GEOM)    (opc_nn_conv.h; they call the GEMM of opc_gemm_api.h)
 *   opc_nn_fused_conv_epilogue_T(x, w, bias, y, GEOM, act), ..._reserve_T(x, w, bias, y, z, GEOM, act):
 *     y = act(conv(x, w) + bias[o]), z the pre-activation; act 0 none, 1 relu, 2 gelu (tanh form)
 *   opc_nn_fused_conv_epilogue_layout_T(x, w, bias, y, GEOM, act, layout) (and _reserve_T, _ep_T): the same
 *     with channels-last x and / or out (opc_nn_conv_layout.h)
 *   opc_nn_attention_T(q, k, v, mask, out, lse, AT_GEOM), opc_nn_attention_grad_T(q, k, v, out, lse, dout,
 *   mask, dq, dk, dv, AT_GEOM)                        (opc_nn_attention.h: flash attention's tiled scheme)
 * T is f32, f64, f16 or bf16 (halves as uint16_t bits), L the label type i32
 * or i64. The normalized axis is n of the [outer, n, inner] view, so any axis
 * works; layer_norm normalizes rows of `cols` contiguous elements. mean and
 * rstd are float for f32/f16/bf16 and double for f64. `record` and `code`
 * follow the status protocol of opc_status.h: a label outside [0, n) fails.
 *
 * f16/bf16/f32 compute in float and round once on store (nearest even), f64
 * in double; the bodies are written once (opc_nn_rows.h) for both families.
 *
 * Like the GEMM, the kernels are compiled once per toolchain into objects that
 * every module links (opc_nn_lib.c, one object per dtype: -DOPC_NN_ONLY=code);
 * generated code includes only their prototypes, opc_nn_api.h. Included on
 * its own, this header defines every entry point static.
 */
#ifndef OPC_NN_H
#define OPC_NN_H

#include <stdint.h>
#include <math.h>
#include "opc_threads.h"
#include "opc_frozen.h"
#include "opc_runtime.h"
#include "opc_status.h"
#include "opc_routes.h"
#include "opc_gemm_api.h"
#include "opc_nn_conv.h"
#include "opc_nn_conv_fast.h"
#include "opc_nn_conv_cw.h"
#include "opc_nn_conv_layout.h"

#define OPC_NN_F32 0
#define OPC_NN_F16 1
#define OPC_NN_BF16 2
#define OPC_NN_F64 3
#define OPC_NN_LANES 64         /* partial results per row reduction: four AVX-512 registers of floats */
/* The loop over a block's lanes is a vector loop (each lane its own partial result). Without
 * the pragma gcc vectorized the loop over blocks instead: strided lanes, shuffles, scalar adds. */
#define OPC_NN_SIMD_LANES _Pragma("omp simd") for (int k = 0; k < OPC_NN_LANES; k++)
#define OPC_NN_TILE 64          /* inner positions processed together when the axis is not innermost */
#define OPC_NN_PAR_MIN 32768    /* elements below which threads cost more than they give */

/* The family bodies are inlined into each entry point, so that the dtype and the flags are
 * constants there: loads and stores specialize and the loops vectorize. */
#if defined(__GNUC__)
#define OPC_NN_INLINE static inline __attribute__((always_inline, unused))
#else
#define OPC_NN_INLINE static inline
#endif

/* dtypes whose intermediate values a buffer holds without rounding */
#define OPC_NN_EXACT(dt) ((dt) == OPC_NN_F32 || (dt) == OPC_NN_F64)
/* NaN-propagating maximum, as reduce_max */
#define OPC_NN_MAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))

OPC_NN_INLINE float opc_nn_ld_s(const void *p, int64_t i, int dt) {
    if (dt == OPC_NN_F16) return opc_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == OPC_NN_BF16) return opc_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
OPC_NN_INLINE void opc_nn_st_s(void *p, int64_t i, int dt, float v) {
    if (dt == OPC_NN_F16) ((uint16_t *)p)[i] = opc_f32_to_f16(v);
    else if (dt == OPC_NN_BF16) ((uint16_t *)p)[i] = opc_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}
OPC_NN_INLINE double opc_nn_ld_d(const void *p, int64_t i, int dt) {
    (void)dt;
    return ((const double *)p)[i];
}
OPC_NN_INLINE void opc_nn_st_d(void *p, int64_t i, int dt, double v) {
    (void)dt;
    ((double *)p)[i] = v;
}
OPC_NN_INLINE int64_t opc_nn_label(const void *label, int64_t i, int label64) {
    return label64 ? ((const int64_t *)label)[i] : (int64_t)((const int32_t *)label)[i];
}

/* bf16 conv forward on the bf16 GEMM (vdpbf16ps where the CPU has it, opc_gemm_bf16dp.h; else its
 * panels widened to f32): the patch matrix of the bf16 values themselves, half the bytes of the
 * widened copies it replaces, and y rounded once from the GEMM's f32 sums. -1 when the patch matrix
 * cannot be allocated. */
OPC_CV_IM2COL(opc_nn_cv_im2col_u16, uint16_t)
OPC_CV_FWD_GEMM(opc_nn_cv_fwd_gemm_bf16, uint16_t, opc_nn_cv_im2col_u16, opc_rt_gemm_bf16)

/* f32, f16, bf16: computed in float */
#define OPC_NN_ACC float
#define OPC_NN_FN(name) opc_nn_##name##_s
#define OPC_NN_LD opc_nn_ld_s
#define OPC_NN_ST opc_nn_st_s
#define OPC_NN_EXP opc_expf
#define OPC_NN_LOG opc_logf
#define OPC_NN_SQRT sqrtf
#define OPC_NN_GEMM opc_rt_gemm_f32
#include "opc_nn_rows.h"
#include "opc_nn_conv_body.h"
#include "opc_nn_pool_body.h"
#include "opc_nn_attention.h"
#undef OPC_NN_ACC
#undef OPC_NN_FN
#undef OPC_NN_LD
#undef OPC_NN_ST
#undef OPC_NN_EXP
#undef OPC_NN_LOG
#undef OPC_NN_SQRT
#undef OPC_NN_GEMM

/* f64: computed in double */
#define OPC_NN_ACC double
#define OPC_NN_FN(name) opc_nn_##name##_d
#define OPC_NN_LD opc_nn_ld_d
#define OPC_NN_ST opc_nn_st_d
#define OPC_NN_EXP exp
#define OPC_NN_LOG log
#define OPC_NN_SQRT sqrt
#define OPC_NN_GEMM opc_rt_gemm_f64
#include "opc_nn_rows.h"
#include "opc_nn_conv_body.h"
#include "opc_nn_pool_body.h"
#include "opc_nn_attention.h"
#undef OPC_NN_ACC
#undef OPC_NN_FN
#undef OPC_NN_LD
#undef OPC_NN_ST
#undef OPC_NN_EXP
#undef OPC_NN_LOG
#undef OPC_NN_SQRT
#undef OPC_NN_GEMM

/* The f32 forward's fast kernel for a conv that is not depthwise: 1 the stride-1 one (opc_nn_conv_fast.h)
 * where its tiles are at least 90% outputs, else 2 the channel-vector one (opc_nn_conv_cw.h) where it
 * applies (its row tiles waste less: ResNet-18's 14x14 layers 1.78 -> 1.58 ms at 1 thread), else 1
 * where the stride-1 one applies at all; 0: neither (im2col + GEMM). */
OPC_NN_INLINE int opc_nn_conv_fwd_kernel(const opc_cv_geom *q) {
    const int cf = opc_cf_applies(q);
    if (cf && 10 * q->ovol >= 9 * opc_cf_computed(q)) return 1;
    if (opc_cw_applies(q)) return 2;
    return cf ? 1 : 0;
}

/* A conv with at most OPC_NN_FEW_POSITIONS outputs per channel (a small image's last layers):
 * y [o, P] = w [o, c * kvol] @ col [c * kvol, P] has too few columns for the GEMM's tiles, and
 * packing w (several MB in ResNet's last layers) would cost more than the product, so it runs
 * transposed, y^T = col^T w^T, whose few rows take the GEMM's few-rows kernel: w read once, in
 * place. col is the im2col matrix (x itself for a 1x1 stride-1 conv); col^T and y^T are small
 * copies. bias (or NULL) is y^T's column bias, added in the GEMM's store; act (the conv kernels'
 * opc_cf_act) on the copy back, then ep (or NULL) on each image's outputs while they are in cache:
 * as the generic epilogue's pass per channel, they cost MobileNetV2's 160->960 conv at 2x2 a
 * quarter of its time. 1 when it ran, 0 when it does not apply or its scratch cannot be had. */
OPC_NN_INLINE int opc_nn_conv_few(const float *x, const float *w, const float *bias, int act, float *y,
                                  const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    const int64_t P = q->ovol, CK = q->c * q->kvol, O = q->o;
    if (!(q->g == 1 && P <= OPC_NN_FEW_POSITIONS)) return 0;
    /* w read in place is the point: where it is frozen, the channel-vector kernel reads it packed once */
    if (opc_cw_applies(q) && opc_rt_frozen_inside(w, (int64_t)sizeof(float) * O * CK)) return 0;
    const int direct = opc_cv_pointwise(q);
    float *xt = (float *)malloc(sizeof(float) * P * (CK + O + (direct ? 0 : CK)));
    if (!xt) return 0;
    opc_rt_route(OPC_ROUTE_CONV_FEW_POSITIONS);
    float *yt = xt + P * CK, *col = yt + P * O;
    for (int64_t n = 0; n < q->n; n++) {
        const float *xn = x + n * q->c * q->ivol;
        float *yn = y + n * O * P;
        if (!direct) opc_nn_cv_im2col_s(xn, col, P, q);
        const float *cn = direct ? xn : col;
        for (int64_t r = 0; r < CK; r++)
            for (int64_t p = 0; p < P; p++) xt[p * CK + r] = cn[r * P + p];
        opc_rt_gemm_f32(1, P, O, CK, xt, 0, 0, w, 0, 1, bias, 0, yt, NULL);
        opc_cl_transpose_act(yt, yn, P, O, act);
        if (ep) ep(ep_ctx, n * O, (n + 1) * O, 0, P);
    }
    free(xt);
    return 1;
}

/* The fast f32 route of conv `op` (0: conv, 1: input grad, 2: filter grad; opc_nn_conv_fast.h) where it
 * applies and its scratch could be allocated: 1 when it ran. a, b, r are f32 whenever it is called. */
OPC_NN_INLINE int opc_nn_conv_fast(int op, const void *a, const void *b, void *r, const opc_cv_geom *q) {
    const float *fa = (const float *)a, *fb = (const float *)b;
    float *fr = (float *)r;
    if (opc_cf_dw_applies(q))
        return (op == 0 ? opc_cf_dw_conv(fa, fb, NULL, OPC_CF_ACT_NONE, fr, NULL, q) : opc_cf_dw_grad(op, fa, fb, fr, q)) == 0;
    if (op == 0 && opc_nn_conv_few(fa, fb, NULL, OPC_CF_ACT_NONE, fr, q, NULL, NULL)) return 1;
    if (op == 0 && opc_nn_conv_fwd_kernel(q) == 2) return opc_cw_conv(fa, fb, NULL, OPC_CF_ACT_NONE, fr, NULL, q, NULL, NULL) == 0;
    if (!opc_cf_applies(q)) return 0;
    return (op == 0 ? opc_cf_conv(fa, fb, NULL, OPC_CF_ACT_NONE, fr, NULL, q, NULL, NULL)
                    : op == 1 ? opc_cf_conv_data(fa, fb, fr, q) : opc_cf_conv_filter(fa, fb, fr, q)) == 0;
}

/* A pointwise conv as the GEMM y [n, o, P] = w [o, c] @ x [n, c, P] (the GEMM's rows b * o + oc are the
 * conv's), bias (the rows' bias of the GEMM, OPC_GEMM_ROW_BIAS) and act in the GEMM's store, then ep (or
 * NULL) on each block it finishes while the block is in cache: 1 when it ran. The bias and act were a
 * pass of their own over each block: with MobileNetV2's ReLU6 after it, 8 of the 16->96 conv's 26 us
 * at 32x32. */
OPC_NN_INLINE int opc_nn_conv_pointwise_ep(const float *x, const float *w, const float *bias, int act, float *y,
                                           const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    if (!(opc_nn_conv_fwd_kernel(q) == 0 && q->g == 1 && opc_cv_pointwise(q) && q->ovol > OPC_NN_FEW_POSITIONS))
        return 0;
    opc_rt_route(OPC_ROUTE_CONV_POINTWISE_GEMM);
    opc_rt_gemm_ep_f32(q->n, q->o, q->ovol, q->c, w, 0, 0, x, q->c * q->ivol, 0, bias,
                       bias ? act | OPC_GEMM_ROW_BIAS : act, y, NULL, ep, ep_ctx);
    return 1;
}

/* fused_conv_epilogue's fast f32 route (bias, act and the reserve z in the kernel's store): 1 when it ran. */
OPC_NN_INLINE int opc_nn_conv_fast_epilogue(const void *x, const void *w, const void *b, int64_t act, void *y,
                                            void *z, const opc_cv_geom *q) {
    const float *fx = (const float *)x, *fw = (const float *)w, *fb = (const float *)b;
    float *fy = (float *)y, *fz = (float *)z;
    if (opc_cf_dw_applies(q)) return opc_cf_dw_conv(fx, fw, fb, (int)act, fy, fz, q) == 0;
    if (!fz && opc_nn_conv_pointwise_ep(fx, fw, fb, (int)act, fy, q, NULL, NULL)) return 1;
    const int kernel = opc_nn_conv_fwd_kernel(q);
    if (!fz && kernel == 0 && opc_nn_conv_few(fx, fw, fb, (int)act, fy, q, NULL, NULL)) return 1;
    return kernel == 1 ? opc_cf_conv(fx, fw, fb, (int)act, fy, fz, q, NULL, NULL) == 0
                       : kernel == 2 && opc_cw_conv(fx, fw, fb, (int)act, fy, fz, q, NULL, NULL) == 0;
}

/* conv with an epilogue's fast f32 route (bias and act, when given, in the kernel's store, then ep on each
 * finished tile, opc_nn_conv.h): 1 when it ran. Depthwise convs the row kernel does not take and im2col
 * convs have no such route (their caller runs ep after the conv). */
OPC_NN_INLINE int opc_nn_conv_fast_ep(const void *x, const void *w, const void *b, int64_t act, void *y,
                                      const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    const float *fx = (const float *)x, *fw = (const float *)w, *fb = (const float *)b;
    float *fy = (float *)y;
    const int a = (int)act;
    if (opc_cf_dw_applies(q)) {
        if (q->out[2] < OPC_CF_V) return opc_cf_dwc_run(fx, fw, fy, NULL, fb, a, q, ep, ep_ctx) == 0;
        return opc_cf_dw_planes_apply(q) && opc_cf_dw_planes_run(fx, fw, fy, NULL, fb, a, q, ep, ep_ctx) == 0;
    }
    if (opc_nn_conv_pointwise_ep(fx, fw, fb, a, fy, q, ep, ep_ctx)) return 1;
    const int kernel = opc_nn_conv_fwd_kernel(q);
    if (kernel == 0 && opc_nn_conv_few(fx, fw, fb, a, fy, q, ep, ep_ctx)) return 1;
    return kernel == 1 ? opc_cf_conv(fx, fw, fb, a, fy, NULL, q, ep, ep_ctx) == 0
                       : kernel == 2 && opc_cw_conv(fx, fw, fb, a, fy, NULL, q, ep, ep_ctx) == 0;
}

/* ep on every row of y [n * o, ovol] after a conv that ran without it: blocks of rows, one call each (a
 * call per row cost more than its outputs on small images) */
static void opc_nn_conv_ep_rows(const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    opc_rt_route(OPC_ROUTE_CONV_EPILOGUE_PASS);
    const int64_t rows = q->n * q->o, block = opc_par_chunk(rows, rows * q->ovol, OPC_NN_PAR_MIN / 8);
    const int64_t blocks = (rows + block - 1) / block;
    _Pragma("omp parallel for schedule(dynamic, 1) if (rows * q->ovol >= opc_par_min(OPC_NN_PAR_MIN)) num_threads(opc_num_threads())")
    for (int64_t b = 0; b < blocks; b++) ep(ep_ctx, b * block, b * block + block < rows ? b * block + block : rows, 0, q->ovol);
}

/* The units (rows or tiles, see opc_nn_rows.h) of an [outer, n, inner] tensor. */
OPC_NN_INLINE int64_t opc_nn_units(int64_t outer, int64_t inner) {
    return inner == 1 ? outer : outer * ((inner + OPC_NN_TILE - 1) / OPC_NN_TILE);
}

/* for u < units: CALL (which names opc_u), in parallel when `work` elements are worth threads */
#define OPC_NN_FOR_UNITS(units, work, CALL)                                                          \
    do {                                                                                             \
        const int64_t opc_units = (units), opc_work = (work);                                        \
        _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(opc_units, opc_work, OPC_NN_PAR_MIN / 8)) if (opc_work >= opc_par_min(OPC_NN_PAR_MIN)) num_threads(opc_num_threads())") \
        for (int64_t opc_u = 0; opc_u < opc_units; opc_u++) CALL;                                    \
    } while (0)

/* Entry points by dtype: T the storage type, A the compute type, F the family, DT the dtype code.
 * Each is one out-of-line function whose parallel loop calls the family's unit with its dtype as a
 * literal. OPC_NN_ENTRY is their storage class (opc_nn_lib.c exports them). */
#ifndef OPC_NN_ENTRY
#if defined(__GNUC__)
#define OPC_NN_ENTRY static __attribute__((noinline, unused))
#else
#define OPC_NN_ENTRY static
#endif
#endif

#define OPC_NN_ENTRIES(SUF, T, A, F, DT)                                                                       \
    OPC_NN_ENTRY void opc_nn_softmax_##SUF(const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {       \
        OPC_NN_FOR_UNITS(opc_nn_units(outer, inner), outer * n * inner,                                        \
                         opc_nn_softmax_##F(x, y, opc_u, n, inner, DT, 0));                                    \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_log_softmax_##SUF(const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {   \
        OPC_NN_FOR_UNITS(opc_nn_units(outer, inner), outer * n * inner,                                        \
                         opc_nn_softmax_##F(x, y, opc_u, n, inner, DT, 1));                                    \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t outer, int64_t n, \
                                                int64_t inner) {                                               \
        OPC_NN_FOR_UNITS(opc_nn_units(outer, inner), outer * n * inner,                                        \
                         opc_nn_softmax_grad_##F(out, dout, dx, opc_u, n, inner, DT, 0));                      \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_log_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t outer,        \
                                                    int64_t n, int64_t inner) {                                \
        OPC_NN_FOR_UNITS(opc_nn_units(outer, inner), outer * n * inner,                                        \
                         opc_nn_softmax_grad_##F(out, dout, dx, opc_u, n, inner, DT, 1));                      \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_layer_norm_##SUF(const T *x, const T *scale, const T *bias, T *y, A *mean,       \
                                              A *rstd, int64_t rows, int64_t cols, double eps) {               \
        OPC_NN_FOR_UNITS(rows, rows * cols,                                                                    \
                         opc_nn_layer_norm_##F(x, scale, bias, y, mean, rstd, opc_u, cols, eps, DT));          \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_layer_norm_grad_##SUF(const T *x, const T *scale, const A *mean, const A *rstd,  \
                                                   const T *dy, T *dx, T *dscale, T *dbias, int64_t rows,      \
                                                   int64_t cols) {                                             \
        OPC_NN_FOR_UNITS(rows, rows * cols,                                                                    \
                         opc_nn_layer_norm_grad_dx_##F(x, scale, mean, rstd, dy, dx, opc_u, cols, DT));        \
        OPC_NN_FOR_UNITS((cols + OPC_NN_TILE - 1) / OPC_NN_TILE, rows * cols,                                  \
                         opc_nn_layer_norm_grad_params_##F(x, mean, rstd, dy, dscale, dbias, opc_u, rows,      \
                                                           cols, DT));                                         \
    }                                                                                                          \
    OPC_NN_SCE_ENTRIES(SUF, T, F, DT, i32, int32_t, 0)                                                         \
    OPC_NN_SCE_ENTRIES(SUF, T, F, DT, i64, int64_t, 1)                                                         \
    OPC_NN_CONV_ENTRIES(SUF, T, F, DT)                                                                         \
    OPC_NN_ATTENTION_ENTRIES(SUF, T, A, F, DT)

#define OPC_NN_CONV_ENTRIES(SUF, T, F, DT)                                                                     \
    OPC_NN_ENTRY void opc_nn_conv_##SUF(const T *x, const T *w, T *y, OPC_CV_GEOM_PARAMS) {                    \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast(0, x, w, y, &q)) return;                                       \
        if (opc_nn_conv_gemm_##F(0, x, w, y, DT, &q)) return;                                                  \
        opc_rt_route(OPC_ROUTE_CONV_LOOPS);                                                                    \
        OPC_NN_FOR_UNITS(q.n * q.o * q.out[0] * q.out[1], q.n * q.o * q.ovol * q.cg * q.kvol,                  \
                         opc_nn_cv_fwd_unit_##F(x, w, y, DT, &q, opc_u));                                      \
    }                                                                                                          \
    /* y = conv(x, w), then ep on every output: in the fast kernels on each finished tile, else per row of \
     * [n * o, ovol] after the conv (the same values either way: ep reads y as stored) */                     \
    OPC_NN_ENTRY void opc_nn_conv_ep_##SUF(const T *x, const T *w, T *y, OPC_CV_GEOM_PARAMS, opc_cv_epilogue ep, \
                                           void *ep_ctx) {                                                     \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast_ep(x, w, NULL, OPC_CF_ACT_NONE, y, &q, ep, ep_ctx)) return;    \
        opc_nn_conv_##SUF(x, w, y, OPC_CV_GEOM_ARGS);                                                          \
        opc_nn_conv_ep_rows(&q, ep, ep_ctx);                                                                   \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_conv_grad_input_##SUF(const T *dy, const T *w, T *dx, OPC_CV_GEOM_PARAMS) {       \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast(1, dy, w, dx, &q)) return;                                     \
        if (opc_nn_conv_gemm_##F(1, dy, w, dx, DT, &q)) return;                                                \
        opc_rt_route(OPC_ROUTE_CONV_GRAD_INPUT_LOOPS);                                                         \
        OPC_NN_FOR_UNITS(q.n * q.c * q.in[0] * q.in[1], q.n * q.c * q.ivol * q.og * q.kvol,                    \
                         opc_nn_cv_data_unit_##F(dy, w, dx, DT, &q, opc_u));                                   \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_conv_grad_filter_##SUF(const T *x, const T *dy, T *dw, OPC_CV_GEOM_PARAMS) {      \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast(2, x, dy, dw, &q)) return;                                     \
        if (opc_nn_conv_gemm_##F(2, x, dy, dw, DT, &q)) return;                                                \
        opc_rt_route(OPC_ROUTE_CONV_GRAD_FILTER_LOOPS);                                                        \
        OPC_NN_FOR_UNITS(q.o * q.cg * q.kvol, q.n * q.o * q.ovol * q.cg * q.kvol,                              \
                         opc_nn_cv_filter_unit_##F(x, dy, dw, DT, &q, opc_u));                                 \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_reserve_##SUF(const T *x, const T *w, const T *b, T *y, T *z,  \
                                                               OPC_CV_GEOM_PARAMS, int64_t act) {              \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast_epilogue(x, w, b, act, y, z, &q)) return;                       \
        opc_nn_conv_##SUF(x, w, z ? z : y, OPC_CV_GEOM_ARGS);                                                  \
        opc_rt_route(OPC_ROUTE_CONV_EPILOGUE_PASS);                                                            \
        OPC_NN_FOR_UNITS(q.n * q.o, q.n * q.o * q.ovol,                                                        \
                         opc_nn_cv_epilogue_unit_##F(z ? (void *)z : (void *)y, b, y, z != NULL, act, DT, &q,  \
                                                     opc_u));                                                  \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_##SUF(const T *x, const T *w, const T *b, T *y,               \
                                                       OPC_CV_GEOM_PARAMS, int64_t act) {                      \
        opc_nn_fused_conv_epilogue_reserve_##SUF(x, w, b, y, NULL, OPC_CV_GEOM_ARGS, act);                      \
    }                                                                                                          \
    /* fused_conv_epilogue, then ep on every output (opc-schedule's nest after it: a folded BatchNorm's \
     * conv and its Clip or residual add), in the fast kernels on each finished tile */                        \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_ep_##SUF(const T *x, const T *w, const T *b, T *y,            \
                                                          OPC_CV_GEOM_PARAMS, int64_t act, opc_cv_epilogue ep, \
                                                          void *ep_ctx) {                                      \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_nn_conv_fast_ep(x, w, b, act, y, &q, ep, ep_ctx)) return;                  \
        opc_nn_fused_conv_epilogue_##SUF(x, w, b, y, OPC_CV_GEOM_ARGS, act);                                    \
        opc_nn_conv_ep_rows(&q, ep, ep_ctx);                                                                   \
    }                                                                                                          \
    /* fused_conv_epilogue with channels-last x and / or out (layout: opc_nn_conv_layout.h's bits; z, the    \
     * reserve, or NULL, in out's layout), then ep (or NULL; out channels-first) on every output */           \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_layout_run_##SUF(const T *x, const T *w, const T *b, T *y, T *z, \
                                                                  OPC_CV_GEOM_PARAMS, int64_t act, int64_t layout, \
                                                                  opc_cv_epilogue ep, void *ep_ctx) {         \
        const opc_cv_geom q = opc_cv_make(OPC_CV_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && !z && opc_cl_conv_fast((const float *)x, (const float *)w, (const float *)b,   \
                                                       (int)act, (float *)y, &q, (int)layout, ep, ep_ctx))    \
            return;                                                                                            \
        opc_rt_route(OPC_ROUTE_CONV_LAYOUT_LOOPS);                                                             \
        OPC_NN_FOR_UNITS(q.n * q.o * q.out[0] * q.out[1], q.n * q.o * q.ovol * q.cg * q.kvol,                  \
                         opc_nn_cv_layout_unit_##F(x, w, b, y, z, act, (int)layout, DT, &q, opc_u));          \
        if (ep) opc_nn_conv_ep_rows(&q, ep, ep_ctx);                                                           \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_layout_##SUF(const T *x, const T *w, const T *b, T *y,        \
                                                              OPC_CV_GEOM_PARAMS, int64_t act, int64_t layout) { \
        opc_nn_fused_conv_epilogue_layout_run_##SUF(x, w, b, y, NULL, OPC_CV_GEOM_ARGS, act, layout, NULL, NULL); \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_layout_reserve_##SUF(const T *x, const T *w, const T *b, T *y, \
                                                                      T *z, OPC_CV_GEOM_PARAMS, int64_t act,  \
                                                                      int64_t layout) {                       \
        opc_nn_fused_conv_epilogue_layout_run_##SUF(x, w, b, y, z, OPC_CV_GEOM_ARGS, act, layout, NULL, NULL); \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_fused_conv_epilogue_layout_ep_##SUF(const T *x, const T *w, const T *b, T *y,     \
                                                                 OPC_CV_GEOM_PARAMS, int64_t act, int64_t layout, \
                                                                 opc_cv_epilogue ep, void *ep_ctx) {          \
        opc_nn_fused_conv_epilogue_layout_run_##SUF(x, w, b, y, NULL, OPC_CV_GEOM_ARGS, act, layout, ep, ep_ctx); \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_max_pool_##SUF(const T *x, T *y, int64_t *idx, OPC_PL_GEOM_PARAMS) {              \
        const opc_pl_geom q = opc_pl_make(OPC_PL_GEOM_ARGS);                                                   \
        /* idx NULL: the values alone (opc_nn_max_pool_values_f32) */                                         \
        if (DT == OPC_NN_F32 && !idx && q.ivol < ((int64_t)1 << 31) && opc_cf_max_pool_values((const float *)x, (float *)y, &q)) \
            return;                                                                                            \
        if (DT == OPC_NN_F32 && idx && opc_cf_pool2_applies(&q)) {                                             \
            opc_rt_route(OPC_ROUTE_MAX_POOL_2X2_PLANES);                                                       \
            OPC_NN_FOR_UNITS(q.planes, q.planes * q.ovol * 4,                                                  \
                             opc_cf_max_pool2_plane((const float *)x + opc_u * q.ivol, (float *)y + opc_u * q.ovol, \
                                                    idx + opc_u * q.ovol, opc_u * q.ivol, &q));                \
            return;                                                                                            \
        }                                                                                                      \
        opc_rt_route(OPC_ROUTE_MAX_POOL_ROWS);                                                                 \
        OPC_NN_FOR_UNITS(q.planes * q.out[0] * q.out[1], q.planes * q.ovol * q.k[0] * q.k[1] * q.k[2],        \
                         opc_nn_max_pool_row_##F(x, y, idx, DT, &q, opc_u));                                   \
    }                                                                                                          \
    /* max_pool whose indices nothing reads (an inference graph's): the values alone */                      \
    OPC_NN_ENTRY void opc_nn_max_pool_values_##SUF(const T *x, T *y, OPC_PL_GEOM_PARAMS) {                    \
        opc_nn_max_pool_##SUF(x, y, NULL, OPC_PL_GEOM_ARGS);                                                   \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_max_pool_grad_##SUF(const int64_t *idx, const T *dout, T *dx, int64_t *record,    \
                                                 OPC_PL_GEOM_PARAMS, int64_t code) {                           \
        const opc_pl_geom q = opc_pl_make(OPC_PL_GEOM_ARGS);                                                   \
        OPC_NN_FOR_UNITS(q.planes, q.planes * q.ivol,                                                          \
                         opc_nn_max_pool_grad_##F(idx, dout, dx, record, code, DT, &q, opc_u));                \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_avg_pool_##SUF(const T *x, T *y, OPC_PL_GEOM_PARAMS) {                            \
        const opc_pl_geom q = opc_pl_make(OPC_PL_GEOM_ARGS);                                                   \
        if (DT == OPC_NN_F32 && opc_cf_pool2_applies(&q)) {                                                    \
            opc_rt_route(OPC_ROUTE_AVG_POOL_2X2_PLANES);                                                       \
            OPC_NN_FOR_UNITS(q.planes, q.planes * q.ovol * 4,                                                  \
                             opc_cf_avg_pool2_plane((const float *)x + opc_u * q.ivol, (float *)y + opc_u * q.ovol, &q)); \
            return;                                                                                            \
        }                                                                                                      \
        opc_rt_route(OPC_ROUTE_AVG_POOL_ROWS);                                                                 \
        OPC_NN_FOR_UNITS(q.planes * q.out[0] * q.out[1], q.planes * q.ovol * q.k[0] * q.k[1] * q.k[2],        \
                         opc_nn_avg_pool_row_##F(x, y, DT, &q, opc_u));                                        \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_avg_pool_grad_##SUF(const T *dout, T *dx, OPC_PL_GEOM_PARAMS) {                   \
        const opc_pl_geom q = opc_pl_make(OPC_PL_GEOM_ARGS);                                                   \
        OPC_NN_FOR_UNITS(q.planes * q.ivol, q.planes * q.ivol * q.k[0] * q.k[1] * q.k[2],                      \
                         opc_nn_avg_pool_grad_##F(dout, dx, DT, &q, opc_u));                                   \
    }

#define OPC_NN_SCE_ENTRIES(SUF, T, F, DT, LSUF, L, L64)                                                        \
    OPC_NN_ENTRY void opc_nn_softmax_cross_entropy_##SUF##_##LSUF(const T *logits, const L *label, T *loss,   \
                                                                  T *sm, int64_t *record, int64_t outer,      \
                                                                  int64_t n, int64_t inner, int64_t code) {   \
        OPC_NN_FOR_UNITS(opc_nn_units(outer, inner), outer * n * inner,                                        \
                         opc_nn_softmax_cross_entropy_##F(logits, label, L64, loss, sm, record, opc_u, n, inner, \
                                                          code, DT));                                          \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_softmax_cross_entropy_grad_##SUF##_##LSUF(const L *label, const T *sm,           \
                                                                       const T *dloss, T *dx, int64_t *record, \
                                                                       int64_t outer, int64_t n, int64_t inner,\
                                                                       int64_t code) {                         \
        OPC_NN_FOR_UNITS(outer, outer * n * inner,                                                             \
                         opc_nn_softmax_cross_entropy_grad_##F(label, L64, sm, dloss, dx, record, opc_u, n,     \
                                                               inner, code, DT));                              \
    }

/* OPC_NN_ONLY: define the entry points of that dtype code only (one runtime object per dtype). */
#if !defined(OPC_NN_ONLY) || OPC_NN_ONLY == OPC_NN_F32
OPC_NN_ENTRIES(f32, float, float, s, OPC_NN_F32)
#endif
#if !defined(OPC_NN_ONLY) || OPC_NN_ONLY == OPC_NN_F16
OPC_NN_ENTRIES(f16, uint16_t, float, s, OPC_NN_F16)
#endif
#if !defined(OPC_NN_ONLY) || OPC_NN_ONLY == OPC_NN_BF16
OPC_NN_ENTRIES(bf16, uint16_t, float, s, OPC_NN_BF16)
#endif
#if !defined(OPC_NN_ONLY) || OPC_NN_ONLY == OPC_NN_F64
OPC_NN_ENTRIES(f64, double, double, d, OPC_NN_F64)
#endif

#undef OPC_NN_ENTRIES
#undef OPC_NN_ENTRY
#undef OPC_NN_SCE_ENTRIES
#undef OPC_NN_CONV_ENTRIES
#undef OPC_NN_FOR_UNITS

#endif /* OPC_NN_H */
