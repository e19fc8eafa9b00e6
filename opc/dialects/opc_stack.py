"""The `opc_stack` dialect: the per-iteration values a loop's forward saves for its backward, as
Paddle's `tuple_push` / `tuple_pop` (opc-grad, opc/autodiff/control_flow.py).

  opc_stack.push %v {stack = "s0"}                 a copy of %v on top of stack s0
  %v = opc_stack.pop {stack = "s0"} : tensor<...>  the top of s0, taken off (last in, first out)
  opc_stack.pop_into %buf {stack = "s0"}           after lowering: the top of s0 written into %buf
  %d = opc_stack.depth : index                     how much the stacks hold now (a while loop's
                                                   backward runs until they are back to their depth
                                                   before its forward)

A forward loop pushes its loop-carried values at the start of each iteration; the backward loop
pops them in reverse. The stacks live on the host (one growable buffer each, per thread); the ops
run there, outside every kernel, in the order written (they have effects: never moved, merged or
dropped).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, StringAttr
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)


@irdl_op_definition
class PushOp(IRDLOperation):
    name = "opc_stack.push"
    value = operand_def()
    stack = prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$value attr-dict `:` type($value)"

    def __init__(self, value: SSAValue, stack: str):
        super().__init__(operands=[value], properties={"stack": StringAttr(stack)})


@irdl_op_definition
class PopOp(IRDLOperation):
    """`sizes`: the run-time sizes of the result's `?` dims (the pushed value's), as tensor.empty's."""

    name = "opc_stack.pop"
    sizes = var_operand_def(IndexType())
    result = result_def()
    stack = prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "(`(` $sizes^ `)`)? attr-dict `:` type($result)"

    def __init__(self, stack: str, result_type: Attribute, sizes: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(sizes)], result_types=[result_type], properties={"stack": StringAttr(stack)})


@irdl_op_definition
class PopIntoOp(IRDLOperation):
    name = "opc_stack.pop_into"
    buffer = operand_def()
    stack = prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$buffer attr-dict `:` type($buffer)"

    def __init__(self, buffer: SSAValue, stack: str):
        super().__init__(operands=[buffer], properties={"stack": StringAttr(stack)})


@irdl_op_definition
class DepthOp(IRDLOperation):
    name = "opc_stack.depth"
    result = result_def(IndexType)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self):
        super().__init__(result_types=[IndexType()])


STACK_OPS = (PushOp, PopOp, PopIntoOp, DepthOp)

OpcStack = Dialect("opc_stack", [PushOp, PopOp, PopIntoOp, DepthOp], [])
