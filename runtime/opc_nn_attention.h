/* opc_nn_attention.h -- the body of opc.attention and opc.attention_grad on the CPU, written
 * once for an accumulator type. NOT a normal header: opc_nn.h includes it once per precision
 * family, like opc_nn_rows.h (OPC_NN_ACC, OPC_NN_FN, OPC_NN_LD, OPC_NN_ST, OPC_NN_EXP, OPC_NN_LOG).
 *
 * Flash-attention's scheme: the [Lq, Lk] score matrix is never stored. The forward's unit is
 * one block of OPC_AT_BQ query rows of one batch entry; it walks the keys in blocks of
 * OPC_AT_BK with an online softmax (running max m, running sum l, the output accumulator
 * rescaled by exp(m_old - m_new) when the max grows) and saves lse = m + log(l) per row.
 * The backward recomputes p = exp(s - lse) block by block: pass 1, per query block, gives dq;
 * pass 2, per key block, gives dk and dv (each output written by one unit: no atomics).
 *
 * Every inner loop runs along a unit-stride scratch row (keys of a block, or features) under
 * `omp simd`: the key block is transposed into kt[d][BK] so that a query row's scores are
 * BK-wide multiply-adds, and p v / ds k are rows of v / k scaled and added. Scores are
 * (q . k) * scale + mask, in the order of the composite rule; a row whose scores are all -inf
 * gives NaN (out and lse), as softmax does.
 */

#ifndef OPC_NN_ATTENTION_SHARED
#define OPC_NN_ATTENTION_SHARED
#include <stdlib.h>

#define OPC_AT_BQ 32 /* query rows per unit */
#define OPC_AT_BK 64 /* keys per block: a score row of a block is 64 lanes */
#define OPC_AT_MAX_BATCH 6

/* The geometry: bh batch entries (the product of the batch dims), lengths, feature dims, flags,
 * and the additive mask's layout: its offset for a batch entry is sum of (index along batch dim
 * t) * mstr[t] over the nb batch dims of size dims[t] (mstr 0 where the mask broadcasts), then
 * i * mrow + j * mcol (0 where it broadcasts along queries or keys). */
typedef struct {
    int64_t bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb;
    int64_t dims[OPC_AT_MAX_BATCH], mstr[OPC_AT_MAX_BATCH];
    double scale;
} opc_at_geom;

#define OPC_AT_GEOM_PARAMS                                                                                   \
    int64_t bh, int64_t lq, int64_t lk, int64_t d, int64_t dv, int64_t causal, int64_t has_mask, int64_t mrow, \
        int64_t mcol, int64_t nb, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t n4, int64_t n5,       \
        int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5, double scale
#define OPC_AT_GEOM_INIT                                                                                     \
    {bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb, {n0, n1, n2, n3, n4, n5}, {s0, s1, s2, s3, s4, s5}, scale}

static inline __attribute__((unused)) int64_t opc_at_mask_offset(const opc_at_geom *g, int64_t b) {
    int64_t at = 0;
    for (int64_t t = g->nb - 1; t >= 0; t--) {
        at += (b % g->dims[t]) * g->mstr[t];
        b /= g->dims[t];
    }
    return at;
}

/* Entry points: forward units (batch entry, query block); the grad's pass 1 over the same units
 * (dq), then pass 2 over (batch entry, key block) units (dk, dv). No mask: `mask` is any pointer,
 * never read. */
#define OPC_NN_ATTENTION_ENTRIES(SUF, T, A, F, DT)                                                            \
    OPC_NN_ENTRY void opc_nn_attention_##SUF(const T *q, const T *k, const T *v, const T *mask, T *out, A *lse, \
                                             OPC_AT_GEOM_PARAMS) {                                             \
        const opc_at_geom g = OPC_AT_GEOM_INIT;                                                                \
        OPC_NN_FOR_UNITS(bh * ((lq + OPC_AT_BQ - 1) / OPC_AT_BQ), bh * lq * lk * (d + dv),                     \
                         opc_nn_attention_##F(q, k, v, mask, out, lse, &g, opc_u, DT));                        \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_attention_grad_##SUF(const T *q, const T *k, const T *v, const T *out, const A *lse, \
                                                  const T *dout, const T *mask, T *dq, T *dk, T *dv_,          \
                                                  OPC_AT_GEOM_PARAMS) {                                        \
        const opc_at_geom g = OPC_AT_GEOM_INIT;                                                                \
        OPC_NN_FOR_UNITS(bh * ((lq + OPC_AT_BQ - 1) / OPC_AT_BQ), bh * lq * lk * (d + dv),                     \
                         opc_nn_attention_grad_q_##F(q, k, v, mask, out, lse, dout, dq, &g, opc_u, DT));       \
        OPC_NN_FOR_UNITS(bh * ((lk + OPC_AT_BK - 1) / OPC_AT_BK), bh * lq * lk * (d + dv),                     \
                         opc_nn_attention_grad_kv_##F(q, k, v, mask, out, lse, dout, dk, dv_, &g, opc_u, DT)); \
    }
#endif

#define ACC OPC_NN_ACC
#define LD OPC_NN_LD
#define ST OPC_NN_ST

/* Unit u's scratch: (rows x d) queries, kt (d x BK), kb (BK x d), vt (dv x BK), vb (BK x dv),
 * s (rows x BK), acc (rows x max(d, dv)) -- one allocation. NULL if malloc fails. */
OPC_NN_INLINE ACC *OPC_NN_FN(at_scratch)(const opc_at_geom *g) {
    const int64_t w = g->d > g->dv ? g->d : g->dv;
    return (ACC *)malloc(sizeof(ACC) * (size_t)(OPC_AT_BQ * g->d + 2 * OPC_AT_BK * g->d + 2 * OPC_AT_BK * g->dv
                                                + OPC_AT_BQ * OPC_AT_BK + OPC_AT_BQ * w + 2 * OPC_AT_BQ));
}

/* The key block j0 (cols keys, zero-padded to BK) of batch entry b: kt[dd][jj], kb[jj][dd], and
 * v likewise (vt, vb), in the compute type. */
OPC_NN_INLINE void OPC_NN_FN(at_load_keys)(const void *k, const void *v, const opc_at_geom *g, int64_t b,
                                           int64_t j0, int64_t cols, ACC *kt, ACC *kb, ACC *vt, ACC *vb, int dt) {
    const int64_t d = g->d, dv = g->dv;
    for (int64_t jj = 0; jj < OPC_AT_BK; jj++) {
        const int64_t kr = (b * g->lk + j0 + jj) * d, vr = (b * g->lk + j0 + jj) * dv;
        for (int64_t dd = 0; dd < d; dd++) {
            const ACC x = jj < cols ? LD(k, kr + dd, dt) : (ACC)0;
            kt[dd * OPC_AT_BK + jj] = x;
            if (kb) kb[jj * d + dd] = x;
        }
        for (int64_t c = 0; c < dv; c++) {
            const ACC x = jj < cols ? LD(v, vr + c, dt) : (ACC)0;
            if (vt) vt[c * OPC_AT_BK + jj] = x;
            if (vb) vb[jj * dv + c] = x;
        }
    }
}

/* s[jj] = (q_row . k_{j0+jj}) * scale + mask, -inf for keys past the block or hidden by is_causal. */
OPC_NN_INLINE void OPC_NN_FN(at_scores)(const ACC *qrow, const ACC *kt, const void *mask, const opc_at_geom *g,
                                        int64_t b, int64_t i, int64_t j0, int64_t cols, ACC *s, int dt) {
    const ACC scale = (ACC)g->scale;
    _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) s[jj] = 0;
    for (int64_t dd = 0; dd < g->d; dd++) {
        const ACC a = qrow[dd];
        const ACC *kr = kt + dd * OPC_AT_BK;
        _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) s[jj] += a * kr[jj];
    }
    _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) s[jj] *= scale;
    if (g->has_mask) {
        const int64_t at = opc_at_mask_offset(g, b) + i * g->mrow + j0 * g->mcol;
        if (g->mcol)
            _Pragma("omp simd") for (int jj = 0; jj < cols; jj++) s[jj] += LD(mask, at + jj, dt);
        else {
            const ACC m = LD(mask, at, dt);
            _Pragma("omp simd") for (int jj = 0; jj < cols; jj++) s[jj] += m;
        }
    }
    const int64_t visible = g->causal ? (i - j0 + 1 < cols ? i - j0 + 1 : cols) : cols;
    for (int64_t jj = visible < 0 ? 0 : visible; jj < OPC_AT_BK; jj++) s[jj] = (ACC)-INFINITY;
}

/* The keys a query block [i0, i0 + rows) sees at all: all, or with is_causal up to its last row. */
OPC_NN_INLINE int64_t OPC_NN_FN(at_key_end)(const opc_at_geom *g, int64_t last_row) {
    return g->causal && last_row + 1 < g->lk ? last_row + 1 : g->lk;
}

/* ---- forward: unit u = (batch entry, query block) -------------------------------------------- */
OPC_NN_INLINE void OPC_NN_FN(attention)(const void *q, const void *k, const void *v, const void *mask, void *out,
                                        ACC *lse, const opc_at_geom *g, int64_t u, int dt) {
    const int64_t qblocks = (g->lq + OPC_AT_BQ - 1) / OPC_AT_BQ, d = g->d, dv = g->dv;
    const int64_t b = u / qblocks, i0 = (u % qblocks) * OPC_AT_BQ;
    const int64_t rows = g->lq - i0 < OPC_AT_BQ ? g->lq - i0 : OPC_AT_BQ;
    ACC *buf = OPC_NN_FN(at_scratch)(g);
    if (!buf) { /* no memory for the scratch: NaN, never a silent wrong number */
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < dv; c++) ST(out, (b * g->lq + i0 + r) * dv + c, dt, (ACC)NAN);
            lse[b * g->lq + i0 + r] = (ACC)NAN;
        }
        return;
    }
    ACC *qs = buf, *kt = qs + OPC_AT_BQ * d, *vb = kt + 2 * OPC_AT_BK * d, *s = vb + 2 * OPC_AT_BK * dv;
    ACC *acc = s + OPC_AT_BQ * OPC_AT_BK, *m = acc + OPC_AT_BQ * (d > dv ? d : dv), *l = m + OPC_AT_BQ;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t dd = 0; dd < d; dd++) qs[r * d + dd] = LD(q, (b * g->lq + i0 + r) * d + dd, dt);
        for (int64_t c = 0; c < dv; c++) acc[r * dv + c] = 0;
        m[r] = (ACC)-INFINITY;
        l[r] = 0;
    }
    const int64_t kend = OPC_NN_FN(at_key_end)(g, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < kend; j0 += OPC_AT_BK) {
        const int64_t cols = kend - j0 < OPC_AT_BK ? kend - j0 : OPC_AT_BK;
        OPC_NN_FN(at_load_keys)(k, v, g, b, j0, cols, kt, NULL, NULL, vb, dt);
        for (int64_t r = 0; r < rows; r++) {
            ACC *sr = s + r * OPC_AT_BK, *ar = acc + r * dv;
            OPC_NN_FN(at_scores)(qs + r * d, kt, mask, g, b, i0 + r, j0, cols, sr, dt);
            ACC mb = (ACC)-INFINITY;
            for (int jj = 0; jj < OPC_AT_BK; jj++) mb = OPC_NN_MAX(mb, sr[jj]);
            const ACC mnew = OPC_NN_MAX(m[r], mb);
            if (mnew == (ACC)-INFINITY) continue; /* every key so far hidden: nothing to add yet */
            const ACC alpha = OPC_NN_EXP(m[r] - mnew);
            ACC sum = 0;
            _Pragma("omp simd reduction(+ : sum)") for (int jj = 0; jj < OPC_AT_BK; jj++) {
                sr[jj] = OPC_NN_EXP(sr[jj] - mnew);
                sum += sr[jj];
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            _Pragma("omp simd") for (int64_t c = 0; c < dv; c++) ar[c] *= alpha;
            for (int64_t jj = 0; jj < cols; jj++) {
                const ACC p = sr[jj];
                const ACC *vr = vb + jj * dv;
                _Pragma("omp simd") for (int64_t c = 0; c < dv; c++) ar[c] += p * vr[c];
            }
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t row = b * g->lq + i0 + r;
        const int hidden = m[r] == (ACC)-INFINITY; /* all scores -inf: softmax's 0 / 0 */
        const ACC inv = hidden ? (ACC)NAN : (ACC)1 / l[r];
        for (int64_t c = 0; c < dv; c++) ST(out, row * dv + c, dt, acc[r * dv + c] * inv);
        lse[row] = hidden ? (ACC)NAN : m[r] + OPC_NN_LOG(l[r]);
    }
    free(buf);
}

/* ---- backward ----------------------------------------------------------------------------------- */
/* p and ds of one query row against a key block: p = exp(s - lse), ds = p * (dout . v - delta) */
OPC_NN_INLINE void OPC_NN_FN(at_row_grad)(const ACC *qrow, const ACC *dorow, const ACC *kt, const ACC *vt,
                                          const void *mask, const opc_at_geom *g, int64_t b, int64_t i, int64_t j0,
                                          int64_t cols, ACC lse_i, ACC delta_i, ACC *p, ACC *ds, int dt) {
    OPC_NN_FN(at_scores)(qrow, kt, mask, g, b, i, j0, cols, p, dt);
    _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) {
        p[jj] = OPC_NN_EXP(p[jj] - lse_i);
        ds[jj] = 0;
    }
    for (int64_t c = 0; c < g->dv; c++) {
        const ACC a = dorow[c];
        const ACC *vr = vt + c * OPC_AT_BK;
        _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) ds[jj] += a * vr[jj];
    }
    _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) ds[jj] = p[jj] * (ds[jj] - delta_i);
}

/* pass 1, unit u = (batch entry, query block): dq = sum over key blocks of ds k, times scale */
OPC_NN_INLINE void OPC_NN_FN(attention_grad_q)(const void *q, const void *k, const void *v, const void *mask,
                                               const void *out, const ACC *lse, const void *dout, void *dq,
                                               const opc_at_geom *g, int64_t u, int dt) {
    const int64_t qblocks = (g->lq + OPC_AT_BQ - 1) / OPC_AT_BQ, d = g->d, dv = g->dv;
    const int64_t b = u / qblocks, i0 = (u % qblocks) * OPC_AT_BQ;
    const int64_t rows = g->lq - i0 < OPC_AT_BQ ? g->lq - i0 : OPC_AT_BQ;
    ACC *buf = OPC_NN_FN(at_scratch)(g);
    ACC *dor = buf ? (ACC *)malloc(sizeof(ACC) * (size_t)(OPC_AT_BQ * dv)) : NULL;
    if (!dor) {
        for (int64_t x = 0; x < rows * d; x++) ST(dq, (b * g->lq + i0) * d + x, dt, (ACC)NAN);
        free(buf);
        return;
    }
    ACC *qs = buf, *kt = qs + OPC_AT_BQ * d, *kb = kt + OPC_AT_BK * d, *vt = kb + OPC_AT_BK * d;
    ACC *s = vt + 2 * OPC_AT_BK * dv, *ds = s + OPC_AT_BK, *acc = s + OPC_AT_BQ * OPC_AT_BK;
    ACC *delta = acc + OPC_AT_BQ * (d > dv ? d : dv);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t row = b * g->lq + i0 + r;
        for (int64_t dd = 0; dd < d; dd++) {
            qs[r * d + dd] = LD(q, row * d + dd, dt);
            acc[r * d + dd] = 0;
        }
        delta[r] = 0;
        for (int64_t c = 0; c < dv; c++) {
            dor[r * dv + c] = LD(dout, row * dv + c, dt);
            delta[r] += dor[r * dv + c] * LD(out, row * dv + c, dt);
        }
    }
    const int64_t kend = OPC_NN_FN(at_key_end)(g, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < kend; j0 += OPC_AT_BK) {
        const int64_t cols = kend - j0 < OPC_AT_BK ? kend - j0 : OPC_AT_BK;
        OPC_NN_FN(at_load_keys)(k, v, g, b, j0, cols, kt, kb, vt, NULL, dt);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t row = b * g->lq + i0 + r;
            OPC_NN_FN(at_row_grad)(qs + r * d, dor + r * dv, kt, vt, mask, g, b, i0 + r, j0, cols, lse[row],
                                   delta[r], s, ds, dt);
            ACC *ar = acc + r * d;
            for (int64_t jj = 0; jj < cols; jj++) {
                const ACC c = ds[jj];
                const ACC *kr = kb + jj * d;
                _Pragma("omp simd") for (int64_t dd = 0; dd < d; dd++) ar[dd] += c * kr[dd];
            }
        }
    }
    const ACC scale = (ACC)g->scale;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t dd = 0; dd < d; dd++) ST(dq, (b * g->lq + i0 + r) * d + dd, dt, acc[r * d + dd] * scale);
    free(dor);
    free(buf);
}

/* pass 2, unit u = (batch entry, key block): dv = sum over query rows of p^T dout, dk = ds^T q * scale */
OPC_NN_INLINE void OPC_NN_FN(attention_grad_kv)(const void *q, const void *k, const void *v, const void *mask,
                                                const void *out, const ACC *lse, const void *dout, void *dk,
                                                void *dvo, const opc_at_geom *g, int64_t u, int dt) {
    const int64_t kblocks = (g->lk + OPC_AT_BK - 1) / OPC_AT_BK, d = g->d, dv = g->dv;
    const int64_t b = u / kblocks, j0 = (u % kblocks) * OPC_AT_BK;
    const int64_t cols = g->lk - j0 < OPC_AT_BK ? g->lk - j0 : OPC_AT_BK;
    ACC *buf = OPC_NN_FN(at_scratch)(g);
    ACC *acc = buf ? (ACC *)malloc(sizeof(ACC) * (size_t)(OPC_AT_BK * (d + dv))) : NULL;
    if (!acc) {
        for (int64_t x = 0; x < cols * d; x++) ST(dk, (b * g->lk + j0) * d + x, dt, (ACC)NAN);
        for (int64_t x = 0; x < cols * dv; x++) ST(dvo, (b * g->lk + j0) * dv + x, dt, (ACC)NAN);
        free(buf);
        return;
    }
    ACC *qi = buf, *kt = qi + OPC_AT_BQ * d, *vt = kt + 2 * OPC_AT_BK * d, *p = vt + 2 * OPC_AT_BK * dv;
    ACC *ds = p + OPC_AT_BK, *doi = p + OPC_AT_BQ * OPC_AT_BK;
    ACC *dka = acc, *dva = acc + OPC_AT_BK * d;
    for (int64_t x = 0; x < OPC_AT_BK * (d + dv); x++) acc[x] = 0;
    OPC_NN_FN(at_load_keys)(k, v, g, b, j0, cols, kt, NULL, vt, NULL, dt);
    /* with is_causal, query i sees key j only if j <= i: the block's keys are unseen above row j0 */
    for (int64_t i = g->causal ? j0 : 0; i < g->lq; i++) {
        const int64_t row = b * g->lq + i;
        for (int64_t dd = 0; dd < d; dd++) qi[dd] = LD(q, row * d + dd, dt);
        ACC delta = 0; /* rowsum(dout * out), recomputed: dv multiply-adds against the row's 2 BK (d + dv) */
        for (int64_t c = 0; c < dv; c++) {
            doi[c] = LD(dout, row * dv + c, dt);
            delta += doi[c] * LD(out, row * dv + c, dt);
        }
        OPC_NN_FN(at_row_grad)(qi, doi, kt, vt, mask, g, b, i, j0, cols, lse[row], delta, p, ds, dt);
        for (int64_t jj = 0; jj < cols; jj++) {
            const ACC pj = p[jj], sj = ds[jj];
            ACC *va = dva + jj * dv, *ka = dka + jj * d;
            _Pragma("omp simd") for (int64_t c = 0; c < dv; c++) va[c] += pj * doi[c];
            _Pragma("omp simd") for (int64_t dd = 0; dd < d; dd++) ka[dd] += sj * qi[dd];
        }
    }
    const ACC scale = (ACC)g->scale;
    for (int64_t jj = 0; jj < cols; jj++) {
        for (int64_t dd = 0; dd < d; dd++) ST(dk, (b * g->lk + j0 + jj) * d + dd, dt, dka[jj * d + dd] * scale);
        for (int64_t c = 0; c < dv; c++) ST(dvo, (b * g->lk + j0 + jj) * dv + c, dt, dva[jj * dv + c]);
    }
    free(acc);
    free(buf);
}

#undef ACC
#undef LD
#undef ST
