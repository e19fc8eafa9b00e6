/* fused_gemm_epilogue in f32: out = act(op_x(x) @ op_y(y) + bias), K unrolled by 4 then its
 * tail; with relu, reserve_space = the pre-activation. Planted bugs:
 *   gemm-trans-y-ignored       reads y as [K, N] even when trans_y
 *   gemm-bias-dropped          no bias
 *   gemm-k-tail                forgets the tail of K (K not a multiple of 4)
 *   gemm-reserve-not-written   leaves reserve_space uninitialised
 *   gemm-reserve-activated     saves relu(z) in reserve_space, not z
 *   gemm-relu-drops-nan        relu as z > 0 ? z : 0, which turns NaN into 0 */
#include "planted.h"

int planted_gemm(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *y = &call->inputs[1], *bias = &call->inputs[2];
    const opc_tensor *out = &call->outputs[0], *reserve = call->num_outputs > 1 ? &call->outputs[1] : NULL;
    const float *X = x->data, *Y = y->data, *B = bias->data;
    const int relu = strcmp(opc_attr_string(call, "activation", "none"), "relu") == 0;
    const int tx = opc_attr_bool(call, "trans_x", 0), ty = opc_attr_bool(call, "trans_y", 0) && !planted("gemm-trans-y-ignored");
    const int64_t m = out->shape[0], n = out->shape[1], k = tx ? x->shape[0] : x->shape[1];
    const int64_t k4 = k / 4 * 4;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float z = 0.0f;
            int64_t p = 0;
#define TERM(p) (X[tx ? (p) * m + i : i * k + (p)] * Y[ty ? j * k + (p) : (p) * n + j])
            for (; p < k4; p += 4) z += TERM(p) + TERM(p + 1) + TERM(p + 2) + TERM(p + 3);
            for (; p < k && !planted("gemm-k-tail"); p++) z += TERM(p);
            if (!planted("gemm-bias-dropped")) z += B[j];
            const float a = !relu ? z : planted("gemm-relu-drops-nan") ? (z > 0.0f ? z : 0.0f) : (z < 0.0f ? 0.0f : z);
            ((float *)out->data)[i * n + j] = a;
            if (reserve && !planted("gemm-reserve-not-written"))
                ((float *)reserve->data)[i * n + j] = planted("gemm-reserve-activated") ? a : z;
        }
    return 0;
}
