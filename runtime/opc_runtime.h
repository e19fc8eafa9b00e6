/* opc_runtime.h -- scalar helpers shared by opc's generated C and CUDA code.
 *
 * Header only. Compiles as C99 (gcc) and as CUDA C++ (nvcc); every function is
 * OPC_FN (static inline, plus __host__ __device__ under nvcc).
 * Nothing in here relies on undefined behaviour: bit casts go through memcpy
 * (or the CUDA intrinsics in device code), float->int casts are range-checked
 * before the C conversion, shifts never exceed the operand width.
 */
#ifndef OPC_RUNTIME_H
#define OPC_RUNTIME_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#ifdef __CUDACC__
#define OPC_FN static inline __host__ __device__
#else
#define OPC_FN static inline
#endif

/* A run-time element count as an allocation asks for it: at least 1 (malloc(0) may give NULL). */
OPC_FN int64_t opc_max1(int64_t n) { return n > 1 ? n : 1; }

/* Under ASan (OPC_SANITIZE=1) the runtime's per-thread scratch buffers are reused only at the size
   asked for, and the slack of an aligned block is poisoned: a grow-only buffer kept from a larger
   call, or the bytes an alignment adds, would otherwise let a kernel run past what it asked for
   unseen. Elsewhere a buffer at least as large is reused and nothing is poisoned. */
#if defined(__SANITIZE_ADDRESS__)
#define OPC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OPC_ASAN 1
#endif
#endif
#ifdef OPC_ASAN
#include <sanitizer/asan_interface.h>
#define OPC_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define OPC_SCRATCH_FITS(cap, bytes) ((cap) == (bytes))
#else
#define OPC_POISON(p, n) ((void)(p), (void)(n))
#define OPC_SCRATCH_FITS(cap, bytes) ((cap) >= (bytes))
#endif

/* ------------------------------------------------------------------------ */
/* Bit casts. memcpy is the portable, UB-free way to reinterpret bits in C;  */
/* compilers turn it into a register move. In CUDA device code use the      */
/* intrinsics (memcpy works there too, but the intrinsics are guaranteed     */
/* free).                                                                    */
/* ------------------------------------------------------------------------ */
OPC_FN uint32_t opc_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u; memcpy(&u, &f, sizeof u); return u;
#endif
}
OPC_FN float opc_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f; memcpy(&f, &u, sizeof f); return f;
#endif
}
OPC_FN uint64_t opc_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u; memcpy(&u, &d, sizeof u); return u;
#endif
}
OPC_FN double opc_bits_f64(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d; memcpy(&d, &u, sizeof d); return d;
#endif
}

/* ------------------------------------------------------------------------ */
/* IEEE binary16 (f16). Storage is uint16_t; arithmetic happens in f32.      */
/* Conversions round to nearest, ties to even, handle subnormals, overflow   */
/* to +-inf, and keep NaN a NaN. NaN payloads follow NumPy's software        */
/* conversion (top mantissa bits kept; a payload that would vanish becomes   */
/* 0x7c01) so results are bit-identical to ndarray.astype(np.float16).       */
/* f64 -> f16 rounds once, directly from the double (no double rounding via  */
/* f32), as NumPy does.                                                      */
/* ------------------------------------------------------------------------ */
OPC_FN float opc_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t man = (uint32_t)h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) {                      /* inf / NaN */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {                   /* normal */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {                   /* +-0 */
        bits = sign;
    } else {                                 /* subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 5.9604644775390625e-08f;
        bits = sign | opc_f32_bits(v);
    }
    return opc_bits_f32(bits);
}

OPC_FN uint16_t opc_f32_to_f16(float f) {
    uint32_t x = opc_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                 /* inf / NaN */
        if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        {
            uint32_t r = 0x7c00u + ((ax & 0x007fffffu) >> 13);
            if (r == 0x7c00u) r++;
            return (uint16_t)(sign | r);
        }
    }
    if (ax >= 0x47800000u)                   /* >= 2^16: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {                 /* normal in f16 (>= 2^-14) */
        uint32_t base = ax - 0x38000000u;    /* rebias exponent 127 -> 15 */
        uint32_t q = base >> 13, rem = base & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;   /* may carry into inf: correct */
        return (uint16_t)(sign | q);
    }
    if (ax <= 0x33000000u)                   /* <= 2^-25: rounds to zero (tie at 2^-25 -> even 0) */
        return sign;
    {                                        /* f16 subnormal */
        uint32_t e = ax >> 23;               /* 102..112 */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;           /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
}

OPC_FN uint16_t opc_f64_to_f16(double d) {
    uint64_t x = opc_f64_bits(d);
    uint16_t sign = (uint16_t)((x >> 48) & 0x8000u);
    uint64_t ax = x & 0x7fffffffffffffffull;
    if (ax >= 0x7ff0000000000000ull) {       /* inf / NaN */
        if (ax == 0x7ff0000000000000ull) return (uint16_t)(sign | 0x7c00u);
        {
            uint32_t r = 0x7c00u + (uint32_t)((ax & 0x000fffffffffffffull) >> 42);
            if (r == 0x7c00u) r++;
            return (uint16_t)(sign | r);
        }
    }
    if (ax >= 0x40f0000000000000ull)         /* >= 2^16 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x3f10000000000000ull) {       /* >= 2^-14: normal */
        uint64_t base = ax - 0x3f00000000000000ull;   /* rebias 1023 -> 15 */
        uint64_t q = base >> 42, rem = base & 0x3ffffffffffull;
        const uint64_t half = 0x20000000000ull;
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | (uint16_t)q);
    }
    if (ax <= 0x3e60000000000000ull)         /* <= 2^-25 */
        return sign;
    {
        uint64_t e = ax >> 52;               /* 998..1008 */
        uint64_t m = (ax & 0x000fffffffffffffull) | 0x0010000000000000ull;
        uint64_t shift = 1051u - e;          /* 43..53 */
        uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1u), half = 1ull << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | (uint16_t)q);
    }
}

/* ------------------------------------------------------------------------ */
/* bfloat16: the top 16 bits of an f32. Round to nearest even; NaN becomes   */
/* the canonical quiet NaN (sign kept), as ml_dtypes.bfloat16 does. f64 ->   */
/* bf16 rounds once, directly from the double: ml_dtypes does so too (e.g.   */
/* 1 + 2^-8 + 2^-30 rounds up, via f32 it would tie and round down).         */
/* ------------------------------------------------------------------------ */
OPC_FN float opc_bf16_to_f32(uint16_t h) {
    return opc_bits_f32((uint32_t)h << 16);
}

OPC_FN uint16_t opc_f32_to_bf16(float f) {
    uint32_t x = opc_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    x += 0x7fffu + ((x >> 16) & 1u);        /* cannot overflow 32 bits: |x| <= inf here */
    return (uint16_t)(x >> 16);
}

OPC_FN uint16_t opc_f64_to_bf16(double d) {
    uint64_t x = opc_f64_bits(d);
    uint16_t sign = (uint16_t)((x >> 48) & 0x8000u);
    uint64_t ax = x & 0x7fffffffffffffffull;
    if (ax > 0x7ff0000000000000ull) return (uint16_t)(sign | 0x7fc0u);
    if (ax == 0x7ff0000000000000ull) return (uint16_t)(sign | 0x7f80u);
    {
        int64_t e = (int64_t)(ax >> 52);     /* biased double exponent */
        int64_t ef = e - 1023 + 127;         /* biased f32 exponent */
        if (ef >= 255) return (uint16_t)(sign | 0x7f80u);
        if (ef >= 1) {                       /* normal bf16 range */
            /* bf16 mantissa = 7 bits; drop 45 bits of the 52-bit mantissa */
            uint64_t base = ((uint64_t)ef << 52) | (ax & 0x000fffffffffffffull);
            uint64_t q = base >> 45, rem = base & 0x1fffffffffffull;
            const uint64_t half = 0x100000000000ull;
            if (rem > half || (rem == half && (q & 1u))) q++;   /* carry into inf is correct */
            return (uint16_t)(sign | (uint16_t)q);
        }
        /* bf16 subnormal: unit 2^-133. value = m * 2^(e-1075) */
        if (e == 0) return sign;             /* double subnormal: far below 2^-134 */
        {
            uint64_t m = (ax & 0x000fffffffffffffull) | 0x0010000000000000ull;
            int64_t shift = 1075 - 133 - e;  /* = 942 - e; ef<=0 -> e<=896 -> shift >= 46 */
            if (shift > 54) return sign;     /* value < 2^-134 (half unit): rounds to 0 */
            {
                uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1u), half = 1ull << (shift - 1);
                if (rem > half || (rem == half && (q & 1u))) q++;
                return (uint16_t)(sign | (uint16_t)q);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Saturating float -> int casts. In C, converting a float whose truncated    */
/* value does not fit the target type (or NaN) is undefined behaviour, and   */
/* x86 returns the "integer indefinite" value. opc's cast semantics are:     */
/* truncate toward zero, saturate to [min, max], NaN -> 0, so the range is    */
/* checked before the conversion. The bounds are exact doubles: for int64,   */
/* 2^63 itself is out of range (compare with 9223372036854775808.0).          */
/* ------------------------------------------------------------------------ */
OPC_FN int8_t opc_sat_i8(double x) {
    if (x != x) return 0;
    if (x <= -128.0) return INT8_MIN;
    if (x >= 127.0) return INT8_MAX;
    return (int8_t)x;
}
OPC_FN uint8_t opc_sat_u8(double x) {
    if (!(x > 0.0)) return 0;                /* NaN, negatives (incl. -0.5 -> 0) */
    if (x >= 255.0) return UINT8_MAX;
    return (uint8_t)x;
}
OPC_FN int16_t opc_sat_i16(double x) {
    if (x != x) return 0;
    if (x <= -32768.0) return INT16_MIN;
    if (x >= 32767.0) return INT16_MAX;
    return (int16_t)x;
}
OPC_FN uint16_t opc_sat_u16(double x) {
    if (!(x > 0.0)) return 0;
    if (x >= 65535.0) return UINT16_MAX;
    return (uint16_t)x;
}
OPC_FN int32_t opc_sat_i32(double x) {
    if (x != x) return 0;
    if (x <= -2147483648.0) return INT32_MIN;
    if (x >= 2147483647.0) return INT32_MAX;
    return (int32_t)x;
}
OPC_FN uint32_t opc_sat_u32(double x) {
    if (!(x > 0.0)) return 0;
    if (x >= 4294967295.0) return UINT32_MAX;
    return (uint32_t)x;
}
OPC_FN int64_t opc_sat_i64(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return INT64_MAX;   /* 2^63: not an int64 */
    if (x <= -9223372036854775808.0) return INT64_MIN;  /* -2^63 is exact */
    return (int64_t)x;
}
OPC_FN uint64_t opc_sat_u64(double x) {
    if (!(x > 0.0)) return 0;
    if (x >= 18446744073709551616.0) return UINT64_MAX; /* 2^64 */
    return (uint64_t)x;
}

/* Integer a^b (opc.pow of integers): repeated squaring in uint64_t, so it   */
/* wraps like NumPy's integer power; the caller truncates to its width. A    */
/* negative b gives 1 / a^-b truncated: 0 unless a is 1 or -1.               */
OPC_FN int64_t opc_ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a, e = (uint64_t)b;
    while (e) {
        if (e & 1u) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

/* ------------------------------------------------------------------------ */
/* Branch-free f32 exp, tanh, erf and log, so that loops over them vectorize */
/* (libm's expf/tanhf/erff/logf are calls that keep a loop scalar). All are */
/* within a few ulp of the correctly rounded result; NaN, +-inf and          */
/* subnormal results are handled. Needs -fno-trapping-math to vectorize.     */
/* ------------------------------------------------------------------------ */
typedef union { float f; uint32_t u; } opc_f32_pun;

OPC_FN float opc_expf(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float hi = 88.7228394f, lo = -103.972694f;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    /* NaN clamps to lo (every compare with it is false), so n is always a small integer:   */
    /* converting a NaN or out-of-range float to int32 would be undefined behaviour.         */
    float xc = x > lo ? (x < hi ? x : hi) : lo;
    float n = (xc * log2e + shifter) - shifter;
    float r = xc - n * ln2_hi - n * ln2_lo; /* Cody-Waite: r in [-ln2/2, ln2/2] */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n in two halves keeps subnormal results (n < -126) exact in scale. Any split of n
     * gives the same result (p * 2^n1 is exact for n1 >= -75, and the second product rounds
     * once); a shift is one vector op where / 2 of a signed int is four. */
    int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    opc_f32_pun s1, s2;
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n2 + 127) << 23;
    float y = p * s1.f * s2.f;
    /* No select for x > hi or x < lo: the clamped input gives inf (p >= 1 at hi, times 2^128)
     * and +0 (p < 1 at lo, times 2^-150, rounds down) by itself; every f32 input was checked
     * to give the same bits as with the selects, with and without FMA contraction. */
    return x != x ? x : y;
}

/* tanh(x) = x P(x^2) / Q(x^2), P and Q of degree 4 with P(0) = Q(0) = 1 (so tiny x and -0  */
/* come back unchanged), fitted to tanh's relative error on [0, 9.1] (max 2.4e-8 in exact   */
/* arithmetic; the rest is float rounding). Past 9.1 tanh rounds to +-1, and the clamped  */
/* input gives exactly +-1; NaN passes through the clamp and the arithmetic. One division  */
/* and no exp: about 4x cheaper than 1 - 2/(e^2x + 1). Max error over every f32 input,    */
/* against tanh in double rounded to float: 6 ulp with and without FMA contraction (the    */
/* exp form it replaces: 5 ulp); tests/support/tanh_ulp.c is the check.                            */
/* The fit: least squares of (P - fQ) / (f Q_prev), f = tanh(x)/x, in t = x^2/9.1^2 on      */
/* 12000 points, each weight multiplied by its error every round (Lawson's iteration,     */
/* 60 rounds, towards the minimax), coefficients then rounded to float.                  */
OPC_FN float opc_tanhf(float x) {
    const float clamp = 9.1f;
    float xc = x > clamp ? clamp : (x < -clamp ? -clamp : x);
    float s = xc * xc;
    float p = 1.32426594e-08f;
    p = p * s + 2.05340402e-05f;
    p = p * s + 3.49129178e-03f;
    p = p * s + 1.33775026e-01f;
    p = p * s + 1.0f;
    float q = 7.73240856e-07f;
    q = q * s + 3.27841990e-04f;
    q = q * s + 2.58609243e-02f;
    q = q * s + 4.67108220e-01f;
    q = q * s + 1.0f;
    return xc * p / q;
}

/* erf(x): both halves are computed and one is selected per lane, so a loop vectorizes:      */
/*   |x| < 1:   x P(x^2), P of degree 6 fitted to erf(x)/x (relative error 6.9e-8)          */
/*   1 <= |x|:  1 - E(u), u = min(|x|, 4) - 2.5, E of degree 14 fitted to erfc on [1, 4]     */
/*              (absolute error 9.9e-9); past 4 erf rounds to 1 (erfc(4) = 1.5e-8), +-inf  */
/*              included; the sign copied back. NaN takes the first half and stays NaN.  */
/* A polynomial for erfc, not 1 - e^Q(|x|) as before: two thirds of the work was the exp    */
/* and Q's evaluation (1M erf GELUs in L1: 609 -> 290 us on a Zen 5 core), the same maximum */
/* error. Coefficients: tools/fit_erff.py. Max error over every f32 input:              */
/* tests/support/math_ulp.c, stated in docs/performance.md (Vector math).               */
OPC_FN float opc_erff(float x) {
    float t = fabsf(x), s = x * x;
    float u = (t < 4.0f ? t : 4.0f) - 2.5f; /* NaN: 4 (its lane takes x P(x^2), NaN) */
    float p = 7.853870193e-05f;
    p = p * s - 8.010200108e-04f;
    p = p * s + 5.188329145e-03f;
    p = p * s - 2.685381286e-02f;
    p = p * s + 1.128358543e-01f;
    p = p * s - 3.761262596e-01f;
    p = p * s + 1.128379107e+00f;
    float e = -8.961359299e-07f;
    e = e * u - 5.092471156e-07f;
    e = e * u + 1.576799332e-05f;
    e = e * u - 1.768234142e-05f;
    e = e * u - 8.125659224e-05f;
    e = e * u + 2.703997889e-04f;
    e = e * u - 2.584807808e-04f;
    e = e * u - 5.600664299e-04f;
    e = e * u + 2.797348890e-03f;
    e = e * u - 6.109301466e-03f;
    e = e * u + 8.622686379e-03f;
    e = e * u - 8.351716213e-03f;
    e = e * u + 5.445675459e-03f;
    e = e * u - 2.178188413e-03f;
    e = e * u + 4.069528950e-04f;
    float large = copysignf(1.0f - e, x);
    return t >= 1.0f ? large : x * p;
}

/* log(x) = e ln2 + log(m), x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(1 + f), f = m - 1, */
/* is f - f^2/2 + f^3 R(f), R of degree 8 (Cephes' logf), e ln2 in two parts (Cody-Waite). */
/* Subnormals are scaled by 2^23 first. Selects at the end: x < 0 and NaN give NaN, +-0     */
/* gives -inf, +inf gives +inf. Integer work on the bits only (no float->int of a NaN).   */
OPC_FN float opc_logf(float x) {
    int sub = x < 1.17549435e-38f;  /* subnormal, zero or negative: scaled (harmless for the last two) */
    float xs = sub ? x * 8388608.0f : x;
    opc_f32_pun v;
    v.f = xs;
    int32_t e = (int32_t)((v.u >> 23) & 0xffu) - 127 - (sub ? 23 : 0);
    v.u = (v.u & 0x007fffffu) | 0x3f800000u;  /* m in [1, 2) */
    int big = v.f > 1.41421356f;
    float m = big ? v.f * 0.5f : v.f;
    float ef = (float)(e + (big ? 1 : 0));
    float f = m - 1.0f, z = f * f;
    float r = 7.0376836292e-2f;
    r = r * f - 1.1514610310e-1f;
    r = r * f + 1.1676998740e-1f;
    r = r * f - 1.2420140846e-1f;
    r = r * f + 1.4249322787e-1f;
    r = r * f - 1.6668057665e-1f;
    r = r * f + 2.0000714765e-1f;
    r = r * f - 2.4999993993e-1f;
    r = r * f + 3.3333331174e-1f;
    float y = r * f * z + ef * -2.12194440e-4f - 0.5f * z;
    y = f + y + ef * 0.693359375f;
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    return x < 0.0f || x != x ? NAN : y;
}

/* ------------------------------------------------------------------------ */
/* Branch-free f64 exp, tanh, erf and log: the same scheme in double, so f64 */
/* loops vectorize too. No double <-> int64 conversion (AVX2 has none in    */
/* vectors): integers are read from and written to the bits by adding       */
/* 1.5 * 2^52 (the sum's low mantissa bits are the integer). Maximum errors */
/* against long double references: tests/support/math_ulp_f64.c, README (Speed).    */
/* ------------------------------------------------------------------------ */
typedef union { double f; uint64_t u; } opc_f64_pun;
#define OPC_F64_SHIFTER 6755399441055744.0 /* 1.5 * 2^52 */

/* 2^k for an integer-valued double k in [-1022, 1023]: k + 1023 sits in the low 12 bits */
/* of (k + 1023 + shifter), and shifting them to the exponent field drops the rest.     */
OPC_FN double opc__pow2i(double k) {
    opc_f64_pun v;
    v.f = k + (OPC_F64_SHIFTER + 1023.0);
    v.u <<= 52;
    return v.f;
}

/* exp(x) = 2^n e^r, n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2] (ln2 in two parts, */
/* the high one with trailing zero bits so n * ln2_hi is exact), e^r by its Taylor          */
/* polynomial of degree 13 (truncation below 5e-18 of e^r). 2^n in two halves, as in       */
/* opc_expf, keeps subnormal results. Selects: x > 709.78 gives +inf, x < -745.14 gives +0,  */
/* NaN passes.                                                                              */
OPC_FN double opc_exp(double x) {
    const double log2e = 1.4426950408889634074, ln2_hi = 6.93147180369123816490e-01,
                 ln2_lo = 1.90821492927058770002e-10;
    const double hi = 709.782712893383973096, lo = -745.13321910194110842;
    double xc = x > lo ? (x < hi ? x : hi) : lo;  /* NaN clamps to lo: n stays small */
    double n = (xc * log2e + OPC_F64_SHIFTER) - OPC_F64_SHIFTER;
    double r = (xc - n * ln2_hi) - n * ln2_lo;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r * r + r + 1.0;
    double n1 = (n * 0.5 + OPC_F64_SHIFTER) - OPC_F64_SHIFTER, n2 = n - n1;
    double y = p * opc__pow2i(n1) * opc__pow2i(n2);
    y = x > hi ? INFINITY : y;
    y = x < lo ? 0.0 : y;
    return x != x ? x : y;
}

/* tanh: |x| < 0.625: x + x z P(z)/Q(z), z = x^2 (Cephes' tanh.c rational, relative error    */
/* 2e-17), its sign copied from x so that -0 stays -0; else sign(x) (1 - 2 / (e^2|x| + 1)), which reaches +-1 exactly once  */
/* e^2|x| overflows. Both computed, one selected; NaN goes through the second.              */
OPC_FN double opc_tanh(double x) {
    double z = x * x;
    double p = -9.64399179425052238628e-1;
    p = p * z - 9.92877231001918586564e1;
    p = p * z - 1.61468768441708447952e3;
    double q = z + 1.12811678491632931402e2;
    q = q * z + 2.23548839060100448583e3;
    q = q * z + 4.84406305325125486048e3;
    double small = copysign(x + x * (z * p / q), x);
    double a = fabs(x);
    double large = copysign(1.0 - 2.0 / (opc_exp(2.0 * a) + 1.0), x);
    return a < 0.625 ? small : large;
}

/* erf, three pieces computed and one selected:                                             */
/*   |x| < 0.84375:  x + x R(z)/S(z), z = x^2 (fdlibm's s_erf.c: the leading x exact, the     */
/*                   rest a correction below 0.13 x, so tiny x stays within an ulp);          */
/*   |x| < 1.25:     erx + P(d)/Q(d), d = |x| - 1, erx = erf(1) cut to 24 bits (fdlibm);    */
/*   1.25 <= |x|:    1 - e^-t^2 P(t)/Q(t), t = |x| clamped to 6, where erf rounds to 1        */
/*                   (erfc(6) = 2e-17; Cephes' ndtr.c).                                       */
/* The sign is copied back (-0 stays -0); +-inf clamp to +-1; NaN goes through every piece. */
OPC_FN double opc_erf(double x) {
    double z = x * x;
    double rn = -2.37630166566501626084e-05;
    rn = rn * z - 5.77027029648944159157e-03;
    rn = rn * z - 2.84817495755985104766e-02;
    rn = rn * z - 3.25042107247001499370e-01;
    rn = rn * z + 1.28379167095512558561e-01;
    double sd = -3.96022827877536812320e-06;
    sd = sd * z + 1.32494738004321644526e-04;
    sd = sd * z + 5.08130628187576562776e-03;
    sd = sd * z + 6.50222499887672944485e-02;
    sd = sd * z + 3.97917223959155352819e-01;
    sd = sd * z + 1.0;
    double tiny = x + x * (rn / sd);
    double a = fabs(x), d = a - 1.0;
    double pa = -2.16637559486879084300e-03;
    pa = pa * d + 3.54783043256182359371e-02;
    pa = pa * d - 1.10894694282396677476e-01;
    pa = pa * d + 3.18346619901161753674e-01;
    pa = pa * d - 3.72207876035701323847e-01;
    pa = pa * d + 4.14856118683748331666e-01;
    pa = pa * d - 2.36211856075265944077e-03;
    double qa = 1.19844998467991074170e-02;
    qa = qa * d + 1.36370839120290507362e-02;
    qa = qa * d + 1.26171219808761642112e-01;
    qa = qa * d + 7.18286544141962662868e-02;
    qa = qa * d + 5.40397917702171048937e-01;
    qa = qa * d + 1.06420880400844228286e-01;
    qa = qa * d + 1.0;
    double mid = copysign(8.45062911510467529297e-01 + pa / qa, x);
    double t = a > 6.0 ? 6.0 : a;  /* NaN passes (the compare is false) */
    double pn = 2.46196981473530512524e-10;
    pn = pn * t + 5.64189564831068821977e-1;
    pn = pn * t + 7.46321056442269912687e0;
    pn = pn * t + 4.86371970985681366614e1;
    pn = pn * t + 1.96520832956077098242e2;
    pn = pn * t + 5.26445194995477358631e2;
    pn = pn * t + 9.34528527171957607540e2;
    pn = pn * t + 1.02755188689515710272e3;
    pn = pn * t + 5.57535335369399327526e2;
    double qd = t + 1.32281951154744992508e1;
    qd = qd * t + 8.67072140885989742329e1;
    qd = qd * t + 3.54937778887819891062e2;
    qd = qd * t + 9.75708501743205489753e2;
    qd = qd * t + 1.82390916687909736289e3;
    qd = qd * t + 2.24633760818710981792e3;
    qd = qd * t + 1.65666309194161350182e3;
    qd = qd * t + 5.57535340817727675546e2;
    double large = copysign(1.0 - opc_exp(-t * t) * pn / qd, x);
    return a < 0.84375 ? tiny : (a < 1.25 ? mid : large);
}

/* log(x) = e ln2 + log(1 + f), x = m 2^e, m in [sqrt(1/2), sqrt(2)), f = m - 1;           */
/* log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2))), s = f / (2 + f), R of degree 7 in s^2     */
/* (fdlibm's e_log.c, |error of R| < 2^-58.45). Subnormals scaled by 2^54 first. Selects:   */
/* x < 0 and NaN give NaN, +-0 gives -inf, +inf gives +inf. The exponent becomes a double */
/* through the bits (2^52 + e as a double, minus 2^52).                                   */
OPC_FN double opc_log(double x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    int sub = x < 2.2250738585072014e-308;
    double xs = sub ? x * 18014398509481984.0 : x;  /* 2^54 */
    opc_f64_pun v, ev;
    v.f = xs;
    ev.u = ((v.u >> 52) & 0x7ffu) | 0x4330000000000000u;  /* 2^52 + biased exponent */
    double e = (ev.f - 4503599627370496.0) - 1023.0 - (sub ? 54.0 : 0.0);
    v.u = (v.u & 0x000fffffffffffffu) | 0x3ff0000000000000u;  /* m in [1, 2) */
    int big = v.f > 1.4142135623730951;
    double m = big ? v.f * 0.5 : v.f;
    e = big ? e + 1.0 : e;
    double f = m - 1.0, s = f / (2.0 + f), z = s * s, w = z * z;
    double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    double t2 = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01
                 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    double hfsq = 0.5 * f * f, r = t2 + t1;
    double y = e * ln2_hi - ((hfsq - (s * (hfsq + r) + e * ln2_lo)) - f);
    y = x == INFINITY ? x : y;
    y = x == 0.0 ? -INFINITY : y;
    return x < 0.0 || x != x ? NAN : y;
}

/* relu6, min(max(x, 0), 6) as opc.maximum then opc.minimum compute it: a NaN fails both tests and
   stays, -0 becomes 0 (the fused kernels' activation code 4) */
OPC_FN float opc_relu6_f32(float x) {
    const float t = !(x <= 0.0f) ? x : 0.0f;
    return !(t >= 6.0f) ? t : 6.0f;
}
OPC_FN double opc_relu6_f64(double x) {
    const double t = !(x <= 0.0) ? x : 0.0;
    return !(t >= 6.0) ? t : 6.0;
}

/* ------------------------------------------------------------------------ */
/* Activations and their derivatives (used by gelu / gelu_grad and by the    */
/* fused GEMM epilogue and its grad). Formulas are exactly those of SPEC:     */
/*   tanh form: g(x) = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi) */
/*   erf form:  g(x) = 0.5 x (1 + erf(x / sqrt 2))                            */
/* Derivatives are the analytic ones:                                         */
/*   tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3*0.044715 x^2)               */
/*         with 1 - t^2 = sech^2 u = 4 w / (1 + w)^2, w = e^-2|u|: from u, as    */
/*         accurate as exp (1 - t*t cancels to 0 where t rounds to +-1)         */
/*   erf:  0.5 (1 + erf(x/sqrt2)) + x exp(-x^2/2) / sqrt(2 pi)                */
/* ------------------------------------------------------------------------ */
#define OPC_SQRT_2_OVER_PI 0.79788456080286535587989211986876
#define OPC_INV_SQRT2      0.70710678118654752440084436210485
#define OPC_INV_SQRT_2PI   0.39894228040143267793994605993438
#define OPC_GELU_A         0.044715

OPC_FN float opc_gelu_tanh_f32(float x) {
    float u = (float)OPC_SQRT_2_OVER_PI * (x + (float)OPC_GELU_A * x * x * x);
    return 0.5f * x * (1.0f + opc_tanhf(u));
}
OPC_FN double opc_gelu_tanh_f64(double x) {
    double u = OPC_SQRT_2_OVER_PI * (x + OPC_GELU_A * x * x * x);
    return 0.5 * x * (1.0 + opc_tanh(u));
}
OPC_FN float opc_gelu_erf_f32(float x) {
    return 0.5f * x * (1.0f + opc_erff(x * (float)OPC_INV_SQRT2));
}
OPC_FN double opc_gelu_erf_f64(double x) {
    return 0.5 * x * (1.0 + opc_erf(x * OPC_INV_SQRT2));
}
OPC_FN float opc_gelu_tanh_grad_f32(float x) {
    float x2 = x * x;
    float u = (float)OPC_SQRT_2_OVER_PI * (x + (float)OPC_GELU_A * x2 * x);
    float t = opc_tanhf(u), w = opc_expf(-2.0f * fabsf(u));
    float du = (float)OPC_SQRT_2_OVER_PI * (1.0f + 3.0f * (float)OPC_GELU_A * x2);
    return 0.5f * (1.0f + t) + 0.5f * x * (4.0f * w / ((1.0f + w) * (1.0f + w))) * du;
}
OPC_FN double opc_gelu_tanh_grad_f64(double x) {
    double x2 = x * x;
    double u = OPC_SQRT_2_OVER_PI * (x + OPC_GELU_A * x2 * x);
    double t = opc_tanh(u), w = opc_exp(-2.0 * fabs(u));
    double du = OPC_SQRT_2_OVER_PI * (1.0 + 3.0 * OPC_GELU_A * x2);
    return 0.5 * (1.0 + t) + 0.5 * x * (4.0 * w / ((1.0 + w) * (1.0 + w))) * du;
}
OPC_FN float opc_gelu_erf_grad_f32(float x) {
    return 0.5f * (1.0f + opc_erff(x * (float)OPC_INV_SQRT2))
         + x * (float)OPC_INV_SQRT_2PI * opc_expf(-0.5f * x * x);
}
OPC_FN double opc_gelu_erf_grad_f64(double x) {
    return 0.5 * (1.0 + opc_erf(x * OPC_INV_SQRT2))
         + x * OPC_INV_SQRT_2PI * opc_exp(-0.5 * x * x);
}

/* relu and its grad (grad at 0 is 0, like Paddle/PyTorch); NaN propagates. */
OPC_FN float opc_relu_f32(float x) { return x < 0.0f ? 0.0f : x; }
OPC_FN double opc_relu_f64(double x) { return x < 0.0 ? 0.0 : x; }
OPC_FN float opc_relu_grad_f32(float x) { return x > 0.0f ? 1.0f : 0.0f; }
OPC_FN double opc_relu_grad_f64(double x) { return x > 0.0 ? 1.0 : 0.0; }

/* Reciprocal square root: plain 1/sqrt (correctly rounded sqrt, one        */
/* division) so CPU and GPU agree to an ulp; no approximate instructions.   */
OPC_FN float opc_rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
OPC_FN double opc_rsqrt_f64(double x) { return 1.0 / sqrt(x); }

#include "opc_lowp.h" /* float8, float4, int4, int2 */

#endif /* OPC_RUNTIME_H */
