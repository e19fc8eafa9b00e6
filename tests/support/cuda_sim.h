/* cuda_sim.h -- runs opc's generated CUDA kernels on the CPU, for tests on machines
 * without a GPU (tests/test_cuda.py). It emulates only what the generated kernels
 * use: the threads of one block run as std::threads (blocks one after another, so a
 * __shared__ variable can be a static one); __syncthreads and the warp shuffles are
 * barriers over the block or the warp, and a barrier that not every thread reaches
 * (a __syncthreads or full-mask shuffle in divergent code: undefined behaviour on a
 * GPU) is, after a timeout, released and reported as a CUDA error of the launch. cudaMalloc fills its buffer with
 * 0xff bytes (NaN), so an element a kernel forgets to write shows up in the results.
 * Not emulated: the GEMM's 3-D grid (cuda_sim_library.h stands in), timing, memory ordering
 * between threads other than through the barriers. The runtime nn kernels (opc_nn.cuh) build
 * against it as they are (tests/support/cuda_simulator.py's nn_kernels). */
#ifndef OPC_CUDA_SIM_H
#define OPC_CUDA_SIM_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <stdint.h>
#include <math.h>

#define __global__
#define __launch_bounds__(n)
#define __shared__ static

struct opc_sim_dim3 { unsigned x, y, z; };
static thread_local opc_sim_dim3 threadIdx, blockIdx;
static opc_sim_dim3 blockDim, gridDim;

/* A reusable barrier for `count` threads; a wait longer than 20 s is a deadlock. */
static std::atomic<int> opc_sim_deadlock{0}; /* set when a barrier timed out; cudaGetLastError reports it */

class opc_sim_barrier {
  public:
    void reset(unsigned count) { count_ = count; waiting_ = 0; generation_ = 0; }
    void wait(const char *what) {
        std::unique_lock<std::mutex> lock(mutex_);
        unsigned gen = generation_;
        if (opc_sim_deadlock) return; /* released: the launch fails, the threads run out */
        if (++waiting_ == count_) {
            waiting_ = 0;
            ++generation_;
            cv_.notify_all();
            return;
        }
        if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return gen != generation_ || opc_sim_deadlock; })) {
            fprintf(stderr, "cuda_sim: %s not reached by every thread (deadlock)\n", what);
            opc_sim_deadlock = 1;
            ++generation_;
            cv_.notify_all();
        }
    }

  private:
    std::mutex mutex_;
    std::condition_variable cv_;
    unsigned count_ = 0, waiting_ = 0, generation_ = 0;
};

static opc_sim_barrier opc_sim_block_barrier;
static opc_sim_barrier opc_sim_warp_barrier[32];
static unsigned char opc_sim_lanes[1024][8]; /* each thread's shuffled value */

static inline void __syncthreads(void) { opc_sim_block_barrier.wait("__syncthreads"); }

template <class T> static T opc_sim_shuffle(unsigned mask, T v, unsigned src) {
    if (mask != 0xffffffffu) { fprintf(stderr, "cuda_sim: partial shuffle masks are not emulated\n"); abort(); }
    unsigned me = threadIdx.x, warp = me / 32;
    memcpy(opc_sim_lanes[me], &v, sizeof v);
    opc_sim_warp_barrier[warp].wait("a warp shuffle");
    T out;
    memcpy(&out, opc_sim_lanes[warp * 32 + src], sizeof out);
    opc_sim_warp_barrier[warp].wait("a warp shuffle");
    return out;
}
template <class T> static T __shfl_down_sync(unsigned mask, T v, int off) {
    unsigned lane = threadIdx.x % 32;
    return opc_sim_shuffle(mask, v, lane + off < 32 ? lane + off : lane);  /* past the warp: its own value */
}
template <class T> static T __shfl_sync(unsigned mask, T v, int lane) { return opc_sim_shuffle(mask, v, lane); }
template <class T> static T __shfl_xor_sync(unsigned mask, T v, int off) {
    return opc_sim_shuffle(mask, v, (threadIdx.x % 32) ^ (unsigned)off);
}

/* kernel<<<blocks, threads>>>(args): one std::thread per thread of a block, which
 * runs the blocks one after another (a barrier between blocks: the static __shared__
 * storage is never used by two blocks at once). */
static void opc_sim_launch(unsigned blocks, unsigned threads, const std::function<void()> &kernel) {
    if (threads > 1024) { fprintf(stderr, "cuda_sim: more than 1024 threads per block\n"); abort(); }
    gridDim = {blocks, 1, 1};
    blockDim = {threads, 1, 1};
    opc_sim_block_barrier.reset(threads);
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
        opc_sim_warp_barrier[w].reset(32); /* a partial warp that shuffles never completes: UB caught */
    static opc_sim_barrier between_blocks;
    between_blocks.reset(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([t, blocks, &kernel] {
            threadIdx = {t, 0, 0};
            for (unsigned b = 0; b < blocks; ++b) {
                blockIdx = {b, 0, 0};
                kernel();
                between_blocks.wait("the end of a block");
            }
        });
    for (auto &th : pool) th.join();
}

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDefault };
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (*p == NULL) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n);
    return cudaSuccess;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    memcpy(dst, src, n);
    return cudaSuccess;
}
static inline cudaError_t cudaGetLastError(void) {
    int failed = opc_sim_deadlock.exchange(0);
    return failed ? 999 : cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t e) {
    return e == 999 ? "cuda_sim: a barrier not reached by every thread (deadlock)" : "cuda_sim error";
}
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }

#endif
