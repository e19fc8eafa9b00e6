"""ai.onnx.preview.training: Gradient, through opc's autodiff, and the optimizers Adagrad, Adam and
Momentum (standard and Nesterov), composed from elementwise ops.

    Gradient(xs..., zs...) {xs = ["a", "b"], zs = [...], y = "c"} -> dc/da, dc/db

`xs`, `zs` and `y` name values of the graph: y is computed from xs and zs (before the node, as
ONNX's topological order has it). The node's inputs are the values at which to differentiate, one
for each of xs then zs: usually those very values, else the ops between them and y are computed
again at the given ones. The outputs are the gradients of y with respect to each of xs: opc's
reverse sweep (opc.autodiff.sweep, the vjp rules of every op) over the ops the importer has emitted
so far, seeded with ones at y, so for a y of more than one element the gradient of sum(y). zs are
constants of the differentiation: no gradient flows into them. A y that is itself a Gradient's
output differentiates its backward ops: a second derivative.

    Adagrad(R, T, X1..Xn, G1..Gn, H1..Hn) -> X1_new..Xn_new, H1_new..Hn_new
    Adam(R, T, Xs, Gs, Vs, Hs) -> Xs_new, Vs_new, Hs_new
    Momentum(R, T, Xs, Gs, Vs) -> Xs_new, Vs_new

R (the learning rate) and T (the step, int64) are scalars shared by every tensor; each optimizer
updates the n tensors independently, as ONNX's operator docs write the update. R and T computed
in each X's float type; T enters as a number (Adam's alpha**T, the T > 0 tests), at run time.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from opc.autodiff import sweep
from opc.dialects import opc as o
from opc.dialects.kinds import element_of
from opc.dialects.opc import is_float
from opc.onnx_import.common import Values, scalar
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


class Step:
    """One optimizer's shared inputs (R, T) and constants, in the float type of one X."""

    def __init__(self, node: Node, x: SSAValue) -> None:
        self.node, self.e, self.x = node, node.e, x
        element = element_of(x)
        r, t = node.input(0), node.input(1)
        for name, v in (("R", r), ("T", t)):
            if v.type.get_shape() != ():  # type: ignore[attr-defined]
                raise node.fail(f"{name} must be a scalar, got shape {list(v.type.get_shape())}")  # type: ignore[attr-defined]
        self.r = r if element_of(r) == element else node.e.cast(r, element)
        self.t = node.e.cast(t, element)
        self.started = node.e.value(o.GreaterThanOp(t, scalar(node, 0, t)))  # T > 0

    def c(self, value: float) -> SSAValue:
        return scalar(self.node, value, self.x)

    def lin(self, a: float, u: SSAValue, b: float, v: SSAValue) -> SSAValue:
        """a * u + b * v."""
        e = self.e
        return e.add(e.mul(self.c(a), u), e.mul(self.c(b), v))

    def regularized(self, g: SSAValue, norm: float) -> SSAValue:
        """G + norm * X: the gradient of the L2 term added."""
        return self.e.add(self.e.mul(self.c(norm), self.x), g)

    def root(self, h: SSAValue, epsilon: float) -> SSAValue:
        return self.e.add(self.e.value(o.SqrtOp(h)), self.c(epsilon))

    def power(self, base: float) -> SSAValue:
        """base ** T."""
        return self.e.value(o.PowOp(self.c(base), self.t))


def tensor_groups(node: Node, per_tensor: int, outputs: int) -> list[list[SSAValue]]:
    """The inputs after R and T as one group per optimized tensor: [X, G, ...] (ONNX lists all the Xs,
    then all the Gs, ...)."""
    n, rest = divmod(node.n_inputs - 2, per_tensor)
    if node.n_inputs < 2 + per_tensor or rest:
        raise node.fail(f"{node.n_inputs} inputs: R, T and {per_tensor} tensors per optimized tensor expected")
    if len(node.proto.output) != outputs * n:
        raise node.fail(f"{len(node.proto.output)} outputs for {n} optimized tensors: {outputs} each")
    groups = [[node.input(2 + k * n + i) for k in range(per_tensor)] for i in range(n)]
    for group in groups:
        if not is_float(element_of(group[0])) or any(v.type != group[0].type for v in group):
            raise node.fail(f"X, G and the state must be float tensors of one type, got "
                            f"{', '.join(str(v.type) for v in group)}")
    return groups


def by_output(updates: list[tuple[SSAValue, ...]]) -> Values:
    """[(X1', H1'), (X2', H2')] -> [X1', X2', H1', H2']: ONNX's order."""
    return [v for column in zip(*updates) for v in column]


@converter("ai.onnx.preview.training.Adagrad", since=1)
def adagrad(node: Node) -> Values:
    decay, epsilon = float(node.attr("decay_factor", 0.0)), float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    updates = []
    for x, g, h in tensor_groups(node, 3, 2):
        s, e = Step(node, x), node.e
        rate = e.div(s.r, e.add(s.c(1.0), e.mul(s.t, s.c(decay))))  # R / (1 + T * decay_factor)
        g = s.regularized(g, norm)
        h_new = e.add(h, e.mul(g, g))
        updates.append((e.sub(x, e.div(e.mul(rate, g), s.root(h_new, epsilon))), h_new))
    return by_output(updates)


@converter("ai.onnx.preview.training.Adam", since=1)
def adam(node: Node) -> Values:
    alpha, beta = float(node.attr("alpha", 0.9)), float(node.attr("beta", 0.999))
    epsilon, norm = float(node.attr("epsilon", 1e-6)), float(node.attr("norm_coefficient", 0.0))
    post = float(node.attr("norm_coefficient_post", 0.0))
    updates = []
    for x, g, v, h in tensor_groups(node, 4, 3):
        s, e = Step(node, x), node.e
        g = s.regularized(g, norm)
        v_new = s.lin(alpha, v, 1 - alpha, g)
        h_new = s.lin(beta, h, 1 - beta, e.mul(g, g))
        # bias correction from the first step on: R * sqrt(1 - beta^T) / (1 - alpha^T)
        corrected = e.div(e.mul(s.r, e.value(o.SqrtOp(e.sub(s.c(1.0), s.power(beta))))),
                          e.sub(s.c(1.0), s.power(alpha)))
        rate = e.select(s.started, corrected, s.r)
        x_new = e.sub(x, e.mul(rate, e.div(v_new, s.root(h_new, epsilon))))
        updates.append((e.mul(s.c(1 - post), x_new), v_new, h_new))
    return by_output(updates)


@converter("ai.onnx.preview.training.Momentum", since=1)
def momentum(node: Node) -> Values:
    missing = [a for a in ("alpha", "beta", "mode", "norm_coefficient") if node.attr(a) is None]
    if missing:
        raise node.fail(f"attribute {missing[0]} is required")
    alpha, beta, norm = float(node.attr("alpha")), float(node.attr("beta")), float(node.attr("norm_coefficient"))
    mode = node.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise node.fail(f"mode '{mode}': 'standard' or 'nesterov' expected")
    updates = []
    for x, g, v in tensor_groups(node, 3, 2):
        s, e = Step(node, x), node.e
        g = s.regularized(g, norm)
        step_size = e.select(s.started, s.c(beta), s.c(1.0))  # the gradient's coefficient is 1 at T = 0
        v_new = e.add(e.mul(s.c(alpha), v), e.mul(step_size, g))
        direction = v_new if mode == "standard" else e.add(g, e.mul(s.c(alpha), v_new))
        updates.append((e.sub(x, e.mul(s.r, direction)), v_new))
    return by_output(updates)
