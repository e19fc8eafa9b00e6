"""The `opc` dialect: deep-learning ops and their grad ops on static tensors.

Every op prints and parses as
`opc.NAME operands attr-dict : functional-type(operands, results)`.

Primitives
  binary (NumPy broadcasting): add sub mul div maximum minimum pow
  compare (-> i1):             greater_than less_than equal
  select:                      select %cond, %a, %b
  unary:                       neg exp log tanh erf sqrt rsqrt abs relu gelu
  cast {dtype = T}, full {value}, broadcast_to, reshape, transpose {perm},
  reduce_sum / reduce_max {axes, keepdim}, matmul {trans_x, trans_y}
Fused
  fused_gemm_epilogue {trans_x, trans_y, activation}  -> out[, reserve_space]
Grad ops
  cast_grad, fused_gemm_epilogue_grad {trans_x, trans_y, activation_grad},
  relu_grad, gelu_grad {approximate}
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
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
    opt_result_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

# ---------------------------------------------------------------------------
# Element types
# ---------------------------------------------------------------------------

FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)
MAX_RANK = 4


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOAT_TYPES)


def is_bool(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def is_admitted_element(t: Attribute) -> bool:
    """i1, i8, ui8, i16, i32, i64, f16, bf16, f32, f64 (SPEC.md: Types)."""
    if is_float(t):
        return True
    if not isinstance(t, IntegerType):
        return False
    width, sign = t.width.data, t.signedness.data
    if width == 8:
        return sign in (Signedness.SIGNLESS, Signedness.UNSIGNED)
    return width in (1, 16, 32, 64) and sign == Signedness.SIGNLESS


def check_tensor(value: SSAValue | Attribute, what: str) -> TensorType:
    t = value.type if isinstance(value, SSAValue) else value
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} must be a tensor, got {t}")
    shape = t.get_shape()
    if len(shape) > MAX_RANK:
        raise VerifyException(f"{what} has rank {len(shape)}, at most {MAX_RANK} is supported")
    if any(d < 0 for d in shape):
        raise VerifyException(f"{what} must have a static shape, got {t}")
    if not is_admitted_element(t.element_type):
        raise VerifyException(f"{what} has unsupported element type {t.element_type}")
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


def check_shape(t: TensorType, shape: Sequence[int], what: str) -> None:
    if tuple(t.get_shape()) != tuple(shape):
        raise VerifyException(f"{what} must have shape {list(shape)}, got {list(t.get_shape())}")


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting; VerifyException when the shapes do not broadcast."""
    rank = max(len(s) for s in shapes)
    out: list[int] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise VerifyException(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def tensor(shape: Sequence[int], element: Attribute) -> TensorType:
    return TensorType(element, list(shape))


def matmul_shape(x: Sequence[int], y: Sequence[int], trans_x: bool, trans_y: bool) -> tuple[int, ...]:
    """Shape of op_x(x) @ op_y(y) for rank 2, or rank 3 with one shared batch dim."""
    if len(x) != len(y) or len(x) not in (2, 3):
        raise VerifyException(f"matmul operands must both be rank 2 or both rank 3, got {list(x)} and {list(y)}")
    batch = x[:-2]
    if batch != y[:-2]:
        raise VerifyException(f"matmul batch dims differ: {list(x)} and {list(y)}")
    m, kx = (x[-1], x[-2]) if trans_x else (x[-2], x[-1])
    ky, n = (y[-1], y[-2]) if trans_y else (y[-2], y[-1])
    if kx != ky:
        raise VerifyException(
            f"matmul inner dims differ: op_x(x) is {m}x{kx}, op_y(y) is {ky}x{n} "
            f"(trans_x={trans_x}, trans_y={trans_y})"
        )
    return (*batch, m, n)


def bool_prop(default: bool):
    return prop_def(BoolAttr, default_value=BoolAttr.from_bool(default))


ACTIVATIONS = ("none", "relu", "gelu")
ACTIVATION_GRADS = ("none", "relu_grad", "gelu_grad")

# ---------------------------------------------------------------------------
# Abstract bases
# ---------------------------------------------------------------------------


class OpcOp(IRDLOperation, abc.ABC):
    """Common options: properties live in the attr-dict of the custom form."""

    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())


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
        return normalize_axes(self.axes.get_values(), len(self.x.type.get_shape()))  # type: ignore[attr-defined]

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
    """`%r = opc.div %a, %b : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>` (floats only)"""

    name = "opc.div"
    FLOATS_ONLY: ClassVar[bool] = True


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
    """`%r = opc.pow %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>` (floats only)"""

    name = "opc.pow"
    FLOATS_ONLY: ClassVar[bool] = True


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
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, cond: SSAValue | Operation, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        types = [SSAValue.get(v).type for v in (cond, lhs, rhs)]
        shape = broadcast_shapes(*(t.get_shape() for t in types))  # type: ignore[attr-defined]
        super().__init__(operands=[cond, lhs, rhs], result_types=[tensor(shape, types[1].element_type)])  # type: ignore[attr-defined]

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


@irdl_op_definition
class GeluOp(UnaryElementwiseOp):
    """`%r = opc.gelu %a {approximate = true} : (tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.gelu"
    approximate = bool_prop(True)

    def __init__(self, x: SSAValue | Operation, approximate: bool = True):
        super().__init__(x, {"approximate": BoolAttr.from_bool(approximate)})


@irdl_op_definition
class CastOp(OpcOp):
    """`%c = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>`"""

    name = "opc.cast"
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


@irdl_op_definition
class FullOp(OpcOp):
    """`%r = opc.full {value = 1.0 : f64} : () -> tensor<2x3xf32>`"""

    name = "opc.full"
    result = result_def(TensorType)
    value = prop_def(FloatAttr)

    @classmethod
    def parse(cls, parser: Parser) -> FullOp:
        # functional-type(operands, ...) is refused for an op without operands.
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        if "value" not in attrs or ftype.inputs.data or len(ftype.outputs.data) != 1:
            parser.raise_error("expected `opc.full {value = V : f64} : () -> tensor<...>`")
        props = {"value": attrs.pop("value")}
        return cls.create(result_types=list(ftype.outputs.data), properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attr_dict({"value": self.value, **self.attributes})
        printer.print_string(" : () -> ")
        printer.print_attribute(self.result.type)

    def __init__(self, value: float, result_type: TensorType):
        super().__init__(result_types=[result_type], properties={"value": FloatAttr(value, 64)})

    def verify_(self) -> None:
        check_tensor(self.result, "result")


@irdl_op_definition
class BroadcastToOp(OpcOp):
    """`%r = opc.broadcast_to %a : (tensor<3xf32>) -> tensor<4x3xf32>`"""

    name = "opc.broadcast_to"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, result_type: TensorType):
        super().__init__(operands=[x], result_types=[result_type])

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        src, dst = tuple(t.get_shape()), tuple(r.get_shape())
        ok = len(src) <= len(dst) and all(s in (1, d) for s, d in zip(src[::-1], dst[::-1]))
        if not ok:
            raise VerifyException(f"cannot broadcast {list(t.get_shape())} to {list(r.get_shape())}")


@irdl_op_definition
class ReshapeOp(OpcOp):
    """`%r = opc.reshape %a : (tensor<2x3xf32>) -> tensor<6xf32>`"""

    name = "opc.reshape"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$x attr-dict `:` functional-type(operands, results)"

    def __init__(self, x: SSAValue | Operation, result_type: TensorType):
        super().__init__(operands=[x], result_types=[result_type])

    def verify_(self) -> None:
        t, r = check_tensor(self.x, "operand"), check_tensor(self.result, "result")
        check_same_element(t, r, "operand and result")
        if t.element_count() != r.element_count():
            raise VerifyException(
                f"reshape must keep the element count: {list(t.get_shape())} has {t.element_count()}, "
                f"{list(r.get_shape())} has {r.element_count()}"
            )


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
        return tuple(self.perm.get_values())  # type: ignore[arg-type]

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
        shape = matmul_shape(tx.get_shape(), ty.get_shape(), trans_x, trans_y)  # type: ignore[attr-defined]
        super().__init__(
            operands=[x, y],
            result_types=[tensor(shape, tx.element_type)],  # type: ignore[attr-defined]
            properties={"trans_x": BoolAttr.from_bool(trans_x), "trans_y": BoolAttr.from_bool(trans_y)},
        )

    def verify_(self) -> None:
        tx, ty, r = check_tensor(self.x, "x"), check_tensor(self.y, "y"), check_tensor(self.result, "result")
        check_float(tx, "x")
        check_same_element(tx, ty, "x and y")
        check_same_element(tx, r, "x and result")
        tr_x, tr_y = flag(self.trans_x), flag(self.trans_y)
        check_shape(r, matmul_shape(tx.get_shape(), ty.get_shape(), tr_x, tr_y), "result")


def flag(attr: BoolAttr) -> bool:
    # `true` parses as i1 -1 and BoolAttr.from_bool(True) holds 1: test nonzero.
    return attr.value.data != 0


# ---------------------------------------------------------------------------
# Fused op
# ---------------------------------------------------------------------------


def check_gemm_operands(op: IRDLOperation, x: SSAValue, y: SSAValue) -> tuple[TensorType, tuple[int, int]]:
    tx, ty = check_tensor(x, "x"), check_tensor(y, "y")
    check_float(tx, "x")
    check_same_element(tx, ty, "x and y")
    if len(tx.get_shape()) != 2 or len(ty.get_shape()) != 2:
        raise VerifyException(f"{op.name} needs rank-2 x and y, got {tx} and {ty}")
    m, n = matmul_shape(tx.get_shape(), ty.get_shape(), flag(op.trans_x), flag(op.trans_y))  # type: ignore[attr-defined]
    return tx, (m, n)


@irdl_op_definition
class FusedGemmEpilogueOp(OpcOp):
    """`%out, %reserve = opc.fused_gemm_epilogue %x, %y, %bias {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)`

    out = act(op_x(x) @ op_y(y) + bias); reserve_space (present iff activation
    is relu or gelu) is the pre-activation, saved for the backward.
    """

    name = "opc.fused_gemm_epilogue"
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
        out = tensor(matmul_shape(tx.get_shape(), ty.get_shape(), trans_x, trans_y), tx.element_type)  # type: ignore[attr-defined]
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


# ---------------------------------------------------------------------------
# Grad ops
# ---------------------------------------------------------------------------


@irdl_op_definition
class CastGradOp(OpcOp):
    """`%dx = opc.cast_grad %x, %dout : (tensor<3xf64>, tensor<3xui8>) -> tensor<3xf64>`

    dx = cast(dout, dtype(x)); x is needed only for its dtype.
    """

    name = "opc.cast_grad"
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
    """`%dx, %dy, %dbias = opc.fused_gemm_epilogue_grad %x, %y, %reserve, %dout {activation_grad = "relu_grad"} : (...) -> (...)`

    dZ = dout * act'(reserve_space); dx, dy through the trans flags; dbias = sum of dZ over rows.
    """

    name = "opc.fused_gemm_epilogue_grad"
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
        n = ty.get_shape()[0 if trans_y else 1]  # type: ignore[attr-defined]
        super().__init__(
            operands=[x, y, [reserve_space, dout] if reserve_space is not None else [dout]],
            result_types=[tx, ty, tensor([n], tx.element_type)],  # type: ignore[attr-defined]
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


@irdl_op_definition
class GeluGradOp(ActivationGradOp):
    """`%dx = opc.gelu_grad %x, %dout {approximate = true} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`"""

    name = "opc.gelu_grad"
    approximate = bool_prop(True)

    def __init__(self, x: SSAValue | Operation, dout: SSAValue | Operation, approximate: bool = True):
        super().__init__(x, dout, {"approximate": BoolAttr.from_bool(approximate)})


Opc = Dialect(
    "opc",
    [
        AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, PowOp,
        GreaterThanOp, LessThanOp, EqualOp, SelectOp,
        NegOp, ExpOp, LogOp, TanhOp, ErfOp, SqrtOp, RsqrtOp, AbsOp, ReluOp, GeluOp,
        CastOp, FullOp, BroadcastToOp, ReshapeOp, TransposeOp, ReduceSumOp, ReduceMaxOp, MatmulOp,
        FusedGemmEpilogueOp,
        CastGradOp, FusedGemmEpilogueGradOp, ReluGradOp, GeluGradOp,
    ],  # fmt: skip
    [],
)
