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
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Pieces per thread that a parallel loop's work is cut into, claimed one at a time
 * (schedule(dynamic)): on a busy machine the OS deschedules one of the team's threads for
 * milliseconds, and with one static share per thread the others then wait for it at the
 * region's end; with several pieces each, the running threads take the waiting thread's
 * pieces (as the pools of Eigen and onnxruntime do). bench/results/2026-12-03-busy.txt. */
#ifndef OPC_PAR_CHUNKS
#define OPC_PAR_CHUNKS 4
#endif

__attribute__((weak, visibility("hidden"))) int opc_rt_threads = 0;

static inline int opc_num_threads(void) {
#ifdef _OPENMP
    return opc_rt_threads > 0 ? opc_rt_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

/* The least work (in a kernel's own units) a parallel region must carry to pay for itself, given
 * min_work, the least where idle threads spin. Where they sleep, a region pays their wake-up (25-50
 * us on the 2-core VMs, bench/results/2026-12-03-wake-up.txt): OPC_PASSIVE_SCALE times the work
 * under OMP_WAIT_POLICY=passive, OPC_SHORT_SPIN_SCALE under a GOMP_SPINCOUNT under OPC_SHORT_SPIN,
 * which keeps them awake only between back-to-back regions; opc/threads.py picks passive or a spin
 * of OPC_SHORT_SPIN rounds, which spans a call's serial stretches. Read once. */
#ifndef OPC_PASSIVE_SCALE
#define OPC_PASSIVE_SCALE 16
#endif
#ifndef OPC_SHORT_SPIN_SCALE
#define OPC_SHORT_SPIN_SCALE 4
#endif
#define OPC_SHORT_SPIN 100000
__attribute__((weak, visibility("hidden"))) int opc_rt_par_scale = 0; /* 0: not read yet */

/* OPC_PASSIVE_SCALE, OPC_SHORT_SPIN_SCALE or 1, by libgomp's wait policy in the environment. */
static inline int opc_par_scale_of_policy(void) {
    const char *p = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (p && (p[0] == 'p' || p[0] == 'P')) return OPC_PASSIVE_SCALE; /* PASSIVE, any case */
    if (p || !spin) return 1;                                        /* active, or libgomp's default spin */
    char *end;
    const long long rounds = strtoll(spin, &end, 10);
    return end != spin && *end == 0 && rounds < OPC_SHORT_SPIN ? OPC_SHORT_SPIN_SCALE : 1;
}

static inline long long opc_par_min(long long min_work) {
    int scale = __atomic_load_n(&opc_rt_par_scale, __ATOMIC_RELAXED);
    if (scale == 0) {
        scale = opc_par_scale_of_policy();
        __atomic_store_n(&opc_rt_par_scale, scale, __ATOMIC_RELAXED);
    }
    return min_work * scale;
}

/* The chunk of schedule(dynamic, chunk) for `iters` iterations costing `work` in all: about
 * OPC_PAR_CHUNKS pieces per thread, none below `min_work` (where claiming a piece would cost
 * more than it could save). */
static inline long long opc_par_chunk(long long iters, long long work, long long min_work) {
    long long pieces = (long long)opc_num_threads() * OPC_PAR_CHUNKS;
    if (work > 0 && work / min_work < pieces) pieces = work / min_work;
    if (pieces < 1) pieces = 1;
    return iters > pieces ? (iters + pieces - 1) / pieces : 1;
}

#endif /* OPC_THREADS_H */
