/* reduce_sum and reduce_max over any `axes` (keepdim changes no index): each input element goes
 * to its output element, accumulated in f32 (f64 for f64); max propagates NaN. Planted bugs:
 *   sum-f16-accumulator  accumulates in the storage type (an f16 sum rounds at every step)
 *   sum-first-axis-only  reduces axes[0] alone (axes = [0, 2] reads the wrong elements)
 *   max-drops-nan        m = v > m ? v : m, which never takes a NaN
 *   max-starts-at-zero   the running max starts at 0, not -inf (rows of negatives give 0) */
#ifndef REDUCE_H
#define REDUCE_H

#include "planted.h"

static inline int reduce(const opc_kernel_call *call, int is_max) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    int32_t count;
    const int64_t *axes = opc_attr_ints(call, "axes", &count);
    int reduced[OPC_KERNEL_MAX_RANK] = {0};
    for (int32_t i = 0; i < count; i++) {
        if (i > 0 && planted("sum-first-axis-only")) break;
        reduced[axes[i] < 0 ? axes[i] + x->rank : axes[i]] = 1;
    }
    const int64_t n_out = opc_numel(out);
    double *acc = malloc(sizeof(double) * (size_t)(n_out > 0 ? n_out : 1));
    if (!acc) return opc_kernel_fail(call, "out of memory");
    for (int64_t i = 0; i < n_out; i++) acc[i] = is_max && !planted("max-starts-at-zero") ? -INFINITY : 0.0;
    const int wide = x->dtype == OPC_DTYPE_F64;
    int64_t idx[OPC_KERNEL_MAX_RANK] = {0};
    for (int64_t i = 0, n = opc_numel(x); i < n; i++) {
        int64_t o = 0;
        for (int32_t d = 0; d < x->rank; d++)
            if (!reduced[d]) o = o * x->shape[d] + idx[d];
        if (o >= n_out) o = n_out - 1;  /* only a planted bug gets here: never write out of bounds */
        const double v = load(x, i);
        if (is_max) {
            if (planted("max-drops-nan")) acc[o] = v > acc[o] ? v : acc[o];
            else acc[o] = isnan(v) || v > acc[o] ? v : acc[o];
        } else if (wide) {
            acc[o] += v;
        } else {
            acc[o] = (float)((float)acc[o] + (float)v);
            if (planted("sum-f16-accumulator") && x->dtype == OPC_DTYPE_F16) acc[o] = opc_f16_to_f32(opc_f32_to_f16((float)acc[o]));
        }
        for (int32_t d = x->rank - 1; d >= 0 && ++idx[d] == x->shape[d]; d--) idx[d] = 0;
    }
    for (int64_t i = 0; i < n_out; i++) store(out, i, acc[i]);
    free(acc);
    return 0;
}

#endif
