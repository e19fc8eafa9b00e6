"""The C text of scalar ops: C spellings of opc's element types and constants, and the table from
scalar op class to its C expression (EXPRESSIONS), which the C and CUDA emitters share.

Semantics that C would leave undefined are pinned down here: integer arithmetic wraps
(computed in unsigned), float -> int casts saturate with NaN -> 0 (runtime/opc_runtime.h),
maximumf/minimumf propagate NaN.
"""

from __future__ import annotations

import math as pymath

# ---------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------
from typing import Protocol

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E8M0FNUType,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerType,
    Signedness,
)
from xdsl.ir import Attribute, Operation, SSAValue

from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import NARROW_FLOAT_TYPES, BinaryElementwiseOp, is_sub_byte
from opc.lowering.scalars import ROUND_MODE, SATURATE
from opc.ops.registry import ELEMENTWISE


class Renderer(Protocol):
    """What an expression's renderer asks of the emitter: a value's C name, a math function's."""

    def name(self, v: SSAValue) -> str: ...

    def math_fn(self, name: str, t: Attribute) -> str: ...


def c_type(t: Attribute) -> str:
    if isinstance(t, Float32Type):
        return "float"
    if isinstance(t, Float64Type):
        return "double"
    if isinstance(t, (Float16Type, BFloat16Type)):
        return "uint16_t"  # storage bits; arithmetic happens in float
    if isinstance(t, NARROW_FLOAT_TYPES) or is_sub_byte(t):
        return "uint8_t"  # float8/float4/int4/int2: a byte each, sub-byte ones in the low bits (opc_lowp.h)
    if isinstance(t, IndexType):
        return "int64_t"
    if isinstance(t, IntegerType):
        width = t.width.data
        if width == 1:
            return "uint8_t"  # NumPy bool: one byte holding 0 or 1
        unsigned = t.signedness.data == Signedness.UNSIGNED
        return f"{'u' if unsigned else ''}int{width}_t"
    raise NotImplementedError(f"no C type for {t}")


def c_unsigned_wide(t: Attribute) -> str:
    """The unsigned type that integer arithmetic of t wraps in (never promoted to int)."""
    wide = isinstance(t, IndexType) or isinstance(t, IntegerType) and t.width.data == 64
    return "uint64_t" if wide else "uint32_t"


def dtype_suffix(t: Attribute) -> str:
    if isinstance(t, NARROW_FLOAT_TYPES):  # opc_lowp.h's names: f8e4m3fn, f4e2m1fn, ...
        return str(t).lower()
    return {Float32Type: "f32", Float64Type: "f64", Float16Type: "f16", BFloat16Type: "bf16"}[type(t)]


def unsigned_c_type(t: Attribute) -> str:
    assert isinstance(t, IntegerType)
    return "uint8_t" if t.width.data < 8 else f"uint{t.width.data}_t"


def sub_byte_mask(t: Attribute) -> str:
    assert isinstance(t, IntegerType)
    return hex((1 << t.width.data) - 1)


def c_float_literal(value: float, t: Attribute) -> str:
    if pymath.isnan(value):
        return "NAN" if isinstance(t, Float32Type) else "(double)NAN"
    if pymath.isinf(value):
        sign = "-" if value < 0 else ""
        return f"{sign}INFINITY" if isinstance(t, Float32Type) else f"{sign}(double)INFINITY"
    if isinstance(t, Float32Type):
        return f"{float(np.float32(value)).hex()}f"
    return float(value).hex()


def c_constant(value: float | int, t: Attribute) -> str:
    if isinstance(t, NARROW_FLOAT_TYPES):
        from opc.dtypes import numpy_dtype, numpy_name

        return f"(uint8_t){int(np.array(value, numpy_dtype(numpy_name(t))).view(np.uint8))}u"
    if is_sub_byte(t):
        return f"(uint8_t){int(value) & ((1 << t.width.data) - 1)}u"  # type: ignore[attr-defined]
    if isinstance(t, Float16Type):
        return f"(uint16_t){int(np.array(value, np.float16).view(np.uint16))}u"
    if isinstance(t, BFloat16Type):
        import ml_dtypes

        return f"(uint16_t){int(np.array(value, ml_dtypes.bfloat16).view(np.uint16))}u"
    if isinstance(t, (Float32Type, Float64Type)):
        return c_float_literal(float(value), t)
    if isinstance(t, IntegerType) and t.width.data == 64 and value == -(1 << 63):
        return "INT64_MIN"
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "1" if value else "0"
    return f"(({c_type(t)}){int(value)}{'LL' if abs(int(value)) > 2**31 - 1 else ''})"


# f32 / f64 functions with branch-free versions in opc_runtime.h: loops over them vectorize.
VECTOR_F32_MATH = {"exp": "opc_expf", "tanh": "opc_tanhf", "erf": "opc_erff", "log": "opc_logf"}
VECTOR_F64_MATH = {"exp": "opc_exp", "tanh": "opc_tanh", "erf": "opc_erf", "log": "opc_log"}  # and for f64


def float_fn(name: str, t: Attribute) -> str:
    """libm name for f32 (expf) or f64 (exp)."""
    return f"{name}f" if isinstance(t, Float32Type) else name


# ---------------------------------------------------------------------------
# The expression table
# ---------------------------------------------------------------------------


def wrap_int(op: str):
    def render(e: Renderer, o: Operation) -> str:
        t, u = o.results[0].type, c_unsigned_wide(o.results[0].type)
        return f"({c_type(t)})(({u}){e.name(o.operands[0])} {op} ({u}){e.name(o.operands[1])})"

    return render


def infix(op: str):
    return lambda e, o: f"({e.name(o.operands[0])} {op} {e.name(o.operands[1])})"


def libm(name: str, nargs: int = 1):
    def render(e: Renderer, o: Operation) -> str:
        args = ", ".join(e.name(v) for v in o.operands[:nargs])
        return f"{e.math_fn(name, o.results[0].type)}({args})"

    return render


# maximumf's and minimumf's comparison negated: against a bound that is not NaN, a is kept unless
# a <= b (maximum) or a >= b (minimum), NaN a included, so the pick needs one compare
NOT_PICKED = {">": "<=", "<": ">="}


def pick(cmp: str):
    """NaN-propagating maximum/minimum: (a is NaN or a cmp b) ? a : b. Against a constant bound that
    is not NaN (a clip's or relu's), the same value with one unordered compare: gcc made the two
    compares and their or, in a chain of three picks, into mask moves through integer registers."""
    def render(e: Renderer, o: Operation) -> str:
        a, b = e.name(o.operands[0]), e.name(o.operands[1])
        if not_nan_constant(o.operands[1]):
            return f"(!({a} {NOT_PICKED[cmp]} {b}) ? {a} : {b})"
        return f"(({a} != {a} || {a} {cmp} {b}) ? {a} : {b})"

    return render


def not_nan_constant(v: SSAValue) -> bool:
    """Whether v is an arith.constant float that is not NaN."""
    owner = v.owner
    return (isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr)
            and not pymath.isnan(owner.value.value.data))


def int_pick(cmp: str, unsigned: bool = False):
    """Integer max/min; the unsigned forms compare the signless bits as unsigned."""
    def render(e: Renderer, o: Operation) -> str:
        a, b = e.name(o.operands[0]), e.name(o.operands[1])
        lhs, rhs = o.operands[0], o.operands[1]
        ua, ub = (f"({unsigned_c_type(lhs.type)}){a}", f"({unsigned_c_type(rhs.type)}){b}") if unsigned else (a, b)
        return f"(({ua} {cmp} {ub}) ? {a} : {b})"

    return render


# C's infix operator per predicate; "one" (ordered not-equal) has none: compare() writes it as (a < b || a > b)
CMP_C = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "<>", "une": "!=",
         "eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
         "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}  # fmt: skip
# The float unordered predicates (NaN -> true) as the negation of C's (ordered) complement; une is C's !=.
CMPF_UNORDERED = {"ult": ">=", "ule": ">", "ugt": "<=", "uge": "<"}


def compare(e: Renderer, o: Operation) -> str:
    assert isinstance(o, (arith.CmpiOp, arith.CmpfOp))
    pred_name = comparison_name(o, o.predicate.value.data)
    a, b = e.name(o.operands[0]), e.name(o.operands[1])
    if pred_name[0] == "u" and isinstance(o, arith.CmpiOp):  # ult, ugt, ...: signless bits read unsigned
        a, b = f"({unsigned_c_type(o.operands[0].type)}){a}", f"({unsigned_c_type(o.operands[1].type)}){b}"
    if isinstance(o, arith.CmpfOp):
        if pred_name == "one":  # ordered not-equal is false when either side is NaN; C's != is true then
            return f"(({a} < {b}) || ({a} > {b}))"
        if pred_name in CMPF_UNORDERED:  # true when either side is NaN: the negated ordered complement
            return f"(!({a} {CMPF_UNORDERED[pred_name]} {b}))"
    return f"({a} {CMP_C[pred_name]} {b})"


def comparison_name(o: Operation, pred: int) -> str:
    cmpf = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
            "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]
    cmpi = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    name = (cmpf if isinstance(o, arith.CmpfOp) else cmpi)[pred]
    if name not in CMP_C:
        raise NotImplementedError(f"comparison predicate {name}")
    return name


def ext_f(e: Renderer, o: Operation) -> str:
    src, dst, a = o.operands[0].type, o.results[0].type, e.name(o.operands[0])
    if isinstance(src, NARROW_FLOAT_TYPES):
        a = f"opc_{dtype_suffix(src)}_to_f32({a})"
    elif isinstance(src, Float16Type):
        a = f"opc_f16_to_f32({a})"
    elif isinstance(src, BFloat16Type):
        a = f"opc_bf16_to_f32({a})"
    return f"(double){a}" if isinstance(dst, Float64Type) else a


ROUND_MODE_CODES = {"nearest": 0, "up": 1, "down": 2}  # opc_f32_to_f8e8m0fnu's (ONNX's Cast)


def trunc_f(e: Renderer, o: Operation) -> str:
    src, dst, a = o.operands[0].type, o.results[0].type, e.name(o.operands[0])
    if isinstance(dst, NARROW_FLOAT_TYPES):
        sat = int(SATURATE in o.attributes)
        if isinstance(dst, Float8E8M0FNUType):
            mode = o.attributes.get(ROUND_MODE)
            if mode is None:  # opc.cast's own rule, ml_dtypes': from the source value, one rounding
                return f"opc_f64_to_f8e8m0fnu((double){a}, {sat})"
            code = ROUND_MODE_CODES[mode.data]  # type: ignore[attr-defined]
            return f"opc_f32_to_f8e8m0fnu((float){a}, {sat}, {code})"  # ONNX rounds the f32 bits
        return f"opc_f64_to_{dtype_suffix(dst)}((double){a}, {sat})"
    if isinstance(dst, Float32Type):
        return f"(float){a}"
    return f"opc_{dtype_suffix(src)}_to_{dtype_suffix(dst)}({a})"


def to_int_saturating(e: Renderer, o: Operation) -> str:
    t = o.results[0].type
    kind = "u" if isinstance(o, arith.FPToUIOp) else "i"
    return f"({c_type(t)})opc_sat_{kind}{width_of(t)}((double){e.name(o.operands[0])})"


def c_cast(e: Renderer, o: Operation) -> str:
    """sitofp, extsi, trunci: a C conversion; an int4/int2 source is sign-extended from its low bits, a
    result of that width keeps the low bits (wraps, as NumPy's astype)."""
    src, dst, a = o.operands[0].type, o.results[0].type, e.name(o.operands[0])
    if is_sub_byte(src):  # first, so that extsi i2 -> i4 keeps the sign
        a = f"opc_sext{src.width.data}({a})"  # type: ignore[attr-defined]
    if is_sub_byte(dst):
        return f"(uint8_t)((uint32_t){a} & {sub_byte_mask(dst)}u)"
    return f"({c_type(dst)}){a}"


def c_cast_unsigned(e: Renderer, o: Operation) -> str:
    """extui / uitofp: read the signless source bits as unsigned first."""
    src = o.operands[0]
    return f"({c_type(o.results[0].type)})({unsigned_c_type(src.type)}){e.name(src)}"


def bit_cast(e: Renderer, o: Operation) -> str:
    """The same bits as another type of one width: f32/f64 through opc_runtime.h's memcpy (or CUDA
    intrinsic) helpers, integers and f16/bf16 (uint16_t storage) by a C conversion of one width."""
    src, dst, a = o.operands[0].type, o.results[0].type, e.name(o.operands[0])
    if isinstance(src, (Float32Type, Float64Type)):
        a = f"opc_{dtype_suffix(src)}_bits({a})"
    if isinstance(dst, (Float32Type, Float64Type)):
        return f"opc_bits_{dtype_suffix(dst)}(({'uint32_t' if isinstance(dst, Float32Type) else 'uint64_t'}){a})"
    return f"({c_type(dst)}){a}"


def abs_int(e: Renderer, o: Operation) -> str:
    t, a = o.results[0].type, e.name(o.operands[0])
    u = c_unsigned_wide(t)
    return f"({c_type(t)})(({a} < 0) ? ({u})0 - ({u}){a} : ({u}){a})"


def width_of(t: Attribute) -> int:
    if isinstance(t, IndexType):
        return 64
    assert isinstance(t, IntegerType)
    return t.width.data


def out_of_range_shift(e: Renderer, o: Operation) -> str:
    """b < 0 or b >= the width (one unsigned compare): where C's shifts are undefined."""
    return f"(({unsigned_c_type(o.operands[1].type)}){e.name(o.operands[1])} >= {width_of(o.operands[1].type)}u)"


def shift_left(e: Renderer, o: Operation) -> str:
    """In the wide unsigned type (no signed overflow), truncated back; 0 out of range."""
    t, a, b = o.results[0].type, e.name(o.operands[0]), e.name(o.operands[1])
    u = c_unsigned_wide(t)
    return f"({out_of_range_shift(e, o)} ? ({c_type(t)})0 : ({c_type(t)})(({u}){a} << ({u}){b}))"


def shift_right_signed(e: Renderer, o: Operation) -> str:
    """Arithmetic, spelled with ~ for negative a (C leaves >> of a negative value to the compiler);
    the sign fill out of range."""
    t, a, b = o.results[0].type, e.name(o.operands[0]), e.name(o.operands[1])
    ct = c_type(t)
    return (f"({out_of_range_shift(e, o)} ? ({ct})({a} < 0 ? -1 : 0) : "
            f"{a} < 0 ? ({ct})~(~{a} >> {b}) : ({ct})({a} >> {b}))")


def shift_right_unsigned(e: Renderer, o: Operation) -> str:
    t, a, b = o.results[0].type, e.name(o.operands[0]), e.name(o.operands[1])
    return (f"({out_of_range_shift(e, o)} ? ({c_type(t)})0 : "
            f"({c_type(t)})(({unsigned_c_type(t)}){a} >> ({unsigned_c_type(t)}){b}))")


def div_signed(e: Renderer, o: Operation) -> str:
    """Truncating; x / 0 is 0 (NumPy's value) and MIN / -1 wraps to MIN, where C is undefined."""
    t, a, b = o.results[0].type, e.name(o.operands[0]), e.name(o.operands[1])
    ct, u = c_type(t), c_unsigned_wide(t)
    return f"({b} == 0 ? ({ct})0 : {b} == -1 ? ({ct})(({u})0 - ({u}){a}) : ({ct})({a} / {b}))"


def div_unsigned(e: Renderer, o: Operation) -> str:
    t, a, b = o.results[0].type, e.name(o.operands[0]), e.name(o.operands[1])
    ut = unsigned_c_type(t)
    return f"({b} == 0 ? ({c_type(t)})0 : ({c_type(t)})(({ut}){a} / ({ut}){b}))"


def ipow(e: Renderer, o: Operation) -> str:
    """opc_ipow (runtime/opc_runtime.h): repeated squaring in uint64_t, truncated to the type."""
    t = o.results[0].type
    return f"({c_type(t)})opc_ipow((int64_t){e.name(o.operands[0])}, (int64_t){e.name(o.operands[1])})"


def rsqrt(e: Renderer, o: Operation) -> str:
    t = o.results[0].type
    one = "1.0f" if isinstance(t, Float32Type) else "1.0"
    return f"({one} / {e.math_fn('sqrt', t)}({e.name(o.operands[0])}))"


EXPRESSIONS = {
    arith.AddfOp: infix("+"), arith.SubfOp: infix("-"), arith.MulfOp: infix("*"), arith.DivfOp: infix("/"),
    arith.NegfOp: lambda e, o: f"(-{e.name(o.operands[0])})",
    arith.MaximumfOp: pick(">"), arith.MinimumfOp: pick("<"),
    arith.OrIOp: infix("|"), arith.AndIOp: infix("&"), arith.XOrIOp: infix("^"),
    arith.ShLIOp: shift_left, arith.ShRSIOp: shift_right_signed, arith.ShRUIOp: shift_right_unsigned,
    arith.DivSIOp: div_signed, arith.DivUIOp: div_unsigned, math.IPowIOp: ipow,
    arith.AddiOp: wrap_int("+"), arith.SubiOp: wrap_int("-"), arith.MuliOp: wrap_int("*"),
    arith.MaxSIOp: int_pick(">"), arith.MaxUIOp: int_pick(">", True),
    arith.MinSIOp: int_pick("<"), arith.MinUIOp: int_pick("<", True),
    arith.CmpfOp: compare, arith.CmpiOp: compare,
    arith.SelectOp: lambda e, o: f"({e.name(o.cond)} ? {e.name(o.lhs)} : {e.name(o.rhs)})",
    arith.ExtFOp: ext_f, arith.TruncFOp: trunc_f,
    arith.FPToSIOp: to_int_saturating, arith.FPToUIOp: to_int_saturating,
    arith.SIToFPOp: c_cast, arith.UIToFPOp: c_cast_unsigned, arith.IndexCastOp: c_cast,
    arith.ExtSIOp: c_cast, arith.ExtUIOp: c_cast_unsigned, arith.TruncIOp: c_cast, arith.BitcastOp: bit_cast,
    math.ExpOp: libm("exp"), math.LogOp: libm("log"), math.TanhOp: libm("tanh"), math.ErfOp: libm("erf"),
    math.SqrtOp: libm("sqrt"), math.AbsFOp: libm("fabs"), math.PowFOp: libm("pow", 2),
    math.RsqrtOp: rsqrt, math.AbsIOp: abs_int,
    math.FloorOp: libm("floor"), math.CeilOp: libm("ceil"), math.RoundEvenOp: libm("rint"),  # rint: half to even
    math.SinOp: libm("sin"), math.CosOp: libm("cos"), math.TanOp: libm("tan"),
    math.AsinOp: libm("asin"), math.AcosOp: libm("acos"), math.AtanOp: libm("atan"),
    math.SinhOp: libm("sinh"), math.CoshOp: libm("cosh"),
    math.AsinhOp: libm("asinh"), math.AcoshOp: libm("acosh"), math.AtanhOp: libm("atanh"),
}  # fmt: skip
# Any other float function an elementwise op registers (opc/ops/elementwise.py) is libm's function
# of the math dialect's name for it (math.log1p: log1p, log1pf), so adding one needs no row here.
for _op, _rule in ELEMENTWISE.items():
    if _rule.float_op is not None and _rule.float_op not in EXPRESSIONS:
        _nargs = 2 if issubclass(_op, BinaryElementwiseOp) else 1
        EXPRESSIONS[_rule.float_op] = libm(_rule.float_op.name.removeprefix("math."), _nargs)


# ---------------------------------------------------------------------------
# Function emission
# ---------------------------------------------------------------------------

ARENA_ALIGN = 64  # a cache line (and an AVX-512 vector) per buffer start


def buffer_bytes(t: Attribute) -> int:
    n = max(1, pymath.prod(shape_of(t)))
    return n * {"double": 8, "float": 4, "uint16_t": 2, "int64_t": 8, "uint64_t": 8, "int32_t": 4,
                "uint32_t": 4, "int16_t": 2}.get(c_type(element_of(t)), 1)
