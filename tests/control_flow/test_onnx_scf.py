"""ONNX If and Loop whose condition or trip count is known at run time only import as scf ops:
one compiled module for every condition and trip count, against onnxruntime; a branch not taken
runs none of its kernels (opc's profiler counts them; its time: bench/bench_control_flow.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import helper, onnx, run_ort

import opc

F = onnx.TensorProto.FLOAT
I64 = onnx.TensorProto.INT64
B = onnx.TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 17)]
    graph = helper.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def heavy_if_model(n: int = 256, reps: int = 8) -> onnx.ModelProto:
    """y = cond ? (x @ x)^reps-ish (a chain of matmuls and tanh) : x + 1."""
    nodes, prev = [], "x"
    for k in range(reps):
        nodes += [helper.make_node("MatMul", [prev, "x"], [f"m{k}"]), helper.make_node("Tanh", [f"m{k}"], [f"t{k}"])]
        prev = f"t{k}"
    then_ = helper.make_graph(nodes, "then", [], [vi(prev, F, [n, n])])
    one = helper.make_tensor("one", F, [], [1.0])
    else_ = helper.make_graph([helper.make_node("Constant", [], ["c1"], value=one),
                               helper.make_node("Add", ["x", "c1"], ["e"])], "else", [], [vi("e", F, [n, n])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_, else_branch=else_)
    return model_of([node], [("cond", B, []), ("x", F, [n, n])], [("y", F, [n, n])])


def counted_loop_model(stop_at: float | None = None, elem=F) -> onnx.ModelProto:
    """s <- tanh(s * w + i), M times (M an input); with stop_at, also while sum(s) < stop_at."""
    body_nodes = [helper.make_node("Cast", ["i"], ["fi"], to=elem),
                  helper.make_node("Mul", ["s_in", "w"], ["sw"]),
                  helper.make_node("Add", ["sw", "fi"], ["a"]),
                  helper.make_node("Tanh", ["a"], ["s_out"])]
    if stop_at is None:
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        lim = helper.make_tensor("lim", elem, [], [stop_at])
        body_nodes += [helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
                       helper.make_node("Constant", [], ["limit"], value=lim),
                       helper.make_node("Less", ["tot", "limit"], ["c_out"])]
    body = helper.make_graph(body_nodes, "body", [vi("i", I64, []), vi("c_in", B, []), vi("s_in", elem, [8])],
                             [vi("c_out", B, []), vi("s_out", elem, [8])])
    node = helper.make_node("Loop", ["M", "c", "s0"], ["s"], body=body)
    return model_of([node], [("M", I64, []), ("c", B, []), ("s0", elem, [8]), ("w", elem, [8])],
                    [("s", elem, [8])])


def feeds_for_loop(m: int, cond: bool = True):
    rng = np.random.default_rng(abs(m))
    return {"M": np.array(m, np.int64), "c": np.array(cond), "s0": rng.uniform(-1, 1, 8).astype(np.float32),
            "w": rng.uniform(-1, 1, 8).astype(np.float32)}


def test_if_imports_as_scf_if():
    module, _ = opc.import_onnx(heavy_if_model(8, 1))
    text = str(module)
    assert "scf.if" in text and "opc.select" not in text


@pytest.mark.parametrize("cond", [True, False])
def test_if_against_onnxruntime(cond):
    model = heavy_if_model(16, 2)
    x = np.random.default_rng(0).uniform(-0.3, 0.3, (16, 16)).astype(np.float32)
    feeds = {"cond": np.array(cond), "x": x}
    (want,) = run_ort(model, feeds)
    got = opc.load_onnx(model)(**feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def branch_kernels(p) -> dict[str, list[str]]:  # noqa: ANN001 - an opc.profiler.Profile
    """The profiled module's kernels by branch: the heavy branch's are its matmuls (each a GEMM
    with its tanh), the other's the add."""
    return {"heavy": [k for k, _, ops in p.kernels if "matmul" in ops],
            "light": [k for k, _, ops in p.kernels if "matmul" not in ops]}


@pytest.mark.parametrize("calls", [(True,), (False,), (False, True, False, False, True)])
def test_branch_not_taken_runs_no_kernel(calls):
    """The profiler's per-kernel call counts: each call runs the taken branch's kernels once and the
    other branch's never, so time is attributed to the taken branch only (the timings themselves:
    bench/bench_control_flow.py, the If rows)."""
    reps = 3
    module, params = opc.import_onnx(heavy_if_model(32, reps))
    m = opc.compile(module)
    x = np.random.default_rng(0).uniform(-0.1, 0.1, (32, 32)).astype(np.float32)
    p = opc.profile(m)
    p.reset()  # the counts live in the loaded extension: another test may have called this module
    kernels = branch_kernels(p)
    assert len(kernels["heavy"]) == reps and kernels["light"], p.kernels
    for cond in calls:
        got = m.g(np.array(cond), x, *params.values())
        want = x + 1
        if cond:
            want = x
            for _ in range(reps):
                want = np.tanh(want @ x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    p.stop()
    ran = {r["kernel"]: r["calls"] for r in p.rows()}
    taken = sum(calls)
    assert {k: ran.get(k, 0) for k in kernels["heavy"]} == dict.fromkeys(kernels["heavy"], taken)
    assert {k: ran.get(k, 0) for k in kernels["light"]} == dict.fromkeys(kernels["light"], len(calls) - taken)
    assert set(ran) <= {*kernels["heavy"], *kernels["light"]}


def test_loop_imports_as_scf_for_or_while():
    """A body that passes its condition through runs M times (none where it enters false): an scf.for;
    one that computes it, an scf.while."""
    text = str(opc.import_onnx(counted_loop_model())[0])
    assert text.count("scf.for") == 1 and "scf.while" not in text and text.count("opc.tanh") == 1
    text = str(opc.import_onnx(counted_loop_model(stop_at=0.5))[0])
    assert text.count("scf.while") == 1 and text.count("opc.tanh") == 1


@pytest.mark.parametrize("m", [0, 1, 5, 50, 2000, -2])
def test_counted_loop_against_onnxruntime(m):
    model = counted_loop_model()
    feeds = feeds_for_loop(m)
    (want,) = run_ort(model, feeds)
    np.testing.assert_allclose(LOOPS["counted"](**feeds)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m, cond", [(100, True), (100, False), (3, True)])
def test_loop_with_condition_against_onnxruntime(m, cond):
    model = counted_loop_model(stop_at=0.5)
    feeds = feeds_for_loop(m, cond)
    (want,) = run_ort(model, feeds)
    np.testing.assert_allclose(LOOPS["stopping"](**feeds)[0], want, rtol=1e-5, atol=1e-6)


LOOPS = {}


@pytest.fixture(autouse=True, scope="module")
def loops():
    LOOPS["counted"] = opc.load_onnx(counted_loop_model())
    LOOPS["stopping"] = opc.load_onnx(counted_loop_model(stop_at=0.5))


def test_new_trip_count_compiles_nothing():
    """After the first call, 5, 50 and 2000 trips reuse the one compiled variant (the first call's
    and each later call's time: bench/bench_control_flow.py, the Loop rows)."""
    m = opc.load_onnx(counted_loop_model())
    for n in (5, 5, 50, 2000):
        m(**feeds_for_loop(n))
        assert len(m.variants) + len([v for v in m.dynamic.values() if v is not None]) == 1, n


@pytest.mark.parametrize("m, stop_at", [(0, None), (1, None), (40, None), (100, 2.0)])
def test_loop_gradient_against_finite_differences(m, stop_at):
    """The Loop's scf.while differentiated (values saved per iteration, a reverse loop), in f64."""
    module, _ = opc.import_onnx(counted_loop_model(stop_at, onnx.TensorProto.DOUBLE))
    c = opc.compile(module, grad=True)
    rng = np.random.default_rng(11)
    s0, w = rng.uniform(-1, 1, 8), rng.uniform(-1, 1, 8)
    fixed = [np.array(m, np.int64), np.array(True)]
    dout = rng.standard_normal(8)
    ds0, dw = c.g_grad(*fixed, s0, w, dout)
    vs, vw = rng.standard_normal(8), rng.standard_normal(8)
    h = 1e-6

    def loss(t):
        return float(np.sum(c.g(*fixed, s0 + t * h * vs, w + t * h * vw) * dout))

    fd = (loss(1) - loss(-1)) / (2 * h)
    assert abs(fd - (np.sum(ds0 * vs) + np.sum(dw * vw))) <= 1e-6 * max(1.0, abs(fd))


def open_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """The loop model with its state's length a dim_param (a run-time size)."""
    body = model.graph.node[0].attribute[0].g
    for vi in [*list(model.graph.input)[2:], *model.graph.output, *list(body.input)[2:], *list(body.output)[1:]]:
        vi.type.tensor_type.shape.dim[0].dim_param = "n"
    return model


def test_run_time_sizes_in_a_loop_import_as_question_marks():
    text = str(opc.import_onnx(open_dims(counted_loop_model()))[0])
    assert "scf.for" in text and "tensor<?xf32>" in text


def test_open_dims_compile_once_for_every_size_and_trip_count():
    """The state's run-time length crosses into the loop's body: one module for every size and count."""
    model = open_dims(counted_loop_model())
    m = opc.load_onnx(model)
    for n, size in ((7, 8), (100, 3), (2, 1), (5, 0)):
        rng = np.random.default_rng(size)
        feeds = {**feeds_for_loop(n), "s0": rng.uniform(-1, 1, size).astype(np.float32),
                 "w": rng.uniform(-1, 1, size).astype(np.float32)}
        np.testing.assert_allclose(m(**feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-6)
    assert m.static_reason is None, m.static_reason
    assert not m.variants, "no module per shape"


def test_if_with_open_dims_compiles_once():
    """x [n, n] with n a dim_param: both branches give tensor<?x?xf32>; one module for every n."""
    model = heavy_if_model(4, 2)
    g = model.graph
    for vi_ in [g.input[1], g.output[0], g.node[0].attribute[0].g.output[0], g.node[0].attribute[1].g.output[0]]:
        for d in vi_.type.tensor_type.shape.dim:
            d.dim_param = "n"
    m = opc.load_onnx(model)
    for n, cond in ((3, True), (5, False), (1, True)):
        x = np.random.default_rng(n).uniform(-0.3, 0.3, (n, n)).astype(np.float32)
        feeds = {"cond": np.array(cond), "x": x}
        np.testing.assert_allclose(m(**feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-6)
    assert m.static_reason is None, m.static_reason
    assert not m.variants, "no module per shape"
