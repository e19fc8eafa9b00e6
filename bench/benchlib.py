"""What the benchmarks share: thread settings, the timer, checking numbers, the optional peers.

The benches are scripts (`python bench/NAME.py`), so bench/ is on sys.path and they
import this module as `common`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# numpy is imported inside the functions: OpenBLAS reads its thread count when numpy loads,
# which must come after apply_threads.


def apply_threads(n: int | None) -> int:
    """Give opc (OpenMP), NumPy (OpenBLAS/MKL), torch and JAX the same n threads (None: all cores).

    Must run before numpy, torch or jax start their thread pools. The process is pinned to n
    cores as well: that is the one setting JAX's CPU thread pool follows (XLA_FLAGS has no
    thread count), and OpenMP's default follows it too.
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    n = len(allowed) if n is None else max(1, min(n, len(allowed)))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, allowed[:n])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ.setdefault(*OPENBLAS_NO_SPIN)
    if n == 1 and "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    return n


def threads() -> int:
    """The thread count apply_threads chose (or the environment's, or all cores)."""
    return int(os.environ.get("OMP_NUM_THREADS", 0)) or len(os.sched_getaffinity(0))


CLOCK: Callable[[], float] = time.perf_counter
"""The rounds' clock: wall time, or time.thread_time (bench_cpu.py --clock thread: the calling thread's
CPU time, which other jobs on a shared machine do not inflate; only for contenders computing in the
calling thread, i.e. one thread)."""


OPENBLAS_NO_SPIN = ("OPENBLAS_THREAD_TIMEOUT", "4")
"""OpenBLAS's worker threads spin 2^28 cycles (about 70 ms) after each call before they sleep: in
a bench that runs NumPy between the others, that spin took a core from whoever came next (torch's
and JAX's 2-thread GEMMs ran at their 1-thread speed, 2.5 against 1.3 ms). 2^4 cycles: they sleep
at once. Read when OpenBLAS loads, so it is set before NumPy's import (apply_threads)."""

SETTLE_S = 0.02
"""Idle time before each contender's turn: the runtimes' pools spin after their work (onnxruntime's
intra-op threads, OpenBLAS's, Eigen's for JAX, libgomp's unless passive) and, on a machine with as
many cores as threads, a pool still spinning takes a core from the next contender. Without it, torch
right after onnxruntime ran the transformer block at 2 threads no faster than at 1 (13.0 against
7.5 ms alone)."""


def settle() -> None:
    time.sleep(SETTLE_S)


def best_of(fns: dict[str, Callable[[], object]], repeat: int = 7, min_time: float = 0.05) -> dict[str, float]:
    """Best seconds per call of each function, the rounds interleaved.

    Each round runs every function in turn, enough times to last about min_time, so a
    shared machine's load hits all contenders alike; the best of `repeat` rounds is kept.
    Each turn starts after SETTLE_S of idle time (the others' pools asleep).
    """
    inner = {}
    for name, fn in fns.items():
        fn()  # warm-up: caches, lazy initialization, JIT
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        inner[name] = max(1, int(min_time / once))
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            settle()
            t0 = CLOCK()
            for _ in range(inner[name]):
                fn()
            times[name].append((CLOCK() - t0) / inner[name])
    return {name: min(t) for name, t in times.items()}


def best(fn: Callable[[], object], repeat: int = 7, min_time: float = 0.2) -> float:
    """Best seconds per call of one function (min_time is spread over the rounds)."""
    return best_of({"fn": fn}, repeat, min_time / repeat)["fn"]


def best_ms(fn: Callable[[], object], calls: int, clock: Callable[[], float], rounds: int = 5) -> float:
    """Best milliseconds per call over `rounds` runs of `calls` calls each, timed by `clock`, after one
    warm-up call (the CNN and stage rows: one contender at a time, not interleaved)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        for _ in range(calls):
            fn()
        best = min(best, (clock() - t0) / calls)
    return best * 1e3


def scaled_error(got, want) -> float:
    """max |got - want| / max(1, max |want|): one number for outputs of any magnitude."""
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    diff = np.abs(np.nan_to_num(got) - np.nan_to_num(want))
    return float(diff.max(initial=0.0) / max(1.0, float(np.abs(np.nan_to_num(want)).max(initial=0.0))))


def check(name: str, got, want, tol: float = 2e-3, against: str = "NumPy") -> None:
    """Stop the bench loudly when a contender's numbers are wrong: a fast wrong answer is no result."""
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    if len(got) != len(want):
        raise SystemExit(f"bench: {name} returned {len(got)} outputs, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        err = scaled_error(g, w)
        if not err <= tol:
            raise SystemExit(f"bench: {name} disagrees with {against} "
                             f"(output {i}: scaled max error {err:.2e} > {tol:.0e})")


def import_torch():
    """torch with the bench's thread count, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads())
    return torch


def import_jax():
    """jax, or None where it is not installed."""
    try:
        import jax
    except ImportError:
        return None
    return jax


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "(install threadpoolctl to see NumPy's BLAS)"
    return "; ".join(f"{i['internal_api']} {i.get('architecture', '')} threads={i['num_threads']}"
                     for i in threadpool_info())
