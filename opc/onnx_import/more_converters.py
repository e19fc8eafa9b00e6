"""Converters of ONNX's integer ops (issue 18, item 3): BitShift and BitwiseAnd / Or / Xor / Not onto
opc's bitwise ops, which give ONNX's values where C leaves a shift undefined (a count below 0 or of
the width or more: 0 to the left, the sign fill to the right)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.graph import Node, converter

Values = list[SSAValue | np.ndarray]

BITWISE = {"BitwiseAnd": o.BitwiseAndOp, "BitwiseOr": o.BitwiseOrOp, "BitwiseXor": o.BitwiseXorOp}


@converter(*BITWISE, since=18)
def bitwise(node: Node) -> Values:
    return [node.e.value(BITWISE[node.op_type](node.input(0), node.input(1)))]


@converter("BitwiseNot", since=18)
def bitwise_not(node: Node) -> Values:
    return [node.e.value(o.BitwiseNotOp(node.input(0)))]


@converter("BitShift", since=11)
def bit_shift(node: Node) -> Values:
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    op = o.ShiftLeftOp if direction == "LEFT" else o.ShiftRightOp
    return [node.e.value(op(node.input(0), node.input(1)))]
