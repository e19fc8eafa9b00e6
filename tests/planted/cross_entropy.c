/* softmax_cross_entropy along `axis` with hard labels, in f32: softmax with the max subtracted,
 * loss = lse - (x[label] - max). Planted bug:
 *   xent-log-of-softmax   loss = -log(softmax[label]): inf where that probability underflows */
#include "planted.h"

int planted_cross_entropy(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *label = &call->inputs[1];
    const opc_tensor *loss = &call->outputs[0], *sm = &call->outputs[1];
    const rows r = rows_along(x, opc_attr_int(call, "axis", -1));
    for (int64_t o = 0; o < r.outer; o++)
        for (int64_t in = 0; in < r.inner; in++) {
            const int64_t base = o * r.len * r.inner + in, row = o * r.inner + in;
            float m = -INFINITY, s = 0.0f;
            for (int64_t j = 0; j < r.len; j++) {
                const float v = (float)load(x, base + j * r.inner);
                m = isnan(v) || v > m ? v : m;
            }
            for (int64_t j = 0; j < r.len; j++) s += expf((float)load(x, base + j * r.inner) - m);
            for (int64_t j = 0; j < r.len; j++) store(sm, base + j * r.inner, expf((float)load(x, base + j * r.inner) - m) / s);
            const int64_t c = ((const int64_t *)label->data)[row];
            if (c < 0 || c >= r.len) return opc_kernel_fail(call, "label %lld out of range", (long long)c);
            const float xc = (float)load(x, base + c * r.inner) - m;
            store(loss, row, planted("xent-log-of-softmax") ? -logf(expf(xc) / s) : logf(s) - xc);
        }
    return 0;
}
