"""`opc explain`: one row per op, its path on the target and what it becomes."""

from __future__ import annotations

import pytest

from opc.cli import main
from opc.explain import ExplainError, explain
from opc.ir import parse_text

MLP = open("examples/mlp.mlir").read()
DEVICE = "examples/device_no_fused.toml"

RELU_GRAD = """
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>, %z: tensor<4x5xf32>, %d: tensor<4x5xf32>) -> tensor<4x8xf32> {
  %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %d {activation_grad = "relu_grad"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>)
  func.return %dx : tensor<4x8xf32>
}
"""


def rows(text: str) -> dict[str, list[str]]:
    out = {}
    for line in text.splitlines()[2:]:
        name, count, path, *rest = line.split(None, 3)
        out[name] = [count, path, rest[0] if rest else ""]
    return out


def test_explain_cpu_with_grad() -> None:
    text = explain(parse_text(MLP).module, "cpu", grad=True)
    assert text.splitlines()[0].startswith("target cpu (backend cpu), kernel list: built-in")
    r = rows(text)
    assert r["opc.cast_grad"] == ["4", "invoke", "-> opc.cast"]  # two in mlp_grad, two in mlp_value_and_grad
    assert r["opc.fused_gemm_epilogue"][1:] == ["kernel", ""]
    assert r["opc.fused_gemm_epilogue_grad"][1:] == ["kernel", ""]


def test_explain_without_grad_has_no_grad_ops() -> None:
    r = rows(explain(parse_text(MLP).module, "cpu"))
    assert set(r) == {"opc.fused_gemm_epilogue", "opc.cast", "opc.reduce_sum"}


def test_explain_device_without_fused_kernels() -> None:
    text = explain(parse_text(MLP).module, DEVICE, grad=True)
    assert f"kernel list: {DEVICE}" in text.splitlines()[0]
    r = rows(text)
    assert r["opc.fused_gemm_epilogue"][1:] == ["composite", "-> opc.matmul, opc.add, opc.gelu"]
    assert r["opc.fused_gemm_epilogue_grad"][1:] == ["composite", "-> opc.gelu_grad, opc.matmul, opc.reduce_sum"]
    r = rows(explain(parse_text(RELU_GRAD).module, DEVICE))
    assert r["opc.fused_gemm_epilogue_grad"] == ["1", "composite", "-> opc.relu_grad, opc.matmul, opc.reduce_sum"]


def test_explain_names_what_cannot_run(tmp_path) -> None:
    dev = tmp_path / "tiny.toml"
    dev.write_text('name = "tiny"\nkernels = ["add", "mul", "matmul", "full", "cast", "reduce_sum"]\n')
    with pytest.raises(ExplainError) as err:
        explain(parse_text(MLP).module, str(dev))
    first = str(err.value).splitlines()[0]
    assert first.startswith("opc.fused_gemm_epilogue cannot run on target 'tiny'") and "opc.tanh" in first
    r = rows(err.value.table)
    assert r["opc.fused_gemm_epilogue"][1] == "composite" and "opc.tanh (CANNOT RUN)" in r["opc.fused_gemm_epilogue"][2]
    with pytest.raises(ExplainError) as err:
        explain(parse_text(MLP).module, str(dev), grad=True)  # reshape, broadcast_to: no kernel, no rule
    assert str(err.value).startswith("opc.reshape cannot run on target 'tiny': no kernel")
    assert rows(err.value.table)["opc.reshape"][1:] == ["CANNOT", "RUN"]


def test_cli_explain(capsys) -> None:
    assert main(["explain", "examples/mlp.mlir", "--target", DEVICE, "--grad"]) == 0
    out = capsys.readouterr().out
    assert "opc.cast_grad" in out and "invoke" in out and "-> opc.matmul, opc.add, opc.gelu" in out


def test_cli_explain_errors(capsys, tmp_path) -> None:
    dev = tmp_path / "tiny.toml"
    dev.write_text('kernels = ["add"]\n')
    assert main(["explain", "examples/mlp.mlir", "--target", str(dev)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: opc.") and "cannot run on target 'tiny'" in err and "Traceback" not in err
    assert main(["explain", "examples/mlp.mlir", "--target", "tpu"]) == 1
    assert "unknown target 'tpu'" in capsys.readouterr().err


NN_BLOCK = """
func.func @block(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %w: tensor<8x5xf32>, %label: tensor<4x1xi64>) -> tensor<4x1xf32> {
  %y, %mean, %rstd = opc.layer_norm %x, %s, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %p = opc.softmax %y : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %lp = opc.log_softmax %p : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = opc.matmul %lp, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  %loss, %sm = opc.softmax_cross_entropy %z, %label : (tensor<4x5xf32>, tensor<4x1xi64>) -> (tensor<4x1xf32>, tensor<4x5xf32>)
  func.return %loss : tensor<4x1xf32>
}
"""
NN_FUSED = ("opc.layer_norm", "opc.softmax", "opc.log_softmax", "opc.softmax_cross_entropy", "opc.layer_norm_grad",
            "opc.softmax_grad", "opc.log_softmax_grad", "opc.softmax_cross_entropy_grad")


def test_explain_nn_ops_kernels_and_composites() -> None:
    """The fused normalizations, losses and their grad ops: kernels on cpu, composites on a device without them."""
    r = rows(explain(parse_text(NN_BLOCK).module, "cpu", grad=True))
    assert all(r[name][1:] == ["kernel", ""] for name in NN_FUSED)
    r = rows(explain(parse_text(NN_BLOCK).module, DEVICE, grad=True))
    assert all(r[name][1] == "composite" for name in NN_FUSED)
    assert r["opc.softmax"][2] == "-> opc.reduce_max, opc.sub, opc.exp, opc.reduce_sum, opc.div"
    assert r["opc.layer_norm_grad"][2] == "-> opc.reshape, opc.sub, opc.mul, opc.reduce_mean, opc.reduce_sum"
    assert "opc.gather" in r["opc.softmax_cross_entropy"][2] and "opc.equal" in r["opc.softmax_cross_entropy_grad"][2]
