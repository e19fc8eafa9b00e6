/* opc_gemm_bf16dp.h -- the bf16 GEMM on AVX512-BF16's vdpbf16ps, where the CPU has it.
 *
 * Why a kernel of its own: opc_gemm.h's bf16 path widens both operands to f32 while packing and
 * runs the f32 micro-kernel, one k step per FMA lane. vdpbf16ps (_mm512_dpbf16_ps) takes 32-bit
 * lanes that each hold two bf16 values of consecutive k, multiplies the pairs and adds both
 * products to the lane's f32 sum: two k steps per lane per instruction, twice the f32 FMA's rate,
 * from panels half the bytes. Its arithmetic: the product of two bf16 values (8-bit significands)
 * is exact in f32, the sums are f32 rounded to nearest even whatever MXCSR says, and denormal
 * inputs and results are flushed to zero (the f32 path keeps them) -- results within the f32
 * path's error bound (f32 accumulation of exact products, then one bf16 rounding on store), not
 * the same bits: the additions group in pairs.
 *
 * Layout: A's MR-row panels and B's NR-column panels are packed with k-pairs interleaved, a 32-bit
 * word holding (k, k+1) of one row or column, the even k in the low half; a block of odd depth
 * zero-pads its last pair on both sides (a zero times an inf beyond the block would be a NaN). The
 * driver (opc__gemm_bf16dp_part) is opc__gemm_s_part's: the same blocks, thread split (opc__gemm_s
 * picks it and calls this part function instead), transposes, batch strides, epilogue callback and
 * store (opc__store_s: bias, reserve, activation, rounding to bf16, f32 partial sums across depth
 * blocks); frozen operands (opc_frozen.h) get packed copies of their own in this layout (keys 4
 * and 5, beside the f32 path's 2 and 3).
 *
 * The pick, at run time: only x86-64 with gcc >= 12 or clang >= 12 compile the kernel, as a
 * function of target("avx512f,avx512bf16"), so a portable build (OPC_MARCH=portable) has it too;
 * it runs where __builtin_cpu_supports("avx512bf16") says the CPU has the instruction, once per
 * process (cached), and $OPC_GEMM_BF16DP=0 turns it off (the old path: for tests and benchmarks
 * of both). Elsewhere opc__bf16dp_on() is 0 and opc_gemm.h's path runs as before.
 *
 * Included by opc_gemm.h (after opc__gemm_s_part); not a header of its own.
 */
#ifndef OPC_GEMM_BF16DP_H
#define OPC_GEMM_BF16DP_H

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 12) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12))
#define OPC_GEMM_BF16DP 1
#include <immintrin.h>
#define OPC_BD_TARGET __attribute__((target("avx512f,avx512bf16")))

/* 12x32 tile as the f32 AVX-512 kernel's (24 zmm accumulators, 12 broadcasts of A words per
   2 zmm of B); a depth block of up to 512 k is a 32 KiB B micro-panel, as f32's 256 */
#define OPC_BD_MR 12
#define OPC_BD_NR 32
#ifndef OPC_BD_KC
#define OPC_BD_KC 512
#endif

/* 1: run the vdpbf16ps path; read once ($OPC_GEMM_BF16DP, the CPU), then cached. */
static int opc__bf16dp_state;  /* 0 not read yet, 1 on, 2 off */
static OPC_UNUSED int opc__bf16dp_on(void) {
    int s = __atomic_load_n(&opc__bf16dp_state, __ATOMIC_RELAXED);
    if (!s) {
        const char *e = getenv("OPC_GEMM_BF16DP");
        __builtin_cpu_init();
        s = (e && e[0] == '0' && !e[1]) || !__builtin_cpu_supports("avx512bf16") ? 2 : 1;
        __atomic_store_n(&opc__bf16dp_state, s, __ATOMIC_RELAXED);
    }
    return s == 1;
}

/* Depth blocks: balanced, at most OPC_BD_KC, even when there are several (only the last one
   pads a pair). */
static inline int64_t opc__bd_kc_block(int64_t K) {
    const int64_t nb = opc__cdiv(K, OPC_BD_KC), kcb = opc__cdiv(K, nb);
    return nb > 1 ? (kcb + 1) & ~(int64_t)1 : kcb;
}

OPC_ALWAYS_INLINE uint32_t opc__bd_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
OPC_ALWAYS_INLINE uint32_t opc__bd_word(const uint16_t *p) {  /* p[0], p[1] as one word */
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* 16 f32 -> bf16 as opc_f32_to_bf16 does it (round to nearest even, NaN the canonical quiet one with
   its sign), in the integer unit: vcvtneps2bf16 would flush denormals and keep NaN payloads. */
OPC_BD_TARGET OPC_ALWAYS_INLINE __m256i opc__bd_to_bf16(__m512 z) {
    const __m512i x = _mm512_castps_si512(z), hi = _mm512_srli_epi32(x, 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(hi, _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)),
                                                        _mm512_set1_epi32(0x7fc0)));
    return _mm512_cvtepi32_epi16(r);
}

/* The tile's sum over kp pairs (a: [p][MR] words of A, b: [p][NR] words of B). The vdpbf16ps written
   as asm for the reason of opc_gemm.h's OPC__FMA_PS (the accumulators stay in their registers).
   Two tails. Not direct: the tile to c (MR x NR, row stride NR) for opc__store_bd. Direct (a whole
   tile whose store is no more than bias and relu): straight from the registers, in opc__store_s's
   order of operations, so the same bits: z = [acc +] tile; not the last depth block: z to acc (row
   stride ldacc); the last: z [+ bias], relu if asked, rounded to bf16 into out (row stride ldo). */
OPC_BD_TARGET __attribute__((noinline)) static void opc__ukr_bd(int64_t kp, const uint32_t *OPC_RESTRICT a,
                                                              const uint32_t *OPC_RESTRICT b, float *OPC_RESTRICT c,
                                                              int direct, float *acc, int64_t ldacc, int first,
                                                              int last, const float *bias, int relu,
                                                              uint16_t *out, int64_t ldo) {
#define OPC__DP(acc, x, y) __asm__("vdpbf16ps %[yy], %[xx], %[cc]" : [cc] "+v"(acc) : [xx] "v"(x), [yy] "v"(y))
    OPC__ROWS(OPC__ROW_ZERO);
#define OPC__ROW(A, i, x) av = _mm512_castsi512_ps(_mm512_set1_epi32((int)(A)[x])); \
    OPC__DP(c##i##0, av, b0); OPC__DP(c##i##1, av, b1)
#define OPC__PK(A, B) do { \
        __m512 b0 = _mm512_load_ps((const float *)(B)), b1 = _mm512_load_ps((const float *)(B) + 16), av; \
        OPC__ROWS_OF(OPC__ROW, A); \
    } while (0)
    OPC__PANEL_STEPS(kp, OPC__PK, OPC__PF_A);
#undef OPC__PK
#undef OPC__ROW
#undef OPC__DP
    if (!direct) {
        OPC__ROWS(OPC__ROW_TO_TILE);
        return;
    }
    const __m512 bias0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
#define OPC__HALF(z, h) do { /* acc is NULL when first and last: no arithmetic on it then */ \
        if (!first) z = _mm512_add_ps(_mm512_loadu_ps(acc + (x) * ldacc + 16 * (h)), z); \
        if (!last) { _mm512_storeu_ps(acc + (x) * ldacc + 16 * (h), z); break; } \
        if (bias) z = _mm512_add_ps(z, (h) ? bias1 : bias0); \
        if (relu) z = _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ), z); \
        _mm256_storeu_si256((__m256i *)(void *)(out + (x) * ldo + 16 * (h)), opc__bd_to_bf16(z)); \
    } while (0)
#define OPC__ROW_ST(i, xx) do { const int64_t x = (xx); OPC__HALF(c##i##0, 0); OPC__HALF(c##i##1, 1); } while (0)
    OPC__ROWS(OPC__ROW_ST);
#undef OPC__ROW_ST
#undef OPC__HALF
}

/* A block: rows [i0, i0+mc), depth [p0, p0+kc) -> MR-row panels of kp = ceil(kc/2) pairs,
   [kp][MR] words each, rows beyond mc zero. */
static OPC_UNUSED void opc__packA_bd(const uint16_t *A, int trans, int64_t M, int64_t K, int64_t i0, int64_t mc,
                                     int64_t p0, int64_t kc, uint32_t *OPC_RESTRICT dst) {
    const int64_t kp = opc__cdiv(kc, 2), kfull = kc / 2;
    for (int64_t ip = 0; ip < mc; ip += OPC_BD_MR) {
        const int64_t mr = opc__min64(OPC_BD_MR, mc - ip);
        uint32_t *d = dst + ip * kp;
        if (!trans) {              /* A(i,k) = A[i*K + k]: a row's pairs are its words */
            for (int64_t i = 0; i < OPC_BD_MR; i++) {
                const uint16_t *s = A + (i0 + ip + i) * K + p0;
                if (i >= mr) { for (int64_t p = 0; p < kp; p++) d[p * OPC_BD_MR + i] = 0; continue; }
                for (int64_t p = 0; p < kfull; p++) d[p * OPC_BD_MR + i] = opc__bd_word(s + 2 * p);
                if (kp > kfull) d[kfull * OPC_BD_MR + i] = s[2 * kfull];
            }
        } else {                   /* A(i,k) = A[k*M + i]: two rows of A^T per pair */
            for (int64_t p = 0; p < kp; p++) {
                const uint16_t *s0 = A + (p0 + 2 * p) * M + i0 + ip, *s1 = s0 + M;
                const int two = 2 * p + 1 < kc;
                for (int64_t i = 0; i < mr; i++) d[p * OPC_BD_MR + i] = opc__bd_pair(s0[i], two ? s1[i] : 0);
                for (int64_t i = mr; i < OPC_BD_MR; i++) d[p * OPC_BD_MR + i] = 0;
            }
        }
    }
}

/* B block: depth [p0, p0+kc), columns [j0, j0+nc), panel pj -> [kp][NR] words at
   dst + pj*NR*kp, columns beyond nc zero. */
static OPC_UNUSED void opc__packB_bd(const uint16_t *B, int trans, int64_t N, int64_t K, int64_t p0, int64_t kc,
                                     int64_t j0, int64_t nc, int64_t pj, uint32_t *OPC_RESTRICT dst) {
    const int64_t kp = opc__cdiv(kc, 2), kfull = kc / 2;
    const int64_t jp = pj * OPC_BD_NR, nr = opc__min64(OPC_BD_NR, nc - jp);
    uint32_t *d = dst + jp * kp;
    if (!trans) {                  /* B(k,j) = B[k*N + j]: two rows of B per pair */
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *s0 = B + (p0 + 2 * p) * N + j0 + jp, *s1 = s0 + N;
            uint32_t *dp = d + p * OPC_BD_NR;
            if (2 * p + 1 < kc && nr == OPC_BD_NR) {
                for (int64_t j = 0; j < OPC_BD_NR; j++) dp[j] = opc__bd_pair(s0[j], s1[j]);
                continue;
            }
            for (int64_t j = 0; j < nr; j++) dp[j] = opc__bd_pair(s0[j], 2 * p + 1 < kc ? s1[j] : 0);
            for (int64_t j = nr; j < OPC_BD_NR; j++) dp[j] = 0;
        }
    } else {                       /* B(k,j) = B[j*K + k]: a column's pairs are its words */
        for (int64_t j = 0; j < OPC_BD_NR; j++) {
            const uint16_t *s = B + (j0 + jp + j) * K + p0;
            if (j >= nr) { for (int64_t p = 0; p < kp; p++) d[p * OPC_BD_NR + j] = 0; continue; }
            for (int64_t p = 0; p < kfull; p++) d[p * OPC_BD_NR + j] = opc__bd_word(s + 2 * p);
            if (kp > kfull) d[kfull * OPC_BD_NR + j] = s[2 * kfull];
        }
    }
}

/* Frozen operands (opc__frozen_panels's, in this layout): depth block pc's panels start at word
   pc/2 * panels * width (every block but the last is even), the block of columns jc (rows ic)
   at jc*kp (ic*kp) within it. */
static void opc__pack_frozen_b_bd(const void *ctx, float *dst) {
    const opc__frozen_operand *o = (const opc__frozen_operand *)ctx;
    const int64_t npan = opc__cdiv(o->rows, OPC_BD_NR);
    for (int64_t pc = 0; pc < o->K; pc += o->kcb)
        for (int64_t pj = 0; pj < npan; pj++)
            opc__packB_bd((const uint16_t *)o->X, o->trans, o->rows, o->K, pc, opc__min64(o->kcb, o->K - pc), 0,
                          o->rows, pj, (uint32_t *)(void *)dst + pc / 2 * npan * OPC_BD_NR);
}

static void opc__pack_frozen_a_bd(const void *ctx, float *dst) {
    const opc__frozen_operand *o = (const opc__frozen_operand *)ctx;
    const int64_t npan = opc__cdiv(o->rows, OPC_BD_MR);
    for (int64_t pc = 0; pc < o->K; pc += o->kcb)
        opc__packA_bd((const uint16_t *)o->X, o->trans, o->rows, o->K, 0, o->rows, pc, opc__min64(o->kcb, o->K - pc),
                      (uint32_t *)(void *)dst + pc / 2 * npan * OPC_BD_MR);
}

static const uint32_t *opc__frozen_panels_bd(int is_b, const void *X, int trans, int64_t rows, int64_t K,
                                             int64_t kcb, int64_t stride, int64_t batches) {
    if (!(stride == 0 || batches == 1)) return NULL;
    const int width = is_b ? OPC_BD_NR : OPC_BD_MR;
    const opc__frozen_operand o = {X, OPC_DT_BF16, trans, rows, K, kcb};
    const int64_t key[OPC_FROZEN_KEY] = {is_b ? 4 : 5, OPC_DT_BF16 * 2 + trans, rows, K};
    return (const uint32_t *)(const void *)opc_rt_frozen_packed(
        X, rows * K * 2, key, opc__cdiv(rows, width) * width * opc__cdiv(K, 2),
        is_b ? opc__pack_frozen_b_bd : opc__pack_frozen_a_bd, &o);
}

/* One tile's f32 sums (ct: MR x NR, row stride NR) through opc__store_s, whose tiles are
   OPC_S_NR wide (32 with AVX-512, 16 without): in pieces of that width. */
static OPC_UNUSED void opc__store_bd(const float *ct, int mr, int nr, float *acc, int64_t ldacc, int first,
                                     int last, const float *bias, int act, char *out, char *res, int64_t ldo) {
    float piece[OPC_BD_MR * OPC_S_NR] __attribute__((aligned(64)));
    for (int h = 0; h < nr; h += OPC_S_NR) {
        const float *src = ct;
        if (OPC_S_NR != OPC_BD_NR) {
            for (int i = 0; i < mr; i++) memcpy(piece + i * OPC_S_NR, ct + i * OPC_BD_NR + h, OPC_S_NR * sizeof(float));
            src = piece;
        }
        opc__store_s(src, mr, (int)opc__min64(OPC_S_NR, nr - h), acc ? acc + h : NULL, ldacc, first, last,
                     bias ? bias + h : NULL, act, OPC_DT_BF16, out + 2 * h, res ? res + 2 * h : NULL, ldo);
    }
}

/* opc__gemm_s_part for bf16 on vdpbf16ps (same arguments; dt is OPC_DT_BF16). */
static OPC_UNUSED void opc__gemm_bf16dp_part(int dt, int64_t b0, int64_t b1, int64_t M, int64_t N, int64_t K,
                                             const void *A, int64_t sa, int ta, const void *B, int64_t sb, int tb,
                                             float *bf, int act, void *out, void *res,
                                             int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                             opc_gemm_epilogue ep, void *ep_ctx) {
    const int MR = OPC_BD_MR, NR = OPC_BD_NR;
    if (b0 >= b1 || i0 >= i1 || j0 >= j1) return;
    const int64_t mrows = i1 - i0, ncols = j1 - j0;
    const int64_t kcb = opc__bd_kc_block(K), kpb = opc__cdiv(kcb, 2);
    const int64_t NC = opc__min64(OPC_S_NC, opc__cdiv(ncols, NR) * NR);
    const int64_t nbm = opc__cdiv(mrows, OPC_S_MC);
    const int64_t mcb = opc__cdiv(opc__cdiv(mrows, nbm), MR) * MR;
    const int need_acc = kcb < K;
    uint32_t *bp = (uint32_t *)opc__buf_get(OPC__BUF_B, (size_t)kpb * (size_t)NC * sizeof(uint32_t));
    uint32_t *ap = (uint32_t *)opc__buf_get(OPC__BUF_A, (size_t)kpb * (size_t)mcb * sizeof(uint32_t));
    float *sc = need_acc ? (float *)opc__buf_get(OPC__BUF_C, (size_t)mrows * (size_t)NC * sizeof(float)) : NULL;
    if (!bp || !ap || (need_acc && !sc)) {
        opc__buf_put(bp); opc__buf_put(ap); opc__buf_put(sc);
        opc__gemm_naive_rng_s(dt, b0, b1, M, N, K, A, sa, ta, B, sb, tb, bf, OPC_DT_F32, act, out, res,
                              i0, i1, j0, j1, ep, ep_ctx);
        return;
    }
    float ct[OPC_BD_MR * OPC_BD_NR] __attribute__((aligned(64)));
    /* frozen copies where this part's blocks start on their panels (a split of OPC_S_MR rows or
       OPC_S_NR columns need not, without AVX-512) */
    const uint32_t *fa = i0 % MR ? NULL : opc__frozen_panels_bd(0, A, ta, M, K, kcb, sa, b1 - b0);
    const uint32_t *fb = j0 % NR ? NULL : opc__frozen_panels_bd(1, B, tb, N, K, kcb, sb, b1 - b0);
    for (int64_t b = b0; b < b1; b++) {
        const uint16_t *Ab = (const uint16_t *)A + b * sa, *Bb = (const uint16_t *)B + b * sb;
        char *Ob = (char *)out + (size_t)(b * M * N) * 2;
        char *Rb = res ? (char *)res + (size_t)(b * M * N) * 2 : NULL;
        for (int64_t jc = j0; jc < j1; jc += NC) {
            const int64_t nc = opc__min64(NC, j1 - jc), npan = opc__cdiv(nc, NR);
            for (int64_t pc = 0; pc < K; pc += kcb) {
                const int64_t kc = opc__min64(kcb, K - pc), kp = opc__cdiv(kc, 2);
                const int first = pc == 0, last = pc + kc >= K;
                const uint32_t *bpc = fb ? fb + pc / 2 * opc__cdiv(N, NR) * NR + jc * kp : bp;
                if (!fb)
                    for (int64_t pj = 0; pj < npan; pj++) opc__packB_bd(Bb, tb, N, K, pc, kc, jc, nc, pj, bp);
                for (int64_t ic = i0; ic < i1; ic += mcb) {
                    const int64_t mc = opc__min64(mcb, i1 - ic);
                    const uint32_t *apc = fa ? fa + pc / 2 * opc__cdiv(M, MR) * MR + ic * kp : ap;
                    if (!fa) opc__packA_bd(Ab, ta, M, K, ic, mc, pc, kc, ap);
                    for (int64_t pj = 0; pj < npan; pj++) {
                        const int64_t j = jc + pj * NR;
                        const int nr = (int)opc__min64(NR, j1 - j);
                        for (int64_t ir = 0; ir < mc; ir += MR) {
                            const int mr = (int)opc__min64(MR, mc - ir);
                            const int64_t i = ic + ir;
                            float *acc = sc ? sc + (i - i0) * NC + (j - jc) : NULL;
                            char *o = Ob + (size_t)(i * N + j) * 2;
                            /* a whole tile whose store is the kernel's own: bias and relu at most */
                            const int direct = mr == MR && nr == NR && (!last || (act <= 1 && !Rb));
                            opc__ukr_bd(kp, apc + ir * kp, bpc + pj * NR * kp, ct, direct, acc, NC, first, last,
                                        bf ? bf + j : NULL, act == 1, (uint16_t *)(void *)o, N);
                            if (!direct)
                                opc__store_bd(ct, mr, nr, acc, NC, first, last, bf ? bf + j : NULL, act, o,
                                              Rb ? Rb + (size_t)(i * N + j) * 2 : NULL, N);
                        }
                    }
                    if (ep && last) ep(ep_ctx, b * M + ic, b * M + ic + mc, jc, jc + nc);
                }
            }
        }
    }
    opc__buf_put(bp); opc__buf_put(ap); opc__buf_put(sc);
}
#else
static inline int opc__bf16dp_on(void) { return 0; }
#endif

#endif /* OPC_GEMM_BF16DP_H */
