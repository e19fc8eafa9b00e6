"""Opset 8's batched Scan (opc/onnx_import/control_flow.py, scan_batched): one scf.for over the batch
around one scf.for over the sequence, the body imported once. Batches 2 and 3, each scan input
forward or reversed, sequence_lens absent, full or shorter per batch element (a run-time input or
a constant); against a NumPy reference of the ONNX pseudo-code (outputs past an element's length
are zeros, as onnxruntime pads) and onnxruntime where installed; the IR's size does not grow with
the sequence length; one compile serves every batch, length and sequence_lens."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from requires import import_or_skip

import_or_skip("onnx", "the ONNX importer needs the onnx package (pip install '.[onnx]')")
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import ModuleOp, StringAttr  # noqa: E402

import opc  # noqa: E402
from opc.errors import OpcError  # noqa: E402

F = onnx.TensorProto.FLOAT
W = np.array([0.5, -0.7, 1.1], np.float32)
HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None


def scan8(batch: int | str, seq: int | str, directions: tuple[int, int], lens: str = "none") -> onnx.ModelProto:
    """s = tanh(s * w + a_t), scan outputs y1 = s and y2 = a_t * b_t; lens: "none" (absent), "input"
    (a graph input) or a constant's values as "5,2,1"."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Mul", ["s_in", "w"], ["sw"]), helper.make_node("Add", ["sw", "a"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y1"]),
             helper.make_node("Mul", ["a", "b"], ["y2"])]
    body = helper.make_graph(nodes, "body", [vi("s_in", F, [3]), vi("a", F, [3]), vi("b", F, [3])],
                             [vi("s_out", F, [3]), vi("y1", F, [3]), vi("y2", F, [3])],
                             [numpy_helper.from_array(W, "w")])
    node = helper.make_node("Scan", ["" if lens == "none" else "lens", "s0", "xa", "xb"], ["s", "y1s", "y2s"],
                            body=body, num_scan_inputs=2, directions=list(directions))
    ins = [vi("s0", F, [batch, 3]), vi("xa", F, [batch, seq, 3]), vi("xb", F, [batch, seq, 3])]
    inits = []
    if lens == "input":
        ins.insert(0, vi("lens", onnx.TensorProto.INT64, [batch]))
    elif lens != "none":
        inits.append(numpy_helper.from_array(np.array([int(n) for n in lens.split(",")], np.int64), "lens"))
    outs = [vi("s", F, [batch, 3]), vi("y1s", F, [batch, seq, 3]), vi("y2s", F, [batch, seq, 3])]
    graph = helper.make_graph([node], "main_graph", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=4)


def reference(s0, xa, xb, directions, lens) -> list[np.ndarray]:
    """ONNX's pseudo-code for Scan 8: each batch element runs lens[b] steps from its own state; a
    reversed input is read from step lens[b] - 1 down; scan outputs past lens[b] are zeros."""
    batch, seq = xa.shape[:2]
    s, y1, y2 = s0.copy(), np.zeros_like(xa), np.zeros_like(xa)
    for b in range(batch):
        n = seq if lens is None else int(lens[b])
        for t in range(n):
            a, c = (x[b, n - 1 - t if d else t] for x, d in zip((xa, xb), directions))
            s[b] = np.tanh(s[b] * W + a)
            y1[b, t], y2[b, t] = s[b], a * c
    return [s, y1, y2]


def feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"s0": rng.uniform(-1, 1, (batch, 3)).astype(np.float32),
            "xa": rng.uniform(-1, 1, (batch, seq, 3)).astype(np.float32),
            "xb": rng.uniform(-1, 1, (batch, seq, 3)).astype(np.float32)}


def run_ort(model: onnx.ModelProto, given: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, given)]


GRID = [(batch, directions, lens) for batch in (2, 3) for directions in ((0, 0), (1, 0), (0, 1), (1, 1))
        for lens in ("none", "full", "short")]


def name_of(case: tuple) -> str:
    batch, directions, lens = case
    return f"scan8_b{batch}_d{directions[0]}{directions[1]}_{lens}"


@pytest.fixture(scope="module")
def compiled():
    """Every grid case imported (static shapes, lens a graph input where given), all compiled as one module."""
    functions, cases = [], {}
    for case in GRID:
        batch, directions, lens = case
        model = scan8(batch, 5, directions, "none" if lens == "none" else "input")
        module, params = opc.import_onnx(model)
        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        f.detach()
        f.sym_name = StringAttr(name_of(case))
        functions.append(f)
        cases[case] = model, params
    return opc.compile(ModuleOp(functions)), cases


def lens_for(batch: int, lens: str) -> np.ndarray | None:
    return {"none": None, "full": np.full(batch, 5, np.int64), "short": np.array([5, 2, 1][:batch], np.int64)}[lens]


@pytest.mark.parametrize(("batch", "directions", "lens"), GRID)
def test_matches_numpy_and_onnxruntime(compiled, batch: int, directions: tuple[int, int], lens: str) -> None:
    m, cases = compiled
    model, params = cases[batch, directions, lens]
    given = feeds(batch, 5, seed=batch * 10 + directions[0] * 2 + directions[1])
    n = lens_for(batch, lens)
    args = {**({} if n is None else {"lens": n}), **given}
    got = getattr(m, name_of((batch, directions, lens)))(*args.values(), *params.values())
    want = reference(given["s0"], given["xa"], given["xb"], directions, n)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    if HAVE_ORT:  # onnxruntime's own Scan 8 (it pads with zeros too)
        for g, w in zip(got, run_ort(model, args), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not HAVE_ORT, reason="onnxruntime is not installed: it is the second oracle here")
def test_onnxruntime_agrees_with_the_reference() -> None:
    """The NumPy reference's reading of sequence_lens with a reversed input is onnxruntime's."""
    model = scan8(3, 5, (1, 0), "input")
    given = feeds(3, 5, seed=99)
    n = np.array([4, 1, 3], np.int64)
    want = reference(given["s0"], given["xa"], given["xb"], (1, 0), n)
    for g, w in zip(run_ort(model, {"lens": n, **given}), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_constant_sequence_lens() -> None:
    """sequence_lens an initializer: shorter than the sequence, read per batch element at run time;
    all full: no trip count is read at all."""
    given = feeds(3, 5, seed=3)
    for lens in ("4,1,3", "5,5,5"):
        module, params = opc.import_onnx(scan8(3, 5, (1, 0), lens))
        assert ("tensor.extract %" in str(module)) == (lens != "5,5,5")
        got = opc.compile(module).main_graph(*given.values(), *params.values())
        want = reference(given["s0"], given["xa"], given["xb"], (1, 0), [int(n) for n in lens.split(",")])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def ops_of(module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in module.walk():
        counts[op.name] = counts.get(op.name, 0) + 1
    return counts


def test_ir_does_not_grow_with_the_sequence() -> None:
    """Two loops (batch, sequence), the body's ops once, and the same op counts at lengths 2 and 2,000."""
    short, _ = opc.import_onnx(scan8(3, 2, (1, 0), "input"))
    long, _ = opc.import_onnx(scan8(3, 2000, (1, 0), "input"))
    counts = ops_of(short)
    assert counts == ops_of(long)
    assert counts["scf.for"] == 2 and counts["opc.tanh"] == 1, counts


def test_run_time_sizes_compile_once() -> None:
    """Batch and sequence as dim_params: one compiled function for every (batch, length, lens)."""
    model = scan8("B", "T", (1, 0), "input")
    module, params = opc.import_onnx(model)
    m = opc.compile(module)
    rng = np.random.default_rng(6)
    for batch, seq in ((2, 1), (3, 4), (1, 7)):
        given = feeds(batch, seq, seed=seq)
        n = rng.integers(0, seq + 1, batch).astype(np.int64)
        got = m.main_graph(n, *given.values(), *params.values())
        want = reference(given["s0"], given["xa"], given["xb"], (1, 0), n)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_sequence_lens_out_of_range() -> None:
    """A constant sequence_lens beyond the sequence: a one-line error at import; a run-time one: a
    ValueError at the call (the slice past the end), never numbers read out of bounds."""
    with pytest.raises(OpcError) as err:
        opc.import_onnx(scan8(2, 5, (0, 0), "5,6"))
    assert "sequence_lens [5, 6] out of range: each must be in [0, 5]" in str(err.value)
    assert "\n" not in str(err.value)
    module, params = opc.import_onnx(scan8(2, 5, (0, 0), "input"))
    given = feeds(2, 5, seed=1)
    with pytest.raises(ValueError, match="extract_slice"):
        opc.compile(module).main_graph(np.array([5, 6], np.int64), *given.values(), *params.values())
