/* Max error of the runtime's vectorizable f64 math (runtime/opc_runtime.h) in ulps, against the
 * long double libm function (64-bit mantissa: 11 bits more than double, so the reference's own
 * error is below 1/1000 ulp of a double).
 *
 *   math_ulp_f64 NAME N MAX_ULP   NAME: exp, tanh, erf, log or sigmoid (1 / (1 + opc_exp(-|x|)),
 *                                 as opc lowers it). Checks N inputs spread over all 2^64 bit
 *                                 patterns (a fixed odd stride), N more spread over the bit
 *                                 patterns of [2^-30, 40] and of [-40, -2^-30] (where the
 *                                 functions are not saturated), and the special values; exit 1
 *                                 if an error exceeds MAX_ULP (a real number: the error is
 *                                 measured in fractions of an ulp), a special value is wrong, or
 *                                 NaN comes out where the reference is a number (or the other
 *                                 way round).
 *
 * tests/runtime/test_math_ulp.py runs it with a small N in both FMA contraction modes; docs/performance.md's
 * table (Vector math) comes from N = 2^27. The error is |got - ref| / ulp(ref rounded to double), the
 * ulp of a subnormal being 2^-1074. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opc_runtime.h"

#define BLOCK 4096

/* sigmoid as opc lowers it (opc/lowering/scalars.py): e = e^-|x|, 1 / (1 + e), times e for x < 0 */
static double sigmoid_opc(double x) {
    double e = opc_exp(-fabs(x)), r = 1.0 / (1.0 + e);
    return x < 0.0 ? e * r : r;
}
static long double sigmoid_ref(long double x) {
    return x < 0.0L ? expl(x) / (1.0L + expl(x)) : 1.0L / (1.0L + expl(-x));
}

typedef struct { const char *name; double (*fn)(double); long double (*ref)(long double); } entry;
static const entry TABLE[] = {{"exp", opc_exp, expl}, {"tanh", opc_tanh, tanhl}, {"erf", opc_erf, erfl},
                              {"log", opc_log, logl}, {"sigmoid", sigmoid_opc, sigmoid_ref}};

static double ulp_of(double y) {
    int e;
    if (y == 0.0 || fabs(y) < 2.2250738585072014e-308) return ldexp(1.0, -1074);
    frexp(y, &e);  /* y = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 53);
}

/* the error in ulps (inf where one side is inf / NaN and the other not, or signs of 0 differ) */
static double ulp_error(double got, long double ref) {
    double want = (double)ref;
    if (want != want || got != got) return (want != want) == (got != got) ? 0.0 : INFINITY;
    if (isinf(want) || isinf(got)) return got == want ? 0.0 : INFINITY;
    if (want == 0.0 && got == 0.0) return signbit(want) == signbit(got) ? 0.0 : INFINITY;
    return (double)(fabsl((long double)got - ref) / ulp_of(want));
}

/* one vectorized loop per function, as in a kernel */
static void apply(const entry *e, const double *restrict xs, double *restrict ys, int n) {
    if (e->fn == opc_exp) {  /* each loop calls its function directly, so gcc inlines and vectorizes it */
        for (int i = 0; i < n; i++) ys[i] = opc_exp(xs[i]);
    } else if (e->fn == opc_tanh) {
        for (int i = 0; i < n; i++) ys[i] = opc_tanh(xs[i]);
    } else if (e->fn == opc_erf) {
        for (int i = 0; i < n; i++) ys[i] = opc_erf(xs[i]);
    } else if (e->fn == opc_log) {
        for (int i = 0; i < n; i++) ys[i] = opc_log(xs[i]);
    } else {
        for (int i = 0; i < n; i++) ys[i] = sigmoid_opc(xs[i]);
    }
}

static double from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static uint64_t bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

typedef struct { double worst, worst_x; int64_t nan_wrong; } result;

/* inputs base + i * step (bit patterns, wrapping), i < count */
static void sweep(const entry *e, uint64_t base, uint64_t step, int64_t count, result *res) {
    #pragma omp parallel for schedule(dynamic)
    for (int64_t start = 0; start < count; start += BLOCK) {
        double xs[BLOCK], ys[BLOCK];
        int n = count - start < BLOCK ? (int)(count - start) : BLOCK;
        for (int i = 0; i < n; i++) xs[i] = from_bits(base + (uint64_t)(start + i) * step);
        apply(e, xs, ys, n);
        double local = 0.0, local_x = 0.0;
        int64_t nan_wrong = 0;
        for (int i = 0; i < n; i++) {
            long double want = e->ref((long double)xs[i]);
            if ((want != want) != (ys[i] != ys[i])) { nan_wrong++; continue; }
            double d = ulp_error(ys[i], want);
            if (d > local) local = d, local_x = xs[i];
        }
        #pragma omp critical
        {
            res->nan_wrong += nan_wrong;
            if (local > res->worst) res->worst = local, res->worst_x = local_x;
        }
    }
}

/* NaN, +-0 and +-inf exactly (sign included); other values within max_ulp */
static int check_special(const entry *e, double x, double max_ulp) {
    double got = e->fn(x);
    long double want = e->ref((long double)x);
    double d = ulp_error(got, want);
    int ok = d <= max_ulp;
    if (!ok) printf("%s(%.17g) = %.17g, want %.17Lg\n", e->name, x, got, want);
    return ok;
}

int main(int argc, char **argv) {
    const entry *e = NULL;
    for (size_t k = 0; argc == 4 && k < sizeof TABLE / sizeof TABLE[0]; k++)
        if (strcmp(argv[1], TABLE[k].name) == 0) e = &TABLE[k];
    if (!e) {
        fprintf(stderr, "error: usage: math_ulp_f64 exp|tanh|erf|log|sigmoid N MAX_ULP\n");
        return 1;
    }
    int64_t count = atoll(argv[2]);
    double max_ulp = atof(argv[3]);
    if (count < 1) {
        fprintf(stderr, "error: N must be at least 1\n");
        return 1;
    }
    result res = {0.0, 0.0, 0};
    sweep(e, 0, (UINT64_MAX / (uint64_t)count) | 1u, count, &res);  /* all bit patterns */
    uint64_t lo = bits(0x1p-30), hi = bits(40.0), step = ((hi - lo) / (uint64_t)count) | 1u;
    sweep(e, lo, step, count, &res);                                 /* [2^-30, 40] */
    sweep(e, lo | 0x8000000000000000u, step, count, &res);           /* [-40, -2^-30] */
    const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1e-300, -1e-300, 4.9e-324, -4.9e-324,
                              2.2250738585072014e-308, 1.0, -1.0, 0.625, -0.625, 6.0, -6.0, 20.0, -20.0,
                              709.78, 709.79, -745.1, -745.2, 1e300, -1e300, 0.5, 2.0};
    int ok = 1;
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) ok &= check_special(e, special[k], max_ulp);
    printf("%s: %lld inputs: max %.3f ulp at x = %.17g (got %.17g, want %.17Lg); NaN mismatches: %lld\n",
           e->name, (long long)(3 * count), res.worst, res.worst_x, e->fn(res.worst_x),
           e->ref((long double)res.worst_x), (long long)res.nan_wrong);
    return ok && res.nan_wrong == 0 && res.worst <= max_ulp ? 0 : 1;
}
