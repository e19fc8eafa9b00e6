/* opc_gemm.h -- CPU GEMM with a fused epilogue, for opc's generated C modules.
 *
 *   out[b] = act(op_a(A[b]) @ op_b(B[b]) + bias);  reserve[b] = pre-activation
 *
 * Entry points (one per dtype, same argument order):
 *   opc_gemm_f32 (float), opc_gemm_f64 (double),
 *   opc_gemm_f16, opc_gemm_bf16 (uint16_t storage; f32 compute/accumulate,
 *                               round to nearest even on store)
 *   (batch, M, N, K, A, a_batch_stride, trans_a, B, b_batch_stride, trans_b,
 *    bias, act, out, reserve)
 * A is [batch,M,K] ([batch,K,M] if trans_a), B is [batch,K,N] ([batch,N,K] if
 * trans_b), *_batch_stride in elements (0 = broadcast), bias NULL or [N],
 * act: 0 none, 1 relu, 2 gelu (tanh form), 3 gelu (erf form), 4 relu6 (min(max(x, 0), 6) as
 * opc.maximum / opc.minimum compute it: NaN stays NaN, -0 becomes 0); act | OPC_GEMM_ROW_BIAS
 * (f32, no reserve): bias is [M], one value per row of each matrix (a pointwise conv's per-channel
 * bias), added in the kernel's store like a column bias.
 * out / reserve: [batch,M,N] contiguous, reserve may be NULL, no aliasing.
 * opc_gemm_ep_*: the same plus an epilogue `ep(ep_ctx, r0, r1, c0, c1)`, called once
 * on every finished block of out -- rows [r0, r1) of the [batch*M, N] output
 * (row b*M + i), columns [c0, c1) -- after its last K block, by the thread that
 * computed it (inside the parallel region), while the block is in cache: the
 * generated module's pointwise chain on the GEMM's result (an erf GELU, a
 * residual add) runs there instead of in a pass of its own over memory.
 *
 * Design (BLIS): loop jc over NC columns, pc over KC depth, pack B[pc,jc]
 * into KCxNR panels (shared by threads), then the threads take MCxKC blocks of
 * A (or, for short M, column ranges), pack them into MRxKC panels (packing
 * does the transpose and the f16/bf16 -> f32 conversion, and zero-pads edge
 * panels) and run an MRxNR register-blocked micro-kernel (AVX-512 or AVX2+FMA intrinsics,
 * when available, portable C otherwise). Each micro-tile goes through one
 * store routine which accumulates over K blocks and, after the last K block,
 * applies bias, reserve store, activation and the final rounding in the same
 * pass. The rows/columns beyond M/N are never read or written.
 * Packing buffers are 64-byte aligned, cached per calling thread (grow only);
 * if an allocation fails the call falls back to an unpacked reference loop.
 * f16 packing/stores use F16C when compiled with it (results identical to the
 * scalar opc_runtime.h conversions except for NaN payloads).
 * bf16 on a CPU with AVX512-BF16 (checked at run time; $OPC_GEMM_BF16DP=0 turns it off) packs
 * pairs of k instead and runs vdpbf16ps: opc_gemm_bf16dp.h.
 *
 * C only (not for CUDA). Compiles with or without -march=native / -fopenmp.
 */
#ifndef OPC_GEMM_H
#define OPC_GEMM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "opc_runtime.h"
#include "opc_threads.h"
#include "opc_frozen.h"
#include "opc_gemm_api.h" /* OPC_GEMM_RELU6, OPC_GEMM_ROW_BIAS */

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX__) || defined(__F16C__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define OPC_GEMM_AVX2 1
#endif
/* AVX-512 (chosen when the build's -march has it, as AVX2 is): the same
   micro-tile rows with 16-float registers, twice the columns per FMA. */
#if defined(OPC_GEMM_AVX2) && defined(__AVX512F__)
#define OPC_GEMM_AVX512 1
#endif

#if defined(__GNUC__)
#define OPC_RESTRICT __restrict__
#define OPC_UNUSED __attribute__((unused))
#define OPC_ALWAYS_INLINE static inline __attribute__((always_inline, unused))
#else
#define OPC_RESTRICT
#define OPC_UNUSED
#define OPC_ALWAYS_INLINE static inline
#endif

enum { OPC_DT_F32 = 0, OPC_DT_F16 = 1, OPC_DT_BF16 = 2, OPC_DT_F64 = 3 };

/* A block's epilogue (see above); NULL for none. */
typedef void (*opc_gemm_epilogue)(void *ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/* Blocking. f32: 6x16 micro-tile (12 ymm accumulators), f64: 6x8; with
   AVX-512 12x32 and 6x16 (2 FMA ports x 4 cycles of latency need 8 zmm
   accumulators in flight; f32's 24 load B twice and broadcast A once per 24
   FMAs: 220 GFLOP/s in L1 against 195 for 6x32 on a Sapphire Rapids core whose
   FMA peak is 240. The B micro-panel, kc x NR, 32 KiB at kc = 256, stays in a
   48 KiB L1 with the 12 KiB A micro-panel while the other A panels stream from L2). */
#ifdef OPC_GEMM_AVX512
#define OPC_S_MR 12
#define OPC_S_NR 32
#else
#define OPC_S_MR 6
#define OPC_S_NR 16
#endif
#ifndef OPC_S_KC
#define OPC_S_KC 256
#endif
#ifndef OPC_S_MC
#define OPC_S_MC 144
#endif
/* With a short K, row blocks of EP_ROWS: an epilogue then runs on each block while it is in L1, where
   a whole block of MobileNetV2's 16->96 pointwise conv at 32x32 (384 KB) made it a pass through L2
   that cost 13 of the layer's 33 us; a short K repacks A and rereads B per block for little. Without
   an epilogue too: that conv alone took 38 us in blocks of 96 rows, 18 in blocks of 12 (a 2048 x 48 x
   2048 product 3.1 -> 1.7 ms at 1 thread) */
#ifndef OPC_S_EP_K
#define OPC_S_EP_K 64
#define OPC_S_EP_ROWS 12
#endif
#ifndef OPC_S_NC
#define OPC_S_NC 3072
#endif
#ifndef OPC_S_PACKB_GROUP
#define OPC_S_PACKB_GROUP 4
#endif
#define OPC_D_MR 6
#ifdef OPC_GEMM_AVX512
#define OPC_D_NR 16
#else
#define OPC_D_NR 8
#endif
#ifndef OPC_D_KC
#define OPC_D_KC 256
#endif
#ifndef OPC_D_MC
#define OPC_D_MC 96
#endif
#ifndef OPC_D_NC
#define OPC_D_NC 2048
#endif

/* Work (M*N*K) below which OpenMP is not worth starting. */
#define OPC_GEMM_PAR_MIN (64.0 * 64.0 * 64.0)
/* Panels a piece of a split has at least: MR-row panels (a piece of a row split packs all of
   B again: 32 panels, 384 rows with the 12-row tile, keep that below a few percent) and NR-column
   panels (a piece of a column split packs all of A again: 8 panels, 256 columns with AVX-512; with
   2, the block's fc1 and dW GEMMs packed A 8 times at 2 threads and ran 5-20% slower, A/B
   interleaved at 2 threads). Measured: bench/results/2026-12-03-busy.txt. */
#ifndef OPC_GEMM_PART_MIN_ROWS
#define OPC_GEMM_PART_MIN_ROWS 32
#endif
#ifndef OPC_GEMM_PART_MIN_COLS
#define OPC_GEMM_PART_MIN_COLS 8
#endif

/* 64-byte aligned allocation on plain malloc (C99: no aligned_alloc). The
   original pointer is kept just below the aligned block. */
static OPC_UNUSED void *opc__amalloc(size_t bytes) {
    unsigned char *raw, *p;
    if (bytes > SIZE_MAX - 128u) return NULL;
    raw = (unsigned char *)malloc(bytes + 64u + sizeof(void *));
    if (!raw) return NULL;
    p = raw + sizeof(void *);
    p += (64u - ((uintptr_t)p & 63u)) & 63u;
    memcpy(p - sizeof(void *), &raw, sizeof(void *));
    OPC_POISON(raw, (size_t)(p - sizeof(void *) - raw));                       /* the bytes before ... */
    OPC_POISON(p + bytes, (size_t)(raw + bytes + 64u + sizeof(void *) - (p + bytes)));  /* ... and after */
    return p;
}
static OPC_UNUSED void opc__afree(void *p) {
    void *raw;
    if (!p) return;
    memcpy(&raw, (unsigned char *)p - sizeof(void *), sizeof(void *));
    free(raw);
}

/* Packing buffers are cached per thread (grow only, 64-byte aligned) so that
   repeated calls do not pay for malloc/mmap and page faults every time. The
   OpenMP worker threads persist, so each keeps its own A buffer. Without
   thread-local storage the buffers are allocated per call. */
#if defined(__GNUC__)
#define OPC_GEMM_TLS __thread
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define OPC_GEMM_TLS _Thread_local
#endif
enum { OPC__BUF_B = 0, OPC__BUF_A = 1, OPC__BUF_C = 2, OPC__NBUF = 3 };
#ifdef OPC_GEMM_TLS
static OPC_GEMM_TLS void *opc__tls_buf[OPC__NBUF];
static OPC_GEMM_TLS size_t opc__tls_size[OPC__NBUF];
#endif
static OPC_UNUSED void *opc__buf_get(int slot, size_t bytes) {
#ifdef OPC_GEMM_TLS
    if (opc__tls_buf[slot] && OPC_SCRATCH_FITS(opc__tls_size[slot], bytes)) return opc__tls_buf[slot];
    opc__afree(opc__tls_buf[slot]);
    opc__tls_size[slot] = 0;
    opc__tls_buf[slot] = opc__amalloc(bytes);
    if (opc__tls_buf[slot]) opc__tls_size[slot] = bytes;
    return opc__tls_buf[slot];
#else
    (void)slot;
    return opc__amalloc(bytes);
#endif
}
static OPC_UNUSED void opc__buf_put(void *p) {
#ifdef OPC_GEMM_TLS
    (void)p;
#else
    opc__afree(p);
#endif
}

static inline int64_t opc__min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t opc__cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Packing reads a short segment of each source row, and rows are a page or more apart, where the
   hardware prefetchers stop: the segment OPC__PF_ROWS rows ahead is prefetched by hand (integer
   address math: it may pass the end, and a prefetch never faults). */
#define OPC__PF_ROWS 8
static inline void opc__pf_span(const void *p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)o), 0, 3);
}

/* ------------------------------------------------------------------------ */
/* Loading one element of any storage type as f32.                           */
/* ------------------------------------------------------------------------ */
OPC_ALWAYS_INLINE float opc__ld_s(const void *p, int64_t i, int dt) {
    if (dt == OPC_DT_F32) return ((const float *)p)[i];
    if (dt == OPC_DT_F16) return opc_f16_to_f32(((const uint16_t *)p)[i]);
    return opc_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* ------------------------------------------------------------------------ */
/* gelu (tanh form) in the f32 epilogue: 0.5 x (1 + tanh(u)) = x / (1 + e^-2u), */
/* the same function without cancellation for negative x, on opc_runtime.h's */
/* branch-free opc_expf (the one exp polynomial of the runtime), so the loop */
/* over a tile row vectorizes.                                              */
/* ------------------------------------------------------------------------ */
OPC_ALWAYS_INLINE float opc__gelu_tanh_fast_f32(float x) {
    float u = (float)OPC_SQRT_2_OVER_PI * (x + (float)OPC_GELU_A * x * x * x);
    return x / (1.0f + opc_expf(-2.0f * u));
}
OPC_ALWAYS_INLINE void opc__gelu_tanh_row(const float *z, float *o, int n) {
    for (int j = 0; j < n; j++) o[j] = opc__gelu_tanh_fast_f32(z[j]);
}
/* act on one value, as the store's loops apply it */
OPC_ALWAYS_INLINE float opc__act_f32(float z, int act) {
    if (act == 1) return z < 0.0f ? 0.0f : z;
    if (act == OPC_GEMM_RELU6) return opc_relu6_f32(z);
    if (act == 2) return opc__gelu_tanh_fast_f32(z);
    if (act == 3) return opc_gelu_erf_f32(z);
    return z;
}

/* ------------------------------------------------------------------------ */
/* Epilogue / store for one f32-compute micro-tile.                          */
/*  ct: MR x NR tile (row stride NR) of this K block's partial product.     */
/*  acc: where partial sums live between K blocks (f32, row stride ldacc),   */
/*       NULL when there is a single K block. first: no earlier partial.     */
/*  last: apply bias + activation and store to out/res (dtype dt, row        */
/*       stride ldo). bias: f32 values for these columns, or NULL.          */
/* ------------------------------------------------------------------------ */
/*  rbias: the row bias (OPC_GEMM_ROW_BIAS) of the tile's rows, or NULL.     */
static OPC_UNUSED void opc__store_rows_s(const float *OPC_RESTRICT ct, int mr, int nr,
                         float *acc, int64_t ldacc, int first, int last,
                         const float *bias, const float *rbias, int act, int dt,
                         void *out, void *res, int64_t ldo) {
    float z[OPC_S_NR];
#if defined(__AVX__)
    /* Full-width f32 rows: the same arithmetic in 8-float registers. */
    if (dt == OPC_DT_F32 && nr == OPC_S_NR) {
        for (int i = 0; i < mr; i++) {
            float *o = (float *)out + i * ldo, *r = res ? (float *)res + i * ldo : NULL;
            float *ai = acc ? acc + i * ldacc : NULL;
            for (int c = 0; c < OPC_S_NR; c += 8) {
                __m256 z0 = _mm256_load_ps(ct + i * OPC_S_NR + c);
                if (!first) z0 = _mm256_add_ps(_mm256_loadu_ps(ai + c), z0);
                if (!last) { _mm256_storeu_ps(ai + c, z0); continue; }
                if (bias) z0 = _mm256_add_ps(z0, _mm256_loadu_ps(bias + c));
                if (rbias) z0 = _mm256_add_ps(z0, _mm256_set1_ps(rbias[i]));
                if (r) _mm256_storeu_ps(r + c, z0);
                if (act == 1) {
                    /* z < 0 ? 0 : z (NaN kept, -0 kept), as the scalar path */
                    z0 = _mm256_andnot_ps(_mm256_cmp_ps(z0, _mm256_setzero_ps(), _CMP_LT_OQ), z0);
                }
                else if (act == OPC_GEMM_RELU6) {  /* as opc_relu6_f32: ordered tests, NaN kept */
                    const __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
                    z0 = _mm256_blendv_ps(z0, zero, _mm256_cmp_ps(z0, zero, _CMP_LE_OQ));
                    z0 = _mm256_blendv_ps(z0, six, _mm256_cmp_ps(z0, six, _CMP_GE_OQ));
                }
                else if (act >= 2) {  /* gelu: opc_runtime.h's branch-free math, vectorized by gcc */
                    float g[8];
                    _mm256_storeu_ps(g, z0);
                    if (act == 2) opc__gelu_tanh_row(g, g, 8);
                    else for (int j = 0; j < 8; j++) g[j] = opc_gelu_erf_f32(g[j]);
                    z0 = _mm256_loadu_ps(g);
                }
                _mm256_storeu_ps(o + c, z0);
            }
        }
        return;
    }
#endif
    for (int i = 0; i < mr; i++) {
        const float *ci = ct + i * OPC_S_NR;
        if (!last) {
            float *ai = acc + i * ldacc;
            if (first) { for (int j = 0; j < nr; j++) ai[j] = ci[j]; }
            else { for (int j = 0; j < nr; j++) ai[j] += ci[j]; }
            continue;
        }
        if (first) { for (int j = 0; j < OPC_S_NR; j++) z[j] = ci[j]; }
        else {
            const float *ai = acc + i * ldacc;
            for (int j = 0; j < nr; j++) z[j] = ai[j] + ci[j];
            for (int j = nr; j < OPC_S_NR; j++) z[j] = 0.0f;
        }
        if (bias) { for (int j = 0; j < nr; j++) z[j] += bias[j]; }
        if (rbias) { for (int j = 0; j < nr; j++) z[j] += rbias[i]; }
        if (dt == OPC_DT_F32) {
            float *o = (float *)out + i * ldo;
            if (res) { float *r = (float *)res + i * ldo; for (int j = 0; j < nr; j++) r[j] = z[j]; }
            if (act == 0) { for (int j = 0; j < nr; j++) o[j] = z[j]; }
            else if (act == 1) { for (int j = 0; j < nr; j++) o[j] = z[j] < 0.0f ? 0.0f : z[j]; }
            else if (act == OPC_GEMM_RELU6) { for (int j = 0; j < nr; j++) o[j] = opc_relu6_f32(z[j]); }
            else if (act == 2) opc__gelu_tanh_row(z, o, nr);
            else { for (int j = 0; j < nr; j++) o[j] = opc_gelu_erf_f32(z[j]); }
        } else {
            float g[OPC_S_NR];
            uint16_t *o = (uint16_t *)out + i * ldo;
            uint16_t *r = res ? (uint16_t *)res + i * ldo : NULL;
            if (act == 0) { for (int j = 0; j < nr; j++) g[j] = z[j]; }
            else if (act == 1) { for (int j = 0; j < nr; j++) g[j] = z[j] < 0.0f ? 0.0f : z[j]; }
            else if (act == OPC_GEMM_RELU6) { for (int j = 0; j < nr; j++) g[j] = opc_relu6_f32(z[j]); }
            else if (act == 2) opc__gelu_tanh_row(z, g, nr);
            else { for (int j = 0; j < nr; j++) g[j] = opc_gelu_erf_f32(z[j]); }
            if (dt == OPC_DT_F16) {
#if defined(__F16C__) && defined(__AVX__)
                /* hardware RNE conversion: identical to opc_f32_to_f16 except
                   for NaN payloads (quiet NaN here) */
                if (nr == OPC_S_NR) {
                    for (int c = 0; c < OPC_S_NR; c += 8) {
                        if (r) _mm_storeu_si128((__m128i *)(r + c), _mm256_cvtps_ph(_mm256_loadu_ps(z + c), 0));
                        _mm_storeu_si128((__m128i *)(o + c), _mm256_cvtps_ph(_mm256_loadu_ps(g + c), 0));
                    }
                    continue;
                }
#endif
                if (r) for (int j = 0; j < nr; j++) r[j] = opc_f32_to_f16(z[j]);
                for (int j = 0; j < nr; j++) o[j] = opc_f32_to_f16(g[j]);
            } else {
                if (r) for (int j = 0; j < nr; j++) r[j] = opc_f32_to_bf16(z[j]);
                for (int j = 0; j < nr; j++) o[j] = opc_f32_to_bf16(g[j]);
            }
        }
    }
}

/* opc__store_rows_s without a row bias: a column bias or none */
static OPC_UNUSED void opc__store_s(const float *OPC_RESTRICT ct, int mr, int nr,
                         float *acc, int64_t ldacc, int first, int last,
                         const float *bias, int act, int dt,
                         void *out, void *res, int64_t ldo) {
    opc__store_rows_s(ct, mr, nr, acc, ldacc, first, last, bias, NULL, act, dt, out, res, ldo);
}

static OPC_UNUSED void opc__store_d(const double *OPC_RESTRICT ct, int mr, int nr,
                         double *acc, int64_t ldacc, int first, int last,
                         const double *bias, int act,
                         double *out, double *res, int64_t ldo) {
    for (int i = 0; i < mr; i++) {
        const double *ci = ct + i * OPC_D_NR;
        if (!last) {
            double *ai = acc + i * ldacc;
            if (first) { for (int j = 0; j < nr; j++) ai[j] = ci[j]; }
            else { for (int j = 0; j < nr; j++) ai[j] += ci[j]; }
            continue;
        }
        double z[OPC_D_NR];
        if (first) { for (int j = 0; j < nr; j++) z[j] = ci[j]; }
        else { const double *ai = acc + i * ldacc; for (int j = 0; j < nr; j++) z[j] = ai[j] + ci[j]; }
        if (bias) { for (int j = 0; j < nr; j++) z[j] += bias[j]; }
        double *o = out + i * ldo;
        if (res) { double *r = res + i * ldo; for (int j = 0; j < nr; j++) r[j] = z[j]; }
        if (act == 0) { for (int j = 0; j < nr; j++) o[j] = z[j]; }
        else if (act == 1) { for (int j = 0; j < nr; j++) o[j] = z[j] < 0.0 ? 0.0 : z[j]; }
        else if (act == OPC_GEMM_RELU6) {
            for (int j = 0; j < nr; j++) o[j] = opc_relu6_f64(z[j]);
        }
        else if (act == 2) { for (int j = 0; j < nr; j++) o[j] = opc_gelu_tanh_f64(z[j]); }
        else { for (int j = 0; j < nr; j++) o[j] = opc_gelu_erf_f64(z[j]); }
    }
}

/* ------------------------------------------------------------------------ */
/* Micro-kernels: ct[MR][NR] = sum_k Ap[k][0..MR) (x) Bp[k][0..NR).          */
/* ------------------------------------------------------------------------ */
/* One FMA into an accumulator that stays in its register. Written as intrinsics, gcc picks
   vfmadd132ps forms and then copies accumulators between registers (about 25 vmovaps per 4 k
   steps of a 6x32 tile), which cost the kernel a tenth of its speed. */
#if defined(OPC_GEMM_AVX2)
#define OPC__FMA_PS(acc, a, b) __asm__("vfmadd231ps %[bb], %[aa], %[cc]" : [cc] "+v"(acc) : [aa] "v"(a), [bb] "v"(b))
#define OPC__FMA_PD(acc, a, b) __asm__("vfmadd231pd %[bb], %[aa], %[cc]" : [cc] "+v"(acc) : [aa] "v"(a), [bb] "v"(b))
#endif
/* The 12 x 32 AVX-512 micro-kernels (f32 below, bf16 in opc_gemm_bf16dp.h) keep their tile in 24
   accumulators, rows c0 .. cb of two zmm each: OPC__ROWS(M) applies M(name, row) to every row,
   OPC__ROWS_OF(M, A) M(A, name, row) (a k step reading row's word of A). */
#define OPC__ROWS(M) M(0, 0); M(1, 1); M(2, 2); M(3, 3); M(4, 4); M(5, 5); \
    M(6, 6); M(7, 7); M(8, 8); M(9, 9); M(a, 10); M(b, 11)
#define OPC__ROWS_OF(M, A) M(A, 0, 0); M(A, 1, 1); M(A, 2, 2); M(A, 3, 3); M(A, 4, 4); M(A, 5, 5); \
    M(A, 6, 6); M(A, 7, 7); M(A, 8, 8); M(A, 9, 9); M(A, a, 10); M(A, b, 11)
/* The depth loop of the 12 x 32 micro-kernels: STEP(a, b) for each of n k steps (12 words of the A
   panel and 32 of B each), two per iteration, PF(a) before each pair; a and b are advanced. */
#define OPC__PANEL_STEPS(n, STEP, PF) do { \
        int64_t k_ = 0; \
        for (; k_ + 2 <= (n); k_ += 2) { PF(a); STEP(a, b); STEP(a + 12, b + 32); a += 24; b += 64; } \
        for (; k_ < (n); k_++) { STEP(a, b); a += 12; b += 32; } \
    } while (0)
/* the A panel streams from L2 (B's stays in L1 for the whole row of tiles): A 8 steps ahead;
   prefetching B instead was 3-6% slower on the block's shapes */
#define OPC__PF_A(a) _mm_prefetch((const char *)((uintptr_t)(a) + 192u * sizeof(*(a))), _MM_HINT_T0)  /* may pass the end */
#define OPC__NO_PF(a) ((void)0)
/* a row's accumulators, zeroed; a row stored into the tile c (row stride 32 floats) */
#define OPC__ROW_ZERO(i, x) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps()
#define OPC__ROW_TO_TILE(i, x) _mm512_store_ps(c + 32 * (x), c##i##0); _mm512_store_ps(c + 32 * (x) + 16, c##i##1)

#if defined(OPC_GEMM_AVX512)
/* The destination tile's rows (128 bytes, 2-3 lines each) prefetched before a micro-kernel: they are
   read or written right after it, and cold otherwise. */
OPC_ALWAYS_INLINE void opc__prefetch_rows(const char *pf, int64_t pfld, int pfrows) {
    for (int r = 0; r < pfrows; r++) {
        uintptr_t row = (uintptr_t)pf + (uintptr_t)(r * pfld);  /* integer math: may pass the end */
        _mm_prefetch((const char *)row, _MM_HINT_T0);
        _mm_prefetch((const char *)(row + 64u), _MM_HINT_T0);
        _mm_prefetch((const char *)(row + 127u), _MM_HINT_T0);
    }
}
/* AVX-512: 12 rows x 2 zmm of B per k step, 24 zmm accumulators. Two tails: the tile to ct
   (row stride NR) for opc__store_s, or (direct) straight into a whole f32 tile of the output c
   (row stride ldc): c = [c +] tile [+ bias], the additions in opc__store_s's order, so the
   results are the same bits; for a plain f32 GEMM it saves the tile's trip through ct.
   The destination prefetched first: pf's rows (the ct tail), c's own MR rows (direct). */
OPC_ALWAYS_INLINE void opc__ukr_s_body(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows,
                       int direct, int64_t ldc, int first, const float *bias,
                       const float *rbias, int act) {
    if (direct) { pf = (const char *)c; pfld = ldc * (int64_t)sizeof(float); pfrows = OPC_S_MR; }
    opc__prefetch_rows(pf, pfld, pfrows);
    OPC__ROWS(OPC__ROW_ZERO);
#define OPC__ROW(A, i, x) av = _mm512_set1_ps((A)[x]); OPC__FMA_PS(c##i##0, av, b0); OPC__FMA_PS(c##i##1, av, b1)
#define OPC__SK(A, B) do { \
        __m512 b0 = _mm512_load_ps((B)), b1 = _mm512_load_ps((B) + 16), av; \
        OPC__ROWS_OF(OPC__ROW, A); \
    } while (0)
    OPC__PANEL_STEPS(kc, OPC__SK, OPC__PF_A);
#undef OPC__SK
#undef OPC__ROW
    if (!direct) {
        OPC__ROWS(OPC__ROW_TO_TILE);
        return;
    }
    const __m512 bias0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
#define OPC__ROW_ST(i, x) do { \
        float *cr = c + (x) * ldc; \
        __m512 z0 = c##i##0, z1 = c##i##1; \
        if (!first) { z0 = _mm512_add_ps(_mm512_loadu_ps(cr), z0); z1 = _mm512_add_ps(_mm512_loadu_ps(cr + 16), z1); } \
        if (bias) { z0 = _mm512_add_ps(z0, bias0); z1 = _mm512_add_ps(z1, bias1); } \
        if (rbias) { const __m512 rb = _mm512_set1_ps(rbias[x]); z0 = _mm512_add_ps(z0, rb); z1 = _mm512_add_ps(z1, rb); } \
        if (act == 1) { /* z < 0 ? 0 : z, as opc__store_s */ \
            z0 = _mm512_mask_mov_ps(z0, _mm512_cmp_ps_mask(z0, zero, _CMP_LT_OQ), zero); \
            z1 = _mm512_mask_mov_ps(z1, _mm512_cmp_ps_mask(z1, zero, _CMP_LT_OQ), zero); \
        } else if (act == OPC_GEMM_RELU6) { /* as opc_relu6_f32 */ \
            z0 = _mm512_mask_mov_ps(z0, _mm512_cmp_ps_mask(z0, zero, _CMP_LE_OQ), zero); \
            z1 = _mm512_mask_mov_ps(z1, _mm512_cmp_ps_mask(z1, zero, _CMP_LE_OQ), zero); \
            z0 = _mm512_mask_mov_ps(z0, _mm512_cmp_ps_mask(z0, six, _CMP_GE_OQ), six); \
            z1 = _mm512_mask_mov_ps(z1, _mm512_cmp_ps_mask(z1, six, _CMP_GE_OQ), six); \
        } \
        _mm512_storeu_ps(cr, z0); _mm512_storeu_ps(cr + 16, z1); \
    } while (0)
    OPC__ROWS(OPC__ROW_ST);
#undef OPC__ROW_ST
}
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    opc__ukr_s_body(kc, a, b, c, pf, pfld, pfrows, 0, 0, 1, NULL, NULL, 0);
}
/* The left half of the tile, for a panel whose columns past 16 are all padding (N's edge of 16 or
   fewer: a pointwise conv's positions on a 4x4 image, a GEMM's last columns): 12 accumulators,
   so no multiply-add goes to the zeros (the full kernel spent half of a 16-column GEMM on them).
   The same sums in the same order as the full kernel's left half; c: the tile (row stride NR). */
#define OPC_GEMM_UKR_HALF 1
#define OPC__HROW_ZERO(i, x) __m512 c##i##0 = _mm512_setzero_ps()
#define OPC__HROW_TO_TILE(i, x) _mm512_store_ps(c + 32 * (x), c##i##0)
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s_half(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c) {
    OPC__ROWS(OPC__HROW_ZERO);
#define OPC__HROW(A, i, x) av = _mm512_set1_ps((A)[x]); OPC__FMA_PS(c##i##0, av, b0)
#define OPC__HK(A, B) do { \
        __m512 b0 = _mm512_load_ps((B)), av; \
        OPC__ROWS_OF(OPC__HROW, A); \
    } while (0)
    OPC__PANEL_STEPS(kc, OPC__HK, OPC__NO_PF);
#undef OPC__HK
#undef OPC__HROW
    OPC__ROWS(OPC__HROW_TO_TILE);
}
/* The tile of a panel of 17 to 16 + OPC_S_EXTRA columns (N's edge past a whole half: a pointwise
   conv's 49 positions on a 7x7 image leave 17 in the last panel): the left half as opc__ukr_s_half,
   each column past it as one vector over the tile's 12 rows (the A panel's k step, against a
   broadcast of the column's B word), where the full kernel spent a right half of 16 columns on one:
   MobileNetV2's 320->1280 conv at 7x7, 49 columns, took as long as 64. Every column's products in
   k order, as the full kernel's: the same bits. */
#define OPC_GEMM_UKR_HALF_PLUS 1
#define OPC_S_EXTRA 8
/* (named accumulators, each step guarded by a constant: an array of them, even indexed by constants,
   went to the stack around each asm FMA) */
#define OPC__XCOLS(M) M(0); M(1); M(2); M(3); M(4); M(5); M(6); M(7)
OPC_ALWAYS_INLINE void opc__ukr_s_half_plus_body(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c, int extra) {
    OPC__ROWS(OPC__HROW_ZERO);
#define OPC__XCOL_ZERO(j) __m512 x##j = _mm512_setzero_ps()
    OPC__XCOLS(OPC__XCOL_ZERO);
#undef OPC__XCOL_ZERO
    const __mmask16 rows = (__mmask16)((1u << OPC_S_MR) - 1u);
#define OPC__HROW(A, i, x) av = _mm512_set1_ps((A)[x]); OPC__FMA_PS(c##i##0, av, b0)
#define OPC__XCOL(j) if (extra > (j)) { const __m512 bj = _mm512_set1_ps(b[16 + (j)]); OPC__FMA_PS(x##j, col, bj); }
    for (int64_t k = 0; k < kc; k++, a += OPC_S_MR, b += OPC_S_NR) {
        __m512 b0 = _mm512_load_ps(b), av;
        OPC__ROWS_OF(OPC__HROW, a);
        const __m512 col = _mm512_maskz_loadu_ps(rows, a);
        OPC__XCOLS(OPC__XCOL);
    }
#undef OPC__XCOL
#undef OPC__HROW
    OPC__ROWS(OPC__HROW_TO_TILE);
    float lanes[OPC_S_EXTRA][16] __attribute__((aligned(64)));
#define OPC__XCOL_OUT(j) if (extra > (j)) _mm512_store_ps(lanes[j], x##j)
    OPC__XCOLS(OPC__XCOL_OUT);
#undef OPC__XCOL_OUT
    for (int j = 0; j < extra; j++)
        for (int i = 0; i < OPC_S_MR; i++) c[32 * i + 16 + j] = lanes[j][i];
}
/* one copy per count of extra columns, each with its accumulators in registers */
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s_half_plus(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c, int extra) {
    switch (extra) {
    case 1: opc__ukr_s_half_plus_body(kc, a, b, c, 1); break;
    case 2: opc__ukr_s_half_plus_body(kc, a, b, c, 2); break;
    case 3: opc__ukr_s_half_plus_body(kc, a, b, c, 3); break;
    case 4: opc__ukr_s_half_plus_body(kc, a, b, c, 4); break;
    case 5: opc__ukr_s_half_plus_body(kc, a, b, c, 5); break;
    case 6: opc__ukr_s_half_plus_body(kc, a, b, c, 6); break;
    case 7: opc__ukr_s_half_plus_body(kc, a, b, c, 7); break;
    default: opc__ukr_s_half_plus_body(kc, a, b, c, 8); break;
    }
}
/* The tile of a row panel of at most 8 rows (M's edge: a pointwise conv's 16 output channels are a
   panel of 12 and one of 4, MobileNetV2's 32->16 conv at 112x112) with more than 16 columns: ROWS
   (4 or 8) rows of 2 zmm, where the full kernel multiplied all 12 rows, the packed panel's zeros
   included. Every product in k order, as the full kernel's: the same bits. */
#define OPC_GEMM_UKR_ROWS 1
OPC_ALWAYS_INLINE void opc__ukr_s_rows_body(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c, const char *pf, int64_t pfld,
                       int pfrows, int rows) {
    opc__prefetch_rows(pf, pfld, pfrows);
#define OPC__RROW_ZERO(i) __m512 lo##i = _mm512_setzero_ps(), hi##i = _mm512_setzero_ps()
    OPC__XCOLS(OPC__RROW_ZERO);
#undef OPC__RROW_ZERO
#define OPC__RROW(i) if (rows > (i)) { const __m512 av = _mm512_set1_ps(a[i]); \
        OPC__FMA_PS(lo##i, av, b0); OPC__FMA_PS(hi##i, av, b1); }
    for (int64_t k = 0; k < kc; k++, a += OPC_S_MR, b += OPC_S_NR) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        OPC__XCOLS(OPC__RROW);
    }
#undef OPC__RROW
#define OPC__RROW_OUT(i) if (rows > (i)) { _mm512_store_ps(c + 32 * (i), lo##i); _mm512_store_ps(c + 32 * (i) + 16, hi##i); }
    OPC__XCOLS(OPC__RROW_OUT);
#undef OPC__RROW_OUT
}
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s_rows(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c, const char *pf, int64_t pfld,
                       int mr) {
    if (mr <= 4) opc__ukr_s_rows_body(kc, a, b, c, pf, pfld, mr, 4);
    else opc__ukr_s_rows_body(kc, a, b, c, pf, pfld, mr, 8);
}
#undef OPC__HROW_ZERO
#undef OPC__HROW_TO_TILE
/* c: the output tile (f32, MR full rows of NR columns, row stride ldc); bias (the columns'), rbias
   (the rows', OPC_GEMM_ROW_BIAS) and act (none, relu or relu6): applied (this being the last K
   block), else NULL, NULL and 0 */
#define OPC_GEMM_UKR_DIRECT 1
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s_direct(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c, int64_t ldc,
                       int first, const float *bias, const float *rbias, int act) {
    opc__ukr_s_body(kc, a, b, c, NULL, 0, 0, 1, ldc, first, bias, rbias, act);
}

__attribute__((noinline)) static OPC_UNUSED void opc__ukr_d(int64_t kc, const double *OPC_RESTRICT a,
                       const double *OPC_RESTRICT b, double *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    opc__prefetch_rows(pf, pfld, pfrows);
    __m512d c00 = _mm512_setzero_pd(), c01 = _mm512_setzero_pd();
    __m512d c10 = _mm512_setzero_pd(), c11 = _mm512_setzero_pd();
    __m512d c20 = _mm512_setzero_pd(), c21 = _mm512_setzero_pd();
    __m512d c30 = _mm512_setzero_pd(), c31 = _mm512_setzero_pd();
    __m512d c40 = _mm512_setzero_pd(), c41 = _mm512_setzero_pd();
    __m512d c50 = _mm512_setzero_pd(), c51 = _mm512_setzero_pd();
#define OPC__DK(A, B) do { \
        __m512d b0 = _mm512_load_pd((B)), b1 = _mm512_load_pd((B) + 8), av; \
        __asm__("" : "+v"(b0), "+v"(b1)); \
        av = _mm512_set1_pd((A)[0]); OPC__FMA_PD(c00, av, b0); OPC__FMA_PD(c01, av, b1); \
        av = _mm512_set1_pd((A)[1]); OPC__FMA_PD(c10, av, b0); OPC__FMA_PD(c11, av, b1); \
        av = _mm512_set1_pd((A)[2]); OPC__FMA_PD(c20, av, b0); OPC__FMA_PD(c21, av, b1); \
        av = _mm512_set1_pd((A)[3]); OPC__FMA_PD(c30, av, b0); OPC__FMA_PD(c31, av, b1); \
        av = _mm512_set1_pd((A)[4]); OPC__FMA_PD(c40, av, b0); OPC__FMA_PD(c41, av, b1); \
        av = _mm512_set1_pd((A)[5]); OPC__FMA_PD(c50, av, b0); OPC__FMA_PD(c51, av, b1); \
    } while (0)
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        _mm_prefetch((const char *)(b + 16 * 8), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 16 * 8 + 8), _MM_HINT_T0);
        OPC__DK(a, b); OPC__DK(a + 6, b + 16);
        _mm_prefetch((const char *)(b + 16 * 10), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 16 * 10 + 8), _MM_HINT_T0);
        OPC__DK(a + 12, b + 32); OPC__DK(a + 18, b + 48);
        a += 24; b += 64;
    }
    for (; k < kc; k++) { OPC__DK(a, b); a += 6; b += 16; }
#undef OPC__DK
    _mm512_store_pd(c + 0, c00);  _mm512_store_pd(c + 8, c01);
    _mm512_store_pd(c + 16, c10); _mm512_store_pd(c + 24, c11);
    _mm512_store_pd(c + 32, c20); _mm512_store_pd(c + 40, c21);
    _mm512_store_pd(c + 48, c30); _mm512_store_pd(c + 56, c31);
    _mm512_store_pd(c + 64, c40); _mm512_store_pd(c + 72, c41);
    _mm512_store_pd(c + 80, c50); _mm512_store_pd(c + 88, c51);
}
#elif defined(OPC_GEMM_AVX2)
/* noinline: a kernel of its own keeps all 16 ymm registers for the tile
   (inlined into the driver, gcc spills accumulators and re-loads B). */
__attribute__((noinline)) static OPC_UNUSED void opc__ukr_s(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    /* Prefetch the destination tile (rows of 64 bytes, maybe 2 lines each):
       it is read/written right after the kernel, and is cold otherwise. */
    for (int r = 0; r < pfrows; r++) {
        uintptr_t row = (uintptr_t)pf + (uintptr_t)(r * pfld);  /* integer math: may pass the end */
        _mm_prefetch((const char *)row, _MM_HINT_T0);
        _mm_prefetch((const char *)(row + 63u), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#define OPC__SK(A, B) do { \
        __m256 b0 = _mm256_load_ps((B)), b1 = _mm256_load_ps((B) + 8), av; \
        __asm__("" : "+x"(b0), "+x"(b1)); /* keep B in registers: no re-loads */ \
        av = _mm256_broadcast_ss((A) + 0); OPC__FMA_PS(c00, av, b0); OPC__FMA_PS(c01, av, b1); \
        av = _mm256_broadcast_ss((A) + 1); OPC__FMA_PS(c10, av, b0); OPC__FMA_PS(c11, av, b1); \
        av = _mm256_broadcast_ss((A) + 2); OPC__FMA_PS(c20, av, b0); OPC__FMA_PS(c21, av, b1); \
        av = _mm256_broadcast_ss((A) + 3); OPC__FMA_PS(c30, av, b0); OPC__FMA_PS(c31, av, b1); \
        av = _mm256_broadcast_ss((A) + 4); OPC__FMA_PS(c40, av, b0); OPC__FMA_PS(c41, av, b1); \
        av = _mm256_broadcast_ss((A) + 5); OPC__FMA_PS(c50, av, b0); OPC__FMA_PS(c51, av, b1); \
    } while (0)
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        _mm_prefetch((const char *)(b + 16 * 8), _MM_HINT_T0);
        OPC__SK(a, b); OPC__SK(a + 6, b + 16);
        _mm_prefetch((const char *)(b + 16 * 10), _MM_HINT_T0);
        OPC__SK(a + 12, b + 32); OPC__SK(a + 18, b + 48);
        a += 24; b += 64;
    }
    for (; k < kc; k++) { OPC__SK(a, b); a += 6; b += 16; }
#undef OPC__SK
    _mm256_store_ps(c + 0, c00);  _mm256_store_ps(c + 8, c01);
    _mm256_store_ps(c + 16, c10); _mm256_store_ps(c + 24, c11);
    _mm256_store_ps(c + 32, c20); _mm256_store_ps(c + 40, c21);
    _mm256_store_ps(c + 48, c30); _mm256_store_ps(c + 56, c31);
    _mm256_store_ps(c + 64, c40); _mm256_store_ps(c + 72, c41);
    _mm256_store_ps(c + 80, c50); _mm256_store_ps(c + 88, c51);
}

__attribute__((noinline)) static OPC_UNUSED void opc__ukr_d(int64_t kc, const double *OPC_RESTRICT a,
                       const double *OPC_RESTRICT b, double *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    for (int r = 0; r < pfrows; r++) {
        uintptr_t row = (uintptr_t)pf + (uintptr_t)(r * pfld);  /* integer math: may pass the end */
        _mm_prefetch((const char *)row, _MM_HINT_T0);
        _mm_prefetch((const char *)(row + 63u), _MM_HINT_T0);
    }
    __m256d c00 = _mm256_setzero_pd(), c01 = _mm256_setzero_pd();
    __m256d c10 = _mm256_setzero_pd(), c11 = _mm256_setzero_pd();
    __m256d c20 = _mm256_setzero_pd(), c21 = _mm256_setzero_pd();
    __m256d c30 = _mm256_setzero_pd(), c31 = _mm256_setzero_pd();
    __m256d c40 = _mm256_setzero_pd(), c41 = _mm256_setzero_pd();
    __m256d c50 = _mm256_setzero_pd(), c51 = _mm256_setzero_pd();
#define OPC__DK(A, B) do { \
        __m256d b0 = _mm256_load_pd((B)), b1 = _mm256_load_pd((B) + 4), av; \
        __asm__("" : "+x"(b0), "+x"(b1)); \
        av = _mm256_broadcast_sd((A) + 0); OPC__FMA_PD(c00, av, b0); OPC__FMA_PD(c01, av, b1); \
        av = _mm256_broadcast_sd((A) + 1); OPC__FMA_PD(c10, av, b0); OPC__FMA_PD(c11, av, b1); \
        av = _mm256_broadcast_sd((A) + 2); OPC__FMA_PD(c20, av, b0); OPC__FMA_PD(c21, av, b1); \
        av = _mm256_broadcast_sd((A) + 3); OPC__FMA_PD(c30, av, b0); OPC__FMA_PD(c31, av, b1); \
        av = _mm256_broadcast_sd((A) + 4); OPC__FMA_PD(c40, av, b0); OPC__FMA_PD(c41, av, b1); \
        av = _mm256_broadcast_sd((A) + 5); OPC__FMA_PD(c50, av, b0); OPC__FMA_PD(c51, av, b1); \
    } while (0)
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        _mm_prefetch((const char *)(b + 8 * 8), _MM_HINT_T0);
        OPC__DK(a, b); OPC__DK(a + 6, b + 8);
        _mm_prefetch((const char *)(b + 8 * 10), _MM_HINT_T0);
        OPC__DK(a + 12, b + 16); OPC__DK(a + 18, b + 24);
        a += 24; b += 32;
    }
    for (; k < kc; k++) { OPC__DK(a, b); a += 6; b += 8; }
#undef OPC__DK
    _mm256_store_pd(c + 0, c00);  _mm256_store_pd(c + 4, c01);
    _mm256_store_pd(c + 8, c10);  _mm256_store_pd(c + 12, c11);
    _mm256_store_pd(c + 16, c20); _mm256_store_pd(c + 20, c21);
    _mm256_store_pd(c + 24, c30); _mm256_store_pd(c + 28, c31);
    _mm256_store_pd(c + 32, c40); _mm256_store_pd(c + 36, c41);
    _mm256_store_pd(c + 40, c50); _mm256_store_pd(c + 44, c51);
}
#else
/* Portable micro-kernels: fixed-size loops the compiler can vectorise. */
static OPC_UNUSED void opc__ukr_s(int64_t kc, const float *OPC_RESTRICT a,
                       const float *OPC_RESTRICT b, float *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    float acc[OPC_S_MR][OPC_S_NR];
    (void)pf; (void)pfld; (void)pfrows;
    for (int i = 0; i < OPC_S_MR; i++) for (int j = 0; j < OPC_S_NR; j++) acc[i][j] = 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < OPC_S_MR; i++) {
            float av = a[i];
            for (int j = 0; j < OPC_S_NR; j++) acc[i][j] += av * b[j];
        }
        a += OPC_S_MR; b += OPC_S_NR;
    }
    for (int i = 0; i < OPC_S_MR; i++) for (int j = 0; j < OPC_S_NR; j++) c[i * OPC_S_NR + j] = acc[i][j];
}
static OPC_UNUSED void opc__ukr_d(int64_t kc, const double *OPC_RESTRICT a,
                       const double *OPC_RESTRICT b, double *OPC_RESTRICT c,
                       const char *pf, int64_t pfld, int pfrows) {
    double acc[OPC_D_MR][OPC_D_NR];
    (void)pf; (void)pfld; (void)pfrows;
    for (int i = 0; i < OPC_D_MR; i++) for (int j = 0; j < OPC_D_NR; j++) acc[i][j] = 0.0;
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < OPC_D_MR; i++) {
            double av = a[i];
            for (int j = 0; j < OPC_D_NR; j++) acc[i][j] += av * b[j];
        }
        a += OPC_D_MR; b += OPC_D_NR;
    }
    for (int i = 0; i < OPC_D_MR; i++) for (int j = 0; j < OPC_D_NR; j++) c[i * OPC_D_NR + j] = acc[i][j];
}
#endif

/* ------------------------------------------------------------------------ */
/* Packing.                                                                  */
/* A block: rows [i0, i0+mc), depth [p0, p0+kc) -> panels of MR rows, each   */
/*   kc x MR (k-major), rows beyond mc zero-filled.                          */
/* B block: depth [p0, p0+kc), cols [j0, j0+nc) -> panels of NR columns,     */
/*   each kc x NR, columns beyond nc zero-filled. Panels [pj0, pj1) only.    */
/* ------------------------------------------------------------------------ */
/* Contiguous row of n elements (storage dt) -> n floats. f16 uses F16C when
   available (exact for all non-NaN values), bf16 is a shift. */
OPC_ALWAYS_INLINE const float *opc__row_s(const void *src, int64_t off, int64_t n, int dt,
                                          float *OPC_RESTRICT tmp) {
    if (dt == OPC_DT_F32) return (const float *)src + off;
    {
        const uint16_t *s = (const uint16_t *)src + off;
        int64_t k = 0;
        if (dt == OPC_DT_F16) {
#if defined(__F16C__) && defined(__AVX__)
            for (; k + 8 <= n; k += 8)
                _mm256_storeu_ps(tmp + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + k))));
#endif
            for (; k < n; k++) tmp[k] = opc_f16_to_f32(s[k]);
        } else {
            for (; k < n; k++) tmp[k] = opc_bf16_to_f32(s[k]);
        }
    }
    return tmp;
}

#if defined(__AVX__)
/* 8x8 transpose of rows r[0..7] at column k: column t (r[0][k+t] .. r[7][k+t])
   goes to d + t*ldd, of which the first w floats (8, 6 or 4) are ours: w = 6 stores 8
   floats for columns 0..6 (the next column's store overwrites the 2 extra) and 6 for the
   last; w = 4 stores 4 per column (the next 4 belong to another row group). */
OPC_ALWAYS_INLINE void opc__tr8(const float *const *r, int64_t k, float *d, int64_t ldd, int w) {
    __m256 x0 = _mm256_loadu_ps(r[0] + k), x1 = _mm256_loadu_ps(r[1] + k);
    __m256 x2 = _mm256_loadu_ps(r[2] + k), x3 = _mm256_loadu_ps(r[3] + k);
    __m256 x4 = _mm256_loadu_ps(r[4] + k), x5 = _mm256_loadu_ps(r[5] + k);
    __m256 x6 = _mm256_loadu_ps(r[6] + k), x7 = _mm256_loadu_ps(r[7] + k);
    __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1);
    __m256 t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3);
    __m256 t4 = _mm256_unpacklo_ps(x4, x5), t5 = _mm256_unpackhi_ps(x4, x5);
    __m256 t6 = _mm256_unpacklo_ps(x6, x7), t7 = _mm256_unpackhi_ps(x6, x7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 c[8];
    c[0] = _mm256_permute2f128_ps(s0, s4, 0x20); c[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    c[2] = _mm256_permute2f128_ps(s2, s6, 0x20); c[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    c[4] = _mm256_permute2f128_ps(s0, s4, 0x31); c[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    c[6] = _mm256_permute2f128_ps(s2, s6, 0x31); c[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
    if (w == 4) {
        for (int t = 0; t < 8; t++) _mm_storeu_ps(d + t * ldd, _mm256_castps256_ps128(c[t]));
        return;
    }
    for (int t = 0; t < 7; t++) _mm256_storeu_ps(d + t * ldd, c[t]);
    if (w == 6) {
        _mm_storeu_ps(d + 7 * ldd, _mm256_castps256_ps128(c[7]));
        _mm_storel_pi((__m64 *)(void *)(d + 7 * ldd + 4), _mm256_extractf128_ps(c[7], 1));
    } else {
        _mm256_storeu_ps(d + 7 * ldd, c[7]);
    }
}
#endif

/* Transposed A (A(i,k) = A[k*M + i]): each row of A^T read once, into every panel. mc is at most
   the driver's row block, OPC_S_MC rounded up to whole MR panels. */
static OPC_UNUSED void opc__packA_t_s(const void *A, int dt, int64_t M, int64_t i0, int64_t mc, int64_t p0,
                                      int64_t kc, float *OPC_RESTRICT dst) {
    const int MR = OPC_S_MR;
    float seg[(OPC_S_MC + OPC_S_MR - 1) / OPC_S_MR * OPC_S_MR];  /* f16/bf16 rows converted */
    const int64_t es = dt == OPC_DT_F32 ? 4 : 2;
    for (int64_t k = 0; k < kc; k++) {
        if (k + OPC__PF_ROWS < kc)
            opc__pf_span((const char *)A + ((p0 + k + OPC__PF_ROWS) * M + i0) * es, mc * es);
        const float *s = opc__row_s(A, (p0 + k) * M + i0, mc, dt, seg);
        int64_t ip = 0;
        for (; ip + MR <= mc; ip += MR) __builtin_memcpy(dst + ip * kc + k * MR, s + ip, MR * sizeof(float));
        if (ip < mc) {
            float *d = dst + ip * kc + k * MR;
            for (int64_t i = 0; i < MR; i++) d[i] = ip + i < mc ? s[ip + i] : 0.0f;
        }
    }
}

static OPC_UNUSED void opc__packA_s(const void *A, int dt, int trans, int64_t M, int64_t K,
                         int64_t i0, int64_t mc, int64_t p0, int64_t kc, float *OPC_RESTRICT dst) {
    const int MR = OPC_S_MR;
    float tmp[OPC_S_MR][OPC_S_KC > OPC_S_MR ? OPC_S_KC : OPC_S_MR];
    float zero[OPC_S_KC];
    int have_zero = 0;
    if (trans) {
        opc__packA_t_s(A, dt, M, i0, mc, p0, kc, dst);
        return;
    }
    for (int64_t ip = 0; ip < mc; ip += MR) {   /* A(i,k) = A[i*K + k]: rows along k */
        int64_t mr = opc__min64(MR, mc - ip);
        float *d = dst + ip * kc;
        const float *r[OPC_S_MR + 8];  /* the row groups of 8 padded (dropped lanes) */
        for (int64_t i = 0; i < MR; i++) {
            if (i < mr) r[i] = opc__row_s(A, (i0 + ip + i) * K + p0, kc, dt, tmp[i]);
            else {
                if (!have_zero) { memset(zero, 0, sizeof zero); have_zero = 1; }
                r[i] = zero;
            }
        }
        int64_t k = 0;
#if defined(__AVX__)
        for (int i = MR; i < MR + 8; i++) r[i] = r[0];
        for (; k + 8 <= kc; k += 8)    /* groups of 8 rows, the last one 6 or 4 wide */
            for (int g = 0; g < MR; g += 8) opc__tr8(r + g, k, d + k * MR + g, MR, MR - g < 8 ? MR - g : 8);
#endif
        for (; k < kc; k++)
            for (int i = 0; i < MR; i++) d[k * MR + i] = r[i][k];
    }
}

static OPC_UNUSED void opc__packB_s(const void *B, int dt, int trans, int64_t N, int64_t K,
                         int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                         int64_t pj, float *OPC_RESTRICT dst) {
    const int NR = OPC_S_NR;
    int64_t jp = pj * NR;
    int64_t nr = opc__min64(NR, nc - jp);
    float *d = dst + jp * kc;
    if (!trans) {                  /* B(k,j) = B[k*N + j]: rows along j */
        float tmp[OPC_S_NR];
        for (int64_t k = 0; k < kc; k++) {
            const float *s = opc__row_s(B, (p0 + k) * N + j0 + jp, nr, dt, tmp);
            if (nr == NR) { __builtin_memcpy(d + k * NR, s, NR * sizeof(float)); continue; }
            for (int64_t j = 0; j < nr; j++) d[k * NR + j] = s[j];
            for (int64_t j = nr; j < NR; j++) d[k * NR + j] = 0.0f;
        }
    } else {                       /* B(k,j) = B[j*K + k]: rows along k */
        float tmp[OPC_S_NR][OPC_S_KC > OPC_S_NR ? OPC_S_KC : OPC_S_NR];
        float zero[OPC_S_KC];
        const float *r[OPC_S_NR];
        if (nr < NR) memset(zero, 0, sizeof zero);
        for (int64_t j = 0; j < NR; j++)
            r[j] = j < nr ? opc__row_s(B, (j0 + jp + j) * K + p0, kc, dt, tmp[j]) : zero;
        int64_t k = 0;
#if defined(__AVX__)
        for (; k + 8 <= kc; k += 8)
            for (int jj = 0; jj < NR; jj += 8) opc__tr8(r + jj, k, d + k * NR + jj, NR, 8);
#endif
        for (; k < kc; k++)
            for (int j = 0; j < NR; j++) d[k * NR + j] = r[j][k];
    }
}

/* Non-transposed B, panels [pj0, pj1) together: each source row is read as
   one contiguous segment (fewer pages / streams than panel by panel). */
static OPC_UNUSED void opc__packB_grp_s(const void *B, int dt, int64_t N,
                         int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                         int64_t pj0, int64_t pj1, float *OPC_RESTRICT dst) {
    const int NR = OPC_S_NR;
    float tmp[OPC_S_NR * OPC_S_PACKB_GROUP];
    const int64_t jb = pj0 * NR, je = opc__min64(nc, pj1 * NR);
    if (pj1 - pj0 > OPC_S_PACKB_GROUP || je - jb < (pj1 - pj0) * NR) {   /* edge panel: one by one */
        for (int64_t pj = pj0; pj < pj1; pj++) opc__packB_s(B, dt, 0, N, 0, p0, kc, j0, nc, pj, dst);
        return;
    }
    const int64_t es = dt == OPC_DT_F32 ? 4 : 2;
    for (int64_t k = 0; k < kc; k++) {
        if (k + OPC__PF_ROWS < kc)
            opc__pf_span((const char *)B + ((p0 + k + OPC__PF_ROWS) * N + j0 + jb) * es, (je - jb) * es);
        const float *s = opc__row_s(B, (p0 + k) * N + j0 + jb, je - jb, dt, tmp);
        for (int64_t pj = pj0; pj < pj1; pj++) {
            float *d = dst + pj * NR * kc + k * NR;
            /* a fixed-size copy gcc inlines (the loop it made a call to memmove) */
            __builtin_memcpy(d, s + (pj - pj0) * NR, NR * sizeof(float));
        }
    }
}

static OPC_UNUSED void opc__packA_d(const double *A, int trans, int64_t M, int64_t K,
                         int64_t i0, int64_t mc, int64_t p0, int64_t kc, double *OPC_RESTRICT dst) {
    const int MR = OPC_D_MR;
    for (int64_t ip = 0; ip < mc; ip += MR) {
        int64_t mr = opc__min64(MR, mc - ip);
        double *d = dst + ip * kc;
        if (!trans) {
            for (int64_t i = 0; i < MR; i++) {
                if (i < mr) {
                    const double *s = A + (i0 + ip + i) * K + p0;
                    for (int64_t k = 0; k < kc; k++) d[k * MR + i] = s[k];
                } else {
                    for (int64_t k = 0; k < kc; k++) d[k * MR + i] = 0.0;
                }
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const double *s = A + (p0 + k) * M + i0 + ip;
                for (int64_t i = 0; i < mr; i++) d[k * MR + i] = s[i];
                for (int64_t i = mr; i < MR; i++) d[k * MR + i] = 0.0;
            }
        }
    }
}

static OPC_UNUSED void opc__packB_d(const double *B, int trans, int64_t N, int64_t K,
                         int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                         int64_t pj, double *OPC_RESTRICT dst) {
    const int NR = OPC_D_NR;
    int64_t jp = pj * NR;
    int64_t nr = opc__min64(NR, nc - jp);
    double *d = dst + jp * kc;
    if (!trans) {
        for (int64_t k = 0; k < kc; k++) {
            const double *s = B + (p0 + k) * N + j0 + jp;
            for (int64_t j = 0; j < nr; j++) d[k * NR + j] = s[j];
            for (int64_t j = nr; j < NR; j++) d[k * NR + j] = 0.0;
        }
    } else {
        for (int64_t j = 0; j < NR; j++) {
            if (j < nr) {
                const double *s = B + (j0 + jp + j) * K + p0;
                for (int64_t k = 0; k < kc; k++) d[k * NR + j] = s[k];
            } else {
                for (int64_t k = 0; k < kc; k++) d[k * NR + j] = 0.0;
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Reference path: no packing, no allocation. Used for K == 0 and when a     */
/* buffer cannot be allocated.                                               */
/* ------------------------------------------------------------------------ */
/* Ranges [b0,b1) x [ib0,ib1) x [jb0,jb1) of the output; `bias` is read as bias_dt
   (a thread's f32 copy, or the caller's array in the GEMM's own dtype). */
static OPC_UNUSED void opc__gemm_naive_rng_s(int dt, int64_t b0, int64_t b1, int64_t M, int64_t N, int64_t K,
                              const void *A, int64_t sa, int ta, const void *B, int64_t sb, int tb,
                              const void *bias, int bias_dt, int act, void *out, void *res,
                              int64_t ib0, int64_t ib1, int64_t jb0, int64_t jb1,
                              opc_gemm_epilogue ep, void *ep_ctx) {
    const int row_bias = (act & OPC_GEMM_ROW_BIAS) != 0;  /* bias: the rows' (f32), not the columns' */
    act &= ~OPC_GEMM_ROW_BIAS;
    for (int64_t b = b0; b < b1; b++) {
        for (int64_t i = ib0; i < ib1; i++)
            for (int64_t j0 = jb0; j0 < jb1; j0 += OPC_S_NR) {
                int nr = (int)opc__min64(OPC_S_NR, jb1 - j0);
                float ct[OPC_S_NR] __attribute__((aligned(32))), bv[OPC_S_NR];
                for (int j = 0; j < nr; j++) {
                    float s = 0.0f;
                    for (int64_t k = 0; k < K; k++) {
                        float a = opc__ld_s(A, b * sa + (ta ? k * M + i : i * K + k), dt);
                        float w = opc__ld_s(B, b * sb + (tb ? (j0 + j) * K + k : k * N + j0 + j), dt);
                        s += a * w;
                    }
                    ct[j] = s;
                    bv[j] = bias && !row_bias ? opc__ld_s(bias, j0 + j, bias_dt) : 0.0f;
                }
                for (int j = nr; j < OPC_S_NR; j++) { ct[j] = 0.0f; bv[j] = 0.0f; }
                int64_t off = b * M * N + i * N + j0;
                size_t es = dt == OPC_DT_F32 ? 4 : 2;
                opc__store_rows_s(ct, 1, nr, NULL, 0, 1, 1, bias && !row_bias ? bv : NULL,
                                  row_bias ? (const float *)bias + i : NULL, act, dt,
                                  (char *)out + off * es, res ? (char *)res + off * es : NULL, N);
            }
        if (ep && ib0 < ib1 && jb0 < jb1) ep(ep_ctx, b * M + ib0, b * M + ib1, jb0, jb1);
    }
}
static OPC_UNUSED void opc__gemm_naive_s(int dt, int64_t batch, int64_t M, int64_t N, int64_t K,
                              const void *A, int64_t sa, int ta, const void *B, int64_t sb, int tb,
                              const void *bias, int act, void *out, void *res,
                              opc_gemm_epilogue ep, void *ep_ctx) {
    opc__gemm_naive_rng_s(dt, 0, batch, M, N, K, A, sa, ta, B, sb, tb, bias, dt, act, out, res, 0, M, 0, N,
                          ep, ep_ctx);
}

static OPC_UNUSED void opc__gemm_naive_d(int64_t batch, int64_t M, int64_t N, int64_t K,
                              const double *A, int64_t sa, int ta, const double *B, int64_t sb, int tb,
                              const double *bias, int act, double *out, double *res,
                              opc_gemm_epilogue ep, void *ep_ctx) {
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j0 = 0; j0 < N; j0 += OPC_D_NR) {
                int nr = (int)opc__min64(OPC_D_NR, N - j0);
                double ct[OPC_D_NR];
                for (int j = 0; j < nr; j++) {
                    double s = 0.0;
                    for (int64_t k = 0; k < K; k++)
                        s += A[b * sa + (ta ? k * M + i : i * K + k)] *
                             B[b * sb + (tb ? (j0 + j) * K + k : k * N + j0 + j)];
                    ct[j] = s;
                }
                int64_t off = b * M * N + i * N + j0;
                opc__store_d(ct, 1, nr, NULL, 0, 1, 1, bias ? bias + j0 : NULL, act,
                             out + off, res ? res + off : NULL, N);
            }
        if (ep) ep(ep_ctx, b * M, (b + 1) * M, 0, N);
    }
}

/* ------------------------------------------------------------------------ */
/* Blocked drivers.                                                          */
/* ------------------------------------------------------------------------ */
/* f32 compute: each thread computes its own part of the output -- a range   */
/* of whole matrices when the batch is large enough, else a range of columns */
/* (NR panels) or, when M > N, of rows (MR panels) -- with its own packing   */
/* buffers, so the parallel region has no barrier inside: only the fork and  */
/* the join. The price is that the operand not split is packed by every      */
/* thread (the smaller one: A for a column split, B for a row split).       */
/* ------------------------------------------------------------------------ */
/* An operand packed whole, once, where it is frozen (opc_frozen.h: a loaded model's weight): every
 * depth block of kcb (the last one shorter) holds all panels of the operand, B's NR-column panels
 * [kc][NR] or A's MR-row panels [kc][MR], in order, so that the block (jc or ic, pc) the driver
 * would pack starts at pc * panels * width + (jc or ic) * kc. */
typedef struct {
    const void *X;
    int dt, trans;
    int64_t rows, K, kcb; /* rows: N for B, M for A */
} opc__frozen_operand;

static void opc__pack_frozen_b(const void *ctx, float *dst) {
    const opc__frozen_operand *o = (const opc__frozen_operand *)ctx;
    const int64_t npan = opc__cdiv(o->rows, OPC_S_NR);
    for (int64_t pc = 0; pc < o->K; pc += o->kcb) {
        const int64_t kc = opc__min64(o->kcb, o->K - pc);
        for (int64_t pj = 0; pj < npan; pj++)
            opc__packB_s(o->X, o->dt, o->trans, o->rows, o->K, pc, kc, 0, o->rows, pj, dst + pc * npan * OPC_S_NR);
    }
}

static void opc__pack_frozen_a(const void *ctx, float *dst) {
    const opc__frozen_operand *o = (const opc__frozen_operand *)ctx;
    const int64_t npan = opc__cdiv(o->rows, OPC_S_MR), mcb = OPC_S_MC / OPC_S_MR * OPC_S_MR;
    for (int64_t pc = 0; pc < o->K; pc += o->kcb) {
        const int64_t kc = opc__min64(o->kcb, o->K - pc);
        for (int64_t ic = 0; ic < o->rows; ic += mcb)
            opc__packA_s(o->X, o->dt, o->trans, o->rows, o->K, ic, opc__min64(mcb, o->rows - ic), pc, kc,
                         dst + pc * npan * OPC_S_MR + ic * kc);
    }
}

/* The depth of the blocks a K-deep product is cut into: balanced, at most OPC_S_KC (frozen
 * operands are packed by them, and the few-rows kernels read those copies). */
static inline int64_t opc__kc_block(int64_t K) {
    return opc__cdiv(K, opc__cdiv(K, opc__min64(OPC_S_KC, K)));
}

/* The whole packed copy of operand X (B when is_b, else A) where it is frozen and one matrix serves
 * every batch (stride 0, or one batch), else NULL: the driver packs it block by block. */
static const float *opc__frozen_panels(int is_b, const void *X, int dt, int trans, int64_t rows, int64_t K,
                                       int64_t kcb, int64_t stride, int64_t batches) {
    if (!(stride == 0 || batches == 1)) return NULL;
    const int width = is_b ? OPC_S_NR : OPC_S_MR;
    const opc__frozen_operand o = {X, dt, trans, rows, K, kcb};
    const int64_t key[OPC_FROZEN_KEY] = {is_b ? 2 : 3, dt * 2 + trans, rows, K};
    return opc_rt_frozen_packed(X, rows * K * (dt == OPC_DT_F32 ? 4 : 2), key, opc__cdiv(rows, width) * width * K,
                                is_b ? opc__pack_frozen_b : opc__pack_frozen_a, &o);
}

static OPC_UNUSED void opc__gemm_s_part(int dt, int64_t b0, int64_t b1, int64_t M, int64_t N, int64_t K,
                        const void *A, int64_t sa, int ta, const void *B, int64_t sb, int tb,
                        float *bf, int act, void *out, void *res,
                        int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                        opc_gemm_epilogue ep, void *ep_ctx) {
    /* bf: f32 copy of the bias, or NULL (not const: gcc's -Wmaybe-uninitialized
       cannot see that the caller filled it) */
    const int MR = OPC_S_MR, NR = OPC_S_NR;
    const size_t es = dt == OPC_DT_F32 ? 4 : 2;
    if (b0 >= b1 || i0 >= i1 || j0 >= j1) return;
    /* rb: the rows' bias (OPC_GEMM_ROW_BIAS, f32), added in the store as bf is */
    const float *rb = (act & OPC_GEMM_ROW_BIAS) ? bf : NULL;
    const int act_flags = act;  /* for the reference loop, which reads the flag itself */
    if (rb) bf = NULL;
    act &= ~OPC_GEMM_ROW_BIAS;
    const int64_t mrows = i1 - i0, ncols = j1 - j0;
    const int64_t kcb = opc__kc_block(K);
    const int64_t NC = opc__min64(OPC_S_NC, opc__cdiv(ncols, NR) * NR);
    const int64_t nbm = opc__cdiv(mrows, OPC_S_MC);     /* balanced row blocks, multiple of MR */
    int64_t mcb = opc__cdiv(opc__cdiv(mrows, nbm), MR) * MR;
    if (K <= OPC_S_EP_K && mcb > OPC_S_EP_ROWS) mcb = OPC_S_EP_ROWS;
    const int need_acc = kcb < K && dt != OPC_DT_F32;  /* more than one depth block */
    float *bp = (float *)opc__buf_get(OPC__BUF_B, (size_t)kcb * (size_t)NC * sizeof(float));
    float *ap = (float *)opc__buf_get(OPC__BUF_A, (size_t)kcb * (size_t)mcb * sizeof(float));
    float *sc = need_acc ? (float *)opc__buf_get(OPC__BUF_C, (size_t)mrows * (size_t)NC * sizeof(float)) : NULL;
    if (!bp || !ap || (need_acc && !sc)) {
        opc__buf_put(bp); opc__buf_put(ap); opc__buf_put(sc);
        opc__gemm_naive_rng_s(dt, b0, b1, M, N, K, A, sa, ta, B, sb, tb, rb ? rb : bf, OPC_DT_F32, act_flags,
                              out, res, i0, i1, j0, j1, ep, ep_ctx);
        return;
    }
    float ct[OPC_S_MR * OPC_S_NR] __attribute__((aligned(64)));
    /* frozen operands packed once for all calls: their block starts (i0, j0 are whole panels) */
    const float *fa = opc__frozen_panels(0, A, dt, ta, M, K, kcb, sa, b1 - b0);
    const float *fb = opc__frozen_panels(1, B, dt, tb, N, K, kcb, sb, b1 - b0);
    for (int64_t b = b0; b < b1; b++) {
        const char *Ab = (const char *)A + (size_t)(b * sa) * es;
        const char *Bb = (const char *)B + (size_t)(b * sb) * es;
        char *Ob = (char *)out + (size_t)(b * M * N) * es;
        char *Rb = res ? (char *)res + (size_t)(b * M * N) * es : NULL;
        for (int64_t jc = j0; jc < j1; jc += NC) {
            const int64_t nc = opc__min64(NC, j1 - jc);
            const int64_t npan = opc__cdiv(nc, NR);
            for (int64_t pc = 0; pc < K; pc += kcb) {
                const int64_t kc = opc__min64(kcb, K - pc);
                const int first = pc == 0, last = pc + kc >= K;
                const float *bpc = fb ? fb + pc * opc__cdiv(N, NR) * NR + jc * kc : bp;
                if (!fb && tb)
                    for (int64_t pj = 0; pj < npan; pj++)
                        opc__packB_s(Bb, dt, tb, N, K, pc, kc, jc, nc, pj, bp);
                else if (!fb)
                    for (int64_t pj = 0; pj < npan; pj += OPC_S_PACKB_GROUP)
                        opc__packB_grp_s(Bb, dt, N, pc, kc, jc, nc, pj,
                                         opc__min64(npan, pj + OPC_S_PACKB_GROUP), bp);
                for (int64_t ic = i0; ic < i1; ic += mcb) {
                    const int64_t mc = opc__min64(mcb, i1 - ic);
                    const float *apc = fa ? fa + pc * opc__cdiv(M, MR) * MR + ic * kc : ap;
                    if (!fa) opc__packA_s(Ab, dt, ta, M, K, ic, mc, pc, kc, ap);
                    for (int64_t pj = 0; pj < npan; pj++) {
                        const int64_t j = jc + pj * NR;
                        const int nr = (int)opc__min64(NR, j1 - j);
                        for (int64_t ir = 0; ir < mc; ir += MR) {
                            const int mr = (int)opc__min64(MR, mc - ir);
                            const int64_t i = ic + ir;
                            float *acc;
                            int64_t ldacc;
                            if (dt == OPC_DT_F32) { acc = (float *)Ob + i * N + j; ldacc = N; }
                            else if (sc) { acc = sc + (i - i0) * NC + (j - jc); ldacc = NC; }
                            else { acc = NULL; ldacc = 0; }
#ifdef OPC_GEMM_UKR_DIRECT
                            if (dt == OPC_DT_F32 && mr == MR && nr == NR && !Rb &&
                                (act == 0 || act == 1 || act == OPC_GEMM_RELU6)) {
                                opc__ukr_s_direct(kc, apc + ir * kc, bpc + pj * NR * kc, (float *)Ob + i * N + j, N,
                                                  first, last && bf ? bf + j : NULL, last && rb ? rb + i : NULL,
                                                  last ? act : 0);
                                continue;
                            }
#endif
#ifdef OPC_GEMM_UKR_ROWS
                            if (mr <= 8 && nr > 16)
                                opc__ukr_s_rows(kc, apc + ir * kc, bpc + pj * NR * kc, ct,
                                                acc ? (const char *)acc : Ob + (size_t)(i * N + j) * es,
                                                acc ? ldacc * 4 : N * (int64_t)es, mr);
                            else
#endif
#ifdef OPC_GEMM_UKR_HALF
                            if (nr <= 16)
                                opc__ukr_s_half(kc, apc + ir * kc, bpc + pj * NR * kc, ct);
                            else
#endif
#ifdef OPC_GEMM_UKR_HALF_PLUS
                            if (nr <= 16 + OPC_S_EXTRA)
                                opc__ukr_s_half_plus(kc, apc + ir * kc, bpc + pj * NR * kc, ct, nr - 16);
                            else
#endif
                            if (acc && !(last && first))
                                opc__ukr_s(kc, apc + ir * kc, bpc + pj * NR * kc, ct,
                                           (const char *)acc, ldacc * 4, mr);
                            else
                                opc__ukr_s(kc, apc + ir * kc, bpc + pj * NR * kc, ct,
                                           Ob + (size_t)(i * N + j) * es, N * (int64_t)es, mr);
                            opc__store_rows_s(ct, mr, nr, acc, ldacc, first, last,
                                         bf ? bf + j : NULL, rb ? rb + i : NULL, act, dt,
                                         Ob + (size_t)(i * N + j) * es,
                                         Rb ? Rb + (size_t)(i * N + j) * es : NULL, N);
                        }
                    }
                    /* the mc x nc block is final and in L2: its epilogue now, along whole rows
                       (the other buffers it reads stream row by row; a block of NR columns would
                       start a new page every row) */
                    if (ep && last) ep(ep_ctx, b * M + ic, b * M + ic + mc, jc, jc + nc);
                }
            }
        }
    }
    opc__buf_put(bp); opc__buf_put(ap); opc__buf_put(sc);
}

#include "opc_gemm_fewrows.h"
/* bf16 on AVX512-BF16's vdpbf16ps where the CPU has it, picked at run time (opc__bf16dp_on):
   2x the f32 kernel's multiply-adds per instruction, from half the packed bytes */
#include "opc_gemm_bf16dp.h"

/* A row bias (OPC_GEMM_ROW_BIAS) on a path whose store has none (few rows): the bias and act
   applied to each finished block, then the caller's epilogue, if any. */
typedef struct {
    const float *rb;
    int act;
    int64_t M, N;
    float *out;
    opc_gemm_epilogue ep;
    void *ep_ctx;
} opc__row_bias_ep;

static void opc__row_bias_then_ep(void *ctx, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const opc__row_bias_ep *e = (const opc__row_bias_ep *)ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *row = e->out + r * e->N + c0;
        const float b = e->rb[r % e->M];
        for (int64_t j = 0; j < c1 - c0; j++) row[j] = opc__act_f32(row[j] + b, e->act);
    }
    if (e->ep) e->ep(e->ep_ctx, r0, r1, c0, c1);
}

static OPC_UNUSED void opc__gemm_s(int dt, int64_t batch, int64_t M, int64_t N, int64_t K,
                        const void *A, int64_t sa, int ta, const void *B, int64_t sb, int tb,
                        const void *bias, int act, void *out, void *res,
                        opc_gemm_epilogue ep, void *ep_ctx) {
    const int MR = OPC_S_MR, NR = OPC_S_NR;
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if ((act & OPC_GEMM_ROW_BIAS) && K > 0 && !ta && M <= OPC_FR_MAX_M) {
        opc__row_bias_ep rbe = {(const float *)bias, act & ~OPC_GEMM_ROW_BIAS, M, N, (float *)out, ep, ep_ctx};
        opc__gemm_s(dt, batch, M, N, K, A, sa, ta, B, sb, tb, NULL, 0, out, res, opc__row_bias_then_ep, &rbe);
        return;
    }
    if (K <= 0) {
        opc__gemm_naive_s(dt, batch, M, N, 0, A, sa, ta, B, sb, tb, bias, act, out, res, ep, ep_ctx);
        return;
    }
    const double work = (double)batch * (double)M * (double)N * (double)K;
    int nt = 1;
    (void)work; (void)MR; (void)NR;
#ifdef _OPENMP
    if (work > (double)opc_par_min((long long)OPC_GEMM_PAR_MIN)) nt = opc_num_threads();
    if (nt < 1) nt = 1;
#endif
    /* bf: the bias in f32, read only: an f32 bias as it is (no malloc and copy per call: a batch-1
       LSTM step's input projection is its GEMM's bias, 1% of the step), else a copy (bf_own) */
    float *bf = NULL, *bf_own = NULL;
    if (bias && dt == OPC_DT_F32) bf = (float *)(uintptr_t)bias;
    else if (bias) {
        bf = bf_own = (float *)opc__amalloc((size_t)N * sizeof(float));
        if (!bf) {
            opc__gemm_naive_s(dt, batch, M, N, K, A, sa, ta, B, sb, tb, bias, act, out, res, ep, ep_ctx);
            return;
        }
        for (int64_t j = 0; j < N; j++) bf[j] = opc__ld_s(bias, j, dt);
    }
    if (dt == OPC_DT_F32 && !ta && M <= OPC_FR_MAX_M) {   /* few rows: B in place, unpacked */
        opc__gemm_fewrows_s(batch, M, N, K, (const float *)A, sa, (const float *)B, sb, tb, bf, act,
                            (float *)out, (float *)res, nt, ep, ep_ctx);
        opc__afree(bf_own);
        return;
    }
    /* the part of the output one thread computes: the f32 kernel's, or bf16's on vdpbf16ps */
    void (*part_fn)(int, int64_t, int64_t, int64_t, int64_t, int64_t, const void *, int64_t, int,
                    const void *, int64_t, int, float *, int, void *, void *, int64_t, int64_t, int64_t,
                    int64_t, opc_gemm_epilogue, void *) = opc__gemm_s_part;
#ifdef OPC_GEMM_BF16DP
    if (dt == OPC_DT_BF16 && opc__bf16dp_on()) part_fn = opc__gemm_bf16dp_part;
#endif
    /* How the output is split between threads: whole matrices, NR-column
       panels or MR-row panels, balanced; nt reduced when there is too little. */
    const int64_t npm = opc__cdiv(M, MR), npn = opc__cdiv(N, NR);
    int mode = 0;                  /* 0 batch, 1 columns, 2 rows */
    if (nt > 1) {
        if (batch >= 4 * (int64_t)nt || (batch >= nt && batch % nt == 0)) mode = 0;
        else if (npn >= nt && (M <= N || npm < nt)) mode = 1;
        else if (npm >= nt) mode = 2;
        else if (npn >= nt) mode = 1;
        else if (npm > 1 || npn > 1) { mode = npm >= npn ? 2 : 1; nt = (int)(npm >= npn ? npm : npn); }
        else if (batch > 1) { mode = 0; if (batch < nt) nt = (int)batch; }
        else nt = 1;
        if (mode == 0 && batch < nt) nt = (int)batch;
    }
    /* parts: the split's units cut into OPC_PAR_CHUNKS pieces per thread, each at least
       OPC_GEMM_PART_MIN_* panels (every piece packs the operand not split again), claimed
       one by one, so on a busy machine a descheduled thread's pieces go to the others. */
    const int64_t units = mode == 0 ? batch : mode == 1 ? npn : npm;
    int64_t parts = 1;
    if (nt > 1) {
        const int64_t most = mode == 0 ? units : units / (mode == 1 ? OPC_GEMM_PART_MIN_COLS : OPC_GEMM_PART_MIN_ROWS);
        parts = opc__min64(units, (int64_t)nt * OPC_PAR_CHUNKS);
        if (parts > most) parts = most;
        if (parts < nt) parts = opc__min64(units, nt);
    }
    if (parts == 1) {  /* no parallel region: even an `if (0)` one runs libgomp's dynamic loop */
        part_fn(dt, 0, batch, M, N, K, A, sa, ta, B, sb, tb, bf, act, out, res, 0, M, 0, N, ep, ep_ctx);
        opc__afree(bf_own);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int64_t part = 0; part < parts; part++) {
        int64_t b0 = 0, b1 = batch, i0 = 0, i1 = M, j0 = 0, j1 = N;
        if (parts > 1) {
            if (mode == 0) { b0 = batch * part / parts; b1 = batch * (part + 1) / parts; }
            else if (mode == 1) {
                j0 = opc__min64(N, npn * part / parts * NR); j1 = opc__min64(N, npn * (part + 1) / parts * NR);
            } else {
                i0 = opc__min64(M, npm * part / parts * MR); i1 = opc__min64(M, npm * (part + 1) / parts * MR);
            }
        }
        part_fn(dt, b0, b1, M, N, K, A, sa, ta, B, sb, tb, bf, act, out, res, i0, i1, j0, j1, ep, ep_ctx);
    }
    opc__afree(bf_own);
}

static OPC_UNUSED void opc__gemm_d(int64_t batch, int64_t M, int64_t N, int64_t K,
                        const double *A, int64_t sa, int ta, const double *B, int64_t sb, int tb,
                        const double *bias, int act, double *out, double *res,
                        opc_gemm_epilogue ep, void *ep_ctx) {
    const int MR = OPC_D_MR, NR = OPC_D_NR;
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (K <= 0) { opc__gemm_naive_d(batch, M, N, 0, A, sa, ta, B, sb, tb, bias, act, out, res, ep, ep_ctx); return; }
    const double work = (double)M * (double)N * (double)K;
    int nt = 1;
    (void)work;
#ifdef _OPENMP
    if (work > (double)opc_par_min((long long)OPC_GEMM_PAR_MIN)) nt = opc_num_threads();
    if (nt < 1) nt = 1;
#endif
    const int64_t KC = opc__min64(OPC_D_KC, K);
    const int64_t nkb = opc__cdiv(K, KC);
    const int64_t kcb = opc__cdiv(K, nkb);
    const int64_t NC = opc__min64(OPC_D_NC, opc__cdiv(N, NR) * NR);
    int64_t nbm = opc__cdiv(M, OPC_D_MC);
    if (nt > 1 && nbm % nt) nbm += nt - nbm % nt;
    int64_t mcb = opc__cdiv(opc__cdiv(M, nbm), MR) * MR;
    nbm = opc__cdiv(M, mcb);
    int64_t nbn = 1;
    if (nt > 1 && nbm < nt) nbn = nt;

    const size_t aslice = ((size_t)kcb * (size_t)mcb + 7u) & ~(size_t)7u;
    double *bp = (double *)opc__buf_get(OPC__BUF_B, (size_t)kcb * (size_t)NC * sizeof(double));
    double *ap = (double *)opc__buf_get(OPC__BUF_A, (size_t)nt * aslice * sizeof(double));
    if (!bp || !ap) {
        opc__buf_put(bp); opc__buf_put(ap);
        opc__gemm_naive_d(batch, M, N, K, A, sa, ta, B, sb, tb, bias, act, out, res, ep, ep_ctx);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *apt = ap + (size_t)tid * aslice;
        double ct[OPC_D_MR * OPC_D_NR] __attribute__((aligned(64)));
        for (int64_t b = 0; b < batch; b++) {
            const double *Ab = A + b * sa, *Bb = B + b * sb;
            double *Ob = out + b * M * N, *Rb = res ? res + b * M * N : NULL;
            for (int64_t jc = 0; jc < N; jc += NC) {
                const int64_t nc = opc__min64(NC, N - jc);
                const int64_t npan = opc__cdiv(nc, NR);
                for (int64_t pc = 0; pc < K; pc += kcb) {
                    const int64_t kc = opc__min64(kcb, K - pc);
                    const int first = pc == 0, last = pc + kc >= K;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
                    for (int64_t pj = 0; pj < npan; pj++)
                        opc__packB_d(Bb, tb, N, K, pc, kc, jc, nc, pj, bp);
                    const int64_t pang = opc__cdiv(npan, nbn);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
                    for (int64_t item = 0; item < nbm * nbn; item++) {
                        const int64_t ib = item / nbn, jb = item % nbn;
                        const int64_t ic = ib * mcb, mc = opc__min64(mcb, M - ic);
                        const int64_t pj0 = jb * pang, pj1 = opc__min64(npan, pj0 + pang);
                        if (pj0 >= pj1) continue;
                        opc__packA_d(Ab, ta, M, K, ic, mc, pc, kc, apt);
                        for (int64_t pj = pj0; pj < pj1; pj++) {
                            const int64_t j = jc + pj * NR;
                            const int nr = (int)opc__min64(NR, N - j);
                            for (int64_t ir = 0; ir < mc; ir += MR) {
                                const int mr = (int)opc__min64(MR, mc - ir);
                                const int64_t i = ic + ir;
                                opc__ukr_d(kc, apt + ir * kc, bp + pj * NR * kc, ct,
                                           (const char *)(Ob + i * N + j), N * 8, mr);
                                opc__store_d(ct, mr, nr, Ob + i * N + j, N, first, last,
                                             bias ? bias + j : NULL, act,
                                             Ob + i * N + j, Rb ? Rb + i * N + j : NULL, N);
                            }
                        }
                        if (ep && last)
                            ep(ep_ctx, b * M + ic, b * M + ic + mc, jc + pj0 * NR, opc__min64(jc + nc, jc + pj1 * NR));
                    }
                }
            }
        }
    }
    opc__buf_put(bp); opc__buf_put(ap);
}

/* ------------------------------------------------------------------------ */
/* Public API.                                                               */
/* ------------------------------------------------------------------------ */
/* opc_gemm_SUFFIX without an epilogue, opc_gemm_ep_SUFFIX with one. */
#define OPC__GEMM_PUBLIC(NAME, T, CALL, EP)                                                    \
    static OPC_UNUSED void NAME(int64_t batch, int64_t M, int64_t N, int64_t K,               \
                                const T *A, int64_t a_batch_stride, int trans_a,              \
                                const T *B, int64_t b_batch_stride, int trans_b,              \
                                const T *bias, int act, T *out, T *reserve EP) {              \
        CALL;                                                                                 \
    }
#define OPC__GEMM_EP_PARAMS , opc_gemm_epilogue ep, void *ep_ctx
#define OPC__GEMM_ARGS A, a_batch_stride, trans_a, B, b_batch_stride, trans_b, bias, act, out, reserve
OPC__GEMM_PUBLIC(opc_gemm_f32, float, opc__gemm_s(OPC_DT_F32, batch, M, N, K, OPC__GEMM_ARGS, NULL, NULL), )
OPC__GEMM_PUBLIC(opc_gemm_f16, uint16_t, opc__gemm_s(OPC_DT_F16, batch, M, N, K, OPC__GEMM_ARGS, NULL, NULL), )
OPC__GEMM_PUBLIC(opc_gemm_bf16, uint16_t, opc__gemm_s(OPC_DT_BF16, batch, M, N, K, OPC__GEMM_ARGS, NULL, NULL), )
OPC__GEMM_PUBLIC(opc_gemm_f64, double, opc__gemm_d(batch, M, N, K, OPC__GEMM_ARGS, NULL, NULL), )
OPC__GEMM_PUBLIC(opc_gemm_ep_f32, float, opc__gemm_s(OPC_DT_F32, batch, M, N, K, OPC__GEMM_ARGS, ep, ep_ctx),
                 OPC__GEMM_EP_PARAMS)
OPC__GEMM_PUBLIC(opc_gemm_ep_f16, uint16_t, opc__gemm_s(OPC_DT_F16, batch, M, N, K, OPC__GEMM_ARGS, ep, ep_ctx),
                 OPC__GEMM_EP_PARAMS)
OPC__GEMM_PUBLIC(opc_gemm_ep_bf16, uint16_t, opc__gemm_s(OPC_DT_BF16, batch, M, N, K, OPC__GEMM_ARGS, ep, ep_ctx),
                 OPC__GEMM_EP_PARAMS)
OPC__GEMM_PUBLIC(opc_gemm_ep_f64, double, opc__gemm_d(batch, M, N, K, OPC__GEMM_ARGS, ep, ep_ctx),
                 OPC__GEMM_EP_PARAMS)

#endif /* OPC_GEMM_H */
