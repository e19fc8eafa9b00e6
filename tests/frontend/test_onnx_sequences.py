"""ONNX sequences and optionals (opc/onnx_import/lists.py, sequence.py): lists of tensors fixed
at import. Every case imported into one module; the forward against onnxruntime, the gradient through the sequence plumbing against central
differences of opc's own forward (f64); opc.load_onnx with sequence inputs and outputs; the refusals
as one-line errors naming the node."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
from onnx_helpers import function_name, helper, numpy_helper, onnx, run_ort
from xdsl.dialects.builtin import ModuleOp, StringAttr

import opc
from opc.errors import OpcError
from opc.onnx_import import import_graph
from opc.onnx_import.lists import flatten, regroup, shapes_of

F = onnx.TensorProto.FLOAT
D = onnx.TensorProto.DOUBLE
I64 = onnx.TensorProto.INT64
BOOL = onnx.TensorProto.BOOL


def tensor_vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def seq_vi(name: str, elem: int, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def opt_seq_vi(name: str, elem: int) -> onnx.ValueInfoProto:
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))
    return helper.make_value_info(name, helper.make_optional_type_proto(seq))


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name + "_v"))


def model_of(nodes, inputs, outputs, opset: int = 18) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs)
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def rand(rng, dt, *shape) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dt)


Case = tuple[onnx.ModelProto, dict]


def plumbing(elem: int) -> Case:
    """Construct, Insert (middle, end), Erase (negative), At, Length, ConcatFromSequence: the tensors
    moved around, an op on one of them, the sequence concatenated."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(1)
    feeds = {"a": rand(rng, dt, 2, 3), "b": rand(rng, dt, 1, 3), "c": rand(rng, dt, 4, 3)}
    nodes = [
        helper.make_node("Tanh", ["a"], ["ta"]),
        helper.make_node("SequenceConstruct", ["ta", "b", "c"], ["s0"]),
        const("one", np.array(1, np.int64)),
        helper.make_node("Mul", ["b", "b"], ["bb"]),
        helper.make_node("SequenceInsert", ["s0", "bb", "one"], ["s1"]),  # ta bb b c
        helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),  # ta bb b c a
        const("minus3", np.array(-3, np.int64)),
        helper.make_node("SequenceErase", ["s2", "minus3"], ["s3"]),  # ta bb c a
        const("minus1", np.array(-1, np.int64)),
        helper.make_node("SequenceAt", ["s3", "minus1"], ["last"]),
        helper.make_node("Sin", ["last"], ["y_last"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["y_cat"], axis=0),
    ]
    outputs = [tensor_vi("y_last", elem, [2, 3]), tensor_vi("n", I64, []), tensor_vi("y_cat", elem, [9, 3])]
    inputs = [tensor_vi(n, elem, a.shape) for n, a in feeds.items()]
    return model_of(nodes, inputs, outputs), feeds


def split_map_stack(elem: int) -> Case:
    """SplitToSequence by sizes, SequenceMap (x * w + x, w a tensor given to every element), ConcatFromSequence
    along the split axis; SplitToSequence without split, keepdims 0, stacked back with new_axis."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(2)
    feeds = {"x": rand(rng, dt, 3, 5), "w": rand(rng, dt, 3, 1)}
    body = helper.make_graph([helper.make_node("Mul", ["e", "v"], ["ev"]), helper.make_node("Add", ["ev", "e"], ["o"])],
                             "map_body", [tensor_vi("e", elem, [3, None]), tensor_vi("v", elem, [3, 1])],
                             [tensor_vi("o", elem, [3, None])])
    nodes = [
        const("sizes", np.array([2, 0, 3], np.int64)),
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=-1),
        helper.make_node("SequenceMap", ["parts", "w"], ["mapped"], body=body),
        helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=1),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("ConcatFromSequence", ["rows"], ["y_t"], axis=-1, new_axis=1),
    ]
    outputs = [tensor_vi("y", elem, [3, 5]), tensor_vi("y_t", elem, [5, 3])]
    inputs = [tensor_vi(n, elem, a.shape) for n, a in feeds.items()]
    return model_of(nodes, inputs, outputs), feeds


def chunks(elem: int) -> Case:
    """SplitToSequence by a scalar (the last chunk shorter), each chunk reduced, the sequence an output."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(3)
    feeds = {"x": rand(rng, dt, 7, 2)}
    body = helper.make_graph([helper.make_node("Exp", ["e"], ["o"])], "map_body",
                             [tensor_vi("e", elem, [None, 2])], [tensor_vi("o", elem, [None, 2])])
    nodes = [const("three", np.array(3, np.int64)),
             helper.make_node("SplitToSequence", ["x", "three"], ["parts"], axis=0),
             helper.make_node("SequenceMap", ["parts"], ["ys"], body=body)]
    return model_of(nodes, [tensor_vi("x", elem, [7, 2])], [seq_vi("ys", elem)]), feeds


def sequence_inputs(elem: int) -> Case:
    """Two sequence inputs of tensors of different shapes mapped pairwise (x * y + x), a tensor picked
    from one, and the mapped sequence an output."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(4)
    xs = [rand(rng, dt, 4), rand(rng, dt, 2), rand(rng, dt, 3)]
    ys = [rand(rng, dt, 4), rand(rng, dt, 2), rand(rng, dt, 3)]
    body = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["ab", "a"], ["o"])],
                             "map_body", [tensor_vi("a", elem, ["n"]), tensor_vi("b", elem, ["n"])],
                             [tensor_vi("o", elem, ["n"])])
    nodes = [helper.make_node("SequenceMap", ["xs", "ys"], ["zs"], body=body),
             const("one", np.array(1, np.int64)),
             helper.make_node("SequenceAt", ["ys", "one"], ["y1"]),
             helper.make_node("Tanh", ["y1"], ["t"])]
    model = model_of(nodes, [seq_vi("xs", elem, ["n"]), seq_vi("ys", elem, ["n"])],
                     [seq_vi("zs", elem, ["n"]), tensor_vi("t", elem, [2])])
    return model, {"xs": xs, "ys": ys}


def optionals(elem: int) -> Case:
    """Optional of a tensor and of nothing; HasElement picks an If branch at compile time; GetElement."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(5)
    feeds = {"x": rand(rng, dt, 2, 2)}
    then_ = helper.make_graph([helper.make_node("OptionalGetElement", ["ox"], ["g"]),
                               helper.make_node("Sigmoid", ["g"], ["r"])], "then",
                              [], [tensor_vi("r", elem, [2, 2])])
    else_ = helper.make_graph([helper.make_node("Neg", ["x"], ["r2"])], "else", [], [tensor_vi("r2", elem, [2, 2])])
    empty_then = helper.make_graph([helper.make_node("Identity", ["x"], ["r3"])], "then", [],
                                   [tensor_vi("r3", elem, [2, 2])])
    empty_else = helper.make_graph([helper.make_node("Exp", ["x"], ["r4"])], "else", [],
                                   [tensor_vi("r4", elem, [2, 2])])
    nodes = [
        helper.make_node("Optional", ["x"], ["ox"]),
        helper.make_node("OptionalHasElement", ["ox"], ["has"]),
        helper.make_node("If", ["has"], ["y"], then_branch=then_, else_branch=else_),
        helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(elem, [2, 2])),
        helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
        helper.make_node("If", ["has_none"], ["z"], then_branch=empty_then, else_branch=empty_else),
    ]
    outputs = [tensor_vi("y", elem, [2, 2]), tensor_vi("z", elem, [2, 2]), tensor_vi("has_none", BOOL, [])]
    return model_of(nodes, [tensor_vi("x", elem, [2, 2])], outputs), feeds


def loop_sequence(elem: int) -> Case:
    """A Loop that carries a sequence, growing it by one tensor per step (x[i] * s), then concatenated."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(6)
    feeds = {"x": rand(rng, dt, 4, 3), "s": rand(rng, dt, 3)}
    body_nodes = [
        helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
        helper.make_node("Mul", ["row", "s"], ["rs"]),
        helper.make_node("Tanh", ["rs"], ["trs"]),
        helper.make_node("SequenceInsert", ["seq_in", "trs"], ["seq_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ]
    body = helper.make_graph(body_nodes, "loop_body",
                             [tensor_vi("i", I64, []), tensor_vi("c_in", BOOL, []), seq_vi("seq_in", elem)],
                             [tensor_vi("c_out", BOOL, []), seq_vi("seq_out", elem)])
    nodes = [const("trips", np.array(4, np.int64)), const("true", np.array(True)),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=elem),
             helper.make_node("Loop", ["trips", "true", "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
    inputs = [tensor_vi(n, elem, a.shape) for n, a in feeds.items()]
    return model_of(nodes, inputs, [tensor_vi("y", elem, [4, 3])]), feeds


def loop_over_a_sequence(elem: int) -> Case:
    """A Loop over a sequence input of tensors of one shape (M = SequenceLength): its body reads
    xs[i] and xs[-1 - i] (SequenceAt at the iteration number), carries a tensor, appends two
    tensors per iteration to a sequence that starts with one, and gives a scan output: one scf.for."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(11)
    feeds = {"xs": [rand(rng, dt, 3) for _ in range(4)], "h0": rand(rng, dt, 3), "c0": rand(rng, dt, 2)}
    body_nodes = [
        const("minus1", np.array(-1, np.int64)),
        helper.make_node("Sub", ["minus1", "i"], ["back"]),
        helper.make_node("SequenceAt", ["xs", "i"], ["a"]),
        helper.make_node("SequenceAt", ["xs", "back"], ["b"]),
        helper.make_node("Add", ["h_in", "a"], ["h_out"]),
        helper.make_node("Mul", ["a", "h_in"], ["ah"]),
        helper.make_node("Tanh", ["b"], ["tb"]),
        helper.make_node("SequenceInsert", ["seq_in", "ah"], ["seq_1"]),
        helper.make_node("SequenceInsert", ["seq_1", "tb"], ["seq_out"]),
        helper.make_node("Sin", ["h_out"], ["scan"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ]
    body = helper.make_graph(body_nodes, "loop_body", [tensor_vi("i", I64, []), tensor_vi("c_in", BOOL, []),
                                                        tensor_vi("h_in", elem, [3]), seq_vi("seq_in", elem)],
                             [tensor_vi("c_out", BOOL, []), tensor_vi("h_out", elem, [3]), seq_vi("seq_out", elem),
                              tensor_vi("scan", elem, [3])])
    nodes = [const("true", np.array(True)),
             helper.make_node("SequenceLength", ["xs"], ["n"]),
             helper.make_node("SequenceConstruct", ["c0"], ["seq0"]),
             helper.make_node("Loop", ["n", "true", "h0", "seq0"], ["h", "seq", "scans"], body=body)]
    inputs = [seq_vi("xs", elem, [3]), tensor_vi("h0", elem, [3]), tensor_vi("c0", elem, [2])]
    return model_of(nodes, inputs, [tensor_vi("h", elem, [3]), seq_vi("seq", elem), tensor_vi("scans", elem, [4, 3])]), feeds


def loop_ragged(elem: int) -> Case:
    """A Loop appending tanh(x[:i+1] * s) to a sequence (ONNX's loop13_seq, one more element each
    iteration) and the row sum to another: the tensors' sizes are read at run time, stacked padded."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(12)
    feeds = {"x": rand(rng, dt, 5), "s": rand(rng, dt, 1)}
    body_nodes = [
        const("zero", np.array([0], np.int64)), const("one", np.array(1, np.int64)),
        const("axes", np.array([0], np.int64)),
        helper.make_node("Add", ["i", "one"], ["end"]),
        helper.make_node("Unsqueeze", ["end", "axes"], ["ends"]),
        helper.make_node("Slice", ["x", "zero", "ends"], ["head"]),
        helper.make_node("Mul", ["head", "s"], ["hs"]),
        helper.make_node("Tanh", ["hs"], ["t"]),
        helper.make_node("ReduceSum", ["t"], ["sum"], keepdims=1),
        helper.make_node("SequenceInsert", ["seq_in", "t"], ["seq_out"]),
        helper.make_node("SequenceInsert", ["sums_in", "sum"], ["sums_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ]
    body = helper.make_graph(body_nodes, "loop_body", [tensor_vi("i", I64, []), tensor_vi("c_in", BOOL, []),
                                                        seq_vi("seq_in", elem), seq_vi("sums_in", elem)],
                             [tensor_vi("c_out", BOOL, []), seq_vi("seq_out", elem), seq_vi("sums_out", elem)])
    nodes = [const("trips", np.array(4, np.int64)), const("true", np.array(True)),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=elem),
             helper.make_node("Loop", ["trips", "true", "empty", "empty"], ["seq", "sums"], body=body),
             helper.make_node("ConcatFromSequence", ["sums"], ["y"], axis=0)]
    inputs = [tensor_vi(n, elem, a.shape) for n, a in feeds.items()]
    return model_of(nodes, inputs, [seq_vi("seq", elem), tensor_vi("y", elem, [4])]), feeds


def loop_over_ragged_sequences(elem: int) -> Case:
    """An expanded SequenceMap: a Loop over two sequence inputs of tensors of different shapes, its
    body reading xs[i] and ys[i] (each its own shape, read at run time), appending xs[i] * ys[i] +
    xs[i] and Shape(xs[i])."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(13)
    sizes = [(4, 2), (1, 3), (3, 1)]
    feeds = {"xs": [rand(rng, dt, *n) for n in sizes], "ys": [rand(rng, dt, *n) for n in sizes]}
    body_nodes = [
        helper.make_node("SequenceAt", ["xs", "i"], ["a"]),
        helper.make_node("SequenceAt", ["ys", "i"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["ab", "a"], ["o"]),
        helper.make_node("Shape", ["a"], ["shape"]),
        helper.make_node("SequenceInsert", ["os_in", "o"], ["os_out"]),
        helper.make_node("SequenceInsert", ["shapes_in", "shape"], ["shapes_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ]
    body = helper.make_graph(body_nodes, "loop_body", [tensor_vi("i", I64, []), tensor_vi("c_in", BOOL, []),
                                                        seq_vi("os_in", elem), seq_vi("shapes_in", I64)],
                             [tensor_vi("c_out", BOOL, []), seq_vi("os_out", elem), seq_vi("shapes_out", I64)])
    nodes = [const("true", np.array(True)),
             helper.make_node("SequenceLength", ["xs"], ["n"]),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=elem),
             helper.make_node("SequenceEmpty", [], ["no_shapes"], dtype=I64),
             helper.make_node("Loop", ["n", "true", "empty", "no_shapes"], ["os", "shapes"], body=body)]
    inputs = [seq_vi("xs", elem, ["r", "c"]), seq_vi("ys", elem, ["r", "c"])]
    return model_of(nodes, inputs, [seq_vi("os", elem), seq_vi("shapes", I64)]), feeds


def if_sequences(elem: int) -> Case:
    """If with a condition known at run time whose branches give sequences of one length: selected tensor
    by tensor; the sequence and an optional of it are outputs."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(7)
    feeds = {"a": rand(rng, dt, 2), "b": rand(rng, dt, 3), "cond": np.array(False)}
    then_ = helper.make_graph([helper.make_node("SequenceConstruct", ["a", "b"], ["s1"])], "then", [],
                              [seq_vi("s1", elem)])
    else_ = helper.make_graph([helper.make_node("Exp", ["a"], ["ea"]), helper.make_node("Sin", ["b"], ["sb"]),
                               helper.make_node("SequenceConstruct", ["ea", "sb"], ["s2"])], "else", [],
                              [seq_vi("s2", elem)])
    nodes = [helper.make_node("If", ["cond"], ["s"], then_branch=then_, else_branch=else_),
             helper.make_node("Identity", ["s"], ["s_out"]),
             helper.make_node("Optional", ["s"], ["o_out"])]
    inputs = [tensor_vi("a", elem, [2]), tensor_vi("b", elem, [3]), tensor_vi("cond", BOOL, [])]
    return model_of(nodes, inputs, [seq_vi("s_out", elem), opt_seq_vi("o_out", elem)]), feeds


CASES: dict[str, Callable[[int], Case]] = {
    "plumbing": plumbing,
    "split-map-stack": split_map_stack,
    "chunks": chunks,
    "sequence-inputs": sequence_inputs,
    "optionals": optionals,
    "loop-sequence": loop_sequence,
    "loop-over-a-sequence": loop_over_a_sequence,
    "loop-ragged": loop_ragged,
    "loop-over-ragged-sequences": loop_over_ragged_sequences,
    "if-sequences": if_sequences,
}


@pytest.fixture(scope="module")
def compiled():
    functions, built, layouts = [], {}, {}
    for suffix, elem in (("", F), ("-f64", D)):
        for cid, make in CASES.items():
            model, feeds = make(elem)
            found: list = []
            module, weights, bound = import_graph(model, {n: shapes_of(v) for n, v in feeds.items()}, feeds,
                                                  layouts=found)
            assert not weights
            (f,) = list(module.ops)
            f.detach()
            f.sym_name = StringAttr(function_name(cid + suffix))
            functions.append(f)
            built[cid + suffix], layouts[cid + suffix] = (model, feeds, bound), found
    return opc.compile(ModuleOp(functions), grad=True), built, layouts


def run_case(m, layouts, cid: str, feeds: Mapping, bound) -> tuple[list, list[np.ndarray]]:
    args = [a for n, v in feeds.items() if n not in bound for a in flatten(v)]
    out = getattr(m, function_name(cid))(*args)
    flat = list(out) if isinstance(out, tuple) else [out]
    return regroup(layouts[cid], flat), args


def assert_same(got, want, rtol: float = 2e-5, atol: float = 2e-6) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    assert want is not None and got is not None
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("suffix", ["", "-f64"])
@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str, suffix: str) -> None:
    m, built, layouts = compiled
    model, feeds, bound = built[cid + suffix]
    got, _ = run_case(m, layouts, cid + suffix, feeds, bound)
    want = run_ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w)


@pytest.mark.parametrize("cid", list(CASES))
def test_gradient_through_the_sequences(compiled, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h, L = the float outputs times a fixed random cotangent."""
    m, built, layouts = compiled
    model, feeds, bound = built[cid + "-f64"]
    name = function_name(cid + "-f64")
    _, args = run_case(m, layouts, cid + "-f64", feeds, bound)
    outs = getattr(m, name)(*args)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    rng = np.random.default_rng(8)
    douts = [rng.uniform(-1, 1, o.shape) if o.dtype.kind == "f" else np.zeros_like(o) for o in outs]
    floats = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    grads = getattr(m, name + "_grad")(*args, *douts)  # integer and bool results get (zero) douts too
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    assert len(grads) == len(floats)

    def loss(values: list[np.ndarray]) -> float:
        ys = getattr(m, name)(*values)
        ys = list(ys) if isinstance(ys, tuple) else [ys]
        return float(sum(np.sum(y * d) for y, d in zip(ys, douts) if y.dtype.kind == "f"))

    v = {i: rng.uniform(-1, 1, args[i].shape) for i in floats}
    h = 1e-6
    moved = [[a + s * h * v[i] if i in v else a for i, a in enumerate(args)] for s in (1, -1)]
    fd = (loss(moved[0]) - loss(moved[1])) / (2 * h)
    analytic = float(sum(np.sum(g * v[i]) for g, i in zip(grads, floats)))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)
    assert any(np.any(g != 0) for g in grads)  # a gradient flows through the list plumbing


@pytest.mark.parametrize("make", [loop_sequence, loop_over_a_sequence, loop_ragged, loop_over_ragged_sequences])
def test_loops_growing_sequences_import_their_body_once(make) -> None:
    """A Loop that appends to a sequence it carries is one scf.for, its body (one Tanh) imported once,
    not once per iteration; a sequence its body reads by the iteration number is stacked once,
    before the loop."""
    model, feeds = make(F)
    module, _, _ = import_graph(model, {n: shapes_of(v) for n, v in feeds.items()}, feeds)
    text = str(module)
    assert text.count("scf.for") == 1 and text.count("opc.tanh") <= 1 and text.count("opc.add") <= 1, text
    if make is loop_over_a_sequence:
        assert text.count("opc.concat") == 1 and text.index("opc.concat") < text.index("scf.for"), text


def test_load_onnx_takes_and_gives_sequences_and_compiles_per_length() -> None:
    model, _ = sequence_inputs(F)
    f = opc.load_onnx(model)
    rng = np.random.default_rng(9)
    for sizes in ([4, 2, 3], [5, 2, 1, 6], [4, 2, 3]):  # item 1 is of 2: the output SequenceAt(ys, 1) is [2]
        xs = [rand(rng, np.float32, n) for n in sizes]
        ys = [rand(rng, np.float32, n) for n in sizes]
        got = f(xs, ys)
        want = run_ort(model, {"xs": xs, "ys": ys})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    assert len(f.variants) == 2  # the third call, of lengths [4, 2, 3] again, reused the first build


def test_load_onnx_sequence_items_of_an_equal_dtype_with_metadata() -> None:
    """Items whose float32 dtype carries metadata are float32 (dtypes compare by ==, not identity)."""
    model, _ = sequence_inputs(F)
    rng = np.random.default_rng(4)
    tagged = np.dtype(np.float32, metadata={"unit": "m"})
    xs = [rand(rng, np.float32, n).astype(tagged) for n in (4, 2, 3)]
    ys = [rand(rng, np.float32, n) for n in (4, 2, 3)]
    got, want = opc.load_onnx(model)(xs, ys), run_ort(model, {"xs": [x.astype(np.float32) for x in xs], "ys": ys})
    for g, w in zip(got, want):
        assert_same(g, w)


def test_load_onnx_optional_input_empty_or_full() -> None:
    inputs = [helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))),
              tensor_vi("x", F, [3])]
    then_ = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["g"]),
                               helper.make_node("Add", ["g", "x"], ["r"])], "then", [], [tensor_vi("r", F, [3])])
    else_ = helper.make_graph([helper.make_node("Neg", ["x"], ["r2"])], "else", [], [tensor_vi("r2", F, [3])])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["y"], then_branch=then_, else_branch=else_)]
    model = model_of(nodes, inputs, [tensor_vi("y", F, [3])])
    f = opc.load_onnx(model)
    x, o = np.array([1, 2, 3], np.float32), np.array([0.5, -1, 4], np.float32)
    for value in (o, None):
        (got,) = f(value, x)
        assert_same(got, run_ort(model, {"o": value, "x": x})[0])
    assert len(f.variants) == 2  # an empty optional is a variant of its own


@pytest.mark.parametrize("value, message", [
    (np.zeros(3, np.float32), "input 'xs' is a sequence: give a list of arrays"),
    ([np.zeros(3, np.float64)] * 3, "input 'xs' item 0 has dtype float64, the model wants float"),
    ([np.zeros((3, 1), np.float32)] * 3, "input 'xs' item 0 has shape [3, 1], the model wants ['?']"),
])
def test_load_onnx_names_the_sequence_input_that_does_not_fit(value, message: str) -> None:
    model, _ = sequence_inputs(F)
    with pytest.raises(ValueError) as err:
        opc.load_onnx(model)(value, [np.zeros(3, np.float32)] * 3)
    assert message in str(err.value)


def refusal_models() -> dict[str, tuple[onnx.ModelProto, dict, str]]:
    x = tensor_vi("x", F, [2])
    cases = {}
    seq2 = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"])]
    cases["at-out-of-range"] = (model_of([*seq2, const("p", np.array(2, np.int64)),
                                          helper.make_node("SequenceAt", ["s", "p"], ["y"], name="the_op")],
                                         [x], [tensor_vi("y", F, [2])]), {},
                                "node 'the_op' (SequenceAt): position 2 is out of range for a sequence of 2")
    cases["erase-empty"] = (model_of([helper.make_node("SequenceEmpty", [], ["s"], dtype=F),
                                      helper.make_node("SequenceErase", ["s"], ["t"], name="the_op"),
                                      helper.make_node("SequenceInsert", ["t", "x"], ["y"])],
                                     [x], [seq_vi("y", F)]), {},
                            "node 'the_op' (SequenceErase): the sequence is empty: nothing to erase")
    cases["concat-empty"] = (model_of([helper.make_node("SequenceEmpty", [], ["s"], dtype=F),
                                       helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="the_op")],
                                      [x], [tensor_vi("y", F, [2])]), {},
                             "node 'the_op' (ConcatFromSequence): the sequence is empty")
    cases["get-empty"] = (model_of([helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
                                    helper.make_node("OptionalGetElement", ["o"], ["g"], name="the_op"),
                                    helper.make_node("Add", ["g", "x"], ["y"])],
                                   [x], [tensor_vi("y", F, [2])]), {},
                          "node 'the_op' (OptionalGetElement): the optional 'o' is empty")
    body = helper.make_graph([helper.make_node("Add", ["a", "b"], ["o"])], "b",
                             [tensor_vi("a", F, None), tensor_vi("b", F, None)], [tensor_vi("o", F, None)])
    cases["map-lengths"] = (model_of([*seq2, helper.make_node("SequenceConstruct", ["x"], ["t"]),
                                      helper.make_node("SequenceMap", ["s", "t"], ["y"], body=body, name="the_op")],
                                     [x], [seq_vi("y", F)]), {},
                            "node 'the_op' (SequenceMap): its sequences have different lengths [1, 2]")
    cases["no-shapes"] = (model_of([helper.make_node("SequenceLength", ["xs"], ["y"])], [seq_vi("xs", F, [2])],
                                   [tensor_vi("y", I64, [])]), None,
                          "input 'xs' is a sequence: opc needs its length and shapes at import")
    then_ = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s1"])], "then", [], [seq_vi("s1", F)])
    else_ = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s2"])], "else", [],
                              [seq_vi("s2", F)])
    cases["if-lengths"] = (model_of([helper.make_node("If", ["c"], ["y"], then_branch=then_, else_branch=else_,
                                                      name="the_op")],
                                    [x, tensor_vi("c", BOOL, [])], [seq_vi("y", F)]), {},
                           "node 'the_op' (If): input 0 ('c', condition) must be known at compile time")

    def growing(nodes, carried=None, cond_out: str = "c_in") -> onnx.ModelProto:
        """A Loop of 3 carrying a sequence (or `carried`), its body `nodes` then appending x to seq_in."""
        carried = carried or seq_vi("seq_in", F)
        body = helper.make_graph([*nodes, helper.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"], name="ins"),
                                  helper.make_node("Identity", [cond_out], ["c_out"])], "body",
                                 [tensor_vi("i", I64, []), tensor_vi("c_in", BOOL, []), carried],
                                 [tensor_vi("c_out", BOOL, []), seq_vi("seq_out", F)])
        return model_of([const("m", np.array(3, np.int64)), const("t", np.array(True)),
                         helper.make_node("SequenceEmpty", [], ["s"], dtype=F),
                         helper.make_node("Loop", ["m", "t", "s"], ["y"], body=body, name="the_op")],
                        [x], [seq_vi("y", F)])
    cases["loop-reads-its-sequence"] = (
        growing([helper.make_node("SequenceLength", ["seq_in"], ["n"], name="len")]), {},
        "node 'len' (SequenceLength): input 0 ('seq_in') is a sequence the Loop carries: opc keeps its tensors in "
        "the loop's stacked buffers, so its body may only append to it")
    cases["loop-stops-a-sequence"] = (
        growing([const("two", np.array(2, np.int64)), helper.make_node("Less", ["i", "two"], ["go"])],
                cond_out="go"), {},
        "node 'the_op' (Loop): it carries a sequence, and its body may turn the condition false")
    return cases


REFUSALS = refusal_models()


@pytest.mark.parametrize("cid", list(REFUSALS))
def test_refusals_are_one_line_naming_the_node(cid: str) -> None:
    model, shapes, message = REFUSALS[cid]
    with pytest.raises(OpcError) as err:
        opc.import_onnx(model, shapes=shapes)
    text = str(err.value)
    assert message in text, text
    assert not text.startswith("error") and "\n" not in text


@pytest.mark.parametrize("split, message", [
    (np.array([1, 2], np.int64), "split [1, 2] does not add up to the length 2 of axis 0"),
    (np.array(0, np.int64), "split must be positive, got 0"),
])
def test_split_given_at_run_time_is_checked_at_compile_time(split: np.ndarray, message: str) -> None:
    """A split that is a graph input is bound by value (onnx's shape inference cannot see it): checked then."""
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["s"], name="the_op"),
             helper.make_node("SequenceLength", ["s"], ["y"])]
    model = model_of(nodes, [tensor_vi("x", F, [2]), tensor_vi("split", I64, list(split.shape))],
                     [tensor_vi("y", I64, [])])
    with pytest.raises(OpcError) as err:
        opc.load_onnx(model)(np.zeros(2, np.float32), split)
    assert f"node 'the_op' (SplitToSequence): {message}" in str(err.value)
    assert "\n" not in str(err.value)


SIMPLE = Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple"


def read_pb(path: Path, type_proto: onnx.TypeProto):
    """A test data file of onnx's backend suite, read as the value's type says (as onnx's runner does)."""
    kind = type_proto.WhichOneof("value")
    proto = {"sequence_type": onnx.SequenceProto, "optional_type": onnx.OptionalProto}.get(kind, onnx.TensorProto)()
    proto.ParseFromString(path.read_bytes())
    if kind == "sequence_type":
        return numpy_helper.to_list(proto)
    return numpy_helper.to_optional(proto) if kind == "optional_type" else numpy_helper.to_array(proto)


@pytest.mark.parametrize("n", range(1, 9))
def test_onnx_sequence_models_through_the_backend(n: int) -> None:
    """onnx's test_sequence_model1..8 (Sequence{Empty,Construct,Insert,Erase,At,Length}, ConcatFromSequence,
    SplitToSequence; positions known at compile time) through opc.onnx_backend, against the
    outputs onnx records for them."""
    import opc.onnx_backend

    case = SIMPLE / f"test_sequence_model{n}"
    model = onnx.load(str(case / "model.onnx"))
    data = case / "test_data_set_0"
    init = {t.name for t in model.graph.initializer}  # positions: initializers listed as inputs (IR 3)
    fed = [vi for vi in model.graph.input if vi.name not in init]
    inputs = [read_pb(data / f"input_{k}.pb", vi.type) for k, vi in enumerate(fed)]
    want = [read_pb(data / f"output_{k}.pb", vi.type) for k, vi in enumerate(model.graph.output)]
    got = opc.onnx_backend.prepare(model).run(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w, rtol=1e-6, atol=1e-7)


def test_import_onnx_takes_a_sequence_length_and_shapes_in_shapes() -> None:
    """Ahead of time: a sequence input of k tensors is k arguments named xs_at0.., an empty optional none."""
    model, _ = sequence_inputs(F)
    module, _ = opc.import_onnx(model, shapes={"xs": [(4,), (2,)], "ys": [(4,), (2,)]})
    (f,) = list(module.ops)
    assert [a.name_hint for a in f.body.block.args] == ["xs_at0", "xs_at1", "ys_at0", "ys_at1"]
    assert [list(a.type.get_shape()) for a in f.body.block.args] == [[4], [2], [4], [2]]
    assert [list(t.get_shape()) for t in f.function_type.outputs] == [[4], [2], [2]]
    with pytest.raises(OpcError) as err:
        opc.import_onnx(model, shapes={"xs": (4,), "ys": [(4,)]})
    assert str(err.value) == "shapes: input 'xs' is a sequence: give a list of its tensors' shapes, got (4,)"
