/* opc_nn_pool_body.h -- the bodies of opc's CPU pooling kernels, once per accumulator
 * family; NOT a normal header (opc_nn.h includes it twice, as opc_nn_conv_body.h).
 * Geometry: opc_nn_conv.h. The forward kernels compute each output from its window
 * (taps outside x are skipped: padding is never read); the grads scatter each plane's
 * outputs into that plane of dx, one plane per thread, in output order (deterministic). */

#define ACC OPC_NN_ACC
#define LD OPC_NN_LD
#define ST OPC_NN_ST

/* the flat output positions of one plane, as (o0, o1, o2) */
OPC_NN_INLINE void OPC_NN_FN(pl_pos)(const opc_pl_geom *q, int64_t j, int64_t *o) {
    o[2] = j % q->out[2];
    o[1] = (j / q->out[2]) % q->out[1];
    o[0] = j / (q->out[2] * q->out[1]);
}

/* max (NaN propagating, the first maximum kept) or sum of plane p's window at output j;
 * *arg: the maximum's index within the plane */
OPC_NN_INLINE ACC OPC_NN_FN(pl_window)(const void *x, int dt, const opc_pl_geom *q, int64_t p, int64_t j, int max,
                                       int64_t *arg) {
    int64_t o[3];
    OPC_NN_FN(pl_pos)(q, j, o);
    ACC acc = max ? (ACC)-INFINITY : 0;
    int64_t best = -1;
    for (int64_t t0 = 0; t0 < q->k[0]; t0++) {
        const int64_t i0 = o[0] * q->s[0] - q->pb[0] + t0 * q->d[0];
        if (i0 < 0 || i0 >= q->in[0]) continue;
        for (int64_t t1 = 0; t1 < q->k[1]; t1++) {
            const int64_t i1 = o[1] * q->s[1] - q->pb[1] + t1 * q->d[1];
            if (i1 < 0 || i1 >= q->in[1]) continue;
            for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                const int64_t i2 = o[2] * q->s[2] - q->pb[2] + t2 * q->d[2];
                if (i2 < 0 || i2 >= q->in[2]) continue;
                const int64_t at = (i0 * q->in[1] + i1) * q->in[2] + i2;
                const ACC v = LD(x, p * q->ivol + at, dt);
                if (!max) acc += v;
                else if (best < 0 || (acc == acc && (v > acc || v != v))) {
                    acc = v;
                    best = at;
                }
            }
        }
    }
    *arg = best;
    return acc;
}

/* Each kernel is a function of one unit of work (an output, a plane, a dx element); opc_nn.h's
 * entry points run the units in parallel, where the dtype is a literal. */
/* max_pool's output (o0, o1, o2) of plane p: pl_window's taps, order and NaN / first-maximum
 * rules, the taps' range along the row computed once (the row's edge outputs). */
OPC_NN_INLINE void OPC_NN_FN(max_pool_one)(const void *x, void *y, int64_t *idx, int dt, const opc_pl_geom *q,
                                           int64_t p, int64_t o0, int64_t o1, int64_t o2, int64_t e) {
    const int64_t base = p * q->ivol, s2 = q->s[2], d2 = q->d[2];
    ACC acc = (ACC)-INFINITY;
    int64_t best = -1;
    const int64_t start2 = o2 * s2 - q->pb[2];
    int64_t lo2 = start2 >= 0 ? 0 : (-start2 + d2 - 1) / d2, hi2 = (q->in[2] - start2 + d2 - 1) / d2;
    if (hi2 > q->k[2]) hi2 = q->k[2];
    for (int64_t t0 = 0; t0 < q->k[0]; t0++)
        for (int64_t t1 = 0; t1 < q->k[1]; t1++) {
            int64_t row;
            if (!opc_pl_window_row(q, o0, o1, t0, t1, &row)) continue;
            for (int64_t t2 = lo2; t2 < hi2; t2++) {
                const int64_t at = row + start2 + t2 * d2;
                const ACC v = LD(x, base + at, dt);
                const int take = best < 0 || (acc == acc && (v > acc || v != v));
                acc = take ? v : acc;
                best = take ? at : best;
            }
        }
    ST(y, e, dt, acc);
    if (idx) idx[e] = base + best; /* NULL: the values alone (opc_nn_max_pool_values_*) */
}

/* max_pool of one output row, unit u = (p * out0 + o0) * out1 + o1: f32 a vector of outputs at a
 * time (opc_cf_max_pool_row; the few edge outputs it leaves, output by output), else (or where its
 * buffer cannot hold the window) output by output. */
OPC_NN_INLINE void OPC_NN_FN(max_pool_row)(const void *x, void *y, int64_t *idx, int dt, const opc_pl_geom *q,
                                           int64_t u) {
    const int64_t o1 = u % q->out[1], o0 = (u / q->out[1]) % q->out[0], p = u / (q->out[1] * q->out[0]);
    const int64_t base = p * q->ivol, e0 = u * q->out[2];
    int64_t left = q->out[2], right = q->out[2]; /* [left, right): the outputs done by vectors */
    if (!(dt == OPC_NN_F32 && q->ivol < ((int64_t)1 << 31) && /* dt: a literal here */
          opc_cf_max_pool_row((const float *)x + base, (float *)y + e0, idx ? idx + e0 : NULL, base, q, o0,
                              o1, &left, &right)))
        left = right = q->out[2];
    for (int64_t o2 = 0; o2 < left; o2++) OPC_NN_FN(max_pool_one)(x, y, idx, dt, q, p, o0, o1, o2, e0 + o2);
    for (int64_t o2 = right; o2 < q->out[2]; o2++) OPC_NN_FN(max_pool_one)(x, y, idx, dt, q, p, o0, o1, o2, e0 + o2);
}

OPC_NN_INLINE void OPC_NN_FN(avg_pool)(const void *x, void *y, int dt, const opc_pl_geom *q, int64_t e) {
    int64_t arg, o[3];
    OPC_NN_FN(pl_pos)(q, e % q->ovol, o);
    const ACC sum = OPC_NN_FN(pl_window)(x, dt, q, e / q->ovol, e % q->ovol, 0, &arg);
    ST(y, e, dt, sum / (ACC)opc_pl_count(q, o));
}

/* avg_pool of one output row, unit u = (p * out0 + o0) * out1 + o1: f32 a vector of outputs at a
 * time (opc_cf_avg_pool_row, the same sums), else output by output. */
OPC_NN_INLINE void OPC_NN_FN(avg_pool_row)(const void *x, void *y, int dt, const opc_pl_geom *q, int64_t u) {
    const int64_t o1 = u % q->out[1], o0 = (u / q->out[1]) % q->out[0], p = u / (q->out[1] * q->out[0]);
    const int64_t e0 = u * q->out[2];
    if (dt == OPC_NN_F32 && q->ivol < ((int64_t)1 << 31) && /* dt: a literal here */
        opc_cf_avg_pool_row((const float *)x + p * q->ivol, (float *)y + e0, q, o0, o1))
        return;
    for (int64_t o2 = 0; o2 < q->out[2]; o2++) OPC_NN_FN(avg_pool)(x, y, dt, q, e0 + o2);
}

/* dx = 0, then dx[indices] += dout plane by plane (accumulated in ACC, stored once). */
OPC_NN_INLINE void OPC_NN_FN(max_pool_grad)(const int64_t *idx, const void *dout, void *dx, int64_t *record,
                                            int64_t code, int dt, const opc_pl_geom *q, int64_t p) {
    {
        ACC acc[OPC_CV_TILE];
        /* tiles of the plane: each tile scans the plane's outputs for the indices it holds */
        for (int64_t t0 = 0; t0 < q->ivol; t0 += OPC_CV_TILE) {
            const int64_t tn = q->ivol - t0 < OPC_CV_TILE ? q->ivol - t0 : OPC_CV_TILE;
            for (int64_t j = 0; j < tn; j++) acc[j] = 0;
            for (int64_t j = 0; j < q->ovol; j++) {
                const int64_t e = p * q->ovol + j, at = idx[e] - p * q->ivol;
                if (at < 0 || at >= q->ivol) {
                    if (t0 == 0) opc_status_fail(record, code, idx[e]);
                    continue;
                }
                if (at >= t0 && at < t0 + tn) acc[at - t0] += LD(dout, e, dt);
            }
            for (int64_t j = 0; j < tn; j++) ST(dx, p * q->ivol + t0 + j, dt, acc[j]);
        }
    }
}

/* dx[i] = sum over the windows holding i of dout / their divisor (a gather: no scratch). */
OPC_NN_INLINE void OPC_NN_FN(avg_pool_grad)(const void *dout, void *dx, int dt, const opc_pl_geom *q, int64_t e) {
    {
        const int64_t p = e / q->ivol, r = e % q->ivol;
        const int64_t i[3] = {r / (q->in[1] * q->in[2]), (r / q->in[2]) % q->in[1], r % q->in[2]};
        ACC acc = 0;
        for (int64_t t0 = 0; t0 < q->k[0]; t0++) {
            const int64_t n0 = i[0] + q->pb[0] - t0 * q->d[0];
            if (n0 < 0 || n0 % q->s[0] || n0 / q->s[0] >= q->out[0]) continue;
            for (int64_t t1 = 0; t1 < q->k[1]; t1++) {
                const int64_t n1 = i[1] + q->pb[1] - t1 * q->d[1];
                if (n1 < 0 || n1 % q->s[1] || n1 / q->s[1] >= q->out[1]) continue;
                for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                    const int64_t n2 = i[2] + q->pb[2] - t2 * q->d[2];
                    if (n2 < 0 || n2 % q->s[2] || n2 / q->s[2] >= q->out[2]) continue;
                    const int64_t o[3] = {n0 / q->s[0], n1 / q->s[1], n2 / q->s[2]};
                    acc += LD(dout, p * q->ovol + (o[0] * q->out[1] + o[1]) * q->out[2] + o[2], dt) /
                           (ACC)opc_pl_count(q, o);
                }
            }
        }
        ST(dx, e, dt, acc);
    }
}

#undef ACC
#undef LD
#undef ST
