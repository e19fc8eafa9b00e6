/* reduce_sum: reduce.h. */
#include "reduce.h"

int planted_reduce_sum(const opc_kernel_call *call) { return reduce(call, 0); }
