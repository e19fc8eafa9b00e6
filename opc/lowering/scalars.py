"""Building blocks of the loop level: element types as scalars travel, an
Emitter of loop nests and scalar arith/math ops, and the scalar value of each
elementwise opc op (the loop lowering evaluates it point-wise): the scalar ops
its registration names (opc/ops/elementwise.py), or a formula written out here.

Scalars travel in their storage type (f16/bf16 included; ui8 as signless
i8, which arith requires) and ops compute in f32 for f16/bf16, rounding to
nearest even on every op result.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import cast

from xdsl.dialects import arith, math, memref, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    Signedness,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from opc.dialects import opc
from opc.dialects.kinds import element_of, shaped_type
from opc.dialects.opc import int_width
from opc.errors import UnsupportedError
from opc.ops.registry import ELEMENTWISE
from opc.symbolic import Sym

# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------

HALF_TYPES = (Float16Type, BFloat16Type)


def is_half(t: Attribute) -> bool:
    return isinstance(t, HALF_TYPES)


def compute_type(t: Attribute) -> Attribute:
    """f16/bf16 compute in f32 (SPEC.md: Types)."""
    return f32 if is_half(t) else t


def is_unsigned(t: Attribute) -> bool:
    """Of a tensor element type: ui8 and i1 (scalars are signless, as arith wants)."""
    return isinstance(t, IntegerType) and (t.signedness.data == Signedness.UNSIGNED or t.width.data == 1)


def scalar_type(t: Attribute) -> Attribute:
    """The signless type a tensor element type travels in as a scalar (ui8 -> i8)."""
    if isinstance(t, IntegerType) and t.signedness.data != Signedness.SIGNLESS:
        return IntegerType(t.width.data)
    return t


def memref_of(t: Attribute) -> MemRefType:
    """The buffer type of a tensor type (a `?` dim stays `?`)."""
    return MemRefType(element_of(t), list(shaped_type(t).get_shape()))




# ---------------------------------------------------------------------------
# Emission context: an insertion block and per-block constant caches
# ---------------------------------------------------------------------------


class Emitter:
    def __init__(self, block: Block, sizer: Callable[[Sym], SSAValue] | None = None):
        self.block = block
        self.sizer = sizer  # a run-time size as an index value (FunctionLowering.size_value)
        self.consts: dict[tuple[int, object, Attribute], SSAValue] = {}

    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def value(self, op: Operation) -> SSAValue:
        return self.emit(op).results[0]

    @contextmanager
    def at(self, block: Block):
        saved = self.block
        self.block = block
        try:
            yield
        finally:
            self.block = saved

    def const(self, value: float | int, t: Attribute) -> SSAValue:
        t = scalar_type(t)
        key = (id(self.block), value if not (isinstance(value, float) and pymath.isnan(value)) else "nan", t)
        if key not in self.consts:
            if isinstance(t, IndexType):
                op = arith.ConstantOp(IntegerAttr(int(value), t))
            elif isinstance(t, IntegerType):
                op = arith.ConstantOp(IntegerAttr(int(value), t, truncate_bits=True))
            else:
                assert isinstance(t, opc.FLOAT_TYPES)
                op = arith.ConstantOp(FloatAttr(float(value), t))
            self.consts[key] = self.value(op)
        return self.consts[key]

    def index(self, value: int | Sym) -> SSAValue:
        if isinstance(value, Sym):
            assert self.sizer is not None  # only functions with run-time sizes have symbolic ones
            return self.sizer(value)
        return self.const(value, IndexType())

    # -- loops ---------------------------------------------------------------

    def parallel(self, shape: Sequence[int], body: Callable[[list[SSAValue]], object]) -> None:
        """An scf.parallel nest over `shape` (rank 0: the body alone)."""
        if not shape:
            body([])
            return
        lbs = [self.index(0)] * len(shape)
        ubs = [self.index(d) for d in shape]
        steps = [self.index(1)] * len(shape)
        inner = Block(arg_types=[IndexType()] * len(shape))
        with self.at(inner):
            body(list(inner.args))
            self.emit(scf.ReduceOp())
        self.emit(scf.ParallelOp(lbs, ubs, steps, Region(inner)))

    def for_loop(
        self, extent: int, inits: Sequence[SSAValue], body: Callable[[SSAValue, list[SSAValue]], list[SSAValue]]
    ) -> list[SSAValue]:
        lb, ub, step = self.index(0), self.index(extent), self.index(1)
        inner = Block(arg_types=[IndexType(), *(v.type for v in inits)])
        with self.at(inner):
            self.emit(scf.YieldOp(*body(inner.args[0], list(inner.args[1:]))))
        return list(self.emit(scf.ForOp(lb, ub, step, inits, Region(inner))).results)

    # -- memory ------------------------------------------------------------------

    def load(self, buf: SSAValue, idx: Sequence[SSAValue]) -> SSAValue:
        v = self.value(memref.LoadOp.get(buf, idx))
        return self.value(arith.BitcastOp(v, scalar_type(v.type))) if scalar_type(v.type) != v.type else v

    def store(self, v: SSAValue, buf: SSAValue, idx: Sequence[SSAValue]) -> None:
        elem = element_of(buf)
        if v.type != elem:
            v = self.value(arith.BitcastOp(v, elem))
        self.emit(memref.StoreOp.get(v, buf, idx))

    # -- scalar conversions ----------------------------------------------------

    def to_compute(self, v: SSAValue) -> SSAValue:
        return self.value(arith.ExtFOp(v, f32)) if is_half(v.type) else v

    def to_storage(self, v: SSAValue, t: Attribute) -> SSAValue:
        t = scalar_type(t)
        if v.type == t:
            return v
        if is_half(t):
            return self.value(arith.TruncFOp(v, t))
        raise AssertionError(f"no storage conversion {v.type} -> {t}")

    def convert(self, v: SSAValue, src: Attribute, dst_elem: Attribute) -> SSAValue:
        """Scalar cast with SPEC.md's semantics from element type src to dst_elem (scalars signless)."""
        dst = scalar_type(dst_elem)
        if src == dst_elem:
            return v
        sf, df = opc.is_float(src), opc.is_float(dst)
        if sf and df:
            if is_half(dst) and is_half(src):
                return self.value(arith.TruncFOp(self.to_compute(v), dst))  # via exact f32
            if isinstance(dst, Float64Type) or (isinstance(dst, Float32Type) and is_half(src)):
                return self.value(arith.ExtFOp(v, dst))
            return self.value(arith.TruncFOp(v, dst))  # one rounding, straight from the source
        if sf:
            x = self.to_compute(v)
            if opc.is_bool(dst):
                return self.value(arith.CmpfOp(x, self.const(0.0, x.type), "une"))  # NaN -> true, as NumPy
            # The C emitter gives fptosi/fptoui saturating semantics (NaN -> 0).
            assert isinstance(dst, IntegerType)
            return self.value((arith.FPToUIOp if is_unsigned(dst_elem) else arith.FPToSIOp)(x, dst))
        if df:
            assert isinstance(dst, opc.FLOAT_TYPES)
            wide = f64 if is_half(dst) else dst  # int -> f64 -> half: one rounding for any |x| < 2^53
            x = self.value((arith.UIToFPOp if is_unsigned(src) else arith.SIToFPOp)(v, wide))
            return self.value(arith.TruncFOp(x, dst)) if is_half(dst) else x
        # int -> int
        if opc.is_bool(dst):
            return self.value(arith.CmpiOp(v, self.const(0, src), "ne"))
        assert isinstance(src, IntegerType) and isinstance(dst, IntegerType)
        sw, dw = src.width.data, dst.width.data
        if sw < dw:
            return self.value((arith.ExtUIOp if is_unsigned(src) else arith.ExtSIOp)(v, dst))
        if sw > dw:
            return self.value(arith.TruncIOp(v, dst))
        return v  # i8 <-> ui8: the same signless bits, as NumPy's astype


# ---------------------------------------------------------------------------
# Scalar rules: one per elementwise op, on storage-typed scalars
# ---------------------------------------------------------------------------

# The scalar ops of the elementwise ops, from their registrations (opc/ops/elementwise.py).
FLOAT_BINARY: dict[type, type] = {op: r.float_op for op, r in ELEMENTWISE.items()
                                  if r.float_op and issubclass(op, opc.BinaryElementwiseOp)}
FLOAT_UNARY: dict[type, type] = {op: r.float_op for op, r in ELEMENTWISE.items()
                                 if r.float_op and not issubclass(op, opc.BinaryElementwiseOp)}
INT_BINARY: dict[type, tuple[type, type]] = {op: r.int_ops for op, r in ELEMENTWISE.items() if r.int_ops}
COMPARE: dict[type, tuple[str, str, str]] = {op: r.predicates for op, r in ELEMENTWISE.items() if r.predicates}
# Elementwise ops whose scalar rule is written out below instead (formulas, conversions, integer forms).
WRITTEN_OUT = (opc.CastOp, opc.BitcastOp, opc.SelectOp, opc.ReluOp, opc.GeluOp, opc.SigmoidOp, opc.ReluGradOp,
               opc.GeluGradOp, opc.BitwiseNotOp)


def has_scalar_rule(op: type) -> bool:
    """Whether scalar_op can evaluate the elementwise op (tests/ops/test_op_checklist.py asks)."""
    return op in FLOAT_BINARY or op in FLOAT_UNARY or op in INT_BINARY or op in COMPARE or op in WRITTEN_OUT


class Scalar:
    """Arithmetic helpers on compute-typed scalars, for the activation formulas."""

    def __init__(self, e: Emitter):
        self.e = e

    def c(self, v: float, like: SSAValue) -> SSAValue:
        return self.e.const(v, like.type)

    def add(self, a, b):
        return self.e.value(arith.AddfOp(a, b))

    def sub(self, a, b):
        return self.e.value(arith.SubfOp(a, b))

    def mul(self, a, b):
        return self.e.value(arith.MulfOp(a, b))

    def gelu_tanh_parts(self, x):
        """(t, inner', inner) with t = tanh(inner), inner = c*(x + k x^3), inner' = c*(1 + 3k x^2)."""
        x2 = self.mul(x, x)
        c, k = self.c(opc.GELU_SQRT_2_OVER_PI, x), opc.GELU_K
        inner = self.mul(c, self.add(x, self.mul(self.c(k, x), self.mul(x2, x))))
        t = self.e.value(math.TanhOp(inner))
        dinner = self.mul(c, self.add(self.c(1.0, x), self.mul(self.c(3 * k, x), x2)))
        return t, dinner, inner

    def sech2(self, u):
        """1 - tanh(u)^2 as 4 w / (1 + w)^2, w = e^-2|u|: as accurate as exp, where 1 - t*t
        cancels to 0 once t rounds to +-1."""
        w = self.e.value(math.ExpOp(self.mul(self.c(-2.0, u), self.e.value(math.AbsFOp(u)))))
        one_plus_w = self.add(self.c(1.0, u), w)
        return self.mul(self.c(4.0, u), self.e.value(arith.DivfOp(w, self.mul(one_plus_w, one_plus_w))))

    def gelu(self, x, approximate: bool):
        half_x = self.mul(self.c(0.5, x), x)
        if approximate:
            t, _, _ = self.gelu_tanh_parts(x)
        else:
            t = self.e.value(math.ErfOp(self.mul(x, self.c(pymath.sqrt(0.5), x))))
        return self.mul(half_x, self.add(self.c(1.0, x), t))

    def sigmoid(self, x):
        """e = exp(-|x|), r = 1/(1 + e), x < 0 ? e r : r: one exp and one division that
        vectorize, and no overflow of exp(-x) to inf below -88.7, where 1/(1 + exp(-x)) gives
        0 for the subnormal sigmoid (within 2 ulp over all f32 inputs, tests/support/math_ulp.c)."""
        one = self.c(1.0, x)
        e = self.e.value(math.ExpOp(self.e.value(arith.NegfOp(self.e.value(math.AbsFOp(x))))))
        r = self.e.value(arith.DivfOp(one, self.add(one, e)))
        negative = self.e.value(arith.CmpfOp(x, self.c(0.0, x), "olt"))
        return self.e.value(arith.SelectOp(negative, self.mul(e, r), r))

    def gelu_derivative(self, x, approximate: bool):
        one, half = self.c(1.0, x), self.c(0.5, x)
        if approximate:
            t, dinner, inner = self.gelu_tanh_parts(x)
            left = self.mul(half, self.add(one, t))
            right = self.mul(self.mul(half, x), self.mul(self.sech2(inner), dinner))
            return self.add(left, right)
        erf = self.e.value(math.ErfOp(self.mul(x, self.c(pymath.sqrt(0.5), x))))
        pdf = self.e.value(math.ExpOp(self.mul(self.c(-0.5, x), self.mul(x, x))))
        density = self.mul(x, self.mul(pdf, self.c(1 / pymath.sqrt(2 * pymath.pi), x)))
        return self.add(self.mul(half, self.add(one, erf)), density)


def relu_grad_scalar(e: Emitter, x: SSAValue, dout: SSAValue) -> SSAValue:
    positive = e.value(arith.CmpfOp(x, e.const(0.0, x.type), "ogt"))
    return e.value(arith.SelectOp(positive, dout, e.const(0.0, x.type)))


def gelu_grad_scalar(e: Emitter, x: SSAValue, dout: SSAValue, approximate: bool) -> SSAValue:
    s = Scalar(e)
    return s.mul(dout, s.gelu_derivative(x, approximate))


def scalar_op(e: Emitter, op: Operation, args: list[SSAValue]) -> SSAValue:
    """The scalar value of elementwise `op` from its operands' scalars (storage types)."""
    out_t = element_of(op.results[0])
    if isinstance(op, opc.CastOp):
        return e.convert(args[0], element_of(op.x), op.dtype)
    if isinstance(op, opc.BitcastOp):
        if opc.is_bool(element_of(op.x)):  # an i1 byte holds 0 or 1: as i8/ui8 the same 0 or 1
            return e.value(arith.ExtUIOp(args[0], cast(IntegerType, scalar_type(op.dtype))))  # i8 or ui8
        return e.value(arith.BitcastOp(args[0], scalar_type(op.dtype)))
    if isinstance(op, opc.SelectOp):
        return e.value(arith.SelectOp(args[0], args[1], args[2]))
    xs = [e.to_compute(a) for a in args]
    in_t = xs[0].type
    s = Scalar(e)
    kind = type(op)
    if isinstance(op, opc.CompareOp):
        fp, sp, up = COMPARE[kind]
        if opc.is_float(in_t):
            return e.value(arith.CmpfOp(xs[0], xs[1], fp))
        return e.value(arith.CmpiOp(xs[0], xs[1], up if is_unsigned(element_of(op.operands[0])) else sp))
    if opc.is_float(in_t):
        if kind in FLOAT_BINARY:
            r = e.value(FLOAT_BINARY[kind](xs[0], xs[1]))
        elif kind in FLOAT_UNARY:
            r = e.value(FLOAT_UNARY[kind](xs[0]))
        elif kind is opc.ReluOp:
            r = e.value(arith.MaximumfOp(xs[0], e.const(0.0, in_t)))  # NaN propagates, as np.maximum
        elif isinstance(op, opc.GeluOp):
            r = s.gelu(xs[0], opc.flag(op.approximate))
        elif kind is opc.SigmoidOp:
            r = s.sigmoid(xs[0])
        elif kind is opc.ReluGradOp:
            r = relu_grad_scalar(e, xs[0], xs[1])
        elif isinstance(op, opc.GeluGradOp):
            r = gelu_grad_scalar(e, xs[0], xs[1], opc.flag(op.approximate))
        else:
            raise UnsupportedError(f"no scalar lowering for {op.name} on {in_t}")
        return e.to_storage(r, out_t)
    unsigned = is_unsigned(element_of(op.operands[0]))
    if kind in INT_BINARY:
        return e.value(INT_BINARY[kind][unsigned](xs[0], xs[1]))
    if kind is opc.BitwiseNotOp:
        return e.value(arith.XOrIOp(xs[0], e.const(-1, in_t)))
    if kind is opc.NegOp:
        return e.value(arith.SubiOp(e.const(0, in_t), xs[0]))
    if kind is opc.AbsOp:
        return xs[0] if unsigned else e.value(math.AbsIOp(xs[0]))
    if kind is opc.ReluOp:
        return xs[0] if unsigned else e.value(arith.MaxSIOp(xs[0], e.const(0, in_t)))
    raise UnsupportedError(f"no scalar lowering for {op.name} on {in_t}")


def full_value(value: float, t: Attribute) -> float | int:
    """opc.full's f64 value in the result type, with cast's semantics (truncate, saturate, NaN -> 0)."""
    if opc.is_float(t):
        return value
    if opc.is_bool(t):
        return int(value != 0)
    if pymath.isnan(value):
        return 0
    width = int_width(t)
    lo, hi = (0, (1 << width) - 1) if is_unsigned(t) else (-(1 << (width - 1)), (1 << (width - 1)) - 1)
    return hi if value >= hi else lo if value <= lo else int(value)


def broadcast_index(e: Emitter, idx: Sequence[SSAValue], out_shape: Sequence[int], in_shape: Sequence[int]):
    """Index into an operand of shape in_shape broadcast (NumPy rules) to out_shape."""
    lead = len(out_shape) - len(in_shape)
    return [e.index(0) if d == 1 else idx[lead + j] for j, d in enumerate(in_shape)]


# ---------------------------------------------------------------------------
