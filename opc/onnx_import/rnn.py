"""ONNX's recurrent layers, LSTM, GRU and RNN, as opc ops: one `scf.for` over the sequence.

The input projection of every step is one GEMM over the whole sequence, before the loop (as
onnxruntime and cuDNN do); the loop's body, compiled once whatever the sequence length, reads
its step's rows of that projection, does the recurrent GEMM and the gate math (a chain of
elementwise ops the scheduler runs as one kernel), and carries h (and c) and Y, the hidden state
of every step. The gradient through time is opc-grad's through scf.for: a backward loop in
reverse over the carried values saved per step.

Supported as PyTorch exports them: directions forward, reverse and bidirectional (a loop each);
layout 0 and 1; activations Sigmoid, Tanh and Relu (LSTM and GRU default to Sigmoid/Tanh/Tanh,
RNN to Tanh); `clip`; LSTM peepholes and `input_forget`; GRU `linear_before_reset`; biases and
initial states present or absent; `sequence_lens` absent or equal to the sequence length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block, Region, SSAValue

from opc.dialects import opc as o
from opc.dialects import slices
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import Values
from opc.onnx_import.control_flow import index, size_index
from opc.onnx_import.graph import Node, NodeEmitter, converter, same_since
from opc.symbolic import Sym

Activation = Callable[[SSAValue], SSAValue]
Step = Callable[[SSAValue, list[SSAValue]], list[SSAValue]]  # (input projection of the step, states) -> new states

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
        if isinstance(seq, Sym):
            raise node.fail("sequence_lens with a run-time (?) sequence length: opc runs every sequence to its "
                            "full length, which it cannot check against sequence_lens before the call")
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


def over_time(lay: Layer, d: int, proj: SSAValue, step: Step,
              states: list[SSAValue]) -> tuple[SSAValue, list[SSAValue]]:
    """An scf.for over the sequence in direction d, its body `step` once, carrying the states and Y
    ([seq, batch, hidden], the hidden state of every time index, in time order whatever the
    direction): (Y, the final states)."""
    e = lay.e
    y_shape = [lay.seq, lay.batch, lay.hidden]
    y0 = e.value(o.FullOp(0.0, o.tensor(y_shape, element_of(states[0])), e.size_operands(y_shape)))
    forward = lay.directions[d] == "forward"
    last = None if forward else e.value(arith.SubiOp(size_index(e, lay.seq), index(e, 1)))  # outside: a body sees it
    carried = [*states, y0]

    def body(args: Sequence[SSAValue]) -> list[SSAValue]:
        i, now, y = args[0], list(args[1:-1]), args[-1]
        t = i if last is None else e.value(arith.SubiOp(last, i))
        new = step(time_step(e, proj, t), now)
        return [*new, write_step(e, y, new[0], t)]

    block = Block(arg_types=[IndexType(), *(v.type for v in carried)])
    if e.tracker is not None:  # the body's carried values have the sizes they enter with
        e.tracker.sizes.carry(carried, block.args[1:])
    outer, e.ops = e.ops, []
    try:
        out = body(block.args)
    finally:
        inner, e.ops = e.ops, outer
    block.add_ops([*inner, scf.YieldOp(*out)])
    loop = e.emit(scf.ForOp(index(e, 0), size_index(e, lay.seq), index(e, 1), carried, Region(block)))
    return loop.results[-1], list(loop.results[:-1])


def time_step(e: NodeEmitter, proj: SSAValue, t: SSAValue) -> SSAValue:
    """proj[t] ([batch, n] of [seq, batch, n]) at a time index known at run time: a view, no copy."""
    _, batch, n = shape_of(proj)
    return e.value(slices.extract_slice(proj, [t, 0, 0], [1, batch, n], [1, 1, 1],
                                        o.tensor([batch, n], element_of(proj))))


def write_step(e: NodeEmitter, y: SSAValue, h: SSAValue, t: SSAValue) -> SSAValue:
    """y with y[t] = h."""
    return e.value(slices.insert_slice(h, y, [t, 0, 0], [1, *shape_of(h)], [1, 1, 1]))


def outputs(lay: Layer, per_direction: list[tuple[SSAValue, list[SSAValue]]]) -> Values:
    """Y [seq, directions, batch, hidden], then the final states [directions, batch, hidden]
    (layout 1: [batch, seq, directions, hidden] and [batch, directions, hidden])."""
    e, nd = lay.e, len(lay.directions)
    by_dir = [e.reshape(y, [lay.seq, 1, lay.batch, lay.hidden]) for y, _ in per_direction]
    y = by_dir[0] if nd == 1 else e.value(o.ConcatOp(by_dir, 1))
    finals = []
    for k in range(len(per_direction[0][1])):
        parts = [e.reshape(states[k], [1, lay.batch, lay.hidden]) for _, states in per_direction]
        finals.append(parts[0] if nd == 1 else e.value(o.ConcatOp(parts, 0)))
    if lay.node.attr("layout", 0):
        y = e.transpose(y, [2, 0, 1, 3])
        finals = [e.transpose(f, [1, 0, 2]) for f in finals]
    return [y, *finals]


def looped(node: Node, cell: Callable[[Layer, SSAValue, int], tuple[SSAValue, Step, list[SSAValue]]]) -> Values:
    """Each direction's loop, from the (input projection, step, initial states) that `cell` makes for
    direction d."""
    lay, x = layer(node)
    per_direction = []
    for d in range(len(lay.directions)):
        proj, step, states = cell(lay, x, d)
        if lay.seq == 0:  # no step: an empty Y, the final states the initial ones (h_T at T = 0 is h_0;
            # onnxruntime returns memory it never wrote there, and aborts on GRU)
            per_direction.append((lay.e.full(0.0, o.tensor([0, lay.batch, lay.hidden], node.element(0))), states))
        else:
            per_direction.append(over_time(lay, d, proj, step, states))
    return outputs(lay, per_direction)


@converter("LSTM")
def lstm(node: Node) -> Values:
    input_forget = node.attr("input_forget", 0)

    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[SSAValue, Step, list[SSAValue]]:
        e, h = lay.e, lay.hidden
        proj = lay.input_projection(x, d)
        r = lay.weight(2, d)
        # peepholes i, o, f ([3 * hidden]), sliced once per direction, not once per step
        peeps = ([e.value(o.SliceOp(lay.weight(7, d), [k * h], [(k + 1) * h])) for k in range(3)]
                 if node.has(7) else None)

        def with_peephole(v: SSAValue, k: int, c: SSAValue, peeps: list[SSAValue] | None = peeps) -> SSAValue:
            return v if peeps is None else e.add(v, e.mul(peeps[k], c))

        def step(xw: SSAValue, states: list[SSAValue], d: int = d, r: SSAValue = r) -> list[SSAValue]:
            h_prev, c_prev = states
            pre = e.add(xw, e.matmul(h_prev, r, trans_y=True))  # gates i, o, f, c
            i = lay.activate(d, 0, with_peephole(lay.gate(pre, 0), 0, c_prev))
            f = (e.sub(e.full(1.0, i), i) if input_forget
                 else lay.activate(d, 0, with_peephole(lay.gate(pre, 2), 2, c_prev)))
            g = lay.activate(d, 1, lay.gate(pre, 3))
            c = e.add(e.mul(f, c_prev), e.mul(i, g))
            out = lay.activate(d, 0, with_peephole(lay.gate(pre, 1), 1, c))
            # clip bounds the gates' pre-activations, not the cell state h reads (onnxruntime's LSTM)
            return [e.mul(out, lay.acts[d][2](c)), c]

        return proj, step, [lay.initial(5, d), lay.initial(6, d)]

    return looped(node, cell)


@converter("GRU")
def gru(node: Node) -> Values:
    before_reset = node.attr("linear_before_reset", 0)

    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[SSAValue, Step, list[SSAValue]]:
        e, h = lay.e, lay.hidden
        proj = lay.input_projection(x, d, with_recurrent_bias=False)  # X W^T + Wb, gates z, r, h
        # per direction, not per step: R's z/r rows and h rows, and Rb's matching parts
        r_w = lay.weight(2, d)
        r_zr, r_h = lay.rows(r_w, 0, 2 * h), lay.rows(r_w, 2 * h, h)
        rb = lay.recurrent_bias(d)
        rb_zr, rb_h = (None, None) if rb is None else (e.value(o.SliceOp(rb, [0], [2 * h])),
                                                       e.value(o.SliceOp(rb, [2 * h], [3 * h])))

        def step(xw: SSAValue, states: list[SSAValue], d: int = d, r_zr: SSAValue = r_zr, r_h: SSAValue = r_h,
                 rb_zr: SSAValue | None = rb_zr, rb_h: SSAValue | None = rb_h) -> list[SSAValue]:
            (h_prev,) = states
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

        return proj, step, [lay.initial(5, d)]

    return looped(node, cell)


@converter("RNN")
def rnn(node: Node) -> Values:
    def cell(lay: Layer, x: SSAValue, d: int) -> tuple[SSAValue, Step, list[SSAValue]]:
        e = lay.e
        proj = lay.input_projection(x, d)
        r = lay.weight(2, d)

        def step(xw: SSAValue, states: list[SSAValue], d: int = d, r: SSAValue = r) -> list[SSAValue]:
            return [lay.activate(d, 0, e.add(xw, e.matmul(states[0], r, trans_y=True)))]

        return proj, step, [lay.initial(5, d)]

    return looped(node, cell)


# Opsets 1 to 13: no layout attribute (layout 0); opset 1's output_sequence only says whether Y is wanted,
# which the node's outputs say too; GRU's linear_before_reset (from 3) is 0 when absent.
same_since({1: ("LSTM", "GRU", "RNN")})
