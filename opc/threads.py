"""opc's thread count, its own setting, and the wait policy of OpenMP's threads.

The count: `opc.set_num_threads(n)`, else $OPC_NUM_THREADS, else $OMP_NUM_THREADS (its first
number), else the cores this process may run on. Every CPU module registers its
`opc_set_num_threads` when it is bound (runtime/opc_threads.h), and its parallel regions ask
for that many threads with `num_threads(...)`: `torch.set_num_threads` or any other
`omp_set_num_threads` in the process (one libgomp serves torch and opc) leaves opc's count alone.

The wait policy: libgomp's threads spin for a while (GOMP_SPINCOUNT, 300,000 rounds by default)
before they sleep, waiting for the next parallel region. On a machine whose cores are all busy
a spinning thread takes the core from the one that has work, and each region then waits for a
descheduled thread (a 256 matmul at 2 threads: best 0.19 ms, median 33-70 ms). Threads that
sleep at once (OMP_WAIT_POLICY=passive) cost a wake-up per region instead, tens of microseconds
on a VM, twice per region (the worker's start, the master's barrier): ResNet-18 at 64x64 ran
2.75 ms at 2 threads against 2.98 at 1. A spin of 100,000 rounds (about a millisecond) covers the
serial stretches between one call's regions, a run of small layers included, where 1,000 rounds
(tens of microseconds) did not: MobileNetV2 at 2 threads 0.46-0.47 ms against 0.56-0.59
(onnxruntime, which spins too, 0.55-0.59), and the kernels' parallel thresholds need no wake-up
margin (runtime/opc_threads.h). So `import opc` picks by the machine's load then: WAIT_POLICY
(that spin) on an idle machine, BUSY_POLICY (passive) on a busy one (`busy`: every core has another
runnable thread now, or the last minute's load says so and something else runs now), unless the user set
OMP_WAIT_POLICY or GOMP_SPINCOUNT, or OPC_WAIT_POLICY says which (`spin`, `passive`, or
`libgomp`: keep libgomp's default), or libgomp is already loaded (torch imported first: then
torch's choice stands, libgomp's default spin). libgomp reads the policy once, when it loads, so
a machine that turns busy later keeps the spin (a 256 matmul's median at 2 threads 0.095-5.3 ms
over two runs of bench/bench_threads.py against passive's 0.13-0.14): OPC_WAIT_POLICY=passive
is the choice for a process that will share its cores. Where libgomp's default spin was loaded
first, opc will run more than one thread and the load average says every core is already busy, it
warns once, in one line, what to do (on a busy machine the default spin made a 256 matmul's median
65-100x slower, bench/results/2026-12-03-busy.txt).
bench/bench_threads.py measures the policies; docs/performance.md, Threads, says how; bench/results/ has the figures.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opc.errors import InputError, OpcError

# the environment opc gives libgomp when the user chose nothing: on an idle machine, and on a busy
# one (measured: bench/bench_threads.py, bench/bench_models_cpu.py --threads 2)
WAIT_POLICY = {"GOMP_SPINCOUNT": "100000"}
BUSY_POLICY = {"OMP_WAIT_POLICY": "passive"}
POLICIES = {"spin": WAIT_POLICY, "passive": BUSY_POLICY}

_setters: dict[str, Callable[[int], None]] = {}  # each bound module's opc_set_num_threads, by its name
_count: int | None = None  # set_num_threads's value; None: the environment's
_lock = threading.Lock()


def default_num_threads() -> int:
    for var in ("OPC_NUM_THREADS", "OMP_NUM_THREADS"):
        text = os.environ.get(var, "").split(",")[0].strip()
        if not text:
            continue
        if not text.isdigit() or int(text) < 1:
            raise InputError(f"{var} must be a positive integer, got {os.environ[var]!r}")
        return int(text)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def get_num_threads() -> int:
    """The threads opc's parallel regions use."""
    return _count if _count is not None else default_num_threads()


def set_num_threads(n: int) -> None:
    """opc's thread count for every module, loaded or to come (not torch's, not OpenMP's global)."""
    global _count
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: n must be a positive int, got {n!r}")
    with _lock:
        _count = n
        for setter in _setters.values():
            setter(n)


def register(name: str, setter: Callable[[int], None]) -> None:
    """Module `name`'s opc_set_num_threads: given the current count now and every later one."""
    n = get_num_threads()
    with _lock:
        _setters[name] = setter
        setter(n)


@contextmanager
def one_thread(setter: Callable[[int], None]) -> Iterator[None]:
    """One module (its opc_set_num_threads) on one thread for the block, then on opc's count again."""
    with _lock:
        setter(1)
    try:
        yield
    finally:
        with _lock:
            setter(get_num_threads())


def libgomp_loaded() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


def apply_wait_policy() -> None:
    """WAIT_POLICY (BUSY_POLICY on a busy machine) into the environment, where the user chose no
    policy and libgomp is not yet loaded; OPC_WAIT_POLICY=spin|passive names one, =libgomp none."""
    chosen = os.environ.get("OPC_WAIT_POLICY", "")
    if chosen == "libgomp":
        return
    if any(v in os.environ for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        return
    if chosen and chosen not in POLICIES:  # a warning, not an error: `import opc` should not fail on it
        warnings.warn(f"opc: OPC_WAIT_POLICY must be spin, passive or libgomp, got {chosen!r}: ignored",
                      RuntimeWarning, stacklevel=3)
        chosen = ""
    if libgomp_loaded():
        try:
            threads = default_num_threads()
        except OpcError:
            threads = 1  # a bad OPC_NUM_THREADS is reported where the count is used
        if threads > 1 and busy():
            warnings.warn("opc: OpenMP was loaded before opc (torch imported first?) and its idle threads spin, "
                          "slow on this busy machine: set OMP_WAIT_POLICY=passive before importing torch",
                          RuntimeWarning, stacklevel=3)
        return
    os.environ.update(POLICIES[chosen] if chosen else BUSY_POLICY if busy() else WAIT_POLICY)


def busy() -> bool:
    """Every core has another runnable thread now, or the last minute's load average is at least the
    machine's cores and some other thread runs now. The load average alone lags by a minute: after
    2-thread processes on 2 cores it reads 2.0 although nothing runs any more, and the next process
    chose passive threads (four of the five of round 17's bench_models_cpu repeats, whose 2-thread
    figures then fell to their slow mode): ResNet-18 at 64x64 at 2 threads took 2.33-2.51 ms passive
    against 1.47-1.62 with the spin, back to back. A machine that just turned busy shows in the
    running count before the load average catches up."""
    others = running_others()
    if others is None:
        return False
    cores = os.cpu_count() or 1
    if others >= cores:
        return True
    try:
        load = os.getloadavg()[0]
    except OSError:
        return False
    return others >= 1 and load >= cores


def running_others() -> int | None:
    """The runnable threads at this moment (/proc/loadavg's running count) but this one; None where
    it cannot be read."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return None
