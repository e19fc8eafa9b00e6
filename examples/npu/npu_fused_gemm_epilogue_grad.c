/* fused_gemm_epilogue_grad with activation_grad "none" (dZ = dout), f32 and
 * f16, accumulated in f32:
 *   d op_x(x) = dZ @ op_y(y)^T    mapped back through trans_x
 *   d op_y(y) = op_x(x)^T @ dZ    mapped back through trans_y
 *   dbias     = the sum of dZ over rows
 * Inputs x, y, dout (no reserve_space without an activation); outputs dx, dy, dbias. */
#include "npu_float.h"

int npu_fused_gemm_epilogue_grad(const opc_kernel_call *call) {
    if (strcmp(opc_attr_string(call, "activation_grad", "none"), "none") != 0 || call->num_inputs != 3)
        return opc_kernel_fail(call, "activation_grad '%s' is not supported (none only)",
                               opc_attr_string(call, "activation_grad", "none"));
    const opc_tensor *x = &call->inputs[0], *y = &call->inputs[1], *dz = &call->inputs[2];
    const opc_tensor *dx = &call->outputs[0], *dy = &call->outputs[1], *dbias = &call->outputs[2];
    const int trans_x = opc_attr_bool(call, "trans_x", 0), trans_y = opc_attr_bool(call, "trans_y", 0);
    const int64_t m = dz->shape[0], n = dz->shape[1], k = trans_x ? x->shape[0] : x->shape[1];
    for (int64_t i = 0; i < m; i++)        /* dx: [m, k], or [k, m] when trans_x */
        for (int64_t p = 0; p < k; p++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++)
                acc += npu_load(dz, i * n + j) * npu_load(y, trans_y ? j * k + p : p * n + j);
            npu_store(dx, trans_x ? p * m + i : i * k + p, acc);
        }
    for (int64_t p = 0; p < k; p++)        /* dy: [k, n], or [n, k] when trans_y */
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < m; i++)
                acc += npu_load(x, trans_x ? p * m + i : i * k + p) * npu_load(dz, i * n + j);
            npu_store(dy, trans_y ? j * k + p : p * n + j, acc);
        }
    for (int64_t j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < m; i++) acc += npu_load(dz, i * n + j);
        npu_store(dbias, j, acc);
    }
    return 0;
}
