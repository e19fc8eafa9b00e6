"""Linear algebra: MatMul, Gemm (a bias after a matmul joins it, for opc-fuse), Einsum (as
transposes, diagonals and batched matmuls) and Det.

Det: the determinant of each [n, n] matrix of a [..., n, n] input, composed of opc ops at
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
from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import Values, scalar
from opc.onnx_import.graph import Node, NodeEmitter, converter, same_since
from opc.onnx_import.run_time_sizes import broadcast_shapes_of


def bias_after_gemm(node: Node, y: SSAValue, bias: SSAValue) -> SSAValue | None:
    """Linear on [.., K] input: MatMul (a 2-D GEMM over the merged rows, reshaped back, see matmul)
    + bias[N]. The bias is added to the 2-D GEMM before the reshape, so that opc-fuse sees
    matmul + bias and makes one fused_gemm_epilogue of it."""
    reshape = y.owner
    if not isinstance(reshape, o.ReshapeOp) or not isinstance(reshape.x.owner, o.MatmulOp):
        return None
    gemm = reshape.x
    rows, n = shape_of(gemm) if len(shape_of(gemm)) == 2 else (0, -1)
    out, b = list(shape_of(y)), list(shape_of(bias))
    if not b or b[-1] != n or math.prod(b) != n or len(b) > len(out) or out[-1] != n:
        return None
    e = node.e
    return e.reshape(e.add(gemm, e.reshape(bias, [n])), out)


def matmul_of_rows(e: NodeEmitter, rows: SSAValue, y: SSAValue) -> SSAValue:
    """rows @ y; y = transpose(w) (a tied embedding as the output layer) is read as w transposed by
    the GEMM, not materialized by a transpose on every call."""
    t = y.owner
    if isinstance(t, o.TransposeOp) and list(t.perm_list()) == [1, 0]:
        return e.matmul(rows, t.x, trans_y=True)
    return e.matmul(rows, y)


@converter("MatMul")
def matmul(node: Node) -> Values:
    """NumPy matmul: 1-D operands promoted; [.., M, K] @ [K, N] as one 2-D GEMM over the merged rows."""
    x, y = node.input(0), node.input(1)
    xs, ys = node.shape(0), node.shape(1)
    e = node.e
    if len(xs) == 1:
        x, xs = e.reshape(x, (1, *xs)), (1, *xs)
    if len(ys) == 1:
        y, ys = e.reshape(y, (*ys, 1)), (*ys, 1)
    out_shape = list(broadcast_shapes_of(node, xs[:-2], ys[:-2])) + [xs[-2], ys[-1]]
    if len(ys) == 2 and len(xs) > 2:  # rows of every batch share the weight: one GEMM
        rows = e.reshape(x, (math.prod(xs[:-1]), xs[-1]))
        r = e.reshape(matmul_of_rows(e, rows, y), out_shape)
    else:
        r = e.matmul(x, y)
    final = out_shape[:]
    if len(node.shape(0)) == 1:
        del final[-2]
    if len(node.shape(1)) == 1:
        del final[-1]
    return [e.reshape(r, final)]


@converter("Gemm")
def gemm(node: Node) -> Values:
    """alpha * op(A) @ op(B) + beta * C."""
    e = node.e
    y = e.matmul(node.input(0), node.input(1), bool(node.attr("transA", 0)), bool(node.attr("transB", 0)))
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = e.mul(y, scalar(node, alpha, y))
    if node.has(2) and beta != 0.0:
        c = node.input(2)
        if beta != 1.0:
            c = e.mul(c, scalar(node, beta, c))
        y = e.add(y, c)
    return [y]


def einsum_explicit(node: Node, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The equation's terms and output with '...' spelled out as letters the equation does not use (the
    ellipsis axes aligned from the right, as they broadcast) and the implicit output made explicit."""
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.fail(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in equation]
    widths = []
    for t, r in zip(terms, ranks):
        named = len(t.replace("...", ""))
        widths.append(r - named if "..." in t else 0)
        if widths[-1] < 0 or ("..." not in t and named != r) or t.count("...") > 1:
            raise node.fail(f"equation '{equation}': term '{t}' does not fit an operand of rank {r}")
    dots = "".join(free[:max(widths, default=0)])
    terms = [t.replace("...", dots[len(dots) - w:]) for t, w in zip(terms, widths)]
    if not arrow:
        joined = "".join(terms)
        out = dots + "".join(sorted(c for c in set(joined) - set(dots) if joined.count(c) == 1))
    return terms, out.replace("...", dots)


def diagonal(node: Node, x: SSAValue, term: str) -> tuple[SSAValue, str]:
    """x with each letter repeated in its term reduced to one axis, the diagonal: the two axes moved last,
    merged, and gathered at 0, n + 1, 2 (n + 1), ..."""
    e = node.e
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p = term.index(c)
        q = term.index(c, p + 1)
        shape = list(shape_of(x))
        rest = [k for k in range(len(term)) if k not in (p, q)]
        n = shape[p]
        x = e.reshape(e.transpose(x, rest + [p, q]), [shape[k] for k in rest] + [n * n])
        x = e.value(o.GatherOp(x, e.constant(np.arange(n, dtype=np.int64) * (n + 1)), len(rest)))
        term = "".join(term[k] for k in rest) + c
    return x, term


@converter("Einsum", since=12)
def einsum(node: Node) -> Values:
    """Operands laid out over all the equation's letters (transpose + size-1 axes), multiplied (broadcast),
    summed over the letters the output lacks, transposed to the output's order. '...' becomes letters of
    its own; a letter repeated within an operand takes its diagonal first. A two-operand contraction
    that opc-fuse or the scheduler could run as a GEMM is not yet one."""
    e = node.e
    equation = node.attr("equation").replace(" ", "")
    terms, out = einsum_explicit(node, equation, [len(node.shape(i)) for i in range(len(node.inputs()))])
    operands = []
    for i, term in enumerate(terms):
        x, term = diagonal(node, node.input(i), term)
        operands.append((x, term))
    terms = [t for _, t in operands]
    letters = sorted(set("".join(terms)), key="".join(terms).index)
    if len(set(out)) != len(out) or any(c not in letters for c in out):
        raise node.fail(f"equation '{equation}': output '{out}' repeats a letter or names one no operand has")
    product = None
    for x, term in operands:
        shape = list(shape_of(x))
        order = sorted(range(len(term)), key=lambda k: letters.index(term[k]))
        x = e.transpose(x, order)
        spread = [shape[term.index(c)] if c in term else 1 for c in letters]
        x = e.reshape(x, spread)
        product = x if product is None else e.mul(product, x)
    summed = [k for k, c in enumerate(letters) if c not in out]
    kept = [c for c in letters if c in out]
    if summed:
        product = e.reduce_sum(product, summed)
    return [e.transpose(product, [kept.index(c) for c in out])]


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
        out = e.full(1.0, o.tensor([m], element_of(a)))
    else:
        out = e.reshape(eliminate(node, a, m, n), [m])
    out = e.reshape(out, list(batch))
    return [out if element_of(out) == dtype else e.cast(out, dtype)]


def eliminate(node: Node, a: SSAValue, m: int, n: int) -> SSAValue:
    """sign * prod(pivots) of each [n, n] matrix of a [m, n, n], as [m, 1]."""
    e = node.e
    rows = [e.reshape(e.value(o.SliceOp(a, [0, i, 0], [m, i + 1, n], [1, 1, 1])), [m, n]) for i in range(n)]

    def column(row: SSAValue, k: int) -> SSAValue:
        return e.value(o.SliceOp(row, [0, k], [m, k + 1], [1, 1]))  # [m, 1]

    def c(v: float) -> SSAValue:
        return e.full(v, o.tensor([m, 1], element_of(a)))

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


# Older opsets where the meaning is the one above: the same converter.
same_since({1: ("MatMul", "Gemm")})  # Gemm before 7: C broadcasts when broadcast = 1, else has Y's shape
