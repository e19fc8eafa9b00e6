/* opc_threads.h -- opc's own thread count, independent of omp_set_num_threads.
 *
 * torch, NumPy's BLAS and opc may share one libgomp in a process (torch's wheel brings
 * libgomp.so.1, and the loader reuses it for opc's modules), so omp_set_num_threads is
 * everyone's. opc's parallel regions (the generated kernels, the GEMM, the row kernels)
 * ask for num_threads(opc_num_threads()) instead: opc_rt_threads, which opc.set_num_threads
 * / OPC_NUM_THREADS set in every loaded module through its opc_set_num_threads (opc/threads.py);
 * 0 (never set, e.g. a test that compiles a header by itself) falls back to OpenMP's count.
 * Weak and hidden: the module and its runtime objects share one per extension. C only. */
#ifndef OPC_THREADS_H
#define OPC_THREADS_H
#ifdef _OPENMP
#include <omp.h>
#endif

__attribute__((weak, visibility("hidden"))) int opc_rt_threads = 0;

static inline int opc_num_threads(void) {
#ifdef _OPENMP
    return opc_rt_threads > 0 ? opc_rt_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

#endif /* OPC_THREADS_H */
