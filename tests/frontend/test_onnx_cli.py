"""`opc import` and opc.import_onnx: names, arguments, weights (.npz), `opc.compile("model.onnx")`,
and bad input: one error line, exit code 1, never a traceback."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx_helpers import ROOT, graph_model, helper, numpy_helper, onnx, run_ort, single

import opc
from opc.cli import main
from opc.errors import OpcError


def run_cli(*args: str, code: str | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """`opc ARGS` in this process (fast), or in a fresh one (fresh=True, or `python -c code`)."""
    if code or fresh:
        cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "opc", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code_ = main(list(args))
    return subprocess.CompletedProcess(args, code_, out.getvalue(), err.getvalue())


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "internal compiler error" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def linear_model(name: str = "main_graph") -> onnx.ModelProto:
    """y = relu(x @ W^T + b) * 2, weights named like torch's ('fc1.weight', ...)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1, name="/fc1/Gemm"),
             helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
             helper.make_node("Mul", ["r", "two"], ["y"], name="/Mul")]
    inits = {"fc1.weight": rng.standard_normal((5, 4)).astype(np.float32),
             "fc1.bias": rng.standard_normal(5).astype(np.float32), "two": np.float32(2.0)}
    return graph_model(nodes, {"x": np.zeros((3, 4), np.float32)}, ["y"], inits, name=name)


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


# ---------------------------------------------------------------------------
# Names, arguments, weights
# ---------------------------------------------------------------------------


def test_arguments_are_inputs_then_float_initializers_in_file_order():
    """...except single-element ones (`two`, a scalar): constants, as exporters' 0.5 and 1/sqrt(d)."""
    module, params = opc.import_onnx(linear_model())
    (f,) = module.ops
    assert f.sym_name.data == "main_graph"
    assert [a.name_hint for a in f.body.block.args] == ["x", "fc1_weight", "fc1_bias"]
    assert list(params) == ["fc1_weight", "fc1_bias"]
    np.testing.assert_array_equal(params["fc1_weight"], numpy_helper.to_array(linear_model().graph.initializer[0]))


def test_names_are_sanitized_and_unique():
    x = np.zeros((2,), np.float32)
    nodes = [helper.make_node("Add", ["input.1", "fc1.weight"], ["a"]), helper.make_node("Add", ["a", "fc1_weight"], ["b"]),
             helper.make_node("Add", ["b", "0"], ["c"]), helper.make_node("Add", ["c", "lambda"], ["y"])]
    inits = {"fc1.weight": x, "fc1_weight": x, "0": x, "lambda": x}
    module, params = opc.import_onnx(graph_model(nodes, {"input.1": x}, ["y"], inits, name=""))
    (f,) = module.ops
    assert f.sym_name.data == "main"  # unnamed graph
    # no trailing _<digits>: xDSL would drop it (input_1 would print as %input)
    assert [a.name_hint for a in f.body.block.args] == ["input1", "fc1_weight", "fc1_weight1", "w0", "lambda_"]
    assert list(params) == ["fc1_weight", "fc1_weight1", "w0", "lambda_"]
    assert "%input1: tensor<2xf32>, %fc1_weight: tensor<2xf32>, %fc1_weight1: tensor<2xf32>" in str(module)
    _, params = opc.import_onnx(graph_model(nodes, {"input.1": x}, ["y"], inits, name="my-model.v2"))
    assert str(opc.import_onnx(graph_model(nodes, {"input.1": x}, ["y"], inits, name="my-model.v2"))[0]).count(
        "@my_model_v2") == 1


def test_float_initializer_used_only_at_compile_time_is_not_an_argument():
    x = np.zeros((2, 3), np.float32)
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    inits = {"start": np.float32(0), "limit": np.float32(3), "delta": np.float32(1)}
    module, params = opc.import_onnx(graph_model(nodes, {"x": x}, ["y"], inits))
    assert params == {}
    assert [a.name_hint for a in module.ops.first.body.block.args] == ["x"]


def test_compile_takes_an_onnx_path_and_grads_exist_for_weights(tmp_path):
    model = linear_model()
    path = save(model, tmp_path / "lin.onnx")
    m = opc.compile(path, grad=True)
    _, params = opc.import_onnx(path)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    y = m.main_graph(x, *params.values())
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=1e-6, atol=1e-6)
    dx, dw, db = m.main_graph_grad(x, *params.values(), np.ones_like(y))
    h = x @ params["fc1_weight"].T + params["fc1_bias"]
    dh = 2.0 * (h > 0)
    np.testing.assert_allclose(dw, dh.T @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, dh.sum(0), rtol=1e-5, atol=1e-5)


def test_cli_import_writes_mlir_and_npz_that_compile(tmp_path):
    path = save(linear_model(), tmp_path / "lin.onnx")
    proc = run_cli("import", path, "-o", str(tmp_path / "lin.mlir"), fresh=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "lin.mlir").exists() and (tmp_path / "lin.npz").exists()
    weights = np.load(tmp_path / "lin.npz")
    assert list(weights) == ["fc1_weight", "fc1_bias"]
    text = (tmp_path / "lin.mlir").read_text()
    assert "func.func @main_graph(%x: tensor<3x4xf32>, %fc1_weight: tensor<5x4xf32>" in text
    m = opc.compile(str(tmp_path / "lin.mlir"))  # the text parses back and compiles
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(m.main_graph(x, *weights.values()), run_ort(linear_model(), {"x": x})[0], rtol=1e-6)
    stdout = run_cli("import", path)
    assert stdout.returncode == 0 and stdout.stdout.startswith("builtin.module")


def test_shapes_fix_dynamic_dims(tmp_path):
    model = linear_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = save(model, tmp_path / "dyn.onnx")
    module, _ = opc.import_onnx(path, shapes={"x": (7, 4)})
    assert "tensor<7x4xf32>" in str(module) and "tensor<7x5xf32>" in str(module)
    proc = run_cli("import", path, "--shape", "x=2x4")
    assert proc.returncode == 0 and "tensor<2x5xf32>" in proc.stdout, proc.stderr
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # caller's model untouched


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def test_not_onnx(tmp_path):
    (tmp_path / "text.onnx").write_bytes(b"\x00\x01\x02this is not a protobuf" * 4)
    assert_one_line_error(run_cli("import", str(tmp_path / "text.onnx"), fresh=True), "is not an ONNX model")
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert_one_line_error(run_cli("import", str(tmp_path / "empty.onnx")), "is not an ONNX model")


def test_truncated(tmp_path):
    data = linear_model().SerializeToString()
    for cut in (len(data) // 2, len(data) - 7):
        (tmp_path / "cut.onnx").write_bytes(data[:cut])
        proc = run_cli("import", str(tmp_path / "cut.onnx"))
        assert_one_line_error(proc)
        assert "not an ONNX model" in proc.stderr or "not a valid ONNX model" in proc.stderr


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("import", str(tmp_path / "nope.onnx")), "no such file")
    assert_one_line_error(run_cli("compile", str(tmp_path / "nope.onnx")), "no such file")


def test_unsupported_op_names_op_and_node(tmp_path):
    x = np.zeros((2, 3, 3), np.float32)
    # (Conv, LRN, Det, NonZero, then Unique, the examples before, are imported now; Bernoulli's draws
    # come from a generator ONNX does not define)
    model = single("Bernoulli", {"x": x})
    model.graph.node[0].name = "/head/Bernoulli"
    assert_one_line_error(run_cli("import", save(model, tmp_path / "b.onnx")), "Bernoulli", "/head/Bernoulli")
    assert_one_line_error(run_cli("compile", str(tmp_path / "b.onnx")), "Bernoulli", "/head/Bernoulli")


def test_custom_domain_op(tmp_path):
    model = linear_model()
    model.graph.node[1].domain = "com.microsoft"
    model.graph.node[1].op_type = "FusedRelu"
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert_one_line_error(run_cli("import", save(model, tmp_path / "ms.onnx")), "com.microsoft.FusedRelu",
                          "/act/Relu")


NEWEST = onnx.defs.onnx_opset_version()


def test_unsupported_opset(tmp_path):
    model = linear_model()
    model.opset_import[0].version = NEWEST + 1
    assert_one_line_error(run_cli("import", save(model, tmp_path / "new.onnx")), f"opset {NEWEST + 1}",
                          "newer than the installed onnx")


def test_opsets_below_7_are_read_as_they_are(tmp_path, monkeypatch):
    """Opset 6 imports with converters of its own meanings: onnx's version converter is not used (here it
    would refuse)."""
    model = linear_model()
    model.opset_import[0].version = 6

    def refuses(model, version):  # noqa: ANN001, ANN202
        raise RuntimeError("no adapter")

    monkeypatch.setattr(onnx.version_converter, "convert_version", refuses)
    module, _ = opc.import_onnx(model)
    assert "opc.matmul" in str(module) or "opc.fused_gemm_epilogue" in str(module)


def test_open_dims_import_as_run_time_sizes(tmp_path):
    model = linear_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    proc = subprocess.run([sys.executable, "-m", "opc", "import", save(model, tmp_path / "dyn.onnx")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "%x: tensor<?x4xf32>" in proc.stdout and "-> tensor<?x5xf32>" in proc.stdout


def test_a_size_needed_at_import_says_which_node_and_how_to_fix(tmp_path):
    """Range(n, 2 * n) with n open: a Range whose start is known at run time only (a Slice takes
    run-time bounds, clamped at the call; this still needs its size at import)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1), helper.make_node("Squeeze", ["s", "zero"], ["n"]),
             helper.make_node("Add", ["n", "n"], ["n2"]),
             helper.make_node("Range", ["n", "n2", "one"], ["y"], name="cut")]
    model = graph_model(nodes, {"x": np.zeros((3, 4), np.float32)}, ["y"],
                        {"one": np.array(1), "zero": np.array([0])})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    assert_one_line_error(run_cli("import", save(model, tmp_path / "cut.onnx")), "'cut'", "--shape x=")


def test_unsupported_initializer_dtype(tmp_path):
    model = linear_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.complex64), "counts"))
    assert_one_line_error(run_cli("import", save(model, tmp_path / "c64.onnx")), "initializer 'counts'", "COMPLEX64")


def test_shape_needed_at_compile_time(tmp_path):
    x = np.zeros((2, 6), np.float32)
    model = single("Reshape", {"x": x, "shape": np.array([3, 4], np.int64)})
    assert_one_line_error(run_cli("import", save(model, tmp_path / "dynshape.onnx")), "Reshape",
                          "must be known at compile time")


def test_rank_above_eight_is_refused_naming_the_node(tmp_path):
    x = np.zeros((2, 3, 4), np.float32)
    model = single("Reshape", {"x": x}, initializers={"s": np.array([1, 2, 1, 3, 1, 1, 1, 1, 4], np.int64)})
    assert_one_line_error(run_cli("import", save(model, tmp_path / "rank9.onnx")), "the_Reshape", "rank 9")


def test_bad_shape_option(tmp_path):
    path = save(linear_model(), tmp_path / "lin.onnx")
    assert_one_line_error(run_cli("import", path, "--shape", "x:3x4"), "bad --shape")
    assert_one_line_error(run_cli("import", path, "--shape", "y=3x4"), "no input 'y'")
    assert_one_line_error(run_cli("import", path, "--shape", "x=3x5"), "input 'x'")


def test_without_the_onnx_package_says_how_to_install(tmp_path):
    path = save(linear_model(), tmp_path / "lin.onnx")
    code = ("import sys; sys.modules['onnx'] = None; from opc.cli import main; "
            f"sys.exit(main(['import', {path!r}]))")
    assert_one_line_error(run_cli(code=code), 'pip install ".[onnx]"')


def test_api_raises_opc_error():
    with pytest.raises(OpcError, match=f"opset {NEWEST + 1}"):
        model = linear_model()
        model.opset_import[0].version = NEWEST + 1
        opc.import_onnx(model)
