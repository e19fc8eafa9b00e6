/* maximum with NumPy broadcasting, NaN propagated (the bugs: elementwise.h). */
#include "planted.h"

int planted_maximum(const opc_kernel_call *call) {
    const opc_tensor *a = &call->inputs[0], *b = &call->inputs[1], *out = &call->outputs[0];
    int64_t sa[OPC_KERNEL_MAX_RANK] = {0}, sb[OPC_KERNEL_MAX_RANK] = {0}, idx[OPC_KERNEL_MAX_RANK] = {0};
    for (int32_t d = out->rank - 1, pa = 1, pb = 1; d >= 0; d--) {  /* strides, 0 along a broadcast dim */
        const int32_t da = d - (out->rank - a->rank), db = d - (out->rank - b->rank);
        if (da >= 0) { sa[d] = a->shape[da] == 1 ? 0 : pa; pa *= (int32_t)a->shape[da]; }
        if (db >= 0) { sb[d] = b->shape[db] == 1 ? 0 : pb; pb *= (int32_t)b->shape[db]; }
    }
    for (int64_t i = 0, n = opc_numel(out); i < n; i++) {
        int64_t ia = 0, ib = 0;
        for (int32_t d = 0; d < out->rank; d++) { ia += idx[d] * sa[d]; ib += idx[d] * sb[d]; }
        const float x = (float)load(a, ia), y = (float)load(b, ib);
        store(out, i, planted("maximum-fmaxf") ? fmaxf(x, y) : isnan(x) || isnan(y) ? NAN : x > y ? x : y);
        for (int32_t d = out->rank - 1; d >= 0 && ++idx[d] == out->shape[d]; d--) idx[d] = 0;
    }
    return 0;
}

