"""Op families: which opc ops are evaluated point-wise, which re-index their input, which
read their operands point-wise; and the small value helpers they are stated with. The
scheduler (opc-schedule) and the lowering both decide by these tables, so they live here,
below both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from xdsl.dialects import arith, tensor
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Operation, SSAValue

from opc.dialects import opc

# the typed accessors live with the dialect (which uses them too); offered here with the op families
from opc.dialects.opc import element_of as element_of
from opc.dialects.opc import shape_of as shape_of
from opc.dialects.opc import shaped_type as shaped_type

# Ops evaluated point-wise inside a consumer's loop nest.
ELEMENTWISE = (
    opc.BinaryElementwiseOp, opc.UnaryElementwiseOp, opc.SelectOp, opc.CastOp, opc.BitcastOp, opc.CastGradOp,
    opc.ActivationGradOp,
)  # fmt: skip
# Index maps that re-index their input (no flat nests), evaluated point-wise in their consumer's nest.
# (MLIR's tensor.extract_slice / insert_slice with run-time offsets: opc/dialects/slices.py)
REINDEXING_MAPS = (opc.SliceOp, opc.GatherOp, tensor.ExtractSliceOp)
INDEX_MAPS = (opc.BroadcastToOp, opc.TransposeOp, *REINDEXING_MAPS)
INLINABLE = (*ELEMENTWISE, *INDEX_MAPS, opc.FullOp, opc.IotaOp)
# Ops that write their result by placing or scattering operands read point-wise.
PLACEMENTS = (opc.ConcatOp, opc.SliceGradOp, opc.GatherGradOp, tensor.InsertSliceOp)
# Consumers that evaluate their operands point-wise (so a producer can be inlined).
POINTWISE_CONSUMERS = (*ELEMENTWISE, *INDEX_MAPS, opc.ReduceOp, *PLACEMENTS)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def is_splat_constant(op: Operation) -> bool:
    return (isinstance(op, arith.ConstantOp) and isinstance(op.value, DenseIntOrFPElementsAttr)
            and len(op.value) > 0 and same_bytes_throughout(op.value))  # no elements: no splat value to inline


def same_bytes_throughout(value: DenseIntOrFPElementsAttr) -> bool:
    """Whether every element has the first one's bytes. Not xDSL's is_splat: that unpacks every
    value (seconds for a constant of megabytes) and counts -0.0 as 0.0 (and NaN as no splat)."""
    raw = value.data.data
    size = len(raw) // len(value)
    return raw == raw[:size] * len(value)


def splat_value(op: Operation) -> float | int:
    """The one value of a splat constant (see is_splat_constant)."""
    assert isinstance(op, arith.ConstantOp) and isinstance(op.value, DenseIntOrFPElementsAttr)
    return cast("float | int", op.value.get_values()[0])


def reads_once(v: SSAValue, user: Operation) -> bool:
    """Whether inlining v into a re-indexing map or placement `user` evaluates it no more often
    than materializing it would."""
    if isinstance(user, (opc.SliceOp, opc.ConcatOp, opc.SliceGradOp, tensor.ExtractSliceOp, tensor.InsertSliceOp)):
        return True  # every element read at most once (slice_grad's x: never)
    if isinstance(user, (opc.GatherOp, opc.GatherGradOp)):
        # x: only the gathered elements (gather_grad: never), dout: once; the indices once per other position
        shape, axis = shape_of(user.x), user.axis_index()
        others = numel([d for i, d in enumerate(shape) if i != axis])  # (a `?` axis: no division by it)
        return v is not user.indices or others == 1
    return False
