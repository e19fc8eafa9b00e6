/* opc_nn_conv_fast.h -- opc's fast f32 convolutions on the CPU: implicit GEMM over a padded copy
 * of the input, for convs whose strides are all 1 (the 3x3 layers of most CNNs). Included by
 * opc_nn.h after opc_nn_conv.h; the other convs (strided, f64, f16/bf16) take the im2col + GEMM
 * or direct routes of opc_nn_conv_body.h.
 *
 * The trick (as in Caffe's "implicit GEMM" and oneDNN's direct convs): with stride 1, copy one
 * image's group into xp [cg, P0, P1, P2], the input with its padding made of zeros (P = in + pads).
 * An output position o maps to the flat padded position p = (o0 * P1 + o1) * P2 + o2, and tap
 * (cc, k) reads xp at p + off[cc, k], off = cc * PV + (k0 d0 P1 + k1 d1) P2 + k2 d2. So
 *     y[oc, p] = sum over (cc, k) of w[oc, cc, k] * xp[p + off[cc, k]]
 * is a GEMM whose B matrix is never built: the micro-kernel loads NV vectors of xp at
 * p + off[k] (unaligned) for each k and broadcasts MR weights (packed once into [K][MR] panels).
 * The flat positions whose o1 >= out1 or o2 >= out2 (the right and bottom padding columns, a few
 * percent) are computed and dropped by the epilogue, which stores the valid ones with the bias
 * and activation applied (act: OPC_CF_ACT_*).
 *
 * - input gradient: the stride-1 conv of dy (pads d (k - 1) - pb, negative ones crop) with the
 *   filter flipped and its channel dims swapped -- the same kernel, another packing of w;
 * - filter gradient: dw[oc, k] = sum_p dyp[oc, p] * xp[p + off[k]] with dyp dy laid out on
 *   the padded pitch (zeros on the dropped positions): a GEMM reducing along contiguous p,
 *   MR2 x NK vector accumulators summed across lanes at the end of each chunk of positions.
 *
 * Vectors are GCC vector extensions, 16 floats where the compiler targets AVX-512 and 8
 * otherwise (AVX2, or plain SSE as pairs), so one source serves every x86 and other targets.
 * Every read is inside xp (it has NR floats of zeros after its last channel) or the packed
 * panels; every write inside y / dx / dw. The large scratch buffers (packed panels, padded input,
 * padded dy) are kept per thread and grow only (opc_cf_scratch), as opc_gemm.h's packing buffers:
 * a network's layers reuse them instead of paying page faults on each call; -1 when one cannot be
 * allocated.
 * Each output is one sum in a fixed order: results do not depend on the thread count.
 */
#ifndef OPC_NN_CONV_FAST_H
#define OPC_NN_CONV_FAST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "opc_runtime.h"
#include "opc_routes.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && !defined(OPC_CF_V)
#define OPC_CF_V 16 /* floats per vector */
#ifndef OPC_CF_MR
#define OPC_CF_MR 8 /* output channels per micro-tile (forward / input gradient) */
#define OPC_CF_NV 3 /* vectors of positions per micro-tile */
#endif
#ifndef OPC_CF_MR2
#define OPC_CF_MR2 4 /* filter gradient: output channels x taps per micro-tile */
#define OPC_CF_NK 6
#endif
#elif !defined(OPC_CF_V)
#define OPC_CF_V 8
#define OPC_CF_MR 4
#define OPC_CF_NV 3
#define OPC_CF_MR2 2
#define OPC_CF_NK 5
#endif
#define OPC_CF_NR (OPC_CF_V * OPC_CF_NV)
#ifndef OPC_CF_KC
#define OPC_CF_KC 288 /* taps per chunk of the forward's K loop (rounded down to whole channels) */
#endif

/* Keep vector v in a register: without it gcc folds a vector used by several FMAs into each one as
 * a memory operand, and a micro-kernel that reloads its weights per FMA is load-bound (the channel-
 * vector kernel on a 4x4 image: 13 loads per 8 FMAs, 46% of peak). */
#if defined(__AVX__)
#define OPC_CF_KEEP(v) __asm__("" : "+v"(v))
#else
#define OPC_CF_KEEP(v) ((void)0)
#endif

/* opc_gemm.h's codes (gelu: tanh form; relu6: min(max(v, 0), 6) as opc.maximum and opc.minimum
 * compute it, a NaN kept) */
enum { OPC_CF_ACT_NONE = 0, OPC_CF_ACT_RELU = 1, OPC_CF_ACT_GELU = 2, OPC_CF_ACT_RELU6 = 4 };

typedef float opc_cf_vec __attribute__((vector_size(OPC_CF_V * 4)));
typedef float opc_cf_uvec __attribute__((vector_size(OPC_CF_V * 4), aligned(4), may_alias));
typedef int32_t opc_cf_ivec __attribute__((vector_size(OPC_CF_V * 4)));

enum { OPC_CF_BUF_PANELS = 0, OPC_CF_BUF_XP = 1, OPC_CF_BUF_DY = 2, OPC_CF_NBUF = 3 };
static __thread void *opc_cf_buf[OPC_CF_NBUF];
static __thread size_t opc_cf_cap[OPC_CF_NBUF];

/* The calling thread's scratch buffer `slot` of at least `bytes` (grow only; never freed), or NULL. */
static void *opc_cf_scratch(int slot, size_t bytes) {
    if (OPC_SCRATCH_FITS(opc_cf_cap[slot], bytes)) return opc_cf_buf[slot];
    free(opc_cf_buf[slot]);
    opc_cf_buf[slot] = malloc(bytes);
    opc_cf_cap[slot] = opc_cf_buf[slot] ? bytes : 0;
    return opc_cf_buf[slot];
}

/* The stride-1 conv the kernels run: src [groups * cin, in] -> dst [groups * cout, out] per image. */
typedef struct {
    int64_t groups, cin, cout; /* channels per group */
    int64_t in[3], out[3], k[3], d[3], pb[3];
    int64_t P[3], PV;  /* padded input dims and volume */
    int64_t L;         /* flat padded positions up to the last valid output, plus one */
    int64_t kvol, K;   /* taps per channel; cin * kvol */
} opc_cf_plan;

static inline opc_cf_plan opc_cf_plan_make(int64_t groups, int64_t cin, int64_t cout, const int64_t *in,
                                           const int64_t *out, const int64_t *k, const int64_t *d,
                                           const int64_t *pb) {
    opc_cf_plan p;
    p.groups = groups, p.cin = cin, p.cout = cout, p.PV = 1, p.kvol = 1;
    for (int i = 0; i < 3; i++) {
        p.in[i] = in[i], p.out[i] = out[i], p.k[i] = k[i], p.d[i] = d[i], p.pb[i] = pb[i];
        p.P[i] = out[i] + d[i] * (k[i] - 1);
        p.PV *= p.P[i];
        p.kvol *= k[i];
    }
    p.L = ((out[0] - 1) * p.P[1] + out[1] - 1) * p.P[2] + out[2];
    p.K = cin * p.kvol;
    return p;
}

/* p with rows that share their zero columns: where a row has s zero columns on each side (s = the
 * fewer of its left and right padding), the right ones are left out of the pitch and a read past a
 * row's end lands on the next row's first s columns, which are its left padding, also zeros (the
 * last row's: the next plane's, or the zeros after xp's last one). Fewer positions are computed and
 * dropped: a 3x3 conv with pads 1 on a 56-wide image takes 57 per row instead of 58, on a 14-wide
 * one 15 instead of 16. Each output reads the same values, so it is the same sum. */
static inline opc_cf_plan opc_cf_plan_shared(opc_cf_plan p) {
    const int64_t right = p.P[2] - p.pb[2] - p.in[2], s = p.pb[2] < right ? p.pb[2] : right;
    if (s <= 0) return p;
    p.P[2] -= s;
    p.PV = p.P[0] * p.P[1] * p.P[2];
    p.L = ((p.out[0] - 1) * p.P[1] + p.out[1] - 1) * p.P[2] + p.out[2];
    return p;
}

/* The padded indices [*lo, *hi) of dim d that hold src's values (the rest padding; hi >= lo). */
static inline void opc_cf_inside(const opc_cf_plan *p, int d, int64_t *lo, int64_t *hi) {
    *lo = p->pb[d] > 0 ? p->pb[d] : 0;
    *hi = p->in[d] + p->pb[d] < p->P[d] ? p->in[d] + p->pb[d] : p->P[d];
    if (*hi < *lo) *hi = *lo;
}

/* dst [PV][w] of src [in][w] (w floats per position: 1 for one channel's plane, the channels of a
 * channels-last image): dst[i] = src[i - pb] inside src, else 0; each padded row one copy. */
static void opc_cf_pad_positions(const float *s, float *dst, const opc_cf_plan *p, int64_t w) {
    int64_t a, b; /* the columns of P2 that come from src */
    opc_cf_inside(p, 2, &a, &b);
    for (int64_t i0 = 0; i0 < p->P[0]; i0++) {
        const int64_t s0 = i0 - p->pb[0];
        for (int64_t i1 = 0; i1 < p->P[1]; i1++) {
            const int64_t s1 = i1 - p->pb[1];
            float *row = dst + (i0 * p->P[1] + i1) * p->P[2] * w;
            if (s0 < 0 || s0 >= p->in[0] || s1 < 0 || s1 >= p->in[1]) {
                memset(row, 0, sizeof(float) * p->P[2] * w);
                continue;
            }
            memset(row, 0, sizeof(float) * a * w);
            memcpy(row + a * w, s + ((s0 * p->in[1] + s1) * p->in[2] + a - p->pb[2]) * w, sizeof(float) * (b - a) * w);
            memset(row + b * w, 0, sizeof(float) * (p->P[2] - b) * w);
        }
    }
}

/* xp [PV] of one channel src [in]. */
static inline void opc_cf_pad_channel(const float *s, float *dst, const opc_cf_plan *p) {
    opc_cf_pad_positions(s, dst, p, 1);
}

/* row[from, to) = v by vector stores, the last one shifted back to end at `to` (to - from >= V, or
 * to >= V: that store may write columns below `from`, which the caller fills after). */
static inline void opc_cf_fill_vec(float *row, int64_t from, int64_t to, opc_cf_vec v) {
    for (int64_t j = from; j < to; j += OPC_CF_V) *(opc_cf_uvec *)(row + (j + OPC_CF_V <= to ? j : to - OPC_CF_V)) = v;
}

/* dst[0, n) = src[0, n) by vector loads and stores, the last pair shifted back to end at n (n >= V). */
static inline void opc_cf_copy_vec(float *dst, const float *src, int64_t n) {
    for (int64_t j = 0; j < n; j += OPC_CF_V) {
        const int64_t j0 = j + OPC_CF_V <= n ? j : n - OPC_CF_V;
        *(opc_cf_uvec *)(dst + j0) = *(const opc_cf_uvec *)(src + j0);
    }
}

/* xp [PV] of one channel src [in] as opc_cf_pad_channel, by vector stores: a padded row is a zero
 * vector at each end, then the source row copied over them V floats at a time (the last copy shifted
 * back to end at the row's end). Where a row or its padding is too short for that, the plain copy. */
static void opc_cf_pad_plane(const float *s, float *dst, const opc_cf_plan *p) {
    const int64_t P2 = p->P[2];
    int64_t a, b;
    opc_cf_inside(p, 2, &a, &b);
    if (!(P2 >= OPC_CF_V && a <= OPC_CF_V && P2 - b <= OPC_CF_V && b - a >= OPC_CF_V)) {
        opc_cf_pad_channel(s, dst, p);
        return;
    }
    const opc_cf_vec zero = {0};
    for (int64_t i0 = 0; i0 < p->P[0]; i0++) {
        const int64_t s0 = i0 - p->pb[0];
        for (int64_t i1 = 0; i1 < p->P[1]; i1++) {
            const int64_t s1 = i1 - p->pb[1];
            float *row = dst + (i0 * p->P[1] + i1) * P2;
            if (s0 < 0 || s0 >= p->in[0] || s1 < 0 || s1 >= p->in[1]) {
                opc_cf_fill_vec(row, 0, P2, zero);
                continue;
            }
            opc_cf_fill_vec(row, 0, OPC_CF_V, zero);
            opc_cf_fill_vec(row, P2 - OPC_CF_V, P2, zero);
            opc_cf_copy_vec(row + a, s + (s0 * p->in[1] + s1) * p->in[2] + a - p->pb[2], b - a);
        }
    }
}

/* xp [cin, PV] (+ NR zeros) of one group's channels src [cin, in]: xp[i] = src[i - pb] inside src, else 0.
 * The parallel loop only where it pays: an OpenMP region costs its call even when its `if` is false,
 * and the depthwise kernels pad one small plane at a time. */
static void opc_cf_pad(const float *src, float *xp, const opc_cf_plan *p) {
    const int64_t ivol = p->in[0] * p->in[1] * p->in[2];
    if (p->cin * p->PV >= opc_par_min(65536)) {
        _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(p->cin, p->cin * p->PV, 8192)) num_threads(opc_num_threads())")
        for (int64_t c = 0; c < p->cin; c++) opc_cf_pad_plane(src + c * ivol, xp + c * p->PV, p);
    } else {
        for (int64_t c = 0; c < p->cin; c++) opc_cf_pad_plane(src + c * ivol, xp + c * p->PV, p);
    }
    memset(xp + p->cin * p->PV, 0, sizeof(float) * OPC_CF_NR);
}

/* off[cc * kvol + kk]: where tap (cc, kk) reads xp, relative to the output's flat position. */
static void opc_cf_offsets(int64_t *off, const opc_cf_plan *p) {
    for (int64_t cc = 0; cc < p->cin; cc++)
        for (int64_t k0 = 0; k0 < p->k[0]; k0++)
            for (int64_t k1 = 0; k1 < p->k[1]; k1++)
                for (int64_t k2 = 0; k2 < p->k[2]; k2++)
                    *off++ = cc * p->PV + (k0 * p->d[0] * p->P[1] + k1 * p->d[1]) * p->P[2] + k2 * p->d[2];
}

static inline float opc_cf_act(float v, int act) {
    switch (act) {
    case OPC_CF_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case OPC_CF_ACT_RELU6: return opc_relu6_f32(v);
    case OPC_CF_ACT_GELU: { /* tanh form, as opc_gemm.h's epilogue */
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        return 0.5f * v * (1.0f + tanhf(u));
    }
    default: return v;
    }
}

/* out[MR][NV * V] (+)= A panel [K][MR] times xp at p0 + off[k] (NV vectors of positions); acc: add
 * to out (rows of NR floats). Inlined with a constant NV. */
static inline __attribute__((always_inline)) void opc_cf_micro_nv(int64_t K, const float *a, const float *xp,
                                                                  const int64_t *off, float *out, int acc, int NV) {
    opc_cf_vec c[OPC_CF_MR][OPC_CF_NV];
    for (int m = 0; m < OPC_CF_MR; m++)
        for (int j = 0; j < NV; j++) {
            c[m][j] = (opc_cf_vec){0};
            if (acc) c[m][j] = *(const opc_cf_uvec *)(out + m * OPC_CF_NR + j * OPC_CF_V);
        }
    for (int64_t k = 0; k < K; k++) {
        const float *s = xp + off[k];
        opc_cf_vec b[OPC_CF_NV];
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) b[j] = *(const opc_cf_uvec *)(s + j * OPC_CF_V);
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) OPC_CF_KEEP(b[j]);
#pragma GCC unroll 16
        for (int m = 0; m < OPC_CF_MR; m++) {
            const opc_cf_vec am = a[k * OPC_CF_MR + m] - (opc_cf_vec){0}; /* a splat (x - 0 is exact) */
#pragma GCC unroll 8
            for (int j = 0; j < NV; j++) c[m][j] += am * b[j];
        }
    }
    for (int m = 0; m < OPC_CF_MR; m++)
        for (int j = 0; j < NV; j++) *(opc_cf_uvec *)(out + m * OPC_CF_NR + j * OPC_CF_V) = c[m][j];
}

/* The vectors a tile computes for its `left` positions (the plan's L - p0): all NV of a whole tile,
 * and for a last tile with one or two vectors' worth left only those (a 16x16 image's 271 positions at
 * pitch 17: 5 whole tiles and 2 vectors, 272 computed instead of 288). 0 for none. */
static inline int opc_cf_tile_vectors(int64_t left) {
    if (OPC_CF_NV == 3 && left <= 2 * OPC_CF_V) return (int)((left + OPC_CF_V - 1) / OPC_CF_V);
    return OPC_CF_NV;
}

/* The tile at p0 with `left` positions from it on, in opc_cf_tile_vectors(left) vectors; each
 * position's sum is the same whatever the tile's width. */
__attribute__((noinline)) static void opc_cf_micro(int64_t K, const float *a, const float *xp, const int64_t *off,
                                                   float *out, int acc, int64_t left) {
    const int nv = opc_cf_tile_vectors(left);
    if (nv == 1) opc_cf_micro_nv(K, a, xp, off, out, acc, 1);
    else if (nv == 2) opc_cf_micro_nv(K, a, xp, off, out, acc, 2);
    else opc_cf_micro_nv(K, a, xp, off, out, acc, OPC_CF_NV);
}

/* Lines [part * n / parts ...) of the n 64-byte lines from next, prefetched into L2: a panel the next
 * step reads, its lines spread over this step's parts (tiles) so that they arrive while those run. A
 * deep layer streams its packed weights from memory once per call (ResNet-18's 512 channels at 7x7:
 * 9.4 MB a conv, its weights 45 MB against a 32 MB L3), and a panel's first tile waiting for it cost
 * 0.3 ms of 1.35. next NULL: nothing. */
static inline void opc_cf_prefetch_part(const void *next, int64_t n, int64_t part, int64_t parts) {
    if (!next) return;
    const int64_t per = (n + parts - 1) / parts;
    for (int64_t l = part * per; l < n && l < (part + 1) * per; l++) __builtin_prefetch((const char *)next + l * 64, 0, 2);
}

/* y (and pre, or NULL) at output j of a channel: act(acc + b), acc + b. */
static inline void opc_cf_put(float *y, float *pre, int64_t j, float acc, float b, int act) {
    const float v = acc + b;
    if (pre) pre[j] = v;
    y[j] = act == OPC_CF_ACT_NONE ? v : act == OPC_CF_ACT_RELU ? (v > 0.0f ? v : 0.0f) : opc_cf_act(v, act);
}

/* NAME(v, act): act (not gelu) on a vector VEC of lanes IVEC: relu keeps the lanes above 0, relu6 as
 * opc_relu6_f32, by masks (C has no vector conditional; a NaN fails both tests). One definition for
 * the kernels' vector widths (opc_cf_act_vec here, opc_cw_act8 in opc_nn_conv_cw.h). */
#define OPC_CF_ACT_VEC_FN(NAME, VEC, IVEC)                                                                   \
    static inline VEC NAME(VEC v, int act) {                                                                 \
        const VEC zero = (VEC){0}, six = zero + 6.0f;                                                        \
        if (act == OPC_CF_ACT_RELU) return (VEC)((IVEC)v & (v > zero));                                     \
        if (act == OPC_CF_ACT_RELU6) {                                                                       \
            const VEC t = (VEC)((IVEC)v & ~(v <= zero));                                                     \
            const IVEC cap = t >= six;                                                                       \
            return (VEC)(((IVEC)t & ~cap) | ((IVEC)six & cap));                                              \
        }                                                                                                    \
        return v;                                                                                            \
    }
OPC_CF_ACT_VEC_FN(opc_cf_act_vec, opc_cf_vec, opc_cf_ivec)

/* y[0 .. V) (and pre, or NULL) = act(a + b), a whole vector at a time. */
static inline void opc_cf_put_vec(float *y, float *pre, opc_cf_vec a, float b, int act) {
    const opc_cf_vec v = a + b;
    if (pre) *(opc_cf_uvec *)pre = v;
    if (act == OPC_CF_ACT_GELU) {
        for (int j = 0; j < OPC_CF_V; j++) y[j] = opc_cf_act(v[j], act);
        return;
    }
    *(opc_cf_uvec *)y = opc_cf_act_vec(v, act);
}

#if OPC_CF_V == 16 && defined(__AVX512F__)
/* The lanes [0, n) of a vector, n <= V. */
static inline __mmask16 opc_cf_lanes(int64_t n) { return (__mmask16)(n >= OPC_CF_V ? 0xffffu : (1u << n) - 1u); }

/* y and pre (or NULL) = act(v), v in the lanes set in `lanes`, by masked stores: nothing else written. */
static inline void opc_cf_store_lanes(float *y, float *pre, opc_cf_vec v, int act, __mmask16 lanes) {
    if (pre) _mm512_mask_storeu_ps(pre, lanes, (__m512)v);
    if (act == OPC_CF_ACT_GELU) {
        for (int j = 0; j < OPC_CF_V; j++)
            if (lanes >> j & 1) y[j] = opc_cf_act(v[j], act);
        return;
    }
    _mm512_mask_storeu_ps(y, lanes, (__m512)opc_cf_act_vec(v, act));
}

/* y and pre (or NULL) = act(a + b), a + b, in the lanes set in `lanes`. */
static inline void opc_cf_put_lanes(float *y, float *pre, opc_cf_vec a, float b, int act, __mmask16 lanes) {
    opc_cf_store_lanes(y, pre, a + b, act, lanes);
}
#endif

/* y[0 .. n) (and pre, or NULL) = act(a + b) for the first n < V lanes of a: masked stores with
 * AVX-512, else lane by lane. */
static inline void opc_cf_put_part(float *y, float *pre, opc_cf_vec a, float b, int act, int64_t n) {
#if OPC_CF_V == 16 && defined(__AVX512F__)
    opc_cf_put_lanes(y, pre, a, b, act, opc_cf_lanes(n));
#else
    for (int64_t i = 0; i < n; i++) opc_cf_put(y, pre, i, a[i], b, act);
#endif
}

/* y[0 .. n) (and pre, or NULL) = act(s + b): whole vectors, then the last n % V lanes by masked
 * loads and stores (AVX-512) or one by one. The stride-1 kernel's rows were scalar loops: two
 * thirds of its micro-kernel's time on a 3->8 conv at 16x16, whose rows of 16 start anywhere. */
static inline void opc_cf_put_run(float *y, float *pre, const float *s, int64_t n, float b, int act) {
    int64_t j = 0;
    for (; j + OPC_CF_V <= n; j += OPC_CF_V) opc_cf_put_vec(y + j, pre ? pre + j : NULL, *(const opc_cf_uvec *)(s + j), b, act);
    if (j == n) return;
#if OPC_CF_V == 16 && defined(__AVX512F__)
    const __mmask16 lanes = opc_cf_lanes(n - j); /* masked: no read past s[n - 1] either */
    opc_cf_put_lanes(y + j, pre ? pre + j : NULL, (opc_cf_vec)_mm512_maskz_loadu_ps(lanes, s + j), b, act, lanes);
#else
    for (; j < n; j++) opc_cf_put(y, pre, j, s[j], b, act);
#endif
}

/* opc_cf_store with act (and whether there is a pre) constants where inlined. The padded position
 * q = (o0 * P1 + o1) * P2 + o2 is followed by steps, not divided per run: two 64-bit divisions per
 * run cost as much as a 3->8 conv's stores. */
static inline __attribute__((always_inline)) void opc_cf_store_runs(const float *acc, int mr, int64_t p0, float *dst,
                                                                    float *pre, int64_t ovol, const float *bias,
                                                                    int act, const opc_cf_plan *p) {
    const int64_t end = p0 + OPC_CF_NR < p->L ? p0 + OPC_CF_NR : p->L, P1 = p->P[1], P2 = p->P[2];
    const int64_t out1 = p->out[1], out2 = p->out[2];
    int64_t q = p0, o2 = q % P2, o1 = q / P2 % P1, o0 = q / P2 / P1;
    while (q < end) {
        if (o1 < out1 && o2 < out2) {
            const int64_t run = out2 - o2 < end - q ? out2 - o2 : end - q, yo = (o0 * out1 + o1) * out2 + o2;
            for (int m = 0; m < mr; m++)
                opc_cf_put_run(dst + m * ovol + yo, pre ? pre + m * ovol + yo : NULL, acc + m * OPC_CF_NR + (q - p0),
                               run, bias ? bias[m] : 0.0f, act);
            q += run;
            o2 += run;
        }
        if (o1 >= out1 || o2 >= out2) { /* the row's padding columns (or a padding row): on to the next row */
            q += P2 - o2;
            o2 = 0;
            if (++o1 == P1) {
                o1 = 0;
                o0++;
            }
        }
    }
}

/* Store the valid positions of tile [p0, p0 + NR) of rows m < mr to dst (rows of ovol), bias and act
 * applied; pre (or NULL): the same rows before the activation (fused_conv_epilogue's reserve_space). */
static void opc_cf_store(const float *acc, int mr, int64_t p0, float *dst, float *pre, int64_t ovol,
                         const float *bias, int act, const opc_cf_plan *p) {
    if (pre) opc_cf_store_runs(acc, mr, p0, dst, pre, ovol, bias, act, p);
    else if (act == OPC_CF_ACT_NONE) opc_cf_store_runs(acc, mr, p0, dst, NULL, ovol, bias, OPC_CF_ACT_NONE, p);
    else if (act == OPC_CF_ACT_RELU) opc_cf_store_runs(acc, mr, p0, dst, NULL, ovol, bias, OPC_CF_ACT_RELU, p);
    else if (act == OPC_CF_ACT_RELU6) opc_cf_store_runs(acc, mr, p0, dst, NULL, ovol, bias, OPC_CF_ACT_RELU6, p);
    else opc_cf_store_runs(acc, mr, p0, dst, NULL, ovol, bias, act, p);
}

/* The outputs [*c0, *c1) (offsets in the ovol of a channel) that tile [p0, p0 + NR) of the padded
 * pitch stores: its valid positions, consecutive in the output (valid_before counts those before). */
static inline int64_t opc_cf_valid_before(int64_t q, const opc_cf_plan *p) {
    const int64_t o2 = q % p->P[2], r = q / p->P[2], o1 = r % p->P[1], o0 = r / p->P[1];
    if (o0 >= p->out[0]) return p->out[0] * p->out[1] * p->out[2];
    return (o0 * p->out[1] + (o1 < p->out[1] ? o1 : p->out[1])) * p->out[2] +
           (o1 < p->out[1] ? (o2 < p->out[2] ? o2 : p->out[2]) : 0);
}
static inline void opc_cf_tile_outputs(int64_t p0, const opc_cf_plan *p, int64_t *c0, int64_t *c1) {
    *c0 = opc_cf_valid_before(p0, p);
    *c1 = opc_cf_valid_before(p0 + OPC_CF_NR < p->L ? p0 + OPC_CF_NR : p->L, p);
}

/* dst [n, groups * cout, out] = the plan's conv of src [n, groups * cin, in] with the panels
 * a [groups][ceil(cout / MR)][K][MR], + bias [groups * cout] (or NULL), act; pre (or NULL) the same
 * before act; ep (or NULL) run on each tile's outputs once stored (a thread's consecutive tiles joined:
 * opc_cv_ep_add). -1: out of memory. */
static int opc_cf_run(const float *src, const float *a, float *dst, float *pre, int64_t n, const float *bias, int act,
                      const opc_cf_plan *p, opc_cv_epilogue ep, void *ep_ctx) {
    const int64_t ivol = p->in[0] * p->in[1] * p->in[2], ovol = p->out[0] * p->out[1] * p->out[2];
    const int64_t mt = (p->cout + OPC_CF_MR - 1) / OPC_CF_MR, tiles = (p->L + OPC_CF_NR - 1) / OPC_CF_NR;
    float *xp = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (p->cin * p->PV + OPC_CF_NR));
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (p->K > 0 ? p->K : 1));
    if (!xp || !off) {
        free(off);
        return -1;
    }
    opc_cf_offsets(off, p);
    const int64_t cin_all = p->groups * p->cin, cout_all = p->groups * p->cout;
    const int64_t kc = p->kvol * (OPC_CF_KC / p->kvol > 0 ? OPC_CF_KC / p->kvol : 1); /* whole channels */
    int failed = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t g = 0; g < p->groups; g++) {
            opc_cf_pad(src + (i * cin_all + g * p->cin) * ivol, xp, p);
            const float *ag = a + g * mt * p->K * OPC_CF_MR;
            float *yg = dst + (i * cout_all + g * p->cout) * ovol, *zg = pre ? pre + (yg - dst) : NULL;
            const float *bg = bias ? bias + g * p->cout : NULL;
            _Pragma("omp parallel if (tiles * p->cout * p->K >= opc_par_min(32768)) num_threads(opc_num_threads())")
            {
                /* a tile's sums for every output channel (tiles outer, below: over chunks of KC
                 * taps, each chunk's slice of xp staying in L1 while all the panels pass over it) */
                float *acc = (float *)malloc(sizeof(float) * mt * OPC_CF_MR * OPC_CF_NR);
                opc_cv_pending pend = {0, 0, 0, 0};
                if (!acc) {
                    _Pragma("omp atomic write")
                    failed = 1;
                }
                if (mt * p->K * OPC_CF_MR > p->cin * p->PV) {
                    /* the panels outweigh the padded input (deep layers on small images): each
                     * thread keeps one output channel tile's panel in cache over all the tiles */
                    _Pragma("omp for schedule(dynamic, opc_par_chunk(mt, mt, 1))")
                    for (int64_t m = 0; m < mt; m++) {
                        if (!acc) continue;
                        const int mr = p->cout - m * OPC_CF_MR < OPC_CF_MR ? (int)(p->cout - m * OPC_CF_MR) : OPC_CF_MR;
                        /* the next channel tile's panel on its way while this one's tiles run */
                        const float *next = m + 1 < mt ? ag + (m + 1) * p->K * OPC_CF_MR : NULL;
                        for (int64_t t = 0; t < tiles; t++) {
                            opc_cf_prefetch_part(next, p->K * OPC_CF_MR * 4 / 64, t, tiles);
                            opc_cf_micro(p->K, ag + m * p->K * OPC_CF_MR, xp + t * OPC_CF_NR, off, acc, 0, p->L - t * OPC_CF_NR);
                            opc_cf_store(acc, mr, t * OPC_CF_NR, yg + m * OPC_CF_MR * ovol,
                                         zg ? zg + m * OPC_CF_MR * ovol : NULL, ovol, bg ? bg + m * OPC_CF_MR : NULL,
                                         act, p);
                            if (ep) {
                                int64_t c0, c1;
                                opc_cf_tile_outputs(t * OPC_CF_NR, p, &c0, &c1);
                                const int64_t r0 = i * cout_all + g * p->cout + m * OPC_CF_MR;
                                opc_cv_ep_add(ep, ep_ctx, &pend, r0, r0 + mr, c0, c1);
                            }
                        }
                    }
                } else { /* tiles outer: a tile's rows of xp stay in cache over all the panels */
                    _Pragma("omp for schedule(dynamic, opc_par_chunk(tiles, tiles, 1))")
                    for (int64_t t = 0; t < tiles; t++) {
                        if (!acc) continue;
                        for (int64_t k0 = 0; k0 < p->K; k0 += kc) {
                            const int64_t kn = p->K - k0 < kc ? p->K - k0 : kc;
                            for (int64_t m = 0; m < mt; m++)
                                opc_cf_micro(kn, ag + (m * p->K + k0) * OPC_CF_MR, xp + t * OPC_CF_NR, off + k0,
                                             acc + m * OPC_CF_MR * OPC_CF_NR, k0 > 0, p->L - t * OPC_CF_NR);
                        }
                        for (int64_t m = 0; m < mt; m++) {
                            const int mr = p->cout - m * OPC_CF_MR < OPC_CF_MR ? (int)(p->cout - m * OPC_CF_MR) : OPC_CF_MR;
                            opc_cf_store(acc + m * OPC_CF_MR * OPC_CF_NR, mr, t * OPC_CF_NR, yg + m * OPC_CF_MR * ovol,
                                         zg ? zg + m * OPC_CF_MR * ovol : NULL, ovol, bg ? bg + m * OPC_CF_MR : NULL, act, p);
                        }
                        if (ep) {
                            int64_t c0, c1;
                            opc_cf_tile_outputs(t * OPC_CF_NR, p, &c0, &c1);
                            const int64_t r0 = i * cout_all + g * p->cout;
                            opc_cv_ep_add(ep, ep_ctx, &pend, r0, r0 + p->cout, c0, c1);
                        }
                    }
                }
                opc_cv_ep_flush(ep, ep_ctx, &pend);
                free(acc);
            }
        }
    free(off);
    return failed ? -1 : 0;
}

/* A conv's weights as its packings see them: w [g * og][K]. */
typedef struct {
    const float *w;
    int64_t g, og, K;
} opc_cf_weights;

/* The panels of the forward conv: a[g][mt][cc * kvol + kk][m] = w[g * og + mt * MR + m, cc, kk] (0 past
 * og), MR rows of w read side by side and each panel written in order (4x faster than row by row for a
 * 512x4608 filter). */
static void opc_cf_pack_all(const void *ctx, float *a) {
    const opc_cf_weights *c = (const opc_cf_weights *)ctx;
    const int64_t mt = (c->og + OPC_CF_MR - 1) / OPC_CF_MR, K = c->K;
    for (int64_t g = 0; g < c->g; g++)
        for (int64_t t = 0; t < mt; t++) {
            const float *rows[OPC_CF_MR];
            for (int m = 0; m < OPC_CF_MR; m++)
                rows[m] = t * OPC_CF_MR + m < c->og ? c->w + (g * c->og + t * OPC_CF_MR + m) * K : NULL;
            float *dst = a + (g * mt + t) * K * OPC_CF_MR;
            for (int64_t k = 0; k < K; k++)
                for (int m = 0; m < OPC_CF_MR; m++) dst[k * OPC_CF_MR + m] = rows[m] ? rows[m][k] : 0.0f;
        }
}

/* The forward's panels: packed once where the weights never change (opc_frozen.h), else per call
 * into a scratch buffer, on the calling thread before the tiles' parallel loop (ResNet-18's 64- and
 * 128-channel layers at 224x224: 2 threads took 0.68 of 1 thread's time with the packing per call). */
static const float *opc_cf_pack_fwd(const float *w, const opc_cv_geom *q) {
    const int64_t mt = (q->og + OPC_CF_MR - 1) / OPC_CF_MR, K = q->cg * q->kvol;
    const opc_cf_weights whole = {w, q->g, q->og, K};
    const int64_t key[OPC_FROZEN_KEY] = {7, q->g, q->og, K}; /* 7: this layout */
    const float *frozen = opc_rt_frozen_packed(w, (int64_t)sizeof(float) * q->g * q->og * K, key,
                                               q->g * mt * K * OPC_CF_MR, opc_cf_pack_all, &whole);
    if (frozen) return frozen;
    float *a = (float *)opc_cf_scratch(OPC_CF_BUF_PANELS, sizeof(float) * q->g * mt * K * OPC_CF_MR);
    if (a) opc_cf_pack_all(&whole, a);
    return a;
}

/* The panels of the input gradient's conv (dy's og channels in, the cg channels of x out, taps
 * flipped): a[g][mt][ol * kvol + kk][m] = w[g * og + ol, mt * MR + m, kvol - 1 - kk]. */
static float *opc_cf_pack_data(const float *w, const opc_cv_geom *q) {
    const int64_t mt = (q->cg + OPC_CF_MR - 1) / OPC_CF_MR, K = q->og * q->kvol;
    float *a = (float *)opc_cf_scratch(OPC_CF_BUF_PANELS, sizeof(float) * q->g * mt * K * OPC_CF_MR);
    if (!a) return NULL;
    for (int64_t g = 0; g < q->g; g++)
        for (int64_t t = 0; t < mt; t++)
            for (int64_t ol = 0; ol < q->og; ol++)
                for (int m = 0; m < OPC_CF_MR; m++) { /* each (ol, cc) kernel read in order */
                    const int64_t cc = t * OPC_CF_MR + m;
                    float *dst = a + ((g * mt + t) * K + ol * q->kvol) * OPC_CF_MR + m;
                    const float *src = w + ((g * q->og + ol) * q->cg + cc) * q->kvol;
                    for (int64_t kk = 0; kk < q->kvol; kk++)
                        dst[kk * OPC_CF_MR] = cc < q->cg ? src[q->kvol - 1 - kk] : 0.0f;
                }
    return a;
}

/* The positions the stride-1 kernel computes for conv q's ovol outputs: over the forward's padded
 * pitch (opc_cf_plan_shared: the padding columns computed and dropped), whole tiles of NR and the last
 * one's vectors (opc_cf_tile_vectors). */
static inline int64_t opc_cf_computed(const opc_cv_geom *q) {
    const opc_cf_plan p = opc_cf_plan_shared(opc_cf_plan_make(q->g, q->cg, q->og, q->in, q->out, q->k, q->d, q->p));
    const int64_t whole = p.L / OPC_CF_NR * OPC_CF_NR;
    return whole + (p.L > whole ? opc_cf_tile_vectors(p.L - whole) * OPC_CF_V : 0);
}

/* Whether the fast kernels take conv q (f32 callers): every stride 1, more than one tap, groups of more
 * than one channel each way (1x1 convs are a plain GEMM already; depthwise ones use opc_cf_dw), at
 * most 1.5 positions computed per output. */
static inline int opc_cf_applies(const opc_cv_geom *q) {
    if (!(q->s[0] == 1 && q->s[1] == 1 && q->s[2] == 1 && q->kvol > 1 && q->cg > 1 && q->og > 1)) return 0;
    /* the tiles must not be mostly padding columns (a 7x7 image: 96 positions computed for 49);
     * those convs are small GEMMs, which other routes do better */
    return 2 * opc_cf_computed(q) <= 3 * q->ovol;
}

/* y = act(conv(x, w) + bias), z (or NULL) = conv(x, w) + bias, ep (or NULL) on each finished tile;
 * -1 when out of memory. */
static int opc_cf_conv(const float *x, const float *w, const float *bias, int act, float *y, float *z,
                       const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    opc_rt_route(OPC_ROUTE_CONV_DIRECT);
    const opc_cf_plan p = opc_cf_plan_shared(opc_cf_plan_make(q->g, q->cg, q->og, q->in, q->out, q->k, q->d, q->p));
    const float *a = opc_cf_pack_fwd(w, q);
    return a ? opc_cf_run(x, a, y, z, q->n, bias, act, &p, ep, ep_ctx) : -1;
}

/* dx = the input gradient of dy; -1 when out of memory. */
static int opc_cf_conv_data(const float *dy, const float *w, float *dx, const opc_cv_geom *q) {
    opc_rt_route(OPC_ROUTE_CONV_GRAD_INPUT_DIRECT);
    int64_t pb[3];
    for (int i = 0; i < 3; i++) pb[i] = q->d[i] * (q->k[i] - 1) - q->p[i];
    const opc_cf_plan p = opc_cf_plan_shared(opc_cf_plan_make(q->g, q->og, q->cg, q->out, q->in, q->k, q->d, pb));
    float *a = opc_cf_pack_data(w, q);
    return a ? opc_cf_run(dy, a, dx, NULL, q->n, NULL, OPC_CF_ACT_NONE, &p, NULL, NULL) : -1;
}

/* The sum of v's lanes, as a tree: lane l plus lane l ^ h for h = V / 2 .. 1 (a fixed order; the lane-by-
 * lane loop is a chain of V dependent adds, which gcc may not reassociate: a tenth of the filter
 * gradient's time, 24 of them per micro-tile). */
static inline float opc_cf_hsum(const opc_cf_vec *p) { /* by pointer: no vector-ABI note without AVX */
    opc_cf_vec v = *p;
#if defined(__GNUC__) && !defined(__clang__)
#if OPC_CF_V == 16
    v += __builtin_shuffle(v, (opc_cf_ivec){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    v += __builtin_shuffle(v, (opc_cf_ivec){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
    v += __builtin_shuffle(v, (opc_cf_ivec){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
#else
    v += __builtin_shuffle(v, (opc_cf_ivec){4, 5, 6, 7, 0, 1, 2, 3});
    v += __builtin_shuffle(v, (opc_cf_ivec){2, 3, 0, 1, 6, 7, 4, 5});
#endif
    return v[0] + v[1]; /* the even lanes' sum and the odd lanes' */
#else
    float s = 0.0f;
    for (int l = 0; l < OPC_CF_V; l++) s += v[l];
    return s;
#endif
}

/* acc[m][kt] += sum over cnt positions (a multiple of V) of dyp rows m times xp at off[kt]. One pass over
 * all positions: the lanes are summed once per micro-tile (chunking the positions measured slower). */
__attribute__((noinline)) static void opc_cf_micro_filter(int64_t cnt, const float *dyp, int64_t ld, const float *xp,
                                                          const int64_t *off, float *acc) {
    opc_cf_vec c[OPC_CF_MR2][OPC_CF_NK];
    for (int m = 0; m < OPC_CF_MR2; m++)
        for (int j = 0; j < OPC_CF_NK; j++) c[m][j] = (opc_cf_vec){0};
    for (int64_t i = 0; i < cnt; i += OPC_CF_V) {
        opc_cf_vec d[OPC_CF_MR2];
#pragma GCC unroll 8
        for (int m = 0; m < OPC_CF_MR2; m++) d[m] = *(const opc_cf_uvec *)(dyp + m * ld + i);
#pragma GCC unroll 8
        for (int j = 0; j < OPC_CF_NK; j++) {
            const opc_cf_vec b = *(const opc_cf_uvec *)(xp + off[j] + i);
#pragma GCC unroll 8
            for (int m = 0; m < OPC_CF_MR2; m++) c[m][j] += d[m] * b;
        }
    }
    for (int m = 0; m < OPC_CF_MR2; m++)
        for (int j = 0; j < OPC_CF_NK; j++) acc[m * OPC_CF_NK + j] += opc_cf_hsum(&c[m][j]);
}

/* dw = the filter gradient of x and dy; -1 when out of memory. */
static int opc_cf_conv_filter(const float *x, const float *dy, float *dw, const opc_cv_geom *q) {
    opc_rt_route(OPC_ROUTE_CONV_GRAD_FILTER_DIRECT);
    const opc_cf_plan p = opc_cf_plan_make(q->g, q->cg, q->og, q->in, q->out, q->k, q->d, q->p);
    const int64_t Lr = (p.L + OPC_CF_V - 1) / OPC_CF_V * OPC_CF_V; /* dyp's row length */
    const int64_t mrows = (q->og + OPC_CF_MR2 - 1) / OPC_CF_MR2 * OPC_CF_MR2, kt = (p.K + OPC_CF_NK - 1) / OPC_CF_NK;
    float *xp = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (p.cin * p.PV + OPC_CF_NR + Lr));
    float *dyp = (float *)opc_cf_scratch(OPC_CF_BUF_DY, sizeof(float) * mrows * Lr);
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * kt * OPC_CF_NK);
    if (!xp || !dyp || !off) {
        free(off);
        return -1;
    }
    opc_cf_offsets(off, &p);
    for (int64_t k = p.K; k < kt * OPC_CF_NK; k++) off[k] = 0; /* the last tile's missing taps read xp[0..]: dropped */
    memset(dw, 0, sizeof(float) * q->o * p.K);
    memset(dyp, 0, sizeof(float) * mrows * Lr);
    const int64_t ovol = q->ovol;
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t g = 0; g < q->g; g++) {
            opc_cf_pad(x + (n * q->c + g * q->cg) * q->ivol, xp, &p);
            memset(xp + p.cin * p.PV + OPC_CF_NR, 0, sizeof(float) * Lr); /* reads run up to Lr past an offset */
            const float *dyg = dy + (n * q->o + g * q->og) * ovol;
            for (int64_t oc = 0; oc < q->og; oc++) /* dy on the padded pitch; the padding columns stay 0 */
                for (int64_t o0 = 0; o0 < q->out[0]; o0++)
                    for (int64_t o1 = 0; o1 < q->out[1]; o1++)
                        memcpy(dyp + oc * Lr + (o0 * p.P[1] + o1) * p.P[2],
                               dyg + oc * ovol + (o0 * q->out[1] + o1) * q->out[2], sizeof(float) * q->out[2]);
            float *dwg = dw + g * q->og * p.K;
            _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(kt, kt, 1)) if (q->og * p.K * p.L >= opc_par_min(32768)) num_threads(opc_num_threads())")
            for (int64_t t = 0; t < kt; t++) {
                const int64_t *ot = off + t * OPC_CF_NK;
                for (int64_t m = 0; m < mrows; m += OPC_CF_MR2) {
                    float acc[OPC_CF_MR2 * OPC_CF_NK] = {0};
                    opc_cf_micro_filter(Lr, dyp + m * Lr, Lr, xp, ot, acc);
                    for (int mm = 0; mm < OPC_CF_MR2 && m + mm < q->og; mm++)
                        for (int j = 0; j < OPC_CF_NK && t * OPC_CF_NK + j < p.K; j++)
                            dwg[(m + mm) * p.K + t * OPC_CF_NK + j] += acc[mm * OPC_CF_NK + j];
                }
            }
        }
    free(off);
    return 0;
}

/* ---- depthwise convs (one input and one output channel per group) ----------------------------- */

/* dst planes = the plan's depthwise conv of src planes (n * groups of them) with taps wk [groups, kvol]
 * (+ bias [groups], act): per plane, the padded copy in a per-thread buffer, then NR positions at a
 * time, each tap one vector FMA per NV vectors. -1: out of memory. */
static int opc_cf_dw_run(const float *src, const float *wk, float *dst, float *pre, int64_t n, const float *bias,
                         int act, const opc_cf_plan *p) {
    const int64_t ivol = p->in[0] * p->in[1] * p->in[2], ovol = p->out[0] * p->out[1] * p->out[2];
    const int64_t tiles = (p->L + OPC_CF_NR - 1) / OPC_CF_NR, planes = n * p->groups;
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * p->kvol);
    if (!off) return -1;
    opc_cf_offsets(off, p);
    int failed = 0;
    _Pragma("omp parallel if (planes * ovol * p->kvol >= opc_par_min(32768)) num_threads(opc_num_threads())")
    {
        float *xp = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (p->PV + OPC_CF_NR));
        if (!xp) {
            _Pragma("omp atomic write")
            failed = 1;
        }
        _Pragma("omp for schedule(dynamic, opc_par_chunk(planes, planes, 1))")
        for (int64_t pl = 0; pl < planes; pl++) {
            if (!xp) continue;
            const int64_t ch = pl % p->groups;
            const float *w = wk + ch * p->kvol;
            opc_cf_pad(src + pl * ivol, xp, p);
            for (int64_t t = 0; t < tiles; t++) {
                float acc[OPC_CF_NR] __attribute__((aligned(64)));
                opc_cf_vec c[OPC_CF_NV];
                for (int j = 0; j < OPC_CF_NV; j++) c[j] = (opc_cf_vec){0};
                const float *s = xp + t * OPC_CF_NR;
                for (int64_t k = 0; k < p->kvol; k++) {
                    const opc_cf_vec wv = w[k] - (opc_cf_vec){0};
#pragma GCC unroll 8
                    for (int j = 0; j < OPC_CF_NV; j++) c[j] += wv * *(const opc_cf_uvec *)(s + off[k] + j * OPC_CF_V);
                }
                for (int j = 0; j < OPC_CF_NV; j++) *(opc_cf_uvec *)(acc + j * OPC_CF_V) = c[j];
                opc_cf_store(acc, 1, t * OPC_CF_NR, dst + pl * ovol, pre ? pre + pl * ovol : NULL, ovol,
                             bias ? bias + ch : NULL, act, p);
            }
        }
    }
    free(off);
    return failed ? -1 : 0;
}

#if OPC_CF_V == 16
#define OPC_CF_IOTA {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
#define OPC_CF_EVEN {0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31}
#else
#define OPC_CF_IOTA {0, 1, 2, 3, 4, 5, 6, 7}
#define OPC_CF_EVEN {0, 2, 4, 6, 9, 11, 13, 15}
#endif

/* The V floats src[j * s], j < V; reads src[0 .. (V - 1) s] only (stride 2: two loads, the second
 * ending on the last element, and a shuffle of their even positions). */
static inline void opc_cf_strided(const float *src, int64_t s, opc_cf_vec *v) {
    if (s == 1) {
        *v = *(const opc_cf_uvec *)src;
        return;
    }
#if defined(__GNUC__) && !defined(__clang__)
    if (s == 2) {
        const opc_cf_vec lo = *(const opc_cf_uvec *)src, hi = *(const opc_cf_uvec *)(src + OPC_CF_V - 1);
        *v = __builtin_shuffle(lo, hi, (opc_cf_ivec)OPC_CF_EVEN);
        return;
    }
#endif
    for (int j = 0; j < OPC_CF_V; j++) (*v)[j] = src[j * s];
}

/* r[i][l] -> r[l][i]: a V x V block transposed in registers, log2(V) rounds of two-vector shuffles
 * (round h pairs rows i and i + h and swaps their blocks of h lanes). GCC's __builtin_shuffle only. */
#if defined(__GNUC__) && !defined(__clang__)
#define OPC_CF_TRANSPOSE 1
static inline void opc_cf_transpose(opc_cf_vec *r) {
    _Pragma("GCC unroll 8") for (int h = OPC_CF_V / 2; h >= 1; h /= 2) {
        opc_cf_ivec lo, hi;
        for (int l = 0; l < OPC_CF_V; l++) {
            lo[l] = (l & h) ? OPC_CF_V + l - h : l;
            hi[l] = (l & h) ? OPC_CF_V + l : l + h;
        }
        _Pragma("GCC unroll 16") for (int i = 0; i < OPC_CF_V; i++)
            if (!(i & h)) {
                const opc_cf_vec a = r[i], b = r[i + h];
                r[i] = __builtin_shuffle(a, b, lo);
                r[i + h] = __builtin_shuffle(a, b, hi);
            }
    }
}
#else
#define OPC_CF_TRANSPOSE 0
#endif

/* The padded dims P of a depthwise conv's planes: they cover the last output's last tap, any stride. */
static inline opc_cf_plan opc_cf_dw_plan(const opc_cv_geom *q) {
    opc_cf_plan p = opc_cf_plan_make(q->g, 1, 1, q->in, q->out, q->k, q->d, q->p);
    p.PV = 1;
    for (int i = 0; i < 3; i++) {
        p.P[i] = (q->out[i] - 1) * q->s[i] + q->d[i] * (q->k[i] - 1) + 1;
        p.PV *= p.P[i];
    }
    return p;
}

/* opc_cf_pad_plane's copy of src's rows only, into an xp whose padding already holds its zeros (a
 * thread's planes after its first in one call: the same geometry, so the same padding). The first
 * plane's full pass, with its zero fills and a branch per row, cost more than the taps of a 3x3
 * stride-2 plane (MobileNetV2's 96 channels 32x32 -> 16x16). */
static void opc_cf_pad_plane_rows(const float *s, float *dst, const opc_cf_plan *p) {
    const int64_t P2 = p->P[2];
    int64_t a, b, lo0, hi0, lo1, hi1;
    opc_cf_inside(p, 2, &a, &b);
    opc_cf_inside(p, 0, &lo0, &hi0);
    opc_cf_inside(p, 1, &lo1, &hi1);
    if (b <= a) return;
    /* the plan's fields in locals: the vector stores (may_alias) would make gcc reload them per row */
    const int64_t P1 = p->P[1], in1 = p->in[1], in2 = p->in[2], pb0 = p->pb[0], pb1 = p->pb[1], pb2 = p->pb[2];
    for (int64_t i0 = lo0; i0 < hi0; i0++)
        for (int64_t i1 = lo1; i1 < hi1; i1++) {
            float *row = dst + (i0 * P1 + i1) * P2 + a;
            const float *src = s + ((i0 - pb0) * in1 + i1 - pb1) * in2 + a - pb2;
            if (b - a >= OPC_CF_V) opc_cf_copy_vec(row, src, b - a);
            else memcpy(row, src, sizeof(float) * (b - a));
        }
}

/* One plane of a strided depthwise conv over rows of at least V outputs (MobileNet's stride-2
 * layers on large images, where the row kernel does not apply), forward only, from its padded copy
 * xp: per output row V outputs at a time, each tap one vector FMA on the row's strided inputs
 * (opc_cf_strided: two loads and a shuffle for stride 2), the row's last vector shifted back to end
 * at the row's end (its overlap recomputed, to the same values). Each output is one sum over the
 * taps in order, zeros of the padding included, as in opc_cf_dw_run. */
static void opc_cf_dws_plane(const float *xp, const float *w, float *y, float *z, float b, int act,
                             const opc_cf_plan *pp, const opc_cv_geom *qp) {
    const opc_cf_plan pc = *pp; /* copies, as in opc_cf_dwr_plane */
    const opc_cv_geom qc = *qp;
    const opc_cf_plan *p = &pc;
    const opc_cv_geom *q = &qc;
    const int64_t s2 = q->s[2];
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < q->out[1]; o1++) {
            const int64_t yo = (o0 * q->out[1] + o1) * q->out[2];
            const float *row = xp + (o0 * q->s[0] * p->P[1] + o1 * q->s[1]) * p->P[2];
            for (int64_t c = 0; c < q->out[2]; c += OPC_CF_V) {
                const int64_t c0 = c + OPC_CF_V <= q->out[2] ? c : q->out[2] - OPC_CF_V;
                opc_cf_vec a = (opc_cf_vec){0}, v;
                int64_t k = 0;
                for (int64_t t0 = 0; t0 < q->k[0]; t0++)
                    for (int64_t t1 = 0; t1 < q->k[1]; t1++)
                        for (int64_t t2 = 0; t2 < q->k[2]; t2++, k++) {
                            opc_cf_strided(row + (t0 * q->d[0] * p->P[1] + t1 * q->d[1]) * p->P[2] + c0 * s2 + t2 * q->d[2],
                                           s2, &v);
                            a += w[k] * v;
                        }
                for (int j = 0; j < OPC_CF_V; j++) opc_cf_put(y, z, yo + c0 + j, a[j], b, act);
            }
        }
}

/* The row kernel's output rows per block: R independent FMA chains, and each input vector loaded
 * once for all the block's rows that read it (k1 / s1 of them). */
#define OPC_CF_DWR_R 4

/* The R output rows o1 .. o1 + R of plane slice o0, V columns from c0, of a depthwise conv with
 * K1 x K2 taps per depth tap at strides S (both in-plane dims), no dilation in the plane: each input
 * row's vector, per tap column, feeds every row of the block that reads it. Each output's taps are
 * summed in order (depth, row, column), as in opc_cf_dws_plane. Inlined with constant R, K1, K2, S. */
static inline __attribute__((always_inline)) void opc_cf_dwr_block(const float *xp, const float *w,
                                                                   const opc_cf_plan *p, const opc_cv_geom *q,
                                                                   int64_t o0, int64_t o1, int64_t c0, int R,
                                                                   int K1, int K2, int S, opc_cf_vec *a) {
    for (int r = 0; r < R; r++) a[r] = (opc_cf_vec){0};
    for (int64_t t0 = 0; t0 < q->k[0]; t0++) {
        const float *base = xp + ((o0 * q->s[0] + t0 * q->d[0]) * p->P[1] + o1 * S) * p->P[2] + c0 * S;
        const float *wt = w + t0 * K1 * K2;
        _Pragma("GCC unroll 32") for (int i = 0; i < (R - 1) * S + K1; i++)
            _Pragma("GCC unroll 8") for (int t2 = 0; t2 < K2; t2++) {
                opc_cf_vec v;
                opc_cf_strided(base + i * p->P[2] + t2, S, &v);
                OPC_CF_KEEP(v); /* loaded once for the block's rows, not once per FMA */
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                    const int t1 = i - r * S;
                    if (t1 >= 0 && t1 < K1) a[r] += wt[t1 * K2 + t2] * v;
                }
            }
    }
}

/* The row kernel's rows per block on planes of 8 rows or more: 8 FMA chains, where 4 left the FMA
 * units waiting on their latency (4 chains of 9 taps: MobileNetV2's 32-channel 3x3 layer at 32x32
 * ran at a third of the FMA rate). */
#define OPC_CF_DWR_TALL 8

/* The rows of one block and their stores, R a constant: each count of rows with its own unrolled
 * stores (a loop over R kept the block's sums in memory and reloaded b and z for every row). */
#define OPC_CF_DWR_ROWS(R)                                                                                   \
    do {                                                                                                     \
        opc_cf_dwr_block(xp, w, p, q, o0, r0, c0, R, K1, K2, S, a);                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < (R); r++)                                               \
            opc_cf_put_vec(y + yo + r * O2, z ? z + yo + r * O2 : NULL, a[r], b, act);                      \
    } while (0)

/* One plane's outputs by the row kernel: blocks of 8 rows (4 on planes of 4 to 7 rows; planes of fewer
 * rows one row at a time), the last one shifted back to end at the last row (its overlap recomputed,
 * to the same values), and per row V columns at a time (the last vector shifted back likewise). */
static inline __attribute__((always_inline)) void opc_cf_dwr_plane(const float *xp, const float *w, float *y,
                                                                   float *z, float b, int act,
                                                                   const opc_cf_plan *pp, const opc_cv_geom *qp,
                                                                   int K1, int K2, int S) {
    /* copies of the geometry that nothing else can point to: through the caller's, every may_alias
     * vector store would make gcc reload the fields the next block reads */
    const opc_cf_plan pc = *pp;
    const opc_cv_geom qc = *qp;
    const opc_cf_plan *p = &pc;
    const opc_cv_geom *q = &qc;
    const int64_t O1 = q->out[1], O2 = q->out[2];
    const int R = O1 >= OPC_CF_DWR_TALL ? OPC_CF_DWR_TALL : O1 >= OPC_CF_DWR_R ? OPC_CF_DWR_R : 1;
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < O1; o1 += R) {
            const int64_t r0 = o1 + R <= O1 ? o1 : O1 - R;
            for (int64_t c = 0; c < O2; c += OPC_CF_V) {
                const int64_t c0 = c + OPC_CF_V <= O2 ? c : O2 - OPC_CF_V;
                opc_cf_vec a[OPC_CF_DWR_TALL];
                const int64_t yo = (o0 * O1 + r0) * O2 + c0;
                if (R == OPC_CF_DWR_TALL) OPC_CF_DWR_ROWS(OPC_CF_DWR_TALL);
                else if (R == OPC_CF_DWR_R) OPC_CF_DWR_ROWS(OPC_CF_DWR_R);
                else OPC_CF_DWR_ROWS(1);
            }
        }
}
#undef OPC_CF_DWR_ROWS

/* opc_cf_dwr_plane with act a constant where it is relu6 on 3x3 taps (MobileNet's): as a variable it
 * cost a test per vector stored and kept relu6's bound on the stack (a sixth of the kernel's samples
 * on MobileNetV2's 32-channel layer at 32x32). Only there: each constant is another copy of the
 * unrolled kernel per rows per block, and the runtime library's f32 object took 9 s of gcc -O3 with
 * 8 copies, 15 s with 48. */
static inline __attribute__((always_inline)) void opc_cf_dwr_plane_act(const float *xp, const float *w, float *y,
                                                                       float *z, float b, int act,
                                                                       const opc_cf_plan *p, const opc_cv_geom *q,
                                                                       int K1, int K2, int S) {
    if (K1 == 3 && act == OPC_CF_ACT_RELU6) opc_cf_dwr_plane(xp, w, y, z, b, OPC_CF_ACT_RELU6, p, q, K1, K2, S);
    else opc_cf_dwr_plane(xp, w, y, z, b, act, p, q, K1, K2, S);
}

/* Whether the row kernel runs conv q: a forward depthwise conv whose output rows hold a vector, with
 * 3x3 or 5x5 taps in the plane, the same stride 1 or 2 along both plane dims and no dilation there. */
static inline int opc_cf_dwr_applies(const opc_cv_geom *q) {
    return q->out[2] >= OPC_CF_V && q->k[1] == q->k[2] && (q->k[1] == 3 || q->k[1] == 5) &&
           q->s[1] == q->s[2] && (q->s[1] == 1 || q->s[1] == 2) && q->d[1] == 1 && q->d[2] == 1;
}

/* Whether opc_cf_dw_planes_run runs conv q: output rows of a vector or more, by the row kernel or
 * (strided) opc_cf_dws_plane. */
static inline int opc_cf_dw_planes_apply(const opc_cv_geom *q) {
    return q->out[2] >= OPC_CF_V && (opc_cf_dwr_applies(q) || q->s[0] != 1 || q->s[1] != 1 || q->s[2] != 1);
}

/* The depthwise forward plane by plane (opc_cf_dw_planes_apply): per plane, the padded copy in a
 * per-thread buffer, the plane's outputs with bias and act (the row kernel where it applies, else
 * opc_cf_dws_plane), then ep (or NULL) on the plane while it is in cache. -1: out of memory. */
static int opc_cf_dw_planes_run(const float *src, const float *wk, float *dst, float *pre, const float *bias, int act,
                                const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    opc_rt_route(OPC_ROUTE_DEPTHWISE_ROWS);
    const opc_cf_plan p = opc_cf_dw_plan(q);
    /* The copy's rows start on a vector: a plane of V zero columns before each row's first input
     * (pb[2] of them the real padding) and rows of whole vectors, the kernels reading from V - pb[2]
     * columns in. Copied to an offset of pb[2] (1 for a 3x3), every row's stores split cache lines
     * and took a third of MobileNetV2's 3x3 stride-2 layer at 32x32. */
    const int aligned = p.pb[2] >= 0 && p.pb[2] <= OPC_CF_V;
    opc_cf_plan pa = p;
    if (aligned) {
        pa.pb[2] = OPC_CF_V;
        pa.P[2] = (p.P[2] - p.pb[2] + 2 * OPC_CF_V - 1) / OPC_CF_V * OPC_CF_V;
        pa.PV = p.P[0] * p.P[1] * pa.P[2];
    }
    const int64_t shift = aligned ? OPC_CF_V - p.pb[2] : 0;
    const int64_t planes = q->n * q->g, ovol = q->ovol, kvol = q->kvol;
    const int rows = opc_cf_dwr_applies(q), K = (int)q->k[1], S = (int)q->s[1];
    int failed = 0;
    _Pragma("omp parallel if (planes * ovol * kvol >= opc_par_min(32768)) num_threads(opc_num_threads())")
    {
        float *raw = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (pa.PV + OPC_CF_NR + OPC_CF_V));
        /* the copy 64-byte aligned inside the scratch (malloc's are 16), its reads from `shift` in */
        float *buf = raw ? raw + (-(intptr_t)((uintptr_t)raw / sizeof(float)) & (OPC_CF_V - 1)) : NULL;
        const float *xp = buf ? buf + shift : NULL;
        int64_t first = -1; /* this thread's first plane: the one whose padding it writes */
        if (!raw) {
            _Pragma("omp atomic write")
            failed = 1;
        }
        _Pragma("omp for schedule(dynamic, opc_par_chunk(planes, planes * ovol * kvol, 32768))")
        for (int64_t pl = 0; pl < planes; pl++) {
            if (!raw) continue;
            if (first < 0) first = pl;
            const int64_t ch = pl % q->g;
            const float *w = wk + ch * kvol;
            const float b = bias ? bias[ch] : 0.0f;
            float *y = dst + pl * ovol, *z = pre ? pre + pl * ovol : NULL;
            if (pl == first) opc_cf_pad_plane(src + pl * q->ivol, buf, &pa);
            else opc_cf_pad_plane_rows(src + pl * q->ivol, buf, &pa);
            if (!rows) opc_cf_dws_plane(xp, w, y, z, b, act, &pa, q);
            else if (K == 3 && S == 1) opc_cf_dwr_plane_act(xp, w, y, z, b, act, &pa, q, 3, 3, 1);
            else if (K == 3) opc_cf_dwr_plane_act(xp, w, y, z, b, act, &pa, q, 3, 3, 2);
            else if (S == 1) opc_cf_dwr_plane_act(xp, w, y, z, b, act, &pa, q, 5, 5, 1);
            else opc_cf_dwr_plane_act(xp, w, y, z, b, act, &pa, q, 5, 5, 2);
            if (ep) ep(ep_ctx, pl, pl + 1, 0, ovol);
        }
    }
    return failed ? -1 : 0;
}

/* A depthwise conv on planes whose rows are narrower than a vector (7x7 and 14x14 images, any
 * stride), forward only, channels last as onnxruntime's NCHWc kernels, V channels at a time: the
 * block's padded input transposed to xt [PV][V] (V x V transposes in registers), each output
 * position one vector FMA per tap into yt [ovol][V], transposed back with bias and act on the way,
 * then ep (or NULL) on the block's planes while they are in cache. A block's buffers fit in L1;
 * blocks (and images) are the parallel loop. The same sums in the same order as opc_cf_dw_run:
 * taps in order from zero, the padding's zeros included. -1: out of memory. */

/* xt's interior: channels c0 .. c0 + nv of image xn [C][ivol] (zeros for the rest of the V);
 * at[i]: input position i's padded position, or -1 where the padded plane ends first. */
static void opc_cf_dwc_gather(const float *xn, float *xt, int64_t c0, int64_t nv, const int64_t *at, int64_t ivol) {
    int64_t first = 0; /* the positions the general loop below copies */
#if OPC_CF_TRANSPOSE
    /* whole tiles of a whole block: the transposed rows stored straight from their registers, with no
       test per channel (the general loop's tile in memory and its tests cost more than its shuffles) */
    for (; nv == OPC_CF_V && first + OPC_CF_V <= ivol; first += OPC_CF_V) {
        opc_cf_vec r[OPC_CF_V];
        _Pragma("GCC unroll 16") for (int j = 0; j < OPC_CF_V; j++) r[j] = *(const opc_cf_uvec *)(xn + (c0 + j) * ivol + first);
        opc_cf_transpose(r);
        _Pragma("GCC unroll 16") for (int i = 0; i < OPC_CF_V; i++)
            if (at[first + i] >= 0) *(opc_cf_uvec *)(xt + at[first + i] * OPC_CF_V) = r[i];
    }
#endif
    for (int64_t i0 = first; i0 < ivol; i0 += OPC_CF_V) {
        float tile[OPC_CF_V][OPC_CF_V]; /* tile[i][j]: position i0 + i of channel c0 + j */
#if OPC_CF_TRANSPOSE
        if (i0 + OPC_CF_V <= ivol) {
            opc_cf_vec r[OPC_CF_V];
            for (int j = 0; j < OPC_CF_V; j++)
                r[j] = j < nv ? (opc_cf_vec) * (const opc_cf_uvec *)(xn + (c0 + j) * ivol + i0) : (opc_cf_vec){0};
            opc_cf_transpose(r);
            for (int i = 0; i < OPC_CF_V; i++) *(opc_cf_uvec *)tile[i] = r[i];
        } else
#if OPC_CF_V == 16 && defined(__AVX512F__)
        if (1) { /* the plane's last positions (all of a 2x2 or 3x3 plane's): masked loads, no read past them */
            const __mmask16 lanes = opc_cf_lanes(ivol - i0);
            opc_cf_vec r[OPC_CF_V];
            for (int j = 0; j < OPC_CF_V; j++)
                r[j] = j < nv ? (opc_cf_vec)_mm512_maskz_loadu_ps(lanes, xn + (c0 + j) * ivol + i0) : (opc_cf_vec){0};
            opc_cf_transpose(r);
            for (int i = 0; i < OPC_CF_V; i++) *(opc_cf_uvec *)tile[i] = r[i];
        } else
#endif
#endif
            for (int64_t i = 0; i < OPC_CF_V && i0 + i < ivol; i++)
                for (int j = 0; j < OPC_CF_V; j++) tile[i][j] = j < nv ? xn[(c0 + j) * ivol + i0 + i] : 0.0f;
        for (int64_t i = 0; i < OPC_CF_V && i0 + i < ivol; i++)
            if (at[i0 + i] >= 0) *(opc_cf_uvec *)(xt + at[i0 + i] * OPC_CF_V) = *(const opc_cf_uvec *)tile[i];
    }
}

/* yt [ovol][V] = the taps wt [kvol][V] over xt, OPC_CF_DWC_U output positions side by side (each
 * one's taps a chain of dependent FMAs, which alone would wait on the FMA's latency). Inlined with
 * a constant kvol where it is 9. */
#define OPC_CF_DWC_U 4
static inline __attribute__((always_inline)) void opc_cf_dwc_taps(const float *xt, const float *wt, float *yt,
                                                                   const int64_t *base, const int64_t *off,
                                                                   int64_t ovol, int64_t kvol) {
    int64_t o = 0;
    for (; o + OPC_CF_DWC_U <= ovol; o += OPC_CF_DWC_U) {
        opc_cf_vec a[OPC_CF_DWC_U];
        for (int u = 0; u < OPC_CF_DWC_U; u++) a[u] = (opc_cf_vec){0};
        for (int64_t k = 0; k < kvol; k++) {
            opc_cf_vec w = *(const opc_cf_uvec *)(wt + k * OPC_CF_V);
            OPC_CF_KEEP(w);
            _Pragma("GCC unroll 4") for (int u = 0; u < OPC_CF_DWC_U; u++)
                a[u] += w * *(const opc_cf_uvec *)(xt + (base[o + u] + off[k]) * OPC_CF_V);
        }
        for (int u = 0; u < OPC_CF_DWC_U; u++) *(opc_cf_uvec *)(yt + (o + u) * OPC_CF_V) = a[u];
    }
    for (; o < ovol; o++) {
        opc_cf_vec a = {0};
        for (int64_t k = 0; k < kvol; k++)
            a += *(const opc_cf_uvec *)(wt + k * OPC_CF_V) * *(const opc_cf_uvec *)(xt + (base[o] + off[k]) * OPC_CF_V);
        *(opc_cf_uvec *)(yt + o * OPC_CF_V) = a;
    }
}

/* Channels c0 .. c0 + nv of image yn [C][ovol] (and zn, or NULL) = act(yt + bias). */
#if OPC_CF_TRANSPOSE
/* The whole tile at o0 (V outputs) of a whole block (V channels), act a constant where inlined: the
 * transposed rows stored straight from their registers, where the general loop below went through a
 * tile in memory with a test per row and per channel (the scatter was 38% of a 384-channel layer at
 * 14x14, against the taps' 25%). */
static inline __attribute__((always_inline)) void opc_cf_dwc_scatter_tile(const float *yt, float *yn, float *zn,
                                                                           int64_t c0, const float *bias, int act,
                                                                           int64_t ovol, int64_t o0) {
    opc_cf_vec r[OPC_CF_V];
    _Pragma("GCC unroll 16") for (int i = 0; i < OPC_CF_V; i++) r[i] = *(const opc_cf_uvec *)(yt + (o0 + i) * OPC_CF_V);
    opc_cf_transpose(r);
    _Pragma("GCC unroll 16") for (int j = 0; j < OPC_CF_V; j++) {
        const int64_t at = (c0 + j) * ovol + o0;
        opc_cf_put_vec(yn + at, zn ? zn + at : NULL, r[j], bias ? bias[c0 + j] : 0.0f, act);
    }
}
#endif

static void opc_cf_dwc_scatter(const float *yt, float *yn, float *zn, int64_t c0, int64_t nv, const float *bias,
                               int act, int64_t ovol) {
    int64_t first = 0; /* the tiles the general loop below stores */
#if OPC_CF_TRANSPOSE
    if (nv == OPC_CF_V && act != OPC_CF_ACT_GELU) {
        for (; first + OPC_CF_V <= ovol; first += OPC_CF_V) {
            if (act == OPC_CF_ACT_RELU6) opc_cf_dwc_scatter_tile(yt, yn, zn, c0, bias, OPC_CF_ACT_RELU6, ovol, first);
            else if (act == OPC_CF_ACT_RELU) opc_cf_dwc_scatter_tile(yt, yn, zn, c0, bias, OPC_CF_ACT_RELU, ovol, first);
            else opc_cf_dwc_scatter_tile(yt, yn, zn, c0, bias, OPC_CF_ACT_NONE, ovol, first);
        }
    }
#endif
    for (int64_t o0 = first; o0 < ovol; o0 += OPC_CF_V) {
        float tile[OPC_CF_V][OPC_CF_V]; /* tile[j][i]: channel c0 + j at output o0 + i */
#if OPC_CF_TRANSPOSE
        opc_cf_vec r[OPC_CF_V];
        for (int i = 0; i < OPC_CF_V; i++) r[i] = o0 + i < ovol ? (opc_cf_vec) * (const opc_cf_uvec *)(yt + (o0 + i) * OPC_CF_V) : (opc_cf_vec){0};
        opc_cf_transpose(r);
        for (int j = 0; j < OPC_CF_V; j++) *(opc_cf_uvec *)tile[j] = r[j];
#else
        for (int i = 0; i < OPC_CF_V; i++)
            for (int j = 0; j < OPC_CF_V; j++) tile[j][i] = o0 + i < ovol ? yt[(o0 + i) * OPC_CF_V + j] : 0.0f;
#endif
        for (int64_t j = 0; j < nv; j++) {
            const int64_t c = c0 + j;
            const float b = bias ? bias[c] : 0.0f;
            if (o0 + OPC_CF_V <= ovol) {
                opc_cf_put_vec(yn + c * ovol + o0, zn ? zn + c * ovol + o0 : NULL, *(const opc_cf_uvec *)tile[j], b, act);
                continue;
            }
            opc_cf_put_part(yn + c * ovol + o0, zn ? zn + c * ovol + o0 : NULL, *(const opc_cf_uvec *)tile[j], b, act,
                               ovol - o0);
        }
    }
}

/* wt of channels c0 .. c0 + V of wk [C][kvol]: [kvol][V], zeros past C. */
static void opc_cf_dwc_pack_block(const float *wk, int64_t C, int64_t kvol, int64_t c0, float *wt) {
    for (int64_t k = 0; k < kvol; k++)
        for (int j = 0; j < OPC_CF_V; j++) wt[k * OPC_CF_V + j] = c0 + j < C ? wk[(c0 + j) * kvol + k] : 0.0f;
}

typedef struct {
    const float *w;
    int64_t C, kvol;
} opc_cf_dwc_weights;

/* Every block's wt, [blocks][kvol][V]: what a conv whose weights never change packs once (opc_frozen.h). */
static void opc_cf_dwc_pack_all(const void *ctx, float *dst) {
    const opc_cf_dwc_weights *c = (const opc_cf_dwc_weights *)ctx;
    for (int64_t c0 = 0; c0 < c->C; c0 += OPC_CF_V) opc_cf_dwc_pack_block(c->w, c->C, c->kvol, c0, dst + c0 * c->kvol);
}

/* A depthwise conv on small planes (up to 16 vectors in, 4 out: 16x16 -> 8x8 at stride 2, 8x8 at
 * stride 1, 4x4 and smaller), forward only, AVX-512: each output vector's tap is one two-source
 * permute (vpermt2ps, the padding's lanes zeroed by its mask) of the at most two input vectors its
 * lanes read, and one FMA with the tap's weight broadcast: no transposes and no padded copy, where
 * opc_cf_dwc_run transposes V channels at a time (MobileNetV2's 144 channels 16x16 -> 8x8 took it
 * 12.0 us, this 6.5). Each output's taps are summed in order from zero, the padding's zeros
 * included, as in opc_cf_dw_run. The permutes depend only on the plane's geometry: a table made on
 * a thread's first call (opc_cf_dwv_table_for). Where some output vector's tap reads more than two
 * input vectors (8x8 -> 4x4 at stride 2: its one output vector reads all four), the channels-last
 * kernel runs the conv. */
#if OPC_CF_V == 16 && defined(__AVX512F__)
#define OPC_CF_DWV 1
#define OPC_CF_DWV_TAPS 27  /* 3x3x3 */
#define OPC_CF_DWV_NI 16    /* input vectors at most */
#define OPC_CF_DWV_NO 4     /* output vectors at most */
#define OPC_CF_DWV_CHUNK 64 /* channels per parallel unit and per call of the epilogue */
#define OPC_CF_DWV_KEY 18   /* in, out, k, s, d, p: 3 each */

typedef struct {
    /* [out vector][tap][lane]: the lane output lane l's tap reads, of src[.][.][0] (0 .. V-1) or of
       src[.][.][1] (V .. 2V-1) */
    int32_t idx[OPC_CF_DWV_NO][OPC_CF_DWV_TAPS][OPC_CF_V];
    __mmask16 mask[OPC_CF_DWV_NO][OPC_CF_DWV_TAPS]; /* the lanes whose tap lies inside the input; the rest add w * 0 */
    uint8_t src[OPC_CF_DWV_NO][OPC_CF_DWV_TAPS][2]; /* the two input vectors a tap's permute reads */
    __mmask16 in[OPC_CF_DWV_NI], out[OPC_CF_DWV_NO]; /* each input and output vector's lanes */
    int ni, no;
    /* group > 1: that many channels side by side in a vector (opc_cf_dwg_run), idx[0][k][l] the lane of
       the group's input vector that output lane l's tap k reads; chan[l]: lane l's channel in the group */
    int group;
    int32_t chan[OPC_CF_V];
    int64_t key[OPC_CF_DWV_KEY]; /* the geometry it was made for (opc_cf_dwv_key) */
} opc_cf_dwv_table;

/* The position in the unpadded input plane that output o's tap k reads, or -1 in the padding. */
static int64_t opc_cf_dwv_source(const opc_cv_geom *q, int64_t o, int64_t k) {
    int64_t oi[3], ti[3], at = 0;
    oi[2] = o % q->out[2], oi[1] = o / q->out[2] % q->out[1], oi[0] = o / (q->out[2] * q->out[1]);
    opc_cv_split(q, k, ti);
    for (int d = 0; d < 3; d++) {
        const int64_t i = oi[d] * q->s[d] - q->p[d] + ti[d] * q->d[d];
        if (i < 0 || i >= q->in[d]) return -1;
        at = at * q->in[d] + i;
    }
    return at;
}

/* Output vector v's tap k in t: its sources, lanes and mask; 0 where its lanes read more than two
 * input vectors. */
static int opc_cf_dwv_plan_tap(const opc_cv_geom *q, opc_cf_dwv_table *t, int64_t v, int64_t k) {
    int64_t s0 = -1, s1 = -1;
    for (int64_t l = 0; l < OPC_CF_V && v * OPC_CF_V + l < q->ovol; l++) {
        const int64_t i = opc_cf_dwv_source(q, v * OPC_CF_V + l, k), iv = i / OPC_CF_V;
        if (i < 0) continue;
        if (s0 < 0 || iv == s0) s0 = iv;
        else if (s1 < 0 || iv == s1) s1 = iv;
        else return 0;
        t->idx[v][k][l] = (int32_t)(i % OPC_CF_V + (iv == s1 ? OPC_CF_V : 0));
        t->mask[v][k] |= (__mmask16)(1u << l);
    }
    t->src[v][k][0] = (uint8_t)(s0 < 0 ? 0 : s0);
    t->src[v][k][1] = (uint8_t)(s1 < 0 ? t->src[v][k][0] : s1);
    return 1;
}

/* What a table depends on: the plane's geometry (not the channels or images). */
static void opc_cf_dwv_key(const opc_cv_geom *q, int64_t *key) {
    for (int d = 0; d < 3; d++) {
        key[d] = q->in[d], key[3 + d] = q->out[d], key[6 + d] = q->k[d];
        key[9 + d] = q->s[d], key[12 + d] = q->d[d], key[15 + d] = q->p[d];
    }
}

/* t's permutes for conv q: 1, or 0 where the kernel does not apply. */
static int opc_cf_dwv_plan(const opc_cv_geom *q, opc_cf_dwv_table *t) {
    const int64_t ni = (q->ivol + OPC_CF_V - 1) / OPC_CF_V, no = (q->ovol + OPC_CF_V - 1) / OPC_CF_V;
    if (ni > OPC_CF_DWV_NI || no > OPC_CF_DWV_NO || q->kvol > OPC_CF_DWV_TAPS) return 0;
    memset(t, 0, sizeof *t);
    opc_cf_dwv_key(q, t->key);
    t->ni = (int)ni, t->no = (int)no, t->group = 1;
    const int64_t span = q->ivol > q->ovol ? q->ivol : q->ovol;
    if (2 * span <= OPC_CF_V) { /* two channels or more per vector, in and out */
        const int g = (int)(OPC_CF_V / span);
        t->group = g, t->in[0] = opc_cf_lanes(g * q->ivol), t->out[0] = opc_cf_lanes(g * q->ovol);
        for (int64_t l = 0; l < OPC_CF_V; l++) t->chan[l] = (int32_t)(l / q->ovol < g ? l / q->ovol : g - 1);
        for (int64_t k = 0; k < q->kvol; k++)
            for (int64_t l = 0; l < g * q->ovol; l++) {
                const int64_t i = opc_cf_dwv_source(q, l % q->ovol, k);
                if (i < 0) continue;
                t->idx[0][k][l] = (int32_t)(l / q->ovol * q->ivol + i);
                t->mask[0][k] |= (__mmask16)(1u << l);
            }
        return 1;
    }
    for (int64_t v = 0; v < ni; v++) t->in[v] = opc_cf_lanes(q->ivol - v * OPC_CF_V);
    for (int64_t v = 0; v < no; v++) {
        t->out[v] = opc_cf_lanes(q->ovol - v * OPC_CF_V);
        for (int64_t k = 0; k < q->kvol; k++)
            if (!opc_cf_dwv_plan_tap(q, t, v, k)) return 0;
    }
    return 1;
}

/* The calling thread's table for conv q, made on its first call and kept (a network's few depthwise
 * geometries, OPC_CF_DWV_CACHE of them at once: a table costs more to make, 576 sources of an 8x8
 * plane, than its layer's taps), or NULL where the kernel does not apply. The tables live on the
 * heap, a thread's allocated once and kept as opc_cf_scratch's buffers are: as a __thread array
 * (60 KB), gcc took it for 32-byte aligned and stored to it by aligned moves, while a dlopened
 * module's thread-local block is only as aligned as malloc makes it (a crash). */
#define OPC_CF_DWV_CACHE 8
typedef struct {
    opc_cf_dwv_table table[OPC_CF_DWV_CACHE];
    int made, next;
} opc_cf_dwv_cache;
static __thread opc_cf_dwv_cache *opc_cf_dwv_tables;

static const opc_cf_dwv_table *opc_cf_dwv_table_for(const opc_cv_geom *q) {
    if (!opc_cf_dwv_tables) opc_cf_dwv_tables = (opc_cf_dwv_cache *)calloc(1, sizeof(opc_cf_dwv_cache));
    opc_cf_dwv_cache *cache = opc_cf_dwv_tables;
    if (!cache) return NULL; /* no memory: the channels-last kernel, which needs none of it */
    int64_t key[OPC_CF_DWV_KEY];
    opc_cf_dwv_key(q, key);
    for (int j = 0; j < cache->made; j++)
        if (!memcmp(cache->table[j].key, key, sizeof key)) return cache->table[j].ni ? &cache->table[j] : NULL;
    opc_cf_dwv_table *t = &cache->table[cache->next];
    cache->next = (cache->next + 1) % OPC_CF_DWV_CACHE;
    if (cache->made < OPC_CF_DWV_CACHE) cache->made++;
    if (opc_cf_dwv_plan(q, t)) return t;
    memset(t, 0, sizeof *t); /* remembered as not applying: ni 0 */
    memcpy(t->key, key, sizeof key);
    return NULL;
}

/* Channels c .. c + CH of image x [C][ivol] -> y (and pre, or NULL) [C][ovol] where a plane is one
 * vector: held in a register, each tap one vpermps of it; CH independent FMA chains. Inlined with
 * constant CH. */
static inline __attribute__((always_inline)) void opc_cf_dwv_one(const float *x, const float *wk, float *y, float *pre,
                                                                 const float *bias, int act, const opc_cf_dwv_table *t,
                                                                 const opc_cv_geom *q, int64_t c, int CH) {
    const int64_t kvol = q->kvol;
    const float *w = wk + c * kvol;
    __m512 xv[4], acc[4];
    for (int h = 0; h < CH; h++) {
        xv[h] = _mm512_maskz_loadu_ps(t->in[0], x + (c + h) * q->ivol);
        acc[h] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kvol; k++) {
        const __m512i idx = _mm512_loadu_si512(t->idx[0][k]);
        for (int h = 0; h < CH; h++)
            acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(w[h * kvol + k]), _mm512_maskz_permutexvar_ps(t->mask[0][k], idx, xv[h]),
                                     acc[h]);
    }
    for (int h = 0; h < CH; h++) {
        const int64_t at = (c + h) * q->ovol;
        opc_cf_put_lanes(y + at, pre ? pre + at : NULL, (opc_cf_vec)acc[h], bias ? bias[c + h] : 0.0f, act, t->out[0]);
    }
}

/* The same where a plane is several vectors: per output vector and tap, each channel's two source
 * vectors read from x (masked past its last lane) into one vpermt2ps. */
static inline __attribute__((always_inline)) void opc_cf_dwv_many(const float *x, const float *wk, float *y, float *pre,
                                                                  const float *bias, int act, const opc_cf_dwv_table *t,
                                                                  const opc_cv_geom *q, int64_t c, int CH, int FULL) {
    const int64_t kvol = q->kvol, ivol = q->ivol, ovol = q->ovol;
    const float *w = wk + c * kvol, *xh[4];
    for (int h = 0; h < CH; h++) xh[h] = x + (c + h) * ivol;
    for (int v = 0; v < t->no; v++) {
        __m512 acc[4];
        _Pragma("GCC unroll 4") for (int h = 0; h < CH; h++) acc[h] = _mm512_setzero_ps();
        for (int64_t k = 0; k < kvol; k++) {
            const __m512i idx = _mm512_loadu_si512(t->idx[v][k]);
            const int64_t a = t->src[v][k][0], b = t->src[v][k][1];
            const __mmask16 m = t->mask[v][k], ia = t->in[a], ib = t->in[b];
            _Pragma("GCC unroll 4") for (int h = 0; h < CH; h++)
                acc[h] = _mm512_fmadd_ps(
                    _mm512_set1_ps(w[h * kvol + k]),
                    _mm512_maskz_permutex2var_ps(m, FULL ? _mm512_loadu_ps(xh[h] + a * OPC_CF_V) : _mm512_maskz_loadu_ps(ia, xh[h] + a * OPC_CF_V),
                                                 idx, FULL ? _mm512_loadu_ps(xh[h] + b * OPC_CF_V) : _mm512_maskz_loadu_ps(ib, xh[h] + b * OPC_CF_V)),
                    acc[h]);
        }
        _Pragma("GCC unroll 4") for (int h = 0; h < CH; h++) {
            const int64_t at = (c + h) * ovol + v * OPC_CF_V;
            opc_cf_put_lanes(y + at, pre ? pre + at : NULL, (opc_cf_vec)acc[h], bias ? bias[c + h] : 0.0f, act, t->out[v]);
        }
    }
}

/* NAME(..., i0, i1): KERNEL on units [i0, i1) (channels, or groups of them) of image x, 4 at a time then
 * one by one; each form a function of its own (inlined together in one loop, gcc spilled the
 * accumulators of both). */
#define OPC_CF_BY_FOURS(NAME, KERNEL)                                                                     \
    __attribute__((noinline)) static void NAME(const float *x, const float *w, float *y, float *pre,      \
                                               const float *bias, int act, const opc_cf_dwv_table *t,     \
                                               const opc_cv_geom *q, int64_t i0, int64_t i1) {            \
        int64_t i = i0;                                                                                   \
        for (; i + 4 <= i1; i += 4) KERNEL(x, w, y, pre, bias, act, t, q, i, 4);                          \
        for (; i < i1; i++) KERNEL(x, w, y, pre, bias, act, t, q, i, 1);                                  \
    }
OPC_CF_BY_FOURS(opc_cf_dwv_chunk_one, opc_cf_dwv_one)
__attribute__((noinline)) static void opc_cf_dwv_chunk_many(const float *x, const float *wk, float *y, float *pre,
                                                            const float *bias, int act, const opc_cf_dwv_table *t,
                                                            const opc_cv_geom *q, int64_t c0, int64_t c1) {
    int64_t c = c0;
    if (q->ivol % OPC_CF_V == 0) { /* whole vectors: plain loads (192 channels at 8x8: 8.2 -> 7.6 us) */
        for (; c + 4 <= c1; c += 4) opc_cf_dwv_many(x, wk, y, pre, bias, act, t, q, c, 4, 1);
        for (; c < c1; c++) opc_cf_dwv_many(x, wk, y, pre, bias, act, t, q, c, 1, 1);
        return;
    }
    for (; c + 4 <= c1; c += 4) opc_cf_dwv_many(x, wk, y, pre, bias, act, t, q, c, 4, 0);
    for (; c < c1; c++) opc_cf_dwv_many(x, wk, y, pre, bias, act, t, q, c, 1, 0);
}

/* Depthwise convs on planes of at most V / 2 positions in and out (2x2 images: MobileNetV2's last
 * blocks at 64x64, 960 channels): G = V / the larger plane channels side by side in a vector, as they
 * lie in memory (one load), each tap one permute of that vector and one FMA with a vector of the G
 * channels' weights for the tap: a plane per vector took G times the permutes and FMAs, most of
 * their lanes empty (960 channels at 2x2: 5.2 us). wv [groups][kvol][V]: lane l of group g's tap k
 * holds channel g G + chan[l]'s weight. The same sums in the same order as opc_cf_dwv_one's. */
typedef struct {
    const float *w;
    int64_t C, kvol;
    const opc_cf_dwv_table *t;
    int64_t ovol;
} opc_cf_dwg_weights;

static void opc_cf_dwg_pack(const void *ctx, float *dst) {
    const opc_cf_dwg_weights *c = (const opc_cf_dwg_weights *)ctx;
    const int g = c->t->group;
    for (int64_t c0 = 0, gi = 0; c0 < c->C; c0 += g, gi++)
        for (int64_t k = 0; k < c->kvol; k++)
            for (int l = 0; l < OPC_CF_V; l++) {
                const int64_t ch = c0 + c->t->chan[l];
                dst[(gi * c->kvol + k) * OPC_CF_V + l] = l < g * c->ovol && ch < c->C ? c->w[ch * c->kvol + k] : 0.0f;
            }
}

/* Groups [g0, g1) of image x [C][ivol] -> y (and pre, or NULL) [C][ovol]: CH groups at once (independent
 * FMA chains), inlined with constant CH. */
static inline __attribute__((always_inline)) void opc_cf_dwg_groups(const float *x, const float *wv, float *y, float *pre,
                                                                    const float *bias, int act,
                                                                    const opc_cf_dwv_table *t, const opc_cv_geom *q,
                                                                    int64_t gi, int CH) {
    const int64_t kvol = q->kvol, C = q->g, G = t->group;
    const __m512i chan = _mm512_loadu_si512(t->chan);
    __m512 xv[4], acc[4];
    int64_t n[4]; /* each group's channels: G, fewer in the last */
    for (int h = 0; h < CH; h++) {
        const int64_t c = (gi + h) * G;
        n[h] = C - c < G ? C - c : G;
        xv[h] = _mm512_maskz_loadu_ps(n[h] == G ? t->in[0] : opc_cf_lanes(n[h] * q->ivol), x + c * q->ivol);
        acc[h] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kvol; k++) {
        const __m512i idx = _mm512_loadu_si512(t->idx[0][k]);
        for (int h = 0; h < CH; h++)
            acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(wv + ((gi + h) * kvol + k) * OPC_CF_V),
                                     _mm512_maskz_permutexvar_ps(t->mask[0][k], idx, xv[h]), acc[h]);
    }
    for (int h = 0; h < CH; h++) {
        const int64_t c = (gi + h) * G;
        /* each lane's channel bias: the group's (n of them, masked) spread by chan */
        const __m512 b = bias ? _mm512_permutexvar_ps(chan, _mm512_maskz_loadu_ps(opc_cf_lanes(n[h]), bias + c))
                              : _mm512_setzero_ps();
        opc_cf_store_lanes(y + c * q->ovol, pre ? pre + c * q->ovol : NULL, (opc_cf_vec)_mm512_add_ps(acc[h], b), act,
                           n[h] == G ? t->out[0] : opc_cf_lanes(n[h] * q->ovol));
    }
}

OPC_CF_BY_FOURS(opc_cf_dwg_chunk, opc_cf_dwg_groups)

/* 0 when it ran, -1 when the packed weights' scratch cannot be had. */
static int opc_cf_dwg_run(const float *src, const float *wk, float *dst, float *pre, const float *bias, int act,
                          const opc_cv_geom *q, const opc_cf_dwv_table *t, opc_cv_epilogue ep, void *ep_ctx) {
    const int64_t C = q->g, G = t->group, groups = (C + G - 1) / G, floats = groups * q->kvol * OPC_CF_V;
    const opc_cf_dwg_weights whole = {wk, C, q->kvol, t, q->ovol};
    const int64_t key[OPC_FROZEN_KEY] = {7, C, q->kvol, G << 16 | q->ovol}; /* 7: this layout */
    const float *wv = opc_rt_frozen_packed(wk, (int64_t)sizeof(float) * C * q->kvol, key, floats, opc_cf_dwg_pack, &whole);
    if (!wv) {
        float *packed = (float *)opc_cf_scratch(OPC_CF_BUF_PANELS, sizeof(float) * (size_t)floats);
        if (!packed) return -1;
        opc_cf_dwg_pack(&whole, packed);
        wv = packed;
    }
    const int64_t chunk = (OPC_CF_DWV_CHUNK + G - 1) / G, chunks = (groups + chunk - 1) / chunk, units = q->n * chunks;
    const int64_t work = q->n * C * q->ovol * q->kvol;
    _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(units, work, 32768)) if (work >= opc_par_min(32768)) num_threads(opc_num_threads())")
    for (int64_t u = 0; u < units; u++) {
        const int64_t n = u / chunks, g0 = u % chunks * chunk, g1 = g0 + chunk < groups ? g0 + chunk : groups;
        float *z = pre ? pre + n * C * q->ovol : NULL;
        opc_cf_dwg_chunk(src + n * C * q->ivol, wv, dst + n * C * q->ovol, z, bias, act, t, q, g0, g1);
        if (ep) ep(ep_ctx, n * C + g0 * G, n * C + (g1 * G < C ? g1 * G : C), 0, q->ovol);
    }
    return 0;
}

static void opc_cf_dwv_run(const float *src, const float *wk, float *dst, float *pre, const float *bias, int act,
                           const opc_cv_geom *q, const opc_cf_dwv_table *t, opc_cv_epilogue ep, void *ep_ctx) {
    const int64_t C = q->g, chunks = (C + OPC_CF_DWV_CHUNK - 1) / OPC_CF_DWV_CHUNK, units = q->n * chunks;
    const int64_t work = q->n * C * q->ovol * q->kvol;
    const int one = t->ni == 1 && t->no == 1;
    _Pragma("omp parallel for schedule(dynamic, opc_par_chunk(units, work, 32768)) if (work >= opc_par_min(32768)) num_threads(opc_num_threads())")
    for (int64_t u = 0; u < units; u++) {
        const int64_t n = u / chunks, c0 = u % chunks * OPC_CF_DWV_CHUNK;
        const int64_t c1 = c0 + OPC_CF_DWV_CHUNK < C ? c0 + OPC_CF_DWV_CHUNK : C;
        const float *x = src + n * C * q->ivol;
        float *y = dst + n * C * q->ovol, *z = pre ? pre + n * C * q->ovol : NULL;
        if (one) opc_cf_dwv_chunk_one(x, wk, y, z, bias, act, t, q, c0, c1);
        else opc_cf_dwv_chunk_many(x, wk, y, z, bias, act, t, q, c0, c1);
        if (ep) ep(ep_ctx, n * C + c0, n * C + c1, 0, q->ovol);
    }
}
#else
#define OPC_CF_DWV 0
#endif

static int opc_cf_dwc_run(const float *src, const float *wk, float *dst, float *pre, const float *bias, int act,
                          const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
#if OPC_CF_DWV
    const opc_cf_dwv_table *table = opc_cf_dwv_table_for(q);
    if (table && table->group > 1 && opc_cf_dwg_run(src, wk, dst, pre, bias, act, q, table, ep, ep_ctx) == 0) {
        opc_rt_route(OPC_ROUTE_DEPTHWISE_GROUPED);
        return 0;
    }
    if (table && table->group == 1) {
        opc_rt_route(OPC_ROUTE_DEPTHWISE_PLANE_VECTOR);
        opc_cf_dwv_run(src, wk, dst, pre, bias, act, q, table, ep, ep_ctx);
        return 0;
    }
#endif
    opc_rt_route(OPC_ROUTE_DEPTHWISE_CHANNELS_LAST);
    const opc_cf_plan p = opc_cf_dw_plan(q);
    const int64_t C = q->g, kvol = q->kvol, ovol = q->ovol, blocks = (C + OPC_CF_V - 1) / OPC_CF_V;
    const int64_t units = q->n * blocks;
    /* base[o]: output o's first tap's padded position; off[k]: tap k's offset from it; at[i]: input
       position i's padded position (-1: past the padded plane) */
    int64_t *base = (int64_t *)malloc(sizeof(int64_t) * (ovol + kvol + q->ivol));
    if (!base) return -1;
    int64_t *off = base + ovol, *at = off + kvol, o = 0, i = 0;
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < q->out[1]; o1++)
            for (int64_t o2 = 0; o2 < q->out[2]; o2++)
                base[o++] = (o0 * q->s[0] * p.P[1] + o1 * q->s[1]) * p.P[2] + o2 * q->s[2];
    for (int64_t i0 = p.pb[0]; i0 < q->in[0] + p.pb[0]; i0++)
        for (int64_t i1 = p.pb[1]; i1 < q->in[1] + p.pb[1]; i1++)
            for (int64_t i2 = p.pb[2]; i2 < q->in[2] + p.pb[2]; i2++)
                at[i++] = i0 < p.P[0] && i1 < p.P[1] && i2 < p.P[2] ? (i0 * p.P[1] + i1) * p.P[2] + i2 : -1;
    opc_cf_offsets(off, &p);
    const opc_cf_dwc_weights whole = {wk, C, kvol};
    const int64_t key[OPC_FROZEN_KEY] = {6, C, kvol, OPC_CF_V}; /* 6: this layout */
    const float *frozen = opc_rt_frozen_packed(wk, (int64_t)sizeof(float) * C * kvol, key, blocks * kvol * OPC_CF_V,
                                               opc_cf_dwc_pack_all, &whole);
    int failed = 0;
    _Pragma("omp parallel if (units * ovol * OPC_CF_V * kvol >= opc_par_min(32768)) num_threads(opc_num_threads())")
    {
        /* xt [PV][V], wt [kvol][V], yt [ovol][V]; xt's padding zeroed once (blocks only write its interior) */
        float *xt = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * OPC_CF_V * (p.PV + kvol + ovol));
        if (!xt) {
            _Pragma("omp atomic write")
            failed = 1;
        } else {
            memset(xt, 0, sizeof(float) * OPC_CF_V * p.PV);
        }
        float *wt = xt + OPC_CF_V * p.PV, *yt = wt + OPC_CF_V * kvol;
        _Pragma("omp for schedule(dynamic, opc_par_chunk(units, units * ovol * OPC_CF_V * kvol, 32768))")
        for (int64_t u = 0; u < units; u++) {
            if (!xt) continue;
            const int64_t n = u / blocks, c0 = u % blocks * OPC_CF_V, nv = C - c0 < OPC_CF_V ? C - c0 : OPC_CF_V;
            const float *wb = frozen ? frozen + c0 * kvol : wt;
            if (!frozen) opc_cf_dwc_pack_block(wk, C, kvol, c0, wt);
            opc_cf_dwc_gather(src + n * C * q->ivol, xt, c0, nv, at, q->ivol);
            if (kvol == 9) opc_cf_dwc_taps(xt, wb, yt, base, off, ovol, 9);
            else opc_cf_dwc_taps(xt, wb, yt, base, off, ovol, kvol);
            opc_cf_dwc_scatter(yt, dst + n * C * ovol, pre ? pre + n * C * ovol : NULL, c0, nv, bias, act, ovol);
            if (ep) ep(ep_ctx, n * C + c0, n * C + c0 + nv, 0, ovol);
        }
    }
    free(base);
    return failed ? -1 : 0;
}

/* Whether conv q is depthwise (one input and one output channel per group): its forward and gradients
 * run the kernels below at any strides. */
static inline int opc_cf_dw_applies(const opc_cv_geom *q) { return q->cg == 1 && q->og == 1; }

static int opc_cf_dw_conv(const float *x, const float *w, const float *bias, int act, float *y, float *z,
                          const opc_cv_geom *q) {
    if (q->out[2] < OPC_CF_V) return opc_cf_dwc_run(x, w, y, z, bias, act, q, NULL, NULL);
    if (opc_cf_dw_planes_apply(q)) return opc_cf_dw_planes_run(x, w, y, z, bias, act, q, NULL, NULL);
    opc_rt_route(OPC_ROUTE_DEPTHWISE_PLANES);
    const opc_cf_plan p = opc_cf_plan_make(q->g, 1, 1, q->in, q->out, q->k, q->d, q->p);
    return opc_cf_dw_run(x, w, y, z, q->n, bias, act, &p);
}

/* dx: the depthwise conv of dy with the taps flipped (pads d (k - 1) - pb). */
static int opc_cf_dw_data(const float *dy, const float *w, float *dx, const opc_cv_geom *q) {
    opc_rt_route(OPC_ROUTE_CONV_GRAD_INPUT_DEPTHWISE);
    int64_t pb[3];
    for (int i = 0; i < 3; i++) pb[i] = q->d[i] * (q->k[i] - 1) - q->p[i];
    const opc_cf_plan p = opc_cf_plan_make(q->g, 1, 1, q->out, q->in, q->k, q->d, pb);
    float *wf = (float *)malloc(sizeof(float) * q->g * q->kvol);
    if (!wf) return -1;
    for (int64_t c = 0; c < q->g; c++)
        for (int64_t k = 0; k < q->kvol; k++) wf[c * q->kvol + k] = w[c * q->kvol + q->kvol - 1 - k];
    const int rc = opc_cf_dw_run(dy, wf, dx, NULL, q->n, NULL, OPC_CF_ACT_NONE, &p);
    free(wf);
    return rc;
}

/* dw[c, k] = sum over images and positions of dyp[p] * xp[p + off[k]], per channel in its own thread
 * (images in order, each tap's lanes summed once at the end). */
static int opc_cf_dw_filter(const float *x, const float *dy, float *dw, const opc_cv_geom *q) {
    opc_rt_route(OPC_ROUTE_CONV_GRAD_FILTER_DEPTHWISE);
    const opc_cf_plan p = opc_cf_plan_make(q->g, 1, 1, q->in, q->out, q->k, q->d, q->p);
    const int64_t Lr = (p.L + OPC_CF_V - 1) / OPC_CF_V * OPC_CF_V, kvol = q->kvol;
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * kvol);
    if (!off) return -1;
    opc_cf_offsets(off, &p);
    int failed = 0;
    _Pragma("omp parallel if (q->n * q->g * q->ovol * kvol >= opc_par_min(32768)) num_threads(opc_num_threads())")
    {
        float *xp = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (p.PV + OPC_CF_NR + Lr));
        float *dyp = (float *)opc_cf_scratch(OPC_CF_BUF_DY, sizeof(float) * Lr);
        opc_cf_uvec *c = (opc_cf_uvec *)malloc(sizeof(opc_cf_vec) * kvol); /* malloc aligns to 16 bytes only */
        if (!xp || !dyp || !c) {
            _Pragma("omp atomic write")
            failed = 1;
        }
        _Pragma("omp for schedule(dynamic, opc_par_chunk(q->g, q->g, 1))")
        for (int64_t ch = 0; ch < q->g; ch++) {
            if (!xp || !dyp || !c) continue;
            for (int64_t k = 0; k < kvol; k++) c[k] = (opc_cf_vec){0};
            memset(dyp, 0, sizeof(float) * Lr);
            for (int64_t n = 0; n < q->n; n++) {
                opc_cf_pad(x + (n * q->c + ch) * q->ivol, xp, &p);
                memset(xp + p.PV + OPC_CF_NR, 0, sizeof(float) * Lr);
                const float *d = dy + (n * q->o + ch) * q->ovol;
                for (int64_t o0 = 0; o0 < q->out[0]; o0++)
                    for (int64_t o1 = 0; o1 < q->out[1]; o1++)
                        memcpy(dyp + (o0 * p.P[1] + o1) * p.P[2], d + (o0 * q->out[1] + o1) * q->out[2],
                               sizeof(float) * q->out[2]);
                for (int64_t k = 0; k < kvol; k++) {
                    opc_cf_vec a = c[k];
                    const float *s = xp + off[k];
                    for (int64_t i = 0; i < Lr; i += OPC_CF_V)
                        a += *(const opc_cf_uvec *)(dyp + i) * *(const opc_cf_uvec *)(s + i);
                    c[k] = a;
                }
            }
            for (int64_t k = 0; k < kvol; k++) {
                float sum = 0.0f;
                for (int l = 0; l < OPC_CF_V; l++) sum += c[k][l];
                dw[ch * kvol + k] = sum;
            }
        }
        free(c);
    }
    free(off);
    return failed ? -1 : 0;
}

/* The gradients of a depthwise conv (op 1: dx from dy = a and w = b; 2: dw from x = a and dy = b) by
 * the stride-1 kernels above; strided, on dy spread onto a stride-1 grid of (out - 1) s + 1 positions
 * per dim, zeros between. The stride-1 conv on that grid, read at every s-th position, is the strided
 * conv, so its gradients for the spread dy are the strided conv's. The zeros cost the kernels s0 s1 s2
 * times the products, in vectors where the general loop nest took scalars: MobileNetV2's strided
 * depthwise gradients were a fifth of its training step. -1: out of memory, or strided with no output
 * (the general loops then). */
static int opc_cf_dw_grad(int op, const float *a, const float *b, float *r, const opc_cv_geom *q) {
    if (q->s[0] == 1 && q->s[1] == 1 && q->s[2] == 1)
        return op == 1 ? opc_cf_dw_data(a, b, r, q) : opc_cf_dw_filter(a, b, r, q);
    if (q->ovol == 0) return -1;
    opc_cv_geom q1 = *q;
    for (int i = 0; i < 3; i++) q1.out[i] = (q->out[i] - 1) * q->s[i] + 1, q1.s[i] = 1;
    q1.ovol = q1.out[0] * q1.out[1] * q1.out[2];
    const float *dy = op == 1 ? a : b;
    const int64_t planes = q->n * q->o;
    float *spread = (float *)calloc((size_t)(planes * q1.ovol), sizeof(float));
    if (!spread) return -1;
    _Pragma("omp parallel for if (planes * q1.ovol >= opc_par_min(65536)) num_threads(opc_num_threads())")
    for (int64_t plane = 0; plane < planes; plane++) {
        const float *d = dy + plane * q->ovol;
        float *u = spread + plane * q1.ovol;
        for (int64_t o0 = 0; o0 < q->out[0]; o0++)
            for (int64_t o1 = 0; o1 < q->out[1]; o1++)
                for (int64_t o2 = 0; o2 < q->out[2]; o2++)
                    u[(o0 * q->s[0] * q1.out[1] + o1 * q->s[1]) * q1.out[2] + o2 * q->s[2]] =
                        d[(o0 * q->out[1] + o1) * q->out[2] + o2];
    }
    const int rc = op == 1 ? opc_cf_dw_data(spread, b, r, &q1) : opc_cf_dw_filter(a, spread, r, &q1);
    free(spread);
    return rc;
}

/* ---- max_pool (f32): OPC_CF_V outputs of a row at a time -------------------------------------- */

/* max_pool's outputs [a, b) of row (o0, o1) of plane x (b - a >= V; every tap along the row inside
 * the plane, so no index is checked along it): y[o2], idx[o2] = ibase + the maximum's index in the
 * plane, V outputs per vector, the last vector shifted back to end at b (its overlap recomputed,
 * to the same values). Taps in max_pool_one's order with its rules: the first tap's value, then
 * a tap replaces a non-NaN maximum when greater or NaN. Each tap's compare and blend waits for the
 * previous one's, so OPC_CF_POOL_U vectors of the row go through the taps side by side (a group
 * short of vectors repeats its last one). The plane has fewer than 2^31 elements. */
#define OPC_CF_POOL_U 4
static void opc_cf_max_pool_span(const float *x, float *y, int64_t *idx, int64_t ibase, const opc_pl_geom *q,
                                 int64_t o0, int64_t o1, int64_t a, int64_t b) {
    const int64_t s2 = q->s[2], d2 = q->d[2];
    const opc_cf_ivec iota = OPC_CF_IOTA;
    for (int64_t c = a; c < b; c += OPC_CF_POOL_U * OPC_CF_V) {
        int64_t c0[OPC_CF_POOL_U];
        for (int u = 0; u < OPC_CF_POOL_U; u++) {
            const int64_t at = c + u * OPC_CF_V;
            c0[u] = at + OPC_CF_V <= b ? at : b - OPC_CF_V;
        }
        opc_cf_vec acc[OPC_CF_POOL_U];
        opc_cf_ivec best[OPC_CF_POOL_U];
        for (int u = 0; u < OPC_CF_POOL_U; u++) acc[u] = (opc_cf_vec){0}, best[u] = (opc_cf_ivec){0};
        int first = 1;
        for (int64_t t0 = 0; t0 < q->k[0]; t0++)
            for (int64_t t1 = 0; t1 < q->k[1]; t1++) {
                int64_t row;
                if (!opc_pl_window_row(q, o0, o1, t0, t1, &row)) continue;
                for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                    const int64_t tap = row - q->pb[2] + t2 * d2;
                    _Pragma("GCC unroll 4") for (int u = 0; u < OPC_CF_POOL_U; u++) {
                        const int64_t at = tap + c0[u] * s2;
                        opc_cf_vec v;
                        opc_cf_strided(x + at, s2, &v);
                        const opc_cf_ivec pos = iota * (int32_t)s2 + (int32_t)at;
                        const opc_cf_ivec take = first ? (opc_cf_ivec){0} - 1
                                                       : (acc[u] == acc[u]) & ((v > acc[u]) | (v != v));
                        acc[u] = (opc_cf_vec)(((opc_cf_ivec)v & take) | ((opc_cf_ivec)acc[u] & ~take));
                        best[u] = (pos & take) | (best[u] & ~take);
                    }
                    first = 0;
                }
            }
        for (int u = 0; u < OPC_CF_POOL_U; u++) {
            *(opc_cf_uvec *)(y + c0[u]) = acc[u];
            if (idx)
                for (int j = 0; j < OPC_CF_V; j++) idx[c0[u] + j] = ibase + best[u][j];
        }
    }
}

/* The window rows (t0, t1) of output row (o0, o1) that lie inside x, each as its columns
 * [from, from + span) copied into buf, span floats apart, zeros where a column lies outside x (so a
 * vector reads them all in bounds); rows (or NULL): each copied row's flat index in the plane of
 * its x[.., 0]. The number of rows copied. */
static int opc_cf_pool_rows(const float *x, float *buf, int32_t *rows, const opc_pl_geom *q, int64_t o0, int64_t o1,
                            int64_t from, int64_t span) {
    const int64_t in2 = q->in[2], lo = from > 0 ? from : 0, hi = from + span < in2 ? from + span : in2;
    int n = 0;
    for (int64_t t0 = 0; t0 < q->k[0]; t0++)
        for (int64_t t1 = 0; t1 < q->k[1]; t1++) {
            int64_t row;
            if (!opc_pl_window_row(q, o0, o1, t0, t1, &row)) continue;
            float *r = buf + n * span;
            if (rows) rows[n] = (int32_t)row;
            n++;
            if (lo >= hi) {
                memset(r, 0, (size_t)span * sizeof(float));
                continue;
            }
            memset(r, 0, (size_t)(lo - from) * sizeof(float));
            memcpy(r + (lo - from), x + row + lo, (size_t)(hi - lo) * sizeof(float));
            memset(r + (hi - from), 0, (size_t)(span - (hi - from)) * sizeof(float));
        }
    return n;
}

/* max_pool's outputs [a, b) of row (o0, o1) of plane x, any of them (the row's edges, or a row
 * shorter than a vector), V outputs per vector. The columns of the window rows (t0, t1) inside x
 * that these outputs' taps reach (from column a * s2 - pb2 on: not the whole row, so a wide
 * image's edge outputs take this path too) are copied into buf with zeros around them, so every
 * lane loads in bounds; a lane whose tap lies outside x is masked out of its maximum, so padding
 * is never taken. The rules are max_pool_one's, lane by lane: the first tap inside x taken, then
 * a tap replaces a non-NaN maximum when greater or NaN; a window with no tap inside x gives -inf
 * and the index ibase - 1, as max_pool_one.
 * 0 when buf (cap floats) cannot hold the rows: the caller takes max_pool_one. ivol < 2^31. */
#define OPC_CF_POOL_BUF 8192
static int opc_cf_max_pool_lanes(const float *x, float *y, int64_t *idx, int64_t ibase, const opc_pl_geom *q,
                                 int64_t o0, int64_t o1, int64_t a, int64_t b) {
    if (a >= b) return 1;
    const int64_t s2 = q->s[2], in2 = q->in[2], pb2 = q->pb[2];
    /* buf floats per row: lane V - 1 of the vector at b - 1 reads (b - 1 - a + V - 1) * s2 +
       (k2 - 1) * d2 past column `from` */
    const int64_t span = (b - a + OPC_CF_V) * s2 + (q->k[2] - 1) * q->d[2] + 1, from = a * s2 - pb2;
    if (q->k[0] * q->k[1] * span > OPC_CF_POOL_BUF) return 0;
    float buf[OPC_CF_POOL_BUF];
    int32_t rows[OPC_CF_POOL_BUF / 2]; /* the flat index in the plane of each copied row's x[.., 0] */
    const int nrows = opc_cf_pool_rows(x, buf, rows, q, o0, o1, from, span);
    const opc_cf_ivec iota = OPC_CF_IOTA;
    for (int64_t c = a; c < b; c += OPC_CF_V) {
        const opc_cf_ivec live = iota < (int32_t)(b - c);
        opc_cf_vec acc = (opc_cf_vec){0} - INFINITY;
        opc_cf_ivec best = (opc_cf_ivec){0} - 1;
        for (int w = 0; w < nrows; w++)
            for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                const int64_t first = (c - a) * s2 + t2 * q->d[2]; /* buf offset of lane 0's tap */
                const opc_cf_ivec r = (iota + (int32_t)c) * (int32_t)s2 + (int32_t)(t2 * q->d[2] - pb2);
                const opc_cf_ivec ok = live & (r >= 0) & (r < (int32_t)in2);
                opc_cf_vec v;
                opc_cf_strided(buf + w * span + first, s2, &v);
                const opc_cf_ivec take = ok & ((best < 0) | ((acc == acc) & ((v > acc) | (v != v))));
                acc = (opc_cf_vec)(((opc_cf_ivec)v & take) | ((opc_cf_ivec)acc & ~take));
                best = ((r + rows[w]) & take) | (best & ~take);
            }
        if (c + OPC_CF_V <= b) { /* a whole vector (a row of V outputs): stored as the span stores */
            *(opc_cf_uvec *)(y + c) = acc;
            if (idx)
                for (int j = 0; j < OPC_CF_V; j++) idx[c + j] = ibase + best[j];
            continue;
        }
        for (int64_t j = 0; j < OPC_CF_V && c + j < b; j++) {
            y[c + j] = acc[j];
            if (idx) idx[c + j] = ibase + best[j];
        }
    }
    return 1;
}

/* max_pool's row (o0, o1) of plane x (f32, ivol < 2^31): the outputs whose taps along the row all
 * lie inside x (all but a few at the edges) by whole vectors (opc_cf_max_pool_span), where they
 * span one and some window row lies inside x; the rest lane-masked (opc_cf_max_pool_lanes), except
 * an edge of at most OPC_CF_POOL_EDGE outputs beside a span (a padded image's first output, often
 * its last): those are left to the caller's output-by-output path, [0, *left) and [*right, n),
 * which costs them less than a masked vector and its copied rows.
 * 0 where the lanes' buffer cannot hold the window's rows: the caller takes max_pool_one. */
#define OPC_CF_POOL_EDGE 4
static int opc_cf_max_pool_row(const float *x, float *y, int64_t *idx, int64_t ibase, const opc_pl_geom *q,
                               int64_t o0, int64_t o1, int64_t *left, int64_t *right) {
    const int64_t s2 = q->s[2], d2 = q->d[2], pb2 = q->pb[2], n = q->out[2];
    const int64_t last = q->in[2] - 1 - (q->k[2] - 1) * d2 + pb2; /* o2 * s2 <= last: the window's end inside */
    int64_t a = (pb2 + s2 - 1) / s2, b = last < 0 ? 0 : last / s2 + 1;
    if (b > n) b = n;
    if (a > b) a = b;
    int rows = 0; /* whether some (t0, t1) row of the windows lies inside x */
    for (int64_t t0 = 0, row; t0 < q->k[0]; t0++)
        for (int64_t t1 = 0; t1 < q->k[1]; t1++) rows |= opc_pl_window_row(q, o0, o1, t0, t1, &row);
    if (!rows || b - a < OPC_CF_V) a = b = n;
    *left = a < b && a <= OPC_CF_POOL_EDGE ? a : 0;
    *right = a < b && n - b <= OPC_CF_POOL_EDGE ? b : n;
    if (!opc_cf_max_pool_lanes(x, y, idx, ibase, q, o0, o1, *left, a) ||
        !opc_cf_max_pool_lanes(x, y, idx, ibase, q, o0, o1, b, *right))
        return 0;
    if (a < b) opc_cf_max_pool_span(x, y, idx, ibase, q, o0, o1, a, b);
    return 1;
}

/* ---- avg_pool (f32): a row's outputs V at a time ------------------------------------------------- */

/* avg_pool's row (o0, o1) of plane x (f32, ivol < 2^31), in chunks of at most OPC_CF_AVG_CHUNK
 * outputs: the chunk's columns of each window row (t0, t1) inside x copied into buf with zeros
 * around them, then V outputs at a time, each the sum of its taps in pl_window's order (a tap
 * outside x adds the copy's zero, which leaves every sum's bits as they are, so the result is
 * the output-by-output path's), divided by its count (opc_pl_count: the row's count over dims 0
 * and 1 times the output's taps along the row). A row shorter than a vector sums its taps in
 * place, output by output, without the copy (whose cost per row it would not repay). 0 where buf
 * (OPC_CF_POOL_BUF floats) cannot hold the window's rows for a vector of outputs: the caller
 * takes the output-by-output path. */
#define OPC_CF_AVG_CHUNK 256
#define OPC_CF_AVG_ROWS 64 /* window rows a short row's outputs read in place */
static int opc_cf_avg_pool_row(const float *x, float *y, const opc_pl_geom *q, int64_t o0, int64_t o1) {
    const int64_t s2 = q->s[2], d2 = q->d[2], pb2 = q->pb[2], in2 = q->in[2], n = q->out[2];
    const int64_t kr = q->k[0] * q->k[1];
    int64_t len = n < OPC_CF_AVG_CHUNK ? n : OPC_CF_AVG_CHUNK;
    while (len > OPC_CF_V && kr * ((len + OPC_CF_V) * s2 + (q->k[2] - 1) * d2 + 1) > OPC_CF_POOL_BUF) len /= 2;
    const int64_t span = (len + OPC_CF_V) * s2 + (q->k[2] - 1) * d2 + 1; /* buf floats per window row */
    if (kr * span > OPC_CF_POOL_BUF) return 0;
    /* the row's count over dims 0 and 1 */
    const int64_t c01 = opc_pl_taps(q, 0, o0 * q->s[0] - q->pb[0]) * opc_pl_taps(q, 1, o1 * q->s[1] - q->pb[1]);
    if (n < OPC_CF_V && kr <= OPC_CF_AVG_ROWS) { /* a row shorter than a vector: its taps read in place */
        int64_t rows[OPC_CF_AVG_ROWS];
        int nrows = 0;
        for (int64_t t0 = 0; t0 < q->k[0]; t0++)
            for (int64_t t1 = 0; t1 < q->k[1]; t1++)
                if (opc_pl_window_row(q, o0, o1, t0, t1, &rows[nrows])) nrows++;
        for (int64_t o2 = 0; o2 < n; o2++) {
            const int64_t first = o2 * s2 - pb2;
            float sum = 0.0f;
            for (int w = 0; w < nrows; w++)
                for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                    const int64_t i = first + t2 * d2;
                    if (i >= 0 && i < in2) sum += x[rows[w] + i];
                }
            y[o2] = sum / (float)(c01 * opc_pl_taps(q, 2, first));
        }
        return 1;
    }
    float buf[OPC_CF_POOL_BUF], div[OPC_CF_AVG_CHUNK + OPC_CF_V];
    for (int64_t c = 0; c < n; c += len) {
        const int64_t m = n - c < len ? n - c : len;
        const int nrows = opc_cf_pool_rows(x, buf, NULL, q, o0, o1, c * s2 - pb2, span);
        for (int64_t j = 0; j < m; j++) div[j] = (float)(c01 * opc_pl_taps(q, 2, (c + j) * s2 - pb2));
        for (int64_t j = 0; j < m; j += OPC_CF_V) {
            opc_cf_vec acc = (opc_cf_vec){0}, v;
            for (int w = 0; w < nrows; w++)
                for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                    opc_cf_strided(buf + w * span + j * s2 + t2 * d2, s2, &v);
                    acc += v;
                }
            if (j + OPC_CF_V <= m) {
                *(opc_cf_uvec *)(y + c + j) = acc / *(const opc_cf_uvec *)(div + j);
                continue;
            }
            for (int64_t l = 0; j + l < m; l++) y[c + j + l] = acc[l] / div[j + l];
        }
    }
    return 1;
}

/* ---- 2x2 windows at stride 2 (f32): whole planes -------------------------------------------------- */

/* Whether pool q takes the plane kernels below: a 2x2 window at stride 2 in the plane, no padding,
 * dilation or depth taps, every window inside x (the rows twice the output's width): most CNNs'
 * 2x2 pools, whose short rows cost the row kernels more in overhead than in taps (the small CNN's
 * 8 x 8 outputs: about 50 ns a row). The plane has fewer than 2^31 elements. */
static inline int opc_cf_pool2_applies(const opc_pl_geom *q) {
    return q->k[0] == 1 && q->s[0] == 1 && q->in[0] == q->out[0] && q->pb[0] == 0 && q->k[1] == 2 &&
           q->k[2] == 2 && q->s[1] == 2 && q->s[2] == 2 && q->d[1] == 1 && q->d[2] == 1 && q->pb[1] == 0 &&
           q->pb[2] == 0 && q->in[2] == 2 * q->out[2] && q->in[1] >= 2 * q->out[1] && q->ivol < ((int64_t)1 << 31);
}

/* max_pool of plane x (opc_cf_pool2_applies): y, idx = ibase + the maximum's index in the plane, with
 * max_pool_one's taps, order and rules (the first tap's value, then a tap replaces a non-NaN
 * maximum when greater or NaN), each output's four taps in one loop the compiler vectorizes. */
static void opc_cf_max_pool2_plane(const float *x, float *y, int64_t *idx, int64_t ibase, const opc_pl_geom *q) {
    const int64_t W = q->in[2], n = q->out[2];
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < q->out[1]; o1++) {
            const int64_t r = (o0 * q->in[1] + 2 * o1) * W, e = (o0 * q->out[1] + o1) * n;
            const float *a = x + r, *b = a + W;
            _Pragma("omp simd")
            for (int64_t c = 0; c < n; c++) {
                const float t[4] = {a[2 * c], a[2 * c + 1], b[2 * c], b[2 * c + 1]};
                const int64_t at[4] = {2 * c, 2 * c + 1, W + 2 * c, W + 2 * c + 1};
                float acc = t[0];
                int64_t best = at[0];
                for (int k = 1; k < 4; k++) {
                    const int take = acc == acc && (t[k] > acc || t[k] != t[k]);
                    acc = take ? t[k] : acc;
                    best = take ? at[k] : best;
                }
                y[e + c] = acc;
                idx[e + c] = ibase + r + best;
            }
        }
}

/* avg_pool of plane x (opc_cf_pool2_applies): each output the sum of its four taps from zero in
 * pl_window's order, over 4 (every window inside x), as the row kernels. */
static void opc_cf_avg_pool2_plane(const float *x, float *y, const opc_pl_geom *q) {
    const int64_t W = q->in[2], n = q->out[2];
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < q->out[1]; o1++) {
            const float *a = x + (o0 * q->in[1] + 2 * o1) * W, *b = a + W;
            float *yr = y + (o0 * q->out[1] + o1) * n;
            _Pragma("omp simd")
            for (int64_t c = 0; c < n; c++) yr[c] = ((((0.0f + a[2 * c]) + a[2 * c + 1]) + b[2 * c]) + b[2 * c + 1]) / 4.0f;
        }
}

/* ---- max_pool's values alone (f32): whole planes ------------------------------------------------- */

/* The padded plane of max_pool's values kernel: P0 x P1 rows of `pitch` floats, each the input row
 * with -inf around it up to `reach` (the columns a vector of outputs reads), and V floats beyond
 * (the strided loads' reach past it). */
typedef struct {
    int64_t P[3], reach, pitch, vol;
} opc_cf_pool_pad;

static inline opc_cf_pool_pad opc_cf_pool_pad_make(const opc_pl_geom *q) {
    opc_cf_pool_pad b;
    for (int i = 0; i < 3; i++) b.P[i] = (q->out[i] - 1) * q->s[i] + q->d[i] * (q->k[i] - 1) + 1;
    const int64_t vec = (OPC_CF_V - 1) * q->s[2] + q->d[2] * (q->k[2] - 1) + 1;
    b.reach = b.P[2] > vec ? b.P[2] : vec;
    b.pitch = b.reach + OPC_CF_V;
    b.vol = b.P[0] * b.P[1] * b.pitch;
    return b;
}

/* Output rows o1 .. o1 + R of slice o0, V columns from c0: the taps in order, each lane's maximum
 * kept where a tap is not greater (max_pool_one's rule, so of equal values the first stays), and
 * the first NaN a lane meets, which is its result (a chain of one max per tap: the NaN bookkeeping
 * stays off it). */
static inline __attribute__((always_inline)) void opc_cf_max_values_block(const float *buf, const opc_cf_pool_pad *b,
                                                                          const opc_pl_geom *q, int64_t o0, int64_t o1,
                                                                          int64_t c0, int R, int64_t S2, opc_cf_vec *acc) {
    opc_cf_vec nan_v[OPC_CF_DWR_R];
    opc_cf_ivec seen[OPC_CF_DWR_R];
    for (int r = 0; r < R; r++) acc[r] = (opc_cf_vec){0} - (float)INFINITY, nan_v[r] = acc[r], seen[r] = (opc_cf_ivec){0};
    for (int64_t t0 = 0; t0 < q->k[0]; t0++)
        for (int64_t t1 = 0; t1 < q->k[1]; t1++)
            for (int64_t t2 = 0; t2 < q->k[2]; t2++) {
                const float *at = buf + ((o0 * q->s[0] + t0 * q->d[0]) * b->P[1] + o1 * q->s[1] + t1 * q->d[1]) * b->pitch +
                                  c0 * S2 + t2 * q->d[2];
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    opc_cf_vec v;
                    opc_cf_strided(at + r * q->s[1] * b->pitch, S2, &v);
                    const opc_cf_ivec first_nan = (v != v) & ~seen[r];
                    nan_v[r] = (opc_cf_vec)(((opc_cf_ivec)v & first_nan) | ((opc_cf_ivec)nan_v[r] & ~first_nan));
                    seen[r] |= first_nan;
                    const opc_cf_ivec gt = v > acc[r];
                    acc[r] = (opc_cf_vec)((gt & (opc_cf_ivec)v) | (~gt & (opc_cf_ivec)acc[r]));
                }
            }
    for (int r = 0; r < R; r++) acc[r] = (opc_cf_vec)(((opc_cf_ivec)nan_v[r] & seen[r]) | ((opc_cf_ivec)acc[r] & ~seen[r]));
}

/* max_pool's values of plane x (f32, no indices: an inference graph's pools), any window: the
 * plane padded with -inf into buf (opc_cf_pool_pad), then OPC_CF_DWR_R output rows and V outputs
 * at a time (the last row block and vector shifted back, their overlap recomputed to the same
 * values; a row shorter than a vector computes V outputs into the padding and keeps its own).
 * Each output is max_pool_one's value: its first NaN where it meets one, else its first greatest
 * tap, which the padding's -inf never displaces (a window of padding alone: -inf, as there). */
static void opc_cf_max_pool_values_plane(const float *x, float *y, float *buf, const opc_cf_pool_pad *b,
                                         const opc_pl_geom *q) {
    const opc_cf_vec ninf = (opc_cf_vec){0} - (float)INFINITY;
    const int64_t a2 = q->pb[2] < b->reach ? q->pb[2] : b->reach;
    const int64_t n2 = q->in[2] < b->reach - a2 ? q->in[2] : b->reach - a2;
    for (int64_t i0 = 0; i0 < b->P[0]; i0++)
        for (int64_t i1 = 0; i1 < b->P[1]; i1++) {
            float *row = buf + (i0 * b->P[1] + i1) * b->pitch;
            const int64_t s0 = i0 - q->pb[0], s1 = i1 - q->pb[1];
            if (!(s0 >= 0 && s0 < q->in[0] && s1 >= 0 && s1 < q->in[1] && n2 > 0)) {
                opc_cf_fill_vec(row, 0, b->reach, ninf);
                continue;
            }
            /* -inf over the padding on both sides, then the row (over any -inf a shifted store left in it) */
            opc_cf_fill_vec(row, 0, a2 > 0 ? OPC_CF_V : 0, ninf);
            opc_cf_fill_vec(row, a2 + n2, a2 + n2 < b->reach ? (b->reach - a2 - n2 >= OPC_CF_V ? b->reach : a2 + n2 + OPC_CF_V) : 0,
                            ninf);
            const float *src = x + (s0 * q->in[1] + s1) * q->in[2];
            if (n2 < OPC_CF_V) { /* (a libc call per row cost more than the pool's taps) */
                for (int64_t j = 0; j < n2; j++) row[a2 + j] = src[j];
                continue;
            }
            opc_cf_copy_vec(row + a2, src, n2);
        }
    const int64_t O1 = q->out[1], O2 = q->out[2];
    const int R = O1 >= OPC_CF_DWR_R ? OPC_CF_DWR_R : 1;
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < O1; o1 += R) {
            const int64_t r0 = o1 + R <= O1 ? o1 : O1 - R;
            for (int64_t c = 0; c < O2; c += OPC_CF_V) {
                const int64_t c0 = O2 < OPC_CF_V ? 0 : c + OPC_CF_V <= O2 ? c : O2 - OPC_CF_V;
                opc_cf_vec acc[OPC_CF_DWR_R];
                /* inlined with a constant stride along the row where it is 1 or 2 (no branch per load) */
                if (R == OPC_CF_DWR_R && q->s[2] == 2) opc_cf_max_values_block(buf, b, q, o0, r0, c0, OPC_CF_DWR_R, 2, acc);
                else if (R == OPC_CF_DWR_R && q->s[2] == 1) opc_cf_max_values_block(buf, b, q, o0, r0, c0, OPC_CF_DWR_R, 1, acc);
                else if (R == OPC_CF_DWR_R) opc_cf_max_values_block(buf, b, q, o0, r0, c0, OPC_CF_DWR_R, q->s[2], acc);
                else opc_cf_max_values_block(buf, b, q, o0, r0, c0, 1, q->s[2], acc);
                for (int r = 0; r < R; r++) {
                    float *yr = y + (o0 * O1 + r0 + r) * O2 + c0;
                    if (O2 >= OPC_CF_V) *(opc_cf_uvec *)yr = acc[r];
                    else
                        for (int64_t j = 0; j < O2; j++) yr[j] = acc[r][j];
                }
            }
        }
}

/* Of a's taps then b's, max_pool_one's pick: a's first NaN, else b's, else b where it is greater
 * (of equal values the first stays). */
static inline opc_cf_vec opc_cf_max_first(opc_cf_vec a, opc_cf_vec b) {
    const opc_cf_ivec take = ((b != b) | (b > a)) & ~(a != a);
    return (opc_cf_vec)((take & (opc_cf_ivec)b) | (~take & (opc_cf_ivec)a));
}

#if OPC_CF_V == 16 && defined(__AVX512F__)
/* Lanes l of [0, 16) whose element first + l of a row of W lies in it. */
static inline __mmask16 opc_cf_row_lanes(int64_t first, int64_t W) {
    const int64_t lo = first < 0 ? -first : 0, hi = W - first;
    if (hi <= lo || lo >= 16) return 0;
    const uint32_t below = hi >= 16 ? 0xFFFFu : (1u << hi) - 1u;
    return (__mmask16)(below & ~((1u << lo) - 1u));
}

/* v[j] = row[first + 2 j], -inf where that lies outside the row (ONNX's padding for max): opc_cf_strided's
 * two loads and shuffle, masked by m[0], m[1] (opc_cf_row_lanes of first and first + V - 1; a lane
 * masked out reads nothing). */
static inline opc_cf_vec opc_cf_row_even(const float *row, int64_t first, const __mmask16 *m) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const uintptr_t at = (uintptr_t)row + (uintptr_t)(first * (int64_t)sizeof(float)); /* may lie before row */
    const opc_cf_vec lo = (opc_cf_vec)_mm512_mask_loadu_ps(ninf, m[0], (const void *)at);
    const opc_cf_vec hi = (opc_cf_vec)_mm512_mask_loadu_ps(ninf, m[1], (const void *)(at + (OPC_CF_V - 1) * sizeof(float)));
    return __builtin_shuffle(lo, hi, (opc_cf_ivec)OPC_CF_EVEN);
}
/* opc_cf_max_first(opc_cf_max_first(a, b), c) by vmaxps, which keeps its second operand unless the
 * first is greater (so the earlier of equals, and a NaN already kept): exact unless b or c is a NaN
 * that an earlier tap did not precede, which the NaN check sends to the exact picks. */
static inline opc_cf_vec opc_cf_max3_first(opc_cf_vec a, opc_cf_vec b, opc_cf_vec c) {
    const __mmask16 nan = _mm512_cmp_ps_mask((__m512)b, (__m512)b, _CMP_UNORD_Q) |
                          _mm512_cmp_ps_mask((__m512)c, (__m512)c, _CMP_UNORD_Q);
    if (nan) return opc_cf_max_first(opc_cf_max_first(a, b), c);
    return (opc_cf_vec)_mm512_max_ps((__m512)c, _mm512_max_ps((__m512)b, (__m512)a));
}
#define OPC_CF_MAX_POOL3 1
#else
#define OPC_CF_MAX_POOL3 0
#endif

/* Whether max_pool_values takes plane q separably (opc_cf_max_pool3_plane): a 2-D 3x3 window at
 * stride 2, undilated, over rows of a vector or more (ResNet's stem pool), with AVX-512. */
static inline int opc_cf_max_pool3_applies(const opc_pl_geom *q) {
    return OPC_CF_MAX_POOL3 && q->in[0] == 1 && q->out[0] == 1 && q->k[1] == 3 && q->k[2] == 3 && q->s[1] == 2 &&
           q->s[2] == 2 && q->d[1] == 1 && q->d[2] == 1 && q->out[2] >= OPC_CF_V;
}

#if OPC_CF_MAX_POOL3
/* max_pool's values of plane x, 3x3 at stride 2, in two passes: h [in1][O2] the maximum of each
 * input row's three columns under each output, then each output the maximum of its rows of h that
 * lie in x. A vector of h reads x's row in place, a window over either end of it by masked loads that
 * give -inf. The first NaN and the first of equal maxima in the window's row-major order are those
 * of the row-major order of its rows' (the first row that has one, its first), and the padding's
 * -inf never displaces a value, so each output is max_pool_one's. Three strided loads and two picks
 * per row and vector, up to two per output vector, and no padded copy: the 9 taps over a padded
 * plane cost 2.6 times as much (ResNet-18's stem pool at 224x224, 64 planes of 112x112: 246 -> 95
 * us, onnxruntime 112). */
static void opc_cf_max_pool3_plane(const float *x, float *y, float *h, const opc_pl_geom *q) {
    const int64_t H = q->in[1], W = q->in[2], O1 = q->out[1], O2 = q->out[2], pb = q->pb[2];
    for (int64_t c = 0; c < O2; c += OPC_CF_V) {
        const int64_t c0 = c + OPC_CF_V <= O2 ? c : O2 - OPC_CF_V;
        const int64_t first = 2 * c0 - pb; /* the strided loads read [first, first + 2 + 2 V - 1) */
        if (first >= 0 && first + 2 * OPC_CF_V + 1 <= W) {
            for (int64_t i = 0; i < H; i++) {
                const float *src = x + i * W + first;
                opc_cf_vec t0, t1, t2;
                opc_cf_strided(src, 2, &t0);
                opc_cf_strided(src + 1, 2, &t1);
                opc_cf_strided(src + 2, 2, &t2);
                *(opc_cf_uvec *)(h + i * O2 + c0) = opc_cf_max3_first(t0, t1, t2);
            }
            continue;
        }
        __mmask16 m[3][2]; /* each tap column's two loads' lanes inside the row */
        for (int t = 0; t < 3; t++) m[t][0] = opc_cf_row_lanes(first + t, W), m[t][1] = opc_cf_row_lanes(first + t + OPC_CF_V - 1, W);
        for (int64_t i = 0; i < H; i++) {
            const float *src = x + i * W;
            *(opc_cf_uvec *)(h + i * O2 + c0) = opc_cf_max3_first(opc_cf_row_even(src, first, m[0]),
                                                                  opc_cf_row_even(src, first + 1, m[1]),
                                                                  opc_cf_row_even(src, first + 2, m[2]));
        }
    }
    const opc_cf_vec ninf = (opc_cf_vec){0} - (float)INFINITY;
    for (int64_t o = 0; o < O1; o++) {
        const int64_t i0 = 2 * o - q->pb[1], lo = i0 > 0 ? i0 : 0, hi = i0 + 3 < H ? i0 + 3 : H;
        for (int64_t c = 0; c < O2; c += OPC_CF_V) {
            const int64_t c0 = c + OPC_CF_V <= O2 ? c : O2 - OPC_CF_V;
            const float *r = h + lo * O2 + c0;
            opc_cf_vec m = ninf;
            if (hi - lo == 3)
                m = opc_cf_max3_first(*(const opc_cf_uvec *)r, *(const opc_cf_uvec *)(r + O2), *(const opc_cf_uvec *)(r + 2 * O2));
            else if (hi - lo == 2)
                m = opc_cf_max_first(*(const opc_cf_uvec *)r, *(const opc_cf_uvec *)(r + O2));
            else if (hi - lo == 1)
                m = *(const opc_cf_uvec *)r;
            *(opc_cf_uvec *)(y + o * O2 + c0) = m;
        }
    }
}
#endif

/* max_pool's values (no indices) of every plane: 0 where the plane's buffer cannot be had. */
static int opc_cf_max_pool_values(const float *x, float *y, const opc_pl_geom *q) {
    const opc_cf_pool_pad b = opc_cf_pool_pad_make(q);
    const int three = opc_cf_max_pool3_applies(q);
    opc_rt_route(three ? OPC_ROUTE_MAX_POOL_SEPARABLE : OPC_ROUTE_MAX_POOL_PADDED_PLANES);
    const size_t need = three ? (size_t)(q->in[1] * q->out[2]) : (size_t)b.vol; /* opc_cf_max_pool3_plane's h */
    int failed = 0;
    _Pragma("omp parallel if (q->planes * q->ovol * q->k[0] * q->k[1] * q->k[2] >= opc_par_min(32768)) num_threads(opc_num_threads())")
    {
        float *buf = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * need);
        if (!buf) {
            _Pragma("omp atomic write")
            failed = 1;
        }
        _Pragma("omp for schedule(dynamic, opc_par_chunk(q->planes, q->planes * q->ovol * q->k[1] * q->k[2], 32768))")
        for (int64_t p = 0; p < q->planes; p++)
            if (!buf) continue;
#if OPC_CF_MAX_POOL3
            else if (three) opc_cf_max_pool3_plane(x + p * q->ivol, y + p * q->ovol, buf, q);
#endif
            else opc_cf_max_pool_values_plane(x + p * q->ivol, y + p * q->ovol, buf, &b, q);
    }
    return !failed;
}

#endif /* OPC_NN_CONV_FAST_H */
