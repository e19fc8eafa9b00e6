"""MLIR's own `tensor.extract_slice` and `tensor.insert_slice`, as opc runs them.

    %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1] : tensor<?x4xf32> to tensor<4xf32>
    %y = tensor.insert_slice %row into %acc[%i, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<?x4xf32>

Offsets may be any `index` value (an scf.for induction variable, arithmetic on `tensor.dim`);
sizes are static or `index` values computed from sizes (`tensor.dim`, constants, + - *, and
arith.maxsi / minsi / floordivsi: derived sizes, which the call computes), so
that a result's `?` dim is a size the function knows (opc/dialects/sizes.py); strides are
static and positive (a run-time size takes stride 1). A slice may drop unit dims (MLIR's
rank-reducing form). What is static is verified here (`check_slice`); offsets and sizes known
only at run time are checked at the call, before the slice is read or written
(opc/lowering/slice_lowering.py), so nothing is ever read or written out of bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import tensor
from xdsl.dialects.builtin import DenseArrayBase, TensorType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects.opc import DYNAMIC

SLICE_OPS = (tensor.ExtractSliceOp, tensor.InsertSliceOp)
DYNAMIC_INDEX = -(2 ** 63)  # MLIR's ShapedType::kDynamic in static_offsets / static_sizes / static_strides

Index = int | SSAValue  # a static number, or an `index` value known at run time


@dataclass(frozen=True)
class SliceParams:
    """One slice of a tensor of `source_rank` dims: per dim its offset, size and stride; `kept` the
    dims the sliced tensor keeps (a rank-reducing slice drops unit dims)."""

    offsets: list[Index]
    sizes: list[Index]
    strides: list[int]
    kept: list[int]


def mixed(static: Sequence[int], dynamic: Sequence[SSAValue]) -> list[Index]:
    values = iter(dynamic)
    return [next(values) if s == DYNAMIC_INDEX else s for s in static]


def sliced_type(op: tensor.ExtractSliceOp | tensor.InsertSliceOp) -> TensorType:
    """The type of the slice: extract_slice's result, insert_slice's source."""
    t = op.result.type if isinstance(op, tensor.ExtractSliceOp) else op.source.type
    assert isinstance(t, TensorType)
    return t


def whole_type(op: tensor.ExtractSliceOp | tensor.InsertSliceOp) -> TensorType:
    """The tensor sliced: extract_slice's source, insert_slice's dest."""
    t = op.source.type if isinstance(op, tensor.ExtractSliceOp) else op.dest.type
    assert isinstance(t, TensorType)
    return t


def params(op: tensor.ExtractSliceOp | tensor.InsertSliceOp) -> SliceParams:
    offsets = mixed(op.static_offsets.get_values(), op.offsets)
    sizes = mixed(op.static_sizes.get_values(), op.sizes)
    strides = mixed(op.static_strides.get_values(), op.strides)
    if any(not isinstance(s, int) or s <= 0 for s in strides):
        raise VerifyException("takes static positive strides only")
    static_strides = [s for s in strides if isinstance(s, int)]
    rank = len(whole_type(op).get_shape())
    if not len(offsets) == len(sizes) == len(strides) == rank:
        raise VerifyException(f"needs {rank} offsets, sizes and strides (one per dim of {whole_type(op)}), "
                              f"got {len(offsets)}, {len(sizes)} and {len(strides)}")
    return SliceParams(offsets, sizes, static_strides, kept_dims(sizes, sliced_type(op).get_shape()))


def kept_dims(sizes: Sequence[Index], part: Sequence[int]) -> list[int]:
    """Which dims the slice keeps: all, or (rank-reducing) all but as many static unit sizes as
    the slice type has fewer dims. Which unit dims go does not matter: each is read at index 0."""
    drop = len(sizes) - len(part)
    kept: list[int] = []
    for d, n in enumerate(sizes):
        if drop > 0 and n == 1:
            drop -= 1
            continue
        kept.append(d)
    if drop != 0 or len(kept) != len(part):
        raise VerifyException(f"sizes {[n if isinstance(n, int) else '?' for n in sizes]} do not give a slice of "
                              f"rank {len(part)} (only unit dims may be dropped)")
    for d, want in zip(kept, part):
        n = sizes[d]
        if isinstance(n, int) and n != want:
            raise VerifyException(f"dim {d} has size {n} but the slice type says {want if want != DYNAMIC else '?'}")
        if not isinstance(n, int) and want != DYNAMIC:
            raise VerifyException(f"dim {d} has a run-time size but the slice type says {want}: make it `?`")
    return kept


def extract_slice(source: SSAValue, offsets: Sequence[Index], sizes: Sequence[Index], strides: Sequence[int],
                  result: TensorType) -> tensor.ExtractSliceOp:
    return tensor.ExtractSliceOp(source, offsets, sizes, strides, result)


def insert_slice(source: SSAValue, dest: SSAValue, offsets: Sequence[Index], sizes: Sequence[Index],
                 strides: Sequence[int]) -> tensor.InsertSliceOp:
    static = [[v if isinstance(v, int) else DYNAMIC_INDEX for v in vs] for vs in (offsets, sizes, strides)]
    dynamic = [[v for v in vs if isinstance(v, SSAValue)] for vs in (offsets, sizes)]
    return tensor.InsertSliceOp.build(
        operands=[source, dest, dynamic[0], dynamic[1], []], result_types=[dest.type],
        properties={"static_offsets": DenseArrayBase.from_list(i64, static[0]),
                    "static_sizes": DenseArrayBase.from_list(i64, static[1]),
                    "static_strides": DenseArrayBase.from_list(i64, static[2])})


def extent(size: int, stride: int) -> int:
    """How many elements of a dim a slice of `size` at `stride` spans."""
    return (size - 1) * stride + 1 if size > 0 else 0


def check_slice(op: Operation) -> None:
    """What is static: ranks, sizes against the slice type, strides, and each static offset and
    size within a static dim (the rest is checked at run time)."""
    if not isinstance(op, SLICE_OPS):
        return
    p = params(op)
    whole, part = whole_type(op), sliced_type(op)
    if whole.element_type != part.element_type:
        raise VerifyException(f"slices {whole} into {part}: the element types differ")
    for d, (dim, off, n, st) in enumerate(zip(whole.get_shape(), p.offsets, p.sizes, p.strides)):
        if not isinstance(n, int) and st != 1:
            raise VerifyException(f"dim {d} has a run-time size and stride {st}: a run-time size takes stride 1")
        if isinstance(off, int) and off < 0:
            raise VerifyException(f"dim {d} has offset {off}: offsets are >= 0")
        if isinstance(n, int) and n < 0:
            raise VerifyException(f"dim {d} has size {n}: sizes are >= 0")
        if dim == DYNAMIC or not isinstance(n, int):
            continue
        if extent(n, st) > dim or (isinstance(off, int) and off + extent(n, st) > dim):
            where = f"offset {off}, " if isinstance(off, int) else ""
            raise VerifyException(f"dim {d}: {where}size {n}, stride {st} runs past the dim's size {dim}")


__all__ = ["SLICE_OPS", "SliceParams", "check_slice", "extent", "extract_slice", "insert_slice", "params",
           "sliced_type", "whole_type"]
