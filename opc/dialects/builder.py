"""The op builder: builds opc ops with their Python constructors into a list, in order,
each helper returning the result value. Used by the vjp rules, the composite rules, the
autodiff and the ONNX importer alike, so it sits beside the dialect (as xDSL's own
`xdsl/builder.py` sits beside `ir`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import Float32Type, IndexType, IntegerAttr, TensorType, f32
from xdsl.ir import Attribute, Operation, SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of, shaped_type


class OpBuilder:
    """Builds opc ops into a list, in order; each helper returns the result value."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def emit(self, op: Operation) -> Operation:
        self.ops.append(op)
        return op

    def value(self, op: Operation) -> SSAValue:
        return self.emit(op).results[0]

    # -- sizes known only at run time -----------------------------------------
    def dims(self, v: SSAValue) -> list[SSAValue]:
        """`tensor.dim` of each `?` dim of v, in order: the size operands of an op whose result has
        v's shape (opc.full, broadcast_to, reshape)."""
        return [self.dim(v, i) for i, d in enumerate(shaped_type(v).get_shape()) if d == o.DYNAMIC]

    def dim(self, v: SSAValue, axis: int) -> SSAValue:
        """`tensor.dim` of v's dim `axis`: its size as an `index` value."""
        return self.value(tensor.DimOp(v, self.value(arith.ConstantOp(IntegerAttr(axis, IndexType())))))

    def broadcast_like(self, v: SSAValue, like: SSAValue) -> SSAValue:
        """v broadcast to like's shape (its `?` dims read off like at run time)."""
        return self.value(o.BroadcastToOp(v, o.tensor(shaped_type(like).get_shape(), element_of(v)), self.dims(like)))

    def reshape_like(self, v: SSAValue, like: SSAValue) -> SSAValue:
        """v reshaped to like's shape (its `?` dims read off like at run time)."""
        return self.value(o.ReshapeOp(v, o.tensor(shaped_type(like).get_shape(), element_of(v)), self.dims(like)))

    def flatten(self, v: SSAValue) -> SSAValue:
        """v as 1-D: its element count static, or computed from its `?` dims at run time."""
        shape = shaped_type(v).get_shape()
        if o.DYNAMIC not in shape:
            return self.value(o.ReshapeOp(v, o.tensor([math.prod(shape)], element_of(v))))
        static = math.prod(d for d in shape if d != o.DYNAMIC)
        n = self.value(arith.ConstantOp(IntegerAttr(static, IndexType())))
        for d in self.dims(v):
            n = self.value(arith.MuliOp(n, d))
        return self.value(o.ReshapeOp(v, o.tensor([o.DYNAMIC], element_of(v)), [n]))

    def count(self, x: SSAValue, axes: Sequence[int]) -> SSAValue | float:
        """How many elements of x the axes hold: a number where their sizes are static, else a
        keepdim tensor of that count, computed at run time."""
        shape = shaped_type(x).get_shape()
        if all(shape[a] != o.DYNAMIC for a in axes):
            return float(math.prod(shape[a] for a in axes))
        return self.reduce_sum(self.full(1.0, x), axes, keepdim=True)

    # -- constructors -------------------------------------------------------
    def full(self, value: float, like: SSAValue | TensorType) -> SSAValue:
        t = like if isinstance(like, TensorType) else like.type
        assert isinstance(t, TensorType)
        if isinstance(like, SSAValue) and o.DYNAMIC in t.get_shape():
            return self.value(o.FullOp(value, t, self.dims(like)))
        return self.value(o.FullOp(value, t))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(o.AddOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(o.SubOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(o.MulOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(o.DivOp(a, b))

    def scale(self, a: SSAValue, c: float) -> SSAValue:
        """a * c, the constant as a full tensor of a's type."""
        return self.mul(a, self.full(c, a))

    def neg(self, a: SSAValue) -> SSAValue:
        return self.value(o.NegOp(a))

    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.value(o.SelectOp(c, a, b))

    def cast(self, a: SSAValue, element: Attribute) -> SSAValue:
        return self.value(o.CastOp(a, element))

    def matmul(self, x: SSAValue, y: SSAValue, trans_x: bool = False, trans_y: bool = False) -> SSAValue:
        return self.value(o.MatmulOp(x, y, trans_x, trans_y))

    def reduce_sum(self, x: SSAValue, axes: Sequence[int], keepdim: bool = False) -> SSAValue:
        return self.value(o.ReduceSumOp(x, axes, keepdim))

    def unbroadcast(self, g: SSAValue, to: SSAValue | TensorType) -> SSAValue:
        """Sum g (of a broadcast result's shape) back to the shape of `to`."""
        target = to if isinstance(to, TensorType) else to.type
        assert isinstance(target, TensorType) and isinstance(g.type, TensorType)
        src, dst = shape_of(g), tuple(target.get_shape())
        if src == dst:
            return g
        lead = len(src) - len(dst)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(dst) if d == 1 and src[lead + i] != 1]
        if axes:
            g = self.reduce_sum(g, axes, keepdim=False)
        if shape_of(g) != dst:
            g = (self.reshape_like(g, to) if isinstance(to, SSAValue) else
                 self.value(o.ReshapeOp(g, o.tensor(dst, target.element_type))))
        return g


def wide(e: OpBuilder, x: SSAValue) -> SSAValue:
    """x in the type elementwise math is done in: f16/bf16 go up to f32."""
    el = element_of(x)
    return x if isinstance(el, (o.Float64Type, Float32Type)) else e.cast(x, f32)


def narrow(e: OpBuilder, x: SSAValue, like: SSAValue) -> SSAValue:
    el = element_of(like)
    return x if x.type == like.type else e.cast(x, el)
