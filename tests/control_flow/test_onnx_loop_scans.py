"""ONNX Loop scan outputs without unrolling: each iteration writes its row of a stacked result whose
row count is known at run time only (the trip count M read from a tensor, or the iterations a
condition allowed). One compiled module serves every trip count; results against onnxruntime and a
NumPy loop, gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, onnx, run_ort

import opc

F = onnx.TensorProto.FLOAT
D = onnx.TensorProto.DOUBLE
I64 = onnx.TensorProto.INT64
B = onnx.TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def scan_loop_model(stop_at: float | None = None, elem=F, m_const: int | None = None, width="3") -> onnx.ModelProto:
    """s <- s + i; stack s * s per iteration; M times (M an input, or a constant m_const); with stop_at,
    also while sum(s) < stop_at (the condition an input then)."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=elem),
             helper.make_node("Add", ["s_in", "fi"], ["s_out"]),
             helper.make_node("Mul", ["s_out", "s_out"], ["sq"])]
    if stop_at is None:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        lim = helper.make_tensor("lim", elem, [], [stop_at])
        nodes += [helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
                  helper.make_node("Constant", [], ["limit"], value=lim),
                  helper.make_node("Less", ["tot", "limit"], ["c_out"])]
    w: int | str = int(width) if width.isdigit() else width
    body = helper.make_graph(nodes, "body", [vi("i", I64, []), vi("c_in", B, []), vi("s_in", elem, [w])],
                             [vi("c_out", B, []), vi("s_out", elem, [w]), vi("sq", elem, [w])])
    cond = "c" if stop_at is not None else ""
    loop = helper.make_node("Loop", ["M", cond, "s0"], ["s", "stack"], body=body)
    inputs = [("M", I64, []), ("c", B, []), ("s0", elem, [w])]
    inits = []
    if m_const is not None:
        inputs = inputs[2:]
        inits = [helper.make_tensor("M", I64, [], [m_const])]
    elif stop_at is None:
        inputs = [inputs[0], inputs[2]]
    graph = helper.make_graph([loop], "g", [vi(*i) for i in inputs], [vi("s", elem, [w]), vi("stack", elem, ["T", w])],
                              inits)
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def numpy_loop(m: int, s0: np.ndarray, stop_at: float | None = None, cond: bool = True):
    s, rows = s0.copy(), []
    i = 0
    while i < m and cond:
        s = s + i
        rows.append(s * s)
        cond = stop_at is None or s.sum() < stop_at
        i += 1
    return s, np.array(rows, s0.dtype).reshape(len(rows), s0.size)


MODELS: dict[str, onnx.ModelProto] = {}
LOADED: dict[str, object] = {}


@pytest.fixture(autouse=True, scope="module")
def loaded():
    MODELS.update(counted=scan_loop_model(), stopping=scan_loop_model(stop_at=40.0))
    LOADED.update({k: opc.load_onnx(m) for k, m in MODELS.items()})


def test_scan_outputs_import_as_one_loop():
    """The body once, its row written by tensor.insert_slice; an scf.for where the body passes its
    condition through, an scf.while where it computes it (its rows cut to the iterations run)."""
    text = str(opc.import_onnx(scan_loop_model())[0])
    assert text.count("scf.for") == 1 and text.count("opc.mul") == 1 and "tensor.insert_slice" in text
    text = str(opc.import_onnx(scan_loop_model(stop_at=40.0))[0])
    assert text.count("scf.while") == 1 and text.count("opc.mul") == 1 and "tensor.extract_slice" in text


@pytest.mark.parametrize("m", [0, 1, 5, 300, -2])
def test_counted_scan_outputs_against_onnxruntime(m):
    feeds = {"M": np.array(m, np.int64), "s0": np.arange(3, dtype=np.float32)}
    got = LOADED["counted"](**feeds)
    want = run_ort(MODELS["counted"], feeds)
    for g, w, n in zip(got, want, numpy_loop(m, feeds["s0"])):
        assert g.shape == w.shape == n.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(g, n, rtol=1e-6)


@pytest.mark.parametrize("m, cond", [(0, True), (1, True), (5, True), (300, True), (-2, True), (10, False)])
def test_scan_outputs_of_a_loop_that_stops_against_onnxruntime(m, cond):
    feeds = {"M": np.array(m, np.int64), "c": np.array(cond), "s0": np.arange(3, dtype=np.float32)}
    got = LOADED["stopping"](**feeds)
    want = run_ort(MODELS["stopping"], feeds)
    for g, w, n in zip(got, want, numpy_loop(m, feeds["s0"], 40.0, cond)):
        assert g.shape == w.shape == n.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(g, n, rtol=1e-6)


def test_every_trip_count_is_one_compile():
    """Several trip counts run on one module each: no module per value of M."""
    for name, m in LOADED.items():
        for trips in (0, 3, 40):
            feeds = {"M": np.array(trips, np.int64), "s0": np.zeros(3, np.float32)}
            m(**feeds, **({"c": np.array(True)} if name == "stopping" else {}))  # type: ignore[operator]
        assert len(m.variants) == 1, name  # type: ignore[attr-defined]
        (variants,) = m.variants.values()  # type: ignore[attr-defined]
        assert len(variants) == 1 and not variants[0].bound, name


@pytest.mark.parametrize("m", [0, 4])
def test_trip_count_known_at_compile_time(m):
    """M an initializer: the stacked result has M rows, known at compile time; the body is not unrolled
    (M = 0: no loop at all)."""
    model = scan_loop_model(m_const=m)
    assert str(opc.import_onnx(model)[0]).count("opc.mul") == min(m, 1)
    s0 = np.arange(3, dtype=np.float32)
    got = opc.load_onnx(model)(s0=s0)
    for g, w in zip(got, run_ort(model, {"s0": s0})):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 4])
def test_open_state_width_and_trip_count(n):
    """The state's width a dim_param too: [T, n] with both known at run time only. No iteration gives
    [0, n] (onnxruntime, which learns a scan output's shape from its first row, gives [0, 0])."""
    model = scan_loop_model(width="n")
    m = opc.load_onnx(model)
    for trips in (0, 3, 7):
        feeds = {"M": np.array(trips, np.int64), "s0": np.linspace(-1, 1, n).astype(np.float32)}
        got = m(**feeds)
        for g, w in zip(got, numpy_loop(trips, feeds["s0"])):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)
        if trips:
            for g, w in zip(got, run_ort(model, feeds)):
                np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("stop_at", [None, 2.0])
@pytest.mark.parametrize("m", [0, 1, 6])
def test_gradient_through_scan_outputs(m, stop_at):
    """d/ds0 of <s, ds> + <stack, dstack> against central differences (f64)."""
    module, _ = opc.import_onnx(scan_loop_model(stop_at, D))
    c = opc.compile(module, grad=True)
    rng = np.random.default_rng(m)
    s0 = rng.uniform(-0.5, 0.5, 3)
    fixed = [np.array(m, np.int64)] + ([np.array(True)] if stop_at is not None else [])
    s, stack = c.g(*fixed, s0)
    ds, dstack = rng.standard_normal(s.shape), rng.standard_normal(stack.shape)
    (grad,) = [c.g_grad(*fixed, s0, ds, dstack)]
    v, h = rng.standard_normal(3), 1e-6

    def loss(t):
        a, b = c.g(*fixed, s0 + t * h * v)
        assert b.shape == stack.shape  # the step does not move where the loop stops
        return float(np.sum(a * ds) + np.sum(b * dstack))

    fd = (loss(1) - loss(-1)) / (2 * h)
    assert abs(fd - np.sum(grad * v)) <= 1e-6 * max(1.0, abs(fd))


def test_wrong_rows_of_dout_is_a_value_error():
    """The stacked result's row count is found by the call; a dout of another row count is refused."""
    module, _ = opc.import_onnx(scan_loop_model(None, D))
    c = opc.compile(module, grad=True)
    with pytest.raises(ValueError, match="dim 0"):
        c.g_grad(np.array(4, np.int64), np.zeros(3), np.ones(3), np.ones((3, 3)))
