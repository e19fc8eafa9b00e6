/* opc_nn_attention.h -- the body of opc.attention and opc.attention_grad on the CPU, written
 * once for an accumulator type. NOT a normal header: opc_nn.h includes it once per precision
 * family, like opc_nn_rows.h (OPC_NN_ACC, OPC_NN_FN, OPC_NN_LD, OPC_NN_ST, OPC_NN_EXP, OPC_NN_LOG).
 *
 * Flash-attention's scheme: the [Lq, Lk] score matrix is never stored. The forward's unit is
 * one block of OPC_AT_BQ query rows of one batch entry; it walks the keys in blocks of
 * OPC_AT_BK with an online softmax (running max m, running sum l, the output accumulator
 * rescaled by exp(m_old - m_new) when the max grows) and saves lse = m + log(l) per row.
 * The backward recomputes p = exp(s - lse) block by block; its unit is a batch entry's key
 * blocks (or some of them where there are few entries): dk and dv per key block, and the
 * unit's part of dq, the parts summed per row afterwards (each output written by one unit: no
 * atomics); where the parts would take over OPC_AT_PART_MAX, dq by a pass over query blocks.
 *
 * The operands are laid out once per call, not once per block pair (a transposition per
 * 32 x 64 block pair cost as much as its products): the forward's k^T per batch entry in
 * blocks padded to OPC_AT_BK keys (and v padded to whole tiles unless read in place), the
 * backward's q and dout padded rows in the compute type with delta = rowsum(dout * out). All
 * products run through one register tile (RT rows x NV vectors of the build's widest
 * registers, the operands zero-padded to it); the row max and sum are vector trees. Scores
 * are (q . k) * scale + mask, in the order of the composite rule; a row whose scores are all
 * -inf gives NaN (out and lse), as softmax does.
 */

#ifndef OPC_NN_ATTENTION_SHARED
#define OPC_NN_ATTENTION_SHARED
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#ifndef OPC_AT_BQ /* (a multiple of the tile's rows and of 16: the rows' rescaling runs 16 at once) */
#define OPC_AT_BQ 32 /* query rows per unit */
#endif
_Static_assert(OPC_AT_BQ % 16 == 0, "OPC_AT_BQ must be a multiple of 16");
#ifndef OPC_AT_BK /* (a multiple of 16 and of the tile's width) */
#define OPC_AT_BK 64 /* keys per block: a score row of a block is 64 lanes */
#endif
#define OPC_AT_MAX_BATCH 6
/* The backward's dq partials, one [Lq, D] per key block, up to this many bytes: with them the
 * key-block pass gives dq too (p and ds computed once); beyond, a pass by query blocks of its own. */
#ifndef OPC_AT_PART_MAX /* (tests set it to 0 to run the other way) */
#define OPC_AT_PART_MAX ((size_t)64 << 20)
#endif

/* An operand's layout: element (batch entry, row i, feature c) of q, k, v, out, dout, dq, dk or dv
 * is at base + i * row + c, base the sum of (index along batch dim t) * bs[t] over the batch dims:
 * its own row-major layout, or a view of another buffer (the lowering folds a transpose of the
 * batch and row dims into these strides: the heads' split and merge cost no pass of their own). */
typedef struct {
    int64_t row, bs[OPC_AT_MAX_BATCH];
} opc_at_lay;
enum { OPC_AT_Q, OPC_AT_K, OPC_AT_V, OPC_AT_O, OPC_AT_DO, OPC_AT_DQ, OPC_AT_DK, OPC_AT_DV, OPC_AT_NLAY };

/* The geometry: bh batch entries (the product of the batch dims), lengths, feature dims, flags,
 * and the additive mask's layout: its offset for a batch entry is sum of (index along batch dim
 * t) * mstr[t] over the nb batch dims of size dims[t] (mstr 0 where the mask broadcasts), then
 * i * mrow + j * mcol (0 where it broadcasts along queries or keys); the operands' layouts. */
typedef struct {
    int64_t bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb;
    int64_t dims[OPC_AT_MAX_BATCH], mstr[OPC_AT_MAX_BATCH];
    double scale;
    opc_at_lay lay[OPC_AT_NLAY];
} opc_at_geom;

/* The 22 integers of the geometry, then a layout's 7 (row, then the 6 batch strides) per operand
 * (forward: q, k, v, out; backward: q, k, v, out, dout, dq, dk, dv), then the scale. */
#define OPC_AT_GEOM_INTS                                                                                     \
    int64_t bh, int64_t lq, int64_t lk, int64_t d, int64_t dv, int64_t causal, int64_t has_mask, int64_t mrow, \
        int64_t mcol, int64_t nb, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t n4, int64_t n5,       \
        int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5
#define OPC_AT_LAY_PARAMS(X)                                                                                 \
    int64_t X##r, int64_t X##0, int64_t X##1, int64_t X##2, int64_t X##3, int64_t X##4, int64_t X##5
#define OPC_AT_LAY_INIT(X) {X##r, {X##0, X##1, X##2, X##3, X##4, X##5}}
#define OPC_AT_GEOM_INIT                                                                                     \
    bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb, {n0, n1, n2, n3, n4, n5}, {s0, s1, s2, s3, s4, s5}, scale

/* The rows per batch entry of operand x: lk for k, v and their grads, else lq. */
static inline __attribute__((unused)) int64_t opc_at_len(const opc_at_geom *g, int x) {
    return x == OPC_AT_K || x == OPC_AT_V || x == OPC_AT_DK || x == OPC_AT_DV ? g->lk : g->lq;
}

/* The offset of row i of batch entry b in operand x's layout. */
static inline __attribute__((unused)) int64_t opc_at_off(const opc_at_geom *g, int x, int64_t b, int64_t i) {
    const opc_at_lay *l = &g->lay[x];
    int64_t at = i * l->row;
    for (int64_t t = g->nb - 1; t >= 0; t--) {
        at += (b % g->dims[t]) * l->bs[t];
        b /= g->dims[t];
    }
    return at;
}

#ifdef __AVX512F__
/* dst[c * ds + r] = src[r * ss + c] for a 16 x 16 block of floats: 32-bit, 64-bit and two 128-bit
 * lane interleaves (64 shuffles for 256 elements; the scalar strips cost about one cycle each,
 * a tenth of the forward) */
static inline __attribute__((unused)) void opc_at_t16(const float *src, int64_t ss, float *dst, int64_t ds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ss);
    for (int i = 0; i < 8; i++) { /* lane L: rows 2i, 2i+1 of columns 4L, 4L+1 (lo) or 4L+2, 4L+3 (hi) */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* r[4g + c], lane L: rows 4g..4g+3 of column 4L + c */
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 2]), e = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    for (int c = 0; c < 4; c++) { /* a 4 x 4 transpose of 128-bit lanes: column 4L + c from r[c + 4g].L */
        const __m512 s0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), s1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 s2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 s3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        _mm512_storeu_ps(dst + (0 + c) * ds, _mm512_shuffle_f32x4(s0, s2, 0x88));
        _mm512_storeu_ps(dst + (4 + c) * ds, _mm512_shuffle_f32x4(s0, s2, 0xDD));
        _mm512_storeu_ps(dst + (8 + c) * ds, _mm512_shuffle_f32x4(s1, s3, 0x88));
        _mm512_storeu_ps(dst + (12 + c) * ds, _mm512_shuffle_f32x4(s1, s3, 0xDD));
    }
}
#endif

#ifdef __AVX512F__
/* e^x of 16 probabilities' arguments (a score minus the row's max or lse, or an old max minus the
 * new), opc_expf's reduction and polynomial, with 0 where e^x would be subnormal: a subnormal p
 * (or a subnormal intermediate, as opc_expf's for arguments from -103.97 to -87.34 and for the
 * masked keys' -inf) costs a microcode assist per instruction that makes or reads it: scores spread
 * over a few hundred (large logits; random weights) made the kernels 3-4x slower. Below 2^-126 of
 * the row's largest weight (1), p is beyond what any sum of the row holds. The argument is clamped
 * to [lo, hi] with max/min (a NaN gives lo, then is put back), 2^n applied by vscalefps (one
 * rounding, never a subnormal intermediate for n >= -126). NaN stays NaN, -inf gives 0. */
static inline __attribute__((unused)) __m512 opc_at_expp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f); /* the least x whose e^x is normal */
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.7228394f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    const __m512 y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), _mm512_scalef_ps(p, n));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

static inline __attribute__((unused)) int64_t opc_at_mask_offset(const opc_at_geom *g, int64_t b) {
    int64_t at = 0;
    for (int64_t t = g->nb - 1; t >= 0; t--) {
        at += (b % g->dims[t]) * g->mstr[t];
        b /= g->dims[t];
    }
    return at;
}

/* Entry points: the operands' layouts (one pass, in parallel over rows or batch entries), then
 * forward units (batch entry, query block); the grad's units (batch entry, group of key blocks)
 * give dk, dv and each group's part of dq, summed afterwards per query row (or, where the parts
 * would take over OPC_AT_PART_MAX, dq by a pass over query blocks first). No mask: `mask` is
 * any pointer, never read. */
#define OPC_NN_ATTENTION_ENTRIES(SUF, T, A, F, DT)                                                            \
    OPC_NN_ENTRY void opc_nn_attention_##SUF(const T *q, const T *k, const T *v, const T *mask, T *out, A *lse, \
                                             OPC_AT_GEOM_INTS, OPC_AT_LAY_PARAMS(q_), OPC_AT_LAY_PARAMS(k_),   \
                                             OPC_AT_LAY_PARAMS(v_), OPC_AT_LAY_PARAMS(o_), double scale) {      \
        const opc_at_geom g = {OPC_AT_GEOM_INIT,                                                               \
                               {OPC_AT_LAY_INIT(q_), OPC_AT_LAY_INIT(k_), OPC_AT_LAY_INIT(v_), OPC_AT_LAY_INIT(o_)}}; \
        A *kt = NULL, *vb = NULL;                                                                              \
        if (!opc_nn_at_keys_alloc_##F(&g, &kt, &vb, DT)) { /* no memory: NaN, never a silent wrong number */ \
            for (int64_t x = 0; x < bh * lq; x++) lse[x] = (A)NAN;                                             \
            OPC_NN_FOR_UNITS(bh * lq, bh * lq * dv, opc_nn_at_nan_row_##F(out, dv, &g, OPC_AT_O, opc_u, DT));  \
            return;                                                                                            \
        }                                                                                                      \
        OPC_NN_FOR_UNITS(bh, bh * lk * (d + dv), opc_nn_at_keys_unit_##F(k, v, &g, kt, vb, opc_u, DT));         \
        OPC_NN_FOR_UNITS(bh * ((lq + OPC_AT_BQ - 1) / OPC_AT_BQ), bh * lq * lk * (d + dv),                     \
                         opc_nn_attention_##F(q, kt, v, vb, mask, out, lse, &g, opc_u, DT));                   \
        free(kt);                                                                                              \
        free(vb);                                                                                              \
    }                                                                                                          \
    OPC_NN_ENTRY void opc_nn_attention_grad_##SUF(                                                             \
        const T *q, const T *k, const T *v, const T *out, const A *lse, const T *dout, const T *mask, T *dq,     \
        T *dk, T *dv_, OPC_AT_GEOM_INTS, OPC_AT_LAY_PARAMS(q_), OPC_AT_LAY_PARAMS(k_), OPC_AT_LAY_PARAMS(v_),     \
        OPC_AT_LAY_PARAMS(o_), OPC_AT_LAY_PARAMS(do_), OPC_AT_LAY_PARAMS(dq_), OPC_AT_LAY_PARAMS(dk_),          \
        OPC_AT_LAY_PARAMS(dv_), double scale) {                                                               \
        const opc_at_geom g = {OPC_AT_GEOM_INIT,                                                               \
                               {OPC_AT_LAY_INIT(q_), OPC_AT_LAY_INIT(k_), OPC_AT_LAY_INIT(v_), OPC_AT_LAY_INIT(o_), \
                                OPC_AT_LAY_INIT(do_), OPC_AT_LAY_INIT(dq_), OPC_AT_LAY_INIT(dk_),               \
                                OPC_AT_LAY_INIT(dv_)}};                                                       \
        const int64_t kblocks = (lk + OPC_AT_BK - 1) / OPC_AT_BK;                                               \
        A *qp = opc_nn_at_rows_alloc_##F(&g);                                                                  \
        if (!qp) { /* no memory: NaN, never a silent wrong number */                                          \
            OPC_NN_FOR_UNITS(bh * lq, bh * lq * d, opc_nn_at_nan_row_##F(dq, d, &g, OPC_AT_DQ, opc_u, DT));    \
            OPC_NN_FOR_UNITS(bh * lk, bh * lk * d, opc_nn_at_nan_row_##F(dk, d, &g, OPC_AT_DK, opc_u, DT));    \
            OPC_NN_FOR_UNITS(bh * lk, bh * lk * dv, opc_nn_at_nan_row_##F(dv_, dv, &g, OPC_AT_DV, opc_u, DT)); \
            return;                                                                                            \
        }                                                                                                      \
        OPC_NN_FOR_UNITS(bh * lq, bh * lq * (d + 2 * dv), opc_nn_at_rows_unit_##F(q, out, dout, &g, qp, opc_u, DT)); \
        /* key blocks per unit: all of a batch entry's where the entries keep the threads busy (dq's  \
         * parts are then one per entry, and their sum a copy), fewer where there are few entries */     \
        const int64_t want = 4 * (int64_t)opc_num_threads(), per = bh >= want ? 1 : (want + bh - 1) / bh;   \
        const int64_t groups = per < kblocks ? per : kblocks, span = (kblocks + groups - 1) / groups;       \
        const size_t part = (size_t)(bh * groups * opc_nn_at_part_rows_##F(&g) * opc_nn_at_pad_##F(d));        \
        A *dqp = part * sizeof(A) <= OPC_AT_PART_MAX ? (A *)calloc(part ? part : 1, sizeof(A)) : NULL;         \
        if (!dqp) /* pass 1 (dq by query blocks), recomputing p and ds */                                      \
            OPC_NN_FOR_UNITS(bh * ((lq + OPC_AT_BQ - 1) / OPC_AT_BQ), bh * lq * lk * (d + dv),                 \
                             opc_nn_attention_grad_q_##F(q, dout, k, v, mask, lse, qp, dq, &g, opc_u, DT));    \
        OPC_NN_FOR_UNITS(bh * groups, bh * lq * lk * (d + dv),                                                 \
                         opc_nn_attention_grad_kv_##F(q, dout, k, v, mask, lse, qp, dk, dv_, dqp, groups, span, \
                                                      &g, opc_u, DT));                                         \
        if (dqp) {                                                                                             \
            OPC_NN_FOR_UNITS(bh * lq, bh * lq * d * groups,                                                    \
                             opc_nn_attention_dq_sum_##F(dqp, dq, groups, &g, opc_u, DT));                     \
            free(dqp);                                                                                         \
        }                                                                                                      \
        free(qp);                                                                                              \
    }
#endif

#define ACC OPC_NN_ACC
#define LD OPC_NN_LD
#define ST OPC_NN_ST
#define VEC OPC_NN_FN(at_vec)
/* The tile's vectors: the build's widest registers, a zmm with AVX-512 (twice the multiply-adds
 * per instruction of a ymm), a ymm with AVX, else an xmm (a wider vector_size than the target's
 * registers is lowered piece by piece through memory: 100x slower). */
#if defined(__AVX512F__)
#define VB 64
#elif defined(__AVX__)
#define VB 32
#else
#define VB 16
#endif
#define VL ((int64_t)(VB / sizeof(ACC)))  /* lanes of a vector */
#ifndef OPC_AT_NV
#define OPC_AT_NV 2 /* vectors per tile row */
#endif
#ifndef OPC_AT_RT
#define OPC_AT_RT 8 /* a tile's rows (16 accumulators of 32 registers) */
#endif
#define NV OPC_AT_NV
#define TW (NV * VL) /* a tile's width */
#define RT OPC_AT_RT

typedef ACC VEC __attribute__((vector_size(VB), aligned(sizeof(ACC)), may_alias));

/* exp in the vector loops: the runtime's branch-free one in both families (the f64 family's
 * OPC_NN_EXP is libm's exp, a call per element that keeps the loop scalar) */
#define EXPV(x) (sizeof(ACC) == 4 ? (ACC)opc_expf((float)(x)) : (ACC)opc_exp((double)(x)))
/* exp of a probability's argument, 0 where it would be subnormal (see opc_at_expp16, which f32 uses
 * with AVX-512; EXPP_MIN: the least x whose opc_expf / opc_exp is normal). NaN stays NaN (the
 * compare is false), -inf gives 0. */
#define EXPP_MIN (sizeof(ACC) == 4 ? (ACC)-87.33654f : (ACC)-708.39641853226408)
#define EXPP(x) ((x) < EXPP_MIN ? (ACC)0 : EXPV((x) < EXPP_MIN ? EXPP_MIN : (x)))

/* s[jj] = e^(s[jj] - sub) for jj < n (with AVX-512 and f32, n a multiple of 16) */
OPC_NN_INLINE void OPC_NN_FN(at_expp)(ACC *s, ACC sub, int64_t n) {
#ifdef __AVX512F__
    if (sizeof(ACC) == 4) {
        float *f = (float *)s;
        const __m512 b = _mm512_set1_ps((float)sub);
        for (int64_t c = 0; c < n; c += 16)
            _mm512_storeu_ps(f + c, opc_at_expp16(_mm512_sub_ps(_mm512_loadu_ps(f + c), b)));
        return;
    }
#endif
    _Pragma("omp simd") for (int64_t jj = 0; jj < n; jj++) s[jj] = EXPP(s[jj] - sub);
}

/* The register tile: C[RT][TW] (+)= sum over k < K of A(i, k) * B[k][0..TW), A(i, k) = A[i * ars + k * aks].
 * NV RT vector accumulators, NV vector loads and RT broadcasts per k: the multiply-adds never
 * wait on memory (a one-row axpy form loads and stores its accumulator at every step). The
 * loads and stores go through VEC's own pointers (VEC is unaligned and may alias): with memcpy,
 * gcc kept the 64-byte accumulators on the stack and stored them back at every k. */
OPC_NN_INLINE void OPC_NN_FN(at_tile)(const ACC *A, int64_t ars, int64_t aks, const ACC *B, int64_t ldb, int64_t K,
                                      ACC *C, int64_t ldc, int accumulate) {
    VEC c[RT][NV];
    for (int i = 0; i < RT; i++)
        for (int h = 0; h < NV; h++) c[i][h] = accumulate ? *(const VEC *)(C + i * ldc + h * VL) : (VEC){0};
    for (int64_t k = 0; k < K; k++) {
        VEC bk[NV];
        for (int h = 0; h < NV; h++) bk[h] = *(const VEC *)(B + k * ldb + h * VL);
        for (int i = 0; i < RT; i++) {
            const ACC a = A[i * ars + k * aks];
            for (int h = 0; h < NV; h++) c[i][h] += a * bk[h];
        }
    }
    for (int i = 0; i < RT; i++)
        for (int h = 0; h < NV; h++) *(VEC *)(C + i * ldc + h * VL) = c[i][h];
}

/* C[rows_p][width] (+)= A B, rows_p a multiple of RT and width of TW (the operands are zero-padded). */
OPC_NN_INLINE void OPC_NN_FN(at_gemm)(const ACC *A, int64_t ars, int64_t aks, const ACC *B, int64_t ldb, int64_t K,
                                      ACC *C, int64_t ldc, int64_t rows_p, int64_t width, int accumulate) {
    for (int64_t r = 0; r < rows_p; r += RT)
        for (int64_t w = 0; w < width; w += TW)
            OPC_NN_FN(at_tile)(A + r * ars, ars, aks, B + w, ldb, K, C + r * ldc + w, ldc, accumulate);
}

static inline __attribute__((unused)) int64_t OPC_NN_FN(at_pad)(int64_t n) { return (n + TW - 1) / TW * TW; }
static inline __attribute__((unused)) int64_t OPC_NN_FN(at_pad_rows)(int64_t n) { return (n + RT - 1) / RT * RT; }

/* rows x n of a buffer (row r at base + r * ld) into dst[count][ldp] in the compute type, zero
 * past n and past the rows. */
OPC_NN_INLINE void OPC_NN_FN(at_load_rows)(const void *src, int64_t base, int64_t ld, int64_t rows, int64_t n,
                                           ACC *dst, int64_t ldp, int64_t count, int dt) {
    for (int64_t r = 0; r < count; r++) {
        ACC *dr = dst + r * ldp;
        const int64_t have = r < rows ? n : 0;
        for (int64_t c = 0; c < have; c++) dr[c] = LD(src, base + r * ld + c, dt);
        for (int64_t c = have; c < ldp; c++) dr[c] = 0;
    }
}

/* The forward's keys, laid out once per call (not once per query block): kt[bh][d][lkp] (k^T, keys
 * padded with zeros to whole blocks, so a score tile reads a full block) and, unless v can be read
 * in place (f32/f64 rows of whole tiles), vb[bh][lk][dvp]: at_keys_alloc (0 when the scratch could
 * not be had), then at_keys_unit for each batch entry. */
static inline __attribute__((unused)) int64_t OPC_NN_FN(at_lkp)(const opc_at_geom *g) {
    return (g->lk + OPC_AT_BK - 1) / OPC_AT_BK * OPC_AT_BK;
}
OPC_NN_INLINE void OPC_NN_FN(at_keys_unit)(const void *k, const void *v, const opc_at_geom *g, ACC *kt, ACC *vb,
                                           int64_t b, int dt) {
    const int64_t d = g->d, dv = g->dv, lk = g->lk, lkp = OPC_NN_FN(at_lkp)(g);
    const int64_t dvp = (dv + TW - 1) / TW * TW;
    const int64_t k0 = opc_at_off(g, OPC_AT_K, b, 0), krow = g->lay[OPC_AT_K].row;
    ACC *kb = kt + b * d * lkp;
    int64_t dfast = 0; /* features [0, dfast) of keys [0, lk / 16 * 16) done by 16 x 16 blocks */
#ifdef __AVX512F__
    if (sizeof(ACC) == 4 && dt == OPC_NN_F32) {
        dfast = d / 16 * 16;
        const float *kf = (const float *)k + k0;
        for (int64_t j0 = 0; j0 + 16 <= lk; j0 += 16)
            for (int64_t d0 = 0; d0 < dfast; d0 += 16)
                opc_at_t16(kf + j0 * krow + d0, krow, (float *)kb + d0 * lkp + j0, lkp);
    }
#endif
    /* the rest by 8-key strips: the reads of a strip are 8 rows, the writes 8-wide runs */
    for (int64_t j0 = 0; j0 < lkp; j0 += 8) {
        const int64_t n = lk - j0 < 8 ? (lk - j0 > 0 ? lk - j0 : 0) : 8;
        for (int64_t dd = j0 + 8 <= lk / 16 * 16 ? dfast : 0; dd < d; dd++) {
            ACC *o = kb + dd * lkp + j0;
            for (int64_t jj = 0; jj < n; jj++) o[jj] = LD(k, k0 + (j0 + jj) * krow + dd, dt);
            for (int64_t jj = n; jj < 8; jj++) o[jj] = 0;
        }
    }
    if (vb)
        OPC_NN_FN(at_load_rows)(v, opc_at_off(g, OPC_AT_V, b, 0), g->lay[OPC_AT_V].row, lk, dv, vb + b * lk * dvp, dvp,
                                lk, dt);
}
static inline __attribute__((unused)) int OPC_NN_FN(at_keys_alloc)(const opc_at_geom *g, ACC **kt, ACC **vb,
                                                                   int dt) {
    const int64_t dvp = (g->dv + TW - 1) / TW * TW;
    const size_t nk = (size_t)(g->bh * g->d * OPC_NN_FN(at_lkp)(g)), nv = (size_t)(g->bh * g->lk * dvp);
    const int in_place = OPC_NN_EXACT(dt) && g->dv % TW == 0;
    *kt = (ACC *)malloc(sizeof(ACC) * (nk ? nk : 1));
    *vb = in_place ? NULL : (ACC *)malloc(sizeof(ACC) * (nv ? nv : 1));
    if (!*kt || (!in_place && !*vb)) {
        free(*kt);
        free(*vb);
        return 0;
    }
    return 1;
}
/* NaN over row u (of all batch entries' rows) of operand x, n features */
OPC_NN_INLINE void OPC_NN_FN(at_nan_row)(void *out, int64_t n, const opc_at_geom *g, int x, int64_t u, int dt) {
    const int64_t len = opc_at_len(g, x), at = opc_at_off(g, x, u / len, u % len);
    for (int64_t c = 0; c < n; c++) ST(out, at + c, dt, (ACC)NAN);
}

/* The key block j0 (cols keys) of batch entry b, each layout asked for (NULL: not wanted), zero
 * past the block: kt[dd][BK], kb[BK][dp], vt[c][BK], vb[BK][dvp]. The transposes by 16 x 16
 * blocks where f32 with AVX-512, the rest (and the row layouts) by scalar loops. */
OPC_NN_INLINE void OPC_NN_FN(at_load_keys)(const void *k, const void *v, const opc_at_geom *g, int64_t b,
                                           int64_t j0, int64_t cols, ACC *kt, ACC *kb, ACC *vt, ACC *vb, int dt) {
    const int64_t d = g->d, dv = g->dv, dp = OPC_NN_FN(at_pad)(d), dvp = OPC_NN_FN(at_pad)(dv);
    int64_t jfast = 0, dfast = 0, cfast = 0; /* keys [0, jfast) x features [0, dfast) / [0, cfast) */
    const int64_t k0 = opc_at_off(g, OPC_AT_K, b, j0), krow = g->lay[OPC_AT_K].row;
    const int64_t v0 = opc_at_off(g, OPC_AT_V, b, j0), vrow = g->lay[OPC_AT_V].row;
#ifdef __AVX512F__
    if (sizeof(ACC) == 4 && dt == OPC_NN_F32) {
        jfast = cols / 16 * 16, dfast = d / 16 * 16, cfast = dv / 16 * 16;
        const float *kf = (const float *)k + k0, *vf = (const float *)v + v0;
        for (int64_t jj = 0; jj < jfast; jj += 16) {
            if (kt)
                for (int64_t d0 = 0; d0 < dfast; d0 += 16)
                    opc_at_t16(kf + jj * krow + d0, krow, (float *)kt + d0 * OPC_AT_BK + jj, OPC_AT_BK);
            if (vt)
                for (int64_t c0 = 0; c0 < cfast; c0 += 16)
                    opc_at_t16(vf + jj * vrow + c0, vrow, (float *)vt + c0 * OPC_AT_BK + jj, OPC_AT_BK);
        }
    }
#endif
    for (int64_t jj = 0; jj < OPC_AT_BK; jj++) {
        const int in = jj < cols, fast = jj < jfast;
        const int64_t kr = k0 + jj * krow, vr = v0 + jj * vrow;
        if (kt)
            for (int64_t dd = fast ? dfast : 0; dd < d; dd++) kt[dd * OPC_AT_BK + jj] = in ? LD(k, kr + dd, dt) : (ACC)0;
        if (vt)
            for (int64_t c = fast ? cfast : 0; c < dv; c++) vt[c * OPC_AT_BK + jj] = in ? LD(v, vr + c, dt) : (ACC)0;
        if (kb) {
            const int64_t n = in ? d : 0;
            for (int64_t dd = 0; dd < n; dd++) kb[jj * dp + dd] = LD(k, kr + dd, dt);
            for (int64_t dd = n; dd < dp; dd++) kb[jj * dp + dd] = 0;
        }
        if (vb) {
            const int64_t n = in ? dv : 0;
            for (int64_t c = 0; c < n; c++) vb[jj * dvp + c] = LD(v, vr + c, dt);
            for (int64_t c = n; c < dvp; c++) vb[jj * dvp + c] = 0;
        }
    }
}

/* A row of raw dot products q . k of the key block into scores: * scale + mask, -inf for keys
 * past the block or hidden by is_causal. moff: the mask's offset for the batch entry. */
OPC_NN_INLINE void OPC_NN_FN(at_finish)(ACC *s, const void *mask, const opc_at_geom *g, int64_t moff, int64_t i,
                                        int64_t j0, int64_t cols, int dt) {
    const ACC scale = (ACC)g->scale;
    int64_t visible = g->causal ? (i - j0 + 1 < cols ? i - j0 + 1 : cols) : cols;
    visible = visible < 0 ? 0 : visible;
    const int64_t at = moff + i * g->mrow + j0 * g->mcol;
    if (g->has_mask && g->mcol) {
        _Pragma("omp simd") for (int64_t jj = 0; jj < visible; jj++) s[jj] = s[jj] * scale + LD(mask, at + jj, dt);
    } else {
        const ACC m = g->has_mask ? LD(mask, at, dt) : (ACC)0;
        _Pragma("omp simd") for (int64_t jj = 0; jj < visible; jj++) s[jj] = s[jj] * scale + m;
    }
    _Pragma("omp simd") for (int64_t jj = visible; jj < OPC_AT_BK; jj++) s[jj] = (ACC)-INFINITY;
}

/* The keys of a block (from j0, cols of them) that the row tile from query row i sees at all: all,
 * or with is_causal up to the tile's last row (0 where it sees none). */
OPC_NN_INLINE int64_t OPC_NN_FN(at_tile_keys)(const opc_at_geom *g, int64_t i, int64_t j0, int64_t cols) {
    const int64_t seen = g->causal && i + RT - j0 < cols ? i + RT - j0 : cols;
    return seen > 0 ? seen : 0;
}

/* The scores of `rows` query rows (qs: rows_p rows, ldq apart) against a key block (kt: k^T, rows ldk long):
 * s[rows_p][BK]. Each row tile's products stop at the tiles of keys it sees (the block's cols, with
 * is_causal those up to its last row): at_finish makes the rest -inf. */
OPC_NN_INLINE void OPC_NN_FN(at_scores)(const ACC *qs, int64_t ldq, const ACC *kt, int64_t ldk, const void *mask,
                                        const opc_at_geom *g, int64_t b, int64_t i0, int64_t rows, int64_t j0,
                                        int64_t cols, ACC *s, int dt) {
    const int64_t moff = g->has_mask ? opc_at_mask_offset(g, b) : 0;
    for (int64_t r = 0; r < OPC_NN_FN(at_pad_rows)(rows); r += RT) {
        const int64_t width = OPC_NN_FN(at_pad)(OPC_NN_FN(at_tile_keys)(g, i0 + r, j0, cols));
        for (int64_t w = 0; w < width; w += TW)
            OPC_NN_FN(at_tile)(qs + r * ldq, ldq, 1, kt + w, ldk, g->d, s + r * OPC_AT_BK + w, OPC_AT_BK, 0);
    }
    for (int64_t r = 0; r < rows; r++) OPC_NN_FN(at_finish)(s + r * OPC_AT_BK, mask, g, moff, i0 + r, j0, cols, dt);
}

/* The keys a query block sees at all: all, or with is_causal up to its last row. */
OPC_NN_INLINE int64_t OPC_NN_FN(at_key_end)(const opc_at_geom *g, int64_t last_row) {
    return g->causal && last_row + 1 < g->lk ? last_row + 1 : g->lk;
}

/* The max and the sum of the first n entries of a block's row (n a multiple of TW; the rest are keys
 * the row's tile does not see, -inf: their exp is 0). gcc reduces an `omp simd reduction` over a
 * vector's lanes by a serial chain, which cost as much as the scores: with AVX-512 a tree of vector
 * operations (the sequences of _mm512_reduce_*), else the portable loops. A NaN score need not
 * reach the max: its exp is NaN, and so are the row's sum, output and lse. */
OPC_NN_INLINE ACC OPC_NN_FN(at_row_max)(const ACC *s, int64_t n) {
#ifdef __AVX512F__
    if (n == 0) return (ACC)-INFINITY;
    if (sizeof(ACC) == 4) {
        const float *f = (const float *)s;
        __m512 m = _mm512_loadu_ps(f);
        for (int64_t c = 16; c < n; c += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(f + c));
        return (ACC)_mm512_reduce_max_ps(m);
    } else {
        const double *f = (const double *)s;
        __m512d m = _mm512_loadu_pd(f);
        for (int64_t c = 8; c < n; c += 8) m = _mm512_max_pd(m, _mm512_loadu_pd(f + c));
        return (ACC)_mm512_reduce_max_pd(m);
    }
#else
    ACC m = (ACC)-INFINITY;
    _Pragma("omp simd reduction(max : m)") for (int64_t jj = 0; jj < n; jj++) m = s[jj] > m ? s[jj] : m;
    return m;
#endif
}
/* s = exp(s - mx) over the row's first n entries, and their sum */
OPC_NN_INLINE ACC OPC_NN_FN(at_row_exp)(ACC *s, ACC mx, int64_t n) {
#ifdef __AVX512F__
    OPC_NN_FN(at_expp)(s, mx, n);
    if (n == 0) return 0;
    if (sizeof(ACC) == 4) {
        const float *f = (const float *)s;
        __m512 t = _mm512_loadu_ps(f);
        for (int64_t c = 16; c < n; c += 16) t = _mm512_add_ps(t, _mm512_loadu_ps(f + c));
        return (ACC)_mm512_reduce_add_ps(t);
    } else {
        const double *f = (const double *)s;
        __m512d t = _mm512_loadu_pd(f);
        for (int64_t c = 8; c < n; c += 8) t = _mm512_add_pd(t, _mm512_loadu_pd(f + c));
        return (ACC)_mm512_reduce_add_pd(t);
    }
#else
    ACC sum = 0;
    _Pragma("omp simd reduction(+ : sum)") for (int64_t jj = 0; jj < n; jj++) {
        s[jj] = EXPP(s[jj] - mx);
        sum += s[jj];
    }
    return sum;
#endif
}

/* ---- forward: unit u = (batch entry, query block); kt and vb from at_keys (vb NULL: v read in place) -- */
OPC_NN_INLINE void OPC_NN_FN(attention)(const void *q, const ACC *kt, const void *v, const ACC *vb, const void *mask,
                                        void *out, ACC *lse, const opc_at_geom *g, int64_t u, int dt) {
    const int64_t qblocks = (g->lq + OPC_AT_BQ - 1) / OPC_AT_BQ, d = g->d, dv = g->dv;
    const int64_t dp = OPC_NN_FN(at_pad)(d), dvp = OPC_NN_FN(at_pad)(dv), lkp = OPC_NN_FN(at_lkp)(g);
    const int64_t b = u / qblocks, i0 = (u % qblocks) * OPC_AT_BQ;
    const ACC *vr = vb ? vb + b * g->lk * dvp : (const ACC *)v + opc_at_off(g, OPC_AT_V, b, 0);
    const int64_t ldv = vb ? dvp : g->lay[OPC_AT_V].row;
    const int64_t rows = g->lq - i0 < OPC_AT_BQ ? g->lq - i0 : OPC_AT_BQ, rows_p = OPC_NN_FN(at_pad_rows)(rows);
    ACC *buf = (ACC *)malloc(sizeof(ACC) * (size_t)(OPC_AT_BQ * dp + OPC_AT_BQ * OPC_AT_BK + OPC_AT_BQ * dvp +
                                                    5 * OPC_AT_BQ));
    if (!buf) { /* no memory for the scratch: NaN, never a silent wrong number */
        for (int64_t r = 0; r < rows; r++) {
            OPC_NN_FN(at_nan_row)(out, dv, g, OPC_AT_O, b * g->lq + i0 + r, dt);
            lse[b * g->lq + i0 + r] = (ACC)NAN;
        }
        return;
    }
    ACC *qb = buf, *s = qb + OPC_AT_BQ * dp;
    ACC *acc = s + OPC_AT_BQ * OPC_AT_BK, *m = acc + OPC_AT_BQ * dvp, *l = m + OPC_AT_BQ;
    ACC *mx = l + OPC_AT_BQ, *alpha = mx + OPC_AT_BQ, *sum = alpha + OPC_AT_BQ; /* per block and row */
    /* q in place where its tiles' rows stay in the buffer (rows past the block are other rows of the
     * buffer, their scores never read), else a padded copy */
    const int64_t q0 = opc_at_off(g, OPC_AT_Q, b, i0), qrow = g->lay[OPC_AT_Q].row;
    const int q_in_place = OPC_NN_EXACT(dt) && q0 + (rows_p - 1) * qrow + d <= g->bh * g->lq * d;
    const ACC *qs = q_in_place ? (const ACC *)q + q0 : qb;
    const int64_t ldq = q_in_place ? qrow : dp;
    if (!q_in_place) OPC_NN_FN(at_load_rows)(q, q0, qrow, rows, d, qb, dp, rows_p, dt);
    for (int64_t x = 0; x < rows_p * dvp; x++) acc[x] = 0;
    for (int64_t r = 0; r < OPC_AT_BQ; r++) {
        m[r] = (ACC)-INFINITY;
        l[r] = 0;
    }
    const int64_t kend = OPC_NN_FN(at_key_end)(g, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < kend; j0 += OPC_AT_BK) {
        const int64_t cols = kend - j0 < OPC_AT_BK ? kend - j0 : OPC_AT_BK;
        OPC_NN_FN(at_scores)(qs, ldq, kt + b * d * lkp + j0, lkp, mask, g, b, i0, rows, j0, cols, s, dt);
        /* the online softmax: the new row maxima, then every row's rescaling exp(m - mx) at once (a
         * vector exp, not a scalar one per row), then the rows' exps and sums over the keys their
         * tile sees */
        for (int64_t r = 0; r < OPC_AT_BQ; r++) {
            const int64_t n = OPC_NN_FN(at_pad)(OPC_NN_FN(at_tile_keys)(g, i0 + r / RT * RT, j0, cols));
            mx[r] = r < rows ? OPC_NN_MAX(m[r], OPC_NN_FN(at_row_max)(s + r * OPC_AT_BK, n)) : (ACC)-INFINITY;
        }
        _Pragma("omp simd") for (int64_t r = 0; r < OPC_AT_BQ; r++) {
            alpha[r] = mx[r] == (ACC)-INFINITY ? (ACC)0 : m[r] - mx[r];
        }
        OPC_NN_FN(at_expp)(alpha, 0, OPC_AT_BQ);
        for (int64_t r = 0; r < rows_p; r++) {
            ACC *sr = s + r * OPC_AT_BK, *ar = acc + r * dvp;
            if (mx[r] == (ACC)-INFINITY) { /* every key so far hidden (or a padding row): adds nothing */
                _Pragma("omp simd") for (int jj = 0; jj < OPC_AT_BK; jj++) sr[jj] = 0;
                sum[r] = 0;
                continue;
            }
            sum[r] = OPC_NN_FN(at_row_exp)(sr, mx[r],
                                           OPC_NN_FN(at_pad)(OPC_NN_FN(at_tile_keys)(g, i0 + r / RT * RT, j0, cols)));
            if (alpha[r] != (ACC)1) {
                const ACC a = alpha[r];
                _Pragma("omp simd") for (int64_t c = 0; c < dvp; c++) ar[c] *= a;
            }
        }
        _Pragma("omp simd") for (int64_t r = 0; r < rows_p; r++) {
            l[r] = l[r] * alpha[r] + sum[r];
            m[r] = mx[r];
        }
        /* acc += p v: the probabilities of the block's rows times its values (the keys each row tile
         * sees: the rest of its p is 0) */
        for (int64_t r = 0; r < rows_p; r += RT) {
            const int64_t seen = OPC_NN_FN(at_tile_keys)(g, i0 + r, j0, cols);
            if (seen)
                for (int64_t w = 0; w < dvp; w += TW)
                    OPC_NN_FN(at_tile)(s + r * OPC_AT_BK, OPC_AT_BK, 1, vr + j0 * ldv + w, ldv, seen, acc + r * dvp + w,
                                       dvp, 1);
        }
    }
    /* all scores -inf: softmax's 0 / 0 (the rows' logs at once: a vector log where the family has one) */
    ACC *ls = lse + b * g->lq + i0;
    _Pragma("omp simd") for (int64_t r = 0; r < rows; r++) {
        ls[r] = m[r] == (ACC)-INFINITY ? (ACC)NAN : m[r] + OPC_NN_LOG(l[r]);
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o0 = opc_at_off(g, OPC_AT_O, b, i0 + r);
        const ACC inv = m[r] == (ACC)-INFINITY ? (ACC)NAN : (ACC)1 / l[r];
        for (int64_t c = 0; c < dv; c++) ST(out, o0 + c, dt, acc[r * dvp + c] * inv);
    }
    free(buf);
}

/* ---- backward ----------------------------------------------------------------------------------- */
/* Products whose rows are the query rows i0.. of a block (rows_p of them) and whose columns or sum run
 * over its keys j0.. (cols): each row tile stops at the keys it sees (at_tile_keys; with is_causal
 * the rest of its p and ds are 0). C[rows_p][BK] = A B over K (columns: keys), or C[rows_p][width]
 * += A B over the keys (sum: keys). */
OPC_NN_INLINE void OPC_NN_FN(at_gemm_keys_cols)(const ACC *A, int64_t lda, const ACC *B, int64_t ldb, int64_t K, ACC *C,
                                                int64_t rows_p, const opc_at_geom *g, int64_t i0, int64_t j0,
                                                int64_t cols) {
    for (int64_t r = 0; r < rows_p; r += RT) {
        const int64_t width = OPC_NN_FN(at_pad)(OPC_NN_FN(at_tile_keys)(g, i0 + r, j0, cols));
        for (int64_t w = 0; w < width; w += TW)
            OPC_NN_FN(at_tile)(A + r * lda, lda, 1, B + w, ldb, K, C + r * OPC_AT_BK + w, OPC_AT_BK, 0);
    }
}
OPC_NN_INLINE void OPC_NN_FN(at_gemm_keys_sum)(const ACC *A, const ACC *B, int64_t ldb, ACC *C, int64_t ldc,
                                               int64_t width, int64_t rows_p, const opc_at_geom *g, int64_t i0,
                                               int64_t j0, int64_t cols) {
    for (int64_t r = 0; r < rows_p; r += RT) {
        const int64_t seen = OPC_NN_FN(at_tile_keys)(g, i0 + r, j0, cols);
        if (seen)
            for (int64_t w = 0; w < width; w += TW)
                OPC_NN_FN(at_tile)(A + r * OPC_AT_BK, OPC_AT_BK, 1, B + w, ldb, seen, C + r * ldc + w, ldc, 1);
    }
}
/* C[BK][width] += A^T B, A's rows the block's query rows (rows of them) and its columns the keys:
 * each tile of keys sums over the query rows that see any of them (with is_causal, from the row of
 * its first key), none past the block's cols keys (their rows of C are never stored). */
OPC_NN_INLINE void OPC_NN_FN(at_gemm_keys_rows)(const ACC *A, const ACC *B, int64_t ldb, int64_t rows, ACC *C,
                                                int64_t ldc, int64_t width, const opc_at_geom *g, int64_t i0,
                                                int64_t j0, int64_t cols) {
    for (int64_t jt = 0; jt < cols; jt += RT) {
        const int64_t from = g->causal && j0 + jt - i0 > 0 ? j0 + jt - i0 : 0;
        if (from < rows)
            for (int64_t w = 0; w < width; w += TW)
                OPC_NN_FN(at_tile)(A + from * OPC_AT_BK + jt, 1, OPC_AT_BK, B + from * ldb + w, ldb, rows - from,
                                   C + jt * ldc + w, ldc, 1);
    }
}

/* p = exp(s - lse) and ds = p * (dp - delta) for `rows` query rows of a block whose scores s and
 * dout v^T products dp are computed over the keys each row tile sees; 0 past them and in the
 * padding rows. */
OPC_NN_INLINE void OPC_NN_FN(at_probs)(ACC *s, ACC *dp, const ACC *lse, const ACC *delta, int64_t rows,
                                       const opc_at_geom *g, int64_t i0, int64_t j0, int64_t cols) {
    for (int64_t r = 0; r < OPC_NN_FN(at_pad_rows)(rows); r++) {
        ACC *sr = s + r * OPC_AT_BK, *dr = dp + r * OPC_AT_BK;
        const int64_t n = r < rows ? OPC_NN_FN(at_pad)(OPC_NN_FN(at_tile_keys)(g, i0 + r / RT * RT, j0, cols)) : 0;
        const ACC ls = r < rows ? lse[r] : 0, de = r < rows ? delta[r] : 0;
        OPC_NN_FN(at_expp)(sr, ls, n);
        _Pragma("omp simd") for (int64_t jj = 0; jj < n; jj++) dr[jj] = sr[jj] * (dr[jj] - de);
        _Pragma("omp simd") for (int64_t jj = n; jj < OPC_AT_BK; jj++) sr[jj] = dr[jj] = 0;
    }
}

/* The backward's query rows, laid out once per call (not once per key block): q and dout in the
 * compute type, rows padded with zeros to dp / dvp, and delta = rowsum(dout * out), one buffer:
 * qp[rows][dp], then dop[rows][dvp], then delta[bh lq], rows = bh lq + OPC_AT_BQ (a block's tiles
 * read whole 8-row tiles: past the last row they read zeros, never past the buffer). */
static inline __attribute__((unused)) int64_t OPC_NN_FN(at_rows_n)(const opc_at_geom *g) {
    return g->bh * g->lq + OPC_AT_BQ;
}
static inline __attribute__((unused)) ACC *OPC_NN_FN(at_rows_alloc)(const opc_at_geom *g) {
    const int64_t n = OPC_NN_FN(at_rows_n)(g), dp = OPC_NN_FN(at_pad)(g->d), dvp = OPC_NN_FN(at_pad)(g->dv);
    ACC *qp = (ACC *)malloc(sizeof(ACC) * (size_t)(n * (dp + dvp) + g->bh * g->lq));
    if (qp) { /* the padding rows */
        memset(qp + (n - OPC_AT_BQ) * dp, 0, sizeof(ACC) * (size_t)(OPC_AT_BQ * dp));
        memset(qp + n * dp + (n - OPC_AT_BQ) * dvp, 0, sizeof(ACC) * (size_t)(OPC_AT_BQ * dvp));
    }
    return qp;
}
/* q and dout are read in place instead (their copies in qp left unwritten) where the tiles can: exact
 * dtypes, rows of whole tiles (n, the features, a multiple of TW) and no padding rows (lq a multiple
 * of RT: a block's tiles read its own rows only). */
OPC_NN_INLINE int OPC_NN_FN(at_in_place)(const opc_at_geom *g, int64_t n, int dt) {
    return OPC_NN_EXACT(dt) && n % TW == 0 && g->lq % RT == 0;
}
/* The rows of q (x = OPC_AT_Q) or dout (OPC_AT_DO) from query row i0 of batch entry b, *ld apart. */
OPC_NN_INLINE const ACC *OPC_NN_FN(at_qrows)(const void *src, const ACC *qp, int x, const opc_at_geom *g, int64_t b,
                                             int64_t i0, int dt, int64_t *ld) {
    const int64_t n = x == OPC_AT_Q ? g->d : g->dv, dp = OPC_NN_FN(at_pad)(g->d);
    if (OPC_NN_FN(at_in_place)(g, n, dt)) {
        *ld = g->lay[x].row;
        return (const ACC *)src + opc_at_off(g, x, b, i0);
    }
    *ld = OPC_NN_FN(at_pad)(n);
    return (x == OPC_AT_Q ? qp : qp + OPC_NN_FN(at_rows_n)(g) * dp) + (b * g->lq + i0) * *ld;
}
OPC_NN_INLINE void OPC_NN_FN(at_rows_unit)(const void *q, const void *out, const void *dout, const opc_at_geom *g,
                                           ACC *qp, int64_t u, int dt) {
    const int64_t n = OPC_NN_FN(at_rows_n)(g), dp = OPC_NN_FN(at_pad)(g->d), dvp = OPC_NN_FN(at_pad)(g->dv);
    const int64_t d = g->d, dv = g->dv, b = u / g->lq, row = u % g->lq;
    const int64_t q0 = opc_at_off(g, OPC_AT_Q, b, row), o0 = opc_at_off(g, OPC_AT_O, b, row);
    const int64_t do0 = opc_at_off(g, OPC_AT_DO, b, row);
    ACC *qr = qp + u * dp, *delta = qp + n * (dp + dvp);
    if (!OPC_NN_FN(at_in_place)(g, d, dt)) {
        for (int64_t c = 0; c < d; c++) qr[c] = LD(q, q0 + c, dt);
        for (int64_t c = d; c < dp; c++) qr[c] = 0;
    }
    ACC t[VL], scratch[VL];
    /* dout's copy, or (read in place) a scratch row piece */
    const int copy = !OPC_NN_FN(at_in_place)(g, dv, dt);
    for (int i = 0; i < VL; i++) t[i] = 0;
    int64_t c = 0;
    for (; c + VL <= dv; c += VL) {
        ACC *dr = copy ? qp + n * dp + u * dvp + c : scratch;
        _Pragma("omp simd") for (int x = 0; x < VL; x++) {
            dr[x] = LD(dout, do0 + c + x, dt);
            t[x] += dr[x] * LD(out, o0 + c + x, dt);
        }
    }
    ACC *dr = qp + n * dp + u * dvp;
    for (int x = 0; c + x < dv; x++) { /* (dv % TW != 0 here: copied) */
        dr[c + x] = LD(dout, do0 + c + x, dt);
        t[x] += dr[c + x] * LD(out, o0 + c + x, dt);
    }
    if (copy)
        for (int64_t x = dv; x < dvp; x++) dr[x] = 0;
    for (int w = VL / 2; w > 0; w /= 2)
        for (int i = 0; i < w; i++) t[i] += t[i + w];
    delta[u] = t[0];
}

/* pass 1, unit u = (batch entry, query block): dq = sum over key blocks of ds k, times scale */
OPC_NN_INLINE void OPC_NN_FN(attention_grad_q)(const void *q, const void *dout, const void *k, const void *v,
                                               const void *mask, const ACC *lse, const ACC *qp, void *dq,
                                               const opc_at_geom *g, int64_t u, int dt) {
    const int64_t qblocks = (g->lq + OPC_AT_BQ - 1) / OPC_AT_BQ, d = g->d, dv = g->dv;
    const int64_t dp = OPC_NN_FN(at_pad)(d), dvp = OPC_NN_FN(at_pad)(dv), n = OPC_NN_FN(at_rows_n)(g);
    const int64_t b = u / qblocks, i0 = (u % qblocks) * OPC_AT_BQ, first = b * g->lq + i0;
    const int64_t rows = g->lq - i0 < OPC_AT_BQ ? g->lq - i0 : OPC_AT_BQ;
    ACC *buf = (ACC *)malloc(sizeof(ACC) * (size_t)(d * OPC_AT_BK + OPC_AT_BK * dp + dv * OPC_AT_BK +
                                                    2 * OPC_AT_BQ * OPC_AT_BK + OPC_AT_BQ * dp));
    if (!buf) {
        for (int64_t r = 0; r < rows; r++) OPC_NN_FN(at_nan_row)(dq, d, g, OPC_AT_DQ, first + r, dt);
        return;
    }
    int64_t ldq, ldo;
    const ACC *qs = OPC_NN_FN(at_qrows)(q, qp, OPC_AT_Q, g, b, i0, dt, &ldq);
    const ACC *dor = OPC_NN_FN(at_qrows)(dout, qp, OPC_AT_DO, g, b, i0, dt, &ldo), *delta = qp + n * (dp + dvp) + first;
    ACC *kt = buf, *kb = kt + d * OPC_AT_BK, *vt = kb + OPC_AT_BK * dp, *s = vt + dv * OPC_AT_BK;
    ACC *ds = s + OPC_AT_BQ * OPC_AT_BK, *acc = ds + OPC_AT_BQ * OPC_AT_BK;
    for (int64_t x = 0; x < OPC_AT_BQ * dp; x++) acc[x] = 0;
    const int64_t rows_p = OPC_NN_FN(at_pad_rows)(rows);
    const int64_t kend = OPC_NN_FN(at_key_end)(g, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < kend; j0 += OPC_AT_BK) {
        const int64_t cols = kend - j0 < OPC_AT_BK ? kend - j0 : OPC_AT_BK;
        OPC_NN_FN(at_load_keys)(k, v, g, b, j0, cols, kt, kb, vt, NULL, dt);
        OPC_NN_FN(at_scores)(qs, ldq, kt, OPC_AT_BK, mask, g, b, i0, rows, j0, cols, s, dt);
        OPC_NN_FN(at_gemm_keys_cols)(dor, ldo, vt, OPC_AT_BK, dv, ds, rows_p, g, i0, j0, cols); /* dout v^T */
        OPC_NN_FN(at_probs)(s, ds, lse + first, delta, rows, g, i0, j0, cols);
        OPC_NN_FN(at_gemm_keys_sum)(ds, kb, dp, acc, dp, dp, rows_p, g, i0, j0, cols); /* dq += ds k */
    }
    const ACC scale = (ACC)g->scale;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t q0 = opc_at_off(g, OPC_AT_DQ, b, i0 + r);
        for (int64_t dd = 0; dd < d; dd++) ST(dq, q0 + dd, dt, acc[r * dp + dd] * scale);
    }
    free(buf);
}

/* dq's parts: per batch entry and group of key blocks, lq rows (plus a block's padding) of dp */
static inline __attribute__((unused)) int64_t OPC_NN_FN(at_part_rows)(const opc_at_geom *g) {
    return g->lq + OPC_AT_BQ;
}

/* pass 2, unit u = (batch entry, group of `span` key blocks): per key block, dv = sum over query
 * blocks of p^T dout, dk = ds^T q * scale, and ds k added to the group's part of dq */
OPC_NN_INLINE void OPC_NN_FN(attention_grad_kv)(const void *q, const void *dout, const void *k, const void *v,
                                                const void *mask, const ACC *lse, const ACC *qp, void *dk, void *dvo,
                                                ACC *dqp, int64_t groups, int64_t span, const opc_at_geom *g,
                                                int64_t u, int dt) {
    const int64_t d = g->d, dv = g->dv;
    const int64_t dp = OPC_NN_FN(at_pad)(d), dvp = OPC_NN_FN(at_pad)(dv), n = OPC_NN_FN(at_rows_n)(g);
    const int64_t b = u / groups, jfirst = (u % groups) * span * OPC_AT_BK;
    const int64_t jend = jfirst + span * OPC_AT_BK < g->lk ? jfirst + span * OPC_AT_BK : g->lk;
    ACC *buf = (ACC *)malloc(sizeof(ACC) * (size_t)(d * OPC_AT_BK + dv * OPC_AT_BK + 2 * OPC_AT_BQ * OPC_AT_BK +
                                                    OPC_AT_BK * dp + OPC_AT_BK * dvp + OPC_AT_BK * dp));
    if (!buf) {
        for (int64_t j = jfirst; j < jend; j++) {
            OPC_NN_FN(at_nan_row)(dk, d, g, OPC_AT_DK, b * g->lk + j, dt);
            OPC_NN_FN(at_nan_row)(dvo, dv, g, OPC_AT_DV, b * g->lk + j, dt);
        }
        if (dqp) /* NaN reaches dq through the sum of the parts */
            for (int64_t x = 0; x < OPC_NN_FN(at_part_rows)(g) * dp; x++) dqp[u * OPC_NN_FN(at_part_rows)(g) * dp + x] = (ACC)NAN;
        return;
    }
    ACC *kt = buf, *vt = kt + d * OPC_AT_BK;
    ACC *s = vt + dv * OPC_AT_BK, *ds = s + OPC_AT_BQ * OPC_AT_BK, *dka = ds + OPC_AT_BQ * OPC_AT_BK;
    ACC *dva = dka + OPC_AT_BK * dp, *kb = dva + OPC_AT_BK * dvp;
    ACC *part = dqp ? dqp + u * OPC_NN_FN(at_part_rows)(g) * dp : NULL; /* this group's part of dq */
    for (int64_t j0 = jfirst; j0 < jend; j0 += OPC_AT_BK) {
        const int64_t cols = jend - j0 < OPC_AT_BK ? jend - j0 : OPC_AT_BK;
        for (int64_t x = 0; x < OPC_AT_BK * dp; x++) dka[x] = 0;
        for (int64_t x = 0; x < OPC_AT_BK * dvp; x++) dva[x] = 0;
        OPC_NN_FN(at_load_keys)(k, v, g, b, j0, cols, kt, part ? kb : NULL, vt, NULL, dt);
        /* with is_causal, query i sees key j only if j <= i: no query block above row j0 sees the block */
        for (int64_t i0 = g->causal ? j0 / OPC_AT_BQ * OPC_AT_BQ : 0; i0 < g->lq; i0 += OPC_AT_BQ) {
            const int64_t rows = g->lq - i0 < OPC_AT_BQ ? g->lq - i0 : OPC_AT_BQ, first = b * g->lq + i0;
            const int64_t rows_p = OPC_NN_FN(at_pad_rows)(rows);
            int64_t ldq, ldo;
            const ACC *qs = OPC_NN_FN(at_qrows)(q, qp, OPC_AT_Q, g, b, i0, dt, &ldq);
            const ACC *dor = OPC_NN_FN(at_qrows)(dout, qp, OPC_AT_DO, g, b, i0, dt, &ldo);
            const ACC *delta = qp + n * (dp + dvp) + first;
            OPC_NN_FN(at_scores)(qs, ldq, kt, OPC_AT_BK, mask, g, b, i0, rows, j0, cols, s, dt);
            OPC_NN_FN(at_gemm_keys_cols)(dor, ldo, vt, OPC_AT_BK, dv, ds, rows_p, g, i0, j0, cols);
            OPC_NN_FN(at_probs)(s, ds, lse + first, delta, rows, g, i0, j0, cols);
            /* dv += p^T dout, dk += ds^T q: the block's keys as rows, the query rows as the sum */
            OPC_NN_FN(at_gemm_keys_rows)(s, dor, ldo, rows, dva, dvp, dvp, g, i0, j0, cols);
            OPC_NN_FN(at_gemm_keys_rows)(ds, qs, ldq, rows, dka, dp, dp, g, i0, j0, cols);
            /* dq's part += ds k over the block's keys (the padding rows of ds are 0) */
            if (part) OPC_NN_FN(at_gemm_keys_sum)(ds, kb, dp, part + i0 * dp, dp, dp, rows_p, g, i0, j0, cols);
        }
        const ACC scale = (ACC)g->scale;
        for (int64_t jj = 0; jj < cols; jj++) {
            const int64_t k0 = opc_at_off(g, OPC_AT_DK, b, j0 + jj), v0 = opc_at_off(g, OPC_AT_DV, b, j0 + jj);
            for (int64_t dd = 0; dd < d; dd++) ST(dk, k0 + dd, dt, dka[jj * dp + dd] * scale);
            for (int64_t c = 0; c < dv; c++) ST(dvo, v0 + c, dt, dva[jj * dvp + c]);
        }
    }
    free(buf);
}

/* dq of query row u (over all batch entries): the sum of its groups' parts, times scale */
OPC_NN_INLINE void OPC_NN_FN(attention_dq_sum)(const ACC *dqp, void *dq, int64_t groups, const opc_at_geom *g,
                                               int64_t u, int dt) {
    const int64_t d = g->d, dp = OPC_NN_FN(at_pad)(d), pr = OPC_NN_FN(at_part_rows)(g), b = u / g->lq, i = u % g->lq;
    const ACC scale = (ACC)g->scale;
    const ACC *p0 = dqp + (b * groups * pr + i) * dp;
    const int64_t q0 = opc_at_off(g, OPC_AT_DQ, b, i);
    ACC t[OPC_AT_BK]; /* dp <= d padded: summed by chunks of BK features */
    for (int64_t c0 = 0; c0 < d; c0 += OPC_AT_BK) {
        const int64_t w = d - c0 < OPC_AT_BK ? d - c0 : OPC_AT_BK;
        for (int64_t c = 0; c < w; c++) t[c] = p0[c0 + c];
        for (int64_t gi = 1; gi < groups; gi++) {
            const ACC *pg = p0 + gi * pr * dp + c0;
            _Pragma("omp simd") for (int64_t c = 0; c < w; c++) t[c] += pg[c];
        }
        for (int64_t c = 0; c < w; c++) ST(dq, q0 + c0 + c, dt, t[c] * scale);
    }
}

#undef ACC
#undef LD
#undef ST
#undef VEC
#undef EXPV
#undef EXPP
#undef EXPP_MIN
#undef VB
#undef VL
#undef NV
#undef TW
#undef RT
