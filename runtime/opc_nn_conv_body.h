/* opc_nn_conv_body.h -- the bodies of opc's CPU convolutions, written once per
 * accumulator family. NOT a normal header: opc_nn.h includes it twice, after
 * opc_nn_rows.h, with OPC_NN_ACC, OPC_NN_FN, OPC_NN_LD, OPC_NN_ST defined as
 * for that file and OPC_NN_GEMM the family's GEMM (opc_gemm_api.h). No include
 * guard on purpose. Geometry: opc_nn_conv.h.
 *
 * Two routes:
 * - im2col + GEMM (groups with more than one input channel): per image, the
 *   [group, c/group * kvol, out] patch matrix, then one batched GEMM over the
 *   groups into y (1x1 stride-1 convs use x itself). The input gradient is
 *   the GEMM w^T @ dy folded back by col2im (each channel's sums in a fixed
 *   order); the filter gradient one GEMM dy @ col^T over all images at once.
 *   f16/bf16 are widened to f32 buffers first (compute in f32, one rounding).
 * - direct loops (depthwise convs, and any conv whose scratch buffers cannot
 *   be allocated): every output accumulates its own sum, tiles of
 *   OPC_CV_TILE outputs along the innermost dim at a time, so the inner loop
 *   runs along contiguous memory and vectorizes; no heap memory at all.
 * Both read only inside x, w and dy: padding is the index ranges
 * (opc_cv_range), never a read.
 */

#define ACC OPC_NN_ACC
#define LD OPC_NN_LD
#define ST OPC_NN_ST

/* ---- direct loops ---------------------------------------------------------------------- */

/* y[n, oc, o0, o1, :] for the unit u = ((n * o + oc) * out0 + o0) * out1 + o1. */
OPC_NN_INLINE void OPC_NN_FN(cv_fwd_unit)(const void *x, const void *w, void *y, int dt, const opc_cv_geom *q,
                                          int64_t u) {
    const int64_t o1 = u % q->out[1], o0 = (u / q->out[1]) % q->out[0];
    const int64_t oc = (u / (q->out[1] * q->out[0])) % q->o, n = u / (q->out[1] * q->out[0] * q->o);
    const int64_t grp = oc / q->og, out2 = q->out[2];
    for (int64_t t0 = 0; t0 < out2; t0 += OPC_CV_TILE) {
        const int64_t tn = out2 - t0 < OPC_CV_TILE ? out2 - t0 : OPC_CV_TILE;
        ACC acc[OPC_CV_TILE];
        for (int64_t j = 0; j < tn; j++) acc[j] = 0;
        for (int64_t cc = 0; cc < q->cg; cc++) {
            const int64_t xc = (n * q->c + grp * q->cg + cc) * q->ivol;
            for (int64_t k0 = 0; k0 < q->k[0]; k0++) {
                const int64_t i0 = o0 * q->s[0] + k0 * q->d[0] - q->p[0];
                if (i0 < 0 || i0 >= q->in[0]) continue;
                for (int64_t k1 = 0; k1 < q->k[1]; k1++) {
                    const int64_t i1 = o1 * q->s[1] + k1 * q->d[1] - q->p[1];
                    if (i1 < 0 || i1 >= q->in[1]) continue;
                    const int64_t xrow = xc + (i0 * q->in[1] + i1) * q->in[2];
                    for (int64_t k2 = 0; k2 < q->k[2]; k2++) {
                        const ACC wv = LD(w, (((oc * q->cg + cc) * q->k[0] + k0) * q->k[1] + k1) * q->k[2] + k2, dt);
                        const int64_t off = k2 * q->d[2] - q->p[2], s2 = q->s[2];
                        int64_t lo, hi;
                        opc_cv_range(q->in[2], out2, s2, off, &lo, &hi);
                        if (lo < t0) lo = t0;
                        if (hi > t0 + tn) hi = t0 + tn;
                        for (int64_t o2 = lo; o2 < hi; o2++) acc[o2 - t0] += wv * LD(x, xrow + o2 * s2 + off, dt);
                    }
                }
            }
        }
        const int64_t yrow = (((n * q->o + oc) * q->out[0] + o0) * q->out[1] + o1) * out2 + t0;
        for (int64_t j = 0; j < tn; j++) ST(y, yrow + j, dt, acc[j]);
    }
}

/* dx[n, c, i0, i1, :] for the unit u = ((n * c + c) * in0 + i0) * in1 + i1: the outputs o with
 * o * s + k * d - p = i, summed over the group's output channels and the kernel. */
OPC_NN_INLINE void OPC_NN_FN(cv_data_unit)(const void *dy, const void *w, void *dx, int dt, const opc_cv_geom *q,
                                           int64_t u) {
    const int64_t i1 = u % q->in[1], i0 = (u / q->in[1]) % q->in[0];
    const int64_t c = (u / (q->in[1] * q->in[0])) % q->c, n = u / (q->in[1] * q->in[0] * q->c);
    const int64_t grp = c / q->cg, cc = c % q->cg, in2 = q->in[2], s2 = q->s[2];
    for (int64_t t0 = 0; t0 < in2; t0 += OPC_CV_TILE) {
        const int64_t tn = in2 - t0 < OPC_CV_TILE ? in2 - t0 : OPC_CV_TILE;
        ACC acc[OPC_CV_TILE];
        for (int64_t j = 0; j < tn; j++) acc[j] = 0;
        for (int64_t ol = 0; ol < q->og; ol++) {
            const int64_t oc = grp * q->og + ol;
            for (int64_t k0 = 0; k0 < q->k[0]; k0++) {
                const int64_t n0 = i0 + q->p[0] - k0 * q->d[0];
                if (n0 < 0 || n0 % q->s[0] || n0 / q->s[0] >= q->out[0]) continue;
                for (int64_t k1 = 0; k1 < q->k[1]; k1++) {
                    const int64_t n1 = i1 + q->p[1] - k1 * q->d[1];
                    if (n1 < 0 || n1 % q->s[1] || n1 / q->s[1] >= q->out[1]) continue;
                    const int64_t dyrow = (((n * q->o + oc) * q->out[0] + n0 / q->s[0]) * q->out[1] + n1 / q->s[1]) *
                                          q->out[2];
                    for (int64_t k2 = 0; k2 < q->k[2]; k2++) {
                        const ACC wv = LD(w, (((oc * q->cg + cc) * q->k[0] + k0) * q->k[1] + k1) * q->k[2] + k2, dt);
                        const int64_t off = q->p[2] - k2 * q->d[2]; /* i2 + off = o2 * s2 */
                        int64_t lo = t0 > -off ? t0 : -off;
                        const int64_t r = (lo + off) % s2;
                        if (r) lo += s2 - r;
                        int64_t hi = q->out[2] * s2 - off;
                        if (hi > t0 + tn) hi = t0 + tn;
                        for (int64_t i2 = lo; i2 < hi; i2 += s2)
                            acc[i2 - t0] += wv * LD(dy, dyrow + (i2 + off) / s2, dt);
                    }
                }
            }
        }
        const int64_t xrow = (((n * q->c + c) * q->in[0] + i0) * q->in[1] + i1) * in2 + t0;
        for (int64_t j = 0; j < tn; j++) ST(dx, xrow + j, dt, acc[j]);
    }
}

/* dw[oc, cc, kk] for the unit u = (oc * cg + cc) * kvol + kk: over every image and output. */
OPC_NN_INLINE void OPC_NN_FN(cv_filter_unit)(const void *x, const void *dy, void *dw, int dt, const opc_cv_geom *q,
                                             int64_t u) {
    const int64_t kk = u % q->kvol, cc = (u / q->kvol) % q->cg, oc = u / (q->kvol * q->cg);
    const int64_t c = (oc / q->og) * q->cg + cc;
    int64_t k[3], lo[3], hi[3], off[3];
    opc_cv_split(q, kk, k);
    for (int d = 0; d < 3; d++) {
        off[d] = k[d] * q->d[d] - q->p[d];
        opc_cv_range(q->in[d], q->out[d], q->s[d], off[d], &lo[d], &hi[d]);
    }
    ACC lane[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) lane[k] = 0;
    const int64_t s2 = q->s[2];
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t o0 = lo[0]; o0 < hi[0]; o0++)
            for (int64_t o1 = lo[1]; o1 < hi[1]; o1++) {
                const int64_t xrow = ((n * q->c + c) * q->in[0] + o0 * q->s[0] + off[0]) * q->in[1] * q->in[2] +
                                     (o1 * q->s[1] + off[1]) * q->in[2] + off[2];
                const int64_t dyrow = (((n * q->o + oc) * q->out[0] + o0) * q->out[1] + o1) * q->out[2];
                int64_t o2 = lo[2];
                for (; o2 + OPC_NN_LANES <= hi[2]; o2 += OPC_NN_LANES)
                    OPC_NN_SIMD_LANES { lane[k] += LD(dy, dyrow + o2 + k, dt) * LD(x, xrow + (o2 + k) * s2, dt); }
                for (int k = 0; o2 < hi[2]; o2++, k++) lane[k] += LD(dy, dyrow + o2, dt) * LD(x, xrow + o2 * s2, dt);
            }
    ST(dw, u, dt, OPC_NN_FN(fold)(lane));
}

/* fused_conv_epilogue's activation of v: act 0 none, 1 relu, 2 gelu (tanh form), 4 relu6. */
OPC_NN_INLINE ACC OPC_NN_FN(cv_act)(ACC v, int64_t act) {
    if (act == 1) return v > 0 ? v : 0;
    if (act == 4) return (ACC)opc_relu6_f64(v); /* exact in f64 for either ACC */
    if (act == 2) return (ACC)0.5 * v * (1 + (ACC)tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return v;
}

/* fused_conv_epilogue after a plain conv into pre: plane u = n * o + oc of y = act(pre + bias[oc]),
 * act 0 none, 1 relu, 2 gelu (tanh form), 4 relu6; keep: pre is reserve_space, stored as pre + bias (and
 * act applied to that stored value, as the unfused ops would). */
OPC_NN_INLINE void OPC_NN_FN(cv_epilogue_unit)(void *pre, const void *bias, void *y, int keep, int64_t act, int dt,
                                               const opc_cv_geom *q, int64_t u) {
    const ACC b = LD(bias, u % q->o, dt);
    for (int64_t i = u * q->ovol; i < (u + 1) * q->ovol; i++) {
        ACC v = LD(pre, i, dt) + b;
        if (keep) {
            ST(pre, i, dt, v);
            v = LD(pre, i, dt);
        }
        ST(y, i, dt, OPC_NN_FN(cv_act)(v, act));
    }
}

/* fused_conv_epilogue with channels-last operands (layout: opc_nn_conv_layout.h's bits), any dtype:
 * row u = ((n * o + oc) * out0 + o0) * out1 + o1 of outputs, each as cv_fwd_unit sums it, then as
 * cv_epilogue_unit finishes it (the conv's value stored and read back, so that halves round where
 * the unfused ops would); x, y and z (or NULL) indexed by their layouts. No heap memory. */
OPC_NN_INLINE void OPC_NN_FN(cv_layout_unit)(const void *x, const void *w, const void *bias, void *y, void *z,
                                             int64_t act, int layout, int dt, const opc_cv_geom *q, int64_t u) {
    const int64_t o1 = u % q->out[1], o0 = (u / q->out[1]) % q->out[0];
    const int64_t oc = (u / (q->out[1] * q->out[0])) % q->o, n = u / (q->out[1] * q->out[0] * q->o);
    const int64_t grp = oc / q->og;
    const int64_t xcs = layout & 1 ? 1 : q->ivol, xps = layout & 1 ? q->c : 1; /* channel and position strides */
    const int64_t ycs = layout & 2 ? 1 : q->ovol, yps = layout & 2 ? q->o : 1;
    const ACC b = LD(bias, oc, dt);
    for (int64_t o2 = 0; o2 < q->out[2]; o2++) {
        ACC acc = 0;
        for (int64_t cc = 0; cc < q->cg; cc++) {
            const int64_t xc = n * q->c * q->ivol + (grp * q->cg + cc) * xcs, wc = (oc * q->cg + cc) * q->kvol;
            OPC_CV_FOR_TAPS_INSIDE(q, o0, o1, o2, pos, kk, acc += LD(w, wc + kk, dt) * LD(x, xc + pos * xps, dt));
        }
        const int64_t i = n * q->o * q->ovol + oc * ycs + ((o0 * q->out[1] + o1) * q->out[2] + o2) * yps;
        void *pre = z ? z : y;
        ST(pre, i, dt, acc);
        ACC v = LD(pre, i, dt) + b;
        if (z) {
            ST(z, i, dt, v);
            v = LD(z, i, dt);
        }
        ST(y, i, dt, OPC_NN_FN(cv_act)(v, act));
    }
}

/* ---- im2col + GEMM ------------------------------------------------------------------------ */

/* col[r, p] (rows r = cc * kvol + kk, leading dim ld) of one image's group xg [cg, *in] (opc_nn_conv.h). */
OPC_CV_IM2COL(OPC_NN_FN(cv_im2col), ACC)

/* dxg [cg, *in] += the patches of col folded back (each channel in its own thread, rows in order). */
static void OPC_NN_FN(cv_col2im)(const ACC *col, ACC *dxg, int64_t ld, const opc_cv_geom *q) {
    _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(q->cg, q->cg * q->kvol * q->ovol, OPC_NN_PAR_MIN / 8)) if (q->cg * q->kvol * q->ovol >= opc_par_min(OPC_NN_PAR_MIN)) num_threads(opc_num_threads())")
    for (int64_t cc = 0; cc < q->cg; cc++) {
        ACC *dc = dxg + cc * q->ivol;
        for (int64_t kk = 0; kk < q->kvol; kk++) {
            int64_t k[3], lo[3], hi[3], off[3];
            opc_cv_split(q, kk, k);
            for (int d = 0; d < 3; d++) {
                off[d] = k[d] * q->d[d] - q->p[d];
                opc_cv_range(q->in[d], q->out[d], q->s[d], off[d], &lo[d], &hi[d]);
            }
            const ACC *row = col + (cc * q->kvol + kk) * ld;
            for (int64_t o0 = lo[0]; o0 < hi[0]; o0++)
                for (int64_t o1 = lo[1]; o1 < hi[1]; o1++) {
                    const ACC *src = row + (o0 * q->out[1] + o1) * q->out[2];
                    ACC *dst = dc + ((o0 * q->s[0] + off[0]) * q->in[1] + o1 * q->s[1] + off[1]) * q->in[2] + off[2];
                    for (int64_t o2 = lo[2]; o2 < hi[2]; o2++) dst[o2 * q->s[2]] += src[o2];
                }
        }
    }
}

/* y = conv(x, w); -1 when the patch matrix cannot be allocated (opc_nn_conv.h). */
OPC_CV_FWD_GEMM(OPC_NN_FN(cv_fwd_gemm), ACC, OPC_NN_FN(cv_im2col), OPC_NN_GEMM)

/* dx = the input gradient of dy; -1 when the scratch cannot be allocated. */
static int OPC_NN_FN(cv_data_gemm)(const ACC *dy, const ACC *w, ACC *dx, const opc_cv_geom *q) {
    const int64_t ck = q->cg * q->kvol, P = q->ovol;
    ACC *col = NULL;
    const int direct = opc_cv_pointwise(q);
    if (!direct && !(col = (ACC *)malloc(sizeof(ACC) * q->g * ck * P))) return -1;
    for (int64_t n = 0; n < q->n; n++) {
        ACC *dxn = dx + n * q->c * q->ivol;
        OPC_NN_GEMM(q->g, ck, P, q->og, w, q->og * ck, 1, dy + n * q->o * P, q->og * P, 0, NULL, 0,
                    direct ? dxn : col, NULL);
        if (direct) continue;
        memset(dxn, 0, sizeof(ACC) * q->c * q->ivol);
        for (int64_t g = 0; g < q->g; g++) OPC_NN_FN(cv_col2im)(col + g * ck * P, dxn + g * q->cg * q->ivol, P, q);
    }
    free(col);
    return 0;
}

/* dw = the filter gradient: per group, dy [og, n * P] @ col [ck, n * P]^T; -1 when out of memory. */
static int OPC_NN_FN(cv_filter_gemm)(const ACC *x, const ACC *dy, ACC *dw, const opc_cv_geom *q) {
    const int64_t ck = q->cg * q->kvol, P = q->ovol, NP = q->n * P;
    const int plain = opc_cv_pointwise(q) && q->n == 1;
    ACC *col = plain ? NULL : (ACC *)malloc(sizeof(ACC) * q->g * ck * NP);
    ACC *dyr = q->n == 1 ? NULL : (ACC *)malloc(sizeof(ACC) * q->o * NP);
    if ((!plain && !col) || (q->n != 1 && !dyr)) {
        free(col);
        free(dyr);
        return -1;
    }
    for (int64_t n = 0; n < q->n && col; n++)
        for (int64_t g = 0; g < q->g; g++)
            OPC_NN_FN(cv_im2col)(x + (n * q->c + g * q->cg) * q->ivol, col + g * ck * NP + n * P, NP, q);
    if (dyr) /* [n, o, P] -> [o, n, P]: each group's rows contiguous over all images */
        for (int64_t n = 0; n < q->n; n++)
            for (int64_t oc = 0; oc < q->o; oc++) memcpy(dyr + (oc * q->n + n) * P, dy + (n * q->o + oc) * P, sizeof(ACC) * P);
    OPC_NN_GEMM(q->g, q->og, ck, NP, dyr ? dyr : dy, q->og * NP, 0, col ? col : x, ck * NP, 1, NULL, 0, dw, NULL);
    free(col);
    free(dyr);
    return 0;
}

/* ---- the three ops for one dtype (dt a literal after inlining) ----------------------------- */

/* count elements of p widened to ACC (malloc'd), or NULL. */
OPC_NN_INLINE ACC *OPC_NN_FN(cv_widen)(const void *p, int64_t count, int dt) {
    ACC *out = (ACC *)malloc(sizeof(ACC) * (count > 0 ? count : 1));
    if (out)
        for (int64_t i = 0; i < count; i++) out[i] = LD(p, i, dt);
    return out;
}

/* Run the GEMM route `op` (0: conv, 1: input grad, 2: filter grad) on a, b -> r; 0 when it ran. */
OPC_NN_INLINE int OPC_NN_FN(cv_gemm_route)(int op, const void *a, int64_t na, const void *b, int64_t nb, void *r,
                                           int64_t nr, int dt, const opc_cv_geom *q) {
    if (OPC_NN_EXACT(dt)) {
        if (op == 0) return OPC_NN_FN(cv_fwd_gemm)((const ACC *)a, (const ACC *)b, (ACC *)r, q);
        if (op == 1) return OPC_NN_FN(cv_data_gemm)((const ACC *)a, (const ACC *)b, (ACC *)r, q);
        return OPC_NN_FN(cv_filter_gemm)((const ACC *)a, (const ACC *)b, (ACC *)r, q);
    }
    if (dt == OPC_NN_BF16 && op == 0) return opc_nn_cv_fwd_gemm_bf16((const uint16_t *)a, (const uint16_t *)b, (uint16_t *)r, q);
    ACC *wa = OPC_NN_FN(cv_widen)(a, na, dt), *wb = OPC_NN_FN(cv_widen)(b, nb, dt);
    ACC *wr = (ACC *)malloc(sizeof(ACC) * (nr > 0 ? nr : 1));
    int rc = -1;
    if (wa && wb && wr) {
        rc = op == 0 ? OPC_NN_FN(cv_fwd_gemm)(wa, wb, wr, q)
                     : op == 1 ? OPC_NN_FN(cv_data_gemm)(wa, wb, wr, q) : OPC_NN_FN(cv_filter_gemm)(wa, wb, wr, q);
        if (rc == 0)
            for (int64_t i = 0; i < nr; i++) ST(r, i, dt, wr[i]);
    }
    free(wa);
    free(wb);
    free(wr);
    return rc;
}

/* The GEMM route of `op` (0: conv, 1: input grad, 2: filter grad) where it applies (groups of more
 * than one input channel) and its scratch could be allocated: 1 when it ran. Otherwise the entry
 * points (opc_nn.h) run the direct units in parallel, where the dtype is a literal. */
OPC_NN_INLINE int OPC_NN_FN(conv_gemm)(int op, const void *a, const void *b, void *r, int dt, const opc_cv_geom *q) {
    if (q->cg == 1) return 0;
    const int64_t x = q->n * q->c * q->ivol, w = q->o * q->cg * q->kvol, y = q->n * q->o * q->ovol;
    const int64_t na = op == 1 ? y : x, nb = op == 0 ? w : op == 1 ? w : y, nr = op == 0 ? y : op == 1 ? x : w;
    static const int routes[3] = {OPC_ROUTE_CONV_IM2COL_GEMM, OPC_ROUTE_CONV_GRAD_INPUT_IM2COL_GEMM,
                                  OPC_ROUTE_CONV_GRAD_FILTER_IM2COL_GEMM};
    const int ran = OPC_NN_FN(cv_gemm_route)(op, a, na, b, nb, r, nr, dt, q) == 0;
    if (ran) opc_rt_route(routes[op]);
    return ran;
}

#undef ACC
#undef LD
#undef ST
