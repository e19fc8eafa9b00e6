/* opc_nn_attention.cuh -- opc.attention and opc.attention_grad on CUDA, included by opc_nn.cuh
 * (its types, loads, stores and block reductions). Same arguments and semantics as the CPU
 * kernels of opc_nn_attention.h: scores (q . k) * scale + mask, -inf where is_causal hides key
 * j > query i, a row of all -inf scores gives NaN; f16/bf16/f32 compute in float.
 *
 * Design (simple before fast): one block of OPC_NN_THREADS threads per query row (forward, dq)
 * or per key row (dk, dv), grid-stride over the rows. The threads first split the keys (or
 * queries) one each and meet in block reductions (max, then the sum of exp: lse); then, tile by
 * tile of blockDim keys, each thread puts its key's weight in shared memory and the threads
 * switch to the features, each accumulating OPC_AT_CHUNK of them in registers (features beyond
 * OPC_AT_CHUNK * blockDim: another sweep). The [Lq, Lk] scores are never stored.
 */
#ifndef OPC_NN_ATTENTION_CUH
#define OPC_NN_ATTENTION_CUH

#define OPC_AT_MAX_BATCH 6
#define OPC_AT_CHUNK 4

/* An operand's layout (see opc_nn_attention.h): row i of batch entry b at the sum of the batch
 * indices times bs, plus i * row. */
struct opc_at_lay {
    int64_t row, bs[OPC_AT_MAX_BATCH];
};
enum { OPC_AT_Q, OPC_AT_K, OPC_AT_V, OPC_AT_O, OPC_AT_DO, OPC_AT_DQ, OPC_AT_DK, OPC_AT_DV, OPC_AT_NLAY };

struct opc_at_geom {
    int64_t bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb;
    int64_t dims[OPC_AT_MAX_BATCH], mstr[OPC_AT_MAX_BATCH];
    double scale;
    opc_at_lay lay[OPC_AT_NLAY];
};

/* The offset of row i of batch entry b in operand x's layout. */
__device__ __forceinline__ int64_t opc_at_off(const opc_at_geom &g, int x, int64_t b, int64_t i) {
    int64_t at = i * g.lay[x].row;
    for (int64_t t = g.nb - 1; t >= 0; t--) {
        at += (b % g.dims[t]) * g.lay[x].bs[t];
        b /= g.dims[t];
    }
    return at;
}

/* The mask's offset for batch entry b (see opc_nn_attention.h). */
__device__ __forceinline__ int64_t opc_at_mask_offset(const opc_at_geom &g, int64_t b) {
    int64_t at = 0;
    for (int64_t t = g.nb - 1; t >= 0; t--) {
        at += (b % g.dims[t]) * g.mstr[t];
        b /= g.dims[t];
    }
    return at;
}

/* The score of query i and key j of batch entry b. */
template <typename D>
__device__ typename D::A opc_at_score(const typename D::T *q, const typename D::T *k, const typename D::T *mask,
                                      const opc_at_geom &g, int64_t b, int64_t i, int64_t j) {
    typedef typename D::A A;
    if (g.causal && j > i) return (A)-INFINITY;
    const typename D::T *qr = q + opc_at_off(g, OPC_AT_Q, b, i), *kr = k + opc_at_off(g, OPC_AT_K, b, j);
    A s = 0;
    for (int64_t dd = 0; dd < g.d; dd++) s += opc_nn_ld<D>(qr[dd]) * opc_nn_ld<D>(kr[dd]);
    s *= (A)g.scale;
    if (g.has_mask) s += opc_nn_ld<D>(mask[opc_at_mask_offset(g, b) + i * g.mrow + j * g.mcol]);
    return s;
}

template <typename D>
__device__ __forceinline__ typename D::A opc_at_dot(const typename D::T *a, const typename D::T *b, int64_t n) {
    typename D::A s = 0;
    for (int64_t c = 0; c < n; c++) s += opc_nn_ld<D>(a[c]) * opc_nn_ld<D>(b[c]);
    return s;
}

/* ---- forward: a block per query row ------------------------------------------------------------ */
template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_attention_rows(const typename D::T *q, const typename D::T *k, const typename D::T *v,
                      const typename D::T *mask, typename D::T *out, typename D::A *lse, opc_at_geom g) {
    typedef typename D::A A;
    __shared__ A w[OPC_NN_THREADS];
    const int64_t nt = blockDim.x;
    for (int64_t row = blockIdx.x; row < g.bh * g.lq; row += gridDim.x) {
        const int64_t b = row / g.lq, i = row % g.lq;
        A m = (A)-INFINITY;
        for (int64_t j = threadIdx.x; j < g.lk; j += nt) m = opc_nn_max(m, opc_at_score<D>(q, k, mask, g, b, i, j));
        m = opc_nn_block_reduce<A, true>(m);
        A l = 0;
        if (m != (A)-INFINITY)
            for (int64_t j = threadIdx.x; j < g.lk; j += nt) l += opc_nn_exp(opc_at_score<D>(q, k, mask, g, b, i, j) - m);
        l = opc_nn_block_reduce<A, false>(l);
        const bool hidden = m == (A)-INFINITY; /* every score -inf: softmax's 0 / 0 */
        const A ls = hidden ? (A)NAN : m + opc_nn_log(l);
        if (threadIdx.x == 0) lse[row] = ls;
        for (int64_t c0 = 0; c0 < g.dv; c0 += OPC_AT_CHUNK * nt) {
            A acc[OPC_AT_CHUNK] = {};
            for (int64_t j0 = 0; j0 < g.lk; j0 += nt) {
                const int64_t j = j0 + threadIdx.x;
                __syncthreads(); /* w still read by the previous tile */
                w[threadIdx.x] = j < g.lk ? opc_nn_exp(opc_at_score<D>(q, k, mask, g, b, i, j) - ls) : (A)0;
                __syncthreads();
                const int64_t tile = g.lk - j0 < nt ? g.lk - j0 : nt;
                for (int t = 0; t < OPC_AT_CHUNK; t++) {
                    const int64_t c = c0 + t * nt + threadIdx.x;
                    if (c < g.dv)
                        for (int64_t jj = 0; jj < tile; jj++)
                            acc[t] += w[jj] * opc_nn_ld<D>(v[opc_at_off(g, OPC_AT_V, b, j0 + jj) + c]);
                }
            }
            for (int t = 0; t < OPC_AT_CHUNK; t++) {
                const int64_t c = c0 + t * nt + threadIdx.x;
                if (c < g.dv) out[opc_at_off(g, OPC_AT_O, b, i) + c] = opc_nn_st<D>(hidden ? (A)NAN : acc[t]);
            }
        }
    }
}

/* ---- backward: dq, a block per query row -------------------------------------------------------- */
template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_attention_grad_q(const typename D::T *q, const typename D::T *k, const typename D::T *v,
                        const typename D::T *out, const typename D::A *lse, const typename D::T *dout,
                        const typename D::T *mask, typename D::T *dq, opc_at_geom g) {
    typedef typename D::A A;
    __shared__ A w[OPC_NN_THREADS];
    const int64_t nt = blockDim.x;
    for (int64_t row = blockIdx.x; row < g.bh * g.lq; row += gridDim.x) {
        const int64_t b = row / g.lq, i = row % g.lq;
        const typename D::T *dor = dout + opc_at_off(g, OPC_AT_DO, b, i), *orow = out + opc_at_off(g, OPC_AT_O, b, i);
        A delta = 0; /* rowsum(dout * out) */
        for (int64_t c = threadIdx.x; c < g.dv; c += nt) delta += opc_nn_ld<D>(dor[c]) * opc_nn_ld<D>(orow[c]);
        delta = opc_nn_block_reduce<A, false>(delta);
        const A ls = lse[row];
        for (int64_t c0 = 0; c0 < g.d; c0 += OPC_AT_CHUNK * nt) {
            A acc[OPC_AT_CHUNK] = {};
            for (int64_t j0 = 0; j0 < g.lk; j0 += nt) {
                const int64_t j = j0 + threadIdx.x;
                __syncthreads();
                A ds = 0;
                if (j < g.lk) {
                    const A p = opc_nn_exp(opc_at_score<D>(q, k, mask, g, b, i, j) - ls);
                    ds = p * (opc_at_dot<D>(dor, v + opc_at_off(g, OPC_AT_V, b, j), g.dv) - delta);
                }
                w[threadIdx.x] = ds;
                __syncthreads();
                const int64_t tile = g.lk - j0 < nt ? g.lk - j0 : nt;
                for (int t = 0; t < OPC_AT_CHUNK; t++) {
                    const int64_t c = c0 + t * nt + threadIdx.x;
                    if (c < g.d)
                        for (int64_t jj = 0; jj < tile; jj++)
                            acc[t] += w[jj] * opc_nn_ld<D>(k[opc_at_off(g, OPC_AT_K, b, j0 + jj) + c]);
                }
            }
            for (int t = 0; t < OPC_AT_CHUNK; t++) {
                const int64_t c = c0 + t * nt + threadIdx.x;
                if (c < g.d) dq[opc_at_off(g, OPC_AT_DQ, b, i) + c] = opc_nn_st<D>(acc[t] * (A)g.scale);
            }
        }
    }
}

/* ---- backward: dk and dv, a block per key row ------------------------------------------------- */
template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_attention_grad_kv(const typename D::T *q, const typename D::T *k, const typename D::T *v,
                         const typename D::T *out, const typename D::A *lse, const typename D::T *dout,
                         const typename D::T *mask, typename D::T *dk, typename D::T *dvo, opc_at_geom g) {
    typedef typename D::A A;
    __shared__ A wp[OPC_NN_THREADS], ws[OPC_NN_THREADS];
    const int64_t nt = blockDim.x, width = g.d > g.dv ? g.d : g.dv;
    for (int64_t key = blockIdx.x; key < g.bh * g.lk; key += gridDim.x) {
        const int64_t b = key / g.lk, j = key % g.lk;
        for (int64_t c0 = 0; c0 < width; c0 += OPC_AT_CHUNK * nt) {
            A ak[OPC_AT_CHUNK] = {}, av[OPC_AT_CHUNK] = {};
            for (int64_t i0 = 0; i0 < g.lq; i0 += nt) {
                const int64_t i = i0 + threadIdx.x, row = b * g.lq + i;
                __syncthreads();
                A p = 0, ds = 0;
                if (i < g.lq) {
                    const typename D::T *dor = dout + opc_at_off(g, OPC_AT_DO, b, i);
                    p = opc_nn_exp(opc_at_score<D>(q, k, mask, g, b, i, j) - lse[row]);
                    ds = p * (opc_at_dot<D>(dor, v + opc_at_off(g, OPC_AT_V, b, j), g.dv) -
                              opc_at_dot<D>(dor, out + opc_at_off(g, OPC_AT_O, b, i), g.dv));
                }
                wp[threadIdx.x] = p;
                ws[threadIdx.x] = ds;
                __syncthreads();
                const int64_t tile = g.lq - i0 < nt ? g.lq - i0 : nt;
                for (int t = 0; t < OPC_AT_CHUNK; t++) {
                    const int64_t c = c0 + t * nt + threadIdx.x;
                    for (int64_t ii = 0; ii < tile; ii++) {
                        if (c < g.dv) av[t] += wp[ii] * opc_nn_ld<D>(dout[opc_at_off(g, OPC_AT_DO, b, i0 + ii) + c]);
                        if (c < g.d) ak[t] += ws[ii] * opc_nn_ld<D>(q[opc_at_off(g, OPC_AT_Q, b, i0 + ii) + c]);
                    }
                }
            }
            for (int t = 0; t < OPC_AT_CHUNK; t++) {
                const int64_t c = c0 + t * nt + threadIdx.x;
                if (c < g.dv) dvo[opc_at_off(g, OPC_AT_DV, b, j) + c] = opc_nn_st<D>(av[t]);
                if (c < g.d) dk[opc_at_off(g, OPC_AT_DK, b, j) + c] = opc_nn_st<D>(ak[t] * (A)g.scale);
            }
        }
    }
}

/* The arguments as opc_nn_attention.h's: the geometry's 22 integers, the operands' layouts (7 each),
 * the scale. */
#define OPC_AT_INTS                                                                                            \
    int64_t bh, int64_t lq, int64_t lk, int64_t d, int64_t dv, int64_t causal, int64_t has_mask, int64_t mrow,   \
        int64_t mcol, int64_t nb, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t n4, int64_t n5,         \
        int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5
#define OPC_AT_LAY_PARAMS(X)                                                                                   \
    int64_t X##r, int64_t X##0, int64_t X##1, int64_t X##2, int64_t X##3, int64_t X##4, int64_t X##5
#define OPC_AT_LAY_INIT(X) {X##r, {X##0, X##1, X##2, X##3, X##4, X##5}}
#define OPC_AT_PARAMS                                                                                          \
    OPC_AT_INTS, OPC_AT_LAY_PARAMS(q_), OPC_AT_LAY_PARAMS(k_), OPC_AT_LAY_PARAMS(v_), OPC_AT_LAY_PARAMS(o_),    \
        double scale
#define OPC_AT_GRAD_PARAMS                                                                                     \
    OPC_AT_INTS, OPC_AT_LAY_PARAMS(q_), OPC_AT_LAY_PARAMS(k_), OPC_AT_LAY_PARAMS(v_), OPC_AT_LAY_PARAMS(o_),    \
        OPC_AT_LAY_PARAMS(do_), OPC_AT_LAY_PARAMS(dq_), OPC_AT_LAY_PARAMS(dk_), OPC_AT_LAY_PARAMS(dv_), double scale
#define OPC_AT_GEOM                                                                                            \
    bh, lq, lk, d, dv, causal, has_mask, mrow, mcol, nb, {n0, n1, n2, n3, n4, n5}, {s0, s1, s2, s3, s4, s5}, scale
#define OPC_AT_MAKE                                                                                            \
    const opc_at_geom g = {OPC_AT_GEOM,                                                                        \
                           {OPC_AT_LAY_INIT(q_), OPC_AT_LAY_INIT(k_), OPC_AT_LAY_INIT(v_), OPC_AT_LAY_INIT(o_)}}
#define OPC_AT_GRAD_MAKE                                                                                       \
    const opc_at_geom g = {OPC_AT_GEOM,                                                                        \
                           {OPC_AT_LAY_INIT(q_), OPC_AT_LAY_INIT(k_), OPC_AT_LAY_INIT(v_), OPC_AT_LAY_INIT(o_),  \
                            OPC_AT_LAY_INIT(do_), OPC_AT_LAY_INIT(dq_), OPC_AT_LAY_INIT(dk_), OPC_AT_LAY_INIT(dv_)}}

#define OPC_CUDA_AT_ENTRIES(SUF, D)                                                                              \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_attention_##SUF(const D::T *q, const D::T *k, const D::T *v,            \
                                                          const D::T *mask, D::T *out, D::A *lse, OPC_AT_PARAMS) { \
        OPC_AT_MAKE;                                                                                             \
        if (bh * lq == 0) return cudaSuccess;                                                                    \
        opc_nn_attention_rows<D><<<opc_nn_blocks(bh * lq, 1), OPC_NN_THREADS>>>(q, k, v, mask, out, lse, g);     \
        return cudaGetLastError();                                                                               \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_attention_grad_##SUF(const D::T *q, const D::T *k, const D::T *v,       \
                                                               const D::T *out, const D::A *lse,                 \
                                                               const D::T *dout, const D::T *mask, D::T *dq,     \
                                                               D::T *dk, D::T *dv_, OPC_AT_GRAD_PARAMS) {        \
        OPC_AT_GRAD_MAKE;                                                                                         \
        if (bh * lq > 0)                                                                                         \
            opc_nn_attention_grad_q<D><<<opc_nn_blocks(bh * lq, 1), OPC_NN_THREADS>>>(q, k, v, out, lse, dout,   \
                                                                                      mask, dq, g);              \
        if (bh * lk > 0)                                                                                         \
            opc_nn_attention_grad_kv<D><<<opc_nn_blocks(bh * lk, 1), OPC_NN_THREADS>>>(q, k, v, out, lse, dout,  \
                                                                                       mask, dk, dv_, g);        \
        return cudaGetLastError();                                                                               \
    }

OPC_CUDA_AT_ENTRIES(f32, opc_nn_f32)
OPC_CUDA_AT_ENTRIES(f64, opc_nn_f64)
OPC_CUDA_AT_ENTRIES(f16, opc_nn_f16)
OPC_CUDA_AT_ENTRIES(bf16, opc_nn_bf16)

#undef OPC_CUDA_AT_ENTRIES
#undef OPC_AT_INTS
#undef OPC_AT_LAY_PARAMS
#undef OPC_AT_LAY_INIT
#undef OPC_AT_PARAMS
#undef OPC_AT_GRAD_PARAMS
#undef OPC_AT_GEOM
#undef OPC_AT_MAKE
#undef OPC_AT_GRAD_MAKE

#endif /* OPC_NN_ATTENTION_CUH */
