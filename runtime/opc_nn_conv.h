/* opc_nn_conv.h -- the geometry of opc's CPU convolutions (opc_nn_conv_body.h holds the kernels).
 *
 * Entry points (opc_nn.h; T = f32, f64, f16, bf16):
 *   opc_nn_conv_T(x, w, y, GEOM)               y  = conv(x, w)
 *   opc_nn_conv_grad_input_T(dy, w, dx, GEOM)  dx = the input gradient (= conv_transpose(dy, w))
 *   opc_nn_conv_grad_filter_T(x, dy, dw, GEOM) dw = the filter gradient
 * GEOM is 22 integers describing the forward conv x [n, c, *in] * w [o, c / group, *k]
 * -> y [n, o, *out]: n, c, o, group, in[3], out[3], k[3], strides[3], dilations[3],
 * the begin pads[3] (the end pads follow from out). Convs of 1 or 2 spatial dims
 * pass 1 (pads 0) for the leading ones. conv_transpose(x, w) is conv_grad_input
 * with x as dy: one kernel serves both.
 */
#ifndef OPC_NN_CONV_H
#define OPC_NN_CONV_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OPC_CV_TILE 256 /* outputs along the innermost dim accumulated together by the direct loops */

typedef struct {
    int64_t n, c, o, g, cg, og;
    int64_t in[3], out[3], k[3], s[3], d[3], p[3];
    int64_t ivol, ovol, kvol;
} opc_cv_geom;

#define OPC_CV_GEOM_PARAMS                                                                                  \
    int64_t n, int64_t c, int64_t o, int64_t g, int64_t i0, int64_t i1, int64_t i2, int64_t o0, int64_t o1, \
        int64_t o2, int64_t k0, int64_t k1, int64_t k2, int64_t s0, int64_t s1, int64_t s2, int64_t d0,     \
        int64_t d1, int64_t d2, int64_t p0, int64_t p1, int64_t p2
#define OPC_CV_GEOM_ARGS n, c, o, g, i0, i1, i2, o0, o1, o2, k0, k1, k2, s0, s1, s2, d0, d1, d2, p0, p1, p2

/* A conv's epilogue (opc_loops.call's epilogue region, outlined by the C emitter): run on outputs
 * [r0, r1) x [c0, c1) of y seen as [n * o, ovol] (row n * o + channel, column the spatial offset),
 * each once, after the conv stored them; the kernels call it on each finished block while it is in
 * cache, the others once per row after the conv. Same signature as opc_gemm_api.h's GEMM epilogue. */
typedef void (*opc_cv_epilogue)(void *ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* A thread's outputs stored but not yet through the epilogue: blocks of the same rows with consecutive
 * columns are joined (up to OPC_CV_EP_BATCH outputs, still in L2) so that the epilogue's loops run
 * long rows, not a tile's 32 columns. opc_cv_ep_add passes the pending block to ep when a block does
 * not join it; the thread's opc_cv_ep_flush after its last block passes the rest. */
#define OPC_CV_EP_BATCH 16384
typedef struct {
    int64_t r0, r1, c0, c1;
} opc_cv_pending;

static inline void opc_cv_ep_flush(opc_cv_epilogue ep, void *ctx, opc_cv_pending *pd) {
    if (ep && pd->r1 > pd->r0 && pd->c1 > pd->c0) ep(ctx, pd->r0, pd->r1, pd->c0, pd->c1);
    pd->r1 = pd->r0;
}

static inline void opc_cv_ep_add(opc_cv_epilogue ep, void *ctx, opc_cv_pending *pd, int64_t r0, int64_t r1,
                                 int64_t c0, int64_t c1) {
    if (!ep) return;
    if (pd->r1 > pd->r0 && pd->r0 == r0 && pd->r1 == r1 && pd->c1 == c0 &&
        (c1 - pd->c0) * (r1 - r0) <= OPC_CV_EP_BATCH) {
        pd->c1 = c1;
        return;
    }
    opc_cv_ep_flush(ep, ctx, pd);
    pd->r0 = r0, pd->r1 = r1, pd->c0 = c0, pd->c1 = c1;
}

static inline opc_cv_geom opc_cv_make(OPC_CV_GEOM_PARAMS) {
    opc_cv_geom q = {n, c, o, g, c / g, o / g, {i0, i1, i2}, {o0, o1, o2}, {k0, k1, k2},
                     {s0, s1, s2}, {d0, d1, d2}, {p0, p1, p2}, i0 * i1 * i2, o0 * o1 * o2, k0 * k1 * k2};
    return q;
}

/* The outputs [*lo, *hi) of a dim whose input index o * s + off lies in [0, in). */
static inline void opc_cv_range(int64_t in, int64_t out, int64_t s, int64_t off, int64_t *lo, int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = off > in - 1 ? 0 : (in - 1 - off) / s + 1;
    if (b > out) b = out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* The kernel offsets (k0, k1, k2) of the flat kernel index kk. */
static inline void opc_cv_split(const opc_cv_geom *q, int64_t kk, int64_t *k) {
    k[2] = kk % q->k[2];
    k[1] = (kk / q->k[2]) % q->k[1];
    k[0] = kk / (q->k[2] * q->k[1]);
}

/* BODY for each tap of output position (o0, o1, o2) that lies inside the input, with POS its input
 * position (flat in a plane) and KK its flat kernel index; taps in the padding add zeros and are
 * skipped. Loops, not divisions: the channels-last kernels run it per output position. */
#define OPC_CV_FOR_TAPS_INSIDE(q, o0, o1, o2, POS, KK, BODY)                                                  \
    for (int64_t opc_k0 = 0; opc_k0 < (q)->k[0]; opc_k0++) {                                                 \
        const int64_t opc_i0 = (o0) * (q)->s[0] + opc_k0 * (q)->d[0] - (q)->p[0];                            \
        if (opc_i0 < 0 || opc_i0 >= (q)->in[0]) continue;                                                    \
        for (int64_t opc_k1 = 0; opc_k1 < (q)->k[1]; opc_k1++) {                                             \
            const int64_t opc_i1 = (o1) * (q)->s[1] + opc_k1 * (q)->d[1] - (q)->p[1];                        \
            if (opc_i1 < 0 || opc_i1 >= (q)->in[1]) continue;                                                \
            for (int64_t opc_k2 = 0; opc_k2 < (q)->k[2]; opc_k2++) {                                         \
                const int64_t opc_i2 = (o2) * (q)->s[2] + opc_k2 * (q)->d[2] - (q)->p[2];                    \
                if (opc_i2 < 0 || opc_i2 >= (q)->in[2]) continue;                                            \
                const int64_t POS = (opc_i0 * (q)->in[1] + opc_i1) * (q)->in[2] + opc_i2;                    \
                const int64_t KK = (opc_k0 * (q)->k[1] + opc_k1) * (q)->k[2] + opc_k2;                       \
                BODY;                                                                                        \
            }                                                                                                \
        }                                                                                                    \
    }

/* Outputs per channel up to which a conv's GEMM runs transposed (opc_nn.h's opc_nn_conv_few): a few
 * rows for the GEMM's few-rows kernel instead of a few columns. */
#define OPC_NN_FEW_POSITIONS 8

/* The 1x1, stride 1, unpadded conv: its im2col matrix is x itself. */
static inline int opc_cv_pointwise(const opc_cv_geom *q) {
    for (int d = 0; d < 3; d++)
        if (q->k[d] != 1 || q->s[d] != 1 || q->p[d] != 0 || q->in[d] != q->out[d]) return 0;
    return 1;
}

/* Pooling (opc_nn_pool_body.h): POOL is 23 integers: planes (n * c), in[3], out[3], kernel[3],
 * strides[3], dilations[3], pads begin[3], pads end[3], count_include_pad:
 *   opc_nn_max_pool_T(x, y, indices, POOL)          indices flattened into x (int64)
 *   opc_nn_max_pool_grad_T(indices, dout, dx, record, POOL, code)   an index outside its own
 *                                   plane fails the status record with `code` and is skipped
 *   opc_nn_avg_pool_T(x, y, POOL), opc_nn_avg_pool_grad_T(dout, dx, POOL) */
typedef struct {
    int64_t planes, in[3], out[3], k[3], s[3], d[3], pb[3], pe[3], include_pad;
    int64_t ivol, ovol;
} opc_pl_geom;

#define OPC_PL_GEOM_PARAMS                                                                                       \
    int64_t planes, int64_t i0, int64_t i1, int64_t i2, int64_t o0, int64_t o1, int64_t o2, int64_t k0,         \
        int64_t k1, int64_t k2, int64_t s0, int64_t s1, int64_t s2, int64_t d0, int64_t d1, int64_t d2,         \
        int64_t b0, int64_t b1, int64_t b2, int64_t e0, int64_t e1, int64_t e2, int64_t include_pad
#define OPC_PL_GEOM_ARGS planes, i0, i1, i2, o0, o1, o2, k0, k1, k2, s0, s1, s2, d0, d1, d2, b0, b1, b2, e0, e1, e2, \
    include_pad

static inline opc_pl_geom opc_pl_make(OPC_PL_GEOM_PARAMS) {
    opc_pl_geom q = {planes, {i0, i1, i2}, {o0, o1, o2}, {k0, k1, k2}, {s0, s1, s2}, {d0, d1, d2},
                     {b0, b1, b2}, {e0, e1, e2}, include_pad, i0 * i1 * i2, o0 * o1 * o2};
    return q;
}

/* Window row (t0, t1) of the windows of output row (o0, o1): 1 and *row = the flat index of its
 * x[i0, i1, 0] in the plane where it lies inside x, else 0. */
static inline int opc_pl_window_row(const opc_pl_geom *q, int64_t o0, int64_t o1, int64_t t0, int64_t t1,
                                    int64_t *row) {
    const int64_t i0 = o0 * q->s[0] - q->pb[0] + t0 * q->d[0];
    const int64_t i1 = o1 * q->s[1] - q->pb[1] + t1 * q->d[1];
    *row = (i0 * q->in[1] + i1) * q->in[2];
    return i0 >= 0 && i0 < q->in[0] && i1 >= 0 && i1 < q->in[1];
}

/* Along dim d, the taps of a window starting at input index `start` that avg_pool counts: those
 * inside x, or with include_pad inside the padded input [-pb, in + pe). */
static inline int64_t opc_pl_taps(const opc_pl_geom *q, int d, int64_t start) {
    const int64_t lo = q->include_pad ? -q->pb[d] : 0, hi = q->include_pad ? q->in[d] + q->pe[d] : q->in[d];
    if (start >= lo && start + (q->k[d] - 1) * q->d[d] < hi) return q->k[d]; /* all of them (most windows) */
    int64_t taps = 0;
    for (int64_t t = 0; t < q->k[d]; t++) {
        const int64_t i = start + t * q->d[d];
        taps += i >= lo && i < hi;
    }
    return taps;
}

/* The divisor of avg_pool's window at output position o (3 dims): its taps along each dim. */
static inline int64_t opc_pl_count(const opc_pl_geom *q, const int64_t *o) {
    int64_t count = 1;
    for (int d = 0; d < 3; d++) count *= opc_pl_taps(q, d, o[d] * q->s[d] - q->pb[d]);
    return count;
}

/* col[r, p] (rows r = cc * kvol + kk, leading dim ld) of one image's group xg [cg, *in], as a
 * function NAME of element type E: the families' ACC (opc_nn_conv_body.h) and uint16_t (bf16's bits,
 * opc_nn_cv_fwd_gemm_bf16). */
#define OPC_CV_IM2COL(NAME, E)                                                                                 \
static void NAME(const E *xg, E *col, int64_t ld, const opc_cv_geom *q) {                                      \
    const int64_t rows = q->cg * q->kvol, plane = q->out[1] * q->out[2];                                       \
    _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(rows, rows * q->ovol, OPC_NN_PAR_MIN / 8)) if (rows * q->ovol >= opc_par_min(OPC_NN_PAR_MIN)) num_threads(opc_num_threads())") \
    for (int64_t r = 0; r < rows; r++) {                                                                       \
        int64_t k[3], lo[3], hi[3], off[3];                                                                    \
        opc_cv_split(q, r % q->kvol, k);                                                                       \
        for (int d = 0; d < 3; d++) {                                                                          \
            off[d] = k[d] * q->d[d] - q->p[d];                                                                 \
            opc_cv_range(q->in[d], q->out[d], q->s[d], off[d], &lo[d], &hi[d]);                                \
        }                                                                                                      \
        const E *xc = xg + (r / q->kvol) * q->ivol;                                                            \
        E *row = col + r * ld;                                                                                 \
        for (int64_t o0 = 0; o0 < q->out[0]; o0++) {                                                           \
            if (o0 < lo[0] || o0 >= hi[0]) {                                                                   \
                memset(row + o0 * plane, 0, sizeof(E) * plane);                                                \
                continue;                                                                                      \
            }                                                                                                  \
            for (int64_t o1 = 0; o1 < q->out[1]; o1++) {                                                       \
                E *dst = row + o0 * plane + o1 * q->out[2];                                                    \
                if (o1 < lo[1] || o1 >= hi[1]) {                                                               \
                    memset(dst, 0, sizeof(E) * q->out[2]);                                                     \
                    continue;                                                                                  \
                }                                                                                              \
                const E *src = xc + ((o0 * q->s[0] + off[0]) * q->in[1] + o1 * q->s[1] + off[1]) * q->in[2] + off[2]; \
                for (int64_t o2 = 0; o2 < lo[2]; o2++) dst[o2] = 0;                                            \
                if (q->s[2] == 1)                                                                              \
                    memcpy(dst + lo[2], src + lo[2], sizeof(E) * (hi[2] - lo[2]));                             \
                else                                                                                           \
                    for (int64_t o2 = lo[2]; o2 < hi[2]; o2++) dst[o2] = src[o2 * q->s[2]];                    \
                for (int64_t o2 = hi[2]; o2 < q->out[2]; o2++) dst[o2] = 0;                                    \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
}

/* y = conv(x, w) as im2col + GEMM, as a function NAME of element type E whose patch matrix IM2COL
 * (an OPC_CV_IM2COL function) builds and GEMM (opc_gemm_api.h's, of E) multiplies: the families'
 * (opc_nn_conv_body.h) and bf16's on its own GEMM (opc_nn_cv_fwd_gemm_bf16). -1 when the patch
 * matrix cannot be allocated. */
#define OPC_CV_FWD_GEMM(NAME, E, IM2COL, GEMM)                                                                 \
static int NAME(const E *x, const E *w, E *y, const opc_cv_geom *q) {                                          \
    const int64_t ck = q->cg * q->kvol, P = q->ovol;                                                           \
    E *col = NULL;                                                                                             \
    if (!opc_cv_pointwise(q) && !(col = (E *)malloc(sizeof(E) * q->g * ck * P))) return -1;                    \
    for (int64_t n = 0; n < q->n; n++) {                                                                       \
        const E *xn = x + n * q->c * q->ivol;                                                                  \
        if (col)                                                                                               \
            for (int64_t g = 0; g < q->g; g++) IM2COL(xn + g * q->cg * q->ivol, col + g * ck * P, P, q);       \
        GEMM(q->g, q->og, P, ck, w, q->og * ck, 0, col ? col : xn, ck * P, 0, NULL, 0, y + n * q->o * P, NULL); \
    }                                                                                                          \
    free(col);                                                                                                 \
    return 0;                                                                                                  \
}

#endif /* OPC_NN_CONV_H */
