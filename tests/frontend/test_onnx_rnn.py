"""ONNX LSTM, GRU and RNN (opc/onnx_import/rnn.py): every case imported into one
module; the forward against onnxruntime (f32), the gradient through time against central
differences of opc's own forward along random directions (f64, every argument at once)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx_helpers import call, function_name, helper, import_all, numpy_helper, onnx, run_ort

import opc

SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def case(op: str, direction: str = "forward", layout: int = 0, bias: bool = True, states: bool = False,
         dtype: type = np.float32, peephole: bool = False, **attrs):  # noqa: ANN201
    """(model, feeds) of one recurrent node, its weights as initializers, inputs in ONNX's order."""
    # the same numbers whatever the layout: a layout-1 case is its layout-0 twin transposed
    rng = np.random.default_rng(zlib.crc32(repr((op, direction, bias, states, peephole, attrs)).encode()))
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    swap = (lambda a: a.swapaxes(0, 1).copy()) if layout else (lambda a: a)
    feeds = {"X": swap(rng.uniform(-1, 1, (SEQ, BATCH, INPUT)).astype(dtype))}
    weights = {"W": rng.uniform(-0.5, 0.5, (nd, g * HIDDEN, INPUT)).astype(dtype),
               "R": rng.uniform(-0.5, 0.5, (nd, g * HIDDEN, HIDDEN)).astype(dtype)}
    names = ["X", "W", "R", "B" if bias else "", ""]  # ..., B, sequence_lens
    if bias:
        weights["B"] = rng.uniform(-0.5, 0.5, (nd, 2 * g * HIDDEN)).astype(dtype)
    for state in ["initial_h", "initial_c"] if op == "LSTM" else ["initial_h"]:
        names.append(state if states else "")
        if states:
            feeds[state] = swap(rng.uniform(-1, 1, (nd, BATCH, HIDDEN)).astype(dtype))
    if peephole:
        names.append("P")
        weights["P"] = rng.uniform(-0.5, 0.5, (nd, 3 * HIDDEN)).astype(dtype)
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outputs, name=f"the_{op}", hidden_size=HIDDEN, direction=direction,
                            layout=layout, **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in feeds.items()]
    inits = [numpy_helper.from_array(a, n) for n, a in weights.items()]
    opsets = [helper.make_opsetid("", 17)]
    graph = helper.make_graph([node], "main_graph", inputs, [helper.make_empty_tensor_value_info(n) for n in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


CASES = {
    **{f"{op}-{d}-layout{lay}": dict(op=op, direction=d, layout=lay)
       for op in GATES for d in ("forward", "reverse", "bidirectional") for lay in (0, 1)},
    **{f"{op}-nobias": dict(op=op, bias=False) for op in GATES},
    **{f"{op}-states-{d}": dict(op=op, states=True, direction=d) for op in GATES for d in ("forward", "bidirectional")},
    "GRU-linear_before_reset": dict(op="GRU", linear_before_reset=1, states=True),
    "GRU-linear_before_reset-bidi": dict(op="GRU", linear_before_reset=1, direction="bidirectional"),
    "LSTM-peephole": dict(op="LSTM", peephole=True, states=True),
    "LSTM-input_forget": dict(op="LSTM", input_forget=1),
    "LSTM-clip": dict(op="LSTM", clip=0.5),
    # a cell state past the clip: h(C) reads it unclipped (found by tests/support/fuzz_onnx.py)
    "LSTM-clip-cell": dict(op="LSTM", clip=0.1, states=True),
    "RNN-relu": dict(op="RNN", activations=["Relu"]),
    "RNN-relu-tanh-bidi": dict(op="RNN", activations=["Relu", "Tanh"], direction="bidirectional"),
    "GRU-tanh-sigmoid": dict(op="GRU", activations=["Tanh", "Sigmoid"]),
}


@pytest.fixture(scope="module")
def compiled():
    built = {cid: case(**spec) for cid, spec in CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module), params, {cid: f for cid, (_, f) in built.items()}, built


def onnxruntime_outputs(cid: str) -> list[np.ndarray]:
    """onnxruntime's outputs; it runs layout 0 only, so a layout-1 case runs as its twin, transposed."""
    spec = CASES[cid]
    model, feeds = case(**{**spec, "layout": 0})
    outs = run_ort(model, feeds)
    if spec.get("layout"):
        outs = [outs[0].transpose(2, 0, 1, 3), *(o.swapaxes(0, 1) for o in outs[1:])]
    return outs


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str) -> None:
    m, params, feeds, built = compiled
    want = onnxruntime_outputs(cid)
    got = call(m, cid, feeds[cid], params[cid])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


GRAD_CASES = ["LSTM-forward-layout0", "LSTM-bidirectional-layout1", "LSTM-peephole", "GRU-reverse-layout0",
              "GRU-linear_before_reset", "RNN-bidirectional-layout0", "RNN-relu", "LSTM-states-bidirectional"]


@pytest.fixture(scope="module")
def compiled64():
    built = {cid: case(**CASES[cid], dtype=np.float64) for cid in GRAD_CASES}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module, grad=True), params, {cid: f for cid, (_, f) in built.items()}


@pytest.mark.parametrize("cid", GRAD_CASES)
def test_gradient_through_time_matches_central_differences(compiled64, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h for L = sum of every output times a fixed
    random cotangent, a = all arguments (inputs, initial states, weights), v random."""
    m, params, feeds = compiled64
    args = [*feeds[cid].values(), *params[cid].values()]
    outs = call(m, cid, feeds[cid], params[cid])
    rng = np.random.default_rng(7)
    douts = [rng.uniform(-1, 1, o.shape) for o in outs]
    grads = getattr(m, function_name(cid) + "_grad")(*args, *douts)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    assert len(grads) == len(args)

    def loss(values: list[np.ndarray]) -> float:
        ys = getattr(m, function_name(cid))(*values)
        ys = list(ys) if isinstance(ys, tuple) else [ys]
        return float(sum(np.sum(y * d) for y, d in zip(ys, douts)))

    for trial in range(2):
        v = [rng.uniform(-1, 1, a.shape) for a in args]
        h = 1e-6
        fd = (loss([a + h * d for a, d in zip(args, v)]) - loss([a - h * d for a, d in zip(args, v)])) / (2 * h)
        analytic = float(sum(np.sum(g * d) for g, d in zip(grads, v)))
        assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (trial, fd, analytic)


@pytest.mark.parametrize("attrs, message", [
    (dict(activations=["Softsign"]), "activation 'Softsign' is not supported"),
    (dict(activations=["Tanh", "Tanh"]), "activations lists 2 functions; RNN takes 1 per direction"),
])
def test_unsupported_attributes_are_one_line_errors(attrs: dict, message: str) -> None:
    model, _ = case("RNN", **attrs)
    with pytest.raises(opc.OpcError, match=message) as err:
        opc.import_onnx(model)
    assert str(err.value).startswith("node 'the_RNN' (RNN): ")
    assert "\n" not in str(err.value)


# the sequence axis a run-time size (`?`): one compiled module for every length
DYNAMIC_CASES = ["LSTM-bidirectional-layout0", "LSTM-reverse-layout1", "GRU-linear_before_reset", "GRU-reverse-layout0",
                 "RNN-states-bidirectional", "LSTM-peephole"]


def with_run_time_length(model: onnx.ModelProto, layout: int) -> onnx.ModelProto:
    """model with X's sequence dim named 'T' (no size), its outputs' shapes inferred anew."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.input[0].type.tensor_type.shape.dim[1 if layout else 0].dim_param = "T"
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def feeds_of_length(cid: str, seq: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    spec = CASES[cid]
    rng = np.random.default_rng(seq)
    _, feeds = case(**spec, dtype=dtype)
    x = rng.uniform(-1, 1, (seq, BATCH, INPUT)).astype(dtype)
    return {**feeds, "X": x.swapaxes(0, 1).copy() if spec.get("layout") else x}


@pytest.fixture(scope="module")
def compiled_dynamic():
    models = {cid: with_run_time_length(case(**CASES[cid])[0], CASES[cid].get("layout", 0)) for cid in DYNAMIC_CASES}
    module, params = import_all(models)
    assert "scf.for" in str(module) and "tensor.insert_slice" in str(module)
    return opc.compile(module), params


@pytest.mark.parametrize("cid", DYNAMIC_CASES)
def test_run_time_sequence_length_matches_onnxruntime(compiled_dynamic, cid: str) -> None:
    m, params = compiled_dynamic
    spec = CASES[cid]
    static, _ = case(**{**spec, "layout": 0})
    twin = with_run_time_length(static, 0)
    for seq in (1, 4, 33):
        feeds = feeds_of_length(cid, seq)
        got = call(m, cid, feeds, params[cid])
        ort_feeds = {k: v.swapaxes(0, 1).copy() for k, v in feeds.items()} if spec.get("layout") else feeds
        want = run_ort(twin, ort_feeds)
        if spec.get("layout"):
            want = [want[0].transpose(2, 0, 1, 3), *(o.swapaxes(0, 1) for o in want[1:])]
        assert got[0].shape[1 if spec.get("layout") else 0] == seq
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_run_time_sequence_length_gradient_matches_central_differences() -> None:
    """Through the loop at two lengths of one compiled module, f64: <grad, v> against central differences."""
    cid = "LSTM-bidirectional-layout0"
    model = with_run_time_length(case(**CASES[cid], dtype=np.float64)[0], 0)
    module, params = import_all({cid: model})
    m = opc.compile(module, grad=True)
    rng = np.random.default_rng(3)
    for seq in (2, 7):
        feeds = feeds_of_length(cid, seq, np.float64)
        args = [*feeds.values(), *params[cid].values()]
        outs = call(m, cid, feeds, params[cid])
        douts = [rng.uniform(-1, 1, o.shape) for o in outs]
        grads = list(getattr(m, function_name(cid) + "_grad")(*args, *douts))

        def loss(values: list[np.ndarray]) -> float:
            return float(sum(np.sum(y * d) for y, d in zip(getattr(m, function_name(cid))(*values), douts)))

        v = [rng.uniform(-1, 1, a.shape) for a in args]
        h = 1e-6
        fd = (loss([a + h * d for a, d in zip(args, v)]) - loss([a - h * d for a, d in zip(args, v)])) / (2 * h)
        analytic = float(sum(np.sum(g * d) for g, d in zip(grads, v)))
        assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (seq, fd, analytic)


def test_sequence_lens_with_a_run_time_length_is_one_line_error() -> None:
    model, _ = case("RNN")
    node = model.graph.node[0]
    while len(node.input) < 5:
        node.input.append("")
    node.input[4] = "L"
    model.graph.initializer.append(numpy_helper.from_array(np.full(BATCH, SEQ, np.int32), "L"))
    with pytest.raises(opc.OpcError, match="sequence_lens with a run-time") as err:
        opc.import_onnx(with_run_time_length(model, 0))
    assert "\n" not in str(err.value)


def test_backward_through_time_works_a_slot_per_step() -> None:
    """The backward loop of an LSTM (static length) carries no whole-sequence value: Y's cotangent is
    read a slot per step from outside the loop, and the input projection's cotangent is accumulated
    into its slot (an insert_slice the host runs in place), so a step's work does not grow with the
    length (bench/bench_control_flow.py --only lstm-train: the same time per step at 64 and 1,024)."""
    from opc.dialects.control import in_place_carried
    from opc.ir import make_context
    from opc.transforms.opc_grad import GradPass

    model, _ = case("LSTM")
    module, _ = opc.import_onnx(model)
    GradPass().apply(make_context(), module)
    loops = [op for op in module.walk() if op.name == "scf.for"]
    backward = loops[-1]  # the grad function's reverse loop
    seq_sized = [k for k, a in enumerate(backward.body.block.args[1:]) if a.type.get_shape()[0] == SEQ]
    assert seq_sized, "the projection's cotangent is carried"
    assert set(seq_sized) <= set(in_place_carried(backward.body.block, reads_slot=True))


def with_length(model: onnx.ModelProto, seq: int | str) -> onnx.ModelProto:
    """model with X's sequence dim seq (a number, or a name: a run-time size), shapes inferred anew."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    if isinstance(seq, str):
        dim.dim_param = seq
    else:
        dim.dim_value = seq
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("seq", [0, "T"])
def test_an_empty_sequence_gives_an_empty_y_and_the_initial_states(op: str, direction: str, seq: int | str) -> None:
    """Sequence length 0, static or at run time: Y is [0, directions, batch, hidden] and the final
    states are the initial ones (h_T at T = 0 is h_0), zeros where absent. No onnxruntime oracle:
    it returns memory it never wrote for LSTM and RNN there, and aborts the process on GRU."""
    for states in (True, False):
        model, feeds = case(op, direction=direction, states=states)
        model = with_length(model, seq)
        feeds = {**feeds, "X": feeds["X"][:0]}
        got = opc.load_onnx(model)(**feeds)
        nd = 2 if direction == "bidirectional" else 1
        zeros = np.zeros((nd, BATCH, HIDDEN), np.float32)
        want = [feeds.get(name, zeros) for name in ("initial_h", "initial_c")[:len(got) - 1]]
        assert np.shape(got[0]) == (0, nd, BATCH, HIDDEN)
        for g, w in zip(got[1:], want):
            np.testing.assert_array_equal(g, w)
