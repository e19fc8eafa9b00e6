/* opc_nn_conv_layout.h -- fused_conv_epilogue with channels-last operands: opc-channels-last's
 * chains (pointwise -> depthwise -> pointwise, MobileNet's inverted residuals) keep the depthwise
 * conv's input and output as [n, spatial..., c], where 16 channels at one position are one vector.
 * In NCHW a 7x7 or 14x14 plane's rows are narrower than a vector, and the depthwise kernels gather
 * and scatter 16 channels around every block (opc_cf_dwc_run: half of their time); here the
 * pointwise convs on either side write and read channels-last through the GEMM's transposes, which
 * its packing does anyway, and the depthwise conv reads its taps as whole vectors.
 * Included by opc_nn.h after opc_nn_conv_cw.h (the f32 vectors, activations, frozen packing).
 *
 * layout bits: OPC_NN_X_LAST (x is [n, *in, c]), OPC_NN_OUT_LAST (out and the reserve are
 * [n, *out, o]). Every read is inside x, w, bias; every write inside y. Results do not depend on
 * the thread count.
 */
#ifndef OPC_NN_CONV_LAYOUT_H
#define OPC_NN_CONV_LAYOUT_H

#define OPC_NN_X_LAST 1
#define OPC_NN_OUT_LAST 2
#define OPC_CL_MAX_TAPS 64 /* the depthwise kernel's taps per output (a 7x7 or 4x4x4 window fits) */
#define OPC_CL_NV 4        /* vectors of channels per step: independent FMA chains */
#define OPC_CL_STREAM_BYTES (1 << 20) /* an image this large is prefetched a row ahead (opc_cl_dw_row) */

/* wt [kvol][C] of the depthwise taps w [C][kvol]: a tap's channels one run of vectors. */
typedef struct {
    const float *w;
    int64_t C, kvol;
} opc_cl_taps;

static void opc_cl_pack_taps(const void *ctx, float *wt) {
    const opc_cl_taps *t = (const opc_cl_taps *)ctx;
    for (int64_t c = 0; c < t->C; c++)
        for (int64_t k = 0; k < t->kvol; k++) wt[k * t->C + c] = t->w[c * t->kvol + k];
}

/* The taps of output position (o0, o1, o2) inside x: xo[t] their positions' offsets (in floats) in the
 * image, wo[t] their rows of wt; the count. Taps in the padding add zeros and are skipped. */
static inline int opc_cl_taps_at(const opc_cv_geom *q, int64_t o0, int64_t o1, int64_t o2, int64_t *xo, int64_t *wo) {
    int nt = 0;
    OPC_CV_FOR_TAPS_INSIDE(q, o0, o1, o2, pos, kk, (xo[nt] = pos * q->g, wo[nt++] = kk * q->g));
    return nt;
}

/* y = act(sum over the nt taps of x[xo[t] + c] * wt[wo[t] + c] + bias[c]) for the channels of one
 * output position: OPC_CL_NV vectors at a time, then one, then the last C % V one by one. Each
 * channel's sum runs over the taps in order from zero, then adds its bias (as the NCHW kernels). */
static inline __attribute__((always_inline)) void opc_cl_dw_position(const float *x, const float *wt,
                                                                     const float *bias, float *y, int64_t C,
                                                                     const int64_t *xo, const int64_t *wo, int nt,
                                                                     int act) {
    int64_t c = 0;
    for (; c + OPC_CL_NV * OPC_CF_V <= C; c += OPC_CL_NV * OPC_CF_V) {
        opc_cf_vec acc[OPC_CL_NV] = {{0}};
        for (int t = 0; t < nt; t++) {
            const float *xs = x + xo[t] + c, *ws = wt + wo[t] + c;
#pragma GCC unroll 4
            for (int j = 0; j < OPC_CL_NV; j++)
                acc[j] += *(const opc_cf_uvec *)(xs + j * OPC_CF_V) * *(const opc_cf_uvec *)(ws + j * OPC_CF_V);
        }
#pragma GCC unroll 4
        for (int j = 0; j < OPC_CL_NV; j++)
            *(opc_cf_uvec *)(y + c + j * OPC_CF_V) =
                opc_cf_act_vec(acc[j] + *(const opc_cf_uvec *)(bias + c + j * OPC_CF_V), act);
    }
    for (; c + OPC_CF_V <= C; c += OPC_CF_V) {
        opc_cf_vec acc = {0};
        for (int t = 0; t < nt; t++) acc += *(const opc_cf_uvec *)(x + xo[t] + c) * *(const opc_cf_uvec *)(wt + wo[t] + c);
        *(opc_cf_uvec *)(y + c) = opc_cf_act_vec(acc + *(const opc_cf_uvec *)(bias + c), act);
    }
    for (; c < C; c++) {
        float acc = 0.0f;
        for (int t = 0; t < nt; t++) acc += x[xo[t] + c] * wt[wo[t] + c];
        y[c] = opc_cf_act(acc + bias[c], act);
    }
}

/* Output row u = (n, o0, o1) of the depthwise conv, x and y channels-last; act a constant where inlined. */
static inline __attribute__((always_inline)) void opc_cl_dw_row(const float *x, const float *wt, const float *bias,
                                                                float *y, const opc_cv_geom *q, int64_t u, int act) {
    const int64_t C = q->g, o1 = u % q->out[1], o0 = u / q->out[1] % q->out[0], n = u / (q->out[1] * q->out[0]);
    const float *xn = x + n * q->ivol * C;
    float *yrow = y + (n * q->ovol + (o0 * q->out[1] + o1) * q->out[2]) * C;
    int64_t xo[OPC_CL_MAX_TAPS], wo[OPC_CL_MAX_TAPS];
    /* An image past L2 streams in from memory as the rows pass: the input row the next output row reads
     * last (the one it reads first of all rows), prefetched a position's span at a time as this row passes
     * over the same columns. MobileNetV2's 96 channels at 112x112 -> 56x56: 235 -> 195 us; images in
     * cache only pay the prefetches. */
    const int64_t pd = o0 * q->s[0] - q->p[0], pr = (o1 + 1) * q->s[1] - q->p[1] + (q->k[1] - 1) * q->d[1];
    const int stream = q->ivol * C * (int64_t)sizeof(float) >= OPC_CL_STREAM_BYTES;
    const float *next = stream && o1 + 1 < q->out[1] && pd >= 0 && pd < q->in[0] && pr >= 0 && pr < q->in[1]
                            ? xn + (pd * q->in[1] + pr) * q->in[2] * C : NULL;
    const int64_t span = q->s[2] * C, row_end = q->in[2] * C;
    for (int64_t o2 = 0; o2 < q->out[2]; o2++) {
        if (next)
            for (int64_t e = o2 * span; e < (o2 + 1) * span && e < row_end; e += 64 / sizeof(float))
                __builtin_prefetch(next + e, 0, 3);
        const int nt = opc_cl_taps_at(q, o0, o1, o2, xo, wo);
        opc_cl_dw_position(xn, wt, bias, yrow + o2 * C, C, xo, wo, nt, act);
    }
}

/* Whether the channels-last depthwise kernel runs conv q: depthwise, a window of at most
 * OPC_CL_MAX_TAPS taps, an activation it vectorizes (not gelu). */
static inline int opc_cl_dw_applies(const opc_cv_geom *q, int act) {
    return q->cg == 1 && q->og == 1 && q->kvol <= OPC_CL_MAX_TAPS && act != OPC_CF_ACT_GELU;
}

/* y [n, *out, C] = act(depthwise conv of x [n, *in, C] with w [C, 1, *k] + bias); 0, or -1 when the
 * transposed taps cannot be had (not frozen, and no scratch). */
static int opc_cl_dw_run(const float *x, const float *w, const float *bias, int act, float *y, const opc_cv_geom *q) {
    const int64_t C = q->g, kvol = q->kvol, rows = q->n * q->out[0] * q->out[1];
    const opc_cl_taps taps = {w, C, kvol};
    const int64_t key[OPC_FROZEN_KEY] = {8, C, kvol, 0}; /* 8: this layout */
    const float *wt = opc_rt_frozen_packed(w, (int64_t)sizeof(float) * C * kvol, key, C * kvol, opc_cl_pack_taps, &taps);
    if (!wt) {
        float *own = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * C * kvol);
        if (!own) return -1;
        opc_cl_pack_taps(&taps, own);
        wt = own;
    }
    opc_rt_route(OPC_ROUTE_CONV_LAYOUT_DEPTHWISE);
    const int64_t work = rows * q->out[2] * C * kvol;
    _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(rows, work, 32768)) if (work >= opc_par_min(65536)) num_threads(opc_num_threads())")
    for (int64_t u = 0; u < rows; u++) {
        if (act == OPC_CF_ACT_RELU6) opc_cl_dw_row(x, wt, bias, y, q, u, OPC_CF_ACT_RELU6);
        else if (act == OPC_CF_ACT_RELU) opc_cl_dw_row(x, wt, bias, y, q, u, OPC_CF_ACT_RELU);
        else opc_cl_dw_row(x, wt, bias, y, q, u, OPC_CF_ACT_NONE);
    }
    return 0;
}

/* yn [O, P] = act(yt [P, O]): a transposed GEMM's few rows back in channels-first order. */
static inline void opc_cl_transpose_act(const float *yt, float *yn, int64_t P, int64_t O, int act) {
    for (int64_t o = 0; o < O; o++)
        for (int64_t p = 0; p < P; p++) yn[o * P + p] = opc_cf_act(yt[p * O + o], act);
}

/* A pointwise conv (1x1, stride 1, no padding, one group) whose output is channels-last: per image
 * y^T [P, o] = x^T [P, c] @ w^T [c, o], the bias the columns', act in the GEMM's store. */
static void opc_cl_pointwise_to_last(const float *x, const float *w, const float *bias, int act, float *y,
                                     const opc_cv_geom *q) {
    opc_rt_route(OPC_ROUTE_CONV_LAYOUT_POINTWISE);
    opc_rt_gemm_f32(q->n, q->ovol, q->o, q->c, x, q->c * q->ivol, 1, w, 0, 1, bias, act, y, NULL);
}

/* A pointwise conv whose input is channels-last: per image y [o, P] = w [o, c] @ x^T, x [P, c] read
 * transposed by the GEMM's packing, bias the rows', act in the store, ep on each finished block. On
 * at most OPC_NN_FEW_POSITIONS positions the GEMM would have a few columns: y^T = x w^T instead (x
 * read in place, w once), act and ep on the copy back. 0, or -1 when that copy's scratch cannot be had. */
static int opc_cl_pointwise_from_last(const float *x, const float *w, const float *bias, int act, float *y,
                                      const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    const int64_t P = q->ovol, O = q->o, C = q->c;
    opc_rt_route(OPC_ROUTE_CONV_LAYOUT_POINTWISE);
    if (P > OPC_NN_FEW_POSITIONS) {
        opc_rt_gemm_ep_f32(q->n, O, P, C, w, 0, 0, x, P * C, 1, bias, bias ? act | OPC_GEMM_ROW_BIAS : act, y, NULL,
                           ep, ep_ctx);
        return 0;
    }
    float *yt = (float *)malloc(sizeof(float) * P * O);
    if (!yt) return -1;
    for (int64_t n = 0; n < q->n; n++) {
        float *yn = y + n * O * P;
        opc_rt_gemm_f32(1, P, O, C, x + n * P * C, 0, 0, w, 0, 1, bias, 0, yt, NULL);
        opc_cl_transpose_act(yt, yn, P, O, act);
        if (ep) ep(ep_ctx, n * O, (n + 1) * O, 0, P);
    }
    free(yt);
    return 0;
}

/* fused_conv_epilogue's fast f32 route for a layout: 1 when it ran (no reserve: opc-channels-last's
 * convs are inference's; ep only with a channels-first output, whose rows it walks). */
static inline int opc_cl_conv_fast(const float *x, const float *w, const float *bias, int act, float *y,
                                   const opc_cv_geom *q, int layout, opc_cv_epilogue ep, void *ep_ctx) {
    const int pointwise = q->g == 1 && opc_cv_pointwise(q);
    if (layout == (OPC_NN_X_LAST | OPC_NN_OUT_LAST) && !ep && opc_cl_dw_applies(q, act))
        return opc_cl_dw_run(x, w, bias, act, y, q) == 0;
    if (layout == OPC_NN_OUT_LAST && !ep && pointwise) {
        opc_cl_pointwise_to_last(x, w, bias, act, y, q);
        return 1;
    }
    if (layout == OPC_NN_X_LAST && pointwise) return opc_cl_pointwise_from_last(x, w, bias, act, y, q, ep, ep_ctx) == 0;
    return 0;
}

#endif /* OPC_NN_CONV_LAYOUT_H */
