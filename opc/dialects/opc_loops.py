"""The `opc_loops` dialect: the few buffer-level ops that xDSL's memref, scf,
arith and math dialects do not already give the loop level of opc.

  opc_loops.gemm           out[b] = act(op_a(A[b]) @ op_b(B[b]) + bias), reserve = pre-act,
                           then its epilogue region on each finished block of out
  opc_loops.external_call  a device's own kernel for one op instance (runtime/opc_kernel.h)
  opc_loops.call           a runtime kernel (runtime/opc_nn.h, opc_nn.cuh) on buffers
  opc_loops.check_index    an index read from a tensor, checked against its axis
  opc_loops.check_bound    a run-time offset or size in [0, bound), checked on the host
                           before a slice is read or written; else the call fails
  opc_loops.raise_status   return the status a failed check recorded
                           (the run-time status protocol: runtime/opc_status.h)

Everything else at the loop level is upstream: scf.parallel / scf.for loop
nests, memref.load / memref.store / memref.alloc, arith and math scalars.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_region_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException

from opc.dialects.kinds import element_of

GEMM_ACTIVATIONS = ("none", "relu", "gelu", "gelu_erf")
RUNTIME_SIZE = -1  # a gemm's size property given by its next `sizes` operand (opc/lowering/size_lowering.py)
GEMM_SIZES = ("batch", "m", "n", "k", "a_batch_stride", "b_batch_stride")


@irdl_op_definition
class GemmOp(IRDLOperation):
    """`opc_loops.gemm %a, %b, %bias, %out, %reserve {activation = "gelu", ...} : memref<...>, ...`

    A batched GEMM with its epilogue (bias, activation, reserve store) applied
    to each output tile in the same pass; bias and reserve are optional.

    The optional `epilogue` region (`... epilogue { ^bb0(%r: index, %c: index): ... }`) is the
    body of a loop over out's elements as a [batch * m, n] matrix (row %r = b * m + i, column
    %c): loads, scalar ops and stores of any buffers defined before the GEMM, out among
    them. It runs for every
    element once out's value there is final, block by block while the block is in cache
    (opc_rt_gemm_ep_*: runtime/opc_gemm.h), so the pointwise chain on a GEMM's result
    costs no pass over memory of its own. Blocks run in any order, on any thread: an
    element's body reads out only at its own element.
    """

    name = "opc_loops.gemm"
    a = operand_def(MemRefType)
    b = operand_def(MemRefType)
    bias = opt_operand_def(MemRefType)
    out = operand_def(MemRefType)
    reserve = opt_operand_def(MemRefType)
    sizes = var_operand_def(IndexType())  # the run-time ones of batch, m, n, k and the strides: those set to -1
    batch = prop_def(IntegerAttr)
    m = prop_def(IntegerAttr)
    n = prop_def(IntegerAttr)
    k = prop_def(IntegerAttr)
    a_batch_stride = prop_def(IntegerAttr)
    b_batch_stride = prop_def(IntegerAttr)
    trans_a = prop_def(BoolAttr)
    trans_b = prop_def(BoolAttr)
    activation = prop_def(StringAttr)
    epilogue = opt_region_def("single_block")
    traits = traits_def(NoTerminator())
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "$a `,` $b (`bias` $bias^)? `,` $out (`reserve` $reserve^)? (`sizes` `(` $sizes^ `)`)? "
        "(`epilogue` $epilogue^)? attr-dict `:` "
        "type($a) `,` type($b) (`bias` type($bias)^)? `,` type($out) (`reserve` type($reserve)^)?"
    )

    def __init__(
        self,
        a: SSAValue,
        b: SSAValue,
        bias: SSAValue | None,
        out: SSAValue,
        reserve: SSAValue | None,
        *,
        batch: int | SSAValue,
        m: int | SSAValue,
        n: int | SSAValue,
        k: int | SSAValue,
        a_batch_stride: int | SSAValue,
        b_batch_stride: int | SSAValue,
        trans_a: bool,
        trans_b: bool,
        activation: str = "none",
        epilogue: Region | None = None,
    ):
        fields = (("batch", batch), ("m", m), ("n", n), ("k", k),
                  ("a_batch_stride", a_batch_stride), ("b_batch_stride", b_batch_stride))
        props: dict[str, Attribute] = {name: IntegerAttr(v if isinstance(v, int) else RUNTIME_SIZE, i64)
                                       for name, v in fields}
        sizes = [v for _, v in fields if not isinstance(v, int)]
        props.update(
            trans_a=BoolAttr.from_bool(trans_a),
            trans_b=BoolAttr.from_bool(trans_b),
            activation=StringAttr(activation),
        )
        super().__init__(
            operands=[a, b, [bias] if bias else [], out, [reserve] if reserve else [], sizes],
            properties=props,
            regions=[[epilogue] if epilogue is not None else []],
        )

    def verify_(self) -> None:
        if self.activation.data not in GEMM_ACTIVATIONS:
            raise VerifyException(f"activation must be one of {', '.join(GEMM_ACTIVATIONS)}")
        elements = {element_of(v) for v in self.operands if isinstance(v.type, MemRefType)}
        if len(elements) != 1:
            raise VerifyException("all operands must share one element type")
        if self.epilogue is not None:
            args = self.epilogue.block.args
            if len(args) != 2 or not all(isinstance(a.type, IndexType) for a in args):
                raise VerifyException("the epilogue's block takes two indices (row and column of out)")


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


@irdl_op_definition
class CallOp(IRDLOperation):
    """`opc_loops.call %x, %y {callee = "softmax_f32", ints = array<i64: 4, 10, 1>, floats = array<f64>} : ...`

    A kernel of the runtime, called with its buffers, then `ints`, then
    `floats`: opc_nn_CALLEE (runtime/opc_nn.h) in C, opc_cuda_nn_CALLEE
    (runtime/opc_nn.cuh, returning a cudaError_t) in CUDA.

    The optional `epilogue` region (a conv's, CPU only) is as opc_loops.gemm's, over the
    result as a [n * channels, spatial] matrix (row %r = batch * channels + channel): the C
    calls opc_nn_CALLEE_ep with it outlined, run on each finished block (runtime/opc_nn_conv.h).
    """

    name = "opc_loops.call"
    args = var_operand_def(MemRefType)
    sizes = var_operand_def(IndexType())  # the run-time entries of ints, at the positions `runtime` lists
    callee = prop_def(StringAttr)
    ints = prop_def(DenseArrayBase)
    runtime = prop_def(DenseArrayBase)
    floats = prop_def(DenseArrayBase)
    epilogue = opt_region_def("single_block")
    traits = traits_def(NoTerminator())
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = "$args (`sizes` `(` $sizes^ `)`)? (`epilogue` $epilogue^)? attr-dict `:` type($args)"

    def __init__(self, callee: str, args: Sequence[SSAValue], ints: Sequence[int | SSAValue] = (),
                 floats: Sequence[float] = (), epilogue: Region | None = None):
        runtime = [i for i, v in enumerate(ints) if not isinstance(v, int)]
        super().__init__(operands=[list(args), [v for v in ints if not isinstance(v, int)]], properties={
            "callee": StringAttr(callee),
            "ints": DenseArrayBase.from_list(i64, [v if isinstance(v, int) else 0 for v in ints]),
            "runtime": DenseArrayBase.from_list(i64, runtime),
            "floats": DenseArrayBase.from_list(f64, [float(v) for v in floats]),
        }, regions=[[epilogue] if epilogue is not None else []])  # fmt: skip

    def verify_(self) -> None:
        if self.epilogue is not None:
            args = self.epilogue.block.args
            if len(args) != 2 or not all(isinstance(a.type, IndexType) for a in args):
                raise VerifyException("the epilogue's block takes two indices (row and column of the result)")


@irdl_op_definition
class CheckIndexOp(IRDLOperation):
    """`%k = opc_loops.check_index %raw, %status {size = 10, code = -1, wrap = true} : memref<2xi64>`

    An index read from a tensor (i64), for an axis of `size`: negatives count
    from the end when `wrap`; one outside [0, size) records `code` and the
    raw value in the status record and reads as 0 (runtime/opc_status.h).
    """

    name = "opc_loops.check_index"
    raw = operand_def(IntegerType(64))
    status = operand_def(MemRefType)
    extent = opt_operand_def(IndexType())  # the axis size where it is known at run time only (size = -1)
    result = result_def(IndexType())
    size = prop_def(IntegerAttr)
    code = prop_def(IntegerAttr)
    wrap = prop_def(BoolAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$raw `,` $status (`,` $extent^)? attr-dict `:` type($status)"

    def __init__(self, raw: SSAValue, status: SSAValue, size: int | SSAValue, code: int, wrap: bool):
        extent = [size] if isinstance(size, SSAValue) else []
        static = size if isinstance(size, int) else -1
        super().__init__(operands=[raw, status, extent], result_types=[IndexType()], properties={
            "size": IntegerAttr(static, i64), "code": IntegerAttr(code, i64),
            "wrap": BoolAttr.from_bool(wrap),
        })  # fmt: skip


@irdl_op_definition
class CheckBoundOp(IRDLOperation):
    """`opc_loops.check_bound %offset, %bound {code = -1}`

    Host code before a nest: `value` outside [0, bound) ends the function at once with status
    `code` and the value as its detail (a slice's offset or size known only at run time), so the
    nest after it never reads or writes out of bounds. No status record: it works the same on the
    CPU and on the host side of the CUDA target.
    """

    name = "opc_loops.check_bound"
    value = operand_def(IndexType())
    bound = operand_def(IndexType())
    code = prop_def(IntegerAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$value `,` $bound attr-dict"

    def __init__(self, value: SSAValue, bound: SSAValue, code: int):
        super().__init__(operands=[value, bound], properties={"code": IntegerAttr(code, i64)})


@irdl_op_definition
class RaiseStatusOp(IRDLOperation):
    """`opc_loops.raise_status %status : memref<2xi64>`: when a check failed, the
    function ends here and returns the recorded (negative) status."""

    name = "opc_loops.raise_status"
    status = operand_def(MemRefType)
    assembly_format = "$status attr-dict `:` type($status)"

    def __init__(self, status: SSAValue):
        super().__init__(operands=[status])


@irdl_op_definition
class HandOutOp(IRDLOperation):
    """`opc_loops.hand_out %buffer, %handle : memref<?x3xf32>, memref<i64>`

    A result whose size no caller knows before the call (a size read from a tensor's values): the
    function allocated it, and at its end hands it out: its address into the handle (an int64 the
    binding reads, then frees the buffer with the array viewing it), its own pointer cleared so
    that the cleanup path does not free it. A call that fails before here frees it as any buffer.
    """

    name = "opc_loops.hand_out"
    buffer = operand_def(MemRefType)
    handle = operand_def(MemRefType)
    assembly_format = "$buffer `,` $handle attr-dict `:` type($buffer) `,` type($handle)"

    def __init__(self, buffer: SSAValue, handle: SSAValue):
        super().__init__(operands=[buffer, handle])


ERRORS_ATTR = "opc.errors"
"""On a lowered func.func: its run-time check sites, [[exception name, message], ...] for status -1, -2, ..."""


def function_errors(fn: Operation) -> list[tuple[str, str]]:
    """The check sites of a lowered function (ERRORS_ATTR): (exception name, message with {value})."""
    attr = fn.attributes.get(ERRORS_ATTR)
    if not isinstance(attr, ArrayAttr):
        return []
    return [(site.data[0].data, site.data[1].data) for site in attr.data]


OpcLoops = Dialect("opc_loops", [GemmOp, ExternalCallOp, CallOp, CheckIndexOp, CheckBoundOp, RaiseStatusOp,
                                 HandOutOp], [])
