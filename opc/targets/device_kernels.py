"""Devices that bring their own kernels: the `[external.OP]` sections of a
device .toml, which op instances they take, and building their C sources.

    [external.fused_gemm_epilogue]
    source = "npu_fused_gemm_epilogue.c"   # relative to the .toml
    symbol = "npu_fused_gemm_epilogue"     # int SYMBOL(const opc_kernel_call *call), runtime/opc_kernel.h
    dtypes = ["f32", "f16", "bf16"]        # element type of the op's first operand (select: its values)
    activation = ["none"]                  # any attribute of the op: the values the kernel supports

An op instance runs through the kernel iff its dtype is listed and every
constrained attribute has a listed value (`ExternalKernel.mismatch` is None);
every other instance runs as if the device had no kernel of its own
(`opc.targets.routing.route_op`). Legalization marks each instance it sends to a
kernel with EXTERNAL_ATTR = the symbol; the lowering turns a marked op into one
`opc_loops.external_call`, and the build compiles the kernel's source once per
content into an object linked into the module (opc/lowering/device_build.py).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f32,
    i64,
)
from xdsl.ir import Attribute, Operation
from xdsl.irdl import IRDLOperation, VerificationContext
from xdsl.utils.exceptions import VerifyException

from opc.dialects.kinds import element_of
from opc.dialects.opc import int_of, int_values
from opc.dtypes import MLIR_DTYPES, mlir_name
from opc.errors import InputError, OpcError
from opc.ops.registry import ALL_OPS

EXTERNAL_ATTR = "opc.external"
"""The discardable attribute legalization puts on an op instance that runs through a device kernel."""

def external_symbol(op: Operation) -> str | None:
    """The kernel legalization chose for this op instance, if any."""
    mark = op.attributes.get(EXTERNAL_ATTR)
    return mark.data if isinstance(mark, StringAttr) else None


def instance_dtype(op: Operation) -> str:
    """The dtype a kernel is chosen by: the element type of the op's DTYPE_OPERAND (the first operand
    but for select's values; the result, without operands)."""
    value = op.operands[getattr(op, "DTYPE_OPERAND", 0)] if op.operands else op.results[0]
    return mlir_name(element_of(value))


# ---------------------------------------------------------------------------
# Attributes: kinds (from the op's IRDL definition) and values
# ---------------------------------------------------------------------------

# Probes in this order: an i64 IntegerAttr fails a bool property, a bool fits an integer one.
KIND_PROBES: tuple[tuple[str, Attribute], ...] = (
    ("int", IntegerAttr(0, i64)), ("bool", BoolAttr.from_bool(True)), ("float", FloatAttr(0.0, 64)),
    ("string", StringAttr("")), ("dtype", f32), ("ints", DenseArrayBase.from_list(i64, [0])),
)  # fmt: skip


def string_values() -> dict[str, tuple[str, ...]]:
    """The string attributes whose values are an enumeration, by attribute name."""
    from opc.dialects.opc import ACTIVATION_GRADS, ACTIVATIONS

    return {"activation": ACTIVATIONS, "activation_grad": ACTIVATION_GRADS}


@functools.cache
def op_classes() -> dict[str, type[IRDLOperation]]:
    from opc.dialects.opc import Opc

    return {cls.name: cast(type[IRDLOperation], cls) for cls in Opc.operations}  # opc's ops: all IRDL


@functools.cache
def attribute_kinds(op_name: str) -> dict[str, str]:
    """The op's properties and their kinds: bool, int, float, string, dtype or ints."""
    kinds = {}
    for name, prop in op_classes()[op_name].get_irdl_definition().properties.items():
        for kind, probe in KIND_PROBES:
            try:
                prop.constr.verify(probe, VerificationContext())
            except VerifyException:
                continue
            kinds[name] = kind
            break
    return kinds


def domain(op_name: str, attr: str) -> tuple | None:
    """Every value an attribute can take, where that is a short list (bools, enumerations, dtypes)."""
    kind = attribute_kinds(op_name).get(attr)
    if kind == "bool":
        return (False, True)
    if kind == "dtype":
        return tuple(MLIR_DTYPES)
    if kind == "string":
        return string_values().get(attr)
    return None


def python_value(attr: Attribute | None, kind: str) -> Any:
    if kind == "bool":  # `true` parses as i1 -1; an optional flag left out (cast's saturate) is false
        return attr is not None and int_of(attr) != 0
    if kind == "int":
        return int_of(attr)
    if kind == "float":
        assert isinstance(attr, FloatAttr)
        return attr.value.data
    if kind == "string":
        assert isinstance(attr, StringAttr)
        return attr.data
    if kind == "dtype":
        assert attr is not None
        return mlir_name(attr)
    return int_values(cast(DenseArrayBase, attr))


def attribute_value(op: Operation, name: str) -> Any:
    """The instance's value of a property (its default when the op does not spell it)."""
    kind = attribute_kinds(op.name)[name]
    attr = op.properties.get(name)
    if attr is None:
        attr = op_classes()[op.name].get_irdl_definition().properties[name].default_value
    return python_value(attr, kind)


def kernel_attributes(op: Operation) -> dict[str, Attribute]:
    """Every property of the op, defaults included: what its kernel receives."""
    props = op_classes()[op.name].get_irdl_definition().properties
    # not `get(name) or default`: an attribute may be falsy (IntegerAttr 0, an axis)
    out = {name: op.properties[name] if name in op.properties else prop.default_value for name, prop in props.items()}
    return {name: attr for name, attr in out.items() if attr is not None}


def show(value: Any) -> str:
    """A value as the .toml spells it: false, none, f32, [1, 0]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------
# A device's kernel for one op
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExternalKernel:
    op: str  # full op name, opc.X
    source: str  # path of the C file
    symbol: str
    dtypes: tuple[str, ...]
    constraints: tuple[tuple[str, tuple], ...]  # (attribute, the values the kernel supports)
    toml: str  # the device file, for messages

    @property
    def where(self) -> str:
        return f"{self.toml}: [external.{self.op.removeprefix('opc.')}]"

    def mismatch(self, op: Operation) -> str | None:
        """Why this instance does not run through the kernel (None: it does)."""
        dtype = instance_dtype(op)
        if dtype not in self.dtypes:
            return f"dtype {dtype} not in [{', '.join(self.dtypes)}]"
        for name, allowed in self.constraints:
            value = attribute_value(op, name)
            if value not in allowed:
                return f"{name} = {show(value)} not in [{', '.join(show(v) for v in allowed)}]"
        return None

    def describe(self, otherwise: str) -> str:
        """`external SYMBOL (activation = none; dtypes f32, f16); composite (activation = relu, gelu; other dtypes)`."""
        taken, left = [], []
        for name, allowed in self.constraints:
            taken.append(f"{name} = {', '.join(show(v) for v in allowed)}")
            values = domain(self.op, name)
            rest = [v for v in values if v not in allowed] if values is not None else None
            if rest is None:
                left.append(f"other {name}")
            elif rest:
                left.append(f"{name} = {', '.join(show(v) for v in rest)}")
        taken.append(f"dtypes {', '.join(self.dtypes)}")
        left.append("other dtypes")
        return f"external {self.symbol} ({'; '.join(taken)}); {otherwise} ({'; '.join(left)})"


def parse_externals(path: str, table: Any, backend: str) -> tuple[ExternalKernel, ...]:
    """The `[external.OP]` sections of a device file, checked; errors name the file and the key."""
    def fail(key: str, why: str) -> InputError:
        return InputError(f"{path}: {key}: {why}")

    if not isinstance(table, dict):
        raise fail("external", "must be a table of [external.OP] sections")
    base = os.path.dirname(os.path.abspath(path))
    kernels = []
    for raw, section in table.items():
        op = raw if raw.startswith("opc.") else f"opc.{raw}"
        key = f"[external.{raw}]"
        if op not in ALL_OPS:
            raise fail(key, f"unknown op '{raw}'")
        if not isinstance(section, dict):
            raise fail(key, "must be a table with source, symbol, dtypes")
        if backend != "cpu":
            raise fail(key, f"external C kernels run on the cpu backend; backend '{backend}' is not supported for them")
        for required in ("source", "symbol", "dtypes"):
            if required not in section:
                raise fail(key, f"missing key '{required}'")
        source, symbol, dtypes = section["source"], section["symbol"], section["dtypes"]
        if not isinstance(source, str) or not source:
            raise fail(f"{key}.source", "must be the path of a C file, relative to the .toml")
        full = os.path.normpath(os.path.join(base, source))
        if not os.path.isfile(full):
            raise fail(f"{key}.source", f"no such file '{source}' (looked for {full})")
        if not isinstance(symbol, str) or not (symbol.isidentifier() and symbol.isascii()):
            raise fail(f"{key}.symbol", f"must be a C function name, got {symbol!r}")
        if symbol.startswith("opc_"):
            raise fail(f"{key}.symbol", f"'{symbol}': names starting with opc_ are opc's own")
        if not isinstance(dtypes, list) or not dtypes or not all(isinstance(d, str) for d in dtypes):
            raise fail(f"{key}.dtypes", 'must be a non-empty list of dtype names, e.g. ["f32", "f16"]')
        for d in dtypes:
            if d not in MLIR_DTYPES:
                raise fail(f"{key}.dtypes", f"unknown dtype '{d}' (expected {', '.join(MLIR_DTYPES)})")
        constraints = tuple(
            (name, parse_constraint(op, name, values, lambda why, name=name: fail(f"{key}.{name}", why)))
            for name, values in section.items() if name not in ("source", "symbol", "dtypes")
        )  # fmt: skip
        kernels.append(ExternalKernel(op, full, symbol, tuple(dict.fromkeys(dtypes)), constraints, path))
    symbols = [k.symbol for k in kernels]
    for k in kernels:
        if symbols.count(k.symbol) > 1:
            raise fail(f"[external.{k.op.removeprefix('opc.')}].symbol", f"'{k.symbol}' names two kernels")
    return tuple(kernels)


TOML_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (int, float), "string": (str,), "dtype": (str,), "ints": (list,),
}  # fmt: skip


def parse_constraint(op: str, name: str, values: Any, fail: Callable[[str], OpcError]) -> tuple:
    kinds = attribute_kinds(op)
    if name not in kinds:
        known = ", ".join(sorted(kinds)) or "none"
        raise fail(f"unknown attribute of {op} (its attributes: {known}; and source, symbol, dtypes)")
    kind = kinds[name]
    if not isinstance(values, list) or not values:
        raise fail(f"must be a non-empty list of the values the kernel supports, e.g. {name} = [...]")
    out = []
    for v in values:
        ok = isinstance(v, TOML_TYPES[kind]) and not (kind in ("int", "float") and isinstance(v, bool))
        if kind == "ints":
            ok = ok and all(isinstance(i, int) and not isinstance(i, bool) for i in cast(list, v))
        if not ok:
            raise fail(f"{v!r} is not a {kind} value")
        allowed = domain(op, name)
        if kind == "dtype" and v not in MLIR_DTYPES or kind == "string" and allowed is not None and v not in allowed:
            raise fail(f"unknown value '{v}' (expected {', '.join(show(a) for a in allowed or MLIR_DTYPES)})")
        out.append(tuple(cast(list, v)) if kind == "ints" else float(v) if kind == "float" else v)
    return tuple(dict.fromkeys(out))
