"""The contract between a compiled module's C code and its Python side: entry-point names,
the signature record the binding is built from, and the status codes of device kernels.
It imports no compiler (no xDSL), so that loading a module already compiled
(opc/compile_cache.py) stays fast."""

from __future__ import annotations

from dataclasses import dataclass, field

from opc.lowering.c_text import c_symbol  # noqa: F401  (re-exported: the emitters and bindings import it here)

KERNEL_STATUS = 2  # what an entry point returns when a device kernel failed (1: out of memory)
KERNEL_MESSAGE_FN = "opc_kernel_message"
SET_THREADS_FN = "opc_set_num_threads"  # every CPU module's setter of its thread count (opc/threads.py)
RELEASE_FN = "opc_release"  # a CPU module's free() of a buffer it handed out (FunctionSignature.handed)
# a CPU module's register (1) / drop (0) of argument bytes that stay the same between calls, whose
# packed copies its kernels may keep (runtime/opc_frozen.h): opc.load_onnx's weights
FROZEN_FN = "opc_frozen"
OOM_FN = "opc_oom_size"  # a CPU module's size of the calling thread's last failed allocation (bytes)
# where a module saves loop values (opc_stack): the calling thread's stack buffer now, and the most
# its last call held (bytes)
STACK_CAPACITY_FN = "opc_stack_capacity"
STACK_PEAK_FN = "opc_stack_peak"

# Exported entry points are ENTRY_PREFIX + the func's name: a prefix of their
# own, so that no user function can collide with a runtime helper (opc_*).
ENTRY_PREFIX = "opc_fn_"


@dataclass
class FunctionSignature:
    """What the Python side needs to call a compiled function."""

    name: str
    inputs: list[tuple[str, tuple[int | str, ...], str]]  # (arg name, shape, dtype name)
    outputs: list[tuple[tuple[int | str, ...], str]]
    # run-time check sites: (exception name, message with {value}) for status -1, -2, ...
    errors: list[tuple[str, str]] = field(default_factory=list)
    # run-time sizes: the size parameters (n0, n1, ...) the C function takes after its outputs; a
    # `?` dim in inputs/outputs is a polynomial over them as text (opc/symbolic.py); and the
    # equalities (lhs, rhs, what) the call checks before the C function runs
    sizes: list[str] = field(default_factory=list)
    checks: list[tuple[str, str, str]] = field(default_factory=list)
    # data sizes (a nonzero's count: known only after the call), as (symbol, upper bound): results
    # whose shape holds one are allocated at the bound, and the last output (one i64 each, not a
    # result) says what each came to
    found: list[tuple[str, str]] = field(default_factory=list)
    # results the function allocates (a data size with no bound before the call, "?" in found): their
    # parameter is an int64 handle the C code writes the buffer's address into; the binding frees it
    handed: list[int] = field(default_factory=list)
    # size parameters the call computes from those before them (ONNX Slice's clamped bounds), as
    # (symbol, kind, a, b): symbolic.DERIVED[kind] of the sizes a and b
    derived: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def dynamic(self) -> bool:
        return bool(self.sizes or self.found)
