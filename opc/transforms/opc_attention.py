"""`opc-attention{target=...}`: scaled dot-product attention written out in primitives, as one op.

    %s = opc.matmul %q, %k {trans_y = true}        (or %q @ k^T, k^T a transpose of %k's last two
                                                    dims, or PyTorch's reshape/transpose/reshape)
    %t = opc.mul %s, %c  |  opc.div %s, %c          (optional; c a one-element constant; a scalar
                                                    factor on q or on k^T is taken as well: PyTorch's
                                                    exporter writes sqrt(scale) on each)
    %a = opc.add %t, %mask                         (optional, either order; mask broadcasts)
    %p = opc.softmax %a {axis = -1}
    %o = opc.matmul %p, %v
  ->
    %o, %lse = opc.attention %q, %k, %v, %mask {scale = c, is_causal = ...}

A mask that is the constant causal pattern (0 where key j <= query i, -inf elsewhere, as our ONNX
importer folds the exporter's Trilu/Where) becomes is_causal = true, so the kernel skips the
hidden key blocks. PyTorch's exporter guards a boolean-masked softmax with IsNaN/Where (rows
whose every key is hidden give 0, not NaN):

    %n = isnan(%p)   (our importer: select(equal(%p, %p), false, true))
    %g = opc.select %n, 0, %p
    %o = opc.matmul %g, %v
  ->
    %o', %lse = opc.attention ...;  %o = select(lse > -inf, %o', 0)   (a row all -inf: lse is NaN)

Exact up to rounding: the kernel scales q . k once by the product of the factors where the
written form rounds q * c1 and k^T * c2 first, and sums in another order. So the pass is in the
default pipeline of opc.compile / `opc compile` (with opc-fuse, off with fuse=False / --no-fuse,
and off where decompose names opc.attention or is "all": the written-out ops then stay as they are),
before opc-fuse (a rank-2 score GEMM plus an [Lk] mask would otherwise become a GEMM epilogue),
and only where the target runs opc.attention by a kernel. Not rewritten: a softmax whose result is
used elsewhere too (it would be computed twice), a softmax along another axis, q, k and v whose
batch dims differ (broadcast), a P v matmul with transpose flags, a non-constant or non-scalar factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import VerifyException

from opc.dialects import opc as o
from opc.dialects.builder import OpBuilder
from opc.dialects.kinds import element_of, shape_of
from opc.targets.routing import route_op
from opc.targets.target import Target, get_target

ATTENTION = "opc.attention"


def constant_values(v: SSAValue) -> np.ndarray | None:
    """The values of a constant tensor (arith.constant or opc.full), else None."""
    owner = v.owner
    if isinstance(owner, o.FullOp):
        return np.full(shape_of(owner.result), owner.value.value.data)
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, DenseIntOrFPElementsAttr):
        t = owner.result.type
        values = np.array(owner.value.get_values(), dtype=np.float64)
        shape = shape_of(t)
        return np.broadcast_to(values.reshape(()), shape) if values.size == 1 else values.reshape(shape)
    return None


def scalar_constant(v: SSAValue) -> float | None:
    """The value of a float constant whose elements are all one finite value."""
    if not (isinstance(v.type, TensorType) and o.is_float(element_of(v))):
        return None
    values = constant_values(v)
    if values is None or values.size == 0:
        return None
    c = float(values.reshape(-1)[0])
    return c if np.isfinite(c) and bool(np.all(values == c)) else None


def peel_factors(v: SSAValue, ops: list[Operation]) -> tuple[SSAValue, float]:
    """v = u * c (or c * u, u / c) repeatedly, c a scalar constant, u of v's type -> (u, product of c)."""
    factor = 1.0
    while isinstance(v.owner, (o.MulOp, o.DivOp)):
        op = v.owner
        pairs = [(op.lhs, op.rhs)] + ([(op.rhs, op.lhs)] if isinstance(op, o.MulOp) else [])
        for u, c in pairs:
            value = scalar_constant(c)
            if value is not None and u.type == v.type and (isinstance(op, o.MulOp) or value != 0):
                factor *= value if isinstance(op, o.MulOp) else 1.0 / value
                ops.append(op)
                v = u
                break
        else:
            break
    return v, factor


def swaps_last_two(perm: tuple[int, ...]) -> bool:
    n = len(perm)
    return n >= 2 and perm == (*range(n - 2), n - 1, n - 2)


def untransposed(b: SSAValue, ops: list[Operation]) -> SSAValue | None:
    """k for b = k^T: a transpose of the last two dims, or PyTorch's reshape [N, Lk, D] ->
    transpose [0, 2, 1] -> reshape [..., D, Lk] (N the product of the batch dims)."""
    owner = b.owner
    if isinstance(owner, o.TransposeOp) and swaps_last_two(owner.perm_list()):
        ops.append(owner)
        return owner.x
    if not isinstance(owner, o.ReshapeOp):
        return None
    t = owner.x.owner
    if not (isinstance(t, o.TransposeOp) and swaps_last_two(t.perm_list()) and isinstance(t.x.owner, o.ReshapeOp)):
        return None
    k = t.x.owner.x
    ks, bs = shape_of(k), shape_of(b)
    if len(ks) != len(bs) or tuple(ks[:-2]) != tuple(bs[:-2]) or (ks[-1], ks[-2]) != tuple(bs[-2:]):
        return None
    if tuple(shape_of(t.x)[-2:]) != tuple(ks[-2:]):
        return None
    ops.extend([owner, t, t.x.owner])
    return k


def causal_constant(mask: SSAValue, lq: int, lk: int) -> bool:
    """mask is the constant [.., Lq, Lk] with 0 where key j <= query i and -inf elsewhere."""
    values = constant_values(mask)
    if values is None or values.ndim < 2 or tuple(values.shape[-2:]) != (lq, lk) or values.size != lq * lk:
        return False
    want = np.where(np.tril(np.ones((lq, lk), bool)), 0.0, -np.inf)
    return bool(np.array_equal(values.reshape(lq, lk), want))


def nan_guarded(p: SSAValue, ops: list[Operation]) -> SSAValue | None:
    """sm for p = select(isnan(sm), 0, sm), isnan(sm) as our importer writes ONNX's IsNaN
    (select(equal(sm, sm), false, true)) or select(equal(sm, sm), sm, 0) directly."""
    sel = p.owner
    if not isinstance(sel, o.SelectOp):
        return None
    cond = sel.cond.owner
    if isinstance(cond, o.EqualOp) and cond.lhs is cond.rhs is sel.lhs and scalar_constant(sel.rhs) == 0.0:
        ops.extend([sel, cond])
        return sel.lhs
    if not (isinstance(cond, o.SelectOp) and scalar_constant(sel.lhs) == 0.0):
        return None
    eq, false, true = cond.cond.owner, constant_values(cond.lhs), constant_values(cond.rhs)
    if not (isinstance(eq, o.EqualOp) and eq.lhs is eq.rhs is sel.rhs and false is not None and true is not None
            and false.size == 1 and true.size == 1 and not false.reshape(-1)[0] and true.reshape(-1)[0]):
        return None
    ops.extend([sel, cond, eq])
    return sel.rhs


@dataclass
class Match:
    q: SSAValue
    k: SSAValue
    mask: SSAValue | None
    scale: float
    guarded: bool
    ops: list[Operation]


def match_probs(p: SSAValue) -> Match | None:
    """The attention whose probabilities p are (softmax over the keys, maybe NaN-guarded)."""
    ops: list[Operation] = []
    sm = nan_guarded(p, ops)
    guarded = sm is not None
    sm = sm if sm is not None else p
    soft = sm.owner
    if not isinstance(soft, o.SoftmaxOp) or not sm.has_one_use() and not guarded:
        return None
    if guarded and sum(1 for _ in sm.uses) != 3:  # the equal (twice) and the select
        return None
    if soft.axis_index() != len(shape_of(sm)) - 1:
        return None
    ops.append(soft)
    x, mask = soft.x, None
    if isinstance(x.owner, o.AddOp):
        add = x.owner
        for s, m in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if s.type == x.type and isinstance(peel_factors(s, [])[0].owner, o.MatmulOp):
                ops.append(add)
                x, mask = s, m
                break
    s, scale = peel_factors(x, ops)
    mm = s.owner
    if not isinstance(mm, o.MatmulOp) or o.flag(mm.trans_x):
        return None
    ops.append(mm)
    q, f = peel_factors(mm.x, ops)
    scale *= f
    b, f = peel_factors(mm.y, ops)
    scale *= f
    if o.flag(mm.trans_y):
        k = b
    else:
        k = untransposed(b, ops)
        if k is None:
            return None
        k, f = peel_factors(k, ops)
        scale *= f
    return Match(q, k, mask, scale, guarded, ops)


class AttentionPattern(RewritePattern):
    """matmul(softmax(q k^T * c + mask), v) -> attention, where the target runs it by a kernel."""

    def __init__(self, target: Target):
        self.target = target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, pv: o.MatmulOp, rewriter: PatternRewriter) -> None:
        if o.flag(pv.trans_x) or o.flag(pv.trans_y):
            return
        m = match_probs(pv.x)
        if m is None:
            return
        mask, causal = m.mask, False
        lq, lk = shape_of(pv.x)[-2:]
        if mask is not None and causal_constant(mask, lq, lk):
            mask, causal = None, True
        op = o.AttentionOp(m.q, m.k, pv.y, mask, m.scale, causal)
        try:
            op.verify()
        except VerifyException:  # batch dims that broadcast, a mask that is not of q's type: left as is
            op.erase()
            return
        if op.out.type != pv.result.type or route_op(op, self.target) not in ("kernel", "external"):
            op.erase()
            return
        e = OpBuilder()
        e.emit(op)
        out = op.out
        if m.guarded:  # rows whose every score is -inf (lse NaN): 0, as the guard made them
            lse = e.value(o.ReshapeOp(op.lse, o.tensor([*shape_of(op.lse), 1], element_of(op.lse))))
            seen = e.value(o.GreaterThanOp(lse, e.full(-np.inf, lse)))
            out = e.select(seen, out, e.full(0.0, out))
        rewriter.replace(pv, e.ops, [out])
        for dead in m.ops:  # the written-out chain, last first, where nothing else reads it
            if dead.parent is not None and all(not r.uses for r in dead.results):
                rewriter.erase(dead)


@dataclass(frozen=True)
class AttentionPass(ModulePass):
    name = "opc-attention"

    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get_target(self.target)
        if ATTENTION not in target.kernels and target.external_of(ATTENTION) is None:
            return
        PatternRewriteWalker(AttentionPattern(target), apply_recursively=False).rewrite_module(op)
