/* opc_nn_conv_cw.h -- opc's fast f32 forward convolution for the convs opc_nn_conv_fast.h's
 * stride-1 kernel does not take well: strided ones (ResNet's 7x7 stride-2 stem, its 3x3 stride-2
 * convs) and those on small images (7x7, 14x14 with hundreds of channels), whose positions are
 * too few for tiles of NR positions. Included by opc_nn.h after opc_nn_conv_fast.h (its vectors,
 * scratch buffers, plan, packing and stores are shared).
 *
 * Implicit GEMM the other way round ("channel vectors", as NHWC direct convolutions):
 *     y[oc, o] = sum over (cc, k) of w[oc, cc, k] * xp[base(o) + off[cc, k]]
 * with xp the padded copy of the input and off as in opc_nn_conv_fast.h; the micro-kernel
 * holds MR consecutive outputs of one output row (MR = 14, 7, 8, 4 or 2: whichever wastes
 * least of the row) times NW = CW_NV vectors of output channels, and per tap broadcasts MR
 * input values -- xp[base + m * s2 + off[k]], the row's stride s2 (1 or 2) a constant of the
 * kernel -- against NV vectors of packed weights (panels [K][NW]). No position is wasted on
 * padding columns and strided convs need no gather: each broadcast reads its own element.
 * The row's last tile may run past the row's end: xp's rows are long enough (P2 covers every
 * tile), those outputs are dropped by the store. K is split in chunks of CW_KC taps, a chunk's
 * panel staying in L1 while a group of CW_TG tiles passes over it.
 * Every read is inside xp or the panels, every write inside y; -1 when scratch cannot be had.
 * Each output is one sum in a fixed order: results do not depend on the thread count.
 */
#ifndef OPC_NN_CONV_CW_H
#define OPC_NN_CONV_CW_H

#if OPC_CF_V == 16
#define OPC_CW_NV 2   /* vectors of output channels per micro-tile: 32 channels */
#define OPC_CW_MRA 14 /* outputs per micro-tile: 14 x 2 accumulators (+ 2 weights + 1 broadcast of 32 zmm) */
#define OPC_CW_MRB 7
#else
#define OPC_CW_NV 1 /* 8 channels: 14 + 1 + 1 of 16 ymm */
#define OPC_CW_MRA 14
#define OPC_CW_MRB 7
#endif
#define OPC_CW_MRC 8 /* rows of 8, 16, 32 or 64 outputs (a small image's), which 14 and 7 cover with waste */
#define OPC_CW_MRD 4 /* rows of 4 (a 4x4 image's): 8 accumulators still hide the FMA latency */
#define OPC_CW_MRE 2 /* rows of 2 (a 2x2 image's, its weights streamed once: the layer is memory-bound) */
#define OPC_CW_NW (OPC_CW_NV * OPC_CF_V)
#ifndef OPC_CW_KC
#define OPC_CW_KC 128 /* taps per chunk: a chunk's panel is KC * NW floats (16 KiB with AVX-512) */
#endif
#ifndef OPC_CW_TG
#define OPC_CW_TG 8 /* tiles per group sharing a chunk's panel */
#endif

/* out[MR][NW] (+)= sum over k < K of xs[pos(m) + off[k]] times the panel row a[k][NW], the MR
 * outputs in rows of W: pos(m) = (m / W) * rstep + (m % W) * S (W = MR: one row, rstep unused). */
#define OPC_CW_MICRO_RW(MR, W, S)                                                                                  \
    __attribute__((noinline)) static void opc_cw_micro_##MR##_##W##_##S(int64_t K, const float *a, const float *xs, \
                                                                        const int64_t *off, float *out, int acc,    \
                                                                        int64_t rstep) {                            \
        opc_cf_vec c[MR][OPC_CW_NV];                                                                               \
        for (int m = 0; m < MR; m++)                                                                               \
            for (int j = 0; j < OPC_CW_NV; j++)                                                                    \
                c[m][j] = acc ? (opc_cf_vec) * (const opc_cf_uvec *)(out + m * OPC_CW_NW + j * OPC_CF_V)                 \
                              : (opc_cf_vec){0};                                                                   \
        for (int64_t k = 0; k < K; k++) {                                                                          \
            const float *s = xs + off[k];                                                                          \
            opc_cf_vec b[OPC_CW_NV];                                                                               \
            _Pragma("GCC unroll 4") for (int j = 0; j < OPC_CW_NV; j++) b[j] =                                     \
                *(const opc_cf_uvec *)(a + k * OPC_CW_NW + j * OPC_CF_V);                                          \
            _Pragma("GCC unroll 4") for (int j = 0; j < OPC_CW_NV; j++) OPC_CF_KEEP(b[j]);                         \
            _Pragma("GCC unroll 16") for (int m = 0; m < MR; m++) {                                                \
                const float *sm = m / W ? s + (m / W) * rstep : s;                                                 \
                const opc_cf_vec xm = sm[(m % W) * S] - (opc_cf_vec){0}; /* a splat (x - 0 is exact) */            \
                _Pragma("GCC unroll 4") for (int j = 0; j < OPC_CW_NV; j++) c[m][j] += xm * b[j];                  \
            }                                                                                                      \
        }                                                                                                          \
        for (int m = 0; m < MR; m++)                                                                               \
            for (int j = 0; j < OPC_CW_NV; j++) *(opc_cf_uvec *)(out + m * OPC_CW_NW + j * OPC_CF_V) = c[m][j];      \
    }
#define OPC_CW_MICRO(MR, S) OPC_CW_MICRO_RW(MR, MR, S)
OPC_CW_MICRO(14, 1)
OPC_CW_MICRO(14, 2)
OPC_CW_MICRO(7, 1)
OPC_CW_MICRO(7, 2)
OPC_CW_MICRO(8, 1)
OPC_CW_MICRO(8, 2)
OPC_CW_MICRO(4, 1)
OPC_CW_MICRO(4, 2)
OPC_CW_MICRO(2, 1)
OPC_CW_MICRO(2, 2)
/* two rows per tile, for images of 2 and 4 columns: 8 and 16 accumulators where one row's 4 and 8
 * left the FMAs waiting on their latency (ResNet-18's 512 channels at 2x2: 94 GFLOP/s) */
OPC_CW_MICRO_RW(4, 2, 1)
OPC_CW_MICRO_RW(4, 2, 2)
OPC_CW_MICRO_RW(8, 4, 1)
OPC_CW_MICRO_RW(8, 4, 2)

typedef void (*opc_cw_micro_fn)(int64_t, const float *, const float *, const int64_t *, float *, int, int64_t);

/* The conv as the kernels see it. */
typedef struct {
    opc_cf_plan p;        /* P (padded dims), PV, kvol, K, groups, cin, cout, in, out, pb, k, d */
    int64_t s[3];         /* strides */
    int64_t mr, nt2, tr;  /* outputs per tile and row, tiles per row, rows per tile (1 or 2) */
    int64_t rows, tiles;  /* output rows (out0 * out1), rows / tr * nt2 */
    opc_cw_micro_fn micro;
} opc_cw_plan;

/* Tiles of mr outputs per row of n: the outputs computed. */
static inline int64_t opc_cw_cover(int64_t n, int64_t mr) { return (n + mr - 1) / mr * mr; }

/* The tile width that covers a row of n outputs with the least waste, the widest of equals. */
static inline int64_t opc_cw_mr(int64_t n) {
    int64_t mr = OPC_CW_MRA;
    if (opc_cw_cover(n, OPC_CW_MRC) < opc_cw_cover(n, mr)) mr = OPC_CW_MRC;
    if (opc_cw_cover(n, OPC_CW_MRB) < opc_cw_cover(n, mr)) mr = OPC_CW_MRB;
    if (opc_cw_cover(n, OPC_CW_MRD) < opc_cw_cover(n, mr)) mr = OPC_CW_MRD;
    if (opc_cw_cover(n, OPC_CW_MRE) < opc_cw_cover(n, mr)) mr = OPC_CW_MRE;
    return mr;
}

static inline opc_cw_plan opc_cw_plan_make(const opc_cv_geom *q) {
    opc_cw_plan c;
    c.p = opc_cf_plan_make(q->g, q->cg, q->og, q->in, q->out, q->k, q->d, q->p);
    const int64_t out2 = q->out[2];
    c.mr = opc_cw_mr(out2);
    c.nt2 = (out2 + c.mr - 1) / c.mr;
    c.p.PV = 1;
    for (int i = 0; i < 3; i++) {
        c.s[i] = q->s[i];
        /* the padded extent the outputs read: (out - 1) s + d (k - 1) + 1, along the rows the
         * last tile's dropped outputs included */
        const int64_t outs = i == 2 ? c.nt2 * c.mr : q->out[i];
        c.p.P[i] = (outs - 1) * q->s[i] + q->d[i] * (q->k[i] - 1) + 1;
        c.p.PV *= c.p.P[i];
    }
    c.rows = q->out[0] * q->out[1];
    /* rows of 2 or 4 outputs, an even count of them per plane: tiles of two rows */
    c.tr = (out2 == OPC_CW_MRE || out2 == OPC_CW_MRD) && q->out[1] % 2 == 0 ? 2 : 1;
    c.tiles = c.rows / c.tr * c.nt2;
    const int s1 = q->s[2] == 1;
    c.micro = c.tr == 2 ? (out2 == OPC_CW_MRD ? (s1 ? opc_cw_micro_8_4_1 : opc_cw_micro_8_4_2)
                                              : (s1 ? opc_cw_micro_4_2_1 : opc_cw_micro_4_2_2))
              : c.mr == OPC_CW_MRA ? (s1 ? opc_cw_micro_14_14_1 : opc_cw_micro_14_14_2)
              : c.mr == OPC_CW_MRC ? (s1 ? opc_cw_micro_8_8_1 : opc_cw_micro_8_8_2)
              : c.mr == OPC_CW_MRD ? (s1 ? opc_cw_micro_4_4_1 : opc_cw_micro_4_4_2)
              : c.mr == OPC_CW_MRE ? (s1 ? opc_cw_micro_2_2_1 : opc_cw_micro_2_2_2)
                                   : (s1 ? opc_cw_micro_7_7_1 : opc_cw_micro_7_7_2);
    return c;
}

/* Whether the channel-vector kernel takes conv q (f32 callers; after opc_cf_applies said no):
 * the row stride 1 or 2, a real GEMM (several taps, groups of at least 16 output channels, K of at
 * least 16), and tiles covering the rows without much waste. */
static inline int opc_cw_applies(const opc_cv_geom *q) {
    if (!(q->s[2] == 1 || q->s[2] == 2) || q->kvol < 2 || q->og < 16 || q->cg * q->kvol < 16) return 0;
    return 4 * q->out[2] >= 3 * opc_cw_cover(q->out[2], opc_cw_mr(q->out[2]));
}

/* The panel of taps [k0, k0 + kn) of output channels [oc0, oc0 + NW) of wg (the group's og rows of K):
 * a[k][j] = wg[oc0 + j, k0 + k] (0 past og), a transpose: V x V blocks go through registers
 * (opc_cf_transpose; read element by element, the NW rows in lockstep compiled to gathers that cost
 * as much as the product on a 4x4 image), the taps past the last whole block one by one.
 * Packed where it is used (per chunk, into a per-thread buffer) unless several tile groups share it:
 * a whole network layer's panels written and read back would cost two more passes over its weights. */
static void opc_cw_pack(const float *wg, int64_t og, int64_t K, int64_t oc0, int64_t k0, int64_t kn, float *a) {
    const float *rows[OPC_CW_NW];
    for (int j = 0; j < OPC_CW_NW; j++) rows[j] = oc0 + j < og ? wg + (oc0 + j) * K + k0 : NULL;
    int64_t k = 0;
#if OPC_CF_TRANSPOSE
    for (; k + OPC_CF_V <= kn; k += OPC_CF_V)
        for (int jb = 0; jb < OPC_CW_NW; jb += OPC_CF_V) {
            opc_cf_vec r[OPC_CF_V];
            for (int i = 0; i < OPC_CF_V; i++)
                r[i] = rows[jb + i] ? (opc_cf_vec) * (const opc_cf_uvec *)(rows[jb + i] + k) : (opc_cf_vec){0};
            opc_cf_transpose(r);
            for (int i = 0; i < OPC_CF_V; i++) *(opc_cf_uvec *)(a + (k + i) * OPC_CW_NW + jb) = r[i];
        }
#endif
    for (; k < kn; k++)
        for (int j = 0; j < OPC_CW_NW; j++) a[k * OPC_CW_NW + j] = rows[j] ? rows[j][k] : 0.0f;
}

/* Every group's panels of the whole K, [g][mt][K][NW]: what a conv whose weights never change
 * packs once (opc_frozen.h). ctx: opc_cf_weights. */
static void opc_cw_pack_all(const void *ctx, float *dst) {
    const opc_cf_weights *c = (const opc_cf_weights *)ctx;
    const int64_t mt = (c->og + OPC_CW_NW - 1) / OPC_CW_NW;
    for (int64_t g = 0; g < c->g; g++)
        for (int64_t m = 0; m < mt; m++)
            opc_cw_pack(c->w + g * c->og * c->K, c->og, c->K, m * OPC_CW_NW, 0, c->K, dst + (g * mt + m) * c->K * OPC_CW_NW);
}

/* Store tile acc [MR][NW] (its first mv outputs, its first nc channels) at output row offset yo of
 * y (channels of ovol) with bias and act; pre (or NULL) the same before act. */
static void opc_cw_store(const float *acc, int64_t mv, int64_t nc, float *y, float *pre, int64_t yo, int64_t ovol,
                         const float *bias, int act) {
    for (int64_t j = 0; j < nc; j++) {
        const float b = bias ? bias[j] : 0.0f;
        float *d = y + j * ovol + yo;
        for (int64_t m = 0; m < mv; m++) {
            const float v = acc[m * OPC_CW_NW + j] + b;
            if (pre) pre[j * ovol + yo + m] = v;
            d[m] = act == OPC_CF_ACT_NONE ? v : act == OPC_CF_ACT_RELU ? (v > 0.0f ? v : 0.0f) : opc_cf_act(v, act);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
/* The tiles' stores by vectors of 8 (opc_cw_store_run; GCC's __builtin_shuffle): r[i][l] -> r[l][i],
 * an 8 x 8 block transposed in registers by three rounds of two-vector shuffles, as opc_cf_transpose. */
#define OPC_CW_STORE8 1
typedef float opc_cw_v8 __attribute__((vector_size(32)));
typedef float opc_cw_uv8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t opc_cw_i8 __attribute__((vector_size(32)));

/* act (not gelu) on 8 values, as opc_cf_act_vec */
OPC_CF_ACT_VEC_FN(opc_cw_act8, opc_cw_v8, opc_cw_i8)

static inline void opc_cw_transpose8(opc_cw_v8 *r) {
    static const opc_cw_i8 lo[3] = {{0, 1, 2, 3, 8, 9, 10, 11}, {0, 1, 8, 9, 4, 5, 12, 13}, {0, 8, 2, 10, 4, 12, 6, 14}};
    static const opc_cw_i8 hi[3] = {{4, 5, 6, 7, 12, 13, 14, 15}, {2, 3, 10, 11, 6, 7, 14, 15}, {1, 9, 3, 11, 5, 13, 7, 15}};
    _Pragma("GCC unroll 3") for (int round = 0, h = 4; round < 3; round++, h /= 2)
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
            if (!(i & h)) {
                const opc_cw_v8 a = r[i], b = r[i + h];
                r[i] = __builtin_shuffle(a, b, lo[round]);
                r[i + h] = __builtin_shuffle(a, b, hi[round]);
            }
}

/* Room past a stage row's run for the last 8 x 8 block of its last tile. */
#define OPC_CW_STAGE (OPC_CW_TG * OPC_CW_MRA + 8)

/* opc_cw_store of a group of tn tiles whose outputs are a run of n >= 8 in y from row offset c0 (tile
 * t's first at yo[t] - c0, mv[t] of them), its first nc channels: each tile transposed 8 x 8 into
 * stage [NW][OPC_CW_STAGE] (a block's rows past the tile's outputs, read from the next tile's rows of
 * acc, land where the next tile's own block overwrites them or past the run), then each channel's run
 * stored 8 at a time (the last 8 shifted back to end at the run's end, recomputed to the same values).
 * A tile's outputs stored one at a time, NW floats apart in acc, took a quarter of a stem's time; a
 * tile stored alone a vector per channel put NW stores a plane apart in flight at once, which with a
 * power-of-two plane (ovol 1024: 4 KiB apart) share an L1 set (MobileNetV2's stem at 64x64: 36 us
 * against 30 scalar, 20 as a run). */
static void opc_cw_store_run(const float *acc, int64_t tn, const int64_t *yo, const int64_t *mv, int64_t c0,
                             int64_t n, int64_t nc, float *y, float *pre, int64_t ovol, const float *bias, int act) {
    float stage[OPC_CW_NW * OPC_CW_STAGE] __attribute__((aligned(32)));
    for (int64_t t = 0; t < tn; t++)
        for (int64_t rb = 0; rb < mv[t]; rb += 8)
            for (int jb = 0; jb < OPC_CW_NW; jb += 8) {
                opc_cw_v8 r[8];
                for (int m = 0; m < 8; m++)
                    r[m] = *(const opc_cw_uv8 *)(acc + (t * OPC_CW_MRA + rb + m) * OPC_CW_NW + jb);
                opc_cw_transpose8(r);
                for (int j = 0; j < 8; j++) *(opc_cw_uv8 *)(stage + (jb + j) * OPC_CW_STAGE + yo[t] - c0 + rb) = r[j];
            }
    /* each channel's run, act a constant of its copy of the loop (as a variable: a test per vector
       stored and relu6's bound reloaded from the stack, 30% of MobileNetV2's stem with its Clip) */
#define OPC_CW_STORE_CHANNELS(ACT)                                                                      \
    for (int64_t j = 0; j < nc; j++) {                                                                  \
        const float b = bias ? bias[j] : 0.0f, *s = stage + j * OPC_CW_STAGE;                           \
        float *yj = y + j * ovol + c0, *zj = pre ? pre + j * ovol + c0 : NULL;                          \
        for (int64_t i0 = 0; i0 < n; i0 += 8) {                                                         \
            const int64_t i = i0 + 8 <= n ? i0 : n - 8;                                                 \
            const opc_cw_v8 v = *(const opc_cw_uv8 *)(s + i) + b;                                       \
            if (zj) *(opc_cw_uv8 *)(zj + i) = v;                                                        \
            if ((ACT) != OPC_CF_ACT_GELU)                                                               \
                *(opc_cw_uv8 *)(yj + i) = opc_cw_act8(v, (ACT));                                        \
            else                                                                                        \
                for (int l = 0; l < 8; l++) yj[i + l] = opc_cf_act(v[l], (ACT));                        \
        }                                                                                               \
    }
    if (act == OPC_CF_ACT_RELU6) { OPC_CW_STORE_CHANNELS(OPC_CF_ACT_RELU6) }
    else if (act == OPC_CF_ACT_RELU) { OPC_CW_STORE_CHANNELS(OPC_CF_ACT_RELU) }
    else if (act == OPC_CF_ACT_NONE) { OPC_CW_STORE_CHANNELS(OPC_CF_ACT_NONE) }
    else { OPC_CW_STORE_CHANNELS(act) }
#undef OPC_CW_STORE_CHANNELS
}
#else
#define OPC_CW_STORE8 0
#endif

/* y = act(conv(x, w) + bias), z (or NULL) = conv(x, w) + bias, ep (or NULL) on each finished group
 * of tiles (its channels, its run of outputs); -1 when out of memory. */
static int opc_cw_conv(const float *x, const float *w, const float *bias, int act, float *y, float *z,
                       const opc_cv_geom *q, opc_cv_epilogue ep, void *ep_ctx) {
    opc_rt_route(OPC_ROUTE_CONV_CHANNEL_VECTOR);
    const opc_cw_plan c = opc_cw_plan_make(q);
    const opc_cf_plan *p = &c.p;
    const int64_t mt = (q->og + OPC_CW_NW - 1) / OPC_CW_NW, K = p->K, ovol = q->ovol;
    const int64_t groups = (c.tiles + OPC_CW_TG - 1) / OPC_CW_TG;
    const int64_t kc = p->kvol * (OPC_CW_KC / p->kvol > 0 ? OPC_CW_KC / p->kvol : 1); /* whole channels */
    float *xp = (float *)opc_cf_scratch(OPC_CF_BUF_XP, sizeof(float) * (p->cin * p->PV + OPC_CF_NR));
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (K > 0 ? K : 1));
    /* Weights that never change are packed once for all calls (opc_frozen.h); else several tile
     * groups per channel block would each pack its panels again (layer 1 of a ResNet at 64x64:
     * 6 times): then the block's panels are packed once per call, before the groups. */
    const opc_cf_weights whole = {w, q->g, q->og, K};
    const int64_t key[OPC_FROZEN_KEY] = {1, q->g, q->og, K}; /* 1: this layout */
    const float *frozen = opc_rt_frozen_packed(w, (int64_t)sizeof(float) * q->g * q->og * K, key,
                                               q->g * mt * K * OPC_CW_NW, opc_cw_pack_all, &whole);
    float *panels = !frozen && groups > 1 ? (float *)opc_cf_scratch(OPC_CF_BUF_PANELS, sizeof(float) * mt * K * OPC_CW_NW)
                                          : NULL;
    if (!xp || !off) {
        free(off);
        return -1;
    }
    opc_cf_offsets(off, p);
    int failed = 0;
    for (int64_t i = 0; i < q->n; i++)
        for (int64_t g = 0; g < q->g; g++) {
            opc_cf_pad(x + (i * q->c + g * q->cg) * q->ivol, xp, p);
            const float *wg = w + g * q->og * K;
            const float *ready = frozen ? frozen + g * mt * K * OPC_CW_NW : panels; /* packed before the tiles */
            float *yg = y + (i * q->o + g * q->og) * ovol, *zg = z ? z + (yg - y) : NULL;
            const float *bg = bias ? bias + g * q->og : NULL;
            /* not opc_par_min's passive scale: a small image's layer streams large weights (ResNet-18's
               512 channels at 2x2: 9 MB, 0.78 ms on one core, 0.47 on two), and the second core's
               bandwidth pays for the wake-up however few its multiply-adds (2 threads: 4.7 vs 6.4 ms);
               each output's NW channels stored one by one count as NW taps (a stem's 27 taps cost less
               than its stores: MobileNetV2's 3->32 stem at 64x64, 28 us on one core) */
            _Pragma("omp parallel if (mt * c.tiles * c.mr * (K + OPC_CW_NW) >= 32768) num_threads(opc_num_threads())")
            {
                /* + 2 rows: the store's 8 x 8 blocks of a last tile of 14 read 2 rows past it; zeroed,
                   as those blocks also read rows that no tile wrote (their lanes are never stored) */
                float *acc = (float *)calloc((size_t)(OPC_CW_TG * OPC_CW_MRA + 2) * OPC_CW_NW, sizeof(float));
                float *a = (float *)malloc(sizeof(float) * kc * OPC_CW_NW);
                opc_cv_pending pend = {0, 0, 0, 0};
                if (!acc || !a) {
                    _Pragma("omp atomic write")
                    failed = 1;
                }
                if (!frozen && panels) {
                    _Pragma("omp for schedule(static)") /* its barrier: every panel packed before use */
                    for (int64_t m = 0; m < mt; m++) opc_cw_pack(wg, q->og, K, m * OPC_CW_NW, 0, K, panels + m * K * OPC_CW_NW);
                }
                _Pragma("omp for schedule(dynamic, opc_par_chunk(mt * groups, mt * groups, 1)) collapse(2)")
                for (int64_t m = 0; m < mt; m++)
                    for (int64_t tg = 0; tg < groups; tg++) {
                        if (!acc || !a) continue;
                        const int64_t t0 = tg * OPC_CW_TG, tn = c.tiles - t0 < OPC_CW_TG ? c.tiles - t0 : OPC_CW_TG;
                        for (int64_t k0 = 0; k0 < K; k0 += kc) {
                            const int64_t kn = K - k0 < kc ? K - k0 : kc;
                            const float *ak = ready ? ready + (m * K + k0) * OPC_CW_NW : a;
                            if (!ready) opc_cw_pack(wg, q->og, K, m * OPC_CW_NW, k0, kn, a);
                            /* the next chunk's packed panel on its way while this one's tiles run */
                            const float *next = ready && k0 + kc < K ? ak + kn * OPC_CW_NW : NULL;
                            const int64_t next_kn = K - k0 - kn < kc ? K - k0 - kn : kc;
                            for (int64_t t = 0; t < tn; t++) {
                                opc_cf_prefetch_part(next, next_kn * OPC_CW_NW * 4 / 64, t, tn);
                                const int64_t r = (t0 + t) / c.nt2 * c.tr, o2 = (t0 + t) % c.nt2 * c.mr;
                                const int64_t o1 = r % q->out[1], o0 = r / q->out[1];
                                const int64_t base = (o0 * c.s[0] * p->P[1] + o1 * c.s[1]) * p->P[2] + o2 * c.s[2];
                                c.micro(kn, ak, xp + base, off + k0, acc + t * OPC_CW_MRA * OPC_CW_NW, k0 > 0,
                                        c.s[1] * p->P[2]);
                            }
                        }
                        const int64_t nc = q->og - m * OPC_CW_NW < OPC_CW_NW ? q->og - m * OPC_CW_NW : OPC_CW_NW;
                        int64_t yo[OPC_CW_TG], mv[OPC_CW_TG]; /* each tile's first output and how many */
                        for (int64_t t = 0; t < tn; t++) {
                            const int64_t r = (t0 + t) / c.nt2 * c.tr, o2 = (t0 + t) % c.nt2 * c.mr;
                            yo[t] = r * q->out[2] + o2;
                            mv[t] = c.tr == 2 ? 2 * c.mr : q->out[2] - o2 < c.mr ? q->out[2] - o2 : c.mr;
                        }
                        const int64_t c0 = yo[0], c1 = yo[tn - 1] + mv[tn - 1]; /* the group's run of outputs */
                        float *ym = yg + m * OPC_CW_NW * ovol, *zm = zg ? zg + m * OPC_CW_NW * ovol : NULL;
                        const float *bm = bg ? bg + m * OPC_CW_NW : NULL;
#if OPC_CW_STORE8
                        if (c1 - c0 >= 8)
                            opc_cw_store_run(acc, tn, yo, mv, c0, c1 - c0, nc, ym, zm, ovol, bm, act);
                        else
#endif
                            for (int64_t t = 0; t < tn; t++) /* tr = 2: rows of mr, consecutive */
                                opc_cw_store(acc + t * OPC_CW_MRA * OPC_CW_NW, mv[t], nc, ym, zm, yo[t], ovol, bm, act);
                        if (ep) { /* the group's tiles cover consecutive outputs: one call for them all */
                            const int64_t r0 = i * q->o + g * q->og + m * OPC_CW_NW;
                            opc_cv_ep_add(ep, ep_ctx, &pend, r0, r0 + nc, c0, c1);
                        }
                    }
                opc_cv_ep_flush(ep, ep_ctx, &pend);
                free(acc);
                free(a);
            }
        }
    free(off);
    return failed ? -1 : 0;
}

#endif /* OPC_NN_CONV_CW_H */
