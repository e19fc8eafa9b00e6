/* opc_lowp.h -- the low-precision element types ML hardware ships, as ml_dtypes stores them.
 *
 * Included by opc_runtime.h (it uses OPC_FN and the bit casts from there).
 *
 * Storage is one byte per element, in C and at the ABI (NumPy arrays of ml_dtypes types are
 * one byte per element too): float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0FNU) all eight
 * bits; float4 E2M1FN and int4/uint4/int2/uint2 in the low 4 or 2 bits, the high bits 0 (an
 * int4 -1 is 0x0f, as ml_dtypes holds it). Arithmetic happens in f32 (or wider).
 *
 * Conversions to the float8/float4 types round once, to nearest even, from the double they
 * are given (f32 and f16 inputs convert exactly to double first), so they give what
 * ndarray.astype(ml_dtypes.T) gives. `saturate` (ONNX's Cast attribute) clamps what is out
 * of range, infinities included, to +-max finite; without it an out-of-range value becomes
 * inf (E5M2) or NaN (the FN/FNUZ types, which have no infinity). float4 E2M1FN has neither
 * inf nor NaN: it always saturates and NaN becomes a zero of the other sign (what ml_dtypes gives). FNUZ types have one
 * zero: -0 and negatives that round to 0 give +0, and NaN is 0x80.
 * E8M0FNU (a power of two, 2^(bits - 127), 0xff NaN) follows onnx.numpy_helper.to_float8e8m0
 * bit for bit: the f32 exponent, rounded up / down / to nearest by the mantissa (ties up),
 * inf and NaN -> 0xff, the sign ignored.
 */
#ifndef OPC_LOWP_H
#define OPC_LOWP_H

/* Layouts of the minifloats: kind says which special values the encoding has. */
#define OPC_MF_FN 0    /* no inf; NaN is S.1111.111 (E4M3FN)        */
#define OPC_MF_IEEE 1  /* inf and NaN in the top exponent (E5M2)    */
#define OPC_MF_FNUZ 2  /* no inf, no -0; NaN is 0x80                */
#define OPC_MF_NONE 3  /* no inf, no NaN (E2M1FN, E2M3FN, E3M2FN)   */

OPC_FN float opc_mf_to_f32(uint32_t b, int ebits, int mbits, int bias, int kind) {
    uint32_t sign = (b >> (ebits + mbits)) & 1u;
    uint32_t e = (b >> mbits) & ((1u << ebits) - 1u);
    uint32_t m = b & ((1u << mbits) - 1u);
    uint32_t emax = (1u << ebits) - 1u, mmax = (1u << mbits) - 1u;
    float v;
    if (kind == OPC_MF_FNUZ && b == 0x80u) return -NAN;  /* ml_dtypes' sign */
    if (kind == OPC_MF_FN && e == emax && m == mmax) return sign ? -NAN : NAN;
    if (kind == OPC_MF_IEEE && e == emax) return m ? (sign ? -NAN : NAN) : (sign ? -INFINITY : INFINITY);
    v = e == 0 ? ldexpf((float)m, 1 - bias - mbits) : ldexpf((float)(m + (1u << mbits)), (int)e - bias - mbits);
    return sign ? -v : v;
}

OPC_FN uint8_t opc_mf_from_f64(double x, int ebits, int mbits, int bias, int kind, int saturate) {
    uint32_t sbit = 1u << (ebits + mbits);
    uint32_t sign = signbit(x) ? sbit : 0u;
    uint32_t top = (1u << ebits) - 1u - (kind == OPC_MF_IEEE ? 1u : 0u);   /* largest finite exponent field */
    uint32_t top_m = (1u << mbits) - 1u - (kind == OPC_MF_FN ? 1u : 0u);    /* its largest mantissa */
    uint32_t max_bits = (top << mbits) | top_m;
    double maxv = ldexp((double)(top_m + (1u << mbits)), (int)top - bias - mbits);
    uint32_t nan_bits = kind == OPC_MF_FN ? sign | (sbit - 1u)
                      : kind == OPC_MF_IEEE ? sign | ((top + 1u) << mbits) | (1u << (mbits - 1))
                      : kind == OPC_MF_FNUZ ? 0x80u : sign ^ sbit;   /* E2M1FN: ml_dtypes' zero */
    uint32_t overflow = (saturate || kind == OPC_MF_NONE) ? sign | max_bits
                      : kind == OPC_MF_IEEE ? sign | ((top + 1u) << mbits) : nan_bits;
    double a = fabs(x), n, q;
    int E, e, emin = 1 - bias;
    if (x != x) return (uint8_t)nan_bits;
    if (isinf(a)) return (uint8_t)overflow;
    if (a == 0.0) return (uint8_t)(kind == OPC_MF_FNUZ ? 0u : sign);
    (void)frexp(a, &E);                          /* a = f 2^E, f in [0.5, 1) */
    e = E - 1 < emin ? emin : E - 1;
    q = ldexp(1.0, e - mbits);                   /* the spacing of the target at a */
    n = rint(a / q);                             /* a / q is exact; rint: ties to even */
    if (n * q > maxv) return (uint8_t)overflow;
    if (n == 0.0) return (uint8_t)(kind == OPC_MF_FNUZ ? 0u : sign);
    if (n >= (double)(2u << mbits)) { n *= 0.5; e += 1; }   /* rounded up into the next binade */
    if (n < (double)(1u << mbits)) return (uint8_t)(sign | (uint32_t)n);   /* subnormal */
    return (uint8_t)(sign | ((uint32_t)(e + bias) << mbits) | ((uint32_t)n - (1u << mbits)));
}

/* One pair per type: opc_T_to_f32 and opc_f64_to_T(x, saturate). */
#define OPC_MINIFLOAT(T, EB, MB, BIAS, KIND) \
    OPC_FN float opc_##T##_to_f32(uint8_t b) { return opc_mf_to_f32(b, EB, MB, BIAS, KIND); } \
    OPC_FN uint8_t opc_f64_to_##T(double x, int saturate) { return opc_mf_from_f64(x, EB, MB, BIAS, KIND, saturate); }
OPC_MINIFLOAT(f8e4m3fn, 4, 3, 7, OPC_MF_FN)
OPC_MINIFLOAT(f8e4m3fnuz, 4, 3, 8, OPC_MF_FNUZ)
OPC_MINIFLOAT(f8e5m2, 5, 2, 15, OPC_MF_IEEE)
OPC_MINIFLOAT(f8e5m2fnuz, 5, 2, 16, OPC_MF_FNUZ)
OPC_MINIFLOAT(f6e2m3fn, 2, 3, 1, OPC_MF_NONE)
OPC_MINIFLOAT(f6e3m2fn, 3, 2, 3, OPC_MF_NONE)
OPC_MINIFLOAT(f4e2m1fn, 2, 1, 1, OPC_MF_NONE)
#undef OPC_MINIFLOAT

/* E8M0FNU (2^(b - 127); no sign, no zero).
 * opc_f32_to_f8e8m0fnu: ONNX's Cast with round_mode 0 nearest, 1 up, 2 down, on the f32 bits as
 * onnx.numpy_helper.to_float8e8m0 does (the sign ignored, 0 and f32 subnormals to 2^-127).
 * opc_f64_to_f8e8m0fnu: opc.cast without round_mode, what ml_dtypes' astype gives: nearest with
 * ties up (x = m 2^e, m >= 1.5 rounds up), below 2^-127 the smallest, zero and negatives NaN. */
OPC_FN float opc_f8e8m0fnu_to_f32(uint8_t b) { return b == 0xffu ? NAN : ldexpf(1.0f, (int)b - 127); }
OPC_FN uint8_t opc_f64_to_f8e8m0fnu(double x, int saturate) {
    int E, code;
    double f;
    if (!(x > 0.0)) return 0xffu;
    if (isinf(x)) return saturate ? 0xfeu : 0xffu;
    f = frexp(x, &E);                            /* x = f 2^E, f in [0.5, 1) */
    code = (E - 1) + 127 + (f >= 0.75 ? 1 : 0);
    if (code < 0) return 0u;
    if (code > 254) return saturate ? 0xfeu : 0xffu;
    return (uint8_t)code;
}
OPC_FN uint8_t opc_f32_to_f8e8m0fnu(float x, int saturate, int round_mode) {
    uint32_t bits = opc_f32_bits(x), e = (bits >> 23) & 0xffu, up = 0;
    if (e == 0xffu) return 0xffu;
    if (round_mode == 0) {
        uint32_t g = (bits & 0x400000u) != 0, r = (bits & 0x200000u) != 0, s = (bits & 0x1fffffu) != 0;
        up = g && (r || s || e > 0);
    } else if (round_mode == 1) {
        up = (bits & 0x7fffffu) != 0;
    }
    if (saturate && e == 0xfeu) up = 0;
    return (uint8_t)(e + up);
}

/* Sub-byte integers: the value from its low bits, and the low bits of a value (wrapping). */
OPC_FN int32_t opc_sext4(uint32_t b) { return (int32_t)((b & 0xfu) ^ 0x8u) - 0x8; }
OPC_FN int32_t opc_sext2(uint32_t b) { return (int32_t)((b & 0x3u) ^ 0x2u) - 0x2; }
/* float -> int4/uint4/int2/uint2 with opc's cast semantics: truncate, saturate, NaN -> 0 */
OPC_FN uint8_t opc_sat_i4(double x) { return x != x ? 0 : (uint8_t)((x <= -8.0 ? -8 : x >= 7.0 ? 7 : (int)x) & 0xf); }
OPC_FN uint8_t opc_sat_u4(double x) { return !(x > 0.0) ? 0 : x >= 15.0 ? 15 : (uint8_t)x; }
OPC_FN uint8_t opc_sat_i2(double x) { return x != x ? 0 : (uint8_t)((x <= -2.0 ? -2 : x >= 1.0 ? 1 : (int)x) & 0x3); }
OPC_FN uint8_t opc_sat_u2(double x) { return !(x > 0.0) ? 0 : x >= 3.0 ? 3 : (uint8_t)x; }

#endif /* OPC_LOWP_H */
