"""Memory: loads and stores by offset, buffers from the arena or the stack, views.

A part of CEmitter (c_emitter.py), which mixes it in."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Iterable

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from opc.dialects.kinds import element_of
from opc.dialects.opc import DYNAMIC
from opc.lowering.c_expressions import c_type
from opc.lowering.emitter_state import EmitterState


class MemoryEmission(EmitterState):
    def dims_of(self, ref: SSAValue) -> list[int | str]:
        """A buffer's sizes: numbers, and for its `?` dims the C names of the sizes given to the op
        that made it (memref.alloc's dynamic sizes, a reinterpret_cast's sizes)."""
        shape = ref.type.get_shape()  # type: ignore[attr-defined]
        if DYNAMIC not in shape:
            return list(shape)
        dynamic = iter(dynamic_size_operands(ref))
        return [d if d != DYNAMIC else self.name(next(dynamic)) for d in shape]

    def offset(self, ref: SSAValue, indices: Iterable[SSAValue]) -> str:
        dims = self.dims_of(ref)
        terms = []
        for d, idx in enumerate(indices):
            if self.constants.get(idx) == 0:
                continue
            stride = c_product(dims[d + 1:])
            terms.append(self.name(idx) if stride == 1 else f"{self.name(idx)} * {stride}")
        return " + ".join(terms) or "0"

    def element_count(self, ref: SSAValue) -> int | str:
        """How many elements a buffer holds (at least 1: malloc(0) may return NULL), in C."""
        n = c_product(self.dims_of(ref))
        return max(1, n) if isinstance(n, int) else f"opc_max1({n})"

    def emit_LoadOp(self, op: memref.LoadOp) -> None:
        r = op.res
        at = self.offset(op.memref, op.indices)
        self.line(f"const {c_type(r.type)} {self.name(r)} = {self.name(op.memref)}[{at}];")

    def emit_StoreOp(self, op: memref.StoreOp) -> None:
        self.line(f"{self.name(op.memref)}[{self.offset(op.memref, op.indices)}] = {self.name(op.value)};")

    def emit_AllocOp(self, op: memref.AllocOp) -> None:
        t = op.memref.type
        if op.memref in self.arena:
            ct = c_type(t.element_type)
            self.line(f"{ct} *restrict {self.name(op.memref)} = ({ct} *)(opc_arena + {self.arena[op.memref]});")
            return
        n = self.element_count(op.memref)
        ptr, ct = self.name(op.memref), c_type(t.element_type)
        self.line(f"{ptr} = ({ct} *)malloc(sizeof({ct}) * {n});")
        self.line(f"if (!{ptr}) {{ opc_oom_bytes = (int64_t)(sizeof({ct}) * {n}); status = 1; goto cleanup; }}")

    def emit_AllocaOp(self, op: memref.AllocaOp) -> None:
        """A row kernel's row buffer: on the thread's stack (bounded: ROW_BUFFER_BYTES)."""
        t = op.memref.type
        n = max(1, pymath.prod(t.get_shape()))
        self.line(f"{c_type(t.element_type)} {self.name(op.memref)}[{n}];")

    def emit_DeallocOp(self, op: memref.DeallocOp) -> None:
        if op.memref in self.arena:
            return  # the arena goes at cleanup
        ptr = self.name(op.memref)
        self.line(f"free({ptr}); {ptr} = NULL;")

    def emit_ReinterpretCastOp(self, op: memref.ReinterpretCastOp) -> None:
        src = op.source
        const = "const " if src in self.const_ptrs else ""
        if const:
            self.const_ptrs.add(op.result)
        ct = c_type(element_of(op.result))
        at = f" + {self.name(op.offsets[0])}" if op.offsets else ""  # a slice's view (lower_slice_view)
        self.line(f"{const}{ct} *{self.name(op.result)} = {self.name(src)}{at};")


def dynamic_size_operands(ref: SSAValue) -> list[SSAValue]:
    """The operands giving a buffer's `?` dims, in order (the op that made the buffer)."""
    op = ref.owner
    if isinstance(op, memref.AllocOp):
        return list(op.dynamic_sizes)
    if isinstance(op, memref.ReinterpretCastOp):
        return list(op.sizes)
    raise NotImplementedError(f"C emitter: no sizes known for a buffer with run-time dims ({ref.type}, made by "
                              f"{type(op).__name__})")


START_ARITH: dict[type[Operation], str] = {arith.AddiOp: "+", arith.SubiOp: "-", arith.MuliOp: "*"}
"""The index arithmetic a size known at a function's start is computed by (size_lowering.size_value)."""


def start_size(v: SSAValue, fn: func.FuncOp, name: Callable[[SSAValue], str]) -> str | None:
    """An index value as a C expression of the function's parameters and constants alone (valid
    from its first line), or None where it is computed otherwise: a data size, counted by loops."""
    if isinstance(v, BlockArgument):
        return name(v) if v.owner is fn.body.block else None
    op = v.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return str(op.value.value.data)
    if not isinstance(op, Operation) or type(op) not in START_ARITH:
        return None
    a, b = (start_size(x, fn, name) for x in op.operands)
    return None if a is None or b is None else f"({a} {START_ARITH[type(op)]} {b})"


def c_product(dims: Iterable[int | str]) -> int | str:
    """The product of sizes: a number where all are, else one C expression (numbers folded)."""
    n, names = 1, []
    for d in dims:
        if isinstance(d, int):
            n *= d
        else:
            names.append(d)
    if not names:
        return n
    return " * ".join(([str(n)] if n != 1 else []) + names) if len(names) + (n != 1) == 1 else \
        "(" + " * ".join(([str(n)] if n != 1 else []) + names) + ")"


def has_dynamic_dims(ref: SSAValue) -> bool:
    return DYNAMIC in ref.type.get_shape()  # type: ignore[attr-defined]
