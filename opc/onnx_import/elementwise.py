"""Elementwise ONNX ops. The one-to-one rows first (UNARY, BINARY, VARIADIC: an ONNX op onto one
opc op); then logic and compares on i1 (through select: opc's compares take numbers only), casts,
activations composed of opc ops, Mod and integer Pow, and BitShift / BitwiseAnd / Or / Xor / Not
onto opc's bitwise ops (which give ONNX's values where C leaves a shift undefined: a count below 0
or of the width or more gives 0 to the left, the sign fill to the right), BitCast onto opc.bitcast."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import Float8E8M0FNUType, IntegerType, Signedness
from xdsl.ir import Attribute, SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of
from opc.onnx_import.common import I64, Values, gt, lt, node_numpy_dtype, numpy_of, scalar
from opc.onnx_import.graph import BY_NUMPY, ELEMENT_TYPES, Node, as_newer, converter, dtype_name, same_since
from opc.onnx_import.linalg import bias_after_gemm
from opc.onnx_import.run_time_sizes import broadcast_shapes_of
from opc.ops.registry import ELEMENTWISE

# The ops that are one opc op each (their converters: binary, unary, variadic, bitwise). The
# one-to-one types are declared with the op's rules (`elementwise(o.SinOp, ..., onnx="Sin", since=7)`
# in opc/ops/elementwise.py): adding such an op does not touch the importer.
ONE_TO_ONE = {r.onnx: (op, r.since) for op, r in ELEMENTWISE.items() if r.onnx}
BINARY = {t: op for t, (op, _) in ONE_TO_ONE.items() if issubclass(op, o.BinaryElementwiseOp)}
UNARY = {t: op for t, (op, _) in ONE_TO_ONE.items() if not issubclass(op, o.BinaryElementwiseOp)}
VARIADIC = {"Max": o.MaximumOp, "Min": o.MinimumOp, "Sum": o.AddOp}
BITWISE = {"BitwiseAnd": o.BitwiseAndOp, "BitwiseOr": o.BitwiseOrOp, "BitwiseXor": o.BitwiseXorOp}


@converter(*BINARY)
def binary(node: Node) -> Values:
    a, b = node.input(0), node.input(1)
    if node.op_type == "Add":
        fused = bias_after_gemm(node, a, b) or bias_after_gemm(node, b, a)
        if fused is not None:
            return [fused]
    return [node.e.value(BINARY[node.op_type](a, b))]


@converter(*UNARY)
def unary(node: Node) -> Values:
    return [node.e.value(UNARY[node.op_type](node.input(0)))]


def pairwise(node: Node, op: type[o.BinaryElementwiseOp]) -> SSAValue:
    """op(op(a, b), c)... over the inputs of a variadic node."""
    args = node.inputs()
    acc = args[0]
    for a in args[1:]:
        acc = node.e.value(op(acc, a))
    return acc


@converter(*VARIADIC)
def variadic(node: Node) -> Values:
    return [pairwise(node, VARIADIC[node.op_type])]


@converter("Mean")
def mean(node: Node) -> Values:
    total = pairwise(node, o.AddOp)
    return [node.e.div(total, scalar(node, len(node.inputs()), total))]


@converter("Identity")
def identity(node: Node) -> Values:
    return [node.item(0)]  # type: ignore[list-item]  # a sequence or optional passes as it is


@converter("Reciprocal")
def reciprocal(node: Node) -> Values:
    x = node.input(0)
    return [node.e.div(scalar(node, 1.0, x), x)]


@converter("Pow")
def power(node: Node) -> Values:
    """x ** y; a known exponent of 1, 2 or 0.5 becomes x, x * x or sqrt(x) (exact, as ONNX runtimes do)."""
    x = node.input(0)
    if node.known(1):
        y = node.const(1, "exponent")
        shortcuts = (1.0, 2.0, 0.5) if numpy_of(x).kind == "f" else (1.0, 2.0)
        if y.size == 1 and y.reshape(-1)[0] in shortcuts and broadcasts_to(y.shape, node.shape(0)):
            p = float(y.reshape(-1)[0])
            out = x if p == 1.0 else node.e.mul(x, x) if p == 2.0 else node.e.value(o.SqrtOp(x))
            return [node.e.reshape(out, broadcast_shapes_of(node, y.shape, node.shape(0)))]
        float_of_int = numpy_of(x).kind == "i" and y.dtype.kind == "f"
        exponent = node.e.constant(y.astype(np.float64 if float_of_int else node_numpy_dtype(node, 0)))
    else:
        exponent = node.input(1)
    if numpy_of(x).kind == "i" and numpy_of(exponent).kind == "f":  # in double, truncated back (as NumPy's astype)
        f64 = BY_NUMPY[np.dtype(np.float64)]
        wide = node.e.value(o.PowOp(node.e.cast(x, f64), node.e.cast(exponent, f64)))
        return [node.e.cast(wide, element_of(x))]
    if element_of(exponent) != element_of(x):
        exponent = node.e.cast(exponent, element_of(x))
    return [node.e.value(o.PowOp(x, exponent))]


def broadcasts_to(small: Sequence[int], shape: Sequence[int]) -> bool:
    return len(small) <= len(shape) and all(s in (1, d) for s, d in zip(small[::-1], shape[::-1]))




@converter("Where")
def where(node: Node) -> Values:
    return [node.e.select(node.input(0), node.input(1), node.input(2))]


# Logic on i1 through select (opc's compares take numbers only).
def bool_constant(node: Node, value: bool) -> SSAValue:
    return node.e.constant(np.array(value))


@converter("Not")
def logical_not(node: Node) -> Values:
    return [node.e.select(node.input(0), bool_constant(node, False), bool_constant(node, True))]


@converter("And")
def logical_and(node: Node) -> Values:
    return [node.e.select(node.input(0), node.input(1), bool_constant(node, False))]


@converter("Or")
def logical_or(node: Node) -> Values:
    return [node.e.select(node.input(0), bool_constant(node, True), node.input(1))]


@converter("Xor")
def logical_xor(node: Node) -> Values:
    b = node.input(1)
    not_b = node.e.select(b, bool_constant(node, False), bool_constant(node, True))
    return [node.e.select(node.input(0), not_b, b)]


@converter("LessOrEqual", "GreaterOrEqual")
def compare_or_equal(node: Node) -> Values:
    a, b = node.input(0), node.input(1)
    strict = o.LessThanOp if node.op_type == "LessOrEqual" else o.GreaterThanOp
    return [node.e.select(node.e.value(strict(a, b)), bool_constant(node, True), node.e.value(o.EqualOp(a, b)))]


@converter("LeakyRelu")
def leaky_relu(node: Node) -> Values:
    x = node.input(0)
    zero = scalar(node, 0.0, x)
    positive = node.e.value(o.GreaterThanOp(x, zero))
    return [node.e.select(positive, x, node.e.mul(x, scalar(node, node.attr("alpha", 0.01), x)))]


@converter("Clip")
def clip(node: Node) -> Values:
    """min(max(x, lo), hi) with optional bounds."""
    x = node.input(0)
    if node.has(1):
        x = node.e.value(o.MaximumOp(x, node.input(1)))
    if node.has(2):
        x = node.e.value(o.MinimumOp(x, node.input(2)))
    return [x]


@converter("Gelu", since=20)
def gelu(node: Node) -> Values:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.fail(f"approximate must be 'none' or 'tanh', got '{approximate}'")
    return [node.e.value(o.GeluOp(node.input(0), approximate=approximate == "tanh"))]


# int4, uint4, int2, uint2: their ranges
SUB_BYTE_RANGES = {IntegerType(4): (-8, 7), IntegerType(4, Signedness.UNSIGNED): (0, 15),
                   IntegerType(2): (-2, 1), IntegerType(2, Signedness.UNSIGNED): (0, 3)}


def float_to_sub_byte(node: Node, x: SSAValue, element: Attribute) -> SSAValue:
    """A float truncated to int4/uint4/int2/uint2 as ONNX's reference does (ml_dtypes' astype): ONNX
    leaves an out-of-range value undefined, the reference gives 0 there (and for NaN and inf), and the
    node tests expect that; opc.cast would saturate."""
    lo, hi = SUB_BYTE_RANGES[element]
    t = node.e.cast(x, I64)  # truncated; saturated at int64's range, NaN 0: out of range below either way
    zero = node.e.full(0, t)
    t = node.e.select(lt(node, t, node.e.full(lo, t)), zero, t)
    t = node.e.select(gt(node, t, node.e.full(hi, t)), zero, t)
    return node.e.cast(t, element)


def onnx_cast(node: Node, x: SSAValue, element: Attribute) -> SSAValue:
    """x cast with ONNX's rules: to float8, `saturate` (default 1) clamps to the largest finite value; to
    float8e8m0, `round_mode` ("up" by default) rounds the exponent; floats to int4/int2 as the reference.
    Other targets as opc.cast. (QuantizeLinear's `saturate` is Cast's too.)"""
    if element_of(x) == element:
        return x
    if element in SUB_BYTE_RANGES and o.is_float(element_of(x)):
        return float_to_sub_byte(node, x, element)
    if not isinstance(element, o.NARROW_FLOAT_TYPES) or isinstance(element, o.SUB_BYTE_FLOAT_TYPES):
        return node.e.cast(x, element)
    saturate = bool(node.attr("saturate", 1))
    mode = str(node.attr("round_mode", "up")) if isinstance(element, Float8E8M0FNUType) else None
    return node.e.value(o.CastOp(x, element, saturate=saturate, round_mode=mode))


@converter("Cast")
def cast(node: Node) -> Values:
    to = node.attr("to")
    if to not in ELEMENT_TYPES:
        raise node.fail(f"cast to {dtype_name(to)} is not supported")
    return [onnx_cast(node, node.input(0), ELEMENT_TYPES[to][1])]


@converter("CastLike", since=15)
def cast_like(node: Node) -> Values:
    return [onnx_cast(node, node.input(0), node.element(1))]






def expm1_scaled(node: Node, x: SSAValue, alpha: float) -> SSAValue:
    """alpha * (exp(x) - 1)"""
    e = node.e
    return e.mul(e.sub(e.value(o.ExpOp(x)), scalar(node, 1.0, x)), scalar(node, alpha, x))


@converter("Elu", since=1)
def elu(node: Node) -> Values:
    x = node.input(0)
    return [node.e.select(gt(node, x, scalar(node, 0.0, x)), x, expm1_scaled(node, x, node.attr("alpha", 1.0)))]


@converter("Selu", since=1)
def selu(node: Node) -> Values:
    x = node.input(0)
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    y = node.e.select(gt(node, x, scalar(node, 0.0, x)), x, expm1_scaled(node, x, alpha))
    return [node.e.mul(y, scalar(node, gamma, x))]


@converter("Celu", since=12)
def celu(node: Node) -> Values:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"""
    e, x = node.e, node.input(0)
    alpha = node.attr("alpha", 1.0)
    zero = scalar(node, 0.0, x)
    neg = expm1_scaled(node, e.div(x, scalar(node, alpha, x)), alpha)
    return [e.add(e.value(o.MaximumOp(x, zero)), e.value(o.MinimumOp(neg, zero)))]


def softplus_of(node: Node, x: SSAValue) -> SSAValue:
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): no overflow for large x."""
    e = node.e
    tail = e.value(o.LogOp(e.add(scalar(node, 1.0, x), e.value(o.ExpOp(e.neg(e.value(o.AbsOp(x))))))))
    return e.add(e.value(o.MaximumOp(x, scalar(node, 0.0, x))), tail)


@converter("Softplus", since=1)
def softplus(node: Node) -> Values:
    return [softplus_of(node, node.input(0))]


@converter("Softsign", since=1)
def softsign(node: Node) -> Values:
    e, x = node.e, node.input(0)
    return [e.div(x, e.add(scalar(node, 1.0, x), e.value(o.AbsOp(x))))]


def hard_sigmoid_of(node: Node, x: SSAValue, alpha: float, beta: float) -> SSAValue:
    e = node.e
    y = e.add(e.mul(x, scalar(node, alpha, x)), scalar(node, beta, x))
    return e.value(o.MinimumOp(e.value(o.MaximumOp(y, scalar(node, 0.0, x))), scalar(node, 1.0, x)))


@converter("HardSigmoid", since=1)
def hard_sigmoid(node: Node) -> Values:
    return [hard_sigmoid_of(node, node.input(0), node.attr("alpha", 0.2), node.attr("beta", 0.5))]


@converter("HardSwish", since=14)
def hard_swish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, hard_sigmoid_of(node, x, 1.0 / 6.0, 0.5))]


@converter("Mish", since=18)
def mish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, node.e.value(o.TanhOp(softplus_of(node, x))))]


@converter("ThresholdedRelu", since=10)
def thresholded_relu(node: Node) -> Values:
    x = node.input(0)
    alpha = node.attr("alpha", 1.0)
    return [node.e.select(gt(node, x, scalar(node, alpha, x)), x, scalar(node, 0.0, x))]


@converter("PRelu", since=9)
def prelu(node: Node) -> Values:
    """x for x > 0, slope * x otherwise; slope broadcasts to x (unidirectionally)."""
    e, x, slope = node.e, node.input(0), node.input(1)
    y = e.select(gt(node, x, scalar(node, 0.0, x)), x, e.mul(x, slope))
    return [e.broadcast_to(y, node.shape(0))]


@converter("Sign", since=9)
def sign(node: Node) -> Values:
    e, x = node.e, node.input(0)
    zero, one, minus = scalar(node, 0, x), scalar(node, 1, x), scalar(node, -1, x) if is_signed(x) else None
    below = e.select(lt(node, x, zero), minus, zero) if minus is not None else zero
    return [e.broadcast_to(e.select(gt(node, x, zero), one, below), node.shape(0))]


def is_signed(v: SSAValue) -> bool:
    return numpy_of(v).kind in "fi"


@converter("IsNaN", since=9)
def is_nan(node: Node) -> Values:
    x = node.input(0)
    return [node.e.select(node.e.value(o.EqualOp(x, x)), bool_constant(node, False), bool_constant(node, True))]


@converter("IsInf", since=10)
def is_inf(node: Node) -> Values:
    """x - x is NaN exactly for inf and NaN; x itself is NaN only for NaN."""
    e, x = node.e, node.input(0)
    diff = e.sub(x, x)
    not_finite = e.select(e.value(o.EqualOp(diff, diff)), bool_constant(node, False), bool_constant(node, True))
    is_num = e.value(o.EqualOp(x, x))
    inf = e.select(is_num, not_finite, bool_constant(node, False))
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    zero = scalar(node, 0.0, x)
    if pos and neg:
        return [inf]
    if not pos and not neg:
        return [e.broadcast_to(bool_constant(node, False), node.shape(0))]
    side = gt(node, x, zero) if pos else lt(node, x, zero)
    return [e.select(inf, side, bool_constant(node, False))]


@converter("Clip", since=1)
def clip_attributes(node: Node) -> Values:
    x = node.input(0)
    lo, hi = node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
    x = node.e.value(o.MaximumOp(x, scalar(node, lo, x)))
    return [node.e.value(o.MinimumOp(x, scalar(node, hi, x)))]


@converter("Swish", since=24)
def swish(node: Node) -> Values:
    x = node.input(0)
    return [node.e.mul(x, node.e.value(o.SigmoidOp(node.e.mul(x, scalar(node, node.attr("alpha", 1.0), x)))))]


@converter("Mod", since=10)
def mod(node: Node) -> Values:
    """C's fmod (fmod=1: the sign of x) or Python's % (fmod=0: the sign of y) from floor:
    t = |x| - floor(|x| / |y|) * |y|, corrected once into [0, |y|), signed. Integers: x - (x / y) * y
    with opc's truncating integer division (exact in every width; x mod 0 is x)."""
    e = node.e
    x, y = node.input(0), node.input(1)
    dtype = numpy_of(x)
    fmod = node.attr("fmod", 0)
    if dtype.kind in "iu":
        r = e.sub(x, e.mul(e.div(x, y), y))
        if not fmod and dtype.kind == "i":  # the sign of y: a nonzero remainder of the other sign moves by y
            zero = e.constant(np.array(0, dtype))
            other = e.select(lt(node, r, zero), gt(node, y, zero),
                             e.select(gt(node, r, zero), lt(node, y, zero), bool_constant(node, False)))
            r = e.select(other, e.add(r, y), r)
        return [e.broadcast_to(r, broadcast_shapes_of(node, node.shape(0), node.shape(1)))]
    if dtype.kind == "f" and not fmod and node.opset < 28:
        raise node.fail(f"fmod must be 1 for floats before opset 28 (opset {node.opset})")
    work = np.dtype(np.float64) if dtype.kind in "iu" else np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    xs = x if dtype == work else e.cast(x, BY_NUMPY[work])
    ys = y if dtype == work else e.cast(y, BY_NUMPY[work])
    zero = e.constant(np.array(0, work))
    ax, ay = e.value(o.AbsOp(xs)), e.value(o.AbsOp(ys))
    t = e.sub(ax, e.mul(e.value(o.FloorOp(e.div(ax, ay))), ay))
    if dtype.kind == "f":  # x mod inf is x (the formula would give inf - inf)
        t = e.select(e.value(o.EqualOp(ay, e.constant(np.array(np.inf, work)))), ax, t)
    t = e.select(lt(node, t, zero), e.add(t, ay), t)
    t = e.select(e.value(o.LessThanOp(t, ay)), t, e.sub(t, ay))
    r = e.select(lt(node, xs, zero), e.neg(t), t)  # fmod: the sign of x
    if not fmod:  # the sign of y: a nonzero remainder of the other sign moves by y
        other = e.select(lt(node, r, zero), gt(node, ys, zero),
                         e.select(gt(node, r, zero), lt(node, ys, zero), bool_constant(node, False)))
        r = e.select(other, e.add(r, ys), r)
    r = e.broadcast_to(r, broadcast_shapes_of(node, node.shape(0), node.shape(1)))
    return [r if dtype == work else e.cast(r, element_of(x))]


@converter("Shrink", since=9)
def shrink(node: Node) -> Values:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    e, x = node.e, node.input(0)
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    zero = scalar(node, 0, x)
    low = e.select(lt(node, x, scalar(node, -lambd, x)), e.add(x, scalar(node, bias, x)), zero)
    return [e.select(gt(node, x, scalar(node, lambd, x)), e.sub(x, scalar(node, bias, x)), low)]


@converter(*BITWISE, since=18)
def bitwise(node: Node) -> Values:
    return [node.e.value(BITWISE[node.op_type](node.input(0), node.input(1)))]


@converter("BitwiseNot", since=18)
def bitwise_not(node: Node) -> Values:
    return [node.e.value(o.BitwiseNotOp(node.input(0)))]


@converter("BitCast", since=26)
def bit_cast(node: Node) -> Values:
    """The bits of each element read as `to`, of the same width (float8 / int4 types are refused: opc
    has no such element type)."""
    to = node.attr("to")
    if to not in ELEMENT_TYPES:
        raise node.fail(f"bitcast to {dtype_name(to)} is not supported")
    x, element = node.input(0), ELEMENT_TYPES[to][1]
    src = element_of(x)
    if o.storage_bits(src) != o.storage_bits(element) or (o.is_bool(element) and not o.is_bool(src)):
        raise node.fail(f"bitcast from {src} to {element}: the element types must have one width "
                        "(and to bool only from bool)")
    return [x if src == element else node.e.value(o.BitcastOp(x, element))]


@converter("BitShift", since=11)
def bit_shift(node: Node) -> Values:
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    op = o.ShiftLeftOp if direction == "LEFT" else o.ShiftRightOp
    return [node.e.value(op(node.input(0), node.input(1)))]


# Opsets 1 to 6: B of Add, Sub, Mul, Div, Pow, the compares and And / Or / Xor broadcasts only with
# broadcast = 1, its dims lined up with A's from `axis` (A's last dims when no axis is given); without
# it, B has A's shape. B is reshaped to line up as NumPy does, then converted as from opset 7. Without
# broadcast a B of another shape is read as opset 7 reads it (onnx.version_converter does the same):
# exporters wrote scalar constants so.
@converter(*BINARY, "Pow", "And", "Or", "Xor", since=1)
def binary_broadcast_attribute(node: Node) -> Values:
    a, b = node.shape(0), node.shape(1)
    legacy = ("broadcast", "axis", "consumed_inputs")
    if not node.attr("broadcast", 0):
        return as_newer(node, 7, node.proto.input, drop=legacy)
    axis = node.attr("axis")
    start = len(a) - len(b) if axis is None else node.axis(int(axis), len(a))
    if start < 0 or start + len(b) > len(a) or any(d not in (1, a[start + i]) for i, d in enumerate(b)):
        raise node.fail(f"B {list(b)} does not line up with A {list(a)} from axis {start}")
    lined = [*b, *[1] * (len(a) - start - len(b))]
    name = node.proto.input[1]
    given: str | np.ndarray | SSAValue = name
    if len(lined) != len(b):
        given = (node.importer.constants[name].reshape(lined) if name in node.importer.constants
                 else node.e.reshape(node.input(1), lined))
    return as_newer(node, 7, [node.proto.input[0], given], drop=legacy)


@converter("PRelu", since=1)
def prelu_per_channel(node: Node) -> Values:
    """Opsets 1 to 6: a slope of C values applies per channel (axis 1), as from opset 7 it would to the
    last axis; a slope of 1 value, or of x's shape, as from opset 7."""
    shape, slope = node.shape(0), node.shape(1)
    if len(slope) == 1 and len(shape) > 2 and slope[0] == shape[1] != 1:
        per_channel = node.e.reshape(node.input(1), [slope[0], *[1] * (len(shape) - 2)])
        return as_newer(node, 9, [node.proto.input[0], per_channel], drop=("consumed_inputs",))
    return as_newer(node, 9, node.proto.input, drop=("consumed_inputs",))


@converter("Cast", since=1)
def cast_by_name(node: Node) -> Values:
    """Opsets 1 to 5: `to` names the type ("FLOAT"); from 6 it is its number."""
    from onnx import TensorProto

    to = node.attr("to")
    names = TensorProto.DataType.keys()
    number = TensorProto.DataType.Value(to.upper()) if isinstance(to, str) and to.upper() in names else to
    return as_newer(node, 7, node.proto.input, attrs={"to": number})


# Older opsets: where the meaning is the one above, the same converter (Clip's bounds as attributes
# before 11 have their own, clip_attributes; B's broadcast attribute before 7, binary_broadcast_attribute).
same_since({
    1: ("Identity", "Reciprocal", "Not", "LeakyRelu", "Max", "Min", "Sum", "Mean"),  # Max ... Mean: one shape before 8
    6: ("Cast",),
    7: ("Pow", "And", "Or", "Xor", "PRelu"),
    9: ("Where",),
    11: ("Clip",),
    12: ("LessOrEqual", "GreaterOrEqual"),
})
for op_type, (_, first) in ONE_TO_ONE.items():  # the one-to-one types: from the opset their declaration gives
    same_since({first: (op_type,)})
