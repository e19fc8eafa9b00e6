"""The machine's limits the benchmarks compare against, measured here and now (issue 37 item 5).

- Peak f32 FMA rate of one core, in GFLOP/s: the widest FMA the CPU reports at run time
  (`__builtin_cpu_supports`: AVX-512F, else AVX2 with FMA, else scalar fmaf), 12 independent
  accumulators so that the FMA latency is hidden, every FMA counted as 2 flops. Times the thread
  count for a multi-threaded row.
- Copy bandwidth in GB/s: memcpy of a buffer far larger than the caches, bytes read + written.

Both are the best of several runs in the thread's CPU time (so a busy machine still gives the
core's own rate), measured in a small C program built with gcc (-O2, each ISA's function compiled
for it by `target` attributes, so the binary runs on any x86-64).

    python3 bench/peak.py            # prints both
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#define ACC 12
/* the accumulators' loop is unrolled so that they live in registers: at -O2 gcc keeps the loop,
 * and acc[] in memory (a load, FMA and store each) runs at half the FMA rate */
/* the thread's CPU time: a core shared with other processes still gives its own rate */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#if defined(__x86_64__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
__attribute__((target("avx512f"), noinline)) static float fma512(long n, float a, float b) {
    v16 acc[ACC];
    for (int i = 0; i < ACC; i++) acc[i] = (v16){0} + (float)i;
    for (long k = 0; k < n; k++)
        _Pragma("GCC unroll 16") for (int i = 0; i < ACC; i++) acc[i] = acc[i] * a + b;
    float s = 0; for (int i = 0; i < ACC; i++) for (int j = 0; j < 16; j++) s += acc[i][j];
    return s;
}
__attribute__((target("avx2,fma"), noinline)) static float fma256(long n, float a, float b) {
    v8 acc[ACC];
    for (int i = 0; i < ACC; i++) acc[i] = (v8){0} + (float)i;
    for (long k = 0; k < n; k++)
        _Pragma("GCC unroll 16") for (int i = 0; i < ACC; i++) acc[i] = acc[i] * a + b;
    float s = 0; for (int i = 0; i < ACC; i++) for (int j = 0; j < 8; j++) s += acc[i][j];
    return s;
}
#endif
__attribute__((noinline)) static float fma1(long n, float a, float b) {
    float acc[ACC];
    for (int i = 0; i < ACC; i++) acc[i] = (float)i;
    for (long k = 0; k < n; k++)
        _Pragma("GCC unroll 16") for (int i = 0; i < ACC; i++) acc[i] = fmaf(acc[i], a, b);
    float s = 0; for (int i = 0; i < ACC; i++) s += acc[i];
    return s;
}

int main(int argc, char **argv) {
    volatile float a = 0.999999f, b = 1e-7f;
    const char *isa = "scalar"; int lanes = 1;
    float (*f)(long, float, float) = fma1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) { f = fma512; lanes = 16; isa = "avx512f"; }
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        f = fma256; lanes = 8; isa = "avx2+fma";
    }
#endif
    long n = 1L << 22;
    double best = 1e30, sink = 0;
    for (int r = 0; r < 7; r++) {
        double t = now(); sink += f(n, a, b); t = now() - t;
        if (t < best) best = t;
    }
    double gflops = 2.0 * n * ACC * lanes / best / 1e9;
    size_t bytes = (size_t)256 << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) return 1;
    memset(src, 1, bytes); memset(dst, 2, bytes);
    double bbest = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = now(); memcpy(dst, src, bytes); t = now() - t;
        if (t < bbest) bbest = t;
        sink += dst[r];
    }
    printf("%s %d %.3f %.3f %g\n", isa, lanes, gflops, 2.0 * bytes / bbest / 1e9, sink > 0 ? 0.0 : 1.0);
    free(src); free(dst);
    return 0;
}
"""


@dataclass(frozen=True)
class Peak:
    isa: str  # the FMA found at run time: avx512f, avx2+fma or scalar
    lanes: int  # f32 lanes of one FMA
    gflops_per_core: float  # f32 FMA peak of one core
    copy_gbps: float  # memcpy bandwidth, bytes read + written per second

    def gflops(self, threads: int) -> float:
        return self.gflops_per_core * threads


@functools.cache
def measure() -> Peak:
    cc = os.environ.get("CC", "gcc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "peak"
        subprocess.run([cc, "-O2", "-x", "c", "-o", str(exe), "-", "-lm"], input=PROBE, text=True, check=True,
                       capture_output=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    return Peak(out[0], int(out[1]), float(out[2]), float(out[3]))


def main() -> None:
    p = measure()
    print(f"peak f32 FMA ({p.isa}, {p.lanes} lanes): {p.gflops_per_core:.1f} GFLOP/s per core; "
          f"copy bandwidth {p.copy_gbps:.1f} GB/s (read + write)")


if __name__ == "__main__":
    main()
