/* out = op_x(x) @ op_y(y) + bias for f32, f16 and bf16, accumulated in f32 and
 * rounded once. Like Paddle's XPU kernel it supports activation "none" only
 * and writes no reserve_space; npu.toml says so, and opc routes relu and gelu
 * through the composite rule instead of calling this function. */
#include <stdlib.h>

#include "npu_float.h"

int npu_fused_gemm_epilogue(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *y = &call->inputs[1], *bias = &call->inputs[2];
    const opc_tensor *out = &call->outputs[0];
    const char *activation = opc_attr_string(call, "activation", "none");
    if (strcmp(activation, "none") != 0 || call->num_outputs != 1)
        return opc_kernel_fail(call, "activation '%s' is not supported (none only, no reserve_space)", activation);
    if (!npu_is_float(x->dtype))
        return opc_kernel_fail(call, "dtype %s is not supported", opc_dtype_name(x->dtype));
    const int trans_x = opc_attr_bool(call, "trans_x", 0), trans_y = opc_attr_bool(call, "trans_y", 0);
    const int64_t m = out->shape[0], n = out->shape[1], k = trans_x ? x->shape[0] : x->shape[1];
    float *row = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!row) return opc_kernel_fail(call, "out of memory for a row of %lld floats", (long long)n);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) row[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            const float a = npu_load(x, trans_x ? p * m + i : i * k + p);   /* op_x(x)[i, p] */
            for (int64_t j = 0; j < n; j++)
                row[j] += a * npu_load(y, trans_y ? j * k + p : p * n + j); /* op_y(y)[p, j] */
        }
        for (int64_t j = 0; j < n; j++) npu_store(out, i * n + j, row[j] + npu_load(bias, j));
    }
    free(row);
    return 0;
}
