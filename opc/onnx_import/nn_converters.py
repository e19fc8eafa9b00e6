"""Converters of the ONNX ops of convolutional networks (issue 19): Conv,
ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
BatchNormalization, InstanceNormalization, GroupNormalization. They map onto
opc's conv / pool / norm ops; `auto_pad` becomes explicit pads here (ONNX's
formulas), a bias becomes a per-channel `add`. What opc cannot express (a bad
stride, a group that does not divide the channels) fails in the op's verifier,
whose message the importer prefixes with the node."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects import opc as o
from opc.onnx_import.graph import Node, converter

Values = list[SSAValue | np.ndarray]


def built(node: Node, name: str, make: Callable[[], Operation]) -> Operation:
    """make(), emitted; a shape its constructor rejects fails naming the node, as the emitter's verifier does."""
    try:
        op = make()
    except VerifyException as err:
        raise node.fail(f"cannot express it in opc: opc.{name}: {str(err).splitlines()[0]}") from None
    node.e.emit(op)
    return op


def ints(node: Node, name: str, count: int, default: int) -> list[int]:
    v = node.attr(name)
    return [default] * count if v is None else [int(a) for a in v]


def same_pads(node: Node, inp: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> list[int]:
    """Explicit pads (begins, then ends) for auto_pad: SAME_UPPER / SAME_LOWER keep ceil(i / s) outputs
    (the odd pad at the end / the beginning), VALID none, NOTSET the `pads` attribute."""
    r = len(inp)
    mode = node.attr("auto_pad", "NOTSET")
    if mode == "NOTSET":
        return ints(node, "pads", 2 * r, 0)
    if mode == "VALID":
        return [0] * (2 * r)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"auto_pad '{mode}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begins, ends = [], []
    for i, k, s, d in zip(inp, kernel, strides, dilations):
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins + ends


def with_bias(node: Node, y: SSAValue, i: int) -> SSAValue:
    """y + B (input i, [C]) broadcast per channel, if the node has one."""
    if not node.has(i):
        return y
    b = node.input(i)
    rank = len(y.type.get_shape())  # type: ignore[attr-defined]
    return node.e.add(y, node.e.reshape(b, [b.type.get_shape()[0], *[1] * (rank - 2)]))  # type: ignore[attr-defined]


def spatial(node: Node, i: int = 0) -> tuple[int, ...]:
    shape = node.shape(i)
    if len(shape) < 3:
        raise node.fail(f"input {i} must be [N, C, *spatial] with 1 or more spatial dims, got shape {list(shape)}")
    return shape[2:]


@converter("Conv")
def conv(node: Node) -> Values:
    inp, kernel = spatial(node), node.shape(1)[2:]
    r = len(inp)
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    pads = same_pads(node, inp, kernel, strides, dilations)
    x, w, group = node.input(0), node.input(1), int(node.attr("group", 1))
    y = built(node, "conv", lambda: o.ConvOp.of(x, w, strides, dilations, pads, group)).results[0]
    return [with_bias(node, y, 2)]


@converter("ConvTranspose")
def conv_transpose(node: Node) -> Values:
    """ONNX's pads, or pads from output_shape / SAME (total = s (i - 1) + output_padding + (k - 1) d + 1 - out)."""
    inp, kernel = spatial(node), node.shape(1)[2:]
    r = len(inp)
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    extra = ints(node, "output_padding", r, 0)
    shape = node.attr("output_shape")
    mode = node.attr("auto_pad", "NOTSET")
    if shape is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        shape = [i * s for i, s in zip(inp, strides)]
    if shape is not None:
        shape = list(shape)[-r:]
        begins, ends = [], []
        for i, k, s, d, p, want in zip(inp, kernel, strides, dilations, extra, shape):
            total = s * (i - 1) + p + (k - 1) * d + 1 - want
            if total < 0:
                raise node.fail(f"output_shape {list(shape)} is larger than the input gives; opc cannot pad it")
            upper = mode == "SAME_UPPER"  # ONNX: the larger half begins, except for SAME_UPPER
            begins.append(total // 2 if upper else total - total // 2)
            ends.append(total - begins[-1])
        pads = begins + ends
    else:
        pads = [0] * (2 * r) if mode == "VALID" else ints(node, "pads", 2 * r, 0)
    x, w, group = node.input(0), node.input(1), int(node.attr("group", 1))
    y = built(node, "conv_transpose", lambda: o.ConvTransposeOp.of(x, w, strides, dilations, pads, group,
                                                                   extra if any(extra) else None)).results[0]
    return [with_bias(node, y, 2)]


def pool_props(node: Node, average: bool) -> dict:
    inp = spatial(node)
    r = len(inp)
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise node.fail("kernel_shape is required")
    kernel = [int(k) for k in kernel]
    strides, dilations = ints(node, "strides", r, 1), ints(node, "dilations", r, 1)
    if int(node.attr("storage_order", 0)) != 0:
        raise node.fail("storage_order 1 (column-major indices) is not supported")
    props = {"kernel": o.i64_array(kernel), "strides": o.i64_array(strides), "dilations": o.i64_array(dilations),
             "pads": o.i64_array(same_pads(node, inp, kernel, strides, dilations)),
             "ceil_mode": o.BoolAttr.from_bool(bool(node.attr("ceil_mode", 0)))}
    if average:
        props["count_include_pad"] = o.BoolAttr.from_bool(bool(node.attr("count_include_pad", 0)))
    return props


@converter("MaxPool")
def max_pool(node: Node) -> Values:
    x, props = node.input(0), pool_props(node, False)
    op = built(node, "max_pool", lambda: o.MaxPoolOp(x, props))
    return list(op.results)


@converter("AveragePool")
def average_pool(node: Node) -> Values:
    x, props = node.input(0), pool_props(node, True)
    return [built(node, "avg_pool", lambda: o.AvgPoolOp(x, props)).results[0]]


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: Node) -> Values:
    axes = list(range(2, 2 + len(spatial(node))))
    op = o.ReduceMeanOp if node.op_type == "GlobalAveragePool" else o.ReduceMaxOp
    return [node.e.value(op(node.input(0), axes, True))]


def like_x(node: Node, i: int) -> SSAValue:
    """Input i in x's element type (ONNX lets the statistics have their own)."""
    v = node.input(i)
    el = node.element(0)
    return v if v.type.element_type == el else node.e.cast(v, el)  # type: ignore[attr-defined]


@converter("BatchNormalization")
def batch_norm(node: Node) -> Values:
    """Inference: Y. training_mode = 1 (opset 14 on): Y, running_mean, running_var."""
    training = bool(node.attr("training_mode", 0))
    if int(node.attr("spatial", 1)) != 1:
        raise node.fail("spatial = 0 (statistics per element) is not supported")
    op = o.BatchNormOp(node.input(0), *(like_x(node, i) for i in range(1, 5)), float(node.attr("epsilon", 1e-5)),
                       float(node.attr("momentum", 0.9)), training)
    node.e.emit(op)
    if not training:
        return [op.y]
    outs = [op.y, op.stats[0], op.stats[1]]
    return [v if i == 0 else narrow_to(node, v, i + 2) for i, v in enumerate(outs)]


def narrow_to(node: Node, v: SSAValue, i: int) -> SSAValue:
    """v cast to the element type of node input i (running statistics keep the statistics' type)."""
    el = node.element(i)
    return v if v.type.element_type == el else node.e.cast(v, el)  # type: ignore[attr-defined]


@converter("InstanceNormalization")
def instance_norm(node: Node) -> Values:
    op = o.InstanceNormOp(node.input(0), node.input(1), node.input(2), float(node.attr("epsilon", 1e-5)))
    node.e.emit(op)
    return [op.y]


@converter("GroupNormalization", since=18)
def group_norm(node: Node) -> Values:
    """Opset 18 gives scale and bias per group (repeated over its channels here); opset 21 per channel."""
    groups = int(node.attr("num_groups"))
    c = node.shape(0)[1]
    e = node.e

    def per_channel(v: SSAValue) -> SSAValue:
        n = v.type.get_shape()[0]  # type: ignore[attr-defined]
        if n == c or groups == 0 or c % groups or n != groups:
            return v
        rows = e.broadcast_to(e.reshape(v, [groups, 1]), [groups, c // groups])
        return e.reshape(rows, [c])

    op = o.GroupNormOp(node.input(0), per_channel(node.input(1)), per_channel(node.input(2)), groups,
                       float(node.attr("epsilon", 1e-5)))
    e.emit(op)
    return [op.y]


# ---------------------------------------------------------------------------
# Recurrent networks: unrolled over the static sequence length
# ---------------------------------------------------------------------------
# opc shapes are static, so the time loop is unrolled into opc ops: the scheduler and the
# GEMM see plain matmuls, and gradients through time come from the ordinary vjps (no loop
# op to differentiate). Cost: the IR grows linearly with the sequence length.

ACTIVATIONS = {"Sigmoid": o.SigmoidOp, "Tanh": o.TanhOp, "Relu": o.ReluOp}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def rnn_checks(node: Node, seq: int, batch: int) -> None:
    if int(node.attr("layout", 0)) != 0:
        raise node.fail("layout 1 (batch first) is not supported")
    if node.attr("clip") is not None:
        raise node.fail("clip is not supported")
    if int(node.attr("input_forget", 0)) != 0:
        raise node.fail("input_forget is not supported")
    if node.has(4):
        lens = node.const(4, "sequence_lens")
        if lens.shape != (batch,) or not np.all(lens == seq):
            raise node.fail(f"sequence_lens must be absent or all {seq} (full sequences); got {lens.tolist()}")
    if node.op_type == "LSTM" and node.has(7):
        raise node.fail("peephole weights (input P) are not supported")


def rnn_activations(node: Node, dirs: int) -> list[list[type]]:
    names = node.attr("activations") or DEFAULT_ACTS[node.op_type] * dirs
    per = len(DEFAULT_ACTS[node.op_type])
    if len(names) != per * dirs:
        raise node.fail(f"activations has {len(names)} entries, expected {per * dirs}")
    if node.attr("activation_alpha") is not None or node.attr("activation_beta") is not None:
        raise node.fail("activation_alpha / activation_beta are not supported")
    unknown = [n for n in names if n not in ACTIVATIONS]
    if unknown:
        raise node.fail(f"activation {unknown[0]} is not supported (Sigmoid, Tanh, Relu)")
    return [[ACTIVATIONS[n] for n in names[d * per:(d + 1) * per]] for d in range(dirs)]


@converter("RNN", "GRU", "LSTM")
def recurrent(node: Node) -> Values:
    """Y [seq, dirs, batch, hidden], Y_h [dirs, batch, hidden] (and LSTM's Y_c), ONNX's gate order
    (GRU z r h, LSTM i o f c), forward / reverse / bidirectional, GRU's linear_before_reset."""
    e, kind = node.e, node.op_type
    seq, batch, _ = node.shape(0)
    dirs, rows, _ = node.shape(1)
    hidden = rows // GATES[kind]
    rnn_checks(node, seq, batch)
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional") or (dirs == 2) != (direction == "bidirectional"):
        raise node.fail(f"direction '{direction}' does not fit W's {dirs} direction(s)")
    acts = rnn_activations(node, dirs)
    x, w, r = node.input(0), node.input(1), node.input(2)
    el = x.type.element_type  # type: ignore[attr-defined]

    def part(v: SSAValue, start: Sequence[int], limit: Sequence[int]) -> SSAValue:
        return e.value(o.SliceOp(v, start, limit, [1] * len(start)))

    def gate(v: SSAValue, k: int) -> SSAValue:
        """gate k of a [batch, gates * hidden] value"""
        return part(v, [0, k * hidden], [batch, (k + 1) * hidden])

    steps = [e.reshape(part(x, [t, 0, 0], [t + 1, batch, node.shape(0)[2]]), [batch, node.shape(0)[2]])
             for t in range(seq)]
    ys, finals, cells = [], [], []
    for d in range(dirs):
        wd = e.reshape(part(w, [d, 0, 0], [d + 1, rows, node.shape(1)[2]]), [rows, node.shape(1)[2]])
        rd = e.reshape(part(r, [d, 0, 0], [d + 1, rows, hidden]), [rows, hidden])
        if node.has(3):
            bias = e.reshape(part(node.input(3), [d, 0], [d + 1, 2 * rows]), [2 * rows])
            wb, rb = part(bias, [0], [rows]), part(bias, [rows], [2 * rows])
        else:
            wb = rb = e.full(0.0, o.tensor([rows], el))

        def initial(i: int) -> SSAValue:
            if node.has(i):
                return e.reshape(part(node.input(i), [d, 0, 0], [d + 1, batch, hidden]), [batch, hidden])
            return e.full(0.0, o.tensor([batch, hidden], el))

        h, c = initial(5), initial(6) if kind == "LSTM" else None
        f, g, act_h = acts[d][0], acts[d][1] if kind != "RNN" else acts[d][0], acts[d][-1]
        outs: list[SSAValue] = []
        forward = direction == "forward" or (direction == "bidirectional" and d == 0)
        order = range(seq) if forward else range(seq - 1, -1, -1)
        for t in order:
            xw = e.add(e.matmul(steps[t], wd, trans_y=True), wb)
            hr = e.add(e.matmul(h, rd, trans_y=True), rb)
            if kind == "RNN":
                h = e.value(f(e.add(xw, hr)))
            elif kind == "LSTM":
                i_, o_, f_, c_ = (e.value((f if k < 3 else g)(e.add(gate(xw, k), gate(hr, k)))) for k in range(4))
                c = e.add(e.mul(f_, c), e.mul(i_, c_))
                h = e.mul(o_, e.value(act_h(c)))
            else:
                z = e.value(f(e.add(gate(xw, 0), gate(hr, 0))))
                rr = e.value(f(e.add(gate(xw, 1), gate(hr, 1))))
                if int(node.attr("linear_before_reset", 0)):
                    cand = e.add(gate(xw, 2), e.mul(rr, gate(hr, 2)))
                else:
                    rh = e.matmul(e.mul(rr, h), part(rd, [2 * hidden, 0], [3 * hidden, hidden]), trans_y=True)
                    cand = e.add(e.add(gate(xw, 2), rh), part(rb, [2 * hidden], [3 * hidden]))
                hc = e.value(g(cand))
                h = e.add(e.mul(e.sub(e.full(1.0, z), z), hc), e.mul(z, h))
            outs.append(h)
        if order[0] != 0:
            outs.reverse()  # Y is in time order whichever way the direction ran
        ys.append(e.value(o.ConcatOp([e.reshape(v, [1, 1, batch, hidden]) for v in outs], 0)) if seq > 1
                  else e.reshape(outs[0], [1, 1, batch, hidden]))
        finals.append(e.reshape(h, [1, batch, hidden]))
        if c is not None:
            cells.append(e.reshape(c, [1, batch, hidden]))

    def stack(vs: list[SSAValue], axis: int) -> SSAValue:
        return vs[0] if len(vs) == 1 else e.value(o.ConcatOp(vs, axis))

    out = [stack(ys, 1), stack(finals, 0)]
    if kind == "LSTM":
        out.append(stack(cells, 0))
    return out
