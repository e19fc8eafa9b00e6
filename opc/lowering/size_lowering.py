"""Run-time sizes at the loop level: the function's size parameters, sizes as `index` values,
buffers whose `?` dims are given at run time.

A function with `?` dims (opc/dialects/sizes.py) becomes `@f(inputs..., outputs..., sizes...)`:
one `index` parameter per size symbol, after the outputs. A polynomial size is computed once
at the top of the function (arith.muli / addi of the parameters), so it dominates every nest;
a buffer with `?` dims is a `memref.alloc(%n)` or, for an argument, a
`memref.reinterpret_cast` of it with its sizes (the C emitter reads a buffer's sizes from the
op that defines it). Static dims stay numbers, so the code for tensor<?x768xf32> keeps its
vector inner loops.

A size an op computes from data (opc.nonzero's count; sizes.py's `data`) is an `index` value the
op's lowering defines mid-function (`define_data_size`): polynomials of it are computed just after
it. A result whose shape holds such a size is written contiguously at its run-time shape into a
caller buffer allocated at the size's upper bound, and the function's last output (`found`, one
i64 per such size) tells the caller the sizes it came to.

A part of FunctionLowering (opc_lower_to_loops.py), which mixes it in."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from opc.dialects.kinds import element_of
from opc.dialects.opc import DYNAMIC
from opc.dialects.opc_loops import CheckBoundOp, CheckIndexOp, RaiseStatusOp
from opc.dialects.sizes import FunctionSizes, Shape
from opc.dtypes import numpy_name
from opc.lowering.control_flow_lowering import on_host
from opc.lowering.lowering_state import LoweringState
from opc.symbolic import Size, Sym

SIZES_ATTR = "opc.sizes"  # on a lowered func: its size parameters' names, after the outputs
ARG_SHAPES_ATTR = "opc.arg_shapes"  # on a lowered func: each input's and output's shape, `?` dims as polynomials
CONSTRAINTS_ATTR = "opc.size_checks"  # on a lowered func: [lhs, rhs, what] sizes the call checks equal
FOUND_ATTR = "opc.found_sizes"  # on a lowered func: [symbol, upper bound] of each data size its last output returns
HANDED_ATTR = "opc.handed"  # on a lowered func: [output, dtype] of each result it allocates (HandOutOp)
DERIVED_ATTR = "opc.derived_sizes"  # on a lowered func: [symbol, kind, a, b] of each size parameter the call computes


def memref_type(element: Attribute, shape: Sequence[Size]) -> MemRefType:
    return MemRefType(element, [d if isinstance(d, int) else DYNAMIC for d in shape])


def size_text(shape: Sequence[Size]) -> ArrayAttr:
    return ArrayAttr([StringAttr(str(d)) for d in shape])


class SizeLowering(LoweringState):
    sizes: FunctionSizes | None
    symbolic: dict[SSAValue, Shape]  # the table shape_of reads (sizes.symbolic_shapes)
    size_params: dict[str, SSAValue]
    size_values: dict[Size, SSAValue]
    size_anchor: Operation | None
    data_anchor: Operation | None  # the last op defining a data size (polynomials of them go after it)
    found: list[str]  # the data sizes the results' shapes hold, returned in the last output

    def sizes_fn(self) -> func.FuncOp:
        """The function the size analysis ran on (the lowering's, never the importer's)."""
        assert self.sizes is not None and self.sizes.fn is not None
        return self.sizes.fn

    def size_param_names(self) -> list[str]:
        if self.sizes is None:
            return []
        names: dict[str, None] = {}
        for a in self.sizes_fn().args:
            for d in self.sizes.shapes[a]:
                if isinstance(d, Sym):
                    names.update(dict.fromkeys(sorted(d.symbols)))
        for shape in self.sizes.shapes.values():
            for d in shape:
                if isinstance(d, Sym):
                    missing = sorted(d.symbols - names.keys() - self.sizes.data.keys() - self.sizes.derived.keys())
                    if missing:
                        raise AssertionError(f"size {d} is not given by an argument's dims")
        names.update(dict.fromkeys(self.sizes.derived))  # the binding computes them from those before
        return list(names)

    def add_size_params(self, names: Sequence[str]) -> None:
        self.size_params, self.size_values, self.size_anchor, self.data_anchor = {}, {}, None, None
        for name in names:
            arg = self.entry.insert_arg(IndexType(), len(self.entry.args))
            arg.name_hint = name
            self.size_params[name] = arg

    def size_value(self, d: Size) -> SSAValue:
        """An `index` value of size d: a constant where the block has one, else computed once at the
        function's top from the size parameters."""
        if isinstance(d, int):
            return self.e.index(d)
        if d in self.size_values:
            return self.size_values[d]
        data = [s for s in d.symbols if s not in self.size_params]
        if data and d.is_symbol():
            raise AssertionError(f"size {d} is read before the op computing it ran")
        place = self.after_data if data else self.top
        total: SSAValue | None = None
        for monomial, coeff in d.terms:
            term: SSAValue | None = self.top_constant(coeff) if coeff != 1 or not monomial else None
            for s in monomial:
                p = self.size_params[s] if s in self.size_params else self.size_value(Sym.symbol(s))
                term = p if term is None else place(arith.MuliOp(term, p))
            assert term is not None
            total = term if total is None else place(arith.AddiOp(total, term))
        assert total is not None
        if total.owner is not self.entry:  # a parameter keeps its own name
            total.name_hint = "size"
        self.size_values[d] = total
        return total

    def top_constant(self, n: int) -> SSAValue:
        return self.top(arith.ConstantOp(IntegerAttr(n, IndexType())))

    def top(self, op: Operation) -> SSAValue:
        """op placed at the top of the function, after the sizes computed so far."""
        block: Block = self.entry
        if self.size_anchor is None:
            first = block.first_op
            if first is None:
                block.add_op(op)
            else:
                block.insert_op_before(op, first)
        else:
            block.insert_op_after(op, self.size_anchor)
        self.size_anchor = op
        return op.results[0]

    def after_data(self, op: Operation) -> SSAValue:
        """op placed just after the last data size defined (it reads one), so it dominates every use."""
        assert self.data_anchor is not None
        self.entry.insert_op_after(op, self.data_anchor)
        self.data_anchor = op
        return op.results[0]

    def define_data_size(self, op: Operation, count: SSAValue) -> None:
        """`count` (an index value at the function's top level) is the size `op` computed from data.
        Where the analysis equated it with a size known before (`predicted`), the count is checked
        against that size here, before anything is written at it."""
        assert self.sizes is not None and count.owner.parent_block() is self.entry  # type: ignore[union-attr]
        name = next(n for n, d in self.sizes.data.items() if d.op is op)
        if name not in self.sizes.predicted:
            self.size_values[Sym.symbol(name)] = count
            self.data_anchor = count.owner  # type: ignore[assignment]
            return
        e = self.e
        expected = self.size_value(self.sizes.resolve(Sym.symbol(name)))
        diff = e.value(arith.IndexCastOp(e.value(arith.SubiOp(count, expected)), i64))
        status = self.checks.status()  # type: ignore[attr-defined]  (FunctionLowering's)
        size = self.sizes.resolve(Sym.symbol(name))
        other = self.sizes.origin.get(str(size), f"size {size}") if isinstance(size, Sym) else f"size {size}"
        what = f"{op.name}'s count must equal {other} ({self.sizes.predicted[name]}); the count minus it is "
        code = self.checks.code(op, "ValueError", what.replace("{", "{{").replace("}", "}}") + "{value}")  # type: ignore[attr-defined]
        e.value(CheckIndexOp(diff, status, 1, code, wrap=False))
        e.emit(RaiseStatusOp(status))

    def define_value_size(self, op: Operation) -> None:
        """An `index` value read from a tensor that an op takes as a size (FunctionSizes.value_size):
        checked not negative on the host, then its size's value for the rest of the function."""
        count = self.buffers[op.results[0]]  # type: ignore[attr-defined]  (FunctionLowering's)
        code = self.checks.code(op, "ValueError", f"{op.name} gives a size of {{value}}: a size read from a "  # type: ignore[attr-defined]
                                "tensor must not be negative")
        self.e.emit(on_host(CheckBoundOp(count, self.e.index(2 ** 62), code)))
        self.define_data_size(op, count)

    def found_sizes(self) -> list[str]:
        """The data sizes the results' shapes hold (not predicted): the caller learns them after the call."""
        if self.sizes is None:
            return []
        names: dict[str, None] = {}
        for v in self.returned:  # type: ignore[attr-defined]  (FunctionLowering's)
            for d in self.sizes.shapes[v]:
                if isinstance(d, Sym):
                    names.update(dict.fromkeys(sorted(n for n in d.symbols if n in self.sizes.data)))
        return list(names)

    def handed_outputs(self) -> list[int]:
        """The results whose size holds a data size with no bound before the call (a size read from a
        tensor's values): the function allocates them and hands them out (opc_loops.hand_out)."""
        if self.sizes is None:
            return []
        sizes = self.sizes
        return [i for i, v in enumerate(self.returned)  # type: ignore[attr-defined]  (FunctionLowering's)
                if any(sizes.upper_bound(d) is None for d in sizes.shapes[v])]

    def bound_text(self, name: str) -> str:
        """A data size's upper bound for the binding, "?" where none is known before the call."""
        assert self.sizes is not None
        bound = self.sizes.data[name].bound
        upper = self.sizes.upper_bound(bound) if bound is not None else None
        return "?" if upper is None else str(upper)

    def store_found(self, found_buf: SSAValue) -> None:
        """Each found size into the last output, for the caller to cut its results to."""
        e = self.e
        for k, name in enumerate(self.found):
            v = e.value(arith.IndexCastOp(self.size_value(Sym.symbol(name)), i64))
            e.emit(memref.StoreOp.get(v, found_buf, [e.index(k)]))

    def dynamic_sizes(self, shape: Sequence[Size]) -> list[SSAValue]:
        return [self.size_value(d) for d in shape if not isinstance(d, int)]

    def alloc(self, shape: Sequence[Size], element: Attribute) -> SSAValue:
        """A fresh buffer of `shape` (its `?` dims given at run time)."""
        buf = self.e.value(memref.AllocOp(self.dynamic_sizes(shape), [], memref_type(element, shape)))
        self.register(buf, shape)
        return buf

    def view(self, src: SSAValue, shape: Sequence[Size], element: Attribute,
             strides: Sequence[Size] | None = None) -> SSAValue:
        """src read as a contiguous (or `strides`) buffer of `shape`."""
        if strides is None:
            strides = contiguous(shape)
        t = memref_type(element, shape)
        op = memref.ReinterpretCastOp(src, [], self.dynamic_sizes(shape), self.dynamic_sizes(strides), [0],
                                      [d if isinstance(d, int) else DYNAMIC for d in shape],
                                      [d if isinstance(d, int) else DYNAMIC for d in strides], t)
        v = self.e.value(op)
        self.register(v, shape)
        return v

    def register(self, buf: SSAValue, shape: Sequence[Size]) -> None:
        if any(isinstance(d, Sym) for d in shape):
            self.symbolic[buf] = tuple(shape)

    def argument_views(self, args: Sequence[SSAValue], shapes: Sequence[Shape]) -> list[SSAValue]:
        """Each argument with `?` dims read through a view that carries its sizes."""
        out = []
        for a, shape in zip(args, shapes):  # (a `?` the analysis found static is viewed at its number)
            if self.holds_data(shape):  # viewed once its op computed the size (output_buffer)
                out.append(a)
            elif any(isinstance(d, Sym) for d in shape) or DYNAMIC in a.type.get_shape():  # type: ignore[attr-defined]
                v = self.view(a, shape, a.type.get_element_type())  # type: ignore[attr-defined]
                v.name_hint = a.name_hint
                out.append(v)
            else:
                out.append(a)
        return out

    def holds_data(self, shape: Sequence[Size]) -> bool:
        return self.sizes is not None and any(
            isinstance(d, Sym) and any(n in self.sizes.data for n in d.symbols) for d in shape)

    def annotate_sizes(self, fn: Operation, outputs: Sequence[Shape]) -> None:
        """The lowered function's size parameters, argument shapes and checks, for the binding."""
        if self.sizes is None:
            return
        fn.attributes[SIZES_ATTR] = ArrayAttr([StringAttr(n) for n in self.size_params])
        shapes = [self.sizes.shapes[a] for a in self.sizes_fn().args] + list(outputs)
        if self.found:
            shapes.append((len(self.found),))
            fn.attributes[FOUND_ATTR] = ArrayAttr([ArrayAttr([StringAttr(n), StringAttr(self.bound_text(n))])
                                                   for n in self.found])
        if self.handed:  # type: ignore[attr-defined]  (FunctionLowering's)
            fn.attributes[HANDED_ATTR] = ArrayAttr([
                ArrayAttr([IntAttr(i), StringAttr(numpy_name(element_of(self.returned[i])))])  # type: ignore[attr-defined]
                for i in self.handed])  # type: ignore[attr-defined]
        if self.sizes.derived:
            fn.attributes[DERIVED_ATTR] = ArrayAttr([ArrayAttr([StringAttr(p) for p in row])
                                                     for row in self.sizes.derived_table()])
        fn.attributes[ARG_SHAPES_ATTR] = ArrayAttr([size_text(s) for s in shapes])
        fn.attributes[CONSTRAINTS_ATTR] = ArrayAttr([
            ArrayAttr([StringAttr(str(c.lhs)), StringAttr(str(c.rhs)), StringAttr(c.what)])
            for c in self.sizes.constraints])


def contiguous(shape: Sequence[Size]) -> list[Size]:
    strides: list[Size] = []
    n: Size = 1
    for d in reversed(shape):
        strides.append(n)
        n = n * d
    return strides[::-1]


def function_shapes(fn: Operation) -> list[tuple[int | str, ...]] | None:
    """A lowered function's argument shapes as the binding reads them (ints; a `?` dim's polynomial
    as text), or None where it has no run-time sizes."""
    attr = fn.attributes.get(ARG_SHAPES_ATTR)
    if not isinstance(attr, ArrayAttr):
        return None
    return [tuple(int(d.data) if d.data.lstrip("-").isdigit() else d.data for d in shape.data) for shape in attr.data]


def function_found(fn: Operation) -> list[tuple[str, str]]:
    """A lowered function's data sizes returned in its last output: (symbol, upper bound), in order."""
    attr = fn.attributes.get(FOUND_ATTR)
    if not isinstance(attr, ArrayAttr):
        return []
    return [(f.data[0].data, f.data[1].data) for f in attr.data]


def function_handed(fn: Operation) -> dict[int, str]:
    """A lowered function's results it allocates itself: output number -> dtype name."""
    attr = fn.attributes.get(HANDED_ATTR)
    if not isinstance(attr, ArrayAttr):
        return {}
    return {h.data[0].data: h.data[1].data for h in attr.data}


def function_sizes(fn: Operation) -> tuple[list[str], list[tuple[str, str, str]]]:
    """A lowered function's size parameters and the equalities its call checks."""
    names, checks = fn.attributes.get(SIZES_ATTR), fn.attributes.get(CONSTRAINTS_ATTR)
    if not isinstance(names, ArrayAttr) or not isinstance(checks, ArrayAttr):
        return [], []
    return [n.data for n in names.data], [tuple(part.data for part in c.data) for c in checks.data]


def function_derived(fn: Operation) -> list[tuple[str, str, str, str]]:
    """A lowered function's size parameters the call computes from the others: (symbol, kind, a, b)."""
    attr = fn.attributes.get(DERIVED_ATTR)
    if not isinstance(attr, ArrayAttr):
        return []
    return [tuple(p.data for p in row.data) for row in attr.data]  # type: ignore[misc]
