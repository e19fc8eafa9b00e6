/* An experiment, NOT built into opc (bench/results/2026-12-03-busy.txt says why): a pool whose caller
 * never waits for a worker that has not started; opc_pool_experiment_gemm.diff ran the f32 GEMM on it. */
/* opc_pool.h -- a pool of threads whose caller never waits for a thread that has not started.
 *
 * opc_pool_run(pieces, fn, ctx, nt) runs fn(ctx, 0 .. pieces-1) on the calling thread and up to
 * nt - 1 workers. Every piece is claimed from one atomic word by whichever thread gets there
 * first, the caller included, and the call returns when every piece has run. A worker that the
 * OS has not scheduled yet (a busy machine: woken, but its core runs someone else for a slice)
 * finds the job done when it runs and goes back to sleep; the caller never waits for it. An
 * OpenMP region cannot do that: its end is a barrier for the whole team, so on a busy machine
 * each region waits for its slowest thread to be scheduled once (measured: an empty 2-thread
 * region, median 2-5 ms under load; bench/results/2026-12-03-busy.txt). The pools of Eigen
 * (JAX) and onnxruntime work this way.
 *
 * The claim word: generation (24 bits) | pieces (20) | next piece (20). The caller writes the
 * job (fn, ctx), then publishes the word; a thread claims piece i by a compare-and-swap from
 * (g, n, i) to (g, n, i + 1), i < n, after reading the job, so a successful claim proves the job
 * it read is generation g's, still running (the caller writes the next job only once every piece
 * of this one is claimed and done). Workers spin OPC_POOL_SPIN rounds for the next job, then
 * sleep on a futex (a busy machine's core is better given to the thread with work).
 * One caller at a time: a second concurrent caller (another Python thread) runs its pieces alone.
 * After fork() the child has no workers: it starts its own.
 *
 * One pool per extension module (weak, hidden: the module and its runtime objects share it).
 * Linux/glibc with -fopenmp (which links pthreads); elsewhere opc_pool_run runs the pieces in
 * order on the caller. C only. */
#ifndef OPC_POOL_H
#define OPC_POOL_H

#include <stdint.h>

typedef void (*opc_pool_fn)(void *ctx, int64_t piece);

#if defined(_OPENMP) && defined(__linux__) && !defined(OPC_POOL_OFF)
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPC_POOL_MAX 64        /* workers at most */
#define OPC_POOL_PIECES_MAX ((1 << 20) - 1)
#ifndef OPC_POOL_SPIN
#define OPC_POOL_SPIN 2000     /* pause rounds a worker waits for the next job before it sleeps */
#endif
#ifndef OPC_POOL_WAIT_SPIN
#define OPC_POOL_WAIT_SPIN 100 /* pause rounds the caller waits for the last pieces before it yields */
#endif

typedef struct {
    _Atomic uint64_t word;     /* gen << 40 | pieces << 20 | next */
    _Atomic int64_t done;      /* pieces of the current job finished */
    _Atomic(opc_pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int want;          /* workers the current job may use */
    _Atomic uint32_t seq;      /* the word's generation, the futex sleeping workers wait on */
    _Atomic int sleepers;
    int workers;               /* started (in this process) */
    pid_t pid;                 /* the process that started them */
    pthread_mutex_t caller;    /* one caller at a time */
} opc_pool_t;

__attribute__((weak, visibility("hidden"))) opc_pool_t opc_rt_pool = {.caller = PTHREAD_MUTEX_INITIALIZER};

static inline void opc_pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#define OPC_POOL_GEN(w) ((w) >> 40)
#define OPC_POOL_N(w) (((w) >> 20) & OPC_POOL_PIECES_MAX)
#define OPC_POOL_NEXT(w) ((w) & OPC_POOL_PIECES_MAX)

/* Claim and run pieces of the published job until none is left; worker: its index (-1: the caller). */
static inline void opc_pool_work(opc_pool_t *p, int worker) {
    uint64_t w = atomic_load_explicit(&p->word, memory_order_acquire);
    while (OPC_POOL_NEXT(w) < OPC_POOL_N(w)) {
        opc_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        if (worker >= atomic_load_explicit(&p->want, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak_explicit(&p->word, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* w reloaded: another thread's claim, or the next job */
        fn(ctx, (int64_t)OPC_POOL_NEXT(w));
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        w = atomic_load_explicit(&p->word, memory_order_acquire);
    }
}

static void *opc_pool_worker(void *arg) {
    opc_pool_t *p = &opc_rt_pool;
    const int me = (int)(intptr_t)arg;
    uint64_t seen = OPC_POOL_GEN(atomic_load_explicit(&p->word, memory_order_acquire));
    for (;;) {
        uint64_t w = 0;
        for (int i = 0; i < OPC_POOL_SPIN; i++) {
            w = atomic_load_explicit(&p->word, memory_order_acquire);
            if (OPC_POOL_GEN(w) != seen) break;
            opc_pool_pause();
        }
        if (OPC_POOL_GEN(w) == seen) {
            atomic_fetch_add(&p->sleepers, 1); /* seq_cst: the caller's store of seq and its load */
            uint32_t s;                        /* of sleepers, and these two, see each other */
            while ((s = atomic_load(&p->seq)) == (uint32_t)seen)
                syscall(SYS_futex, &p->seq, FUTEX_WAIT_PRIVATE, s, NULL, NULL, 0);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = OPC_POOL_GEN(atomic_load_explicit(&p->word, memory_order_acquire));
        opc_pool_work(p, me);
    }
    return NULL;
}

/* Workers 0 .. n-1 started in this process (after fork() the child starts its own); 0 if none could be. */
static inline int opc_pool_start(opc_pool_t *p, int n) {
    if (p->pid != getpid()) { /* a forked child: the parent's workers are not here */
        p->pid = getpid();
        p->workers = 0;
        atomic_store(&p->sleepers, 0);
    }
    if (n > OPC_POOL_MAX) n = OPC_POOL_MAX;
    while (p->workers < n) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, opc_pool_worker, (void *)(intptr_t)p->workers);
        pthread_attr_destroy(&attr);
        if (err) break;
        p->workers++;
    }
    return p->workers < n ? p->workers : n;
}

static inline void opc_pool_run(int64_t pieces, opc_pool_fn fn, void *ctx, int nt) {
    opc_pool_t *p = &opc_rt_pool;
    if (pieces <= 0) return;
    if (nt < 2 || pieces == 1 || pieces > OPC_POOL_PIECES_MAX || pthread_mutex_trylock(&p->caller) != 0) {
        for (int64_t i = 0; i < pieces; i++) fn(ctx, i);
        return;
    }
    const int helpers = opc_pool_start(p, nt - 1);
    if (helpers < 1) {
        pthread_mutex_unlock(&p->caller);
        for (int64_t i = 0; i < pieces; i++) fn(ctx, i);
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->want, helpers, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint64_t gen = (OPC_POOL_GEN(atomic_load_explicit(&p->word, memory_order_relaxed)) + 1) & 0xFFFFFF;
    atomic_store_explicit(&p->word, gen << 40 | (uint64_t)pieces << 20, memory_order_release);
    atomic_store(&p->seq, (uint32_t)gen); /* seq_cst: see opc_pool_worker */
    if (atomic_load(&p->sleepers) > 0) syscall(SYS_futex, &p->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    opc_pool_work(p, -1);
    /* every piece is claimed; wait for those other threads are running (a short wait: a piece) */
    for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < pieces; i++) {
        if (i < OPC_POOL_WAIT_SPIN) opc_pool_pause();
        else sched_yield(); /* the thread with the piece may be waiting for this core */
    }
    pthread_mutex_unlock(&p->caller);
}

#else /* no threads: the pieces in order */
static inline void opc_pool_run(int64_t pieces, opc_pool_fn fn, void *ctx, int nt) {
    (void)nt;
    for (int64_t i = 0; i < pieces; i++) fn(ctx, i);
}
#endif

#endif /* OPC_POOL_H */
