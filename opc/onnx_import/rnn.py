"""ONNX's recurrent layers, LSTM, GRU and RNN, as opc ops unrolled over the sequence.

opc shapes are static, so the sequence length is known when a model is imported; each
time step becomes its own small group of ops (a GEMM with the recurrent weights, the
gate math, slices). Why unrolled rather than a loop op: the gate math of one step is
a chain of elementwise ops that the scheduler runs as one kernel, the input projection
of every step is one GEMM over the whole sequence, and the gradient through time needs
nothing new, since autodiff differentiates the unrolled ops like any others. The price is
compile time and code size linear in the sequence length, which suits the short
sequences of exported classifiers, not sequences of thousands of steps.

Supported as PyTorch exports them: directions forward, reverse and bidirectional; layout 0
and 1; activations Sigmoid, Tanh and Relu (LSTM and GRU default to Sigmoid/Tanh/Tanh, RNN to
Tanh); `clip`; LSTM peepholes and `input_forget`; GRU `linear_before_reset`; biases and
initial states present or absent; `sequence_lens` absent or equal to the sequence length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import shape_of
from opc.onnx_import.common import Values
from opc.onnx_import.graph import Node, converter, same_since

Activation = Callable[[SSAValue], SSAValue]
Step = Callable[[SSAValue, int, list[SSAValue]], list[SSAValue]]  # (h_prev, t, states) -> new states

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
ACTIVATIONS = {"Sigmoid": o.SigmoidOp, "Tanh": o.TanhOp, "Relu": o.ReluOp}


@dataclass
class Layer:
    """What every recurrent node has: sizes, direction, the per-step input projections."""

    node: Node
    seq: int
    batch: int
    hidden: int
    directions: list[str]  # "forward" / "reverse", one per direction, in ONNX's order
    acts: list[list[Activation]]  # per direction, the activations in the op's order

    @property
    def e(self):  # noqa: ANN201 - the node's emitter
        return self.node.e

    def weight(self, i: int, d: int) -> SSAValue:
        """W, R or B of direction d: [rows, cols] (B: [rows])."""
        shape = self.node.shape(i)
        x = self.node.input(i)
        if shape[0] != 1:  # one direction of two; of one, the reshape alone (a view: no copy of the weight)
            x = self.e.value(o.SliceOp(x, [d] + [0] * (len(shape) - 1), [d + 1, *shape[1:]]))
        return self.e.reshape(x, shape[1:])

    def columns(self, v: SSAValue, start: int, size: int) -> SSAValue:
        """Columns [start, start + size) of a [batch, n] value: one gate's block."""
        batch = shape_of(v)[0]
        return self.e.value(o.SliceOp(v, [0, start], [batch, start + size]))

    def rows(self, w: SSAValue, start: int, size: int) -> SSAValue:
        """Rows [start, start + size) of a [n, cols] weight: one gate's weights."""
        cols = shape_of(w)[1]
        return self.e.value(o.SliceOp(w, [start, 0], [start + size, cols]))

    def gate(self, v: SSAValue, k: int) -> SSAValue:
        return self.columns(v, k * self.hidden, self.hidden)

    def clip(self, v: SSAValue) -> SSAValue:
        limit = self.node.attr("clip")
        if limit is None:
            return v
        hi = self.e.full(float(limit), v)
        return self.e.value(o.MaximumOp(self.e.value(o.MinimumOp(v, hi)), self.e.neg(hi)))

    def activate(self, d: int, k: int, v: SSAValue) -> SSAValue:
        return self.acts[d][k](self.clip(v))

    def input_projection(self, xs: SSAValue, d: int, with_recurrent_bias: bool = True) -> SSAValue:
        """X W^T + Wb (+ Rb) for every step at once: one GEMM, [seq, batch, gates * hidden]."""
        node, e = self.node, self.e
        n = GATES[node.op_type] * self.hidden
        x2 = e.reshape(xs, [self.seq * self.batch, node.shape(0)[-1]])
        proj = e.matmul(x2, self.weight(1, d), trans_y=True)
        if node.has(3):
            bias = self.weight(3, d)
            b = e.value(o.SliceOp(bias, [0], [n]))
            if with_recurrent_bias:
                b = e.add(b, e.value(o.SliceOp(bias, [n], [2 * n])))
            proj = e.add(proj, b)
        return e.reshape(proj, [self.seq, self.batch, n])

    def recurrent_bias(self, d: int) -> SSAValue | None:
        """GRU's Rb ([3 * hidden]), added per step (Rbh must stay inside the reset gate's product)."""
        if not self.node.has(3):
            return None
        n = 3 * self.hidden
        return self.e.value(o.SliceOp(self.weight(3, d), [n], [2 * n]))

    def step_input(self, proj: SSAValue, t: int) -> SSAValue:
        n = shape_of(proj)[-1]
        step = self.e.value(o.SliceOp(proj, [t, 0, 0], [t + 1, self.batch, n]))
        return self.e.reshape(step, [self.batch, n])

    def initial(self, i: int, d: int) -> SSAValue:
        """initial_h (i = 5) or initial_c (i = 6) of direction d, zeros when absent: [batch, hidden]."""
        if self.node.has(i):
            state = self.node.input(i)
            if self.node.attr("layout", 0):  # [batch, directions, hidden]
                state = self.e.transpose(state, [1, 0, 2])
            shape = shape_of(state)
            x = self.e.value(o.SliceOp(state, [d, 0, 0], [d + 1, *shape[1:]]))
            return self.e.reshape(x, [self.batch, self.hidden])
        return self.e.full(0.0, o.tensor([self.batch, self.hidden], self.node.element(0)))


def layer(node: Node) -> tuple[Layer, SSAValue]:
    """The layer's description and X as [seq, batch, input]."""
    kind = node.op_type
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node.fail(f"direction '{direction}' is not one of forward, reverse, bidirectional")
    directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    x = node.input(0)
    layout = node.attr("layout", 0)
    if layout not in (0, 1):
        raise node.fail(f"layout {layout} is not 0 or 1")
    if len(node.shape(0)) != 3:
        raise node.fail(f"X must have rank 3, got shape {list(node.shape(0))}")
    if layout == 1:
        x = node.e.transpose(x, [1, 0, 2])
    seq, batch, _ = shape_of(x)
    hidden = node.attr("hidden_size")
    if hidden is None:
        hidden = node.shape(2)[-1]
    if node.has(4):
        lens = node.const(4, "sequence_lens").reshape(-1)
        if not np.all(lens == seq):
            raise node.fail(f"sequence_lens {lens.tolist()} differ from the sequence length {seq}: opc runs "
                            "every sequence to its full length")
    if node.attr("activation_alpha") or node.attr("activation_beta"):
        raise node.fail("activation_alpha / activation_beta are not supported (only Sigmoid, Tanh, Relu)")
    names = [n.decode() if isinstance(n, bytes) else n for n in node.attr("activations") or []]
    names = names or DEFAULT_ACTIVATIONS[kind] * len(directions)
    per = len(DEFAULT_ACTIVATIONS[kind])
    if len(names) != per * len(directions):
        raise node.fail(f"activations lists {len(names)} functions; {kind} takes {per} per direction")
    acts = []
    for d in range(len(directions)):
        fns = []
        for name in names[d * per:(d + 1) * per]:
            if name not in ACTIVATIONS:
                raise node.fail(f"activation '{name}' is not supported (expected one of {', '.join(ACTIVATIONS)})")
            fns.append(lambda v, cls=ACTIVATIONS[name]: node.e.value(cls(v)))
        acts.append(fns)
    return Layer(node, seq, batch, int(hidden), directions, acts), x


def run_direction(lay: Layer, d: int, step: Step, states: list[SSAValue]) -> tuple[list[SSAValue], list[SSAValue]]:
    """Run `step` over the sequence in direction d: the hidden state at every time index
    (in time order, whatever the direction) and the final states."""
    order = range(lay.seq) if lay.directions[d] == "forward" else range(lay.seq - 1, -1, -1)
    hs: dict[int, SSAValue] = {}
    for t in order:
        states = step(states[0], t, states)
        hs[t] = states[0]
    return [hs[t] for t in range(lay.seq)], states


def outputs(lay: Layer, per_direction: list[tuple[list[SSAValue], list[SSAValue]]]) -> Values:
    """Y [seq, directions, batch, hidden], then the final states [directions, batch, hidden]
    (layout 1: [batch, seq, directions, hidden] and [batch, directions, hidden])."""
    e, nd = lay.e, len(lay.directions)
    step_shape = [1, 1, lay.batch, lay.hidden]
    by_dir = []
    for hs, _ in per_direction:
        steps = [e.reshape(h, step_shape) for h in hs]
        by_dir.append(steps[0] if len(steps) == 1 else e.value(o.ConcatOp(steps, 0)))
    y = by_dir[0] if nd == 1 else e.value(o.ConcatOp(by_dir, 1))
    finals = []
    for k in range(len(per_direction[0][1])):
        parts = [e.reshape(states[k], [1, lay.batch, lay.hidden]) for _, states in per_direction]
        finals.append(parts[0] if nd == 1 else e.value(o.ConcatOp(parts, 0)))
    if lay.node.attr("layout", 0):
        y = e.transpose(y, [2, 0, 1, 3])
        finals = [e.transpose(f, [1, 0, 2]) for f in finals]
    return [y, *finals]


def unrolled(node: Node, cell: Callable[[Layer, SSAValue, int], tuple[Step, list[SSAValue]]]) -> Values:
    """Each direction's steps, from the (step, initial states) that `cell` makes for direction d."""
    lay, x = layer(node)
    return outputs(lay, [run_direction(lay, d, *cell(lay, x, d)) for d in range(len(lay.directions))])


@converter("LSTM")
def lstm(node: Node) -> Values:
    input_forget = node.attr("input_forget", 0)

    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[Step, list[SSAValue]]:
        e, h = lay.e, lay.hidden
        proj = lay.input_projection(x, d)
        r = lay.weight(2, d)
        # peepholes i, o, f ([3 * hidden]), sliced once per direction, not once per step
        peeps = ([e.value(o.SliceOp(lay.weight(7, d), [k * h], [(k + 1) * h])) for k in range(3)]
                 if node.has(7) else None)

        def with_peephole(v: SSAValue, k: int, c: SSAValue, peeps: list[SSAValue] | None = peeps) -> SSAValue:
            return v if peeps is None else e.add(v, e.mul(peeps[k], c))

        def step(h_prev: SSAValue, t: int, states: list[SSAValue], d: int = d, proj: SSAValue = proj,
                 r: SSAValue = r) -> list[SSAValue]:
            c_prev = states[1]
            pre = e.add(lay.step_input(proj, t), e.matmul(h_prev, r, trans_y=True))  # gates i, o, f, c
            i = lay.activate(d, 0, with_peephole(lay.gate(pre, 0), 0, c_prev))
            f = (e.sub(e.full(1.0, i), i) if input_forget
                 else lay.activate(d, 0, with_peephole(lay.gate(pre, 2), 2, c_prev)))
            g = lay.activate(d, 1, lay.gate(pre, 3))
            c = e.add(e.mul(f, c_prev), e.mul(i, g))
            out = lay.activate(d, 0, with_peephole(lay.gate(pre, 1), 1, c))
            # clip bounds the gates' pre-activations, not the cell state h reads (onnxruntime's LSTM)
            return [e.mul(out, lay.acts[d][2](c)), c]

        return step, [lay.initial(5, d), lay.initial(6, d)]

    return unrolled(node, cell)


@converter("GRU")
def gru(node: Node) -> Values:
    before_reset = node.attr("linear_before_reset", 0)

    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[Step, list[SSAValue]]:
        e, h = lay.e, lay.hidden
        proj = lay.input_projection(x, d, with_recurrent_bias=False)  # X W^T + Wb, gates z, r, h
        # per direction, not per step: R's z/r rows and h rows, and Rb's matching parts
        r_w = lay.weight(2, d)
        r_zr, r_h = lay.rows(r_w, 0, 2 * h), lay.rows(r_w, 2 * h, h)
        rb = lay.recurrent_bias(d)
        rb_zr, rb_h = (None, None) if rb is None else (e.value(o.SliceOp(rb, [0], [2 * h])),
                                                       e.value(o.SliceOp(rb, [2 * h], [3 * h])))

        def step(h_prev: SSAValue, t: int, states: list[SSAValue], d: int = d, proj: SSAValue = proj,
                 r_zr: SSAValue = r_zr, r_h: SSAValue = r_h, rb_zr: SSAValue | None = rb_zr,
                 rb_h: SSAValue | None = rb_h) -> list[SSAValue]:
            xw = lay.step_input(proj, t)
            rec = e.matmul(h_prev, r_zr, trans_y=True)  # H R_zr^T
            if rb_zr is not None:
                rec = e.add(rec, rb_zr)
            z = lay.activate(d, 0, e.add(lay.gate(xw, 0), lay.gate(rec, 0)))
            r = lay.activate(d, 0, e.add(lay.gate(xw, 1), lay.gate(rec, 1)))
            if before_reset:
                lin = e.matmul(h_prev, r_h, trans_y=True)
                cand = e.mul(r, lin if rb_h is None else e.add(lin, rb_h))
            else:
                cand = e.matmul(e.mul(r, h_prev), r_h, trans_y=True)
                cand = cand if rb_h is None else e.add(cand, rb_h)
            hh = lay.activate(d, 1, e.add(lay.gate(xw, 2), cand))
            return [e.add(e.mul(e.sub(e.full(1.0, z), z), hh), e.mul(z, h_prev))]

        return step, [lay.initial(5, d)]

    return unrolled(node, cell)


@converter("RNN")
def rnn(node: Node) -> Values:
    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[Step, list[SSAValue]]:
        e = lay.e
        proj = lay.input_projection(x, d)
        r = lay.weight(2, d)

        def step(h_prev: SSAValue, t: int, states: list[SSAValue], d: int = d, proj: SSAValue = proj,
                 r: SSAValue = r) -> list[SSAValue]:
            return [lay.activate(d, 0, e.add(lay.step_input(proj, t), e.matmul(h_prev, r, trans_y=True)))]

        return step, [lay.initial(5, d)]

    return unrolled(node, cell)


# Opsets 1 to 13: no layout attribute (layout 0); opset 1's output_sequence only says whether Y is wanted,
# which the node's outputs say too; GRU's linear_before_reset (from 3) is 0 when absent.
same_since({1: ("LSTM", "GRU", "RNN")})
