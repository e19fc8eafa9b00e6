/* cuda_sim_library.h -- a plain-loop stand-in for runtime/opc_cuda_gemm.cuh's GEMM in the CPU
 * simulation (cuda_sim.h runs 1-D grids only; the tiled kernel's grid is 3-D). It takes the same
 * arguments, so a test checks what the emitted code passes it (run-time sizes included); its own
 * numbers are this loop's (in double), not the CUDA kernel's. f32 and f64. The runtime nn calls
 * run opc_nn.cuh's own kernels in the simulation (cuda_simulator.py's nn_kernels). */
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

#define OPC_SIM_LIBRARY(SUF, T)                                                                                     \
    static cudaError_t opc_cuda_gemm_##SUF(int64_t batch, int64_t M, int64_t N, int64_t K, const T *A, int64_t asb, \
                                           int ta, const T *B, int64_t bsb, int tb, const T *bias, int act, T *out,  \
                                           T *reserve) {                                                            \
        return opc_sim_gemm<T>(batch, M, N, K, A, asb, ta, B, bsb, tb, bias, act, out, reserve);                   \
    }
OPC_SIM_LIBRARY(f32, float)
OPC_SIM_LIBRARY(f64, double)
#undef OPC_SIM_LIBRARY

#endif
