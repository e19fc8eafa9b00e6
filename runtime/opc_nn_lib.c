/* The kernels of opc_nn.h, compiled once per toolchain and dtype (-DOPC_NN_ONLY=code,
 * see opc_nn.h) and linked into every module that calls them (see opc_nn_api.h).
 * Hidden visibility keeps each extension's copy its own. */
#define OPC_NN_ENTRY __attribute__((visibility("hidden")))
#include "opc_nn_api.h"
#include "opc_nn.h"
