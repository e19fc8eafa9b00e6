"""opc.load_onnx's compiles found again (opc/onnx_cache.py): a model compiled before loads in a fresh
process without importing xDSL and gives the numbers NumPy computes; a changed weight, shape, opset or
bound input value compiles anew; a corrupt or lost entry compiles again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import opc  # noqa: E402
import opc.onnx_import  # noqa: E402
from opc import compile_cache  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((6, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


def mlp(w: np.ndarray = W, opset: int = 17, rows: int | str = 3) -> Any:
    """y = tanh(x @ w + b): float initializers, so weights; `rows` a str leaves the batch dim open."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, w.shape[1]])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
             helper.make_node("Tanh", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [x], [y], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(B, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reshaped() -> Any:
    """y = reshape(x * s, shape): `shape` is an input the import binds by value."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    s = numpy_helper.from_array(np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(2, 6), "s")
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Reshape", ["m", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "reshaped", [x, shape], [y], [s])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def oracle(x: np.ndarray, w: np.ndarray = W) -> np.ndarray:
    return np.tanh(x.astype(np.float64) @ w + B)


@pytest.fixture
def imports(monkeypatch) -> list[bool]:
    """The imports run (each one's `dynamic` flag); the in-process memory of compiles cleared, as in a
    fresh process."""
    seen: list[bool] = []
    real = opc.onnx_import.import_graph

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(bool(kwargs.get("dynamic")))
        return real(*args, **kwargs)

    monkeypatch.setattr(opc.onnx_import, "import_graph", counting)
    compile_cache._memory.clear()
    return seen


def load_and_run(model, cache: Path, x: np.ndarray, **kwargs) -> np.ndarray:  # noqa: ANN001, ANN003
    compile_cache._memory.clear()  # each load as in a fresh process: the records on disk only
    return opc.load_onnx(model, cache_dir=str(cache), **kwargs)(x)[0]


@pytest.mark.parametrize("as_file", [False, True])
def test_hit_gives_the_miss_numbers_without_an_import(tmp_path, imports, as_file):
    model = mlp()
    if as_file:
        onnx.save(model, str(tmp_path / "mlp.onnx"))
        model = str(tmp_path / "mlp.onnx")
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    miss = load_and_run(model, tmp_path / "cache", x)
    assert imports == [False]
    hit = load_and_run(model, tmp_path / "cache", x)
    assert imports == [False]  # no second import
    np.testing.assert_array_equal(hit, miss)
    np.testing.assert_allclose(hit, oracle(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change", ["weight", "opset", "env"])
def test_a_changed_model_compiles_anew(tmp_path, imports, monkeypatch, change):
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    load_and_run(mlp(), tmp_path / "cache", x)
    w = W.copy()
    if change == "weight":
        w[2, 1] += 0.25
    if change == "env":
        monkeypatch.setenv("OPC_MARCH", "x86-64-v2")
    y = load_and_run(mlp(w, opset=16 if change == "opset" else 17), tmp_path / "cache", x)
    assert imports == [False, False]
    np.testing.assert_allclose(y, oracle(x, w), rtol=1e-5, atol=1e-6)


def test_each_shape_and_the_dynamic_variant_are_found_again(tmp_path, imports):
    cache = tmp_path / "cache"
    xs = [RNG.standard_normal((n, 6)).astype(np.float32) for n in (2, 5)]
    for specialize in (False, True):
        for x in xs:  # dynamic: one import for both shapes; per shape: one each
            np.testing.assert_allclose(load_and_run(mlp(rows="n"), cache, x, specialize=specialize), oracle(x),
                                       rtol=1e-5, atol=1e-6)
    assert imports == [True, False, False]
    for specialize in (False, True):
        for x in xs:
            np.testing.assert_allclose(load_and_run(mlp(rows="n"), cache, x, specialize=specialize), oracle(x),
                                       rtol=1e-5, atol=1e-6)
    assert imports == [True, False, False]  # all found again


def test_bound_input_values_join_the_key(tmp_path, imports):
    cache, x = tmp_path / "cache", RNG.standard_normal((2, 6)).astype(np.float32)
    s = np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        compile_cache._memory.clear()
        y = opc.load_onnx(reshaped(), cache_dir=str(cache))(x, np.array(shape, np.int64))[0]
        np.testing.assert_array_equal(y, (x * s).reshape(shape))
    assert imports == [False, False]  # [3, 4] found again, [4, 3] compiled


def test_a_refused_dynamic_import_is_remembered(tmp_path, imports):
    model = reshaped()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"  # open, but the shape input is needed
    x, shape = RNG.standard_normal((2, 6)).astype(np.float32), np.array([3, 4], np.int64)
    for _ in range(2):
        compile_cache._memory.clear()
        f = opc.load_onnx(model, cache_dir=str(tmp_path / "cache"))
        np.testing.assert_array_equal(f(x, shape)[0], (x * np.linspace(0.5, 2.0, 12, dtype=np.float32)
                                                       .reshape(2, 6)).reshape(3, 4))
        assert f.static_reason is not None
    assert imports == [True, False]  # the second load neither retries the dynamic import nor imports per shape


@pytest.mark.parametrize("damage", ["record", "extension", "note"])
def test_a_damaged_entry_compiles_again(tmp_path, imports, damage):
    cache, x = tmp_path / "cache", RNG.standard_normal((3, 6)).astype(np.float32)
    load_and_run(mlp(), cache, x)
    records = [p for p in (cache / "loaded").glob("*.json") if not p.name.endswith(".note.json")]
    assert len(records) == 1
    if damage == "record":
        records[0].write_text(records[0].read_text()[:40])
    elif damage == "extension":
        ext = cache / json.loads(records[0].read_text())["ext_file"]
        ext.write_bytes(ext.read_bytes()[:1000])
    else:
        for note in (cache / "loaded").glob("*.note.json"):
            note.write_text("{")
    y = load_and_run(mlp(), cache, x)
    np.testing.assert_allclose(y, oracle(x), rtol=1e-5, atol=1e-6)
    assert imports == [False, False]
    assert load_and_run(mlp(), cache, x).tolist() == y.tolist() and imports == [False, False]  # repaired


CHILD = """
import sys
import numpy as np
import opc
x = np.load(sys.argv[3])
y = opc.load_onnx(sys.argv[1], cache_dir=sys.argv[2])(x)[0]
print("xdsl" in sys.modules, "opc.onnx_import.graph" in sys.modules, "onnx" in sys.modules, "ml_dtypes" in sys.modules)
np.save(sys.argv[4], y)
"""


def test_a_fresh_process_loads_without_xdsl(tmp_path):
    model, x = tmp_path / "mlp.onnx", RNG.standard_normal((3, 6)).astype(np.float32)
    onnx.save(mlp(), str(model))
    aged(model)
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def child() -> str:
        out = subprocess.run([sys.executable, "-c", CHILD, str(model), str(tmp_path / "cache"), str(tmp_path / "x.npy"),
                              str(tmp_path / "y.npy")], capture_output=True, text=True, check=True, env=env)
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), oracle(x), rtol=1e-5, atol=1e-6)
        return out.stdout.strip()

    assert child() == "True True True True"  # compiled
    assert child() == "False False False False"  # found again: neither xDSL, the importer, onnx nor ml_dtypes


def aged(path: Path) -> None:
    """The file's modification time an hour back: a file written in the last seconds is parsed at every
    load (onnx_cache.RACY_S), as its stat may not yet tell a rewrite."""
    t = os.path.getmtime(path) - 3600
    os.utime(path, (t, t))


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The model files parsed (proto.read on a path)."""
    from opc.onnx_import import proto

    seen: list[str] = []
    real = proto.read

    def counting(model, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if isinstance(model, (str, os.PathLike)):
            seen.append(os.fspath(model))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(proto, "read", counting)
    return seen


def test_a_known_file_loads_without_parsing(tmp_path, imports, parses):
    model, x = tmp_path / "mlp.onnx", RNG.standard_normal((3, 6)).astype(np.float32)
    onnx.save(mlp(), str(model))
    aged(model)
    miss = load_and_run(str(model), tmp_path / "cache", x)
    hit = load_and_run(str(model), tmp_path / "cache", x)
    assert parses == [str(model)] and imports == [False]
    np.testing.assert_array_equal(hit, miss)
    np.testing.assert_allclose(hit, oracle(x), rtol=1e-5, atol=1e-6)


def test_a_rewritten_file_is_parsed_again(tmp_path, imports, parses):
    model, x = tmp_path / "mlp.onnx", RNG.standard_normal((3, 6)).astype(np.float32)
    onnx.save(mlp(), str(model))
    aged(model)
    load_and_run(str(model), tmp_path / "cache", x)
    w = W.copy()
    w[2, 1] += 0.25
    onnx.save(mlp(w), str(model))  # the same size: its mtime and ctime tell it apart
    y = load_and_run(str(model), tmp_path / "cache", x)
    np.testing.assert_allclose(y, oracle(x, w), rtol=1e-5, atol=1e-6)
    assert parses == [str(model)] * 2 and imports == [False, False]


def test_a_file_written_just_now_is_parsed_each_load(tmp_path, imports, parses):
    model, x = tmp_path / "mlp.onnx", RNG.standard_normal((3, 6)).astype(np.float32)
    onnx.save(mlp(), str(model))
    for _ in range(2):
        np.testing.assert_allclose(load_and_run(str(model), tmp_path / "cache", x), oracle(x), rtol=1e-5, atol=1e-6)
    assert parses == [str(model)] * 2 and imports == [False]  # parsed, yet the compile is found by its bytes


WEIGHTS = {  # every element type a file's weights are read for without onnx, ties and empties among them
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "f64": np.linspace(-1, 1, 5),
    "f16": np.array([0.5, -2.0, 65504.0], np.float16),
    "i64": np.array([[1, -2], [3, 2**40]], np.int64),
    "i32": np.array([7, -7], np.int32),
    "i16": np.array([-300], np.int16),
    "i8": np.array([-5, 5, 0], np.int8),
    "u8": np.array([255, 0], np.uint8),
    "u16": np.array([65535], np.uint16),
    "u32": np.array([2**31], np.uint32),
    "u64": np.array([2**63], np.uint64),
    "bool": np.array([True, False, True]),
    "zeros_a": np.zeros(4, np.float32),
    "zeros_b": np.zeros(4, np.float32),  # the same bytes as zeros_a: either place holds its values
    "empty": np.zeros((0, 3), np.float32),
    "scalar": np.array(3.5, np.float32),
}


def test_weights_are_read_from_their_places_in_the_file(tmp_path):
    from opc import onnx_cache

    inits = [numpy_helper.from_array(v, k) for k, v in WEIGHTS.items()]
    inits.append(helper.make_tensor("listed", TensorProto.FLOAT, [2], [1.5, 2.5]))  # float_data, no raw bytes
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    path = tmp_path / "w.onnx"
    onnx.save(helper.make_model(graph), str(path))
    data = path.read_bytes()
    places = onnx_cache.weight_places(onnx.load_model_from_string(data), data)
    assert set(places) == set(WEIGHTS)  # float_data has no raw bytes to find
    aged(path)
    state = onnx_cache.file_state(str(path))
    assert state is not None
    got = onnx_cache.read_weights(*state, places, list(WEIGHTS))
    assert got is not None
    for (name, want), array in zip(WEIGHTS.items(), got):
        assert array.dtype == want.dtype and array.shape == want.shape, name
        np.testing.assert_array_equal(array, want)
        assert array.ctypes.data % 64 == 0
    assert onnx_cache.read_weights(*state, places, ["listed"]) is None
    assert onnx_cache.read_weights(state[0], state[1] + "x", places, ["f64"]) is None  # the file changed since
    places["f64"][0] = len(data) - 8  # a place past the end: the read falls short
    assert onnx_cache.read_weights(*state, places, ["f64"]) is None


def test_a_file_changed_after_its_load_is_refused(tmp_path, imports):
    """A load found by the file's stat reads the weights and, on a miss, the model at the first call: a
    file rewritten in between is refused in one line, never compiled or run with the other bytes."""
    w = W.copy()
    w[0, 0] += 1.0
    for rows in (3, 4):  # the weights' read (a hit), the import (a miss for 4 rows)
        model, cache = tmp_path / f"mlp{rows}.onnx", tmp_path / "cache"
        onnx.save(mlp(rows="n"), str(model))
        aged(model)
        x = RNG.standard_normal((3, 6)).astype(np.float32)
        load_and_run(str(model), cache, x, specialize=True)  # compiles for 3 rows, notes the file's facts
        compile_cache._memory.clear()
        f = opc.load_onnx(str(model), cache_dir=str(cache), specialize=True)
        onnx.save(mlp(w, rows="n"), str(model))
        with pytest.raises(opc.errors.InputError, match="changed since it was loaded"):
            f(RNG.standard_normal((rows, 6)).astype(np.float32))
    assert imports == [False]  # the changed file was never imported (the second file's bytes: a hit)
