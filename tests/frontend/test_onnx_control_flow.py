"""ONNX If, Loop and Scan (opc/onnx_import/control_flow.py): an If on a run-time condition as an scf.if,
Scan as an scf.for (opset 8's: one over the batch around one over the sequence, tests/frontend/
test_onnx_scan8.py), Loop as an scf.for or scf.while (tests/control_flow/test_onnx_scf.py: more
Loops and Ifs at run time); every case imported into one module; the forward against onnxruntime,
the gradient through the loop against
central differences of opc's own forward (f64), and the refusals as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_helpers import call, function_name, helper, import_all, numpy_helper, onnx, run_ort

import opc
from opc.errors import OpcError

F = onnx.TensorProto.FLOAT
D = onnx.TensorProto.DOUBLE


def body(name: str, nodes, inputs, outputs) -> onnx.GraphProto:
    """A subgraph; inputs and outputs as (name, elem type, shape) triples."""
    vi = helper.make_tensor_value_info
    return helper.make_graph(nodes, name, [vi(*i) for i in inputs], [vi(*o) for o in outputs])


def graph_model(nodes, feeds, outputs, inits=None, opset: int = 13) -> onnx.ModelProto:
    """A model whose outputs are typed (name, elem type, shape): shape inference leaves a control-flow
    node's outputs untyped, which the checker refuses."""
    vi = helper.make_tensor_value_info
    ins = [vi(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    opsets = [helper.make_opsetid("", opset)]
    graph = helper.make_graph(nodes, "main_graph", ins, [vi(*o) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def if_model(elem=F, cond_known: bool = False):
    """y = cond ? x * w : x + w, with w an initializer (a gradient flows into both branches' values)."""
    then_ = body("then", [helper.make_node("Mul", ["x", "w"], ["t"])], [], [("t", elem, [2, 3])])
    else_ = body("else", [helper.make_node("Add", ["x", "w"], ["e"])], [], [("e", elem, [2, 3])])
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.uniform(-1, 1, (2, 3)).astype(dt)}
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_, else_branch=else_)]
    inits = {"w": rng.uniform(-1, 1, (2, 3)).astype(dt)}
    if cond_known:
        inits["cond"] = np.array(False)
        return graph_model(nodes, feeds, [("y", elem, [2, 3])], inits), feeds
    feeds["cond"] = np.array(True)
    return graph_model(nodes, feeds, [("y", elem, [2, 3])], inits), feeds


def loop_model(elem=F, trips: int = 4, stop_after: int | None = None):
    """A running sum over rows x[i] (sliced by the iteration number) with a scan output of every partial
    sum; with stop_after, the body's condition turns false after that many iterations."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    nodes = [
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", onnx.TensorProto.INT64, [1], [1])),
        helper.make_node("Unsqueeze", ["i", "zero_axis"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end"], ["row2"]),
        helper.make_node("Squeeze", ["row2", "zero_axis"], ["row"]),
        helper.make_node("Mul", ["row", "s_in"], ["prod"]),
        helper.make_node("Add", ["s_in", "prod"], ["s_out"]),
        helper.make_node("Tanh", ["s_out"], ["scan_out"]),
        helper.make_node("Constant", [], ["zero_axis"], value=helper.make_tensor("za", onnx.TensorProto.INT64, [1], [0])),
    ]
    nodes.insert(0, nodes.pop())  # zero_axis first
    if stop_after is None:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Constant", [], ["limit"],
                                      value=helper.make_tensor("l", onnx.TensorProto.INT64, [], [stop_after - 1])))
        nodes.append(helper.make_node("Less", ["i", "limit"], ["c_out"]))
    g = body("loop_body", nodes, [("i", onnx.TensorProto.INT64, []), ("c_in", onnx.TensorProto.BOOL, []),
                                  ("s_in", elem, [3])],
             [("c_out", onnx.TensorProto.BOOL, []), ("s_out", elem, [3]), ("scan_out", elem, [3])])
    rng = np.random.default_rng(2)
    feeds = {"s0": rng.uniform(-1, 1, 3).astype(dt)}
    inits = {"x": rng.uniform(-1, 1, (trips, 3)).astype(dt), "M": np.array(trips, np.int64), "c": np.array(True)}
    node = helper.make_node("Loop", ["M", "c", "s0"], ["s", "scans"], body=g)
    n = min(trips, stop_after or trips)
    return graph_model([node], feeds, [("s", elem, [3]), ("scans", elem, [n, 3])], inits), feeds


def scan_model(elem=F, directions=(0, 1), in_axes=(0, 1), out_axes=(0, 1), out_directions=(0, 1)):
    """An RNN-like scan: state h, two scanned inputs (one reversed, one scanned along axis 1), two scan outputs."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    nodes = [helper.make_node("MatMul", ["h_in", "w"], ["hw"]),
             helper.make_node("Add", ["hw", "a"], ["s1"]),
             helper.make_node("Mul", ["s1", "b"], ["s2"]),
             helper.make_node("Tanh", ["s2"], ["h_out"]),
             helper.make_node("Sigmoid", ["s1"], ["y1"]),
             helper.make_node("Identity", ["h_out"], ["y2"])]
    g = body("scan_body", nodes, [("h_in", elem, [2, 3]), ("a", elem, [2, 3]), ("b", elem, [2, 3])],
             [("h_out", elem, [2, 3]), ("y1", elem, [2, 3]), ("y2", elem, [2, 3])])
    rng = np.random.default_rng(3)
    seq = 5
    shape_a = [seq, 2, 3] if in_axes[0] == 0 else [2, seq, 3]
    shape_b = [seq, 2, 3] if in_axes[1] == 0 else [2, seq, 3]
    feeds = {"h0": rng.uniform(-1, 1, (2, 3)).astype(dt), "xa": rng.uniform(-1, 1, shape_a).astype(dt),
             "xb": rng.uniform(-1, 1, shape_b).astype(dt)}
    inits = {"w": rng.uniform(-1, 1, (3, 3)).astype(dt)}
    node = helper.make_node("Scan", ["h0", "xa", "xb"], ["h", "y1s", "y2s"], body=g, num_scan_inputs=2,
                            scan_input_directions=list(directions), scan_input_axes=list(in_axes),
                            scan_output_axes=list(out_axes), scan_output_directions=list(out_directions))
    stacked = [[5, 2, 3], [2, 5, 3], [2, 3, 5]]
    shapes = [stacked[a if a >= 0 else 2] for a in out_axes]
    return graph_model([node], feeds, [("h", elem, [2, 3]), ("y1s", elem, shapes[0]), ("y2s", elem, shapes[1])],
                       inits, opset=16), feeds


def scan8_model(elem=F, lens=None):
    """Opset 8's Scan: axis 0 a batch, axis 1 the sequence; a running sum; lens: sequence_lens, a
    constant (each batch element's trip count), the input then reversed."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    g = body("scan_body", [helper.make_node("Add", ["s_in", "x"], ["s_out"]),
                           helper.make_node("Sin", ["s_out"], ["y"])],
             [("s_in", elem, [2]), ("x", elem, [2])], [("s_out", elem, [2]), ("y", elem, [2])])
    rng = np.random.default_rng(4)
    feeds = {"s0": rng.uniform(-1, 1, (3, 2)).astype(dt), "xs": rng.uniform(-1, 1, (3, 4, 2)).astype(dt)}
    node = helper.make_node("Scan", ["" if lens is None else "lens", "s0", "xs"], ["s", "ys"], body=g,
                            num_scan_inputs=1, directions=[0 if lens is None else 1])
    nodes = [node] if lens is None else [helper.make_node("Constant", [], ["lens"], value=numpy_helper.from_array(
        np.array(lens, np.int64))), node]
    return graph_model(nodes, feeds, [("s", elem, [3, 2]), ("ys", elem, [3, 4, 2])], opset=8), feeds


CASES = {
    "if-runtime": lambda dt: if_model(dt),
    "if-known": lambda dt: if_model(dt, cond_known=True),
    "loop": lambda dt: loop_model(dt),
    "loop-stops": lambda dt: loop_model(dt, trips=6, stop_after=3),
    "scan": lambda dt: scan_model(dt),
    "scan-forward": lambda dt: scan_model(dt, directions=(0, 0), in_axes=(0, 0), out_axes=(0, 0), out_directions=(0, 0)),
    "scan-axes": lambda dt: scan_model(dt, directions=(1, 0), in_axes=(1, 0), out_axes=(2, -1), out_directions=(1, 0)),
    "scan8": lambda dt: scan8_model(dt),
    "scan8-lens-reversed": lambda dt: scan8_model(dt, lens=[4, 1, 2]),
}


@pytest.fixture(scope="module")
def compiled():
    built = {cid: make(F) for cid, make in CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    built64 = {cid: make(D) for cid, make in CASES.items()}
    module64, params64 = import_all({cid + "-f64": m for cid, (m, _) in built64.items()})
    for f in list(module64.ops):
        f.detach()
        module.body.block.add_op(f)
    return opc.compile(module, grad=True), {**params, **params64}, built, built64


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str) -> None:
    m, params, built, _ = compiled
    model, feeds = built[cid]
    want = run_ort(model, feeds)
    got = call(m, cid, feeds, params[cid])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("cid", [c for c in CASES if c != "if-known"])
def test_gradient_through_the_loop(compiled, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h, L = outputs times a fixed random cotangent."""
    m, params, _, built64 = compiled
    _, feeds = built64[cid]
    name = function_name(cid + "-f64")
    float_feeds = {k: v for k, v in feeds.items() if v.dtype.kind == "f"}
    args = [*feeds.values(), *params[cid + "-f64"].values()]
    floats = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    outs = call(m, cid + "-f64", feeds, params[cid + "-f64"])
    rng = np.random.default_rng(7)
    douts = [rng.uniform(-1, 1, o.shape) for o in outs]
    grads = getattr(m, name + "_grad")(*args, *douts)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    assert len(grads) == len(floats), (len(grads), len(float_feeds))

    def loss(values: list[np.ndarray]) -> float:
        ys = getattr(m, name)(*values)
        ys = list(ys) if isinstance(ys, tuple) else [ys]
        return float(sum(np.sum(y * d) for y, d in zip(ys, douts)))

    v = {i: rng.uniform(-1, 1, args[i].shape) for i in floats}
    h = 1e-6
    moved = [[a + s * h * v[i] if i in v else a for i, a in enumerate(args)] for s in (1, -1)]
    fd = (loss(moved[0]) - loss(moved[1])) / (2 * h)
    analytic = float(sum(np.sum(g * v[i]) for g, i in zip(grads, floats)))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)


def test_branches_of_different_types_are_one_line_error() -> None:
    then_ = body("then", [helper.make_node("Identity", ["x"], ["t"])], [], [("t", F, [2, 3])])
    else_ = body("else", [helper.make_node("ReduceMax", ["x"], ["e"], axes=[1])], [], [("e", F, [2, 1])])
    model = onnx.helper.make_model(
        helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then_, else_branch=else_)], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3]),
                           helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", F, [2, "n"])]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OpcError) as err:
        opc.import_onnx(model)
    assert "with a condition known only at run time, opc needs both of one type" in str(err.value)
    assert "\n" not in str(err.value)


def if_of_lists_model():
    """y, (s0, s1) = cond ? (x * 2, [x, x + 1]) : (x - 1, [x * x, x]), and an optional that is full in
    both branches: sequences and optionals of one layout come out of a run-time If."""
    seq = onnx.helper.make_tensor_sequence_value_info
    opt = onnx.helper.make_tensor_type_proto(F, [2, 3])

    def branch(name, a, b, c):
        nodes = [helper.make_node("Constant", [], [f"{name}k"], value=numpy_helper.from_array(np.float32(2.0))),
                 helper.make_node(a, ["x", f"{name}k"], [f"{name}y"]),
                 helper.make_node(b, ["x", "x"], [f"{name}p"]),
                 helper.make_node("SequenceConstruct", [f"{name}p", "x"], [f"{name}s"]),
                 helper.make_node(c, ["x", f"{name}k"], [f"{name}q"]),
                 helper.make_node("Optional", [f"{name}q"], [f"{name}o"])]
        g = helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}y", F, [2, 3]),
                                                seq(f"{name}s", F, [2, 3]),
                                                helper.make_value_info(f"{name}o", helper.make_optional_type_proto(opt))])
        return g

    nodes = [helper.make_node("If", ["cond"], ["y", "s", "o"], then_branch=branch("t", "Mul", "Add", "Sub"),
                              else_branch=branch("e", "Sub", "Mul", "Div")),
             helper.make_node("SequenceAt", ["s", "zero"], ["s0"]),
             helper.make_node("OptionalGetElement", ["o"], ["o0"])]
    feeds = {"x": np.random.default_rng(3).uniform(-1, 1, (2, 3)).astype(np.float32), "cond": np.array(True)}
    return graph_model(nodes, feeds, [("y", F, [2, 3]), ("s0", F, [2, 3]), ("o0", F, [2, 3])],
                       {"zero": np.array(0, np.int64)}, opset=18), feeds


def test_if_of_sequences_and_optionals_runs_one_branch() -> None:
    """A run-time If whose outputs are a sequence and an optional: one scf.if carrying their tensors
    (no select of both branches' values), right both ways against onnxruntime."""
    model, feeds = if_of_lists_model()
    text = str(opc.import_onnx(model)[0])
    assert text.count("scf.if") == 1 and "opc.select" not in text, text
    m = opc.load_onnx(model)
    for cond in (True, False):
        f = {**feeds, "cond": np.array(cond)}
        for got, want in zip(m(**f), run_ort(model, f)):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("stop_after, loop_op", [(None, "scf.for"), (3, "scf.while")])
def test_loop_with_known_counts_imports_its_body_once(stop_after: int | None, loop_op: str) -> None:
    """M and the entry condition initializers, the body slicing x[i:i+1]: one loop, the body (one Tanh)
    imported once; where the body may stop the loop, an scf.while whose scan output is cut to the rows
    it ran (the numbers: test_forward_matches_onnxruntime[loop-stops])."""
    model, _ = loop_model(trips=6, stop_after=stop_after)
    module, _ = opc.import_onnx(model)
    text = str(module)
    assert text.count(loop_op) == 1 and text.count("opc.tanh") == 1, text


@pytest.mark.parametrize("stop_after", [None, 2])
def test_loop_slicing_by_its_iteration_number_compiles_once(stop_after: int | None) -> None:
    """x[i:i+1] in the body (a static size, its offset read at run time), M a graph input: one
    compiled loop (scf.for, or scf.while where the body stops it) for trip counts 0 to 4 against
    onnxruntime; a count past x's rows (ONNX would clamp the slice to nothing) is the slice's
    ValueError at the call."""
    model, feeds = loop_model(trips=4, stop_after=stop_after)
    model.graph.initializer.pop(1)  # M becomes a graph input
    model.graph.input.append(helper.make_tensor_value_info("M", onnx.TensorProto.INT64, []))
    module, params = opc.import_onnx(model)
    assert ("scf.for" if stop_after is None else "scf.while") in str(module)
    m = opc.compile(module)
    for trips in range(5):
        given = {**feeds, "M": np.array(trips, np.int64)}
        got = m.main_graph(*given.values(), *params.values())
        for g, w in zip(got, run_ort(model, given)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    if stop_after is None:
        with pytest.raises(ValueError):
            m.main_graph(*feeds.values(), np.array(5, np.int64), *params.values())


def test_loop_summing_prefixes_of_run_time_length_compiles_once() -> None:
    """s += sum(x[:i+1] * w) per iteration, M a graph input: the prefix's length is read at run time
    inside the body (clamped as ONNX clamps it: past x's end it is all of x); one compile for trip
    counts 0 to 7 against onnxruntime."""
    i64 = onnx.TensorProto.INT64
    nodes = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", i64, [1], [0])),
             helper.make_node("Constant", [], ["one"], value=helper.make_tensor("o", i64, [], [1])),
             helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("a", i64, [1], [0])),
             helper.make_node("Add", ["i", "one"], ["end"]),
             helper.make_node("Unsqueeze", ["end", "axes"], ["ends"]),
             helper.make_node("Slice", ["x", "zero", "ends"], ["head"]),
             helper.make_node("Mul", ["head", "w"], ["hw"]),
             helper.make_node("ReduceSum", ["hw"], ["total"], keepdims=0),
             helper.make_node("Add", ["s_in", "total"], ["s_out"]),
             helper.make_node("Identity", ["c_in"], ["c_out"])]
    g = body("loop_body", nodes, [("i", i64, []), ("c_in", onnx.TensorProto.BOOL, []), ("s_in", F, [])],
             [("c_out", onnx.TensorProto.BOOL, []), ("s_out", F, [])])
    rng = np.random.default_rng(9)
    feeds = {"x": rng.uniform(-1, 1, 5).astype(np.float32), "w": np.array(rng.uniform(-1, 1), np.float32),
             "s0": np.array(0.5, np.float32), "M": np.array(3, np.int64)}
    model = graph_model([helper.make_node("Loop", ["M", "c", "s0"], ["s"], body=g)], feeds, [("s", F, [])],
                        {"c": np.array(True)})
    module, params = opc.import_onnx(model)
    text = str(module)
    assert text.count("scf.for") == 1 and text.count("opc.reduce_sum") == 1, text
    m = opc.compile(module)
    for trips in range(8):
        given = {**feeds, "M": np.array(trips, np.int64)}
        (want,) = run_ort(model, given)
        np.testing.assert_allclose(m.main_graph(*given.values(), *params.values()), want, rtol=2e-5, atol=2e-6)


def test_slice_by_a_run_time_start_of_static_size() -> None:
    """Slice(x, s, s + 2) on axis 0, s a graph input: one compile for every s; where ONNX's span is two
    rows (from either end) the rows NumPy's x[s:s+2] gives, else (a span it clamps) a ValueError."""
    i64 = onnx.TensorProto.INT64
    nodes = [helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", i64, [1], [2])),
             helper.make_node("Add", ["s", "two"], ["e"]),
             helper.make_node("Slice", ["x", "s", "e"], ["y"])]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    model = graph_model(nodes, {"x": x, "s": np.array([0], np.int64)}, [("y", F, [2, 3])])
    module, _ = opc.import_onnx(model)
    assert "tensor.extract_slice" in str(module)
    m = opc.compile(module)
    for s in range(-7, 7):
        want = x[s:s + 2] if s + 2 != 0 else x[0:0]
        if want.shape[0] == 2:
            np.testing.assert_array_equal(m.main_graph(x, np.array([s], np.int64)), want)
        else:
            with pytest.raises(ValueError):
                m.main_graph(x, np.array([s], np.int64))


def test_scan_over_a_run_time_length_compiles_once() -> None:
    """Scan whose sequence dim is a run-time size (`?`): one compiled loop for lengths 1, 5 and 9,
    against onnxruntime (a reversed input along axis 1, a reversed output along axis 2)."""
    model, feeds = scan_model(directions=(1, 0), in_axes=(1, 0), out_axes=(2, -1), out_directions=(1, 0))
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in model.graph.input:
        if inp.name in ("xa", "xb"):
            inp.type.tensor_type.shape.dim[1 if inp.name == "xa" else 0].dim_param = "T"
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    module, params = opc.import_onnx(model)
    assert "scf.for" in str(module)
    m = opc.compile(module)
    rng = np.random.default_rng(5)
    for seq in (1, 5, 9):
        given = {"h0": feeds["h0"], "xa": rng.uniform(-1, 1, (2, seq, 3)).astype(np.float32),
                 "xb": rng.uniform(-1, 1, (seq, 2, 3)).astype(np.float32)}
        got = m.main_graph(*given.values(), *params.values())
        for g, w in zip(got, run_ort(model, given)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_stacked_rows_reshaped_to_a_declared_shape_are_checked_at_the_call() -> None:
    """A Loop whose body stops it (the limit a graph input its body reads) stacks a run-time number of
    rows; a Reshape to the static shape the model declares (as tf2onnx's GRU writes) is the row count
    that shape implies, checked at the call: right where the loop ran that often, else a ValueError."""
    model, feeds = loop_model(trips=6, stop_after=3)
    body_graph = model.graph.node[0].attribute[0].g
    kept = [n for n in body_graph.node if n.output[0] != "limit"]
    del body_graph.node[:]
    body_graph.node.extend(kept)  # `limit` now comes from the graph's input of that name
    model.graph.input.append(helper.make_tensor_value_info("limit", onnx.TensorProto.INT64, []))
    model.graph.initializer.append(numpy_helper.from_array(np.array([9], np.int64), "flat"))
    model.graph.node.append(helper.make_node("Reshape", ["scans", "flat"], ["flat_scans"]))
    model.graph.output.append(helper.make_tensor_value_info("flat_scans", F, [9]))
    m = opc.load_onnx(model)
    f = {**feeds, "limit": np.array(2, np.int64)}  # i = 0, 1, 2: three rows of 3
    for got, want in zip(m(**f), run_ort(model, f)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="must equal"):
        m(**{**feeds, "limit": np.array(1, np.int64)})
    assert sum(len(v) for v in m.variants.values()) == 1  # a value, not a shape: one module
