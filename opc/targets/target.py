"""Targets: a name, a code emitter (backend) and the ops it has kernels for.

    get_target("cpu")                   # built in
    get_target("cuda")                  # built in
    get_target("examples/device_no_fused.toml")

A device file says

    name = "my-npu"
    backend = "cpu"                      # optional, cpu (default) or cuda
    kernels = ["add", "opc.matmul", ...] # with or without the opc. prefix

    [external.fused_gemm_epilogue]       # optional: the device's own C kernels
    source = "npu_fused_gemm_epilogue.c" # (opc/targets/device_kernels.py, runtime/opc_kernel.h)
    symbol = "npu_fused_gemm_epilogue"
    dtypes = ["f32", "f16"]
    activation = ["none"]

Ops a target has no kernel for are rewritten by their invoke or composite
rule (opc/ops/registry.py) until only kernel ops remain; an instance an external
kernel admits runs through it instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import tomllib
from xdsl.ir import Operation

from opc.errors import InputError
from opc.ops.registry import ALL_OPS, kernel_ops
from opc.targets.device_kernels import ExternalKernel, parse_externals

BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    kernels: frozenset[str]
    source: str = field(default="built-in", compare=False)
    """Where the kernel list came from: 'built-in' or the .toml path."""
    externals: tuple[ExternalKernel, ...] = ()
    """The device's own kernels ([external.OP] sections)."""

    def external_for(self, op: Operation) -> ExternalKernel | None:
        """The device kernel that admits this op instance (its dtype and attribute values), if any."""
        for kernel in self.externals:
            if kernel.op == op.name and kernel.mismatch(op) is None:
                return kernel
        return None

    def external_of(self, name: str) -> ExternalKernel | None:
        return next((k for k in self.externals if k.op == name), None)


# The kernel lists of the built-in targets: each op class's KERNELS (opc/dialects/opc.py), so every
# op but cast_grad (realised by invoking cast) and the normalizations that run by their composite
# rules; cuda also lacks fused_conv_epilogue.
BUILTIN_KERNELS: frozenset[str] = kernel_ops("cpu")

BUILTIN_TARGETS = {name: Target(name, name, kernel_ops(name)) for name in BACKENDS}


def op_name(name: str) -> str:
    return name if name.startswith("opc.") else f"opc.{name}"


def get_target(spec: str) -> Target:
    """'cpu', 'cuda' or the path of a device .toml file."""
    if spec in BUILTIN_TARGETS:
        return BUILTIN_TARGETS[spec]
    if not spec.endswith(".toml") and not os.path.isfile(spec):
        raise InputError(f"unknown target '{spec}' (expected cpu, cuda or a device FILE.toml)")
    return load_toml(spec)


def load_toml(path: str) -> Target:
    def fail(why: str) -> InputError:
        return InputError(f"{path}: {why}")

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise fail("no such target file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as err:
        raise fail(f"malformed target file: {err}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise fail("malformed target file: arrays or tables nested too deeply") from None
    unknown_keys = sorted(set(data) - {"name", "backend", "kernels", "external"})
    if unknown_keys:
        raise fail(f"unknown key(s) {', '.join(unknown_keys)} (expected name, backend, kernels, external)")
    name = data.get("name", os.path.splitext(os.path.basename(path))[0])
    backend = data.get("backend", "cpu")
    kernels = data.get("kernels")
    if not isinstance(name, str) or not name:
        raise fail("'name' must be a non-empty string")
    if backend not in BACKENDS:
        raise fail(f"'backend' must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels):
        raise fail("'kernels' must be a list of op names, e.g. kernels = [\"add\", \"opc.matmul\"]")
    names = [op_name(k) for k in kernels]
    unknown = [k for k, n in zip(kernels, names) if n not in ALL_OPS]
    if unknown:
        raise fail(f"unknown op(s) in kernels: {', '.join(unknown)}")
    externals = parse_externals(path, data.get("external", {}), backend)
    return Target(name, backend, frozenset(names), source=path, externals=externals)
