"""The `opc_loops` dialect: the few buffer-level ops that xDSL's memref, scf,
arith and math dialects do not already give the loop level of opc.

  opc_loops.gemm           out[b] = act(op_a(A[b]) @ op_b(B[b]) + bias), reserve = pre-act
  opc_loops.external_call  a device's own kernel for one op instance (runtime/opc_kernel.h)

Everything else at the loop level is upstream: scf.parallel / scf.for loop
nests, memref.load / memref.store / memref.alloc, arith and math scalars.
"""

from __future__ import annotations

from xdsl.dialects.builtin import BoolAttr, DictionaryAttr, IntegerAttr, MemRefType, StringAttr, i64
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

GEMM_ACTIVATIONS = ("none", "relu", "gelu", "gelu_erf")


@irdl_op_definition
class GemmOp(IRDLOperation):
    """`opc_loops.gemm %a, %b, %bias, %out, %reserve {activation = "gelu", ...} : memref<...>, ...`

    A batched GEMM with its epilogue (bias, activation, reserve store) applied
    to each output tile in the same pass; bias and reserve are optional.
    """

    name = "opc_loops.gemm"
    a = operand_def(MemRefType)
    b = operand_def(MemRefType)
    bias = opt_operand_def(MemRefType)
    out = operand_def(MemRefType)
    reserve = opt_operand_def(MemRefType)
    batch = prop_def(IntegerAttr)
    m = prop_def(IntegerAttr)
    n = prop_def(IntegerAttr)
    k = prop_def(IntegerAttr)
    a_batch_stride = prop_def(IntegerAttr)
    b_batch_stride = prop_def(IntegerAttr)
    trans_a = prop_def(BoolAttr)
    trans_b = prop_def(BoolAttr)
    activation = prop_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "$a `,` $b (`bias` $bias^)? `,` $out (`reserve` $reserve^)? attr-dict `:` type($a) `,` type($b)"
        " (`,` type($bias)^)? `,` type($out) (`,` type($reserve)^)?"
    )

    def __init__(
        self,
        a: SSAValue,
        b: SSAValue,
        bias: SSAValue | None,
        out: SSAValue,
        reserve: SSAValue | None,
        *,
        batch: int,
        m: int,
        n: int,
        k: int,
        a_batch_stride: int,
        b_batch_stride: int,
        trans_a: bool,
        trans_b: bool,
        activation: str = "none",
    ):
        props = {name: IntegerAttr(v, i64) for name, v in (
            ("batch", batch), ("m", m), ("n", n), ("k", k),
            ("a_batch_stride", a_batch_stride), ("b_batch_stride", b_batch_stride),
        )}  # fmt: skip
        props.update(
            trans_a=BoolAttr.from_bool(trans_a),
            trans_b=BoolAttr.from_bool(trans_b),
            activation=StringAttr(activation),
        )
        super().__init__(
            operands=[a, b, [bias] if bias else [], out, [reserve] if reserve else []],
            properties=props,
        )

    def verify_(self) -> None:
        if self.activation.data not in GEMM_ACTIVATIONS:
            raise VerifyException(f"activation must be one of {', '.join(GEMM_ACTIVATIONS)}")
        elements = {v.type.element_type for v in self.operands}  # type: ignore[attr-defined]
        if len(elements) != 1:
            raise VerifyException("all operands must share one element type")


@irdl_op_definition
class ExternalCallOp(IRDLOperation):
    """`opc_loops.external_call (%x, %y, %bias) -> (%out) {symbol = "npu_gemm", op = "opc.fused_gemm_epilogue",
    kernel_attrs = {activation = "none", ...}} : (memref<...>, ...) -> (memref<...>)`

    A device's own kernel, an opaque boundary: it reads the input buffers and
    writes every element of the output buffers (the op's operands and results,
    in order), given the op's attributes.
    """

    name = "opc_loops.external_call"
    inputs = var_operand_def(MemRefType)
    outputs = var_operand_def(MemRefType)
    symbol = prop_def(StringAttr)
    op = prop_def(StringAttr)
    kernel_attrs = prop_def(DictionaryAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "`(` $inputs `)` `->` `(` $outputs `)` attr-dict `:` `(` type($inputs) `)` `->` `(` type($outputs) `)`"
    )

    def __init__(self, symbol: str, op: str, inputs: list[SSAValue], outputs: list[SSAValue],
                 kernel_attrs: dict[str, Attribute]):
        super().__init__(operands=[inputs, outputs], properties={
            "symbol": StringAttr(symbol), "op": StringAttr(op), "kernel_attrs": DictionaryAttr(kernel_attrs)})


OpcLoops = Dialect("opc_loops", [GemmOp, ExternalCallOp], [])
