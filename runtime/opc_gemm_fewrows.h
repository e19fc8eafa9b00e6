/* opc_gemm_fewrows.h -- f32 GEMM for a few rows (M <= OPC_FR_MAX_M): B read in place.
 *
 * With few rows (a recurrent step's batch, one token of a decoder, a batch-1 linear
 * layer) each element of B is used only M times, so packing B -- a full pass that
 * reads and writes all of it, and a transpose when trans_b -- costs more than the
 * product itself: a 4x256 @ (1024x256)^T step of an LSTM spent 3/4 of its time
 * packing. Here B is streamed once per group of up to 4 rows, straight from the
 * caller's layout, in tiles of NR columns that the threads share:
 *   trans_b = 0 (B is KxN): two vectors of a row of B loaded per k and multiplied by
 *     each row's broadcast A[i][k];
 *   trans_b = 1 (B is NxK): dot products along K, two columns of B at a time against
 *     each row of A, reduced across lanes at the end (one row: a vector's width of
 *     columns at a time, their lanes folded together, opc__fr_sums).
 * M = 4, N = 1024, K = 256 at 1 thread (AVX-512): 27-30 us, against 66-69 us packing B.
 * A frozen B (opc_frozen.h: a loaded model's weight) is the exception: packed once for all
 * calls, its panels are read as contiguous vectors, with no lane sums (opc__fr_rows_packed).
 * Only the columns [0, N) and rows [0, M) are read or written; edge tiles take the
 * same code with their true sizes. Results go through opc__store_s (bias, reserve,
 * activation), as the packed path's tiles do. GCC vector extensions: the same source
 * is AVX-512, AVX2 or SSE code, whatever the build's -march gives. C only, included by
 * opc_gemm.h after its store routine. */
#ifndef OPC_GEMM_FEWROWS_H
#define OPC_GEMM_FEWROWS_H

#define OPC_FR_MAX_M 8               /* above (12 measured even): packing B pays for itself */
#if defined(__AVX__)
#define OPC_FR_VL (OPC_S_NR / 2)     /* floats per vector: 16 with AVX-512, 8 with AVX */
#else
#define OPC_FR_VL 4                  /* SSE's 16 bytes: wider vectors would change the ABI */
#endif
typedef float opc_fr_v __attribute__((vector_size(OPC_FR_VL * 4)));  /* loads: memcpy, any alignment */
/* Keep vector v in a register (x86 only): without it gcc folds a vector that several FMAs use into
   each one as a memory operand, a load per FMA. */
#if defined(__x86_64__) && defined(__AVX__)
#define OPC_FR_KEEP(v) __asm__("" : "+v"(v))
#else
#define OPC_FR_KEEP(v) ((void)0)
#endif

OPC_ALWAYS_INLINE opc_fr_v opc__fr_load(const float *p) { opc_fr_v v; __builtin_memcpy(&v, p, sizeof v); return v; }
OPC_ALWAYS_INLINE opc_fr_v opc__fr_splat(float x) { opc_fr_v v = {0}; return v + x; }
OPC_ALWAYS_INLINE float opc__fr_sum(opc_fr_v v) {
    float s = 0.0f;
    for (int l = 0; l < OPC_FR_VL; l++) s += v[l];
    return s;
}

/* The lane sums of OPC_FR_VL vectors at once: out[l] = sum of s[l]'s lanes. Each level adds the two
   halves of every block of a pair of vectors, keeping one vector's half-block sums in each half
   (__builtin_shuffle of two vectors: one vpermt2ps with AVX-512): log2(VL) levels of VL / 2^level
   shuffles and adds, where summing each vector on its own takes VL - 1 dependent adds apiece. The
   pairs enter in bit-reversed order, so that lane l of the last level holds vector l's sum. */
typedef int opc_fr_m __attribute__((vector_size(OPC_FR_VL * 4)));
OPC_ALWAYS_INLINE opc_fr_v opc__fr_fold(opc_fr_v a, opc_fr_v b, opc_fr_m p, opc_fr_m q) {
    return __builtin_shuffle(a, b, p) + __builtin_shuffle(a, b, q);
}
#if OPC_FR_VL == 16
OPC_ALWAYS_INLINE opc_fr_v opc__fr_sums(const opc_fr_v *s) {
    const opc_fr_m p8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                   q8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                   p4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                   q4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                   p2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                   q2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                   p1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                   q1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    static const int order[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    opc_fr_v t[8];
    for (int i = 0; i < 8; i++) t[i] = opc__fr_fold(s[order[2 * i]], s[order[2 * i + 1]], p8, q8);
    for (int i = 0; i < 4; i++) t[i] = opc__fr_fold(t[2 * i], t[2 * i + 1], p4, q4);
    for (int i = 0; i < 2; i++) t[i] = opc__fr_fold(t[2 * i], t[2 * i + 1], p2, q2);
    return opc__fr_fold(t[0], t[1], p1, q1);
}
#elif OPC_FR_VL == 8
OPC_ALWAYS_INLINE opc_fr_v opc__fr_sums(const opc_fr_v *s) {
    const opc_fr_m p4 = {0, 1, 2, 3, 8, 9, 10, 11}, q4 = {4, 5, 6, 7, 12, 13, 14, 15},
                   p2 = {0, 1, 8, 9, 4, 5, 12, 13}, q2 = {2, 3, 10, 11, 6, 7, 14, 15},
                   p1 = {0, 8, 2, 10, 4, 12, 6, 14}, q1 = {1, 9, 3, 11, 5, 13, 7, 15};
    static const int order[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    opc_fr_v t[4];
    for (int i = 0; i < 4; i++) t[i] = opc__fr_fold(s[order[2 * i]], s[order[2 * i + 1]], p4, q4);
    for (int i = 0; i < 2; i++) t[i] = opc__fr_fold(t[2 * i], t[2 * i + 1], p2, q2);
    return opc__fr_fold(t[0], t[1], p1, q1);
}
#else
OPC_ALWAYS_INLINE opc_fr_v opc__fr_sums(const opc_fr_v *s) {
    const opc_fr_m p2 = {0, 1, 4, 5}, q2 = {2, 3, 6, 7}, p1 = {0, 4, 2, 6}, q1 = {1, 5, 3, 7};
    return opc__fr_fold(opc__fr_fold(s[0], s[2], p2, q2), opc__fr_fold(s[1], s[3], p2, q2), p1, q1);
}
#endif

/* Rows are taken R <= 4 at a time (R a constant after inlining: the unused accumulators vanish),
   so that each element of B loaded serves R rows. */
#define OPC__FR_ROWS(X) X(0) X(1) X(2) X(3)

/* ct[r][0..nr) = a[r][0..K) @ B[0..K)[j..j+nr), r < R; a[r] = A + r * K. */
OPC_ALWAYS_INLINE void opc__fr_rows_nn(const float *OPC_RESTRICT A, int64_t K, const float *B, int64_t N,
                                       int64_t j, int nr, const int R, float *OPC_RESTRICT ct) {
    const opc_fr_v z = opc__fr_splat(0.0f);
    int c0 = 0;
    for (; c0 + 2 * OPC_FR_VL <= nr; c0 += 2 * OPC_FR_VL) {   /* two vectors of columns */
#define OPC__FR_ACC(r) opc_fr_v c##r##0 = z, c##r##1 = z;
        OPC__FR_ROWS(OPC__FR_ACC)
#undef OPC__FR_ACC
        for (int64_t k = 0; k < K; k++) {
            const float *bk = B + k * N + j + c0;
            const opc_fr_v b0 = opc__fr_load(bk), b1 = opc__fr_load(bk + OPC_FR_VL);
#define OPC__FR_FMA(r) if (R > r) { const float x = A[r * K + k]; c##r##0 += x * b0; c##r##1 += x * b1; }
            OPC__FR_ROWS(OPC__FR_FMA)
#undef OPC__FR_FMA
        }
#define OPC__FR_PUT(r) if (R > r) { __builtin_memcpy(ct + r * OPC_S_NR + c0, &c##r##0, sizeof z); \
                                    __builtin_memcpy(ct + r * OPC_S_NR + c0 + OPC_FR_VL, &c##r##1, sizeof z); }
        OPC__FR_ROWS(OPC__FR_PUT)
#undef OPC__FR_PUT
    }
    if (c0 == nr) return;
    for (int r = 0; r < R; r++) for (int c = c0; c < nr; c++) ct[r * OPC_S_NR + c] = 0.0f;
    for (int64_t k = 0; k < K; k++) {       /* the edge columns, scalar: never past N */
        const float *bk = B + k * N + j;
        for (int r = 0; r < R; r++) for (int c = c0; c < nr; c++) ct[r * OPC_S_NR + c] += A[r * K + k] * bk[c];
    }
}

/* ct[r][c] = dot(a[r][0..K), B[j+c][0..K)), c < nr, r < R: two columns of B at a time. */
OPC_ALWAYS_INLINE void opc__fr_rows_nt(const float *OPC_RESTRICT A, int64_t K, const float *B, int64_t j,
                                       int nr, const int R, float *OPC_RESTRICT ct) {
    const int64_t kv = K / OPC_FR_VL * OPC_FR_VL;
    const opc_fr_v z = opc__fr_splat(0.0f);
    int c = 0;
    if (R == 1) {  /* one row (a batch-1 step): OPC_FR_VL columns at a time, each a vector of partial
                      sums over k = l (mod OPC_FR_VL), then folded all at once (opc__fr_sums): the lane
                      by lane sums of one column at a time took half the time of a 1x128 @ 512x128 */
        for (; c + OPC_FR_VL <= nr; c += OPC_FR_VL) {
            const float *bc = B + (j + c) * K;
            opc_fr_v s[OPC_FR_VL];
            for (int l = 0; l < OPC_FR_VL; l++) s[l] = z;
            for (int64_t k = 0; k < kv; k += OPC_FR_VL) {
                const opc_fr_v x = opc__fr_load(A + k);
                for (int l = 0; l < OPC_FR_VL; l++) s[l] += x * opc__fr_load(bc + l * K + k);
            }
            opc_fr_v t = opc__fr_sums(s);
            for (int64_t k = kv; k < K; k++)
                for (int l = 0; l < OPC_FR_VL; l++) t[l] += A[k] * bc[l * K + k];
            __builtin_memcpy(ct + c, &t, sizeof t);
        }
    }
    for (; c + 2 <= nr; c += 2) {
        const float *b0 = B + (j + c) * K, *b1 = b0 + K;
#define OPC__FR_ACC(r) opc_fr_v s##r##0 = z, s##r##1 = z;
        OPC__FR_ROWS(OPC__FR_ACC)
#undef OPC__FR_ACC
        for (int64_t k = 0; k < kv; k += OPC_FR_VL) {
            const opc_fr_v y0 = opc__fr_load(b0 + k), y1 = opc__fr_load(b1 + k);
#define OPC__FR_FMA(r) if (R > r) { const opc_fr_v x = opc__fr_load(A + r * K + k); s##r##0 += x * y0; s##r##1 += x * y1; }
            OPC__FR_ROWS(OPC__FR_FMA)
#undef OPC__FR_FMA
        }
#define OPC__FR_PUT(r) if (R > r) { \
            float t0 = opc__fr_sum(s##r##0), t1 = opc__fr_sum(s##r##1); \
            for (int64_t k = kv; k < K; k++) { t0 += A[r * K + k] * b0[k]; t1 += A[r * K + k] * b1[k]; } \
            ct[r * OPC_S_NR + c] = t0; ct[r * OPC_S_NR + c + 1] = t1; }
        OPC__FR_ROWS(OPC__FR_PUT)
#undef OPC__FR_PUT
    }
    for (; c < nr; c++) {
        const float *bc = B + (j + c) * K;
        for (int r = 0; r < R; r++) {
            float t = 0.0f;
            for (int64_t k = 0; k < K; k++) t += A[r * K + k] * bc[k];
            ct[r * OPC_S_NR + c] = t;
        }
    }
}

/* ct[p][r][0..NR) = a[r][0..K) @ panel pj + p of fb, r < R <= 8, p < P (1 or 2, R * P <= 8): B
   frozen and packed whole once (opc__frozen_panels: depth blocks of kcb, each holding all npan
   panels as [kc][NR], the last one zero-padded), so every load is a contiguous vector and no lanes
   are summed. Up to 16 accumulators: 2 to 4 rows take two panels, so that each element of A loaded
   serves four vectors of B (4x1024x256 at 1 thread: 28 -> 24 us); 5 to 8 rows one panel, read
   once for all of them. A product of one row (split, R = 1) sums each vector in two chains, even
   and odd k, to hide the multiply-adds' latency. Each column's sum depends on split only, not on R
   or P: the same bits at every thread count (the threads' tiles take P = 1, R <= 4). */
#define OPC_FR_NV (OPC_S_NR / OPC_FR_VL)   /* vectors per panel row */
OPC_ALWAYS_INLINE void opc__fr_rows_packed(const float *OPC_RESTRICT A, int64_t K, const float *fb, int64_t npan,
                                           int64_t kcb, int64_t pj, const int R, const int P, const int split,
                                           float *OPC_RESTRICT ct) {
    opc_fr_v c[8][2 * OPC_FR_NV], d[2 * OPC_FR_NV];
    for (int v = 0; v < P * OPC_FR_NV; v++) {
        d[v] = opc__fr_splat(0.0f);
        for (int r = 0; r < R; r++) c[r][v] = d[v];
    }
    for (int64_t pc = 0; pc < K; pc += kcb) {
        const int64_t kc = opc__min64(kcb, K - pc);
        const float *p = fb + pc * npan * OPC_S_NR + pj * kc * OPC_S_NR, *a = A + pc;
#define OPC__FR_PANEL(k, v) opc__fr_load(p + (v) / OPC_FR_NV * kc * OPC_S_NR + (k) * OPC_S_NR + (v) % OPC_FR_NV * OPC_FR_VL)
        int64_t k = 0;
        if (split)
            for (; k + 2 <= kc; k += 2)
                for (int v = 0; v < P * OPC_FR_NV; v++) {
                    c[0][v] += a[k] * OPC__FR_PANEL(k, v);
                    d[v] += a[k + 1] * OPC__FR_PANEL(k + 1, v);
                }
        for (; k < kc; k++)
            for (int v = 0; v < P * OPC_FR_NV; v++) {
                opc_fr_v b = OPC__FR_PANEL(k, v);
                OPC_FR_KEEP(b); /* loaded once for the R rows: gcc folded it into each row's FMA */
                for (int r = 0; r < R; r++) c[r][v] += a[r * K + k] * b;
            }
#undef OPC__FR_PANEL
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < P * OPC_FR_NV; v++) {
            const opc_fr_v t = r == 0 ? c[0][v] + d[v] : c[r][v];
            __builtin_memcpy(ct + v / OPC_FR_NV * 8 * OPC_S_NR + r * OPC_S_NR + v % OPC_FR_NV * OPC_FR_VL, &t, sizeof t);
        }
}

/* out[b] = act(A[b] @ B + bias) from B's frozen panels (fb, kcb deep), M <= 8, one thread. Every
   other call walks the panels backwards: a recurrent step's product then starts on the panels the
   last one ended with, still in L1 (1x128 @ (512x128)^T: -1.5%); each column's sum is the same
   either way. */
static OPC_UNUSED void opc__fr_packed_rows(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A,
                                           int64_t sa, const float *fb, int64_t kcb, const float *bf, int act,
                                           float *out, float *res, opc_gemm_epilogue ep, void *ep_ctx) {
    float ct[2 * 8 * OPC_S_NR] __attribute__((aligned(64)));
    const int64_t npan = opc__cdiv(N, OPC_S_NR);
    const int group = M >= 2 && M <= 4 ? 2 : 1, rows = (int)M;   /* panels at once (R * P <= 8) */
    const int64_t steps = opc__cdiv(npan, group);
    static __thread int flip;
    flip ^= 1;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t q = 0; q < steps; q++) {
            const int64_t pj = group * (flip ? steps - 1 - q : q), j = pj * OPC_S_NR;
            const int two = group == 2 && pj + 1 < npan, width = (int)opc__min64((two ? 2 : 1) * OPC_S_NR, N - j);
            const float *Ab = A + b * sa;
#define OPC__FR_CASE(R) case R: { \
                if (two) opc__fr_rows_packed(Ab, K, fb, npan, kcb, pj, (R) < 4 ? (R) : 4, 2, M == 1, ct); \
                else opc__fr_rows_packed(Ab, K, fb, npan, kcb, pj, R, 1, M == 1, ct); \
                break; }
            switch (rows) {
                OPC__FR_CASE(1) OPC__FR_CASE(2) OPC__FR_CASE(3) OPC__FR_CASE(4)
                OPC__FR_CASE(5) OPC__FR_CASE(6) OPC__FR_CASE(7) default: OPC__FR_CASE(8)
            }
#undef OPC__FR_CASE
            for (int p = 0; p * OPC_S_NR < width; p++) {
                const int64_t jp = j + p * OPC_S_NR, o = b * M * N + jp;
                opc__store_s(ct + p * 8 * OPC_S_NR, rows, (int)opc__min64(OPC_S_NR, N - jp), NULL, 0, 1, 1,
                             bf ? bf + jp : NULL, act, OPC_DT_F32, out + o, res ? res + o : NULL, N);
            }
            if (ep) ep(ep_ctx, b * M, (b + 1) * M, j, j + width);
        }
}

/* The tile of rows [0, M) and columns [j, j+nr) of one matrix (j a multiple of OPC_S_NR), stored
   with the epilogue; from fb, B's frozen panels (kcb deep), where it is not NULL. */
static OPC_UNUSED void opc__fr_tile(const float *A, const float *B, int tb, int64_t M, int64_t N, int64_t K,
                                    int64_t j, int nr, const float *bf, int act, float *out, float *res,
                                    const float *fb, int64_t kcb) {
    float ct[8 * OPC_S_NR] __attribute__((aligned(64)));
    const int64_t npan = opc__cdiv(N, OPC_S_NR);
    for (int64_t i0 = 0; i0 < M; i0 += 4) {
        const int mr = (int)opc__min64(4, M - i0);
        const float *Ai = A + i0 * K;
#define OPC__FR_CASE(R) case R: { \
            if (fb) opc__fr_rows_packed(Ai, K, fb, npan, kcb, j / OPC_S_NR, R, 1, M == 1, ct); \
            else if (tb) opc__fr_rows_nt(Ai, K, B, j, nr, R, ct); \
            else opc__fr_rows_nn(Ai, K, B, N, j, nr, R, ct); \
            break; }
        switch (mr) { OPC__FR_CASE(1) OPC__FR_CASE(2) OPC__FR_CASE(3) default: OPC__FR_CASE(4) }
#undef OPC__FR_CASE
        opc__store_s(ct, mr, nr, NULL, 0, 1, 1, bf ? bf + j : NULL, act, OPC_DT_F32,
                     out + i0 * N + j, res ? res + i0 * N + j : NULL, N);
    }
}

/* y[0..N) = a[0..K) @ B (K x N, trans_b = 0) for one row: B read row by row, four rows per pass over y
   (kept in cache), contiguously, where the tiles walk B's columns with a stride of N. Each y[j] is the
   same sum in the same order as the tiles' (k ascending, one fused multiply-add each). */
static OPC_UNUSED void opc__fr_row_nn(const float *OPC_RESTRICT a, int64_t K, const float *B, int64_t N,
                                      float *OPC_RESTRICT y) {
    for (int64_t j = 0; j < N; j++) y[j] = 0.0f;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        const float a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
        const float *b0 = B + k * N, *b1 = b0 + N, *b2 = b1 + N, *b3 = b2 + N;
        int64_t j = 0;
        for (; j + OPC_FR_VL <= N; j += OPC_FR_VL) {
            opc_fr_v v = opc__fr_load(y + j);
            v += a0 * opc__fr_load(b0 + j);
            v += a1 * opc__fr_load(b1 + j);
            v += a2 * opc__fr_load(b2 + j);
            v += a3 * opc__fr_load(b3 + j);
            __builtin_memcpy(y + j, &v, sizeof v);
        }
        for (; j < N; j++) {
            float t = y[j];
            t += a0 * b0[j];
            t += a1 * b1[j];
            t += a2 * b2[j];
            t += a3 * b3[j];
            y[j] = t;
        }
    }
    for (; k < K; k++) {
        const float ak = a[k], *bk = B + k * N;
        for (int64_t j = 0; j < N; j++) y[j] += ak * bk[j];
    }
}

/* out[b] = act(A[b] @ op(B[b]) + bias) for f32, trans_a = 0, M <= OPC_FR_MAX_M; nt threads share
   the column tiles. bf: the bias or NULL; ep: the block epilogue (opc_gemm.h) or NULL. */
static OPC_UNUSED void opc__gemm_fewrows_s(int64_t batch, int64_t M, int64_t N, int64_t K,
                                           const float *A, int64_t sa, const float *B, int64_t sb, int tb,
                                           const float *bf, int act, float *out, float *res, int nt,
                                           opc_gemm_epilogue ep, void *ep_ctx) {
    const int64_t ntile = opc__cdiv(N, OPC_S_NR), items = batch * ntile, kcb = opc__kc_block(K);
    /* a frozen B (a loaded model's weight) packed once: a batch-1 LSTM step's 1x128 @ (512x128)^T
       went from 3.0 to 2.5 us against R read in place (bench/results/2026-12-06-lstm-packed.md) */
    const float *fb = opc__frozen_panels(1, B, OPC_DT_F32, tb, N, K, kcb, sb, batch);
#define OPC__FR_ITEM(item) do { \
        const int64_t b = (item) / ntile, j = (item) % ntile * OPC_S_NR; \
        const int nr = (int)opc__min64(OPC_S_NR, N - j); \
        opc__fr_tile(A + b * sa, B + b * sb, tb, M, N, K, j, nr, bf, act, \
                     out + b * M * N, res ? res + b * M * N : NULL, fb, kcb); \
        if (ep) ep(ep_ctx, b * M, (b + 1) * M, j, j + nr);   /* the tile is final: its epilogue */ \
    } while (0)
    if (nt <= 1) {  /* a plain loop: even an `if (0)` parallel region claims each tile through
                       libgomp's dynamic schedule, which cost an LSTM step's 1x128 @ 512x128 a third */
        if (fb) {
            opc__fr_packed_rows(batch, M, N, K, A, sa, fb, kcb, bf, act, out, res, ep, ep_ctx);
            return;
        }
        /* the row padded to whole tiles: opc__store_s reads a tile's full width (the pad stays 0) */
        const int64_t padded = ntile * OPC_S_NR;
        float *y = M == 1 && !tb ? (float *)opc__buf_get(OPC__BUF_C, (size_t)padded * sizeof(float)) : NULL;
        if (!y) {
            for (int64_t item = 0; item < items; item++) OPC__FR_ITEM(item);
            return;
        }
        for (int64_t j = N; j < padded; j++) y[j] = 0.0f;
        for (int64_t b = 0; b < batch; b++) {  /* one row, B as it is: row by row (1x128 @ 128x512: 8.3 -> 2.5 us) */
            opc__fr_row_nn(A + b * sa, K, B + b * sb, N, y);
            for (int64_t j = 0; j < N; j += OPC_S_NR) {
                const int nr = (int)opc__min64(OPC_S_NR, N - j);
                opc__store_s(y + j, 1, nr, NULL, 0, 1, 1, bf ? bf + j : NULL, act, OPC_DT_F32,
                             out + b * N + j, res ? res + b * N + j : NULL, N);
                if (ep) ep(ep_ctx, b, b + 1, j, j + nr);
            }
        }
        opc__buf_put(y);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)  /* tiles claimed one by one: see opc__gemm_s */
#endif
    for (int64_t item = 0; item < items; item++) OPC__FR_ITEM(item);
#undef OPC__FR_ITEM
}

#endif /* OPC_GEMM_FEWROWS_H */
