/* opc.attention's CPU kernels alone (runtime/opc_nn_attention.h): the transformer block's geometry
 * (batch 8 x 4 heads, 128 queries and keys, 64 features, f32), called directly, CPU time of the
 * thread (other jobs on a shared machine do not inflate it), best and median of N calls.
 *
 *   gcc -O3 -std=gnu11 -fopenmp -fno-math-errno -fno-trapping-math -march=native \
 *       -mprefer-vector-width=512 -I runtime bench/bench_attention_kernel.c runtime/opc_gemm_lib.c \
 *       -o /tmp/bench_attention_kernel -lm
 *   OMP_NUM_THREADS=1 /tmp/bench_attention_kernel LAYOUT GRAD CALLS COLD CAUSAL
 *
 * LAYOUT 1: q, k, v, out (and dout, dq, dk, dv) as the block's [8, 128, 4, 64] buffers seen through
 * strides (the heads' transposes folded, opc-schedule's strided views); 0: row-major [8, 4, 128, 64].
 * GRAD 1: attention_grad. COLD 1: 64 MB touched before each call (operands come from memory, as
 * after the projections' GEMMs). CAUSAL 1: is_causal (the block's), 0: no mask. The checksum is the
 * sum of the outputs (equal across layouts' bits only per layout: the inputs differ). */
#define OPC_NN_ENTRY
#include "opc_nn_api.h"
#include "opc_nn.h"
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static char *junk;
static void flush(void) {
    if (!junk) junk = calloc(64u << 20, 1);
    for (size_t i = 0; i < (64u << 20); i += 64) junk[i]++;
}

enum { B = 8, H = 4, L = 128, D = 64 };

int main(int argc, char **argv) {
    const int strided = argc > 1 ? atoi(argv[1]) : 1, grad = argc > 2 ? atoi(argv[2]) : 0;
    const int n = argc > 3 ? atoi(argv[3]) : 200, cold = argc > 4 ? atoi(argv[4]) : 0;
    const int64_t causal = argc > 5 ? atoi(argv[5]) : 1;
    const size_t N = (size_t)B * H * L * D;
    float *q = malloc(4 * N), *k = malloc(4 * N), *v = malloc(4 * N), *o = malloc(4 * N), *lse = malloc(4 * B * H * L);
    float *dout = malloc(4 * N), *dq = malloc(4 * N), *dk = malloc(4 * N), *dv = malloc(4 * N);
    double *t = malloc(sizeof(double) * (size_t)n);
    unsigned s = 1;
    for (size_t i = 0; i < N; i++) {
        float *x[4] = {q, k, v, dout};
        for (int a = 0; a < 4; a++) {
            s = s * 1103515245u + 12345u;
            x[a][i] = ((s >> 8) & 0xffff) / 32768.0f - 1;
        }
    }
    /* a layout: the row stride, then the batch dims' (b, h) strides */
    const int64_t r = strided ? H * D : D, s0 = L * H * D, s1 = strided ? D : L * D;
#define LAY r, s0, s1, 0, 0, 0, 0
#define GEOM B * H, L, L, D, D, causal, 0, 0, 0, 2, B, H, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0
    opc_nn_attention_f32(q, k, v, q, o, lse, GEOM, LAY, LAY, LAY, LAY, 0.125);
    for (int i = 0; i < n; i++) {
        if (cold) flush();
        const double t0 = now();
        if (grad)
            opc_nn_attention_grad_f32(q, k, v, o, lse, dout, q, dq, dk, dv, GEOM, LAY, LAY, LAY, LAY, LAY, LAY, LAY,
                                      LAY, 0.125);
        else
            opc_nn_attention_f32(q, k, v, q, o, lse, GEOM, LAY, LAY, LAY, LAY, 0.125);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)n, sizeof(double), cmp);
    double sum = 0;
    for (size_t i = 0; i < N; i++) sum += grad ? (double)dq[i] + dk[i] + dv[i] : o[i];
    printf("%s %s %s%s: best %.3f ms, median %.3f ms (checksum %.6f)\n", grad ? "grad" : "forward",
           strided ? "strided" : "row-major", causal ? "causal" : "no mask", cold ? ", cold" : "", t[0] * 1e3,
           t[n / 2] * 1e3, sum);
    return 0;
}
