"""ai.onnx.preview.training's Gradient, through opc's autodiff.

    Gradient(xs..., zs...) {xs = ["a", "b"], zs = [...], y = "c"} -> dc/da, dc/db

`xs`, `zs` and `y` name values of the graph: y is computed from xs and zs (before the node, as
ONNX's topological order has it). The node's inputs are the values at which to differentiate, one
for each of xs then zs: usually those very values, else the ops between them and y are computed
again at the given ones. The outputs are the gradients of y with respect to each of xs: opc's
reverse sweep (opc.autodiff.sweep, the vjp rules of every op) over the ops the importer has emitted
so far, seeded with ones at y, so for a y of more than one element the gradient of sum(y). zs are
constants of the differentiation: no gradient flows into them. A y that is itself a Gradient's
output differentiates its backward ops: a second derivative.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from opc.autodiff import sweep
from opc.dialects.opc import is_float
from opc.onnx_import.common import Values
from opc.onnx_import.graph import Node, converter


def names(node: Node, attr: str) -> list[str]:
    """A list-of-strings attribute (onnx.helper gives bytes)."""
    return [n.decode() if isinstance(n, bytes) else str(n) for n in node.attr(attr) or []]


def at_values(node: Node, forward: list[Operation], named: list[SSAValue], given: list[SSAValue]
              ) -> tuple[list[Operation], dict[SSAValue, SSAValue]]:
    """The forward ops with `named` replaced by `given`: the ops that depend on a replaced value are
    cloned (emitted after the others), the rest kept; and the map from old values to new."""
    mapping: dict[SSAValue, SSAValue] = {a: b for a, b in zip(named, given) if a is not b}
    if not mapping:
        return forward, mapping
    out = []
    for op in forward:
        if any(v in mapping for v in op.operands):
            op = node.e.emit(op.clone(value_mapper=mapping))  # clone maps the old results to the new ones
        out.append(op)
    return out, mapping


@converter("ai.onnx.preview.training.Gradient", since=1)
def gradient(node: Node) -> Values:
    xs, zs, y = names(node, "xs"), names(node, "zs"), node.attr("y")
    if not y:
        raise node.fail("attribute y (the value to differentiate) is missing")
    if node.n_inputs != len(xs) + len(zs):
        raise node.fail(f"{node.n_inputs} inputs for xs {xs} and zs {zs}: one value each")
    if len(node.proto.output) != len(xs):
        raise node.fail(f"{len(node.proto.output)} outputs for {len(xs)} xs: one gradient each")
    named = [node.importer.value(n) for n in xs + zs]
    given = node.inputs()
    for n, a, b in zip(xs + zs, named, given):
        if a.type != b.type:
            raise node.fail(f"the value given for '{n}' has type {b.type}, '{n}' has {a.type}")
    forward, mapping = at_values(node, list(node.e.ops), named, given)  # the graph so far, y among it
    target = node.importer.value(str(y))
    target = mapping.get(target, target)
    sources = given[:len(xs)]
    for name, v in ((str(y), target), *zip(xs, sources)):
        if not is_float(v.type.element_type):  # type: ignore[attr-defined]
            raise node.fail(f"'{name}' is not a float tensor: it has no gradient")
    grads = sweep(node.e, forward, sources, [(target, node.e.full(1.0, target))])  # appends the backward
    return [grads[x] if x in grads else node.e.full(0.0, x) for x in sources]
