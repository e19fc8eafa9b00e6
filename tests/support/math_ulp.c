/* Max error of the runtime's vectorizable f32 math (runtime/opc_runtime.h) in ulps, against
 * the double libm function rounded to float.
 *
 *   math_ulp NAME STRIDE MAX_ULP   NAME: exp, tanh, erf, log or sigmoid (1 / (1 + opc_expf(-x)),
 *                                  as opc lowers it); checks every STRIDE-th f32 bit pattern and
 *                                  the special values; exit 1 if an error exceeds MAX_ULP, a
 *                                  special value is wrong, or NaN comes out where the reference
 *                                  is a number (or the other way round).
 *
 * tests/test_math_ulp.py runs it on a sample (stride 4099) in both FMA contraction modes; the
 * full sweep is stride 1 (docs/performance.md, Vector math: the table of the maximum errors). The distance is
 * counted in representable floats between the two results (0 and -0 are one apart). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opc_runtime.h"

#define BLOCK 4096

/* sigmoid as opc lowers it (opc/lowering/scalars.py): e = e^-|x|, 1 / (1 + e), times e for x < 0 */
static float sigmoid_opc(float x) {
    float e = opc_expf(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x < 0.0f ? e * r : r;
}
static double sigmoid_ref(double x) { return x < 0.0 ? exp(x) / (1.0 + exp(x)) : 1.0 / (1.0 + exp(-x)); }

typedef struct { const char *name; float (*fn)(float); double (*ref)(double); } entry;
static const entry TABLE[] = {{"exp", opc_expf, exp}, {"tanh", opc_tanhf, tanh}, {"erf", opc_erff, erf},
                              {"log", opc_logf, log}, {"sigmoid", sigmoid_opc, sigmoid_ref}};

/* floats in order as integers: ord(a) - ord(b) counts the floats between them */
static int64_t ord(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}

/* NaN, +-0 and +-inf exactly (sign included); other values within max_ulp */
static int check_special(const entry *e, float x, int64_t max_ulp) {
    float got = e->fn(x), want = (float)e->ref((double)x);
    int exact = want != want || want == 0.0f || fabsf(want) == INFINITY;
    int ok = want != want ? got != got
           : exact ? memcmp(&got, &want, sizeof got) == 0 : llabs(ord(got) - ord(want)) <= max_ulp;
    if (!ok) printf("%s(%g) = %.9g, want %.9g\n", e->name, x, got, want);
    return ok;
}

/* one vectorized loop per function, as in a kernel */
static void apply(const entry *e, const float *restrict xs, float *restrict ys, int n) {
    if (e->fn == opc_expf) {  /* each loop calls its function directly, so gcc inlines and vectorizes it */
        for (int i = 0; i < n; i++) ys[i] = opc_expf(xs[i]);
    } else if (e->fn == opc_tanhf) {
        for (int i = 0; i < n; i++) ys[i] = opc_tanhf(xs[i]);
    } else if (e->fn == opc_erff) {
        for (int i = 0; i < n; i++) ys[i] = opc_erff(xs[i]);
    } else if (e->fn == opc_logf) {
        for (int i = 0; i < n; i++) ys[i] = opc_logf(xs[i]);
    } else {
        for (int i = 0; i < n; i++) ys[i] = sigmoid_opc(xs[i]);
    }
}

int main(int argc, char **argv) {
    const entry *e = NULL;
    for (size_t k = 0; argc == 4 && k < sizeof TABLE / sizeof TABLE[0]; k++)
        if (strcmp(argv[1], TABLE[k].name) == 0) e = &TABLE[k];
    if (!e) {
        fprintf(stderr, "error: usage: math_ulp exp|tanh|erf|log|sigmoid STRIDE MAX_ULP\n");
        return 1;
    }
    int64_t stride = atoll(argv[2]), max_ulp = atoll(argv[3]);
    if (stride < 1) {
        fprintf(stderr, "error: STRIDE must be at least 1\n");
        return 1;
    }
    int64_t count = ((1LL << 32) + stride - 1) / stride, worst = 0, nan_wrong = 0;
    float worst_x = 0.0f;
    #pragma omp parallel for schedule(dynamic) reduction(+:nan_wrong)
    for (int64_t start = 0; start < count; start += BLOCK) {
        float xs[BLOCK], ys[BLOCK];
        int n = count - start < BLOCK ? (int)(count - start) : BLOCK;
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)((start + i) * stride);
            memcpy(&xs[i], &u, sizeof u);
        }
        apply(e, xs, ys, n);
        int64_t local = 0;
        float local_x = 0.0f;
        for (int i = 0; i < n; i++) {
            float want = (float)e->ref((double)xs[i]);
            if (want != want || ys[i] != ys[i]) {
                nan_wrong += (want != want) != (ys[i] != ys[i]);
                continue;
            }
            int64_t d = llabs(ord(ys[i]) - ord(want));
            if (d > local) local = d, local_x = xs[i];
        }
        #pragma omp critical
        if (local > worst) worst = local, worst_x = local_x;
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-30f, -1e-30f, 1e-45f, -1e-45f,
                             1.0f, -1.0f, 4.0f, -4.0f, 9.5f, -20.0f, 100.0f, -100.0f, 1.17549435e-38f};
    int ok = 1;
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) ok &= check_special(e, special[k], max_ulp);
    printf("%s: %lld inputs: max %lld ulp at x = %.9g (got %.9g, want %.9g); NaN mismatches: %lld\n", e->name,
           (long long)count, (long long)worst, worst_x, e->fn(worst_x), (float)e->ref((double)worst_x),
           (long long)nan_wrong);
    return ok && nan_wrong == 0 && worst <= max_ulp ? 0 : 1;
}
