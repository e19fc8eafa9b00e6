/* reduce_max: reduce.h. */
#include "reduce.h"

int planted_reduce_max(const opc_kernel_call *call) { return reduce(call, 1); }
