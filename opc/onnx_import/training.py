"""ai.onnx.preview.training's Gradient, through opc's autodiff.

    Gradient(xs..., zs...) {xs = ["a", "b"], zs = [...], y = "c"} -> dc/da, dc/db

The node's inputs are the values of `xs` then `zs`; `y` is a value the graph computes from them
(before the node, as ONNX's topological order has it). The outputs are the gradients of y with
respect to each of xs: opc's reverse sweep (opc.autodiff.sweep, the vjp rules of every op) over the
ops the importer has emitted so far, seeded with ones at y, so for a y of more than one element
the gradient of sum(y). zs are constants of the differentiation: no gradient flows into them.
"""

from __future__ import annotations

from opc.autodiff import sweep
from opc.dialects.opc import is_float
from opc.onnx_import.common import Values
from opc.onnx_import.graph import Node, converter


def names(node: Node, attr: str) -> list[str]:
    """A list-of-strings attribute (onnx.helper gives bytes)."""
    return [n.decode() if isinstance(n, bytes) else str(n) for n in node.attr(attr) or []]


@converter("ai.onnx.preview.training.Gradient", since=1)
def gradient(node: Node) -> Values:
    xs, zs, y = names(node, "xs"), names(node, "zs"), node.attr("y")
    if not y:
        raise node.fail("attribute y (the value to differentiate) is missing")
    if list(node.proto.input) != xs + zs:
        raise node.fail(f"its inputs must be xs then zs ({xs + zs}), got {list(node.proto.input)}")
    if len(node.proto.output) != len(xs):
        raise node.fail(f"{len(node.proto.output)} outputs for {len(xs)} xs: one gradient each")
    sources = [node.input(i) for i in range(len(xs))]
    target = node.importer.value(str(y))
    for name, v in ((str(y), target), *zip(xs, sources)):
        if not is_float(v.type.element_type):  # type: ignore[attr-defined]
            raise node.fail(f"'{name}' is not a float tensor: it has no gradient")
    forward = list(node.e.ops)  # the graph so far, y among it; the sweep appends the backward to node.e
    grads = sweep(node.e, forward, sources, [(target, node.e.full(1.0, target))])
    return [grads[x] if x in grads else node.e.full(0.0, x) for x in sources]
