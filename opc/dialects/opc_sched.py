"""The `opc_sched` dialect: the kernel schedule between the tensor ops and the loops.

  opc_sched.kernel  a region holding the tensor ops that run as one kernel
                    (one loop nest, or one row kernel, or one library call);
                    `kind` names the kernel's shape, `reason` says why the
                    kernel ends where it does (why its results are not fused
                    into their consumers)
  opc_sched.yield   the values a kernel hands on (its results)

`opc opt -p opc-schedule` shows the schedule; opc-lower-to-loops lowers each
kernel to its own loop nest (and the C emitter to its own function).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Dialect, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator

KERNEL_KINDS = ("elementwise", "row", "reduction", "gemm", "library", "placement", "external", "view", "constant")


@irdl_op_definition
class KernelOp(IRDLOperation):
    """`%r = opc_sched.kernel {kind = "row", reason = "..."} ({ ...ops... opc_sched.yield %v }) : type`"""

    name = "opc_sched.kernel"
    res = var_result_def()
    body = region_def("single_block")
    kind = prop_def(StringAttr)
    reason = prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict-with-keyword `:` type($res) $body"

    def __init__(self, kind: str, reason: str, result_types: Sequence[Attribute], body: Region):
        super().__init__(result_types=[list(result_types)], regions=[body],
                         properties={"kind": StringAttr(kind), "reason": StringAttr(reason)})


@irdl_op_definition
class YieldOp(IRDLOperation):
    """`opc_sched.yield %a, %b : tensor<...>, tensor<...>`: the kernel's results."""

    name = "opc_sched.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[list(values)])


OpcSched = Dialect("opc_sched", [KernelOp, YieldOp], [])
