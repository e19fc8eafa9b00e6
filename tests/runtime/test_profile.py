"""The profiler (opc/profiler.py, the C emitter's kernel timers): every kernel call counted and
timed, the totals within the wall time of the calls, the Chrome trace's events adding up to the
table, the same numbers with the timers on and off, `OPC_PROFILE=1` and `opc profile`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import opc
from opc.cli import main

SRC = """func.func @layer(%x: tensor<64x96xf32>, %w: tensor<96x128xf32>, %m: tensor<128xf32>) -> tensor<64x128xf32> {
  %h = opc.matmul %x, %w : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %a = opc.add %h, %m : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %t = opc.tanh %a : (tensor<64x128xf32>) -> tensor<64x128xf32>
  %s = opc.reduce_max %t {axes = array<i64: 1>, keepdim = true} : (tensor<64x128xf32>) -> tensor<64x1xf32>
  %y = opc.sub %t, %s : (tensor<64x128xf32>, tensor<64x1xf32>) -> tensor<64x128xf32>
  func.return %y : tensor<64x128xf32>
}
"""


@pytest.fixture(scope="module")
def layer():
    m = opc.compile(SRC)
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((64, 96), np.float32), rng.standard_normal((96, 128), np.float32),
            rng.standard_normal(128, np.float32))
    x, w, b = (a.astype(np.float64) for a in args)
    t = np.tanh(x @ w + b)
    return m, args, t - t.max(axis=1, keepdims=True)


@pytest.mark.parametrize("calls", [1, 7])
def test_table_counts_every_call_within_wall_time(layer, calls, tmp_path):
    m, args, want = layer
    m.layer(*args)
    p = opc.profile(m)
    p.reset()
    t0 = time.perf_counter()
    for _ in range(calls):
        np.testing.assert_allclose(m.layer(*args), want, rtol=1e-4, atol=1e-4)  # timers on: same numbers
    wall = (time.perf_counter() - t0) * 1e3
    p.stop()
    m.layer(*args)  # off: not counted
    rows = p.rows()
    assert {r["kind"] for r in rows} >= {"gemm", "row"} and len(rows) >= 2
    assert all(r["calls"] == calls for r in rows)
    assert 0 < sum(r["total_ms"] for r in rows) <= wall
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert "| total |" in p.table()
    trace = tmp_path / "trace.json"
    p.chrome_trace(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == calls * len(rows) and {e["ph"] for e in events} == {"X"}
    by_kernel = {r["kernel"]: r["total_ms"] for r in rows}
    for name, total in by_kernel.items():
        assert sum(e["dur"] for e in events if e["name"] == name) / 1e3 == pytest.approx(total, rel=1e-6, abs=1e-6)


def test_not_an_opc_module():
    class Fake:
        path = "/nonexistent/_opc_nothing.so"

    with pytest.raises(ValueError, match="profile: module must be a CPU module compiled by opc"):
        opc.profile(Fake())


def test_environment_variable_prints_at_exit(tmp_path):
    path = tmp_path / "layer.mlir"
    path.write_text(SRC)
    code = ("import numpy as np, opc, sys\nm = opc.compile(sys.argv[1])\n"
            "m.layer(np.ones((64, 96), np.float32), np.ones((96, 128), np.float32), np.ones(128, np.float32))\n")
    trace = tmp_path / "t.json"
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPC_PROFILE": str(trace), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "opc profile" in run.stderr and "| layer#0 | gemm |" in run.stderr
    assert len(json.loads(trace.read_text())["traceEvents"]) >= 2


def test_cli(tmp_path, capsys):
    path = tmp_path / "layer.mlir"
    path.write_text(SRC)
    assert main(["profile", str(path), "--grad", "--repeat", "3", "--trace", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "3 functions x 3 calls" in out and "| layer_grad#" in out and "| layer#0 | gemm |" in out
    assert (tmp_path / "t.json").is_file()
    assert main(["profile", str(path), "--repeat", "0"]) == 1
    assert capsys.readouterr().err == "error: --repeat must be at least 1, got 0\n"


def test_cli_inputs(layer, tmp_path, capsys):
    """--inputs random is the default; --inputs FILE.npz calls with the named arrays (a wrong array is the
    binding's ValueError, a missing one an error line)."""
    path = tmp_path / "layer.mlir"
    path.write_text(SRC)
    _, args, _ = layer
    np.savez(tmp_path / "in.npz", x=args[0], w=args[1], m=args[2])
    assert main(["profile", str(path), "--inputs", "random", "--repeat", "2"]) == 0
    assert main(["profile", str(path), "--inputs", str(tmp_path / "in.npz"), "--repeat", "2"]) == 0
    assert "1 functions x 2 calls" in capsys.readouterr().out
    np.savez(tmp_path / "part.npz", x=args[0], w=args[1])
    assert main(["profile", str(path), "--inputs", str(tmp_path / "part.npz")]) == 1
    assert capsys.readouterr().err == f"error: --inputs {tmp_path / 'part.npz'} has no array 'm' for layer()\n"
    assert main(["profile", str(path), "--inputs", str(tmp_path / "none.npz")]) == 1
    assert capsys.readouterr().err.startswith(f"error: --inputs {tmp_path / 'none.npz'}: not 'random' nor a readable")



def test_cli_weights_from_the_model(layer, tmp_path, capsys):
    """The weights are the model's own: an .onnx file's initializers, or the .npz twin `opc import`
    wrote next to an .mlir file; only the other arguments are random (or from --inputs)."""
    from opc.cli import model_weights

    path = tmp_path / "layer.mlir"
    path.write_text(SRC)
    assert model_weights(str(path)) == ({}, None)
    _, args, _ = layer
    np.savez(tmp_path / "layer.npz", w=args[1], m=args[2])
    weights, where = model_weights(str(path))
    assert where == str(tmp_path / "layer.npz") and set(weights) == {"w", "m"}
    np.testing.assert_array_equal(weights["m"], args[2])
    np.savez(tmp_path / "x.npz", x=args[0])  # --inputs names only x: w and m come from the twin
    assert main(["profile", str(path), "--inputs", str(tmp_path / "x.npz"), "--repeat", "1"]) == 0
    assert f"weights from {tmp_path / 'layer.npz'}" in capsys.readouterr().out


def test_cli_weights_of_an_onnx_model(tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the optional onnx package is not installed")
    from onnx import TensorProto, helper, numpy_helper

    from opc.cli import model_weights

    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    weights, where = model_weights(str(path))
    assert where == f"{path}'s initializers"
    np.testing.assert_array_equal(weights["w"], w)
    assert main(["profile", str(path), "--repeat", "1"]) == 0
    assert "weights from" in capsys.readouterr().out


def test_cli_profiles_an_onnx_model_as_load_onnx_runs_it(tmp_path, capsys):
    """Conv + BatchNormalization: `opc profile` times the conv with the BatchNorm folded in, as
    opc.load_onnx runs the model (one fused conv kernel, no batch_norm); --grad keeps the BatchNorm
    (the training import's: its normalization the conv's epilogue nest)."""
    onnx = pytest.importorskip("onnx", reason="the optional onnx package is not installed")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": np.zeros(4, np.float32),
              "g": np.ones(4, np.float32), "beta": np.zeros(4, np.float32), "mean": np.zeros(4, np.float32),
              "var": np.ones(4, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    path = tmp_path / "conv_bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main(["profile", str(path), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "BatchNorms folded" in out and "| fused_conv_epilogue_f32 |" in out and "batch_norm" not in out, out
    assert main(["profile", str(path), "--repeat", "1", "--grad"]) == 0
    out = capsys.readouterr().out
    assert f"weights from {path}'s initializers\n" in out and "sub, mul, add" in out, out


CONVS = """func.func @convs(%x: tensor<1x8x12x12xf32>, %w: tensor<16x8x3x3xf32>, %d: tensor<8x1x3x3xf32>,
                  %x64: tensor<1x8x12x12xf64>, %w64: tensor<16x8x3x3xf64>) -> (tensor<1x16x12x12xf32>, tensor<1x8x12x12xf32>, tensor<1x16x12x12xf64>) {
  %y = opc.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x8x12x12xf32>, tensor<16x8x3x3xf32>) -> tensor<1x16x12x12xf32>
  %z = opc.conv %x, %d {pads = array<i64: 1, 1, 1, 1>, group = 8} : (tensor<1x8x12x12xf32>, tensor<8x1x3x3xf32>) -> tensor<1x8x12x12xf32>
  %y64 = opc.conv %x64, %w64 {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x8x12x12xf64>, tensor<16x8x3x3xf64>) -> tensor<1x16x12x12xf64>
  func.return %y, %z, %y64 : tensor<1x16x12x12xf32>, tensor<1x8x12x12xf32>, tensor<1x16x12x12xf64>
}
"""


def test_routes_count_the_runtime_kernels_each_call_takes(tmp_path, capsys):
    """Profile.routes(): per call, the kernel each conv took (tests/ops/test_conv_fast.py asserts them per
    geometry); off, nothing is counted; reset forgets; `opc profile` prints them, and nothing for a
    module without convs."""
    m = opc.compile(CONVS)
    rng = np.random.default_rng(0)
    shapes = [((1, 8, 12, 12), np.float32), ((16, 8, 3, 3), np.float32), ((8, 1, 3, 3), np.float32),
              ((1, 8, 12, 12), np.float64), ((16, 8, 3, 3), np.float64)]
    args = [rng.standard_normal(s).astype(t) for s, t in shapes]
    m.convs(*args)
    p = opc.profile(m)
    p.reset()
    for _ in range(3):
        m.convs(*args)
    p.stop()
    m.convs(*args)
    routes = p.routes()
    assert sum(routes.values()) == 9 and routes["conv: im2col gemm"] == 3, routes  # f64: the GEMM
    assert all(n == 3 for n in routes.values()) and any(r.startswith("depthwise: ") for r in routes)
    assert p.routes_table().splitlines()[:2] == ["| route | calls |", "|---|---|"]
    p.reset()
    assert p.routes() == {} and p.routes_table() == ""
    path = tmp_path / "convs.mlir"
    path.write_text(CONVS)
    assert main(["profile", str(path), "--repeat", "2"]) == 0
    assert "| conv: im2col gemm | 2 |" in capsys.readouterr().out
    path.write_text(SRC)
    assert main(["profile", str(path), "--repeat", "2"]) == 0
    assert "| route |" not in capsys.readouterr().out
