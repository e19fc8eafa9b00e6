/* cast: float -> float to nearest even; float -> int truncates and saturates, NaN -> 0 (the bugs: elementwise.h). */
#include "planted.h"

static double saturate(double v, double lo, double hi) {
    if (planted("cast-no-saturation")) return v;
    if (isnan(v)) return planted("cast-nan-not-zero") ? (double)INT32_MIN : 0.0;
    return v <= lo ? lo : v >= hi ? hi : trunc(v);
}

int planted_cast(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    for (int64_t i = 0, n = opc_numel(x); i < n; i++) {
        const double v = load(x, i);
        switch (out->dtype) {
        case OPC_DTYPE_I8: ((int8_t *)out->data)[i] = (int8_t)(int32_t)saturate(v, INT8_MIN, INT8_MAX); break;
        case OPC_DTYPE_I32: {
            const double s = saturate(v, INT32_MIN, INT32_MAX);  /* out of range only when planted: */
            ((int32_t *)out->data)[i] = isnan(s) || s < INT32_MIN || s > INT32_MAX ? INT32_MIN : (int32_t)s;
            break;
        }
        case OPC_DTYPE_F16:
            ((uint16_t *)out->data)[i] = planted("cast-f16-truncate") ? f16_truncate((float)v) : opc_f32_to_f16((float)v);
            break;
        case OPC_DTYPE_F32: ((float *)out->data)[i] = (float)v; break;
        default: return opc_kernel_fail(call, "cast to %s is not supported", opc_dtype_name(out->dtype));
        }
    }
    return 0;
}
