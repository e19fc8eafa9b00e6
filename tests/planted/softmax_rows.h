/* softmax and log_softmax along `axis`, computed in f32 (f64 for f64): the row max subtracted,
 * exp summed (8 lanes, then the tail), one rounding per output. Planted bugs:
 *   softmax-no-max       exp(x) without subtracting the row max (overflows past x = 88)
 *   softmax-last-axis    normalizes along the last axis whatever `axis` says
 *   softmax-tail         the tail loop of the sum stops one short (rows whose length is not a multiple of 8)
 *   log-softmax-naive    log(softmax(x)): -inf where exp(x - max) underflows */
#ifndef SOFTMAX_ROWS_H
#define SOFTMAX_ROWS_H

#include "planted.h"

static inline int softmax_rows(const opc_kernel_call *call, int take_log) {
    const opc_tensor *x = &call->inputs[0], *y = &call->outputs[0];
    int64_t axis = opc_attr_int(call, "axis", -1);
    if (planted("softmax-last-axis")) axis = -1;
    const rows r = rows_along(x, axis);
    double *e = malloc(sizeof(double) * (size_t)(r.len > 0 ? r.len : 1));
    if (!e) return opc_kernel_fail(call, "out of memory");
    const int wide = x->dtype == OPC_DTYPE_F64;
    for (int64_t o = 0; o < r.outer; o++)
        for (int64_t in = 0; in < r.inner; in++) {
            const int64_t base = o * r.len * r.inner + in;
            double m = -INFINITY;
            for (int64_t j = 0; j < r.len; j++) {
                const double v = load(x, base + j * r.inner);
                m = isnan(v) || v > m ? v : m;
            }
            if (planted("softmax-no-max")) m = 0.0;
            float lanes[8] = {0};
            double sum = 0.0;
            for (int64_t j = 0; j < r.len; j++) {
                const double d = load(x, base + j * r.inner) - m;
                e[j] = wide ? exp(d) : (double)expf((float)d);
            }
            int64_t j = 0;
            for (; j + 8 <= r.len; j += 8)
                for (int k = 0; k < 8; k++) {
                    if (wide) sum += e[j + k]; else lanes[k] += (float)e[j + k];
                }
            for (; j < r.len - (planted("softmax-tail") ? 1 : 0); j++) {
                if (wide) sum += e[j]; else lanes[0] += (float)e[j];
            }
            if (!wide) for (int k = 0; k < 8; k++) sum += lanes[k];
            if (!wide) sum = (float)sum;
            const double lse = wide ? log(sum) : (double)logf((float)sum);
            for (int64_t j2 = 0; j2 < r.len; j2++) {
                const double d = load(x, base + j2 * r.inner) - m;
                double v;
                if (!take_log) v = wide ? e[j2] / sum : (double)((float)e[j2] / (float)sum);
                else if (planted("log-softmax-naive")) v = wide ? log(e[j2] / sum) : (double)logf((float)e[j2] / (float)sum);
                else v = wide ? d - lse : (double)((float)d - (float)lse);
                store(y, base + j2 * r.inner, v);
            }
        }
    free(e);
    return 0;
}

#endif
