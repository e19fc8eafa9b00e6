"""Det: the determinant of each [n, n] matrix of a [..., n, n] input, composed of opc ops at
import (no op of its own).

Why a composition: n is static, so Gaussian elimination with partial pivoting unrolls into
O(n^2) row operations on [batch, n] tensors (slices, selects, a division, a multiply-subtract
per row), which every target already runs (CPU and CUDA), and whose gradient the autodiff
derives from the ops' own rules (no det_grad kernel: the cotangent flows back through the
elimination, which is g * det * inv(A)^T wherever A is invertible). The unrolled graph grows
as n^2, so n is bounded (MAX_N); a larger n is refused naming the bound.

The elimination is LAPACK's getrf (what numpy.linalg.det calls): at step k the pivot is the
first row at or below k of the largest |a_ik|, swapped into place (each swap flips the sign);
the rows below subtract a_ik / pivot times the pivot row; det = sign * prod(pivots). A zero
pivot means the column below is zero too: its factors are 0 (divided by 1, not 0) and the
determinant is 0, as LAPACK gives. f16/bf16 compute in f32.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import Node, converter

Values = list[SSAValue | np.ndarray]
MAX_N = 16  # the unrolled elimination has about 6 n^2 ops


@converter("Det", since=11)
def det(node: Node) -> Values:
    shape = node.shape(0)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise node.fail(f"X {list(shape)} must be [..., n, n]")
    dtype = node.element(0)
    if not o.is_float(dtype):
        raise node.fail(f"X must be a float tensor, got {dtype}")
    n, batch = shape[-1], shape[:-2]
    if n > MAX_N:
        raise node.fail(f"n = {n}: opc unrolls Det at import for n up to {MAX_N}")
    e = node.e
    x = node.input(0)
    if not isinstance(dtype, (Float32Type, Float64Type)):
        x = e.cast(x, Float32Type())
    m = math.prod(batch)
    a = e.reshape(x, [m, n, n])
    if n == 0:
        out = e.full(1.0, o.tensor([m], a.type.element_type))  # type: ignore[attr-defined]
    else:
        out = e.reshape(eliminate(node, a, m, n), [m])
    out = e.reshape(out, list(batch))
    return [out if out.type.element_type == dtype else e.cast(out, dtype)]  # type: ignore[attr-defined]


def eliminate(node: Node, a: SSAValue, m: int, n: int) -> SSAValue:
    """sign * prod(pivots) of each [n, n] matrix of a [m, n, n], as [m, 1]."""
    e = node.e
    rows = [e.reshape(e.value(o.SliceOp(a, [0, i, 0], [m, i + 1, n], [1, 1, 1])), [m, n]) for i in range(n)]

    def column(row: SSAValue, k: int) -> SSAValue:
        return e.value(o.SliceOp(row, [0, k], [m, k + 1], [1, 1]))  # [m, 1]

    def c(v: float) -> SSAValue:
        return e.full(v, o.tensor([m, 1], a.type.element_type))  # type: ignore[attr-defined]

    sign = c(1.0)
    det = None
    for k in range(n - 1):
        # the pivot: the first row at or below k of the largest |a_ik| (strictly larger replaces)
        best, where = e.value(o.AbsOp(column(rows[k], k))), c(float(k))
        for i in range(k + 1, n):
            mag = e.value(o.AbsOp(column(rows[i], k)))
            larger = e.value(o.GreaterThanOp(mag, best))
            best, where = e.select(larger, mag, best), e.select(larger, c(float(i)), where)
        pivot_row, swapped = rows[k], []
        for i in range(k + 1, n):
            chosen = e.value(o.EqualOp(where, c(float(i))))
            pivot_row = e.select(chosen, rows[i], pivot_row)
            swapped.append(e.select(chosen, rows[k], rows[i]))  # row i takes row k's place
        moved = e.value(o.EqualOp(where, c(float(k))))
        sign = e.select(moved, sign, e.neg(sign))
        pivot = column(pivot_row, k)
        safe = e.select(e.value(o.EqualOp(pivot, c(0.0))), c(1.0), pivot)  # a zero column: factors 0
        rows = [*rows[:k], pivot_row]
        for row in swapped:
            factor = e.div(column(row, k), safe)
            rows.append(e.sub(row, e.mul(factor, pivot_row)))
        det = pivot if det is None else e.mul(det, pivot)
    last = column(rows[n - 1], n - 1)
    det = last if det is None else e.mul(det, last)
    return e.mul(sign, det)
