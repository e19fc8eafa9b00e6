"""Run-time sizes in the ONNX importer (`import_graph(..., dynamic=True)`): an exporter's open
dims (`batch`, `seq`) stay `?`, so that one compiled module serves every size.

While a graph imports, every value's shape is symbolic (opc/dialects/sizes.py, fed op by op
as the converters emit them): `Node.shape(i)` and `shape_of` give `n0*64` where the type says
`?`. A `Shape` node gives an array of such sizes, known at compile time as expressions; the
shape arithmetic exporters build from it (Gather, Concat, Squeeze, Slice, Add, Mul, ...) is
folded here on those arrays, and what consumes it (Reshape, Expand, ConstantOfShape, Range)
gets the sizes as `index` operands, computed from `tensor.dim` of the arguments. An op that
needs a run-time size as a compile-time number raises, and load_onnx falls back to a module
per shape (its `static_reason` says which node).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import IndexType, IntegerAttr, i64
from xdsl.ir import Operation, SSAValue

from opc.dialects import opc as o
from opc.dialects.opc import SYMBOLIC_SHAPES
from opc.dialects.sizes import DERIVED_OPS, FunctionSizes, Shape
from opc.errors import UnsupportedError
from opc.symbolic import Size, Sym, exact_quotient

# ---------------------------------------------------------------------------
# Arrays of sizes: a Shape node's output where some dims are known only at run time
# ---------------------------------------------------------------------------


class SizeNeeded(UnsupportedError):
    """A converter needs a size as a number where it is known at run time only (a `?` dim)."""


def is_symbolic(array: Any) -> bool:
    return isinstance(array, np.ndarray) and array.dtype == object


def sizes_array(values: Sequence[Size] | np.ndarray, shape: Sequence[int] | None = None) -> np.ndarray:
    """Sizes as an int64 array where all are numbers, else an object array of ints and Syms."""
    flat = [v if isinstance(v, Sym) else int(v) for v in np.asarray(values, dtype=object).reshape(-1)]
    shape = np.shape(values) if shape is None else tuple(shape)
    if any(isinstance(v, Sym) for v in flat):
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(shape)
    return np.array(flat, np.int64).reshape(shape)


def ints(array: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


SymbolicFolder = Callable[[Any, list[Any]], list[np.ndarray]]
SYMBOLIC_FOLDERS: dict[str, SymbolicFolder] = {}


def symbolic_folder(*op_types: str) -> Callable[[SymbolicFolder], SymbolicFolder]:
    def register(fn: SymbolicFolder) -> SymbolicFolder:
        for t in op_types:
            SYMBOLIC_FOLDERS[t] = fn
        return fn
    return register


def axes_of(node: Any, inputs: list[Any], rank: int) -> list[int]:
    given = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else list(node.attr("axes", []))
    return sorted(a % rank for a in given)


@symbolic_folder("Identity")
def fold_identity(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    return [inputs[0]]


@symbolic_folder("Cast")
def fold_cast(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    from onnx import TensorProto

    if node.attr("to") not in (TensorProto.INT64, TensorProto.INT32):
        raise SizeNeeded(f"{node.label}: a run-time size cast to a non-integer type: opc keeps sizes as integers")
    return [inputs[0]]


@symbolic_folder("Squeeze")
def fold_squeeze(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    a = inputs[0]
    axes = axes_of(node, inputs, a.ndim) or [i for i, d in enumerate(a.shape) if d == 1]
    return [sizes_array(np.squeeze(a, tuple(axes)))]


@symbolic_folder("Unsqueeze")
def fold_unsqueeze(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    a = inputs[0]
    given = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else list(node.attr("axes", []))
    rank = a.ndim + len(given)
    return [sizes_array(np.expand_dims(a, tuple(sorted(x % rank for x in given))))]


@symbolic_folder("Concat")
def fold_concat(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    parts = [np.asarray(p, dtype=object) for p in inputs if p is not None]
    return [sizes_array(np.concatenate(parts, axis=node.attr("axis", 0)))]


@symbolic_folder("Gather")
def fold_gather(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    return [sizes_array(np.take(inputs[0], np.asarray(inputs[1], np.int64), axis=node.attr("axis", 0)))]


@symbolic_folder("Slice")
def fold_slice(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    a = inputs[0]
    starts, ends = ints(inputs[1]), ints(inputs[2])
    axes = ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    if any(s < 1 for s in steps):
        raise SizeNeeded(f"{node.label}: a slice of run-time sizes with a step below 1")
    index = [slice(None)] * a.ndim
    for ax, b, e, s in zip(axes, starts, ends, steps):
        index[ax % a.ndim] = slice(b, e, s)  # Python's clamping is ONNX's for positive steps
    return [sizes_array(a[tuple(index)])]


@symbolic_folder("Reshape")
def fold_reshape(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    want = ints(inputs[1])
    if 0 in want and not node.attr("allowzero", 0):
        want = [inputs[0].shape[i] if d == 0 else d for i, d in enumerate(want)]
    return [sizes_array(inputs[0].reshape(want))]


def elementwise(fn: Callable[[Size, Size], Size | None]) -> SymbolicFolder:
    def fold(node: Any, inputs: list[Any]) -> list[np.ndarray]:
        a, b = np.broadcast_arrays(np.asarray(inputs[0], dtype=object), np.asarray(inputs[1], dtype=object))
        out = [fn(int(x) if not isinstance(x, Sym) else x, int(y) if not isinstance(y, Sym) else y)
               for x, y in zip(a.reshape(-1), b.reshape(-1))]
        if any(v is None for v in out):
            raise SizeNeeded(f"{node.label}: a division of run-time sizes that is not exact")
        return [sizes_array(out, a.shape)]
    return fold


SYMBOLIC_FOLDERS["Add"] = elementwise(lambda x, y: x + y)
SYMBOLIC_FOLDERS["Sub"] = elementwise(lambda x, y: x - y)
SYMBOLIC_FOLDERS["Mul"] = elementwise(lambda x, y: x * y)


def divide(x: Size, y: Size) -> Size | None:
    """ONNX's integer Div (it truncates) of numbers; of run-time sizes, only where exact."""
    if isinstance(x, int) and isinstance(y, int) and y:
        q = abs(x) // abs(y)
        return q if (x < 0) == (y < 0) else -q
    return exact_quotient(x, y)


SYMBOLIC_FOLDERS["Div"] = elementwise(divide)


@symbolic_folder("Shape")
def fold_shape(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    dims = np.array(np.shape(inputs[0]), np.int64)
    return [dims[slice(node.attr("start", 0), node.attr("end", len(dims)))]]


def fold_symbolic(node: Any, inputs: list[Any]) -> list[np.ndarray]:
    fold = SYMBOLIC_FOLDERS.get(node.op_type)
    if fold is None:
        raise SizeNeeded(f"{node.label}: run-time sizes flow into {node.op_type}; opc folds them through "
                               f"{', '.join(sorted(SYMBOLIC_FOLDERS))} and takes them in Reshape, Expand, "
                               "ConstantOfShape and Range")
    return fold(node, [None if v is None else sizes_array(v) if is_symbolic(v) else v for v in inputs])


# ---------------------------------------------------------------------------
# Tracking: every emitted value's symbolic shape, and sizes as SSA values
# ---------------------------------------------------------------------------


class ResolvedShapes(Mapping[SSAValue, Shape]):
    """shape_of()'s table while converters run: each value's shape in the current symbols."""

    def __init__(self, sizes: FunctionSizes) -> None:
        self.sizes = sizes

    def __getitem__(self, v: SSAValue) -> Shape:
        return self.sizes.shape(v)

    def __contains__(self, v: object) -> bool:
        return v in self.sizes.shapes

    def __iter__(self) -> Iterator[SSAValue]:
        return iter(self.sizes.shapes)

    def __len__(self) -> int:
        return len(self.sizes.shapes)


class SizeTracker:
    """The importer's run-time sizes: the analysis fed each op as it is emitted, and each size
    materialized once as an `index` value (tensor.dim of the argument it came from, + and *)."""

    def __init__(self, args: Sequence[SSAValue]) -> None:
        self.sizes = FunctionSizes(None).seed(args)
        self.table = ResolvedShapes(self.sizes)
        self.indices: dict[Size, SSAValue] = {}

    def same_names(self, declared: Mapping[SSAValue, Sequence[int | str | None]]) -> None:
        """Open dims an exporter names alike (`batch` in two inputs) are one size: the call checks
        that the arguments agree."""
        first: dict[str, Size] = {}
        for arg, dims in declared.items():
            for d, name in enumerate(dims):
                if isinstance(name, str) and name and self.sizes.shapes[arg][d] is not None:
                    size = self.sizes.shapes[arg][d]
                    if name in first:
                        self.sizes.unify(first[name], size, f"input dims named '{name}'")
                    else:
                        first[name] = size

    def visit(self, op: Operation) -> None:
        token = SYMBOLIC_SHAPES.set(None)  # the analysis reads declared types and its own table
        try:
            self.sizes.visit(op)
        finally:
            SYMBOLIC_SHAPES.reset(token)

    def index(self, emit: Callable[[Operation], SSAValue], d: Size) -> SSAValue:
        """The size d as an `index` value, each once per import."""
        d = self.sizes.resolve(d)
        if d in self.indices:
            return self.indices[d]
        if isinstance(d, int):
            v = emit(arith.ConstantOp(IntegerAttr(d, IndexType())))
        elif d.is_symbol() and d.render() in self.sizes.derived:  # max/min/floordiv of sizes (a clamped bound)
            f = self.sizes.derived[d.render()]
            v = emit(DERIVED_OPS[f.kind](self.index(emit, f.a), self.index(emit, f.b)))
        elif d.is_symbol():
            arg, dim = self.sizes.sources[d.render()]
            v = emit(tensor.DimOp(arg, self.index(emit, dim)))
        else:
            v = None
            for monomial, coeff in d.terms:
                term = self.index(emit, coeff) if coeff != 1 or not monomial else None
                for s in monomial:
                    factor = self.index(emit, Sym.symbol(s))
                    term = factor if term is None else emit(arith.MuliOp(term, factor))
                assert term is not None
                v = term if v is None else emit(arith.AddiOp(v, term))
            assert v is not None
        self.indices[d] = v
        return v

    def size_tensor(self, emit: Callable[[Operation], SSAValue], d: Size) -> SSAValue:
        """A 0-d int64 tensor holding d at run time: the sum of d ones (opc has no op that turns an
        index into a tensor; the count is small, a sequence length or a batch)."""
        ones = emit(o.FullOp(1.0, o.tensor([d], i64), [self.index(emit, d)]))
        return emit(o.ReduceSumOp(ones, [0], False))


# ---------------------------------------------------------------------------
# Shape arithmetic on sizes
# ---------------------------------------------------------------------------

WHOLE_END = 2**47  # a slice end at or past any storable size (exporters write INT64_MAX): to the end


def broadcast_sizes(a: Sequence[Size], b: Sequence[Size]) -> tuple[Size, ...] | None:
    """NumPy broadcasting of two shapes; a run-time size pairs with 1 or itself. None: they do not."""
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    out: list[Size] = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def slice_limits(limit: Sequence[Size]) -> list[int]:
    """opc.slice's limits: a run-time dim (taken whole) is `?`."""
    return [o.DYNAMIC if isinstance(d, Sym) else d for d in limit]


def broadcast_shapes_of(node: Any, *shapes: Sequence[Size]) -> tuple[Size, ...]:
    """np.broadcast_shapes for shapes that may hold run-time sizes; the node's error where they do not."""
    out: tuple[Size, ...] = ()
    for shape in shapes:
        both = broadcast_sizes(out, shape)
        if both is None:
            raise node.fail(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out = both
    return out
