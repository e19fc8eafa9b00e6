"""The `opc` dialect: deep-learning ops and their grad ops on static tensors.

Every op prints and parses as
`opc.NAME operands attr-dict : functional-type(operands, results)`.

Primitives
  binary (NumPy broadcasting): add sub mul div maximum minimum pow
  compare (-> i1):             greater_than less_than equal
  select:                      select %cond, %a, %b
  unary:                       neg exp log tanh erf sqrt rsqrt abs relu gelu
                               floor ceil round sin cos tan asin acos atan sinh cosh asinh acosh atanh log1p
  cast {dtype = T}, bitcast {dtype = T} (same width), full {value}, iota (0, 1, ..., n - 1), broadcast_to, reshape, transpose {perm},
  reduce_sum / reduce_max / reduce_min / reduce_mean {axes, keepdim},
  matmul {trans_x, trans_y} (ranks 2 to 4, batch dims broadcast), sigmoid
  index maps: slice {start, limit, strides}, concat {axis}, gather {axis}
  data-dependent sizes: nonzero (its result's count is known only once it has run), topk {axis, largest} (k a
                        run-time value), unique {sorted} (1-D), non_max_suppression {center_point_box}
Fused
  fused_gemm_epilogue {trans_x, trans_y, activation}  -> out[, reserve_space]
  softmax {axis}, log_softmax {axis}
  layer_norm {begin_norm_axis, epsilon}               -> y, mean, rstd
  softmax_cross_entropy {axis}                        -> loss, softmax
Grad ops
  cast_grad, fused_gemm_epilogue_grad {trans_x, trans_y, activation_grad},
  relu_grad, gelu_grad {approximate},
  softmax_grad, log_softmax_grad {axis}, layer_norm_grad {begin_norm_axis},
  softmax_cross_entropy_grad {axis}, slice_grad {start, limit, strides},
  gather_grad {axis}
Convolutions (layout NC + spatial, 1 or 2 spatial dims while MAX_RANK is 4)
  conv {strides, dilations, pads, group}, conv_transpose {..., output_padding},
  conv_grad_input {...} (-> dx), conv_grad_filter {...} (-> dw),
  fused_conv_epilogue {..., activation[, x_channels_last, out_channels_last]} -> out[, reserve_space]
      (conv + bias + act, CPU kernel; the unit flags put x or out (and reserve) in [N, spatial..., C] order)
Pooling
  max_pool {kernel, strides, dilations, pads, ceil_mode} -> y, indices;
  avg_pool {kernel, strides, dilations, pads, ceil_mode, count_include_pad}; max_pool_grad, avg_pool_grad
Normalization over channels
  batch_norm {epsilon, momentum, training} -> y[, running_mean, running_var, saved_mean, saved_rstd],
  batch_norm_grad, instance_norm {epsilon}, group_norm {num_groups, epsilon} -> y, mean, rstd
Attention
  attention %q, %k, %v[, %mask] {scale, is_causal} -> out, lse;
  attention_grad %q, %k, %v, %out, %lse, %dout[, %mask] {scale, is_causal} -> dq, dk, dv
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, cast

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AnyFloat,
    BFloat16Type,
    BoolAttr,
    ContainerType,
    DenseArrayBase,
    FixedBitwidthType,
    Float4E2M1FNType,
    Float6E2M3FNType,
    Float6E3M2FNType,
    Float8E4M3FNType,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float8E5M2Type,
    Float8E8M0FNUType,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ShapedType,
    Signedness,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from opc.symbolic import Sym

# ---------------------------------------------------------------------------
# Element types
# ---------------------------------------------------------------------------

# float8, float6 and float4 as ml_dtypes names them: stored in a byte each, computed in f32 (opc-widen)
NARROW_FLOAT_TYPES = (Float8E4M3FNType, Float8E4M3FNUZType, Float8E5M2Type, Float8E5M2FNUZType, Float8E8M0FNUType,
                      Float6E2M3FNType, Float6E3M2FNType, Float4E2M1FNType)
SUB_BYTE_FLOAT_TYPES = (Float6E2M3FNType, Float6E3M2FNType, Float4E2M1FNType)
FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type, *NARROW_FLOAT_TYPES)
SUB_BYTE_WIDTHS = (2, 4)  # i2, ui2, i4, ui4: one element a byte, in its low bits
MAX_RANK = 8
# A tensor's bytes, bounded so that every index and byte offset fits an int64_t with room
# to spare (2^47 bytes = 128 TiB, beyond any memory).
MAX_TENSOR_BYTES = 1 << 47


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOAT_TYPES)


def is_bool(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def is_narrow(t: Attribute) -> bool:
    """float8, float4, int4/uint4, int2/uint2: the low-precision types that opc-widen computes in a
    wider type (f32; i8/ui8), leaving casts and function boundaries to hold them."""
    return isinstance(t, NARROW_FLOAT_TYPES) or isinstance(t, IntegerType) and t.width.data in SUB_BYTE_WIDTHS


def is_sub_byte(t: Attribute) -> bool:
    """i2, ui2, i4, ui4, f6E2M3FN, f6E3M2FN, f4E2M1FN: a byte holds one, in its low bits (i1 is a byte
    holding 0 or 1)."""
    return isinstance(t, SUB_BYTE_FLOAT_TYPES) or isinstance(t, IntegerType) and t.width.data in SUB_BYTE_WIDTHS


def is_admitted_element(t: Attribute) -> bool:
    """i1, i8, ui8, i16, ui16, i32, ui32, i64, ui64, f16, bf16, f32, f64 and the low-precision
    f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, f8E8M0FNU, f6E2M3FN, f6E3M2FN, f4E2M1FN, i4, ui4, i2, ui2
    (SPEC.md: Types)."""
    if is_float(t):
        return True
    if not isinstance(t, IntegerType):
        return False
    width, sign = t.width.data, t.signedness.data
    if width in (2, 4, 8, 16, 32, 64):
        return sign in (Signedness.SIGNLESS, Signedness.UNSIGNED)
    return width == 1 and sign == Signedness.SIGNLESS


def shaped_type(v: SSAValue | Attribute) -> ShapedType:
    """The tensor or memref type of a value (or the type itself)."""
    t = v.type if isinstance(v, SSAValue) else v
    if not isinstance(t, ShapedType):
        raise TypeError(f"expected a tensor or memref, got {t}")
    return t


SYMBOLIC_SHAPES: ContextVar[Mapping[SSAValue, tuple] | None] = ContextVar("opc_symbolic_shapes", default=None)
"""While a function with run-time sizes is lowered: each value's shape with its `?` dims as
polynomials over the size parameters (opc/dialects/sizes.py); shape_of answers with it."""


def shape_of(v: SSAValue | Attribute) -> tuple[int, ...]:
    shape = shaped_type(v).get_shape()
    if DYNAMIC in shape and isinstance(v, SSAValue) and (table := SYMBOLIC_SHAPES.get()) is not None:
        if v not in table:
            raise AssertionError(f"no run-time sizes known for {v}")
        return table[v]
    return shape


def element_of(v: SSAValue | Attribute) -> Attribute:
    t = v.type if isinstance(v, SSAValue) else v
    if not isinstance(t, ContainerType):
        raise TypeError(f"expected a tensor or memref, got {t}")
    return t.get_element_type()


def check_tensor(value: SSAValue | Attribute, what: str) -> TensorType:
    t = value.type if isinstance(value, SSAValue) else value
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} must be a tensor, got {t}")
    if len(t.get_shape()) > MAX_RANK:
        raise VerifyException(f"{what} has rank {len(t.get_shape())}, at most {MAX_RANK} is supported")
    return check_storable(t, what)


def check_storable(t: TensorType, what: str) -> TensorType:
    """A tensor opc can hold in memory: static, of an admitted element type, at most 2^47 bytes."""
    shape = [d for d in t.get_shape() if d != DYNAMIC]  # a `?` dim: its size is checked at the call
    if any(d < 0 for d in shape):
        raise VerifyException(f"{what} has a negative dim: {t}")
    if not is_admitted_element(t.element_type):
        raise VerifyException(f"{what} has unsupported element type {t.element_type}")
    size = math.prod(shape) * (storage_bits(t.element_type) // 8)
    if size > MAX_TENSOR_BYTES:
        raise VerifyException(f"{what} ({t}) has {math.prod(shape)} elements, {size} bytes: opc bounds a tensor "
                              "at 2^47 bytes")
    return t


def check_float(t: TensorType, what: str) -> None:
    if not is_float(t.element_type):
        raise VerifyException(f"{what} must have a float element type, got {t.element_type}")


def check_not_bool(t: TensorType, what: str) -> None:
    if is_bool(t.element_type):
        raise VerifyException(f"{what} must not be i1")


def check_same_element(a: TensorType, b: TensorType, what: str) -> None:
    if a.element_type != b.element_type:
        raise VerifyException(f"{what}: element types differ ({a.element_type} vs {b.element_type})")


DYNAMIC = DYNAMIC_INDEX  # a `?` dim in xDSL's get_shape() (INT64_MIN)


def dims_agree(a: int, b: int) -> bool:
    """Two dims that may be the same size: equal, or one of them `?` (checked at the call)."""
    return a == b or DYNAMIC in (a, b)


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join("?" if d == DYNAMIC else str(d) for d in shape) + "]"


def check_shape(t: TensorType, shape: Sequence[int], what: str) -> None:
    got = tuple(t.get_shape())
    if len(got) != len(shape) or not all(map(dims_agree, got, shape)):
        raise VerifyException(f"{what} must have shape {shape_text(shape)}, got {shape_text(got)}")


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting; VerifyException when the shapes do not broadcast. A `?` dim pairs with
    a static 1 (broadcast), another `?` or a static n (the sizes must then be equal at the call:
    a run-time 1 is never broadcast implicitly, as in JAX and StableHLO)."""
    rank = max(len(s) for s in shapes)
    out: list[int] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        static = dims - {DYNAMIC}
        if len(static) > 1:
            raise VerifyException(f"shapes [{', '.join(shape_text(s) for s in shapes)}] do not broadcast")
        out.append(static.pop() if static else DYNAMIC if dims else 1)
    return tuple(out)


def tensor(shape: Sequence[int], element: Attribute) -> TensorType:
    """A tensor type; a size known only at run time (a symbolic size, opc/symbolic.py) is `?`."""
    return TensorType(element, [DYNAMIC if isinstance(d, Sym) else d for d in shape])


def matmul_shape(x: Sequence[int], y: Sequence[int], trans_x: bool, trans_y: bool) -> tuple[int, ...]:
    """Shape of op_x(x) @ op_y(y): ranks 2 to 4, the leading (batch) dims broadcast like NumPy's matmul."""
    if not (2 <= len(x) <= MAX_RANK and 2 <= len(y) <= MAX_RANK):
        raise VerifyException(f"matmul operands must have rank 2 to {MAX_RANK}, got {list(x)} and {list(y)}")
    try:
        batch = broadcast_shapes(x[:-2], y[:-2])
    except VerifyException:
        raise VerifyException(
            f"matmul batch dims {list(x[:-2])} and {list(y[:-2])} do not broadcast (of {list(x)} and {list(y)})"
        ) from None
    m, kx = (x[-1], x[-2]) if trans_x else (x[-2], x[-1])
    ky, n = (y[-1], y[-2]) if trans_y else (y[-2], y[-1])
    if not dims_agree(kx, ky):
        raise VerifyException(
            f"matmul inner dims differ: op_x(x) is {m}x{kx}, op_y(y) is {ky}x{n} "
            f"(trans_x={trans_x}, trans_y={trans_y})"
        )
    return (*batch, m, n)


def bool_prop(default: bool):
    return prop_def(BoolAttr, default_value=BoolAttr.from_bool(default))


def int_prop(default: int):
    return prop_def(IntegerAttr, default_value=IntegerAttr(default, 64))


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """A NumPy-style axis (negative counts from the end) as 0..rank-1."""
    if not -rank <= axis < rank:
        raise VerifyException(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def stats_element(element: Attribute) -> Attribute:
    """The element type of layer_norm's saved mean and rstd: the compute type
    (f32 for f16/bf16/f32, as Paddle and ONNX keep them; f64 for f64)."""
    return element if isinstance(element, Float64Type) else Float32Type()


def check_index_element(t: TensorType, what: str) -> None:
    el = t.element_type
    if not isinstance(el, IntegerType) or is_bool(el):
        raise VerifyException(f"{what} must have an integer element type (i8, ui8, i16, i32, i64), got {el}")


def check_label_element(t: TensorType, what: str) -> None:
    el = t.element_type
    if not (isinstance(el, IntegerType) and el.width.data in (32, 64) and el.signedness.data == Signedness.SIGNLESS):
        raise VerifyException(f"{what} must have element type i32 or i64, got {el}")


def slice_shape(shape: Sequence[int], start: Sequence[int], limit: Sequence[int],
                strides: Sequence[int]) -> tuple[int, ...]:
    """StableHLO's slice: 0 <= start <= limit <= dim, strides >= 1; dim = ceil((limit - start) / stride)."""
    rank = len(shape)
    for what, v in (("start", start), ("limit", limit), ("strides", strides)):
        if len(v) != rank:
            raise VerifyException(f"slice {what} has {len(v)} entries, the operand has rank {rank}")
    out = []
    for d, (n, a, b, s) in enumerate(zip(shape, start, limit, strides)):
        if n == DYNAMIC or b == DYNAMIC:  # a run-time dim is sliced whole: start 0, limit `?`, stride 1
            if (n, a, b, s) != (DYNAMIC, 0, DYNAMIC, 1):
                raise VerifyException(f"slice dim {d} of run-time size: only whole (start 0, limit ?, stride 1), "
                                      f"got start {a}, limit {'?' if b == DYNAMIC else b}, stride {s}")
            out.append(DYNAMIC)
            continue
        if s < 1:
            raise VerifyException(f"slice strides must be >= 1, got {s} for dim {d}")
        if not 0 <= a <= b <= n:
            raise VerifyException(f"slice dim {d}: need 0 <= start <= limit <= {n}, got start {a}, limit {b}")
        out.append(-(-(b - a) // s))
    return tuple(out)


def gather_shape(x: Sequence[int], indices: Sequence[int], axis: int) -> tuple[int, ...]:
    """np.take(x, indices, axis).shape"""
    return (*x[:axis], *indices, *x[axis + 1:])


ACTIVATIONS = ("none", "relu", "gelu")
# fused_conv_epilogue's: also relu6 = minimum(maximum(z, 0), 6) (MobileNet's Clip), as Paddle's conv2d_fusion
CONV_ACTIVATIONS = (*ACTIVATIONS, "relu6")
ACTIVATION_GRADS = ("none", "relu_grad", "gelu_grad")

# ---------------------------------------------------------------------------
# Abstract bases
# ---------------------------------------------------------------------------


class OpcOp(IRDLOperation, abc.ABC):
    """Common options: properties live in the attr-dict of the custom form.

    KIND and KERNELS are the op's row of the registry that only the definition can say
    (opc/ops/registry.py builds the rest from the rules): its kind, as Paddle's ops.yaml,
    fused_ops.yaml and backward.yaml say, and the built-in targets with a kernel for it."""

    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())
    KIND: ClassVar[str] = "primitive"
    """primitive | fused | grad"""
    KERNELS: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    """The built-in targets with a dedicated kernel (a lowering) for the op; the others run it by its
    invoke or composite rule."""
    DTYPE_OPERAND: ClassVar[int] = 0
    """The operand whose element type picks a device's kernel for the op."""
    UNSUPPORTED: ClassVar[dict[str, str]] = {}
    """Built-in targets the op cannot run on yet, each with the reason a compile for it says."""


class UnaryElementwiseOp(OpcOp, abc.ABC):
    """Same type in and out."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    x = operand_def(T)
    result = result_def(T)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"
    FLOATS_ONLY: ClassVar[bool] = True

    def __init__(self, x: SSAValue | Operation, properties: dict[str, Attribute] | None = None):
        super().__init__(operands=[x], result_types=[SSAValue.get(x).type], properties=properties or {})

    def verify_(self) -> None:
        t = check_tensor(self.x, "operand")
        (check_float if self.FLOATS_ONLY else check_not_bool)(t, "operand")


class BinaryElementwiseOp(OpcOp, abc.ABC):
    """Operands of one element type broadcast like NumPy."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"
    FLOATS_ONLY: ClassVar[bool] = False

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation, result_type: Attribute | None = None):
        if result_type is None:
            a, b = SSAValue.get(lhs).type, SSAValue.get(rhs).type
            assert isinstance(a, TensorType) and isinstance(b, TensorType)
            shape = broadcast_shapes(a.get_shape(), b.get_shape())
            result_type = tensor(shape, self.result_element(a.element_type))
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    @classmethod
    def result_element(cls, operand_element: Attribute) -> Attribute:
        return operand_element

    def verify_(self) -> None:
        a, b = check_tensor(self.lhs, "lhs"), check_tensor(self.rhs, "rhs")
        r = check_tensor(self.result, "result")
        check_same_element(a, b, "operands")
        if self.FLOATS_ONLY:
            check_float(a, "operands")
        else:
            check_not_bool(a, "operands")
        shape = broadcast_shapes(a.get_shape(), b.get_shape())
        check_shape(r, shape, "result")
        if r.element_type != self.result_element(a.element_type):
            raise VerifyException(f"result element type must be {self.result_element(a.element_type)}")


class IntegerBinaryOp(BinaryElementwiseOp, abc.ABC):
    """Bitwise ops: integer operands (not i1) of one element type, broadcast like NumPy."""

    def verify_(self) -> None:
        super().verify_()
        check_integer(check_tensor(self.lhs, "lhs"), "operands")


def check_integer(t: TensorType, what: str) -> None:
    if is_float(t.element_type) or is_bool(t.element_type):
        raise VerifyException(f"{what} must have an integer element type (not i1), got {t.element_type}")


class CompareOp(BinaryElementwiseOp, abc.ABC):
    @classmethod
    def result_element(cls, operand_element: Attribute) -> Attribute:
        return IntegerType(1)


class ActivationGradOp(OpcOp, abc.ABC):
    """dx = dout * act'(x): x, dout and dx share one type."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    x = operand_def(T)
    dout = operand_def(T)
    result = result_def(T)
    assembly_format = "$x `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation, properties: dict[str, Attribute] | None = None):
        super().__init__(operands=[x, dout], result_types=[SSAValue.get(x).type], properties=properties or {})

    def verify_(self) -> None:
        check_float(check_tensor(self.x, "x"), "x")


class ReduceOp(OpcOp, abc.ABC):
    x = operand_def(TensorType)
    result = result_def(TensorType)
    axes = prop_def(DenseArrayBase)
    keepdim = bool_prop(False)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, axes: Sequence[int], keepdim: bool = False):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        shape = reduced_shape(t.get_shape(), normalize_axes(axes, len(t.get_shape())), keepdim)
        super().__init__(
            operands=[x],
            result_types=[tensor(shape, t.element_type)],
            properties={"axes": DenseArrayBase.from_list(i64, list(axes)), "keepdim": BoolAttr.from_bool(keepdim)},
        )

    def axes_list(self) -> tuple[int, ...]:
        return normalize_axes(int_values(self.axes), len(shape_of(self.x)))

    def verify_(self) -> None:
        t = check_tensor(self.x, "operand")
        check_not_bool(t, "operand")
        r = check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        axes = self.axes_list()
        check_shape(r, reduced_shape(t.get_shape(), axes, flag(self.keepdim)), "result")


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise VerifyException(f"reduce axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else a)
    if len(set(out)) != len(out):
        raise VerifyException(f"reduce axes {list(axes)} repeat an axis")
    return tuple(sorted(out))


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------------------
# Primitive ops
# ---------------------------------------------------------------------------


@irdl_op_definition
class AddOp(BinaryElementwiseOp):
    """`%r = opc.add %a, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>`"""

    name = "opc.add"


@irdl_op_definition
class SubOp(BinaryElementwiseOp):
    """`%r = opc.sub %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.sub"


@irdl_op_definition
class MulOp(BinaryElementwiseOp):
    """`%r = opc.mul %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>`"""

    name = "opc.mul"


@irdl_op_definition
class DivOp(BinaryElementwiseOp):
    """`%r = opc.div %a, %b : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>`; integers divide as C does
    (truncating toward zero), and x / 0 is 0 there (NumPy's value, where C leaves it undefined)."""

    name = "opc.div"


@irdl_op_definition
class MaximumOp(BinaryElementwiseOp):
    """`%r = opc.maximum %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>` (NaN propagates)"""

    name = "opc.maximum"


@irdl_op_definition
class MinimumOp(BinaryElementwiseOp):
    """`%r = opc.minimum %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>` (NaN propagates)"""

    name = "opc.minimum"


@irdl_op_definition
class PowOp(BinaryElementwiseOp):
    """`%r = opc.pow %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>`; integers by repeated
    squaring, wrapping; a negative exponent gives the truncated 1 / a^-b (0 unless a is 1 or -1)."""

    name = "opc.pow"

    def verify_(self) -> None:
        super().verify_()
        t = check_tensor(self.lhs, "lhs").element_type
        if isinstance(t, IntegerType) and t.signedness.data == Signedness.UNSIGNED:
            raise VerifyException(f"operands must be floats or signed integers, got {t}")


@irdl_op_definition
class BitwiseAndOp(IntegerBinaryOp):
    """`%r = opc.bitwise_and %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>`"""

    name = "opc.bitwise_and"


@irdl_op_definition
class BitwiseOrOp(IntegerBinaryOp):
    """`%r = opc.bitwise_or %a, %b : (tensor<4xui8>, tensor<1xui8>) -> tensor<4xui8>`"""

    name = "opc.bitwise_or"


@irdl_op_definition
class BitwiseXorOp(IntegerBinaryOp):
    """`%r = opc.bitwise_xor %a, %b : (tensor<4xi16>, tensor<4xi16>) -> tensor<4xi16>`"""

    name = "opc.bitwise_xor"


@irdl_op_definition
class ShiftLeftOp(IntegerBinaryOp):
    """`%r = opc.shift_left %a, %b : (tensor<4xui32>, tensor<4xui32>) -> tensor<4xui32>`: a << b, wrapping in
    a's width; a shift below 0 or of the width or more gives 0 (ONNX BitShift)."""

    name = "opc.shift_left"


@irdl_op_definition
class ShiftRightOp(IntegerBinaryOp):
    """`%r = opc.shift_right %a, %b : (tensor<4xi8>, tensor<4xi8>) -> tensor<4xi8>`: a >> b, arithmetic for
    signed a; a shift below 0 or of the width or more gives the sign fill (-1 or 0; ONNX BitShift)."""

    name = "opc.shift_right"


@irdl_op_definition
class GreaterThanOp(CompareOp):
    """`%r = opc.greater_than %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>`"""

    name = "opc.greater_than"


@irdl_op_definition
class LessThanOp(CompareOp):
    """`%r = opc.less_than %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>`"""

    name = "opc.less_than"


@irdl_op_definition
class EqualOp(CompareOp):
    """`%r = opc.equal %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>`"""

    name = "opc.equal"


@irdl_op_definition
class SelectOp(OpcOp):
    """`%r = opc.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.select"
    DTYPE_OPERAND: ClassVar[int] = 1  # its values, not the condition
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, cond: SSAValue | Operation, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        types = [SSAValue.get(v).type for v in (cond, lhs, rhs)]
        shape = broadcast_shapes(*(shape_of(t) for t in types))
        super().__init__(operands=[cond, lhs, rhs], result_types=[tensor(shape, element_of(types[1]))])

    def verify_(self) -> None:
        c = check_tensor(self.cond, "cond")
        a, b = check_tensor(self.lhs, "lhs"), check_tensor(self.rhs, "rhs")
        r = check_tensor(self.result, "result")
        if not is_bool(c.element_type):
            raise VerifyException(f"cond must be i1, got {c.element_type}")
        check_same_element(a, b, "lhs and rhs")
        check_same_element(a, r, "operands and result")
        check_shape(r, broadcast_shapes(c.get_shape(), a.get_shape(), b.get_shape()), "result")


@irdl_op_definition
class NegOp(UnaryElementwiseOp):
    """`%r = opc.neg %a : (tensor<4xi32>) -> tensor<4xi32>`"""

    name = "opc.neg"
    FLOATS_ONLY: ClassVar[bool] = False


@irdl_op_definition
class AbsOp(UnaryElementwiseOp):
    """`%r = opc.abs %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.abs"
    FLOATS_ONLY: ClassVar[bool] = False


@irdl_op_definition
class BitwiseNotOp(UnaryElementwiseOp):
    """`%r = opc.bitwise_not %a : (tensor<4xui16>) -> tensor<4xui16>` (integers, not i1)"""

    name = "opc.bitwise_not"

    def verify_(self) -> None:
        check_integer(check_tensor(self.x, "operand"), "operand")


@irdl_op_definition
class ExpOp(UnaryElementwiseOp):
    """`%r = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.exp"


@irdl_op_definition
class LogOp(UnaryElementwiseOp):
    """`%r = opc.log %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.log"


@irdl_op_definition
class TanhOp(UnaryElementwiseOp):
    """`%r = opc.tanh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.tanh"


@irdl_op_definition
class ErfOp(UnaryElementwiseOp):
    """`%r = opc.erf %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.erf"


@irdl_op_definition
class FloorOp(UnaryElementwiseOp):
    """`%r = opc.floor %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.floor"


@irdl_op_definition
class CeilOp(UnaryElementwiseOp):
    """`%r = opc.ceil %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.ceil"


@irdl_op_definition
class RoundOp(UnaryElementwiseOp):
    """`%r = opc.round %a : (tensor<4xf32>) -> tensor<4xf32>` (round half to even (ONNX Round, C's rint))"""

    name = "opc.round"


@irdl_op_definition
class SinOp(UnaryElementwiseOp):
    """`%r = opc.sin %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.sin"


@irdl_op_definition
class CosOp(UnaryElementwiseOp):
    """`%r = opc.cos %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.cos"


@irdl_op_definition
class TanOp(UnaryElementwiseOp):
    """`%r = opc.tan %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.tan"


@irdl_op_definition
class AsinOp(UnaryElementwiseOp):
    """`%r = opc.asin %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.asin"


@irdl_op_definition
class AcosOp(UnaryElementwiseOp):
    """`%r = opc.acos %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.acos"


@irdl_op_definition
class AtanOp(UnaryElementwiseOp):
    """`%r = opc.atan %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.atan"


@irdl_op_definition
class SinhOp(UnaryElementwiseOp):
    """`%r = opc.sinh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.sinh"


@irdl_op_definition
class CoshOp(UnaryElementwiseOp):
    """`%r = opc.cosh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.cosh"


@irdl_op_definition
class AsinhOp(UnaryElementwiseOp):
    """`%r = opc.asinh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.asinh"


@irdl_op_definition
class AcoshOp(UnaryElementwiseOp):
    """`%r = opc.acosh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.acosh"


@irdl_op_definition
class AtanhOp(UnaryElementwiseOp):
    """`%r = opc.atanh %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.atanh"


@irdl_op_definition
class Log1pOp(UnaryElementwiseOp):
    """`%r = opc.log1p %a : (tensor<4xf32>) -> tensor<4xf32>` (log(1 + x), accurate where x is near 0)"""

    name = "opc.log1p"


@irdl_op_definition
class SqrtOp(UnaryElementwiseOp):
    """`%r = opc.sqrt %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.sqrt"


@irdl_op_definition
class RsqrtOp(UnaryElementwiseOp):
    """`%r = opc.rsqrt %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.rsqrt"


@irdl_op_definition
class ReluOp(UnaryElementwiseOp):
    """`%r = opc.relu %a : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.relu"
    FLOATS_ONLY: ClassVar[bool] = False


GELU_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715
"""The tanh form: 0.5 x (1 + tanh(GELU_SQRT_2_OVER_PI (x + GELU_K x^3)))."""


@irdl_op_definition
class GeluOp(UnaryElementwiseOp):
    """`%r = opc.gelu %a {approximate = true} : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.gelu"
    approximate = bool_prop(True)

    def __init__(self, x: SSAValue | Operation, approximate: bool = True):
        super().__init__(x, {"approximate": BoolAttr.from_bool(approximate)})


@irdl_op_definition
class SigmoidOp(UnaryElementwiseOp):
    """`%r = opc.sigmoid %a : (tensor<4xf32>) -> tensor<4xf32>` (1 / (1 + exp(-x)))"""

    name = "opc.sigmoid"


class RetypeOp(OpcOp):
    """The shape of `x` in the element type `dtype`: what cast and bitcast declare and verify alike."""

    x = operand_def(TensorType)
    result = result_def(TensorType)
    dtype = prop_def(TypeAttribute)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, dtype: Attribute):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        super().__init__(operands=[x], result_types=[tensor(t.get_shape(), dtype)], properties={"dtype": dtype})

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        if not is_admitted_element(self.dtype):
            raise VerifyException(f"dtype {self.dtype} is not a supported element type")
        if r.element_type != self.dtype:
            raise VerifyException(f"result element type {r.element_type} must equal dtype {self.dtype}")
        check_shape(r, t.get_shape(), "result")


ROUND_MODES = ("up", "down", "nearest")
# The types a cast's `saturate` applies to (ONNX's Cast): float4 E2M1FN always saturates, having no inf or NaN.
SATURATING_TYPES = (Float8E4M3FNType, Float8E4M3FNUZType, Float8E5M2Type, Float8E5M2FNUZType, Float8E8M0FNUType)


@irdl_op_definition
class CastOp(RetypeOp):
    """`%c = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>`

    To float8/float4: round to nearest even; out of range gives inf or NaN as the type has them
    (ml_dtypes' astype), or +-max finite with `saturate = true` (ONNX Cast's saturate). To
    f8E8M0FNU: the f32 exponent rounded by `round_mode` ("up", "down" or "nearest"; ONNX's, sign
    ignored), or without it as ml_dtypes' astype (nearest, ties up; zero and negatives NaN).
    To i4/ui4/i2/ui2 from floats: truncate and saturate, NaN 0, as to every integer type."""

    name = "opc.cast"
    saturate = opt_prop_def(BoolAttr)
    round_mode = opt_prop_def(StringAttr)

    def __init__(self, x: SSAValue | Operation, dtype: Attribute, saturate: bool = False,
                 round_mode: str | None = None):
        super().__init__(x, dtype)
        if saturate:
            self.properties["saturate"] = BoolAttr.from_bool(True)
        if round_mode is not None:
            self.properties["round_mode"] = StringAttr(round_mode)

    def verify_(self) -> None:
        super().verify_()
        if self.round_mode is not None and self.round_mode.data not in ROUND_MODES:
            raise VerifyException(f"round_mode must be one of {', '.join(ROUND_MODES)}, got {self.round_mode.data!r}")
        if self.round_mode is not None and not isinstance(self.dtype, Float8E8M0FNUType):
            raise VerifyException(f"round_mode applies to casts to f8E8M0FNU, not to {self.dtype}")
        if self.saturates() and not isinstance(self.dtype, SATURATING_TYPES):
            raise VerifyException(f"saturate applies to casts to the float8 types, not to {self.dtype}")

    def saturates(self) -> bool:
        return self.saturate is not None and self.saturate.value.data != 0  # i1 true is stored as -1


def storage_bits(element: Attribute) -> int:
    """Bits an element occupies in memory: i1 is a byte holding 0 or 1, as NumPy's bool."""
    if not isinstance(element, FixedBitwidthType):
        raise TypeError(f"{element} has no fixed width")
    return max(8, element.bitwidth)  # i1, i2, i4, f4: a byte each


@irdl_op_definition
class BitcastOp(RetypeOp):
    """`%r = opc.bitcast %x {dtype = i32} : (tensor<3xf32>) -> tensor<3xi32>` (the same bits read as
    another element type of the same width, as NumPy's `x.view(dtype)`; to i1 only from i1)"""

    name = "opc.bitcast"

    def verify_(self) -> None:
        super().verify_()
        t = check_tensor(self.x, "operand")
        src, dst = t.element_type, self.dtype
        if storage_bits(src) != storage_bits(dst):
            raise VerifyException(f"bitcast needs element types of one width: {src} has {storage_bits(src)} bits, "
                                  f"{dst} has {storage_bits(dst)}")
        if is_bool(dst) and not is_bool(src):  # an i1 byte holds 0 or 1; other bytes would break that
            raise VerifyException(f"bitcast to i1 only from i1, got {src}")
        if is_sub_byte(src) != is_sub_byte(dst) or is_sub_byte(src) and src.bitwidth != dst.bitwidth:  # type: ignore[union-attr]
            raise VerifyException(f"bitcast needs element types of one width: {src} and {dst}")


def parse_sized(parser: Parser, expected: str) -> tuple[Sequence[SSAValue], dict[str, Attribute], Attribute]:
    """`%n, %m {attrs} : (index, index) -> tensor<?x?xT>`, the syntax of an op whose operands are its
    result's run-time sizes (full, iota): (sizes, attributes, result type). Written by hand because
    functional-type(operands, ...) is refused for an op without operands."""
    unresolved = parser.parse_optional_undelimited_comma_separated_list(
        parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand) or []
    sizes = [parser.resolve_operand(u, IndexType()) for u in unresolved]
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    ftype = parser.parse_function_type()
    if len(ftype.inputs.data) != len(sizes) or len(ftype.outputs.data) != 1:
        parser.raise_error(expected)
    return sizes, attrs, ftype.outputs.data[0]


def print_sized(printer: Printer, sizes: Sequence[SSAValue], attrs: dict[str, Attribute], result: Attribute) -> None:
    """What parse_sized reads."""
    if sizes:
        printer.print_string(" ")
        printer.print_list(sizes, printer.print_operand)
    if attrs:
        printer.print_string(" ")
        printer.print_attr_dict(attrs)
    printer.print_string(" : (" + ", ".join("index" for _ in sizes) + ") -> ")
    printer.print_attribute(result)


@irdl_op_definition
class FullOp(OpcOp):
    """`%r = opc.full {value = 1.0 : f64} : () -> tensor<2x3xf32>`; a result with `?` dims takes
    their sizes as `index` operands, as tensor.empty does:
    `%r = opc.full %n {value = 0.0 : f64} : (index) -> tensor<?x3xf32>`"""

    name = "opc.full"
    sizes = var_operand_def(IndexType())
    result = result_def(TensorType)
    value = prop_def(FloatAttr)

    @classmethod
    def parse(cls, parser: Parser) -> FullOp:
        sizes, attrs, result = parse_sized(parser, "expected `opc.full {value = V : f64} : () -> tensor<...>`")
        if "value" not in attrs:
            parser.raise_error("expected `opc.full {value = V : f64} : () -> tensor<...>`")
        props = {"value": attrs.pop("value")}
        return cls.create(operands=sizes, result_types=[result], properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        print_sized(printer, self.sizes, {"value": self.value, **self.attributes}, self.result.type)

    def __init__(self, value: float, result_type: Attribute, sizes: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(sizes)], result_types=[result_type], properties={"value": FloatAttr(value, 64)})

    def verify_(self) -> None:
        check_runtime_sizes(self, check_tensor(self.result, "result"), required=True)


@irdl_op_definition
class IotaOp(OpcOp):
    """`%r = opc.iota : () -> tensor<5xf32>`

    0, 1, ..., n - 1 in the result's element type (StableHLO's iota, 1-D); a run-time length is an
    `index` operand: `%r = opc.iota %n : (index) -> tensor<?xi64>`. ONNX Range imports as start +
    iota. No gradient: it has no operand one could reach.
    """

    name = "opc.iota"
    sizes = var_operand_def(IndexType())
    result = result_def(TensorType)

    @classmethod
    def parse(cls, parser: Parser) -> IotaOp:
        sizes, attrs, result = parse_sized(
            parser, "expected `opc.iota %n : (index) -> tensor<?xT>` or `opc.iota : () -> tensor<NxT>`")
        return cls.create(operands=sizes, result_types=[result], attributes=attrs)

    def print(self, printer: Printer) -> None:
        print_sized(printer, self.sizes, dict(self.attributes), self.result.type)

    def __init__(self, result_type: Attribute, sizes: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(sizes)], result_types=[result_type])

    def verify_(self) -> None:
        r = check_tensor(self.result, "result")
        if len(r.get_shape()) != 1:
            raise VerifyException(f"gives a 1-D tensor, got {r}")
        if is_bool(r.element_type):
            raise VerifyException("counts in a number type, not i1")
        check_runtime_sizes(self, r, required=True)


def check_runtime_sizes(op: FullOp | IotaOp | BroadcastToOp | ReshapeOp, result: TensorType,
                        required: bool) -> None:
    """The `index` operands give the result's `?` dims, one each, in order (optional where the
    op can derive them: a broadcast's or a reshape's from its operand)."""
    dynamic = sum(1 for d in result.get_shape() if d == DYNAMIC)
    if (op.sizes or required) and len(op.sizes) != dynamic:
        raise VerifyException(f"takes one size operand per `?` dim of its result ({dynamic}), got {len(op.sizes)}")


@irdl_op_definition
class BroadcastToOp(OpcOp):
    """`%r = opc.broadcast_to %a : (tensor<3xf32>) -> tensor<4x3xf32>`; the result's `?` dims may
    take their sizes as `index` operands: `opc.broadcast_to %a, %n : (tensor<3xf32>, index) -> tensor<?x3xf32>`"""

    name = "opc.broadcast_to"
    x = operand_def(TensorType)
    sizes = var_operand_def(IndexType())
    result = result_def(TensorType)
    assembly_format = "$x (`,` $sizes^)? attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, result_type: Attribute, sizes: Sequence[SSAValue] = ()):
        super().__init__(operands=[x, list(sizes)], result_types=[result_type])

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        src, dst = tuple(t.get_shape()), tuple(r.get_shape())
        ok = len(src) <= len(dst) and all(s in (1, d) or DYNAMIC in (s, d) for s, d in zip(src[::-1], dst[::-1]))
        if not ok:
            raise VerifyException(f"cannot broadcast {shape_text(src)} to {shape_text(dst)}")
        check_runtime_sizes(self, r, required=False)


@irdl_op_definition
class ReshapeOp(OpcOp):
    """`%r = opc.reshape %a : (tensor<2x3xf32>) -> tensor<6xf32>`; the result's `?` dims may take
    their sizes as `index` operands (else the leading ones follow the operand's, one is inferred)"""

    name = "opc.reshape"
    x = operand_def(TensorType)
    sizes = var_operand_def(IndexType())
    result = result_def(TensorType)
    assembly_format = "$x (`,` $sizes^)? attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, result_type: Attribute, sizes: Sequence[SSAValue] = ()):
        super().__init__(operands=[x, list(sizes)], result_types=[result_type])

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        if DYNAMIC not in t.get_shape() and DYNAMIC not in r.get_shape() and t.element_count() != r.element_count():
            raise VerifyException(
                f"reshape must keep the element count: {list(t.get_shape())} has {t.element_count()}, "
                f"{list(r.get_shape())} has {r.element_count()}"
            )
        check_runtime_sizes(self, r, required=False)


@irdl_op_definition
class TransposeOp(OpcOp):
    """`%r = opc.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>`"""

    name = "opc.transpose"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(DenseArrayBase)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, perm: Sequence[int]):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        shape = [t.get_shape()[p] for p in perm]
        super().__init__(
            operands=[x],
            result_types=[tensor(shape, t.element_type)],
            properties={"perm": DenseArrayBase.from_list(i64, list(perm))},
        )

    def perm_list(self) -> tuple[int, ...]:
        return int_values(self.perm)

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        perm = self.perm_list()
        if sorted(perm) != list(range(len(t.get_shape()))):
            raise VerifyException(f"perm {list(perm)} is not a permutation of 0..{len(t.get_shape()) - 1}")
        check_shape(r, [t.get_shape()[p] for p in perm], "result")


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """`%r = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4x3xf32>) -> tensor<3xf32>`"""

    name = "opc.reduce_sum"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """`%r = opc.reduce_max %a {axes = array<i64: 1>, keepdim = true} : (tensor<4x3xf32>) -> tensor<4x1xf32>`"""

    name = "opc.reduce_max"


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """`%r = opc.reduce_min %a {axes = array<i64: 1>} : (tensor<4x3xi32>) -> tensor<4xi32>` (NaN propagates)"""

    name = "opc.reduce_min"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """`%r = opc.reduce_mean %a {axes = array<i64: 0, 1>} : (tensor<4x3xf32>) -> tensor<f32>` (floats only)"""

    name = "opc.reduce_mean"

    def verify_(self) -> None:
        super().verify_()
        check_float(check_tensor(self.x, "operand"), "operand")


@irdl_op_definition
class MatmulOp(OpcOp):
    """`%r = opc.matmul %x, %y {trans_x = false, trans_y = true} : (tensor<4x8xf32>, tensor<5x8xf32>) -> tensor<4x5xf32>`"""

    name = "opc.matmul"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    result = result_def(TensorType)
    trans_x = bool_prop(False)
    trans_y = bool_prop(False)
    assembly_format = "$x `,` $y attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, y: SSAValue | Operation, trans_x: bool = False, trans_y: bool = False):
        tx, ty = SSAValue.get(x).type, SSAValue.get(y).type
        shape = matmul_shape(shape_of(tx), shape_of(ty), trans_x, trans_y)
        super().__init__(
            operands=[x, y],
            result_types=[tensor(shape, element_of(tx))],
            properties={"trans_x": BoolAttr.from_bool(trans_x), "trans_y": BoolAttr.from_bool(trans_y)},
        )

    def verify_(self) -> None:
        tx, ty, r = check_tensor(self.x, "x"), check_tensor(self.y, "y"), check_tensor(self.result, "result")
        check_float(tx, "x")
        check_same_element(tx, ty, "x and y")
        check_same_element(tx, r, "x and result")
        tr_x, tr_y = flag(self.trans_x), flag(self.trans_y)
        check_shape(r, matmul_shape(tx.get_shape(), ty.get_shape(), tr_x, tr_y), "result")


def int_of(a: Attribute | None) -> int:
    """The value of an integer attribute (a property, an `opc.*` attribute, an index constant)."""
    if not isinstance(a, IntegerAttr):
        raise TypeError(f"expected an integer attribute, got {a}")
    return a.value.data


def int_width(t: Attribute) -> int:
    if not isinstance(t, IntegerType):
        raise TypeError(f"expected an integer type, got {t}")
    return t.width.data


def int_values(a: DenseArrayBase) -> tuple[int, ...]:
    """An integer array property's values (get_values' overloads need the element type known)."""
    return cast("DenseArrayBase[IntegerType]", a).get_values()


def float_values(a: DenseArrayBase) -> tuple[float, ...]:
    return cast("DenseArrayBase[AnyFloat]", a).get_values()


def flag(attr: BoolAttr) -> bool:
    # `true` parses as i1 -1 and BoolAttr.from_bool(True) holds 1: test nonzero.
    return attr.value.data != 0


# ---------------------------------------------------------------------------
# Index maps: slice, concat, gather
# ---------------------------------------------------------------------------


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


class AxisAttr:
    """An op's `axis` attribute, normalized against the rank of its operand or result AXIS_OF."""

    AXIS_OF: ClassVar[str] = "x"
    if TYPE_CHECKING:
        name: ClassVar[str]
        axis: IntegerAttr

    def axis_index(self) -> int:
        return normalize_axis(self.axis.value.data, len(shape_of(getattr(self, self.AXIS_OF))))

    def check_float_along_axis(self, what: str) -> TensorType:
        """AXIS_OF is a float tensor and `axis` is in range for it."""
        t = check_tensor(getattr(self, self.AXIS_OF), what)
        check_float(t, what)
        normalize_axis(self.axis.value.data, len(t.get_shape()), f"{self.name} axis")
        return t


def check_gather(op: GatherOp | GatherGradOp, x: SSAValue, indices: SSAValue, gathered: SSAValue, what: str) -> TensorType:
    """gather's result (gather_grad's dout) is np.take(x, indices, axis)'s shape, of x's element type."""
    tx, ti, tg = check_tensor(x, "x"), check_tensor(indices, "indices"), check_tensor(gathered, what)
    check_index_element(ti, "indices")
    if not tx.get_shape():
        raise VerifyException(f"{op.name} needs an x of rank >= 1")
    axis = normalize_axis(op.axis.value.data, len(tx.get_shape()), f"{op.name.removeprefix('opc.')} axis")
    check_same_element(tx, tg, f"x and {what}")
    check_shape(tg, gather_shape(tx.get_shape(), ti.get_shape(), axis), what)
    return tx


class SliceAttrs:
    """start / limit / strides of slice and slice_grad, as tuples."""

    if TYPE_CHECKING:
        start: DenseArrayBase
        limit: DenseArrayBase
        strides: DenseArrayBase

    def slice_params(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return int_values(self.start), int_values(self.limit), int_values(self.strides)


@irdl_op_definition
class SliceOp(OpcOp, SliceAttrs):
    """`%r = opc.slice %a {start = array<i64: 1, 0>, limit = array<i64: 4, 3>, strides = array<i64: 2, 1>} : (tensor<4x3xf32>) -> tensor<2x3xf32>`

    StableHLO's slice: result[i] = x[start + i * strides], 0 <= start <= limit <= dim.
    """

    name = "opc.slice"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    start = prop_def(DenseArrayBase)
    limit = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, start: Sequence[int], limit: Sequence[int],
                 strides: Sequence[int] | None = None):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        strides = list(strides) if strides is not None else [1] * len(start)
        shape = slice_shape(t.get_shape(), start, limit, strides)
        super().__init__(
            operands=[x],
            result_types=[tensor(shape, t.element_type)],
            properties={"start": i64_array(start), "limit": i64_array(limit), "strides": i64_array(strides)},
        )

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        check_shape(r, slice_shape(t.get_shape(), *self.slice_params()), "result")


@irdl_op_definition
class ConcatOp(OpcOp, AxisAttr):
    """`%r = opc.concat %a, %b {axis = 1} : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<4x5xf32>`"""

    name = "opc.concat"
    AXIS_OF: ClassVar[str] = "result"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = int_prop(0)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: Sequence[SSAValue | Operation], axis: int = 0):
        types = [SSAValue.get(v).type for v in inputs]
        first = types[0]
        assert isinstance(first, TensorType)
        shape = list(first.get_shape())
        a = normalize_axis(axis, len(shape))
        along = [shape_of(t)[a] for t in types]
        shape[a] = DYNAMIC if DYNAMIC in along else sum(along)  # a run-time size joins: the sum is one too
        super().__init__(operands=[list(inputs)], result_types=[tensor(shape, first.element_type)],
                         properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("concat needs at least one operand")
        r = check_tensor(self.result, "result")
        first = check_tensor(self.inputs[0], "operand 0")
        rank = len(first.get_shape())
        if rank == 0:
            raise VerifyException("concat operands must have rank >= 1")
        axis = normalize_axis(self.axis.value.data, rank, "concat axis")
        total = 0
        for i, v in enumerate(self.inputs):
            t = check_tensor(v, f"operand {i}")
            check_same_element(first, t, f"operands 0 and {i}")
            shape = t.get_shape()
            if len(shape) != rank or not all(dims_agree(a, b) for d, (a, b) in enumerate(zip(shape, first.get_shape()))
                                             if d != axis):
                raise VerifyException(
                    f"concat operand {i} has shape {list(shape)}: all operands must match {list(first.get_shape())} "
                    f"except along axis {axis}"
                )
            total = DYNAMIC if DYNAMIC in (total, shape[axis]) else total + shape[axis]
        check_same_element(first, r, "operands and result")
        want = list(first.get_shape())
        want[axis] = total
        check_shape(r, want, "result")


@irdl_op_definition
class GatherOp(OpcOp, AxisAttr):
    """`%r = opc.gather %x, %idx {axis = 0} : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>`

    np.take(x, idx, axis): negative indices count from the end; an index out of
    range is a run-time IndexError naming the argument.
    """

    name = "opc.gather"
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = int_prop(0)
    assembly_format = "$x `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, indices: SSAValue | Operation, axis: int = 0):
        tx, ti = SSAValue.get(x).type, SSAValue.get(indices).type
        assert isinstance(tx, TensorType) and isinstance(ti, TensorType)
        a = normalize_axis(axis, len(tx.get_shape()))
        shape = gather_shape(tx.get_shape(), ti.get_shape(), a)
        super().__init__(operands=[x, indices], result_types=[tensor(shape, tx.element_type)],
                         properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        check_gather(self, self.x, self.indices, self.result, "result")


@irdl_op_definition
class CumsumOp(OpcOp, AxisAttr):
    """`%r = opc.cumsum %x {axis = 0, exclusive = false, reverse = false} : (tensor<5xi64>) -> tensor<5xi64>`

    ONNX CumSum (np.cumsum along `axis`, negative counting from the end): `exclusive` leaves each
    element out of its own sum (the first is 0), `reverse` sums from the end. Integers sum in their own
    type and wrap like NumPy; f16/bf16 accumulate in f32 and round on store. One pass along the axis.
    """

    name = "opc.cumsum"
    KERNELS: ClassVar[tuple[str, ...]] = ("cpu", "cuda")  # a loop along the axis per line (nn_lowering.py)
    T: ClassVar = VarConstraint("T", base(TensorType))
    x = operand_def(T)
    result = result_def(T)
    axis = int_prop(0)
    exclusive = bool_prop(False)
    reverse = bool_prop(False)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, axis: int = 0, exclusive: bool = False, reverse: bool = False):
        super().__init__(operands=[x], result_types=[SSAValue.get(x).type],
                         properties={"axis": IntegerAttr(axis, 64), "exclusive": BoolAttr.from_bool(exclusive),
                                     "reverse": BoolAttr.from_bool(reverse)})

    def verify_(self) -> None:
        t = check_tensor(self.x, "operand")
        check_not_bool(t, "operand")
        if not t.get_shape():
            raise VerifyException("cumsum needs an operand of rank >= 1")
        normalize_axis(self.axis.value.data, len(t.get_shape()), "cumsum axis")


@irdl_op_definition
class NonzeroOp(OpcOp):
    """`%r = opc.nonzero %x : (tensor<?x4xf32>) -> tensor<2x?xi64>`

    np.nonzero(x) stacked, as ONNX NonZero: one row per dim of x, one column per element that is not
    zero, in row-major order. The count is known only once the op has run: the result's `?` dim is a
    size of its own (a data-dependent size, opc/dialects/sizes.py), which later ops use like any other.
    """

    name = "opc.nonzero"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation):
        rank = len(shaped_type(SSAValue.get(x)).get_shape())
        super().__init__(operands=[x], result_types=[TensorType(i64, [rank, DYNAMIC])])

    def verify_(self) -> None:
        t = check_tensor(self.x, "operand")
        rank = len(t.get_shape())
        if rank == 0:
            raise VerifyException("needs an operand of rank >= 1 (reshape a scalar to [1])")
        r = check_tensor(self.result, "result")
        if r.element_type != i64 or list(r.get_shape()) != [rank, DYNAMIC]:
            raise VerifyException(f"result must be tensor<{rank}x?xi64> (one row per operand dim, its count known "
                                  f"only at run time), got {r}")


@irdl_op_definition
class TopkOp(OpcOp, AxisAttr):
    """`%v, %i = opc.topk %x, %k {axis = -1, largest = true} : (tensor<?x8xf32>, tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)`

    ONNX TopK with k a run-time value: the k largest (smallest) elements of x along `axis`, sorted,
    ties to the lower index, and their indices. k (a one-element i64 tensor) is read when the op
    runs: the results' `axis` dim is a data size (opc/dialects/sizes.py), at most x's; a k out of
    [0, size] is a run-time ValueError. NaN is not ordered here.
    """

    name = "opc.topk"
    x = operand_def(TensorType)
    k = operand_def(TensorType)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    axis = int_prop(-1)
    largest = bool_prop(True)
    assembly_format = "$x `,` $k attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, k: SSAValue | Operation, axis: int = -1, largest: bool = True):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        shape = list(t.get_shape())
        shape[normalize_axis(axis, len(shape))] = DYNAMIC
        super().__init__(operands=[x, k], result_types=[TensorType(t.element_type, shape), TensorType(i64, shape)],
                         properties={"axis": IntegerAttr(axis, 64), "largest": BoolAttr.from_bool(largest)})

    def verify_(self) -> None:
        t = check_tensor(self.x, "x")
        check_not_bool(t, "x")
        shape = list(t.get_shape())
        if not shape:
            raise VerifyException("needs an x of rank >= 1")
        axis = normalize_axis(self.axis.value.data, len(shape), "topk axis")
        tk = check_tensor(self.k, "k")
        if tk.element_type != i64 or math.prod(d for d in tk.get_shape()) != 1 or DYNAMIC in tk.get_shape():
            raise VerifyException(f"k must be one i64 element (tensor<i64> or tensor<1xi64>), got {tk}")
        shape[axis] = DYNAMIC
        for what, r, el in (("values", self.values, t.element_type), ("indices", self.indices, i64)):
            want = TensorType(el, shape)
            if r.type != want:
                raise VerifyException(f"{what} must be {want} (the axis dim is k, known at run time), got {r.type}")


@irdl_op_definition
class UniqueOp(OpcOp, AxisAttr):
    """`%y, %first, %inverse, %counts = opc.unique %x {sorted = true} : (tensor<?xf32>) -> (tensor<?xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)`

    ONNX Unique (np.unique with return_index, return_inverse, return_counts) of the slices of x along
    `axis` (default 0; of a 1-D x its elements), each slice compared as a whole: the distinct slices y
    (in lexicographic order of their elements, row-major, when `sorted`, else in the order they first
    occur), each one's first index along the axis, each slice's place in y, each one's count. How many
    there are is known once the op has run: y's axis dim and first's and counts' dim is a data size
    (opc/dialects/sizes.py), at most x's axis size. NaN equals nothing (a slice holding one is
    distinct from every other) and sorts after every number, two NaNs in the order of their slices.
    """

    name = "opc.unique"
    x = operand_def(TensorType)
    y = result_def(TensorType)
    first = result_def(TensorType)
    inverse = result_def(TensorType)
    counts = result_def(TensorType)
    sorted = bool_prop(True)
    axis = int_prop(0)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, sorted: bool = True, axis: int = 0):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        super().__init__(operands=[x], result_types=self.wanted(t, normalize_axis(axis, len(t.get_shape()))),
                         properties={"sorted": BoolAttr.from_bool(sorted), "axis": IntegerAttr(axis, 64)})

    @staticmethod
    def wanted(t: TensorType, axis: int) -> list[TensorType]:
        """y (x with its axis dim found at run time), first, inverse (one per slice), counts."""
        shape, found = list(t.get_shape()), [DYNAMIC]
        y = [*shape[:axis], DYNAMIC, *shape[axis + 1:]]
        return [TensorType(t.element_type, y), TensorType(i64, found), TensorType(i64, [shape[axis]]),
                TensorType(i64, found)]

    def verify_(self) -> None:
        t = check_tensor(self.x, "x")
        if not t.get_shape():
            raise VerifyException(f"needs an x of rank >= 1 (reshape a scalar to 1 element), got {t}")
        axis = normalize_axis(self.axis.value.data, len(t.get_shape()), "unique axis")
        for what, r, want in zip(("y", "first", "inverse", "counts"), self.results, self.wanted(t, axis)):
            if r.type != want:
                raise VerifyException(f"{what} must be {want}, got {r.type}")


@irdl_op_definition
class NonMaxSuppressionOp(OpcOp):
    """`%sel = opc.non_max_suppression %boxes, %scores, %max_out, %iou, %score {center_point_box = 0} : (tensor<1x8x4xf32>, tensor<1x2x8xf32>, tensor<1xi64>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x3xi64>`

    ONNX NonMaxSuppression: per batch and class, the boxes whose score is above `score` in order of score
    (ties to the lower index), each kept unless its IoU with one kept before exceeds `iou`, at most
    `max_out` per class; the rows (batch, class, box) in that order. boxes [B, N, 4] are corners
    (y1, x1, y2, x2) or, with center_point_box = 1, (x, y, width, height); scores [B, C, N]; the three
    thresholds one element each, read when it runs. How many rows is a data size (at most B*C*N).
    """

    name = "opc.non_max_suppression"
    boxes = operand_def(TensorType)
    scores = operand_def(TensorType)
    max_out = operand_def(TensorType)
    iou = operand_def(TensorType)
    score = operand_def(TensorType)
    result = result_def(TensorType)
    center_point_box = int_prop(0)
    assembly_format = "$boxes `,` $scores `,` $max_out `,` $iou `,` $score attr-dict `:` functional-type(operands, results)"

    def __init__(self, boxes: SSAValue | Operation, scores: SSAValue | Operation, max_out: SSAValue | Operation,
                 iou: SSAValue | Operation, score: SSAValue | Operation, center_point_box: int = 0):
        super().__init__(operands=[boxes, scores, max_out, iou, score], result_types=[TensorType(i64, [DYNAMIC, 3])],
                         properties={"center_point_box": IntegerAttr(center_point_box, 64)})

    def verify_(self) -> None:
        tb, ts = check_tensor(self.boxes, "boxes"), check_tensor(self.scores, "scores")
        check_float(tb, "boxes")
        check_same_element(tb, ts, "boxes and scores")
        b, s = tb.get_shape(), ts.get_shape()
        if len(b) != 3 or b[2] != 4 or len(s) != 3:
            raise VerifyException(f"boxes must be [B, N, 4] and scores [B, C, N], got {tb} and {ts}")
        for what, v, el in (("max_out", self.max_out, i64), ("iou", self.iou, tb.element_type),
                            ("score", self.score, tb.element_type)):
            t = check_tensor(v, what)
            if t.element_type != el or DYNAMIC in t.get_shape() or math.prod(t.get_shape()) != 1:
                raise VerifyException(f"{what} must be one {el} element, got {t}")
        if self.center_point_box.value.data not in (0, 1):
            raise VerifyException(f"center_point_box must be 0 or 1, got {self.center_point_box.value.data}")
        if self.result.type != TensorType(i64, [DYNAMIC, 3]):
            raise VerifyException(f"result must be tensor<?x3xi64> (its rows known at run time), got {self.result.type}")


# ---------------------------------------------------------------------------
# Fused op
# ---------------------------------------------------------------------------


def check_gemm_operands(op: FusedGemmEpilogueOp | FusedGemmEpilogueGradOp, x: SSAValue, y: SSAValue) -> tuple[TensorType, tuple[int, int]]:
    tx, ty = check_tensor(x, "x"), check_tensor(y, "y")
    check_float(tx, "x")
    check_same_element(tx, ty, "x and y")
    if len(tx.get_shape()) != 2 or len(ty.get_shape()) != 2:
        raise VerifyException(f"{op.name} needs rank-2 x and y, got {tx} and {ty}")
    m, n = matmul_shape(tx.get_shape(), ty.get_shape(), flag(op.trans_x), flag(op.trans_y))
    return tx, (m, n)


@irdl_op_definition
class FusedGemmEpilogueOp(OpcOp):
    """`%out, %reserve = opc.fused_gemm_epilogue %x, %y, %bias {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)`

    out = act(op_x(x) @ op_y(y) + bias); reserve_space (present iff activation
    is relu or gelu) is the pre-activation, saved for the backward.
    """

    name = "opc.fused_gemm_epilogue"
    KIND: ClassVar[str] = "fused"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    bias = operand_def(TensorType)
    out = result_def(TensorType)
    reserve_space = opt_result_def(TensorType)
    trans_x = bool_prop(False)
    trans_y = bool_prop(False)
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    assembly_format = "$x `,` $y `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(
        self,
        x: SSAValue | Operation,
        y: SSAValue | Operation,
        bias: SSAValue | Operation,
        trans_x: bool = False,
        trans_y: bool = False,
        activation: str = "none",
    ):
        tx, ty = SSAValue.get(x).type, SSAValue.get(y).type
        out = tensor(matmul_shape(shape_of(tx), shape_of(ty), trans_x, trans_y), element_of(tx))
        super().__init__(
            operands=[x, y, bias],
            result_types=[out, [out] if activation != "none" else []],
            properties={
                "trans_x": BoolAttr.from_bool(trans_x),
                "trans_y": BoolAttr.from_bool(trans_y),
                "activation": StringAttr(activation),
            },
        )

    def verify_(self) -> None:
        tx, (m, n) = check_gemm_operands(self, self.x, self.y)
        tb = check_tensor(self.bias, "bias")
        check_same_element(tx, tb, "x and bias")
        check_shape(tb, [n], "bias")
        act = self.activation.data
        if act not in ACTIVATIONS:
            raise VerifyException(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{act}'")
        for what, v in (("out", self.out), ("reserve_space", self.reserve_space)):
            if v is not None:
                t = check_tensor(v, what)
                check_same_element(tx, t, f"x and {what}")
                check_shape(t, [m, n], what)
        if act == "none" and self.reserve_space is not None:
            raise VerifyException("activation 'none' has exactly one result: no reserve_space")
        if act != "none" and self.reserve_space is None:
            raise VerifyException(f"activation '{act}' has two results: out and reserve_space")


class AxisOp(OpcOp, AxisAttr, abc.ABC):
    """A float operand normalized along `axis`; the result has its type."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    x = operand_def(T)
    result = result_def(T)
    axis = int_prop(-1)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, axis: int = -1):
        super().__init__(operands=[x], result_types=[SSAValue.get(x).type], properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        self.check_float_along_axis("operand")


@irdl_op_definition
class SoftmaxOp(AxisOp):
    """`%r = opc.softmax %a {axis = -1} : (tensor<4x3xf32>) -> tensor<4x3xf32>` (max-subtracted)"""

    name = "opc.softmax"
    KIND: ClassVar[str] = "fused"


@irdl_op_definition
class LogSoftmaxOp(AxisOp):
    """`%r = opc.log_softmax %a {axis = 1} : (tensor<4x3xf32>) -> tensor<4x3xf32>` (x - max - log(sum(exp(x - max))))"""

    name = "opc.log_softmax"
    KIND: ClassVar[str] = "fused"


class BeginNormAxis:
    """layer_norm's and layer_norm_grad's begin_norm_axis, normalized against x's rank."""

    if TYPE_CHECKING:
        x: SSAValue
        begin_norm_axis: IntegerAttr

    def begin(self) -> int:
        return normalize_axis(self.begin_norm_axis.value.data, len(shape_of(self.x)))


def check_norm_shapes(x: TensorType, begin: int, scale: SSAValue, what: str = "scale") -> tuple[int, ...]:
    """The trailing (normalized) shape of x, which `scale` must have."""
    trailing = tuple(x.get_shape()[begin:])
    t = check_tensor(scale, what)
    check_same_element(x, t, f"x and {what}")
    check_shape(t, trailing, what)
    return trailing


def check_stats(x: TensorType, begin: int, values: Sequence[tuple[str, SSAValue]]) -> None:
    """mean and rstd: x's leading shape, in the compute type."""
    want = stats_element(x.element_type)
    for what, v in values:
        t = check_tensor(v, what)
        if t.element_type != want:
            raise VerifyException(f"{what} must have element type {want} (the compute type of {x.element_type}), "
                                  f"got {t.element_type}")
        check_shape(t, x.get_shape()[:begin], what)


@irdl_op_definition
class LayerNormOp(OpcOp, BeginNormAxis):
    """`%y, %mean, %rstd = opc.layer_norm %x, %scale, %bias {begin_norm_axis = 1, epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)`

    Normalizes over the dims from begin_norm_axis on: y = (x - mean) * rstd *
    scale + bias, rstd = 1 / sqrt(var + epsilon); mean and rstd (x's leading
    shape, f32 for f16/bf16/f32 and f64 for f64) are saved for the backward.
    """

    name = "opc.layer_norm"
    KIND: ClassVar[str] = "fused"
    x = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    y = result_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    begin_norm_axis = int_prop(-1)
    epsilon = prop_def(FloatAttr, default_value=FloatAttr(1e-5, 64))
    assembly_format = "$x `,` $scale `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, bias: SSAValue | Operation,
                 begin_norm_axis: int = -1, epsilon: float = 1e-5):
        t = SSAValue.get(x).type
        assert isinstance(t, TensorType)
        begin = normalize_axis(begin_norm_axis, len(t.get_shape()))
        stats = tensor(t.get_shape()[:begin], stats_element(t.element_type))
        super().__init__(operands=[x, scale, bias], result_types=[t, stats, stats],
                         properties={"begin_norm_axis": IntegerAttr(begin_norm_axis, 64),
                                     "epsilon": FloatAttr(epsilon, 64)})

    def verify_(self) -> None:
        tx = check_tensor(self.x, "x")
        check_float(tx, "x")
        begin = normalize_axis(self.begin_norm_axis.value.data, len(tx.get_shape()), "begin_norm_axis")
        check_norm_shapes(tx, begin, self.scale, "scale")
        check_norm_shapes(tx, begin, self.bias, "bias")
        if self.y.type != tx:
            raise VerifyException(f"y must have the type of x, {tx}")
        check_stats(tx, begin, [("mean", self.mean), ("rstd", self.rstd)])
        if not self.epsilon.value.data >= 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon.value.data}")


def label_shape(logits: Sequence[int], axis: int) -> tuple[int, ...]:
    return tuple(1 if d == axis else n for d, n in enumerate(logits))


def check_per_label(op: SoftmaxCrossEntropyOp | SoftmaxCrossEntropyGradOp, probs: SSAValue, what: str, per_label: Sequence[tuple[str, SSAValue]]) -> TensorType:
    """softmax_cross_entropy and its grad: `probs` (logits or softmax) is float, its axis in range;
    the label (i32/i64) and each per-label tensor have its shape with the axis dim 1."""
    t = check_tensor(probs, what)
    check_float(t, what)
    axis = normalize_axis(op.axis.value.data, len(t.get_shape()), f"{op.name.removeprefix('opc.')} axis")
    want = label_shape(t.get_shape(), axis)
    lab = check_tensor(op.label, "label")
    check_label_element(lab, "label")
    check_shape(lab, want, "label")
    for name, v in per_label:
        u = check_tensor(v, name)
        check_same_element(t, u, f"{what} and {name}")
        check_shape(u, want, name)
    return t


@irdl_op_definition
class SoftmaxCrossEntropyOp(OpcOp, AxisAttr):
    """`%loss, %sm = opc.softmax_cross_entropy %logits, %label {axis = -1} : (tensor<4x10xf32>, tensor<4x1xi64>) -> (tensor<4x1xf32>, tensor<4x10xf32>)`

    Paddle's softmax_with_cross_entropy with hard labels: label has the
    logits' shape with the axis dim 1 and values in [0, C) (else a run-time
    IndexError); loss = -log_softmax(logits)[label]; softmax is saved for the backward.
    """

    name = "opc.softmax_cross_entropy"
    KIND: ClassVar[str] = "fused"
    AXIS_OF: ClassVar[str] = "logits"
    logits = operand_def(TensorType)
    label = operand_def(TensorType)
    loss = result_def(TensorType)
    softmax = result_def(TensorType)
    axis = int_prop(-1)
    assembly_format = "$logits `,` $label attr-dict `:` functional-type(operands, results)"

    def __init__(self, logits: SSAValue | Operation, label: SSAValue | Operation, axis: int = -1):
        t = SSAValue.get(logits).type
        assert isinstance(t, TensorType)
        a = normalize_axis(axis, len(t.get_shape()))
        loss = tensor(label_shape(t.get_shape(), a), t.element_type)
        super().__init__(operands=[logits, label], result_types=[loss, t], properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        tl = check_per_label(self, self.logits, "logits", [("loss", self.loss)])
        if self.softmax.type != tl:
            raise VerifyException(f"softmax must have the type of logits, {tl}")


# ---------------------------------------------------------------------------
# Grad ops
# ---------------------------------------------------------------------------


@irdl_op_definition
class CastGradOp(OpcOp):
    """`%dx = opc.cast_grad %x, %dout : (tensor<3xf64>, tensor<3xui8>) -> tensor<3xf64>`

    dx = cast(dout, dtype(x)); x is needed only for its dtype.
    """

    name = "opc.cast_grad"
    KIND: ClassVar[str] = "grad"
    KERNELS: ClassVar[tuple[str, ...]] = ()  # realised by invoking cast (Paddle's cast_grad kernels never ran)
    x = operand_def(TensorType)
    dout = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$x `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation):
        super().__init__(operands=[x, dout], result_types=[SSAValue.get(x).type])

    def verify_(self) -> None:
        tx, td, r = check_tensor(self.x, "x"), check_tensor(self.dout, "dout"), check_tensor(self.result, "result")
        check_shape(td, tx.get_shape(), "dout")
        if r != tx:
            raise VerifyException(f"result must have the type of x, {tx}")


@irdl_op_definition
class FusedGemmEpilogueGradOp(OpcOp):
    """`%dx, %dy, %dbias = opc.fused_gemm_epilogue_grad %x, %y, %reserve, %dout {activation_grad = "relu_grad"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>)`

    dZ = dout * act'(reserve_space); dx, dy through the trans flags; dbias = sum of dZ over rows.
    """

    name = "opc.fused_gemm_epilogue_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    # [reserve_space, dout] or [dout]: one variadic tail keeps the custom form
    # unambiguous, which an optional operand before dout would not be.
    tail = var_operand_def(TensorType)
    dx = result_def(TensorType)
    dy = result_def(TensorType)
    dbias = result_def(TensorType)
    trans_x = bool_prop(False)
    trans_y = bool_prop(False)
    activation_grad = prop_def(StringAttr, default_value=StringAttr("none"))
    assembly_format = "$x `,` $y `,` $tail attr-dict `:` functional-type(operands, results)"

    @property
    def reserve_space(self) -> SSAValue | None:
        return self.tail[0] if len(self.tail) == 2 else None

    @property
    def dout(self) -> SSAValue:
        return self.tail[-1]

    def __init__(
        self,
        x: SSAValue | Operation,
        y: SSAValue | Operation,
        reserve_space: SSAValue | Operation | None,
        dout: SSAValue | Operation,
        trans_x: bool = False,
        trans_y: bool = False,
        activation_grad: str = "none",
    ):
        tx, ty = SSAValue.get(x).type, SSAValue.get(y).type
        n = shape_of(ty)[0 if trans_y else 1]
        super().__init__(
            operands=[x, y, [reserve_space, dout] if reserve_space is not None else [dout]],
            result_types=[tx, ty, tensor([n], element_of(tx))],
            properties={
                "trans_x": BoolAttr.from_bool(trans_x),
                "trans_y": BoolAttr.from_bool(trans_y),
                "activation_grad": StringAttr(activation_grad),
            },
        )

    def verify_(self) -> None:
        tx, (m, n) = check_gemm_operands(self, self.x, self.y)
        if len(self.tail) not in (1, 2):
            raise VerifyException("expected operands x, y, [reserve_space,] dout")
        act = self.activation_grad.data
        if act not in ACTIVATION_GRADS:
            raise VerifyException(f"activation_grad must be one of {', '.join(ACTIVATION_GRADS)}, got '{act}'")
        if act != "none" and self.reserve_space is None:
            raise VerifyException(
                f"activation_grad '{act}' needs the reserve_space operand (the pre-activation), which is missing"
            )
        if act == "none" and self.reserve_space is not None:
            raise VerifyException("activation_grad 'none' takes no reserve_space operand")
        for what, v in (("reserve_space", self.reserve_space), ("dout", self.dout)):
            if v is not None:
                t = check_tensor(v, what)
                check_same_element(tx, t, f"x and {what}")
                check_shape(t, [m, n], what)
        for what, v, want in (("dx", self.dx, self.x.type), ("dy", self.dy, self.y.type)):
            if v.type != want:
                raise VerifyException(f"{what} must have type {want}, got {v.type}")
        db = check_tensor(self.dbias, "dbias")
        check_same_element(tx, db, "x and dbias")
        check_shape(db, [n], "dbias")


@irdl_op_definition
class ReluGradOp(ActivationGradOp):
    """`%dx = opc.relu_grad %x, %dout : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>` (dout where x > 0)"""

    name = "opc.relu_grad"
    KIND: ClassVar[str] = "grad"


@irdl_op_definition
class GeluGradOp(ActivationGradOp):
    """`%dx = opc.gelu_grad %x, %dout {approximate = true} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.gelu_grad"
    KIND: ClassVar[str] = "grad"
    approximate = bool_prop(True)

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation, approximate: bool = True):
        super().__init__(x, dout, {"approximate": BoolAttr.from_bool(approximate)})


class AxisGradOp(OpcOp, AxisAttr, abc.ABC):
    """dx from the forward's output and its cotangent, along `axis`; all three share one type."""

    AXIS_OF: ClassVar[str] = "out"

    T: ClassVar = VarConstraint("T", base(TensorType))
    out = operand_def(T)
    dout = operand_def(T)
    result = result_def(T)
    axis = int_prop(-1)
    assembly_format = "$out `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, out: SSAValue | Operation, dout: SSAValue | Operation, axis: int = -1):
        super().__init__(operands=[out, dout], result_types=[SSAValue.get(out).type],
                         properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        self.check_float_along_axis("out")


@irdl_op_definition
class SoftmaxGradOp(AxisGradOp):
    """`%dx = opc.softmax_grad %out, %dout {axis = -1} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>`

    dx = out * (dout - sum(dout * out, axis)).
    """

    name = "opc.softmax_grad"
    KIND: ClassVar[str] = "grad"


@irdl_op_definition
class LogSoftmaxGradOp(AxisGradOp):
    """`%dx = opc.log_softmax_grad %out, %dout {axis = -1} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>`

    dx = dout - exp(out) * sum(dout, axis).
    """

    name = "opc.log_softmax_grad"
    KIND: ClassVar[str] = "grad"


@irdl_op_definition
class LayerNormGradOp(OpcOp, BeginNormAxis):
    """`%dx, %dscale, %dbias = opc.layer_norm_grad %x, %scale, %mean, %rstd, %dy {begin_norm_axis = 1} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)`

    Fed by the mean and rstd layer_norm saved: xhat = (x - mean) * rstd, g = dy * scale,
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the normalized dims,
    dscale = sum of dy * xhat and dbias = sum of dy over the leading dims.
    """

    name = "opc.layer_norm_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    scale = operand_def(TensorType)
    mean = operand_def(TensorType)
    rstd = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    dscale = result_def(TensorType)
    dbias = result_def(TensorType)
    begin_norm_axis = int_prop(-1)
    assembly_format = "$x `,` $scale `,` $mean `,` $rstd `,` $dy attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, mean: SSAValue | Operation,
                 rstd: SSAValue | Operation, dy: SSAValue | Operation, begin_norm_axis: int = -1):
        tx, ts = SSAValue.get(x).type, SSAValue.get(scale).type
        super().__init__(operands=[x, scale, mean, rstd, dy], result_types=[tx, ts, ts],
                         properties={"begin_norm_axis": IntegerAttr(begin_norm_axis, 64)})

    def verify_(self) -> None:
        tx = check_tensor(self.x, "x")
        check_float(tx, "x")
        begin = normalize_axis(self.begin_norm_axis.value.data, len(tx.get_shape()), "begin_norm_axis")
        trailing = check_norm_shapes(tx, begin, self.scale, "scale")
        check_stats(tx, begin, [("mean", self.mean), ("rstd", self.rstd)])
        if self.dy.type != tx:
            raise VerifyException(f"dy must have the type of x, {tx}")
        if self.dx.type != tx:
            raise VerifyException(f"dx must have the type of x, {tx}")
        for what, v in (("dscale", self.dscale), ("dbias", self.dbias)):
            t = check_tensor(v, what)
            check_same_element(tx, t, f"x and {what}")
            check_shape(t, trailing, what)


@irdl_op_definition
class SoftmaxCrossEntropyGradOp(OpcOp, AxisAttr):
    """`%dlogits = opc.softmax_cross_entropy_grad %label, %sm, %dloss {axis = -1} : (tensor<4x1xi64>, tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>`

    Fed by the saved softmax: dlogits = (softmax - onehot(label)) * dloss.
    """

    name = "opc.softmax_cross_entropy_grad"
    KIND: ClassVar[str] = "grad"
    AXIS_OF: ClassVar[str] = "softmax"
    label = operand_def(TensorType)
    softmax = operand_def(TensorType)
    dloss = operand_def(TensorType)
    result = result_def(TensorType)
    axis = int_prop(-1)
    assembly_format = "$label `,` $softmax `,` $dloss attr-dict `:` functional-type(operands, results)"

    def __init__(self, label: SSAValue | Operation, softmax: SSAValue | Operation, dloss: SSAValue | Operation,
                 axis: int = -1):
        super().__init__(operands=[label, softmax, dloss], result_types=[SSAValue.get(softmax).type],
                         properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        ts = check_per_label(self, self.softmax, "softmax", [("dloss", self.dloss)])
        if self.result.type != ts:
            raise VerifyException(f"dlogits must have the type of softmax, {ts}")


@irdl_op_definition
class SliceGradOp(OpcOp, SliceAttrs):
    """`%dx = opc.slice_grad %x, %dout {start = array<i64: 1>, limit = array<i64: 4>, strides = array<i64: 2>} : (tensor<5xf32>, tensor<2xf32>) -> tensor<5xf32>`

    dout placed into zeros of x's shape; x lends only its type (never read).
    """

    name = "opc.slice_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    dout = operand_def(TensorType)
    result = result_def(TensorType)
    start = prop_def(DenseArrayBase)
    limit = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)
    assembly_format = "$x `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation, start: Sequence[int],
                 limit: Sequence[int], strides: Sequence[int]):
        super().__init__(operands=[x, dout], result_types=[SSAValue.get(x).type],
                         properties={"start": i64_array(start), "limit": i64_array(limit), "strides": i64_array(strides)})

    def verify_(self) -> None:
        tx, td = check_tensor(self.x, "x"), check_tensor(self.dout, "dout")
        check_same_element(tx, td, "x and dout")
        check_shape(td, slice_shape(tx.get_shape(), *self.slice_params()), "dout")
        if self.result.type != tx:
            raise VerifyException(f"result must have the type of x, {tx}")


@irdl_op_definition
class GatherGradOp(OpcOp, AxisAttr):
    """`%dx = opc.gather_grad %x, %idx, %dout {axis = 0} : (tensor<10x4xf32>, tensor<3xi64>, tensor<3x4xf32>) -> tensor<10x4xf32>`

    dout scatter-added into zeros of x's shape (repeated indices summed); x lends only its type.
    """

    name = "opc.gather_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    dout = operand_def(TensorType)
    result = result_def(TensorType)
    axis = int_prop(0)
    assembly_format = "$x `,` $indices `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, indices: SSAValue | Operation, dout: SSAValue | Operation,
                 axis: int = 0):
        super().__init__(operands=[x, indices, dout], result_types=[SSAValue.get(x).type],
                         properties={"axis": IntegerAttr(axis, 64)})

    def verify_(self) -> None:
        tx = check_gather(self, self.x, self.indices, self.dout, "dout")
        if self.result.type != tx:
            raise VerifyException(f"result must have the type of x, {tx}")



# ---------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvGeometry:
    """One convolution: x [n, c, *inp] * w [o, c / group, *kernel] -> y [n, o, *out].

    conv_grad_input, conv_grad_filter and conv_transpose are described by the
    geometry of the forward conv they belong to (conv_transpose's y plays the
    conv's x, its x the conv's y), so one description serves all four ops."""

    n: int
    c: int
    o: int
    group: int
    inp: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # begins, then ends

    @property
    def spatial(self) -> int:
        return len(self.inp)

    @property
    def out(self) -> tuple[int, ...]:
        r = self.spatial
        return tuple((i + self.pads[d] + self.pads[r + d] - self.dilations[d] * (k - 1) - 1) // self.strides[d] + 1
                     for d, (i, k) in enumerate(zip(self.inp, self.kernel)))

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.n, self.c, *self.inp)

    @property
    def w_shape(self) -> tuple[int, ...]:
        return (self.o, self.c // self.group, *self.kernel)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return (self.n, self.o, *self.out)


CONV_MAX_RANK = 5  # N, C and 1 to 3 spatial dims (SPEC; the runtime's conv and pool loops take 3)


def conv_spatial(what: str, shape: Sequence[int]) -> int:
    """The number of spatial dims of an NC+spatial tensor (1 to 3)."""
    if not 3 <= len(shape) <= CONV_MAX_RANK:
        raise VerifyException(f"{what} must have rank 3 to {CONV_MAX_RANK} (N, C and 1 to {CONV_MAX_RANK - 2} "
                              f"spatial dims), got shape {list(shape)}")
    return len(shape) - 2


def conv_attr(values: Sequence[int] | None, count: int, default: int, name: str, least: int) -> tuple[int, ...]:
    """strides / dilations / pads / output_padding: `count` entries (default when absent), each >= least."""
    if values is None:
        return (default,) * count
    if len(values) != count:
        raise VerifyException(f"{name} has {len(values)} entries, expected {count}"
                              f"{' (begins, then ends)' if name == 'pads' else ''} for {count // (2 if name == 'pads' else 1)} spatial dims")
    for i, v in enumerate(values):
        if v < least:
            raise VerifyException(f"{name} must be >= {least}, got {v} at index {i}")
    return tuple(values)


def conv_geometry(x: Sequence[int], kernel: Sequence[int], o: int, group: int, strides: Sequence[int] | None,
                  dilations: Sequence[int] | None, pads: Sequence[int] | None, x_name: str = "x") -> ConvGeometry:
    """The checked geometry of a conv of input shape x with `o` output channels and `kernel`."""
    r = conv_spatial(x_name, x)
    if group < 1:
        raise VerifyException(f"group must be >= 1, got {group}")
    if x[1] % group:
        raise VerifyException(f"group {group} does not divide the {x[1]} channels of {x_name}")
    if o % group:
        raise VerifyException(f"group {group} does not divide the {o} output channels")
    g = ConvGeometry(x[0], x[1], o, group, tuple(x[2:]), tuple(kernel), conv_attr(strides, r, 1, "strides", 1),
                     conv_attr(dilations, r, 1, "dilations", 1), conv_attr(pads, 2 * r, 0, "pads", 0))
    for d in range(r):
        extent = g.dilations[d] * (g.kernel[d] - 1) + 1
        padded = g.inp[d] + g.pads[d] + g.pads[r + d]
        if g.kernel[d] < 1 or extent > padded:
            raise VerifyException(
                f"kernel of extent {extent} (size {g.kernel[d]}, dilations {g.dilations[d]}) is larger than the "
                f"padded input {padded} (size {g.inp[d]}, pads {g.pads[d]} + {g.pads[r + d]}) in spatial dim {d}")
    return g


def conv_transpose_out(x: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                       pads: Sequence[int], output_padding: Sequence[int]) -> tuple[int, ...]:
    """conv_transpose's spatial output: (i - 1) * s - pads + d * (k - 1) + output_padding + 1."""
    r = len(x)
    return tuple((i - 1) * strides[d] - pads[d] - pads[r + d] + dilations[d] * (kernel[d] - 1) + output_padding[d] + 1
                 for d, i in enumerate(x))


class ConvAttrs:
    """strides, dilations, pads (begins, then ends) and group of the conv ops, defaults filled in."""

    if TYPE_CHECKING:
        strides: DenseArrayBase | None
        dilations: DenseArrayBase | None
        pads: DenseArrayBase | None
        group: IntegerAttr

    def conv_params(self, spatial: int) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None,
                                                   tuple[int, ...] | None, int]:
        def values(attr: DenseArrayBase | None) -> tuple[int, ...] | None:
            return None if attr is None else int_values(attr)

        return (values(self.strides), values(self.dilations), values(self.pads),
                self.group.value.data)

    def geometry_for(self, x: Sequence[int], w: Sequence[int], x_name: str = "x") -> ConvGeometry:
        """The geometry of a conv of input shape x and filter shape w under this op's attributes."""
        strides, dilations, pads, group = self.conv_params(len(x) - 2)
        conv_spatial(x_name, x)
        conv_spatial("w", w)
        if len(w) != len(x):
            raise VerifyException(f"w has rank {len(w)}, {x_name} rank {len(x)}: they must agree")
        g = conv_geometry(x, w[2:], w[0], group, strides, dilations, pads, x_name)
        if w[1] != g.c // group:
            raise VerifyException(f"w dim 1 must be the channels of {x_name} / group = {g.c} / {group} = "
                                  f"{g.c // group}, got {w[1]}")
        return g


def conv_properties(strides: Sequence[int] | None, dilations: Sequence[int] | None, pads: Sequence[int] | None,
                    group: int, **extra: Sequence[int] | None) -> dict[str, Attribute]:
    props: dict[str, Attribute] = {"group": IntegerAttr(group, 64)}
    for k, v in (("strides", strides), ("dilations", dilations), ("pads", pads), *extra.items()):
        if v is not None:
            props[k] = i64_array(v)
    return props


def check_conv_types(tx: TensorType, tw: TensorType, result: SSAValue, want: Sequence[int], what: str,
                     names: tuple[str, str] = ("x", "w")) -> None:
    check_float(tx, names[0])
    check_same_element(tx, tw, f"{names[0]} and {names[1]}")
    r = check_tensor(result, what)
    check_same_element(tx, r, f"{names[0]} and {what}")
    check_shape(r, want, what)


class ConvBase(OpcOp, ConvAttrs, abc.ABC):
    """Two operands, one result, the conv attributes."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    strides = opt_prop_def(DenseArrayBase)
    dilations = opt_prop_def(DenseArrayBase)
    pads = opt_prop_def(DenseArrayBase)
    group = int_prop(1)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation, result_type: Attribute,
                 properties: dict[str, Attribute]):
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=properties)

    def geometry(self) -> ConvGeometry:
        """The geometry of the forward conv this op computes or belongs to."""
        raise NotImplementedError


@irdl_op_definition
class ConvOp(ConvBase):
    """`%y = opc.conv %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>`

    y[n, o, p] = sum over c in o's group and k of x_pad[n, c, p * strides + k * dilations] * w[o, c, k]
    (a cross-correlation, as ONNX and PyTorch); no bias operand (a bias is a broadcast add).
    """

    name = "opc.conv"
    KIND: ClassVar[str] = "fused"

    @staticmethod
    def of(x: SSAValue | Operation, w: SSAValue | Operation, strides: Sequence[int] | None = None,
              dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None, group: int = 1) -> ConvOp:
        tx, tw = SSAValue.get(x).type, SSAValue.get(w).type
        g = conv_geometry(shape_of(tx), shape_of(tw)[2:], shape_of(tw)[0], group, strides, dilations, pads)
        return ConvOp(x, w, tensor(g.y_shape, element_of(tx)), conv_properties(strides, dilations, pads, group))

    def geometry(self) -> ConvGeometry:
        return self.geometry_for(shape_of(self.lhs), shape_of(self.rhs))

    def verify_(self) -> None:
        tx, tw = check_tensor(self.lhs, "x"), check_tensor(self.rhs, "w")
        check_conv_types(tx, tw, self.result, self.geometry().y_shape, "y")


@irdl_op_definition
class ConvTransposeOp(ConvBase):
    """`%y = opc.conv_transpose %x, %w {strides = array<i64: 2>, output_padding = array<i64: 1>} : (tensor<1x4x5xf32>, tensor<4x2x3xf32>) -> tensor<1x2x12xf32>`

    The adjoint of conv w.r.t. its input (PyTorch's ConvTranspose): w [C, O / group, *K];
    y's spatial dims are (i - 1) * strides - pads + dilations * (k - 1) + output_padding + 1.
    """

    name = "opc.conv_transpose"
    KIND: ClassVar[str] = "fused"
    output_padding = opt_prop_def(DenseArrayBase)

    @staticmethod
    def of(x: SSAValue | Operation, w: SSAValue | Operation, strides: Sequence[int] | None = None,
              dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None, group: int = 1,
              output_padding: Sequence[int] | None = None) -> ConvTransposeOp:
        tx, tw = SSAValue.get(x).type, SSAValue.get(w).type
        shape = transpose_shape(shape_of(tx), shape_of(tw), strides, dilations, pads, group, output_padding)
        props = conv_properties(strides, dilations, pads, group, output_padding=output_padding)
        return ConvTransposeOp(x, w, tensor(shape, element_of(tx)), props)

    def geometry(self) -> ConvGeometry:
        """The conv whose input gradient this is: input y, filter w, output x."""
        x, w = shape_of(self.lhs), shape_of(self.rhs)
        strides, dilations, pads, group = self.conv_params(len(x) - 2)
        op = None if self.output_padding is None else int_values(self.output_padding)
        y = transpose_shape(x, w, strides, dilations, pads, group, op)
        g = self.geometry_for(y, w, "y")
        if g.out != tuple(x[2:]):  # output_padding >= strides would make y too long for x
            raise VerifyException(f"output_padding {list(op or ())} must be < strides {list(g.strides)}")
        return g

    def verify_(self) -> None:
        tx, tw = check_tensor(self.lhs, "x"), check_tensor(self.rhs, "w")
        check_conv_types(tx, tw, self.result, self.geometry().x_shape, "y")


def transpose_shape(x: Sequence[int], w: Sequence[int], strides: Sequence[int] | None,
                    dilations: Sequence[int] | None, pads: Sequence[int] | None, group: int,
                    output_padding: Sequence[int] | None) -> tuple[int, ...]:
    """conv_transpose's result shape [N, w[1] * group, *out], its attributes checked."""
    r = conv_spatial("x", x)
    conv_spatial("w", w)
    if len(w) != len(x):
        raise VerifyException(f"w has rank {len(w)}, x rank {len(x)}: they must agree")
    if group < 1:
        raise VerifyException(f"group must be >= 1, got {group}")
    if x[1] % group:
        raise VerifyException(f"group {group} does not divide the {x[1]} channels of x")
    if w[0] != x[1]:
        raise VerifyException(f"w dim 0 must be the {x[1]} channels of x, got {w[0]}")
    s, d = conv_attr(strides, r, 1, "strides", 1), conv_attr(dilations, r, 1, "dilations", 1)
    p, op = conv_attr(pads, 2 * r, 0, "pads", 0), conv_attr(output_padding, r, 0, "output_padding", 0)
    out = conv_transpose_out(x[2:], w[2:], s, d, p, op)
    for i, v in enumerate(out):
        if v < 1:
            raise VerifyException(f"pads {list(p)} leave conv_transpose an empty output in spatial dim {i}")
    return (x[0], w[1] * group, *out)


@irdl_op_definition
class ConvGradInputOp(ConvBase):
    """`%dx = opc.conv_grad_input %dout, %w {pads = array<i64: 1, 1>} : (tensor<2x4x7xf32>, tensor<4x3x3xf32>) -> tensor<2x3x7xf32>`

    The gradient of conv w.r.t. x (x's shape from the result type): a conv_transpose of dout by w.
    """

    name = "opc.conv_grad_input"
    KIND: ClassVar[str] = "grad"

    def geometry(self) -> ConvGeometry:
        return self.geometry_for(shape_of(self.result), shape_of(self.rhs), "dx")

    def verify_(self) -> None:
        td, tw = check_tensor(self.lhs, "dout"), check_tensor(self.rhs, "w")
        check_tensor(self.result, "dx")
        check_conv_types(td, tw, self.result, self.result.type.get_shape(), "dx", ("dout", "w"))
        check_shape(td, self.geometry().y_shape, "dout")


@irdl_op_definition
class ConvGradFilterOp(ConvBase):
    """`%dw = opc.conv_grad_filter %x, %dout {pads = array<i64: 1, 1>} : (tensor<2x3x7xf32>, tensor<2x4x7xf32>) -> tensor<4x3x3xf32>`

    The gradient of conv w.r.t. w (w's shape from the result type): dw[o, c, k] = sum over n and p
    of dout[n, o, p] * x_pad[n, c, p * strides + k * dilations].
    """

    name = "opc.conv_grad_filter"
    KIND: ClassVar[str] = "grad"

    def geometry(self) -> ConvGeometry:
        return self.geometry_for(shape_of(self.lhs), shape_of(self.result))

    def verify_(self) -> None:
        tx, td = check_tensor(self.lhs, "x"), check_tensor(self.rhs, "dout")
        check_tensor(self.result, "dw")
        check_conv_types(tx, td, self.result, self.result.type.get_shape(), "dw", ("x", "dout"))
        check_shape(td, self.geometry().y_shape, "dout")


@irdl_op_definition
class FusedConvEpilogueOp(OpcOp, ConvAttrs):
    """`%out, %reserve = opc.fused_conv_epilogue %x, %w, %bias {pads = array<i64: 1, 1, 1, 1>, activation = "relu"} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>)`

    out = act(conv(x, w) + bias), bias [O] broadcast over the batch and spatial dims (the conv
    analogue of fused_gemm_epilogue, made by opc-fuse); reserve_space (present iff activation is
    relu, gelu (the tanh form) or relu6 (minimum(maximum(z, 0), 6), NaN kept)) is the
    pre-activation, saved for the backward.

    x_channels_last / out_channels_last (unit flags, made by opc-channels-last for inference): x,
    respectively out and reserve_space, hold the same values in channels-last order
    ([N, spatial..., C], NHWC for a 2-D conv), so that a chain of convs around a depthwise one reads
    a position's channels as one vector. The geometry and the weights stay channels-first.
    """

    name = "opc.fused_conv_epilogue"
    KIND: ClassVar[str] = "fused"
    KERNELS: ClassVar[tuple[str, ...]] = ("cpu",)  # cuda runs it by its composite rule
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = operand_def(TensorType)
    out = result_def(TensorType)
    reserve_space = opt_result_def(TensorType)
    strides = opt_prop_def(DenseArrayBase)
    dilations = opt_prop_def(DenseArrayBase)
    pads = opt_prop_def(DenseArrayBase)
    group = int_prop(1)
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    x_channels_last = opt_prop_def(UnitAttr)
    out_channels_last = opt_prop_def(UnitAttr)
    assembly_format = "$x `,` $w `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, w: SSAValue | Operation, bias: SSAValue | Operation,
                 conv_props: dict[str, Attribute], activation: str = "none", x_channels_last: bool = False,
                 out_channels_last: bool = False):
        tx, tw = SSAValue.get(x).type, SSAValue.get(w).type
        x_shape = channels_first(shape_of(tx)) if x_channels_last else shape_of(tx)
        shape = self.geometry_of(x_shape, shape_of(tw), conv_props).y_shape
        out = tensor(channels_last(shape) if out_channels_last else shape, element_of(tx))
        flags = {name: UnitAttr() for name, on in (("x_channels_last", x_channels_last),
                                                   ("out_channels_last", out_channels_last)) if on}
        super().__init__(operands=[x, w, bias], result_types=[out, [out] if activation != "none" else []],
                         properties={**conv_props, "activation": StringAttr(activation), **flags})

    @staticmethod
    def geometry_of(x: Sequence[int], w: Sequence[int], props: dict[str, Attribute]) -> ConvGeometry:
        def values(name: str) -> tuple[int, ...] | None:
            a = props.get(name)
            return None if a is None else int_values(cast(DenseArrayBase, a))

        group = cast(IntegerAttr, props["group"]).value.data if "group" in props else 1
        return conv_geometry(x, w[2:], w[0], group, values("strides"), values("dilations"), values("pads"))

    def conv_props(self) -> dict[str, Attribute]:
        """The attributes of the conv this op fuses (activation and layouts stay behind)."""
        return {k: v for k, v in self.properties.items() if k not in CONV_EPILOGUE_OWN}

    def layout_code(self) -> int:
        """runtime/opc_nn_conv_layout.h's layout bits: 1 x channels-last, 2 out channels-last."""
        return (self.x_channels_last is not None) | (self.out_channels_last is not None) << 1

    def geometry(self) -> ConvGeometry:
        x = shape_of(self.x)
        last = self.x_channels_last is not None and len(x) >= 3  # else geometry_for names the rank
        return self.geometry_for(channels_first(x) if last else x, shape_of(self.w))

    def verify_(self) -> None:
        tx, tw = check_tensor(self.x, "x"), check_tensor(self.w, "w")
        g = self.geometry()
        out_shape = channels_last(g.y_shape) if self.out_channels_last is not None else g.y_shape
        check_conv_types(tx, tw, self.out, out_shape, "out")
        tb = check_tensor(self.bias, "bias")
        check_same_element(tx, tb, "x and bias")
        check_shape(tb, [g.o], "bias")
        act = self.activation.data
        if act not in CONV_ACTIVATIONS:
            raise VerifyException(f"activation must be one of {', '.join(CONV_ACTIVATIONS)}, got '{act}'")
        if self.reserve_space is not None:
            tr = check_tensor(self.reserve_space, "reserve_space")
            check_shape(tr, out_shape, "reserve_space")
            check_same_element(tx, tr, "x and reserve_space")
        if act == "none" and self.reserve_space is not None:
            raise VerifyException("activation 'none' has exactly one result: no reserve_space")
        if act != "none" and self.reserve_space is None:
            raise VerifyException(f"activation '{act}' has two results: out and reserve_space")


CONV_EPILOGUE_OWN = ("activation", "x_channels_last", "out_channels_last")  # fused_conv_epilogue's, not the conv's


def channels_last(shape: Sequence[int]) -> list[int]:
    """[N, C, spatial...] -> [N, spatial..., C]."""
    return [shape[0], *shape[2:], shape[1]]


def channels_first(shape: Sequence[int]) -> list[int]:
    """[N, spatial..., C] -> [N, C, spatial...]."""
    return [shape[0], shape[-1], *shape[1:-1]]


def conv_grad_ops(op: ConvBase) -> dict[str, Attribute]:
    """The attributes a conv op hands to the grad ops of its geometry (output_padding stays behind)."""
    return {k: v for k, v in op.properties.items() if k != "output_padding"}



# ---------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolGeometry:
    """A pooling window sliding over x [n, c, *inp]: kernel, strides, dilations, pads (begins, then
    ends); out by floor, or by ceil (ceil_mode) dropping a last window that would start in the end pad."""

    n: int
    c: int
    inp: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    ceil_mode: bool

    @property
    def spatial(self) -> int:
        return len(self.inp)

    @property
    def out(self) -> tuple[int, ...]:
        r, out = self.spatial, []
        for d, (i, k) in enumerate(zip(self.inp, self.kernel)):
            span = i + self.pads[d] + self.pads[r + d] - self.dilations[d] * (k - 1) - 1
            o = (-(-span // self.strides[d]) if self.ceil_mode else span // self.strides[d]) + 1
            if self.ceil_mode and (o - 1) * self.strides[d] >= i + self.pads[d]:
                o -= 1  # PyTorch's and ONNX's rule: every window starts inside the input or the begin pad
            out.append(o)
        return tuple(out)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return (self.n, self.c, *self.out)


def pool_geometry(x: Sequence[int], kernel: Sequence[int], strides: Sequence[int] | None,
                  dilations: Sequence[int] | None, pads: Sequence[int] | None, ceil_mode: bool) -> PoolGeometry:
    r = conv_spatial("x", x)
    kernel = conv_attr(kernel, r, 1, "kernel", 1)
    g = PoolGeometry(x[0], x[1], tuple(x[2:]), kernel, conv_attr(strides, r, 1, "strides", 1),
                     conv_attr(dilations, r, 1, "dilations", 1), conv_attr(pads, 2 * r, 0, "pads", 0), ceil_mode)
    for d in range(r):
        extent = g.dilations[d] * (g.kernel[d] - 1) + 1
        padded = g.inp[d] + g.pads[d] + g.pads[r + d]
        if extent > padded:
            raise VerifyException(f"kernel of extent {extent} (size {g.kernel[d]}, dilations {g.dilations[d]}) is "
                                  f"larger than the padded input {padded} in spatial dim {d}")
        for o in range(g.out[d]):  # a window of padding only has no maximum and no average
            start = o * g.strides[d] - g.pads[d]
            if not any(0 <= start + t * g.dilations[d] < g.inp[d] for t in range(g.kernel[d])):
                raise VerifyException(f"pads {list(g.pads)}: the pooling window {o} of spatial dim {d} covers only "
                                      "padding")
    return g


class PoolAttrs:
    """kernel, strides, dilations, pads, ceil_mode of the pooling ops."""

    if TYPE_CHECKING:
        x: SSAValue
        kernel: DenseArrayBase
        strides: DenseArrayBase | None
        dilations: DenseArrayBase | None
        pads: DenseArrayBase | None
        ceil_mode: BoolAttr

    def pool_geometry(self) -> PoolGeometry:
        def values(attr: DenseArrayBase | None) -> tuple[int, ...] | None:
            return None if attr is None else int_values(attr)

        return pool_geometry(shape_of(self.x), int_values(self.kernel),
                             values(self.strides), values(self.dilations), values(self.pads),
                             flag(self.ceil_mode))


class PoolOp(OpcOp, PoolAttrs, abc.ABC):
    """The pooling attributes; each op defines its operands itself, x first (IRDL orders a base
    class's operands after the subclass's)."""

    kernel = prop_def(DenseArrayBase)
    strides = opt_prop_def(DenseArrayBase)
    dilations = opt_prop_def(DenseArrayBase)
    pads = opt_prop_def(DenseArrayBase)
    ceil_mode = bool_prop(False)

    def check_x(self) -> tuple[TensorType, PoolGeometry]:
        tx = check_tensor(self.x, "x")
        check_float(tx, "x")
        return tx, self.pool_geometry()


@irdl_op_definition
class MaxPoolOp(PoolOp):
    """`%y, %idx = opc.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xi64>)`

    The maximum of each window (NaN propagates) and, as ONNX's Indices, its flattened index into x
    (the first maximum in window order).
    """

    name = "opc.max_pool"
    KIND: ClassVar[str] = "fused"
    x = operand_def(TensorType)
    y = result_def(TensorType)
    indices = result_def(TensorType)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, props: dict[str, Attribute]):
        t = SSAValue.get(x).type
        g = pool_geometry(shape_of(t), *pool_values(props))
        super().__init__(operands=[x], result_types=[tensor(g.y_shape, element_of(t)), tensor(g.y_shape, i64)],
                         properties=props)

    def verify_(self) -> None:
        tx, g = self.check_x()
        check_conv_types(tx, tx, self.y, g.y_shape, "y")
        ti = check_tensor(self.indices, "indices")
        if ti.element_type != i64:
            raise VerifyException(f"indices must have element type i64, got {ti.element_type}")
        check_shape(ti, g.y_shape, "indices")


@irdl_op_definition
class AvgPoolOp(PoolOp):
    """`%y = opc.avg_pool %x {kernel = array<i64: 3>, pads = array<i64: 1, 1>, count_include_pad = true} : (tensor<1x3x8xf32>) -> tensor<1x3x8xf32>`

    The mean of each window: over its elements inside x, or (count_include_pad) over its extent
    clipped to the padded input.
    """

    name = "opc.avg_pool"
    KIND: ClassVar[str] = "fused"
    x = operand_def(TensorType)
    y = result_def(TensorType)
    count_include_pad = bool_prop(False)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, props: dict[str, Attribute]):
        t = SSAValue.get(x).type
        g = pool_geometry(shape_of(t), *pool_values(props))
        super().__init__(operands=[x], result_types=[tensor(g.y_shape, element_of(t))], properties=props)

    def verify_(self) -> None:
        tx, g = self.check_x()
        check_conv_types(tx, tx, self.y, g.y_shape, "y")


def pool_values(props: dict[str, Attribute]) -> tuple:
    def values(k: str) -> tuple[int, ...] | None:
        a = props.get(k)
        return None if a is None else int_values(cast(DenseArrayBase, a))

    ceil = props.get("ceil_mode")
    return (values("kernel"), values("strides"), values("dilations"), values("pads"),
            bool(ceil is not None and flag(cast(BoolAttr, ceil))))


@irdl_op_definition
class MaxPoolGradOp(PoolOp):
    """`%dx = opc.max_pool_grad %x, %idx, %dout {kernel = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>, tensor<1x3x7x7xi64>, tensor<1x3x7x7xf32>) -> tensor<1x3x8x8xf32>`

    dout scatter-added into zeros of x's shape at the indices max_pool saved (x lends its type);
    an index outside its own image and channel is a run-time IndexError.
    """

    name = "opc.max_pool_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    dout = operand_def(TensorType)
    dx = result_def(TensorType)
    assembly_format = "$x `,` $indices `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, indices: SSAValue | Operation, dout: SSAValue | Operation,
                 props: dict[str, Attribute]):
        super().__init__(operands=[x, indices, dout], result_types=[SSAValue.get(x).type], properties=props)

    def verify_(self) -> None:
        tx, g = self.check_x()
        check_conv_types(tx, check_tensor(self.dout, "dout"), self.dx, tx.get_shape(), "dx", ("x", "dout"))
        check_shape(check_tensor(self.dout, "dout"), g.y_shape, "dout")
        ti = check_tensor(self.indices, "indices")
        if ti.element_type != i64:
            raise VerifyException(f"indices must have element type i64, got {ti.element_type}")
        check_shape(ti, g.y_shape, "indices")


@irdl_op_definition
class AvgPoolGradOp(PoolOp):
    """`%dx = opc.avg_pool_grad %x, %dout {kernel = array<i64: 3>} : (tensor<1x3x8xf32>, tensor<1x3x6xf32>) -> tensor<1x3x8xf32>`

    Each dout spread evenly over its window's counted elements (x lends its type).
    """

    name = "opc.avg_pool_grad"
    KIND: ClassVar[str] = "grad"
    x = operand_def(TensorType)
    dout = operand_def(TensorType)
    dx = result_def(TensorType)
    count_include_pad = bool_prop(False)
    assembly_format = "$x `,` $dout attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation, props: dict[str, Attribute]):
        super().__init__(operands=[x, dout], result_types=[SSAValue.get(x).type], properties=props)

    def verify_(self) -> None:
        tx, g = self.check_x()
        check_conv_types(tx, check_tensor(self.dout, "dout"), self.dx, tx.get_shape(), "dx", ("x", "dout"))
        check_shape(check_tensor(self.dout, "dout"), g.y_shape, "dout")



# ---------------------------------------------------------------------------
# Batch, instance and group normalization
# ---------------------------------------------------------------------------


def check_channels(tx: TensorType, what: str, values: Sequence[tuple[str, SSAValue]], element: Attribute | None = None,
                   count: int | None = None) -> int:
    """x is [N, C, *spatial] (rank 2 to MAX_RANK, float); each value is [count or C] of x's element type
    (or `element`)."""
    check_float(tx, "x")
    shape = tx.get_shape()
    if not 2 <= len(shape) <= MAX_RANK:
        raise VerifyException(f"{what} needs x of rank 2 to {MAX_RANK} ([N, C, *spatial]), got {list(shape)}")
    n = shape[1] if count is None else count
    for name, v in values:
        t = check_tensor(v, name)
        if t.element_type != (element or tx.element_type):
            raise VerifyException(f"{name} must have element type {element or tx.element_type}, got {t.element_type}")
        check_shape(t, [n], name)
    return shape[1]


def f64_prop(default: float):
    return prop_def(FloatAttr, default_value=FloatAttr(default, 64))


@irdl_op_definition
class BatchNormOp(OpcOp):
    """`%y, %rm, %rv, %sm, %sr = opc.batch_norm %x, %scale, %bias, %mean, %var {training = true} : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)`

    Per channel C of x [N, C, *spatial]: inference normalizes by the given mean and var (one result);
    training by the batch statistics over N and the spatial dims, and also returns running_mean /
    running_var = momentum * given + (1 - momentum) * batch (ONNX's convention, biased var) and the
    saved mean and rstd = 1 / sqrt(var + epsilon) for the backward (f32 for halves).
    """

    name = "opc.batch_norm"
    KIND: ClassVar[str] = "fused"
    KERNELS: ClassVar[tuple[str, ...]] = ()  # run by its composite rule
    x = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    y = result_def(TensorType)
    stats = var_result_def(TensorType)
    epsilon = f64_prop(1e-5)
    momentum = f64_prop(0.9)
    training = bool_prop(False)
    assembly_format = "$x `,` $scale `,` $bias `,` $mean `,` $var attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, bias: SSAValue | Operation,
                 mean: SSAValue | Operation, var: SSAValue | Operation, epsilon: float = 1e-5,
                 momentum: float = 0.9, training: bool = False):
        t = SSAValue.get(x).type
        c = [shape_of(t)[1]]
        stats = [tensor(c, element_of(t))] * 2 + [tensor(c, stats_element(element_of(t)))] * 2
        super().__init__(operands=[x, scale, bias, mean, var], result_types=[t, stats if training else []],
                         properties={"epsilon": FloatAttr(epsilon, 64), "momentum": FloatAttr(momentum, 64),
                                     "training": BoolAttr.from_bool(training)})

    def verify_(self) -> None:
        tx = check_tensor(self.x, "x")
        check_channels(tx, "batch_norm", [("scale", self.scale), ("bias", self.bias), ("mean", self.mean),
                                          ("var", self.var)])
        if self.y.type != tx:
            raise VerifyException(f"y must have the type of x, {tx}")
        if flag(self.training):
            if len(self.stats) != 4:
                raise VerifyException("training batch_norm has 5 results: y, running_mean, running_var, saved_mean, "
                                      f"saved_rstd; got {1 + len(self.stats)}")
            check_channels(tx, "batch_norm", [("running_mean", self.stats[0]), ("running_var", self.stats[1])])
            check_channels(tx, "batch_norm", [("saved_mean", self.stats[2]), ("saved_rstd", self.stats[3])],
                           stats_element(tx.element_type))
        elif self.stats:
            raise VerifyException(f"inference batch_norm (training = false) has one result, got {1 + len(self.stats)}")
        if not self.epsilon.value.data >= 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon.value.data}")


@irdl_op_definition
class BatchNormGradOp(OpcOp):
    """`%dx, %ds, %db = opc.batch_norm_grad %x, %scale, %sm, %sr, %dy : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)`

    Training batch_norm's backward from its saved mean and rstd: xhat = (x - mean) * rstd,
    g = dy * scale, dx = rstd * (g - E[g] - xhat * E[g * xhat]) over N and the spatial dims,
    dscale = sum of dy * xhat, dbias = sum of dy.
    """

    name = "opc.batch_norm_grad"
    KIND: ClassVar[str] = "grad"
    KERNELS: ClassVar[tuple[str, ...]] = ()  # run by its composite rule
    x = operand_def(TensorType)
    scale = operand_def(TensorType)
    saved_mean = operand_def(TensorType)
    saved_rstd = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    dscale = result_def(TensorType)
    dbias = result_def(TensorType)
    assembly_format = ("$x `,` $scale `,` $saved_mean `,` $saved_rstd `,` $dy attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, saved_mean: SSAValue | Operation,
                 saved_rstd: SSAValue | Operation, dy: SSAValue | Operation):
        tx, ts = SSAValue.get(x).type, SSAValue.get(scale).type
        super().__init__(operands=[x, scale, saved_mean, saved_rstd, dy], result_types=[tx, ts, ts])

    def verify_(self) -> None:
        tx = check_tensor(self.x, "x")
        check_channels(tx, "batch_norm_grad", [("scale", self.scale), ("dscale", self.dscale),
                                               ("dbias", self.dbias)])
        check_channels(tx, "batch_norm_grad", [("saved_mean", self.saved_mean), ("saved_rstd", self.saved_rstd)],
                       stats_element(tx.element_type))
        for what, v in (("dy", self.dy), ("dx", self.dx)):
            if v.type != tx:
                raise VerifyException(f"{what} must have the type of x, {tx}")


class GroupedNormOp(OpcOp, abc.ABC):
    """instance_norm / group_norm: normalize x [N, C, *spatial] over each group of channels and the
    spatial dims, then scale and shift per channel; mean and rstd [N, groups] are saved."""

    x = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    y = result_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    epsilon = f64_prop(1e-5)
    assembly_format = "$x `,` $scale `,` $bias attr-dict `:` functional-type(operands, results)"

    def groups(self) -> int:
        raise NotImplementedError

    def verify_(self) -> None:
        tx = check_tensor(self.x, "x")
        c = check_channels(tx, self.name.removeprefix("opc."), [("scale", self.scale), ("bias", self.bias)])
        g = self.groups()
        if g < 1 or c % g:
            raise VerifyException(f"num_groups {g} does not divide the {c} channels of x")
        if self.y.type != tx:
            raise VerifyException(f"y must have the type of x, {tx}")
        want = stats_element(tx.element_type)
        for what, v in (("mean", self.mean), ("rstd", self.rstd)):
            t = check_tensor(v, what)
            if t.element_type != want:
                raise VerifyException(f"{what} must have element type {want}, got {t.element_type}")
            check_shape(t, [tx.get_shape()[0], g], what)
        if not self.epsilon.value.data >= 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon.value.data}")


def grouped_types(x: SSAValue | Operation, groups: int) -> list[Attribute]:
    t = SSAValue.get(x).type
    stats = tensor([shape_of(t)[0], groups], stats_element(element_of(t)))
    return [t, stats, stats]


@irdl_op_definition
class InstanceNormOp(GroupedNormOp):
    """`%y, %m, %r = opc.instance_norm %x, %scale, %bias {epsilon = 1.0e-05 : f64} : (tensor<2x3x5xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x5xf32>, tensor<2x3xf32>, tensor<2x3xf32>)`"""

    name = "opc.instance_norm"
    KIND: ClassVar[str] = "fused"
    KERNELS: ClassVar[tuple[str, ...]] = ()  # run by its composite rule (layer_norm rows)

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, bias: SSAValue | Operation,
                 epsilon: float = 1e-5):
        c = shape_of(SSAValue.get(x))[1]
        super().__init__(operands=[x, scale, bias], result_types=grouped_types(x, c),
                         properties={"epsilon": FloatAttr(epsilon, 64)})

    def groups(self) -> int:
        return shape_of(self.x)[1]


@irdl_op_definition
class GroupNormOp(GroupedNormOp):
    """`%y, %m, %r = opc.group_norm %x, %scale, %bias {num_groups = 2} : (tensor<2x4x5xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x5xf32>, tensor<2x2xf32>, tensor<2x2xf32>)`"""

    name = "opc.group_norm"
    KIND: ClassVar[str] = "fused"
    KERNELS: ClassVar[tuple[str, ...]] = ()  # run by its composite rule (layer_norm rows)
    num_groups = int_prop(1)

    def __init__(self, x: SSAValue | Operation, scale: SSAValue | Operation, bias: SSAValue | Operation,
                 num_groups: int, epsilon: float = 1e-5):
        super().__init__(operands=[x, scale, bias], result_types=grouped_types(x, num_groups),
                         properties={"num_groups": IntegerAttr(num_groups, 64), "epsilon": FloatAttr(epsilon, 64)})

    def groups(self) -> int:
        return self.num_groups.value.data


# ---------------------------------------------------------------------------
# Attention: softmax(q k^T * scale + mask) v as one op
# ---------------------------------------------------------------------------


def causal_allowed(i: int, j: int) -> bool:
    """is_causal's mask, aligned at the top left as PyTorch's: query i sees keys j <= i."""
    return j <= i


def check_attention(op: AttentionOp | AttentionGradOp) -> tuple[TensorType, tuple[int, ...], int, int, int]:
    """q [B..., Lq, D], k [B..., Lk, D], v [B..., Lk, Dv] of one float type and the same batch dims;
    the mask (if any) of that type, broadcastable to [B..., Lq, Lk]; scale finite.
    Returns (q's type, B..., Lq, Lk, Dv)."""
    tq, tk, tv = check_tensor(op.q, "q"), check_tensor(op.k, "k"), check_tensor(op.v, "v")
    check_float(tq, "q")
    check_same_element(tq, tk, "q and k")
    check_same_element(tq, tv, "q and v")
    qs, ks, vs = tq.get_shape(), tk.get_shape(), tv.get_shape()
    for what, s in (("q", qs), ("k", ks), ("v", vs)):
        if len(s) < 2:
            raise VerifyException(f"{op.name} {what} must have rank >= 2 ([batch..., length, features]), got {list(s)}")
    if not len(qs) == len(ks) == len(vs) or not tuple(qs[:-2]) == tuple(ks[:-2]) == tuple(vs[:-2]):
        raise VerifyException(f"{op.name} q, k and v must have the same batch dims, got {list(qs)}, {list(ks)} "
                              f"and {list(vs)}")
    if ks[-1] != qs[-1]:
        raise VerifyException(f"{op.name} k must have q's feature dim {qs[-1]} as its last dim, got {list(ks)}")
    if vs[-2] != ks[-2]:
        raise VerifyException(f"{op.name} v must have k's length {ks[-2]} as its dim -2, got {list(vs)}")
    batch, lq, lk = tuple(qs[:-2]), qs[-2], ks[-2]
    if op.mask is not None:
        tm = check_tensor(op.mask, "mask")
        check_same_element(tq, tm, "q and mask")
        want = (*batch, lq, lk)
        ms = tuple(tm.get_shape())
        if len(ms) > len(want) or any(m not in (1, w) for m, w in zip(ms[::-1], want[::-1])):
            raise VerifyException(f"{op.name} mask of shape {list(ms)} does not broadcast to the scores' shape "
                                  f"{list(want)}")
    scale = op.scale.value.data
    if not math.isfinite(scale):
        raise VerifyException(f"{op.name} scale must be finite, got {scale}")
    return tq, batch, lq, lk, vs[-1]


def check_lse(tq: TensorType, batch: Sequence[int], lq: int, v: SSAValue) -> None:
    """The saved logsumexp: [B..., Lq] in the compute type."""
    want = stats_element(tq.element_type)
    t = check_tensor(v, "lse")
    if t.element_type != want:
        raise VerifyException(f"lse must have element type {want} (the compute type of {tq.element_type}), "
                              f"got {t.element_type}")
    check_shape(t, (*batch, lq), "lse")


def scale_prop():
    return prop_def(FloatAttr, default_value=FloatAttr(1.0, 64))


@irdl_op_definition
class AttentionOp(OpcOp):
    """`%out, %lse = opc.attention %q, %k, %v, %mask {scale = 0.125 : f64, is_causal = false} : (tensor<2x8x16xf32>, tensor<2x6x16xf32>, tensor<2x6x4xf32>, tensor<8x6xf32>) -> (tensor<2x8x4xf32>, tensor<2x8xf32>)`

    Scaled dot-product attention: s = q k^T * scale + mask (broadcast to [B..., Lq, Lk]; optional),
    with -inf where is_causal hides key j > query i; out = softmax(s, -1) v; lse = log(sum(exp(s)))
    per query row ([B..., Lq], f32 for f16/bf16/f32, f64 for f64), saved for the backward. A row
    whose scores are all -inf gives NaN, as softmax does.
    """

    name = "opc.attention"
    KIND: ClassVar[str] = "fused"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    out = result_def(TensorType)
    lse = result_def(TensorType)
    scale = scale_prop()
    is_causal = bool_prop(False)
    assembly_format = "$q `,` $k `,` $v (`,` $mask^)? attr-dict `:` functional-type(operands, results)"

    def __init__(self, q: SSAValue | Operation, k: SSAValue | Operation, v: SSAValue | Operation,
                 mask: SSAValue | Operation | None = None, scale: float = 1.0, is_causal: bool = False):
        tq, tv = SSAValue.get(q).type, SSAValue.get(v).type
        assert isinstance(tq, TensorType) and isinstance(tv, TensorType)
        qs = tq.get_shape()
        out = tensor((*qs[:-1], tv.get_shape()[-1]), tq.element_type)
        lse = tensor(qs[:-1], stats_element(tq.element_type))
        super().__init__(operands=[q, k, v, [mask] if mask is not None else []], result_types=[out, lse],
                         properties={"scale": FloatAttr(scale, 64), "is_causal": BoolAttr.from_bool(is_causal)})

    def verify_(self) -> None:
        tq, batch, lq, _, dv = check_attention(self)
        t = check_tensor(self.out, "out")
        check_same_element(tq, t, "q and out")
        check_shape(t, (*batch, lq, dv), "out")
        check_lse(tq, batch, lq, self.lse)


@irdl_op_definition
class AttentionGradOp(OpcOp):
    """`%dq, %dk, %dv = opc.attention_grad %q, %k, %v, %out, %lse, %dout, %mask {scale = 0.125 : f64} : (tensor<2x8x16xf32>, tensor<2x6x16xf32>, tensor<2x6x4xf32>, tensor<2x8x4xf32>, tensor<2x8xf32>, tensor<2x8x4xf32>, tensor<8x6xf32>) -> (tensor<2x8x16xf32>, tensor<2x6x16xf32>, tensor<2x6x4xf32>)`

    Fed by attention's out and lse: p = exp(s - lse), dv = p^T dout, dp = dout v^T,
    ds = p * (dp - rowsum(dout * out)), dq = ds k * scale, dk = ds^T q * scale.
    """

    name = "opc.attention_grad"
    KIND: ClassVar[str] = "grad"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    out = operand_def(TensorType)
    lse = operand_def(TensorType)
    dout = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    dq = result_def(TensorType)
    dk = result_def(TensorType)
    dv = result_def(TensorType)
    scale = scale_prop()
    is_causal = bool_prop(False)
    assembly_format = ("$q `,` $k `,` $v `,` $out `,` $lse `,` $dout (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, q: SSAValue | Operation, k: SSAValue | Operation, v: SSAValue | Operation,
                 out: SSAValue | Operation, lse: SSAValue | Operation, dout: SSAValue | Operation,
                 mask: SSAValue | Operation | None = None, scale: float = 1.0, is_causal: bool = False):
        types = [SSAValue.get(x).type for x in (q, k, v)]
        super().__init__(operands=[q, k, v, out, lse, dout, [mask] if mask is not None else []],
                         result_types=types,
                         properties={"scale": FloatAttr(scale, 64), "is_causal": BoolAttr.from_bool(is_causal)})

    def verify_(self) -> None:
        tq, batch, lq, _, dv = check_attention(self)
        for what, v in (("out", self.out), ("dout", self.dout)):
            t = check_tensor(v, what)
            check_same_element(tq, t, f"q and {what}")
            check_shape(t, (*batch, lq, dv), what)
        check_lse(tq, batch, lq, self.lse)
        for what, r, x in (("dq", self.dq, self.q), ("dk", self.dk, self.k), ("dv", self.dv, self.v)):
            if r.type != x.type:
                raise VerifyException(f"{what} must have the type of {what[1:]}, {x.type}")


Opc = Dialect(
    "opc",
    # The registry (and `opc explain`) lists the ops in this order: primitives, fused, grad ops.
    [
        AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, PowOp, BitwiseAndOp, BitwiseOrOp, BitwiseXorOp,
        BitwiseNotOp, ShiftLeftOp, ShiftRightOp, GreaterThanOp, LessThanOp, EqualOp, SelectOp, NegOp, ExpOp,
        LogOp, TanhOp, ErfOp, FloorOp, CeilOp, RoundOp, SinOp, CosOp, TanOp, AsinOp, AcosOp, AtanOp, SinhOp,
        CoshOp, AsinhOp, AcoshOp, AtanhOp, Log1pOp, SqrtOp, RsqrtOp, AbsOp, ReluOp, GeluOp, CastOp, BitcastOp, FullOp,
        IotaOp, BroadcastToOp, ReshapeOp, TransposeOp, ReduceSumOp, ReduceMaxOp, MatmulOp, ReduceMinOp, ReduceMeanOp,
        SigmoidOp, SliceOp, ConcatOp, GatherOp, CumsumOp, NonzeroOp, TopkOp, UniqueOp, NonMaxSuppressionOp,
        FusedGemmEpilogueOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp,
        SoftmaxCrossEntropyOp, ConvOp, FusedConvEpilogueOp, ConvTransposeOp, MaxPoolOp, AvgPoolOp, BatchNormOp,
        InstanceNormOp, GroupNormOp, AttentionOp, CastGradOp, FusedGemmEpilogueGradOp, ReluGradOp, GeluGradOp,
        SoftmaxGradOp, LogSoftmaxGradOp, LayerNormGradOp, SoftmaxCrossEntropyGradOp, ConvGradInputOp,
        ConvGradFilterOp, AttentionGradOp, BatchNormGradOp, SliceGradOp, GatherGradOp, MaxPoolGradOp,
        AvgPoolGradOp,
    ],  # fmt: skip
    [],
)
