"""Value names are hints: every name the parser takes survives every pass, `compile`
(CPU and CUDA emitters) and `explain`.

xDSL's name_hint setter drops a trailing `_<digits>` and refuses the empty string, so a
name like `%_0` (stored as '') once failed the first pass that copied it onto a new value.
The grid puts each name in an argument, a result and the first of two results; its
programs are kept in tests/fuzz_corpus/names/ so the CLI fuzzer mutates them too
(regenerate them with `python tests/transforms/test_names.py`).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import opc
from opc.cli import main
from opc.ir import parse_text, settled_name
from opc.transforms import get_all_passes

ROOT = Path(__file__).resolve().parents[2]
GRID_DIR = ROOT / "tests" / "fuzz_corpus" / "names"

# Legal MLIR value names: xDSL reduces some to nothing (`_0`, `_0_0` after a copy) and
# numbers others (`0`); `$ . -` are no C characters; a long one is a long C identifier.
NAMES = ["_0", "_", "0", "a_1", "$x", "x.y", "-", "_0_0", "a_1_2", "$", ".", "a-1", "__0", "x" * 300]

TEMPLATE = """\
// name grid of tests/transforms/test_names.py: %{name} as an argument, a result and the first of two results
func.func @arg(%N: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %t = opc.tanh %N : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = opc.matmul %t, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = opc.softmax %m {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}
func.func @res(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %N = opc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = opc.cast %N {dtype = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  %d = opc.cast %c {dtype = f32} : (tensor<4x8xf16>) -> tensor<4x8xf32>
  %r = opc.reduce_sum %d {axes = array<i64: 0>, keepdim = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
func.func @pair(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %N, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %y = opc.mul %N, %z : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""


def grid_program(name: str) -> str:
    return TEMPLATE.replace("{name}", name).replace("%N", f"%{name}")


def grid_path(i: int) -> Path:
    return GRID_DIR / f"name{i:02d}.mlir"


COMMANDS = [
    *(["opt", "-p", p] for p in sorted(get_all_passes())),
    ["opt", "-p", "opc-grad,opc-decompose,opc-fuse,opc-schedule,opc-lower-to-loops,canonicalize,cse,dce"],
    ["compile", "--emit", "mlir", "--decompose", "all", "--grad=1"],
    ["compile", "--emit", "c", "--grad=2"],
    ["compile", "--emit", "cuda", "--target", "cuda", "--grad=1"],
    ["explain", "--grad=2"],
    ["explain", "--kernels", "--target", "cuda"],
]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_settled_names():
    """What a copy keeps: a name xDSL's setter leaves as it is, or none (oracle: the setter itself)."""
    from xdsl.ir import SSAValue

    for name in [*NAMES, "x_1", "x_", "d$x", ""]:
        if name and SSAValue.is_valid_name(name):  # what the parser stores settles the same way
            assert settled_name(name) == settled_name(SSAValue.extract_valid_name(name))
        hint = settled_name(name)
        assert hint is None or SSAValue.extract_valid_name(hint) == hint != ""
    assert [settled_name(n) for n in ["_0", "_0_0", "a_1", "x_1_2", "$x", "-", ""]] == \
        [None, None, "a", "x", "$x", "-", None]
    assert settled_name("0") is None and settled_name("é") is None  # names the setter refuses are dropped


@pytest.mark.parametrize("i", range(len(NAMES)), ids=[n[:12] for n in NAMES])
def test_name_survives_every_pass(i):
    """opt with each pass (and the whole pipeline), compile to MLIR, C and CUDA, explain:
    exit 0; the printed IR parses again and shows the name where one is left."""
    name = NAMES[i]
    path = grid_path(i)
    assert path.read_text(encoding="utf-8") == grid_program(name), "stale grid: run `python tests/transforms/test_names.py`"
    for command in COMMANDS:
        rc, out, err = run_cli([command[0], str(path), *command[1:]])
        assert rc == 0, f"opc {' '.join(command)} with %{name[:20]}: {err}"
        if command[0] == "opt" and "lower-to-loops" not in command[-1]:  # (opc_loops.gemm does not round-trip)
            parse_text(out, "printed")
    rc, out, err = run_cli(["opt", str(path)])
    hint = settled_name(name)
    if hint is not None:  # in @arg's signature, as the parser stored it
        assert f"@arg(%{hint}: tensor<4x8xf32>" in out
    assert re.search(r"@arg\(%(\w+): tensor<4x8xf32>", out) or hint is not None


# -- the numbers, with every name in one module: CPU build and the CUDA code on the CPU simulator ------------

ALL_ARGS = ["_0", "_", "0", "a_1", "$x", "x.y", "-", "x" * 300]


def all_names_program() -> str:
    """@f(each name: 2x3) = sum of tanh(arg_k) * (k+1), the partial sums named like the args."""
    t = "tensor<2x3xf32>"
    args = ", ".join(f"%{n}: {t}" for n in ALL_ARGS)
    lines = [f"func.func @f({args}) -> {t} {{"]
    acc = None
    for k, n in enumerate(ALL_ARGS):
        lines.append(f"  %t{k} = opc.tanh %{n} : ({t}) -> {t}")
        lines.append(f"  %c{k} = opc.full {{value = {k + 1}.0 : f32}} : () -> {t}")
        lines.append(f"  %p{k} = opc.mul %t{k}, %c{k} : ({t}, {t}) -> {t}")
        if acc is None:
            acc = f"%p{k}"
            continue
        result = f"%{n}_{k}" if n != "0" else f"%{k + 100}"  # a result named like the argument
        lines.append(f"  {result} = opc.add {acc}, %p{k} : ({t}, {t}) -> {t}")
        acc = result
    lines += [f"  func.return {acc} : {t}", "}", ""]
    return "\n".join(lines)


def check_all_names(module):
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in ALL_ARGS]
    want = sum(np.tanh(x.astype(np.float64)) * (k + 1) for k, x in enumerate(xs))
    np.testing.assert_allclose(module.f(*xs), want, rtol=1e-5, atol=1e-5)
    grads = module.f_grad(*xs, np.ones((2, 3), np.float32))
    for k, (x, g) in enumerate(zip(xs, grads)):
        np.testing.assert_allclose(g, (k + 1) * (1 - np.tanh(x.astype(np.float64)) ** 2), rtol=1e-4, atol=1e-5)


def test_all_names_cpu_build(tmp_path):
    module = opc.compile(all_names_program(), grad=True, cache_dir=str(tmp_path))
    check_all_names(module)
    by_name = {settled_name(n) for n in ALL_ARGS} - {None}
    assert by_name <= set(module.f.__doc__.split("(", 1)[1].split(")")[0].split(", "))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH (it builds the CUDA simulation)")
def test_all_names_cuda_on_the_simulator(tmp_path):
    from cuda_simulator import simulated

    from opc.api import lower, prepare
    from opc.frontend import load_module
    from opc.lowering.cuda_emitter import emit_cuda

    cu, sigs = emit_cuda(lower(prepare(load_module(all_names_program()), "cuda", True), "cuda"))
    check_all_names(simulated(cu, sigs, str(tmp_path), "names"))


if __name__ == "__main__":
    GRID_DIR.mkdir(parents=True, exist_ok=True)
    for old in GRID_DIR.glob("name*.mlir"):
        old.unlink()
    for i, n in enumerate(NAMES):
        grid_path(i).write_text(grid_program(n), encoding="utf-8")
