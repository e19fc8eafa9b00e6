"""The benchmark's own machinery (no timing here: speed is measured only in bench/).

The compile-time row stands on the generated models having exactly the ops they claim,
and every row stands on the number check stopping a wrong contender.
"""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_cpu  # noqa: E402
import benchlib  # noqa: E402

from opc.ir import parse_text  # noqa: E402


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 100, 1000])
def test_layered_model_has_n_ops_broken_every_8(n):
    module = parse_text(bench_cpu.layered_model(n)).module
    ops = [op.name for op in module.walk() if op.name.startswith("opc.")]
    assert len(ops) == n
    kinds = Counter(ops)
    breaks = n // 8
    assert kinds["opc.matmul"] == (breaks + 1) // 2
    assert kinds["opc.reduce_max"] == breaks // 2
    assert all(name in ("opc.matmul", "opc.reduce_max") for i, name in enumerate(ops) if i % 8 == 7)


@pytest.mark.parametrize(("got", "want", "stops"), [
    ([np.ones(3)], [np.ones(3) + 1e-7], False),
    ([np.ones(3)], [np.zeros(3)], True),
    ([np.full(3, 1000.0)], [np.full(3, 1000.5)], False),  # error scaled by the magnitude: 5e-4
    ([np.full(3, 1e-3)], [np.full(3, 2e-3)], False),  # below the absolute floor of 1 ...
    ([np.ones(4)], [np.ones(3)], True),  # shapes differ
    ([np.array([1.0, np.nan])], [np.array([1.0, 1.0])], True),  # a NaN where a number is due
    ([np.array([1.0, np.nan])], [np.array([1.0, np.nan])], False),
    ([np.ones(3)], [np.ones(3), np.ones(3)], True),  # an output missing
])
def test_check_stops_a_wrong_contender(got, want, stops):
    if stops:
        with pytest.raises(SystemExit, match="bench: c "):
            benchlib.check("c", got, want)
    else:
        benchlib.check("c", got, want)


def test_check_tolerance_is_the_callers():
    with pytest.raises(SystemExit, match="disagrees with NumPy"):  # ... which a tighter tol catches
        benchlib.check("c", [np.full(3, 1e-3)], [np.full(3, 2e-3)], tol=1e-4)


def test_cases_listed_and_unknown_names_rejected():
    listed = subprocess.run([sys.executable, str(BENCH / "bench_cpu.py"), "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    for name in ("softmax", "layernorm", "rowsum", "colsum", "chain", "gelu-fwd-bwd", "matmul-1024", "bmm-qk",
                 "compile"):
        assert name in listed
    bad = subprocess.run([sys.executable, str(BENCH / "bench_cpu.py"), "--only", "nosuch"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 1 and bad.stderr.strip() == "error: no case named nosuch (see --list)"


def small_cnn():
    """A ResNet-like ONNX graph of every op the ResNet-18 row's torch / JAX runners know."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = {"w1": (4, 3, 3, 3), "b1": (4,), "w2": (6, 4, 3, 3), "w3": (6, 4, 1, 1), "b3": (6,), "fw": (5, 6),
             "fb": (5,)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w3", "b3"], ["c3"], strides=[2, 2]),
             helper.make_node("Add", ["c2", "c3"], ["a"]),
             helper.make_node("Identity", ["a"], ["i"]),
             helper.make_node("GlobalAveragePool", ["i"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 9, 9))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 5))],
                              [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
                               for n, s in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("runner", ["torch", "jax"])
def test_resnet_rows_graph_runners_match_onnxruntime(runner):
    """The ResNet-18 row times torch and JAX on the ONNX graph run node by node: their numbers
    must be onnxruntime's (the bench checks them too, but a wrong runner should fail here first)."""
    ort = pytest.importorskip("onnxruntime")
    lib = benchlib.import_torch() if runner == "torch" else benchlib.import_jax()
    if lib is None:
        pytest.skip(f"{runner} is not installed")
    model = small_cnn()
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 9), np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if runner == "torch":
        got = bench_cpu.onnx_torch(lib, model)(lib.from_numpy(x)).numpy()
    else:
        got = np.asarray(bench_cpu.onnx_jax(lib, model)(lib.numpy.asarray(x)))
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4), np.abs(got - want).max()


def test_peak_probe_reports_a_positive_rate_for_the_isa_found():
    """bench/peak.py builds and runs its probe; the FMA lanes agree with the ISA it names."""
    import peak

    p = peak.measure()
    assert {"avx512f": 16, "avx2+fma": 8, "scalar": 1}[p.isa] == p.lanes
    assert p.gflops_per_core > 0 and p.copy_gbps > 0
