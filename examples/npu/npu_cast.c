/* cast between f32, f16 and bf16: through f32, which holds every f16 and bf16
 * exactly, so each conversion rounds once (to nearest even), as opc's does. */
#include "npu_float.h"

int npu_cast(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    if (!npu_is_float(x->dtype) || !npu_is_float(out->dtype))
        return opc_kernel_fail(call, "cast %s -> %s is not supported", opc_dtype_name(x->dtype),
                               opc_dtype_name(out->dtype));
    const int64_t count = opc_numel(x);
    for (int64_t i = 0; i < count; i++) npu_store(out, i, npu_load(x, i));
    return 0;
}
