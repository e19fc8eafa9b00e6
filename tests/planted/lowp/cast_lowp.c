/* cast to and from float8, float4, int4 and int2, one byte an element (sub-byte ones in the low bits):
 * floats round once to nearest even, out of range to inf or NaN as the type has them (ml_dtypes' astype;
 * float4 saturates, it has neither); floats to integers truncate and saturate, NaN -> 0. Planted bugs:
 *   lowp-saturates   float8 targets clamp to +-max where opc's cast (without `saturate`) gives inf or NaN
 *   lowp-int-wraps   floats to int4/int2 keep the low bits of the truncated value instead of saturating
 * (integers to int4/int2 do wrap, as NumPy's astype). */
#include "../planted.h"

static double load_lowp(const opc_tensor *t, int64_t i) {
    const uint8_t b = ((const uint8_t *)t->data)[i];
    switch (t->dtype) {
    case OPC_DTYPE_F8E4M3FN: return opc_f8e4m3fn_to_f32(b);
    case OPC_DTYPE_F8E5M2: return opc_f8e5m2_to_f32(b);
    case OPC_DTYPE_F4E2M1FN: return opc_f4e2m1fn_to_f32(b);
    case OPC_DTYPE_I4: return opc_sext4(b);
    case OPC_DTYPE_U2: return b;
    default: return load(t, i);
    }
}

/* to int4/int2 (mask: their bits): integers wrap (keep the low bits), floats truncate and saturate */
static uint8_t to_int(const opc_tensor *x, double v, double lo, double hi, unsigned mask) {
    if (x->dtype == OPC_DTYPE_I4 || x->dtype == OPC_DTYPE_U2) return (uint8_t)((int64_t)v & mask);
    if (isnan(v)) return 0;
    if (planted("lowp-int-wraps") && fabs(v) < 1e9) return (uint8_t)((int64_t)trunc(v) & mask);
    v = v <= lo ? lo : v >= hi ? hi : trunc(v);
    return (uint8_t)((int64_t)v & mask);
}

int lowp_cast(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    uint8_t *o = (uint8_t *)out->data;
    const int sat = planted("lowp-saturates");
    for (int64_t i = 0, n = opc_numel(x); i < n; i++) {
        const double v = load_lowp(x, i);
        switch (out->dtype) {
        case OPC_DTYPE_F32: ((float *)out->data)[i] = (float)v; break;
        case OPC_DTYPE_F8E4M3FN: o[i] = opc_f64_to_f8e4m3fn(v, sat); break;
        case OPC_DTYPE_F8E4M3FNUZ: o[i] = opc_f64_to_f8e4m3fnuz(v, sat); break;
        case OPC_DTYPE_F8E5M2: o[i] = opc_f64_to_f8e5m2(v, sat); break;
        case OPC_DTYPE_F8E5M2FNUZ: o[i] = opc_f64_to_f8e5m2fnuz(v, sat); break;
        case OPC_DTYPE_F8E8M0FNU: o[i] = opc_f64_to_f8e8m0fnu(v, 0); break;
        case OPC_DTYPE_F4E2M1FN: o[i] = opc_f64_to_f4e2m1fn(v, 0); break;
        case OPC_DTYPE_I4: o[i] = to_int(x, v, -8, 7, 0xfu); break;
        case OPC_DTYPE_U4: o[i] = to_int(x, v, 0, 15, 0xfu); break;
        case OPC_DTYPE_I2: o[i] = to_int(x, v, -2, 1, 0x3u); break;
        case OPC_DTYPE_U2: o[i] = to_int(x, v, 0, 3, 0x3u); break;
        default: return opc_kernel_fail(call, "cast to %s is not supported", opc_dtype_name(out->dtype));
        }
    }
    return 0;
}
