/* layer_norm over the dims from begin_norm_axis on, in f32 (f64 for f64): two passes (mean,
 * then the mean of squared deviations), y = (x - mean) * rstd * scale + bias, rstd = 1 / sqrt(var
 * + epsilon); mean and rstd saved in f32 (f64). Planted bugs:
 *   ln-no-epsilon        rstd = 1 / sqrt(var): inf for a constant row
 *   ln-unbiased          var divided by n - 1 (torch.var's default), not n
 *   ln-epsilon-outside   rstd = 1 / (sqrt(var) + epsilon)
 *   ln-one-pass          var = E[x^2] - E[x]^2 in f32: cancels for rows with a small spread
 *   ln-saves-var         saves var where rstd belongs */
#include "planted.h"

int planted_layer_norm(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *scale = &call->inputs[1], *bias = &call->inputs[2];
    const opc_tensor *y = &call->outputs[0], *mean_out = &call->outputs[1], *rstd_out = &call->outputs[2];
    int64_t begin = opc_attr_int(call, "begin_norm_axis", -1);
    if (begin < 0) begin += x->rank;
    const double epsilon = opc_attr_float(call, "epsilon", 1e-5);
    int64_t outer = 1, n = 1;
    for (int32_t d = 0; d < x->rank; d++) {
        if (d < begin) outer *= x->shape[d]; else n *= x->shape[d];
    }
    const int wide = x->dtype == OPC_DTYPE_F64;
    for (int64_t o = 0; o < outer; o++) {
        const int64_t base = o * n;
        double mean, var;
        if (wide) {
            double s = 0.0, q = 0.0;
            for (int64_t j = 0; j < n; j++) s += load(x, base + j);
            mean = s / (double)n;
            for (int64_t j = 0; j < n; j++) { const double d = load(x, base + j) - mean; q += d * d; }
            var = q / (double)n;
        } else {
            float s = 0.0f, q = 0.0f;
            for (int64_t j = 0; j < n; j++) s += (float)load(x, base + j);
            const float m = s / (float)n;
            if (planted("ln-one-pass")) {
                for (int64_t j = 0; j < n; j++) { const float v = (float)load(x, base + j); q += v * v; }
                var = (double)(q / (float)n - m * m);
            } else {
                for (int64_t j = 0; j < n; j++) { const float d = (float)load(x, base + j) - m; q += d * d; }
                var = (double)(q / (float)(planted("ln-unbiased") ? n - 1 : n));
            }
            mean = m;
        }
        double rstd = planted("ln-no-epsilon") ? 1.0 / sqrt(var)
                    : planted("ln-epsilon-outside") ? 1.0 / (sqrt(var) + epsilon) : 1.0 / sqrt(var + epsilon);
        if (!wide) rstd = (float)rstd;
        for (int64_t j = 0; j < n; j++) {
            const double v = (load(x, base + j) - mean) * rstd * load(scale, j) + load(bias, j);
            store(y, base + j, wide ? v : (double)(float)v);
        }
        store(mean_out, o, mean);
        store(rstd_out, o, planted("ln-saves-var") ? var : rstd);
    }
    return 0;
}
