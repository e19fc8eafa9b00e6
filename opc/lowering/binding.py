"""A built extension's entry points as Python functions: one CompiledFunction per signature (a
DynamicFunction where the function takes run-time sizes), the thread setter and profiler hooked up."""

from __future__ import annotations

import os
from types import ModuleType

from opc.lowering.abi import (
    ENTRY_PREFIX,
    FROZEN_FN,
    KERNEL_MESSAGE_FN,
    OOM_FN,
    RELEASE_FN,
    SET_THREADS_FN,
    FunctionSignature,
    c_symbol,
)
from opc.lowering.build import CompiledFunction
from opc.lowering.dynamic_call import DynamicFunction


def bind(ext: ModuleType, signatures: list[FunctionSignature]) -> dict[str, CompiledFunction]:
    setter = getattr(ext.lib, SET_THREADS_FN, None)
    if setter is not None:
        from opc.threads import register

        register(ext.__name__, setter)
    if os.environ.get("OPC_PROFILE", "") not in ("", "0") and hasattr(ext.lib, "opc_profile"):
        from opc.profiler import profile_at_exit

        profile_at_exit(ext)
    message = getattr(ext.lib, KERNEL_MESSAGE_FN, None)
    detail = getattr(ext.lib, "opc_error_value", None)
    oom = getattr(ext.lib, OOM_FN, None)
    functions = {s.name: function_class(s)(ext.ffi, getattr(ext.lib, f"{ENTRY_PREFIX}{c_symbol(s.name)}"), s,
                                           message, detail, oom) for s in signatures}
    release = getattr(ext.lib, RELEASE_FN, None)
    frozen = getattr(ext.lib, FROZEN_FN, None)
    for f in functions.values():
        f.freeze = frozen
        f.set_threads = setter
        if isinstance(f, DynamicFunction):
            f.release = release
    return functions


def function_class(sig: FunctionSignature) -> type[CompiledFunction]:
    return DynamicFunction if sig.dynamic else CompiledFunction

