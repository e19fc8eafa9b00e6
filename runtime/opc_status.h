/* opc_status.h -- the run-time status protocol of opc's generated functions.
 *
 * Every generated entry point returns an int status:
 *      0  success;
 *    > 0  a backend failure: 1 = out of memory on the CPU, a cudaError_t on CUDA;
 *    < 0  a run-time check failed: -status - 1 numbers the check site in that
 *         function. The compiler lists the sites (FunctionSignature.errors: an
 *         exception name and a message naming the argument), and the Python
 *         binding raises that exception with the offending value, which the
 *         module's opc_error_value() returns for the last failed call of the
 *         calling thread.
 *
 * A function with checks owns a status record of OPC_STATUS_LEN int64 values,
 * zeroed on entry: record[0] the failing status (the first failure wins,
 * atomically: checks run inside parallel loops and GPU kernels), record[1]
 * the offending value. A failed check lets the computation go on with a safe
 * value (index 0), so that nothing ever reads or writes out of bounds; the
 * function returns record[0] when it ends.
 *
 * Header only; compiles as C99 (gcc) and CUDA C++ (nvcc), host and device.
 */
#ifndef OPC_STATUS_H
#define OPC_STATUS_H

#include <stdint.h>
#include "opc_runtime.h"

#define OPC_STATUS_LEN 2

/* Record a failure with status `code` (< 0) and the offending value, unless one is recorded already. */
OPC_FN void opc_status_fail(int64_t *record, int64_t code, int64_t value) {
#if defined(__CUDA_ARCH__)
    if (atomicCAS((unsigned long long *)record, 0ull, (unsigned long long)code) == 0ull) record[1] = value;
#else
    int64_t expected = 0;
    if (__atomic_compare_exchange_n(record, &expected, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        __atomic_store_n(record + 1, value, __ATOMIC_RELAXED);
#endif
}

/* An index read from a tensor, for an axis of size n: negatives count from the
 * end when `wrap` (np.take); one outside [0, n) fails with `code` and reads as 0. */
OPC_FN int64_t opc_check_index(int64_t i, int64_t n, int wrap, int64_t *record, int64_t code) {
    const int64_t j = (wrap && i < 0) ? i + n : i;
    if (j >= 0 && j < n) return j;
    opc_status_fail(record, code, i);
    return 0;
}

#endif /* OPC_STATUS_H */
