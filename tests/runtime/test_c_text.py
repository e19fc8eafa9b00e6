"""User-given text reaches generated C only through opc/lowering/c_text.py (issue 38, item 8): function
and value names, ONNX graph, node and tensor names and doc strings, the profiler's kernel labels.
A grid of hostile texts -- control characters, quotes, backslashes, `*/`, `/*`, `??/` and other
trigraphs, non-ASCII, a trailing backslash -- checked three ways: the escapes themselves compiled by
gcc in strict ISO C (trigraphs on, warnings errors) and read back byte for byte (a NUL too); functions named so
compiled by opc, called (numbers against NumPy) and profiled (labels read back); an ONNX model whose
every name and doc string is one of them, imported, compiled and run."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess

import numpy as np
import pytest

import opc
from opc.cli import main
from opc.lowering.c_text import c_comment, c_identifier, c_string, c_symbol

HOSTILE = ['x\nint y;', 'a"b', 'a\\b', 'c*/d', 'e/*f', 't??/', '??=??(??)??<??>??!??-??\'', 'q?"', 'nul\x00\x01\x1f\x7f',
           'cr\r\n', 'tab\there', 'é\u202e中', 'end\\', '*/ int z; /*', '"); system("x', '\\\n#define A 1']


def mlir_string(s: str) -> str:
    """s as an MLIR string literal (a quoted symbol name)."""
    return '"' + "".join("\\" + c if c in '"\\' else f"\\{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c
                         for c in s) + '"'


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not on PATH")
def test_escapes_compile_and_read_back(tmp_path) -> None:
    """Every text as a string literal, a comment, a local and an exported name in one C file, built
    with -std=c11 (trigraphs on) -Wall -Werror: the program prints each literal's bytes."""
    assert len({c_symbol(t) for t in HOSTILE}) == len(HOSTILE), "two names met"
    lines = ["#include <stdio.h>"]
    for i, t in enumerate(HOSTILE):
        lines += [f"/* {c_comment(t)} */", f"int opc_fn_{c_symbol(t)}(void) {{ return {i}; }}  // {c_comment(t)}",
                  f"static int {c_identifier(t)}_{i} = {i};"]
    lines += [f"static const char text{i}[] = {c_string(t)};" for i, t in enumerate(HOSTILE)]
    lines.append(f"static const char *const texts[] = {{{', '.join(f'text{i}' for i in range(len(HOSTILE)))}}};")
    lines.append(f"static const size_t sizes[] = {{{', '.join(f'sizeof text{i} - 1' for i in range(len(HOSTILE)))}}};")
    sums = " + ".join(f"{c_identifier(t)}_{i} + opc_fn_{c_symbol(t)}()" for i, t in enumerate(HOSTILE))
    lines += ["int main(void) {",
              f"  if (({sums}) != {2 * sum(range(len(HOSTILE)))}) return 1;",
              f"  for (int i = 0; i < {len(HOSTILE)}; i++) {{",
              "    for (size_t j = 0; j < sizes[i]; j++) printf(\"%02x\", (unsigned char)texts[i][j]);",
              "    printf(\"\\n\");", "  }", "  return 0;", "}"]
    src, exe = tmp_path / "t.c", tmp_path / "t"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run(["gcc", "-std=c11", "-trigraphs", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[:len(HOSTILE)] == [t.encode("utf-8").hex() for t in HOSTILE]
    for t in HOSTILE:
        assert all(0x20 <= ord(c) < 0x7F for c in c_string(t) + c_comment(t) + c_identifier(t) + c_symbol(t)), t


@pytest.fixture(scope="module")
def hostile_module():
    src = "".join(f"func.func @{mlir_string(n)}(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{\n"
                  f"  %c = opc.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
                  f"  %d = opc.reduce_sum %c {{axes = array<i64: 0>, keepdim = true}} : (tensor<4xf32>) -> tensor<1xf32>\n"
                  f"  %e = opc.sub %c, %d : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>\n"
                  f"  func.return %e : tensor<4xf32>\n}}\n" for n in HOSTILE)
    return src, opc.compile(src)


def test_hostile_function_names_compile_and_run(hostile_module) -> None:
    """`@"x\\nint y;"` broke the C build in the profiler's labels; each name now is a function that
    computes what NumPy does, and its profile labels name it as written."""
    _, m = hostile_module
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    c = a.astype(np.float64) * b
    want = c - c.sum()
    with opc.profile(m) as p:
        for n in HOSTILE:
            np.testing.assert_allclose(getattr(m, n)(a, b), want,
                                       rtol=1e-5, atol=1e-6, err_msg=repr(n))
    fns = {name.rsplit("#", 1)[0] for name, _, _ in p.kernels}
    assert fns == set(HOSTILE)
    assert all(row["calls"] >= 1 for row in p.rows()) and len({r["kernel"].rsplit("#", 1)[0] for r in p.rows()}) == len(HOSTILE)


def test_hostile_names_in_cuda_source(hostile_module, tmp_path) -> None:
    """The CUDA emitter names through the same functions: no raw control character, no name as written."""
    src, _ = hostile_module
    path = tmp_path / "names.mlir"
    path.write_text(src, encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compile", "--emit", "cuda", "--target", "cuda", str(path)]) == 0
    cuda = out.getvalue()
    assert not any(ord(c) < 0x20 and c not in "\n\t" for c in cuda)
    for n in HOSTILE:
        assert f"opc_fn_{c_symbol(n)}(" in cuda
        if any(ord(c) < 0x20 for c in n) or "*/" in n:
            assert n not in cuda, repr(n)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH (it builds the CUDA simulation)")
def test_hostile_function_names_cuda_on_the_simulator(hostile_module, tmp_path) -> None:
    """The CUDA module of the same functions built (g++, tests/cuda_sim.h) and run: NumPy's numbers."""
    from cuda_simulator import simulated

    from opc.api import lower, prepare
    from opc.frontend import load_module
    from opc.lowering.cuda_emitter import emit_cuda

    src, _ = hostile_module
    cu, sigs = emit_cuda(lower(prepare(load_module(src), "cuda", False), "cuda"))
    m = simulated(cu, sigs, str(tmp_path), "names")
    a, b = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    c = a.astype(np.float64) * b
    for n in HOSTILE:
        np.testing.assert_allclose(m[n](a, b), c - c.sum(), rtol=1e-6, err_msg=repr(n))


def test_onnx_names_and_doc_strings() -> None:
    """Graph, node, tensor and initializer names and doc strings from the grid: imported, compiled, run."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    names = iter(HOSTILE * 2)
    x_name, w_name, t_name, y_name = (next(names) + s for s in ("0", "1", "2", "3"))
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    nodes = [helper.make_node("MatMul", [x_name, w_name], [t_name], name=next(names), doc_string=next(names)),
             helper.make_node("Tanh", [t_name], [y_name], name=next(names), doc_string=next(names))]
    graph = helper.make_graph(nodes, next(names) + "g",
                              [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, [4, 2])],
                              [helper.make_tensor_value_info(y_name, TensorProto.FLOAT, [4, 3])],
                              initializer=[numpy_helper.from_array(w, w_name)], doc_string=next(names))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], doc_string=next(names))
    model.ir_version = 8
    onnx.checker.check_model(model)
    m = opc.load_onnx(model)
    x = np.random.default_rng(1).standard_normal((4, 2)).astype(np.float32)
    (y,) = m(x)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64) @ w), rtol=1e-5, atol=1e-6)
