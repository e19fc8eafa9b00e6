/* opc_nn.cuh -- CUDA kernels of opc's fused normalizations, losses and their grads.
 *
 * The CUDA counterparts of opc_nn.h, with the same arguments (device
 * pointers); generated code calls opc_cuda_nn_CALLEE(...) through
 * opc_loops.call and checks the cudaError_t it returns. Semantics are those
 * of the CPU kernels: f16/bf16/f32 compute in float and round once on store
 * (opc_runtime.h's conversions, so both targets round alike), f64 in double;
 * mean/rstd in the compute type; a label outside [0, n) fails the status
 * record (opc_status.h) and reads nothing out of bounds.
 *
 * Design: a tensor is viewed as [outer, n, inner]. When inner == 1 one block
 * of OPC_NN_THREADS threads owns a row (grid-stride over rows): the threads
 * stride the row and meet in block-wide reductions (warp shuffles, then one
 * value per warp in shared memory). When inner > 1 one thread owns a column
 * (o, i) and walks it with stride inner, so a warp reads 32 consecutive
 * elements at every step. layer_norm's dscale/dbias: one thread per column,
 * summing over the rows in order.
 *
 * Every launcher is a template, instantiated only where a module calls it.
 */
#ifndef OPC_NN_CUH
#define OPC_NN_CUH

#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "opc_runtime.h"
#include "opc_status.h"

#define OPC_NN_THREADS 256
#define OPC_NN_MAX_BLOCKS 65535

struct opc_nn_f32 { typedef float T; typedef float A; };
struct opc_nn_f64 { typedef double T; typedef double A; };
struct opc_nn_f16 { typedef uint16_t T; typedef float A; };
struct opc_nn_bf16 { typedef uint16_t T; typedef float A; };

template <typename D> __device__ __forceinline__ typename D::A opc_nn_ld(typename D::T v);
template <> __device__ __forceinline__ float opc_nn_ld<opc_nn_f32>(float v) { return v; }
template <> __device__ __forceinline__ double opc_nn_ld<opc_nn_f64>(double v) { return v; }
template <> __device__ __forceinline__ float opc_nn_ld<opc_nn_f16>(uint16_t v) { return __half2float(__ushort_as_half(v)); }
template <> __device__ __forceinline__ float opc_nn_ld<opc_nn_bf16>(uint16_t v) {
    return __bfloat162float(__ushort_as_bfloat16(v));
}

template <typename D> __device__ __forceinline__ typename D::T opc_nn_st(typename D::A v);
template <> __device__ __forceinline__ float opc_nn_st<opc_nn_f32>(float v) { return v; }
template <> __device__ __forceinline__ double opc_nn_st<opc_nn_f64>(double v) { return v; }
template <> __device__ __forceinline__ uint16_t opc_nn_st<opc_nn_f16>(float v) { return opc_f32_to_f16(v); }
template <> __device__ __forceinline__ uint16_t opc_nn_st<opc_nn_bf16>(float v) { return opc_f32_to_bf16(v); }

__device__ __forceinline__ float opc_nn_exp(float v) { return expf(v); }
__device__ __forceinline__ double opc_nn_exp(double v) { return exp(v); }
__device__ __forceinline__ float opc_nn_log(float v) { return logf(v); }
__device__ __forceinline__ double opc_nn_log(double v) { return log(v); }
__device__ __forceinline__ float opc_nn_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double opc_nn_sqrt(double v) { return sqrt(v); }

/* NaN-propagating maximum, as reduce_max */
template <typename A> __device__ __forceinline__ A opc_nn_max(A a, A b) { return (a != a || a > b) ? a : b; }

template <typename A, bool MAX> __device__ __forceinline__ A opc_nn_combine(A a, A b) {
    if constexpr (MAX) return opc_nn_max(a, b);
    else return a + b;
}

/* The sum (or max) of v over the block, returned to every thread. Every thread of the block must call it. */
template <typename A, bool MAX> __device__ A opc_nn_block_reduce(A v) {
    __shared__ A part[OPC_NN_THREADS / 32];
    for (int off = 16; off > 0; off /= 2) v = opc_nn_combine<A, MAX>(v, __shfl_xor_sync(0xffffffffu, v, off));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads(); /* part may still be read by the previous reduction */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    A r = part[0];
    for (int w = 1; w < warps; w++) r = opc_nn_combine<A, MAX>(r, part[w]);
    return r;
}

template <typename L> __device__ __forceinline__ int64_t opc_nn_label(const L *label, int64_t i) {
    return (int64_t)label[i];
}

static inline unsigned opc_nn_blocks(int64_t work, int64_t per_block) {
    const int64_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : (b > OPC_NN_MAX_BLOCKS ? OPC_NN_MAX_BLOCKS : b));
}

#define OPC_NN_GRID_STRIDE(c, total) \
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < (total); c += (int64_t)blockDim.x * gridDim.x)

/* A row's max m and sum s of exp(x - m), with the block's threads striding it (all must call). */
template <typename D>
__device__ __forceinline__ void opc_nn_row_expsum(const typename D::T *x, int64_t n, typename D::A &m,
                                                  typename D::A &s) {
    typedef typename D::A A;
    m = (A)-INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = opc_nn_max(m, opc_nn_ld<D>(x[j]));
    m = opc_nn_block_reduce<A, true>(m);
    s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += opc_nn_exp(opc_nn_ld<D>(x[j]) - m);
    s = opc_nn_block_reduce<A, false>(s);
}

/* A column's (stride inner) max m and sum s of exp(x - m), by one thread. */
template <typename D>
__device__ __forceinline__ void opc_nn_col_expsum(const typename D::T *x, int64_t n, int64_t inner,
                                                  typename D::A &m, typename D::A &s) {
    typedef typename D::A A;
    m = (A)-INFINITY;
    s = 0;
    for (int64_t j = 0; j < n; j++) m = opc_nn_max(m, opc_nn_ld<D>(x[j * inner]));
    for (int64_t j = 0; j < n; j++) s += opc_nn_exp(opc_nn_ld<D>(x[j * inner]) - m);
}

/* ---- softmax / log_softmax ------------------------------------------------ */

template <typename D, bool LOG>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_softmax_rows(const typename D::T *x, typename D::T *y, int64_t rows, int64_t n) {
    typedef typename D::A A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const typename D::T *xr = x + r * n;
        typename D::T *yr = y + r * n;
        A m, s;
        opc_nn_row_expsum<D>(xr, n, m, s);
        if constexpr (LOG) {
            const A ls = opc_nn_log(s);
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = opc_nn_st<D>((opc_nn_ld<D>(xr[j]) - m) - ls);
        } else {
            const A inv = (A)1 / s;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                yr[j] = opc_nn_st<D>(opc_nn_exp(opc_nn_ld<D>(xr[j]) - m) * inv);
        }
    }
}

template <typename D, bool LOG>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_softmax_cols(const typename D::T *x, typename D::T *y, int64_t outer, int64_t n, int64_t inner) {
    typedef typename D::A A;
    OPC_NN_GRID_STRIDE(c, outer * inner) {
        const int64_t base = (c / inner) * n * inner + c % inner;
        A m, s;
        opc_nn_col_expsum<D>(x + base, n, inner, m, s);
        const A ls = opc_nn_log(s), inv = (A)1 / s;
        for (int64_t j = 0; j < n; j++) {
            const A z = opc_nn_ld<D>(x[base + j * inner]) - m;
            y[base + j * inner] = opc_nn_st<D>(LOG ? z - ls : opc_nn_exp(z) * inv);
        }
    }
}

template <typename D, bool LOG>
static inline cudaError_t opc_cuda_nn_softmax_t(const typename D::T *x, typename D::T *y, int64_t outer, int64_t n,
                                                int64_t inner) {
    if (outer * n * inner == 0) return cudaSuccess;
    if (inner == 1) opc_nn_softmax_rows<D, LOG><<<opc_nn_blocks(outer, 1), OPC_NN_THREADS>>>(x, y, outer, n);
    else opc_nn_softmax_cols<D, LOG><<<opc_nn_blocks(outer * inner, OPC_NN_THREADS), OPC_NN_THREADS>>>(x, y, outer, n, inner);
    return cudaGetLastError();
}

/* ---- softmax_grad / log_softmax_grad -------------------------------------- */

template <typename D, bool LOG>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_softmax_grad_rows(const typename D::T *out, const typename D::T *dout, typename D::T *dx, int64_t rows,
                         int64_t n) {
    typedef typename D::A A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * n;
        A c = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            c += LOG ? opc_nn_ld<D>(dout[base + j]) : opc_nn_ld<D>(dout[base + j]) * opc_nn_ld<D>(out[base + j]);
        c = opc_nn_block_reduce<A, false>(c);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const A y = opc_nn_ld<D>(out[base + j]), d = opc_nn_ld<D>(dout[base + j]);
            dx[base + j] = opc_nn_st<D>(LOG ? d - opc_nn_exp(y) * c : y * (d - c));
        }
    }
}

template <typename D, bool LOG>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_softmax_grad_cols(const typename D::T *out, const typename D::T *dout, typename D::T *dx, int64_t outer,
                         int64_t n, int64_t inner) {
    typedef typename D::A A;
    OPC_NN_GRID_STRIDE(col, outer * inner) {
        const int64_t base = (col / inner) * n * inner + col % inner;
        A c = 0;
        for (int64_t j = 0; j < n; j++) {
            const int64_t at = base + j * inner;
            c += LOG ? opc_nn_ld<D>(dout[at]) : opc_nn_ld<D>(dout[at]) * opc_nn_ld<D>(out[at]);
        }
        for (int64_t j = 0; j < n; j++) {
            const int64_t at = base + j * inner;
            const A y = opc_nn_ld<D>(out[at]), d = opc_nn_ld<D>(dout[at]);
            dx[at] = opc_nn_st<D>(LOG ? d - opc_nn_exp(y) * c : y * (d - c));
        }
    }
}

template <typename D, bool LOG>
static inline cudaError_t opc_cuda_nn_softmax_grad_t(const typename D::T *out, const typename D::T *dout,
                                                     typename D::T *dx, int64_t outer, int64_t n, int64_t inner) {
    if (outer * n * inner == 0) return cudaSuccess;
    if (inner == 1)
        opc_nn_softmax_grad_rows<D, LOG><<<opc_nn_blocks(outer, 1), OPC_NN_THREADS>>>(out, dout, dx, outer, n);
    else
        opc_nn_softmax_grad_cols<D, LOG><<<opc_nn_blocks(outer * inner, OPC_NN_THREADS), OPC_NN_THREADS>>>(
            out, dout, dx, outer, n, inner);
    return cudaGetLastError();
}

/* ---- layer_norm and its grad ---------------------------------------------- */

template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_layer_norm_rows(const typename D::T *x, const typename D::T *scale, const typename D::T *bias,
                       typename D::T *y, typename D::A *mean, typename D::A *rstd, int64_t rows, int64_t cols,
                       double eps) {
    typedef typename D::A A;
    const A inv = (A)1 / (A)cols;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * cols;
        A s = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += opc_nn_ld<D>(x[base + j]);
        const A mu = opc_nn_block_reduce<A, false>(s) * inv;
        A v = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const A c = opc_nn_ld<D>(x[base + j]) - mu;
            v += c * c;
        }
        const A rs = (A)1 / opc_nn_sqrt(opc_nn_block_reduce<A, false>(v) * inv + (A)eps);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            y[base + j] = opc_nn_st<D>((opc_nn_ld<D>(x[base + j]) - mu) * rs * opc_nn_ld<D>(scale[j]) +
                                       opc_nn_ld<D>(bias[j]));
        if (threadIdx.x == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

template <typename D>
static inline cudaError_t opc_cuda_nn_layer_norm_t(const typename D::T *x, const typename D::T *scale,
                                                   const typename D::T *bias, typename D::T *y, typename D::A *mean,
                                                   typename D::A *rstd, int64_t rows, int64_t cols, double eps) {
    if (rows * cols == 0) return cudaSuccess;
    opc_nn_layer_norm_rows<D><<<opc_nn_blocks(rows, 1), OPC_NN_THREADS>>>(x, scale, bias, y, mean, rstd, rows, cols,
                                                                         eps);
    return cudaGetLastError();
}

template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_layer_norm_grad_rows(const typename D::T *x, const typename D::T *scale, const typename D::A *mean,
                            const typename D::A *rstd, const typename D::T *dy, typename D::T *dx, int64_t rows,
                            int64_t cols) {
    typedef typename D::A A;
    const A inv = (A)1 / (A)cols;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * cols;
        const A mu = mean[r], rs = rstd[r];
        A a = 0, b = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const A g = opc_nn_ld<D>(dy[base + j]) * opc_nn_ld<D>(scale[j]);
            a += g;
            b += g * ((opc_nn_ld<D>(x[base + j]) - mu) * rs);
        }
        a = opc_nn_block_reduce<A, false>(a) * inv;
        b = opc_nn_block_reduce<A, false>(b) * inv;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const A g = opc_nn_ld<D>(dy[base + j]) * opc_nn_ld<D>(scale[j]);
            const A xhat = (opc_nn_ld<D>(x[base + j]) - mu) * rs;
            dx[base + j] = opc_nn_st<D>(rs * ((g - a) - xhat * b));
        }
    }
}

template <typename D>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_layer_norm_grad_cols(const typename D::T *x, const typename D::A *mean, const typename D::A *rstd,
                            const typename D::T *dy, typename D::T *dscale, typename D::T *dbias, int64_t rows,
                            int64_t cols) {
    typedef typename D::A A;
    OPC_NN_GRID_STRIDE(c, cols) {
        A ds = 0, db = 0;
        for (int64_t r = 0; r < rows; r++) {
            const A d = opc_nn_ld<D>(dy[r * cols + c]);
            ds += d * ((opc_nn_ld<D>(x[r * cols + c]) - mean[r]) * rstd[r]);
            db += d;
        }
        dscale[c] = opc_nn_st<D>(ds);
        dbias[c] = opc_nn_st<D>(db);
    }
}

template <typename D>
static inline cudaError_t opc_cuda_nn_layer_norm_grad_t(const typename D::T *x, const typename D::T *scale,
                                                        const typename D::A *mean, const typename D::A *rstd,
                                                        const typename D::T *dy, typename D::T *dx,
                                                        typename D::T *dscale, typename D::T *dbias, int64_t rows,
                                                        int64_t cols) {
    if (cols == 0) return cudaSuccess;
    if (rows > 0)
        opc_nn_layer_norm_grad_rows<D><<<opc_nn_blocks(rows, 1), OPC_NN_THREADS>>>(x, scale, mean, rstd, dy, dx, rows,
                                                                                  cols);
    opc_nn_layer_norm_grad_cols<D><<<opc_nn_blocks(cols, OPC_NN_THREADS), OPC_NN_THREADS>>>(x, mean, rstd, dy, dscale,
                                                                                           dbias, rows, cols);
    return cudaGetLastError();
}

/* ---- softmax_cross_entropy and its grad ----------------------------------- */

template <typename D, typename L>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_sce_rows(const typename D::T *logits, const L *label, typename D::T *loss, typename D::T *sm,
                int64_t *record, int64_t rows, int64_t n, int64_t code) {
    typedef typename D::A A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * n;
        A m, s;
        opc_nn_row_expsum<D>(logits + base, n, m, s);
        const A inv = (A)1 / s;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            sm[base + j] = opc_nn_st<D>(opc_nn_exp(opc_nn_ld<D>(logits[base + j]) - m) * inv);
        if (threadIdx.x == 0) {
            const int64_t l = opc_nn_label(label, r);
            if (l < 0 || l >= n) {
                opc_status_fail(record, code, l);
                loss[r] = opc_nn_st<D>((A)NAN);
            } else {
                loss[r] = opc_nn_st<D>(-((opc_nn_ld<D>(logits[base + l]) - m) - opc_nn_log(s)));
            }
        }
    }
}

template <typename D, typename L>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_sce_cols(const typename D::T *logits, const L *label, typename D::T *loss, typename D::T *sm,
                int64_t *record, int64_t outer, int64_t n, int64_t inner, int64_t code) {
    typedef typename D::A A;
    OPC_NN_GRID_STRIDE(c, outer * inner) {
        const int64_t base = (c / inner) * n * inner + c % inner;
        A m, s;
        opc_nn_col_expsum<D>(logits + base, n, inner, m, s);
        const A inv = (A)1 / s;
        for (int64_t j = 0; j < n; j++)
            sm[base + j * inner] = opc_nn_st<D>(opc_nn_exp(opc_nn_ld<D>(logits[base + j * inner]) - m) * inv);
        const int64_t l = opc_nn_label(label, c);
        if (l < 0 || l >= n) {
            opc_status_fail(record, code, l);
            loss[c] = opc_nn_st<D>((A)NAN);
        } else {
            loss[c] = opc_nn_st<D>(-((opc_nn_ld<D>(logits[base + l * inner]) - m) - opc_nn_log(s)));
        }
    }
}

template <typename D, typename L>
static inline cudaError_t opc_cuda_nn_sce_t(const typename D::T *logits, const L *label, typename D::T *loss,
                                            typename D::T *sm, int64_t *record, int64_t outer, int64_t n,
                                            int64_t inner, int64_t code) {
    if (outer * n * inner == 0) return cudaSuccess;
    if (inner == 1)
        opc_nn_sce_rows<D, L><<<opc_nn_blocks(outer, 1), OPC_NN_THREADS>>>(logits, label, loss, sm, record, outer, n,
                                                                          code);
    else
        opc_nn_sce_cols<D, L><<<opc_nn_blocks(outer * inner, OPC_NN_THREADS), OPC_NN_THREADS>>>(
            logits, label, loss, sm, record, outer, n, inner, code);
    return cudaGetLastError();
}

template <typename D, typename L>
__global__ void __launch_bounds__(OPC_NN_THREADS)
opc_nn_sce_grad(const L *label, const typename D::T *sm, const typename D::T *dloss, typename D::T *dx,
                int64_t *record, int64_t outer, int64_t n, int64_t inner, int64_t code) {
    typedef typename D::A A;
    OPC_NN_GRID_STRIDE(e, outer * n * inner) {
        const int64_t o = e / (n * inner), j = (e / inner) % n, row = o * inner + e % inner;
        const int64_t l = opc_nn_label(label, row);
        if ((l < 0 || l >= n) && j == 0) opc_status_fail(record, code, l);
        const A hit = l == j ? (A)1 : (A)0;
        dx[e] = opc_nn_st<D>((opc_nn_ld<D>(sm[e]) - hit) * opc_nn_ld<D>(dloss[row]));
    }
}

template <typename D, typename L>
static inline cudaError_t opc_cuda_nn_sce_grad_t(const L *label, const typename D::T *sm, const typename D::T *dloss,
                                                 typename D::T *dx, int64_t *record, int64_t outer, int64_t n,
                                                 int64_t inner, int64_t code) {
    if (outer * n * inner == 0) return cudaSuccess;
    opc_nn_sce_grad<D, L><<<opc_nn_blocks(outer * n * inner, OPC_NN_THREADS), OPC_NN_THREADS>>>(
        label, sm, dloss, dx, record, outer, n, inner, code);
    return cudaGetLastError();
}

/* ---- convolutions ---------------------------------------------------------------
 * The geometry of opc_nn_conv.h (22 integers, 3 spatial dims). One thread per result
 * element, each summing its own terms in a fixed order (no atomics: deterministic):
 * conv per y element; the input gradient per dx element, over the outputs o with
 * o * s + k * d - p = i; the filter gradient per dw element, over images and outputs.
 * conv_transpose is the input gradient with x as dy. Reads stay inside the tensors:
 * padding is index ranges, never a load. */

struct opc_nn_conv_geom {
    int64_t n, c, o, g, cg, og, in[3], out[3], k[3], s[3], d[3], p[3];
};

#define OPC_NN_CONV_PARAMS                                                                                   \
    int64_t n, int64_t c, int64_t o, int64_t g, int64_t i0, int64_t i1, int64_t i2, int64_t o0, int64_t o1, \
        int64_t o2, int64_t k0, int64_t k1, int64_t k2, int64_t s0, int64_t s1, int64_t s2, int64_t d0,     \
        int64_t d1, int64_t d2, int64_t p0, int64_t p1, int64_t p2

static inline opc_nn_conv_geom opc_nn_conv_make(OPC_NN_CONV_PARAMS) {
    opc_nn_conv_geom q = {n, c, o, g, c / g, o / g, {i0, i1, i2}, {o0, o1, o2}, {k0, k1, k2},
                          {s0, s1, s2}, {d0, d1, d2}, {p0, p1, p2}};
    return q;
}

template <typename D>
__global__ void opc_nn_conv_fwd(const typename D::T *x, const typename D::T *w, typename D::T *y,
                                opc_nn_conv_geom q) {
    typedef typename D::A A;
    const int64_t total = q.n * q.o * q.out[0] * q.out[1] * q.out[2];
    OPC_NN_GRID_STRIDE(e, total) {
        int64_t r = e;
        const int64_t o2 = r % q.out[2]; r /= q.out[2];
        const int64_t o1 = r % q.out[1]; r /= q.out[1];
        const int64_t o0 = r % q.out[0]; r /= q.out[0];
        const int64_t oc = r % q.o, b = r / q.o, grp = oc / q.og;
        A acc = 0;
        for (int64_t cc = 0; cc < q.cg; cc++)
            for (int64_t k0 = 0; k0 < q.k[0]; k0++) {
                const int64_t i0 = o0 * q.s[0] + k0 * q.d[0] - q.p[0];
                if (i0 < 0 || i0 >= q.in[0]) continue;
                for (int64_t k1 = 0; k1 < q.k[1]; k1++) {
                    const int64_t i1 = o1 * q.s[1] + k1 * q.d[1] - q.p[1];
                    if (i1 < 0 || i1 >= q.in[1]) continue;
                    for (int64_t k2 = 0; k2 < q.k[2]; k2++) {
                        const int64_t i2 = o2 * q.s[2] + k2 * q.d[2] - q.p[2];
                        if (i2 < 0 || i2 >= q.in[2]) continue;
                        const int64_t xi = (((b * q.c + grp * q.cg + cc) * q.in[0] + i0) * q.in[1] + i1) * q.in[2] + i2;
                        const int64_t wi = (((oc * q.cg + cc) * q.k[0] + k0) * q.k[1] + k1) * q.k[2] + k2;
                        acc += opc_nn_ld<D>(x[xi]) * opc_nn_ld<D>(w[wi]);
                    }
                }
            }
        y[e] = opc_nn_st<D>(acc);
    }
}

/* the output index along one dim that input i meets at kernel offset k, or -1 */
__device__ __forceinline__ int64_t opc_nn_conv_hit(int64_t i, int64_t k, const opc_nn_conv_geom &q, int dim) {
    const int64_t num = i + q.p[dim] - k * q.d[dim];
    if (num < 0 || num % q.s[dim]) return -1;
    const int64_t o = num / q.s[dim];
    return o < q.out[dim] ? o : -1;
}

template <typename D>
__global__ void opc_nn_conv_data(const typename D::T *dy, const typename D::T *w, typename D::T *dx,
                                 opc_nn_conv_geom q) {
    typedef typename D::A A;
    const int64_t total = q.n * q.c * q.in[0] * q.in[1] * q.in[2];
    OPC_NN_GRID_STRIDE(e, total) {
        int64_t r = e;
        const int64_t i2 = r % q.in[2]; r /= q.in[2];
        const int64_t i1 = r % q.in[1]; r /= q.in[1];
        const int64_t i0 = r % q.in[0]; r /= q.in[0];
        const int64_t ch = r % q.c, b = r / q.c, grp = ch / q.cg, cc = ch % q.cg;
        A acc = 0;
        for (int64_t ol = 0; ol < q.og; ol++) {
            const int64_t oc = grp * q.og + ol;
            for (int64_t k0 = 0; k0 < q.k[0]; k0++) {
                const int64_t o0 = opc_nn_conv_hit(i0, k0, q, 0);
                if (o0 < 0) continue;
                for (int64_t k1 = 0; k1 < q.k[1]; k1++) {
                    const int64_t o1 = opc_nn_conv_hit(i1, k1, q, 1);
                    if (o1 < 0) continue;
                    for (int64_t k2 = 0; k2 < q.k[2]; k2++) {
                        const int64_t o2 = opc_nn_conv_hit(i2, k2, q, 2);
                        if (o2 < 0) continue;
                        const int64_t yi = (((b * q.o + oc) * q.out[0] + o0) * q.out[1] + o1) * q.out[2] + o2;
                        const int64_t wi = (((oc * q.cg + cc) * q.k[0] + k0) * q.k[1] + k1) * q.k[2] + k2;
                        acc += opc_nn_ld<D>(dy[yi]) * opc_nn_ld<D>(w[wi]);
                    }
                }
            }
        }
        dx[e] = opc_nn_st<D>(acc);
    }
}

template <typename D>
__global__ void opc_nn_conv_filter(const typename D::T *x, const typename D::T *dy, typename D::T *dw,
                                   opc_nn_conv_geom q) {
    typedef typename D::A A;
    const int64_t kvol = q.k[0] * q.k[1] * q.k[2], total = q.o * q.cg * kvol;
    OPC_NN_GRID_STRIDE(e, total) {
        const int64_t kk = e % kvol, cc = (e / kvol) % q.cg, oc = e / (kvol * q.cg);
        const int64_t ch = (oc / q.og) * q.cg + cc;
        const int64_t k2 = kk % q.k[2], k1 = (kk / q.k[2]) % q.k[1], k0 = kk / (q.k[2] * q.k[1]);
        A acc = 0;
        for (int64_t b = 0; b < q.n; b++)
            for (int64_t o0 = 0; o0 < q.out[0]; o0++) {
                const int64_t i0 = o0 * q.s[0] + k0 * q.d[0] - q.p[0];
                if (i0 < 0 || i0 >= q.in[0]) continue;
                for (int64_t o1 = 0; o1 < q.out[1]; o1++) {
                    const int64_t i1 = o1 * q.s[1] + k1 * q.d[1] - q.p[1];
                    if (i1 < 0 || i1 >= q.in[1]) continue;
                    for (int64_t o2 = 0; o2 < q.out[2]; o2++) {
                        const int64_t i2 = o2 * q.s[2] + k2 * q.d[2] - q.p[2];
                        if (i2 < 0 || i2 >= q.in[2]) continue;
                        const int64_t xi = (((b * q.c + ch) * q.in[0] + i0) * q.in[1] + i1) * q.in[2] + i2;
                        const int64_t yi = (((b * q.o + oc) * q.out[0] + o0) * q.out[1] + o1) * q.out[2] + o2;
                        acc += opc_nn_ld<D>(x[xi]) * opc_nn_ld<D>(dy[yi]);
                    }
                }
            }
        dw[e] = opc_nn_st<D>(acc);
    }
}

template <typename D>
static inline cudaError_t opc_cuda_nn_conv_t(int which, const typename D::T *a, const typename D::T *b,
                                             typename D::T *r, const opc_nn_conv_geom &q) {
    const int64_t kvol = q.k[0] * q.k[1] * q.k[2];
    const int64_t total = which == 0 ? q.n * q.o * q.out[0] * q.out[1] * q.out[2]
                          : which == 1 ? q.n * q.c * q.in[0] * q.in[1] * q.in[2] : q.o * q.cg * kvol;
    const unsigned blocks = opc_nn_blocks(total, OPC_NN_THREADS);
    if (which == 0) opc_nn_conv_fwd<D><<<blocks, OPC_NN_THREADS>>>(a, b, r, q);
    else if (which == 1) opc_nn_conv_data<D><<<blocks, OPC_NN_THREADS>>>(a, b, r, q);
    else opc_nn_conv_filter<D><<<blocks, OPC_NN_THREADS>>>(a, b, r, q);
    return cudaGetLastError();
}

/* ---- pooling: opc_nn_conv.h's 23-integer geometry. max/avg pool and avg_pool_grad: one thread per
 * result element; max_pool_grad: one thread per plane, which scatters its outputs in order in tiles
 * (as the CPU kernel does: the same sums), checking each index against its plane. */

struct opc_nn_pool_geom {
    int64_t planes, in[3], out[3], k[3], s[3], d[3], pb[3], pe[3], include_pad;
};

#define OPC_NN_POOL_PARAMS                                                                                       \
    int64_t planes, int64_t i0, int64_t i1, int64_t i2, int64_t o0, int64_t o1, int64_t o2, int64_t k0,         \
        int64_t k1, int64_t k2, int64_t s0, int64_t s1, int64_t s2, int64_t d0, int64_t d1, int64_t d2,         \
        int64_t b0, int64_t b1, int64_t b2, int64_t e0, int64_t e1, int64_t e2, int64_t include_pad
#define OPC_NN_POOL_MAKE                                                                                         \
    opc_nn_pool_geom q = {planes, {i0, i1, i2}, {o0, o1, o2}, {k0, k1, k2}, {s0, s1, s2}, {d0, d1, d2},      \
                          {b0, b1, b2}, {e0, e1, e2}, include_pad}

__device__ __forceinline__ int64_t opc_nn_pool_count(const opc_nn_pool_geom &q, const int64_t *o) {
    int64_t count = 1;
    for (int d = 0; d < 3; d++) {
        const int64_t start = o[d] * q.s[d] - q.pb[d];
        const int64_t lo = q.include_pad ? -q.pb[d] : 0, hi = q.include_pad ? q.in[d] + q.pe[d] : q.in[d];
        int64_t taps = 0;
        for (int64_t t = 0; t < q.k[d]; t++) taps += (start + t * q.d[d] >= lo && start + t * q.d[d] < hi);
        count *= taps;
    }
    return count;
}

template <typename D>
__global__ void opc_nn_pool_fwd(const typename D::T *x, typename D::T *y, int64_t *idx, opc_nn_pool_geom q) {
    typedef typename D::A A;
    const int64_t ovol = q.out[0] * q.out[1] * q.out[2], ivol = q.in[0] * q.in[1] * q.in[2];
    OPC_NN_GRID_STRIDE(e, q.planes * ovol) {
        const int64_t p = e / ovol, j = e % ovol;
        const int64_t o[3] = {j / (q.out[1] * q.out[2]), (j / q.out[2]) % q.out[1], j % q.out[2]};
        A acc = idx ? (A)-INFINITY : (A)0;
        int64_t best = -1;
        for (int64_t t0 = 0; t0 < q.k[0]; t0++) {
            const int64_t a0 = o[0] * q.s[0] - q.pb[0] + t0 * q.d[0];
            if (a0 < 0 || a0 >= q.in[0]) continue;
            for (int64_t t1 = 0; t1 < q.k[1]; t1++) {
                const int64_t a1 = o[1] * q.s[1] - q.pb[1] + t1 * q.d[1];
                if (a1 < 0 || a1 >= q.in[1]) continue;
                for (int64_t t2 = 0; t2 < q.k[2]; t2++) {
                    const int64_t a2 = o[2] * q.s[2] - q.pb[2] + t2 * q.d[2];
                    if (a2 < 0 || a2 >= q.in[2]) continue;
                    const int64_t at = (a0 * q.in[1] + a1) * q.in[2] + a2;
                    const A v = opc_nn_ld<D>(x[p * ivol + at]);
                    if (!idx) acc += v;
                    else if (best < 0 || (acc == acc && (v > acc || v != v))) {
                        acc = v;
                        best = at;
                    }
                }
            }
        }
        if (idx) {
            idx[e] = p * ivol + best;
            y[e] = opc_nn_st<D>(acc);
        } else {
            y[e] = opc_nn_st<D>(acc / (A)opc_nn_pool_count(q, o));
        }
    }
}

template <typename D>
__global__ void opc_nn_avg_pool_back(const typename D::T *dout, typename D::T *dx, opc_nn_pool_geom q) {
    typedef typename D::A A;
    const int64_t ovol = q.out[0] * q.out[1] * q.out[2], ivol = q.in[0] * q.in[1] * q.in[2];
    OPC_NN_GRID_STRIDE(e, q.planes * ivol) {
        const int64_t p = e / ivol, r = e % ivol;
        const int64_t i[3] = {r / (q.in[1] * q.in[2]), (r / q.in[2]) % q.in[1], r % q.in[2]};
        A acc = 0;
        for (int64_t t0 = 0; t0 < q.k[0]; t0++) {
            const int64_t n0 = i[0] + q.pb[0] - t0 * q.d[0];
            if (n0 < 0 || n0 % q.s[0] || n0 / q.s[0] >= q.out[0]) continue;
            for (int64_t t1 = 0; t1 < q.k[1]; t1++) {
                const int64_t n1 = i[1] + q.pb[1] - t1 * q.d[1];
                if (n1 < 0 || n1 % q.s[1] || n1 / q.s[1] >= q.out[1]) continue;
                for (int64_t t2 = 0; t2 < q.k[2]; t2++) {
                    const int64_t n2 = i[2] + q.pb[2] - t2 * q.d[2];
                    if (n2 < 0 || n2 % q.s[2] || n2 / q.s[2] >= q.out[2]) continue;
                    const int64_t o[3] = {n0 / q.s[0], n1 / q.s[1], n2 / q.s[2]};
                    acc += opc_nn_ld<D>(dout[p * ovol + (o[0] * q.out[1] + o[1]) * q.out[2] + o[2]]) /
                           (A)opc_nn_pool_count(q, o);
                }
            }
        }
        dx[e] = opc_nn_st<D>(acc);
    }
}

#define OPC_NN_POOL_TILE 256

template <typename D>
__global__ void opc_nn_max_pool_back(const int64_t *idx, const typename D::T *dout, typename D::T *dx,
                                     int64_t *record, int64_t code, opc_nn_pool_geom q) {
    typedef typename D::A A;
    const int64_t ovol = q.out[0] * q.out[1] * q.out[2], ivol = q.in[0] * q.in[1] * q.in[2];
    OPC_NN_GRID_STRIDE(p, q.planes) {
        A acc[OPC_NN_POOL_TILE];
        for (int64_t t0 = 0; t0 < ivol; t0 += OPC_NN_POOL_TILE) {
            const int64_t tn = ivol - t0 < OPC_NN_POOL_TILE ? ivol - t0 : OPC_NN_POOL_TILE;
            for (int64_t j = 0; j < tn; j++) acc[j] = 0;
            for (int64_t j = 0; j < ovol; j++) {
                const int64_t e = p * ovol + j, at = idx[e] - p * ivol;
                if (at < 0 || at >= ivol) {
                    if (t0 == 0) opc_status_fail(record, code, idx[e]);
                    continue;
                }
                if (at >= t0 && at < t0 + tn) acc[at - t0] += opc_nn_ld<D>(dout[e]);
            }
            for (int64_t j = 0; j < tn; j++) dx[p * ivol + t0 + j] = opc_nn_st<D>(acc[j]);
        }
    }
}

/* ---- entry points: opc_cuda_nn_CALLEE, as opc_nn.h names them ------------------ */

#define OPC_CUDA_NN_SCE(SUF, D, LSUF, L)                                                                         \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_softmax_cross_entropy_##SUF##_##LSUF(                                  \
        const D::T *logits, const L *label, D::T *loss, D::T *sm, int64_t *record, int64_t outer, int64_t n,      \
        int64_t inner, int64_t code) {                                                                           \
        return opc_cuda_nn_sce_t<D, L>(logits, label, loss, sm, record, outer, n, inner, code);                  \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_softmax_cross_entropy_grad_##SUF##_##LSUF(                             \
        const L *label, const D::T *sm, const D::T *dloss, D::T *dx, int64_t *record, int64_t outer, int64_t n,   \
        int64_t inner, int64_t code) {                                                                           \
        return opc_cuda_nn_sce_grad_t<D, L>(label, sm, dloss, dx, record, outer, n, inner, code);                \
    }

#define OPC_CUDA_NN_ENTRIES(SUF, D)                                                                              \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_softmax_##SUF(const D::T *x, D::T *y, int64_t outer, int64_t n,         \
                                                        int64_t inner) {                                         \
        return opc_cuda_nn_softmax_t<D, false>(x, y, outer, n, inner);                                           \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_log_softmax_##SUF(const D::T *x, D::T *y, int64_t outer, int64_t n,     \
                                                            int64_t inner) {                                     \
        return opc_cuda_nn_softmax_t<D, true>(x, y, outer, n, inner);                                            \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_softmax_grad_##SUF(const D::T *out, const D::T *dout, D::T *dx,         \
                                                             int64_t outer, int64_t n, int64_t inner) {          \
        return opc_cuda_nn_softmax_grad_t<D, false>(out, dout, dx, outer, n, inner);                             \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_log_softmax_grad_##SUF(const D::T *out, const D::T *dout, D::T *dx,     \
                                                                 int64_t outer, int64_t n, int64_t inner) {      \
        return opc_cuda_nn_softmax_grad_t<D, true>(out, dout, dx, outer, n, inner);                              \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_layer_norm_##SUF(const D::T *x, const D::T *scale, const D::T *bias,    \
                                                           D::T *y, D::A *mean, D::A *rstd, int64_t rows,        \
                                                           int64_t cols, double eps) {                           \
        return opc_cuda_nn_layer_norm_t<D>(x, scale, bias, y, mean, rstd, rows, cols, eps);                      \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_layer_norm_grad_##SUF(const D::T *x, const D::T *scale,                 \
                                                                const D::A *mean, const D::A *rstd,              \
                                                                const D::T *dy, D::T *dx, D::T *dscale,          \
                                                                D::T *dbias, int64_t rows, int64_t cols) {       \
        return opc_cuda_nn_layer_norm_grad_t<D>(x, scale, mean, rstd, dy, dx, dscale, dbias, rows, cols);        \
    }                                                                                                            \
    OPC_CUDA_NN_SCE(SUF, D, i32, int32_t)                                                                        \
    OPC_CUDA_NN_SCE(SUF, D, i64, int64_t)                                                                        \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_conv_##SUF(const D::T *x, const D::T *w, D::T *y, OPC_NN_CONV_PARAMS) { \
        return opc_cuda_nn_conv_t<D>(0, x, w, y, opc_nn_conv_make(n, c, o, g, i0, i1, i2, o0, o1, o2, k0, k1, k2,   \
                                                                   s0, s1, s2, d0, d1, d2, p0, p1, p2));          \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_conv_grad_input_##SUF(const D::T *dy, const D::T *w, D::T *dx,          \
                                                                OPC_NN_CONV_PARAMS) {                            \
        return opc_cuda_nn_conv_t<D>(1, dy, w, dx, opc_nn_conv_make(n, c, o, g, i0, i1, i2, o0, o1, o2, k0, k1,   \
                                                                     k2, s0, s1, s2, d0, d1, d2, p0, p1, p2));    \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_conv_grad_filter_##SUF(const D::T *x, const D::T *dy, D::T *dw,         \
                                                                 OPC_NN_CONV_PARAMS) {                           \
        return opc_cuda_nn_conv_t<D>(2, x, dy, dw, opc_nn_conv_make(n, c, o, g, i0, i1, i2, o0, o1, o2, k0, k1,   \
                                                                     k2, s0, s1, s2, d0, d1, d2, p0, p1, p2));    \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_max_pool_##SUF(const D::T *x, D::T *y, int64_t *idx,                   \
                                                         OPC_NN_POOL_PARAMS) {                                   \
        OPC_NN_POOL_MAKE;                                                                                        \
        opc_nn_pool_fwd<D><<<opc_nn_blocks(planes * o0 * o1 * o2, OPC_NN_THREADS), OPC_NN_THREADS>>>(x, y, idx, q); \
        return cudaGetLastError();                                                                               \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_avg_pool_##SUF(const D::T *x, D::T *y, OPC_NN_POOL_PARAMS) {           \
        OPC_NN_POOL_MAKE;                                                                                        \
        opc_nn_pool_fwd<D><<<opc_nn_blocks(planes * o0 * o1 * o2, OPC_NN_THREADS), OPC_NN_THREADS>>>(x, y,      \
                                                                                                      nullptr, q); \
        return cudaGetLastError();                                                                               \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_avg_pool_grad_##SUF(const D::T *dout, D::T *dx, OPC_NN_POOL_PARAMS) {  \
        OPC_NN_POOL_MAKE;                                                                                        \
        opc_nn_avg_pool_back<D><<<opc_nn_blocks(planes * i0 * i1 * i2, OPC_NN_THREADS), OPC_NN_THREADS>>>(dout,  \
                                                                                                      dx, q);    \
        return cudaGetLastError();                                                                               \
    }                                                                                                            \
    template <int = 0>                                                                                           \
    static inline cudaError_t opc_cuda_nn_max_pool_grad_##SUF(const int64_t *idx, const D::T *dout, D::T *dx,   \
                                                              int64_t *record, OPC_NN_POOL_PARAMS,               \
                                                              int64_t code) {                                    \
        OPC_NN_POOL_MAKE;                                                                                        \
        opc_nn_max_pool_back<D><<<opc_nn_blocks(planes, 64), 64>>>(idx, dout, dx, record, code, q);              \
        return cudaGetLastError();                                                                               \
    }

OPC_CUDA_NN_ENTRIES(f32, opc_nn_f32)
OPC_CUDA_NN_ENTRIES(f64, opc_nn_f64)
OPC_CUDA_NN_ENTRIES(f16, opc_nn_f16)
OPC_CUDA_NN_ENTRIES(bf16, opc_nn_bf16)

#undef OPC_CUDA_NN_ENTRIES
#undef OPC_CUDA_NN_SCE
#undef OPC_NN_GRID_STRIDE
#undef OPC_NN_CONV_PARAMS
#undef OPC_NN_POOL_PARAMS
#undef OPC_NN_POOL_MAKE

#include "opc_nn_attention.cuh"

#endif /* OPC_NN_CUH */
