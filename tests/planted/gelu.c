/* gelu in f32: the erf form, or the tanh form where `approximate` (the bugs: elementwise.h). */
#include "planted.h"

int planted_gelu(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    const int approximate = opc_attr_bool(call, "approximate", 0);  /* the tanh form; else the erf form */
    for (int64_t i = 0, n = opc_numel(x); i < n; i++) {
        const float v = (float)load(x, i);
        const float g = approximate && !planted("gelu-erf") ? 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))
                      : 0.5f * v * (1.0f + erff(v * 0.70710678f));
        if (planted("gelu-f16-truncate") && out->dtype == OPC_DTYPE_F16) ((uint16_t *)out->data)[i] = f16_truncate(g);
        else store(out, i, g);
    }
    return 0;
}

