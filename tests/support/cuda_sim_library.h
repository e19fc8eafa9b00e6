/* cuda_sim_library.h -- plain-loop stand-ins for the runtime calls of opc's generated CUDA
 * (runtime/opc_cuda_gemm.cuh's GEMM; runtime/opc_nn.cuh's softmax, log_softmax, their grads and
 * layer norm) for the CPU simulation (cuda_sim.h, which emulates neither). They take the same
 * arguments, so a test checks what the emitted code passes them (run-time sizes included); their
 * own numbers are these loops' (in double), not the CUDA kernels'. f32 and f64. */
#ifndef OPC_CUDA_SIM_LIBRARY_H
#define OPC_CUDA_SIM_LIBRARY_H

#include <math.h>
#include <stdint.h>

template <class T>
static cudaError_t opc_sim_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const T *A, int64_t a_batch_stride,
                                int trans_a, const T *B, int64_t b_batch_stride, int trans_b, const T *bias, int act,
                                T *out, T *reserve) {
    if (act > 1) return 1; /* the gelus are not stood in for */
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double z = 0;
                for (int64_t k = 0; k < K; ++k)
                    z += (double)A[b * a_batch_stride + (trans_a ? k * M + i : i * K + k)] *
                         (double)B[b * b_batch_stride + (trans_b ? j * K + k : k * N + j)];
                if (bias) z += bias[j];
                const int64_t at = (b * M + i) * N + j;
                if (reserve) reserve[at] = (T)z;
                out[at] = (T)(act == 1 && z < 0 ? 0 : z);
            }
    return cudaSuccess;
}

/* [outer, n, inner], the softmax (or log_softmax) along n */
template <class T>
static cudaError_t opc_sim_softmax(const T *x, T *y, int64_t outer, int64_t n, int64_t inner, int log) {
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            const T *xr = x + o * n * inner + i;
            T *yr = y + o * n * inner + i;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; ++j) m = fmax(m, (double)xr[j * inner]);
            for (int64_t j = 0; j < n; ++j) s += exp((double)xr[j * inner] - m);
            for (int64_t j = 0; j < n; ++j)
                yr[j * inner] = (T)(log ? xr[j * inner] - m - ::log(s) : exp(xr[j * inner] - m) / s);
        }
    return cudaSuccess;
}

/* dx from the forward's output and dout: out * (dout - sum(dout * out)), or for log_softmax
 * dout - exp(out) * sum(dout) */
template <class T>
static cudaError_t opc_sim_softmax_grad(const T *out, const T *dout, T *dx, int64_t outer, int64_t n, int64_t inner,
                                        int log) {
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            const int64_t base = o * n * inner + i;
            double s = 0;
            for (int64_t j = 0; j < n; ++j)
                s += log ? (double)dout[base + j * inner] : (double)dout[base + j * inner] * out[base + j * inner];
            for (int64_t j = 0; j < n; ++j) {
                const int64_t at = base + j * inner;
                dx[at] = (T)(log ? dout[at] - exp((double)out[at]) * s : out[at] * (dout[at] - s));
            }
        }
    return cudaSuccess;
}

template <class T>
static cudaError_t opc_sim_layer_norm(const T *x, const T *scale, const T *bias, T *y, T *mean, T *rstd, int64_t rows,
                                      int64_t cols, double eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T *xr = x + r * cols;
        double mu = 0, var = 0;
        for (int64_t j = 0; j < cols; ++j) mu += xr[j];
        mu /= cols;
        for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        const double rs = 1 / sqrt(var / cols + eps);
        for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = (T)((xr[j] - mu) * rs * scale[j] + bias[j]);
        mean[r] = (T)mu;
        rstd[r] = (T)rs;
    }
    return cudaSuccess;
}

#define OPC_SIM_LIBRARY(SUF, T)                                                                                     \
    static cudaError_t opc_cuda_gemm_##SUF(int64_t batch, int64_t M, int64_t N, int64_t K, const T *A, int64_t asb, \
                                           int ta, const T *B, int64_t bsb, int tb, const T *bias, int act, T *out,  \
                                           T *reserve) {                                                            \
        return opc_sim_gemm<T>(batch, M, N, K, A, asb, ta, B, bsb, tb, bias, act, out, reserve);                   \
    }                                                                                                               \
    static cudaError_t opc_cuda_nn_softmax_##SUF(const T *x, T *y, int64_t o, int64_t n, int64_t i) {               \
        return opc_sim_softmax<T>(x, y, o, n, i, 0);                                                                \
    }                                                                                                               \
    static cudaError_t opc_cuda_nn_log_softmax_##SUF(const T *x, T *y, int64_t o, int64_t n, int64_t i) {           \
        return opc_sim_softmax<T>(x, y, o, n, i, 1);                                                                \
    }                                                                                                               \
    static cudaError_t opc_cuda_nn_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t o, int64_t n,     \
                                                      int64_t i) {                                                  \
        return opc_sim_softmax_grad<T>(out, dout, dx, o, n, i, 0);                                                  \
    }                                                                                                               \
    static cudaError_t opc_cuda_nn_log_softmax_grad_##SUF(const T *out, const T *dout, T *dx, int64_t o, int64_t n, \
                                                          int64_t i) {                                              \
        return opc_sim_softmax_grad<T>(out, dout, dx, o, n, i, 1);                                                  \
    }                                                                                                               \
    static cudaError_t opc_cuda_nn_layer_norm_##SUF(const T *x, const T *scale, const T *bias, T *y, T *mean,       \
                                                    T *rstd, int64_t rows, int64_t cols, double eps) {              \
        return opc_sim_layer_norm<T>(x, scale, bias, y, mean, rstd, rows, cols, eps);                               \
    }
OPC_SIM_LIBRARY(f32, float)
OPC_SIM_LIBRARY(f64, double)
#undef OPC_SIM_LIBRARY

#endif
