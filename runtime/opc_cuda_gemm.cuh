/* opc_cuda_gemm.cuh -- CUDA GEMM with a fused epilogue, for opc's generated CUDA code.
 *
 *   out[b] = act(op_a(A[b]) @ op_b(B[b]) + bias);  reserve[b] = pre-activation
 *
 * Host launchers (one per dtype, same argument order as the C runtime's
 * opc_rt_gemm_*; all pointers are device pointers; return cudaGetLastError()):
 *   opc_cuda_gemm_f32 (float), opc_cuda_gemm_f64 (double),
 *   opc_cuda_gemm_f16, opc_cuda_gemm_bf16 (uint16_t storage bits)
 *   (batch, M, N, K, A, a_batch_stride, trans_a, B, b_batch_stride, trans_b,
 *    bias, act, out, reserve)
 * A is [batch,M,K] ([batch,K,M] if trans_a), B is [batch,K,N] ([batch,N,K] if
 * trans_b), *_batch_stride in elements (0 = broadcast), bias NULL or [N],
 * act: 0 none, 1 relu, 2 gelu (tanh form), 3 gelu (erf form).
 * out / reserve: [batch,M,N] contiguous, reserve may be NULL.
 *
 * Semantics are those of the CPU GEMM (opc_gemm.h): accumulate in f32 (f64
 * for f64), z = acc + bias, reserve = round(z), out = round(act(z)) with
 * round-to-nearest-even for f16/bf16 (opc_runtime.h's conversions).
 *
 * Design: the classic shared-memory tiling. A block of 256 threads owns a
 * 64x64 tile of out (blockIdx.x: columns, blockIdx.y: rows, blockIdx.z: batch);
 * per 16-deep slice of K it stages a 64x16 tile of op_a(A) and a 16x64 tile of
 * op_b(B) in shared memory (converted to the accumulator type, zero outside
 * the matrix, read along the contiguous dimension whatever the transposes);
 * each thread accumulates a 4x4 sub-tile strided by 16 in registers. The
 * epilogue runs on those registers before anything is written.
 * Limits: M <= 64 * 65535 rows and batch <= 65535 (the grid's y and z).
 */
#ifndef OPC_CUDA_GEMM_CUH
#define OPC_CUDA_GEMM_CUH

#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "opc_runtime.h"

#define OPC_GEMM_BM 64
#define OPC_GEMM_BN 64
#define OPC_GEMM_BK 16
#define OPC_GEMM_THREADS 256

struct opc_gemm_f32_tag {};
struct opc_gemm_f64_tag {};
struct opc_gemm_f16_tag {};
struct opc_gemm_bf16_tag {};

template <typename Tag> struct opc_gemm_traits;

template <> struct opc_gemm_traits<opc_gemm_f32_tag> {
    typedef float T;
    typedef float Acc;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float x) { return x; }
};
template <> struct opc_gemm_traits<opc_gemm_f64_tag> {
    typedef double T;
    typedef double Acc;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(double x) { return x; }
};
template <> struct opc_gemm_traits<opc_gemm_f16_tag> {
    typedef uint16_t T;
    typedef float Acc;
    static __device__ __forceinline__ float load(uint16_t x) { return __half2float(__ushort_as_half(x)); }
    static __device__ __forceinline__ uint16_t store(float x) { return opc_f32_to_f16(x); }
};
template <> struct opc_gemm_traits<opc_gemm_bf16_tag> {
    typedef uint16_t T;
    typedef float Acc;
    static __device__ __forceinline__ float load(uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
    static __device__ __forceinline__ uint16_t store(float x) { return opc_f32_to_bf16(x); }
};

/* The activations of opc_gemm.h: relu keeps NaN, gelu is opc_runtime.h's. */
static __device__ __forceinline__ float opc_cuda_gemm_act(float z, int act) {
    if (act == 1) return z < 0.0f ? 0.0f : z;
    if (act == 2) return opc_gelu_tanh_f32(z);
    if (act == 3) return opc_gelu_erf_f32(z);
    return z;
}
static __device__ __forceinline__ double opc_cuda_gemm_act(double z, int act) {
    if (act == 1) return z < 0.0 ? 0.0 : z;
    if (act == 2) return opc_gelu_tanh_f64(z);
    if (act == 3) return opc_gelu_erf_f64(z);
    return z;
}

template <typename Tag>
__global__ void __launch_bounds__(OPC_GEMM_THREADS)
opc_cuda_gemm_kernel(int64_t M, int64_t N, int64_t K,
                     const typename opc_gemm_traits<Tag>::T *A, int64_t a_batch_stride, int trans_a,
                     const typename opc_gemm_traits<Tag>::T *B, int64_t b_batch_stride, int trans_b,
                     const typename opc_gemm_traits<Tag>::T *bias, int act,
                     typename opc_gemm_traits<Tag>::T *out, typename opc_gemm_traits<Tag>::T *reserve) {
    typedef opc_gemm_traits<Tag> Tr;
    typedef typename Tr::Acc Acc;
    __shared__ Acc As[OPC_GEMM_BK][OPC_GEMM_BM];   /* As[k][m] = op_a(A)[m0 + m][k0 + k] */
    __shared__ Acc Bs[OPC_GEMM_BK][OPC_GEMM_BN];   /* Bs[k][n] = op_b(B)[k0 + k][n0 + n] */

    const int64_t batch = blockIdx.z;
    A += batch * a_batch_stride;
    B += batch * b_batch_stride;
    out += batch * M * N;
    if (reserve) reserve += batch * M * N;

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * OPC_GEMM_BM, n0 = (int64_t)blockIdx.x * OPC_GEMM_BN;
    Acc acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = (Acc)0;

    for (int64_t k0 = 0; k0 < K; k0 += OPC_GEMM_BK) {
        /* 64*16 = 4 * 256 elements of each operand tile: 4 per thread. */
        for (int r = 0; r < 4; r++) {
            const int e = tid + OPC_GEMM_THREADS * r;
            int mm, kk;
            if (trans_a) { kk = e / OPC_GEMM_BM; mm = e % OPC_GEMM_BM; }   /* A is [K, M]: m contiguous */
            else { mm = e / OPC_GEMM_BK; kk = e % OPC_GEMM_BK; }          /* A is [M, K]: k contiguous */
            int64_t gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < K) ? Tr::load(trans_a ? A[gk * M + gm] : A[gm * K + gk]) : (Acc)0;
            int nn;
            if (trans_b) { nn = e / OPC_GEMM_BK; kk = e % OPC_GEMM_BK; }  /* B is [N, K]: k contiguous */
            else { kk = e / OPC_GEMM_BN; nn = e % OPC_GEMM_BN; }          /* B is [K, N]: n contiguous */
            int64_t gn = n0 + nn;
            gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < K) ? Tr::load(trans_b ? B[gn * K + gk] : B[gk * N + gn]) : (Acc)0;
        }
        __syncthreads();
        for (int kk = 0; kk < OPC_GEMM_BK; kk++) {
            Acc a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

    /* Epilogue, on the registers: bias, reserve store, activation, rounding. */
    for (int i = 0; i < 4; i++) {
        const int64_t gm = m0 + ty + 16 * i;
        if (gm >= M) continue;
        for (int j = 0; j < 4; j++) {
            const int64_t gn = n0 + tx + 16 * j;
            if (gn >= N) continue;
            Acc z = acc[i][j];
            if (bias) z += Tr::load(bias[gn]);
            const int64_t at = gm * N + gn;
            if (reserve) reserve[at] = Tr::store(z);
            out[at] = Tr::store(opc_cuda_gemm_act(z, act));
        }
    }
}

template <typename Tag>
static inline cudaError_t opc_cuda_gemm(int64_t batch, int64_t M, int64_t N, int64_t K,
                                        const typename opc_gemm_traits<Tag>::T *A, int64_t a_batch_stride, int trans_a,
                                        const typename opc_gemm_traits<Tag>::T *B, int64_t b_batch_stride, int trans_b,
                                        const typename opc_gemm_traits<Tag>::T *bias, int act,
                                        typename opc_gemm_traits<Tag>::T *out, typename opc_gemm_traits<Tag>::T *reserve) {
    if (batch <= 0 || M <= 0 || N <= 0) return cudaSuccess;
    dim3 grid((unsigned)((N + OPC_GEMM_BN - 1) / OPC_GEMM_BN), (unsigned)((M + OPC_GEMM_BM - 1) / OPC_GEMM_BM),
              (unsigned)batch);
    opc_cuda_gemm_kernel<Tag><<<grid, OPC_GEMM_THREADS>>>(M, N, K, A, a_batch_stride, trans_a, B, b_batch_stride,
                                                          trans_b, bias, act, out, reserve);
    return cudaGetLastError();
}

#define OPC_CUDA_GEMM_ENTRY(SUFFIX, T)                                                                   \
    static inline cudaError_t opc_cuda_gemm_##SUFFIX(int64_t batch, int64_t M, int64_t N, int64_t K,     \
                                                     const T *A, int64_t a_batch_stride, int trans_a,    \
                                                     const T *B, int64_t b_batch_stride, int trans_b,    \
                                                     const T *bias, int act, T *out, T *reserve) {       \
        return opc_cuda_gemm<opc_gemm_##SUFFIX##_tag>(batch, M, N, K, A, a_batch_stride, trans_a, B,     \
                                                      b_batch_stride, trans_b, bias, act, out, reserve); \
    }
OPC_CUDA_GEMM_ENTRY(f32, float)
OPC_CUDA_GEMM_ENTRY(f64, double)
OPC_CUDA_GEMM_ENTRY(f16, uint16_t)
OPC_CUDA_GEMM_ENTRY(bf16, uint16_t)
#undef OPC_CUDA_GEMM_ENTRY

#endif /* OPC_CUDA_GEMM_CUH */
