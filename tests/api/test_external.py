"""Devices that bring their own kernels: [external.OP] in a device .toml,
routing per op instance, the kernels inside compiled models, `opc check`
(green on examples/npu, planted bugs caught and named, crashes isolated),
`opc explain` per attribute value, and bad input."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from oracle import gelu_tanh as gelu
from oracle import gelu_tanh_grad as gelu_grad

import opc
from opc.check import plan
from opc.cli import main
from opc.errors import OpcError
from opc.explain import explain, explain_target
from opc.ir import parse_text
from opc.targets.device_kernels import external_symbol
from opc.targets.routing import route_op
from opc.targets.target import get_target
from opc.transforms.opc_decompose import legalize

ROOT = Path(__file__).resolve().parents[2]
NPU = str(ROOT / "examples" / "npu" / "npu.toml")
NPU_MLP = (ROOT / "examples" / "npu" / "mlp.mlir").read_text()


def device(tmp_path: Path, body: str, sources: dict[str, str], name: str = "dev") -> str:
    """A device .toml (and its C files) in tmp_path."""
    for file, text in sources.items():
        (tmp_path / file).write_text(text)
    toml = tmp_path / f"{name}.toml"
    toml.write_text(f'name = "{name}"\nkernels = ["add", "matmul", "relu", "gelu", "maximum", "full"]\n{body}')
    return str(toml)


def rows(out: str) -> list[list[str]]:
    """`opc check` rows: op, attributes, dtype, shape, error, tol, result."""
    lines = out.splitlines()
    return [re.split(r"\s{2,}", line.strip(), maxsplit=6) for line in lines[2:] if not line.startswith(("summary", "failing"))]


# ---------------------------------------------------------------------------
# Routing per instance (no C build)
# ---------------------------------------------------------------------------


def test_routes_per_instance_and_marks() -> None:
    target = get_target(NPU)
    assert [k.symbol for k in target.externals] == ["npu_fused_gemm_epilogue", "npu_fused_gemm_epilogue_grad", "npu_cast"]
    module = parse_text(NPU_MLP).module
    gemm_gelu, gemm_none, cast = [op for op in module.walk() if op.name.startswith("opc.")]
    assert route_op(gemm_gelu, target) == "composite" and route_op(gemm_none, target) == "external"
    assert route_op(cast, target) == "external"
    assert route_op(gemm_none, target, force=True) == "composite"  # decompose= wins, as over opc's kernels
    assert target.external_of("opc.fused_gemm_epilogue").mismatch(gemm_gelu) == "activation = gelu not in [none]"
    legalize(module, target)
    marked = {op.name: external_symbol(op) for op in module.walk() if op.name.startswith("opc.")}
    assert marked == {"opc.matmul": None, "opc.add": None, "opc.gelu": None,
                      "opc.fused_gemm_epilogue": "npu_fused_gemm_epilogue", "opc.cast": "npu_cast"}
    legalize(module, get_target("cpu"))  # legalized again for another target: the marks go
    assert not any(external_symbol(op) for op in module.walk())


def test_explain_routes_per_attribute_value() -> None:
    text = explain_target(NPU)
    assert text.splitlines()[0].endswith("(31 ops), 3 device kernel(s)")
    line = {row.split()[0]: row.split(None, 1)[1] for row in text.splitlines()[2:]}
    assert line["opc.fused_gemm_epilogue"] == ("external npu_fused_gemm_epilogue (activation = none; dtypes f32, f16, "
                                               "bf16); composite (activation = relu, gelu; other dtypes)")
    assert line["opc.fused_gemm_epilogue_grad"].endswith(
        "composite (activation_grad = relu_grad, gelu_grad; other dtypes)")
    assert line["opc.cast"].startswith("external npu_cast (dtype = f32, f16, bf16; dtypes f32, f16, bf16); kernel "
                                       "(dtype = i1, i8, ui8, i16, i32, i64, f64, f8E4M3FN, f8E4M3FNUZ, f8E5M2, "
                                       "f8E5M2FNUZ, f8E8M0FNU, f4E2M1FN, i4, ui4, i2, ui2, f6E2M3FN, f6E3M2FN; "
                                       "other dtypes)")
    assert line["opc.add"] == "kernel" and line["opc.cast_grad"] == "invoke"

    table = explain(parse_text(NPU_MLP).module, NPU, grad=True)
    body = [row.split(None, 3) for row in table.split("\n\n")[0].splitlines()[2:]]
    got = {(r[0], r[2]): (r[1], r[3] if len(r) > 3 else "") for r in body}
    # mlp, mlp_grad and mlp_value_and_grad each compute the forward: three of each layer
    assert got[("opc.fused_gemm_epilogue", "composite")] == ("3", "-> opc.matmul, opc.add, opc.gelu")
    assert got[("opc.fused_gemm_epilogue", "external")] == ("3", "-> npu_fused_gemm_epilogue")
    assert got[("opc.fused_gemm_epilogue_grad", "external")] == ("2", "-> npu_fused_gemm_epilogue_grad")
    assert got[("opc.fused_gemm_epilogue_grad", "composite")][1] == "-> opc.gelu_grad, opc.matmul, opc.reduce_sum"
    assert got[("opc.cast_grad", "invoke")] == ("2", "-> opc.cast (external npu_cast)")
    assert "device kernels:" in table


def test_check_plan_rows_without_running(tmp_path) -> None:
    toml = device(tmp_path, '[external.fused_gemm_epilogue]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32", "i32"]\n'
                  '[external.full]\nsource = "k.c"\nsymbol = "k2"\ndtypes = ["f32"]\n', {"k.c": "int x;\n"})
    cases, funcs, refs = plan(get_target(toml), get_target(toml).externals)
    na = [(c.op, c.dtype, c.why) for c in cases if c.status == "n/a"]
    assert ("fused_gemm_epilogue", "i32", "opc.fused_gemm_epilogue does not admit dtype i32") in na
    assert ("full", "f32", "opc check has no grid for opc.full yet (opc/check.py GRIDS)") in na
    run = [c for c in cases if c.status == "run"]
    # trans flags x activations x (sizes, tails, specials), f32 only; each against its own f64 reference
    assert len(run) == len(funcs) == len(refs) == 4 * 3 * (3 + 5 + 1)
    fallback = {c.why for c in cases if c.status == "fallback"}
    # every float type the op admits, float8 and float4 too (they compute in f32: opc-widen)
    assert fallback == {f"dtype {t} not in [f32, i32] -> composite rule"
                        for t in ("f16", "bf16", "f64", "f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU",
                                  "f6E2M3FN", "f6E3M2FN", "f4E2M1FN")}


# ---------------------------------------------------------------------------
# The example device: a model runs through its kernels; `opc check` is green
# ---------------------------------------------------------------------------


def test_npu_mlp_compiled_to_a_directory_imports_in_a_fresh_process(tmp_path) -> None:
    """`opc compile -o DIR` links the device's kernels into the extension it writes."""
    assert main(["compile", str(ROOT / "examples" / "npu" / "mlp.mlir"), "--target", NPU, "-o", str(tmp_path)]) == 0
    x, w1, b1, w2, b2 = (np.full(s, 0.25, np.float32) for s in [(8, 16), (16, 32), (32,), (32, 10), (10,)])
    np.savez(tmp_path / "in.npz", x=x, w1=w1, b1=b1, w2=w2, b2=b2)
    script = (f"import sys, numpy as np; sys.path.insert(0, {str(tmp_path)!r}); import mlp; "
              f"d = np.load({str(tmp_path / 'in.npz')!r}); "
              "print(float(mlp.mlp(d['x'], d['w1'], d['b1'], d['w2'], d['b2'])[0, 0]))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    z = 16 * 0.25 * 0.25 + 0.25
    assert float(run.stdout) == pytest.approx(32 * gelu(z) * 0.25 + 0.25, rel=1e-3)


def test_npu_mlp_runs_through_device_kernels() -> None:
    """gelu(x @ w1 + b1) @ w2 + b2 -> f16: gelu by the composite rule, the second layer and the cast
    through the device's kernels; the grads through npu_fused_gemm_epilogue_grad and npu_cast."""
    m = opc.compile(NPU_MLP, target=NPU, grad=True)
    called = set(re.findall(r"(npu_\w+)\(&opc_call\)", m.c_source))
    assert called == {"npu_fused_gemm_epilogue", "npu_fused_gemm_epilogue_grad", "npu_cast"}
    rng = np.random.default_rng(7)
    x, w1, b1, w2, b2 = (rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32,), (32, 10), (10,)])
    z = x.astype(np.float64) @ w1 + b1
    y = gelu(z) @ w2 + b2
    out = m.mlp(x, w1, b1, w2, b2)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), y, rtol=2e-3, atol=2e-3)
    dlogits = rng.standard_normal((8, 10)).astype(np.float16)
    dx, dw1, db1, dw2, db2 = m.mlp_grad(x, w1, b1, w2, b2, dlogits)
    dy = dlogits.astype(np.float64)
    dz = (dy @ w2.T) * gelu_grad(z)
    for got, want in ((dw2, gelu(z).T @ dy), (db2, dy.sum(0)), (dx, dz @ w1.T), (dw1, x.T @ dz), (db1, dz.sum(0))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_opc_check_example_device_is_green(capsys) -> None:
    assert main(["check", "--target", NPU]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    assert out.splitlines()[-1] == "summary: 333 cases run: 333 pass, 0 FAIL; 853 fallback; 0 n/a"
    ran = [r for r in table if r[6] == "pass"]
    assert {r[0] for r in ran} == {"fused_gemm_epilogue", "fused_gemm_epilogue_grad", "cast"}
    shapes = {r[3] for r in ran if r[0] == "fused_gemm_epilogue"}
    assert shapes == {"M=1 K=1 N=1", "M=7 K=5 N=3", "M=150 K=260 N=21", "M=2 K=3 N=9", "M=2 K=3 N=17",
                      "M=2 K=3 N=33", "M=2 K=3 N=65", "M=3 K=17 N=4", "M=150 K=260 N=21 specials-in-x"}
    attrs = {r[1] for r in ran if r[0] == "fused_gemm_epilogue"}
    assert attrs == {f"trans_x={a} trans_y={b} activation=none" for a in ("false", "true") for b in ("false", "true")}
    assert ["fused_gemm_epilogue", "trans_x=true trans_y=false activation=gelu", "f32", "(any)", "-", "-",
            "fallback: activation = gelu not in [none] -> composite rule"] in table
    assert ["cast", "saturate=false dtype=i8", "f32", "(any)", "-", "-",
            "fallback: dtype = i8 not in [f32, f16, bf16] -> opc's own kernel"] in table


def test_opc_check_after_openmp_ran_in_the_parent(tmp_path) -> None:
    """`opc check` forks its cases' child; libgomp is not fork-safe, so a parent that has run a
    parallel region (a GEMM at OMP_NUM_THREADS=2) once left the child waiting forever in the
    reference GEMM. The child now runs OpenMP on one thread."""
    script = ("import sys, numpy as np, opc; from opc.cli import main\n"
              "t = 'tensor<256x256xf32>'\n"
              "m = opc.compile(f'func.func @mm(%a: {t}, %b: {t}) -> {t} {{\\n'\n"
              "                f'  %c = opc.matmul %a, %b : ({t}, {t}) -> {t}\\n  func.return %c : {t}\\n}}')\n"
              "a = np.ones((256, 256), np.float32)\n"
              "assert m.mm(a, a)[0, 0] == 256\n"
              f"sys.exit(main(['check', '--target', {NPU!r}]))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=150,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "summary: 333 cases run: 333 pass, 0 FAIL; 853 fallback; 0 n/a"


# ---------------------------------------------------------------------------
# Planted bugs are caught and named
# ---------------------------------------------------------------------------

BUGGY_GEMM = r"""
#include <math.h>
#include "opc_kernel.h"

int bug_gemm(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *y = &call->inputs[1], *out = &call->outputs[0];
    const float *X = x->data, *Y = y->data, *B = call->inputs[2].data;
    float *O = out->data, *R = call->num_outputs > 1 ? call->outputs[1].data : NULL;
    const int tx = opc_attr_bool(call, "trans_x", 0), ty = TRANS_Y;
    const int gelu = strcmp(opc_attr_string(call, "activation", "none"), "gelu") == 0;
    const int64_t m = out->shape[0], n = out->shape[1], k = tx ? x->shape[0] : x->shape[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float z = 0.0f;
            for (int64_t p = 0; p < k; p++) z += X[tx ? p * m + i : i * k + p] * Y[ty ? j * k + p : p * n + j];
            z = z BIAS;
            if (R) R[i * n + j] = z;
            O[i * n + j] = gelu ? 0.5f * z * (1.0f + erff(z * 0.70710678f)) : z;
        }
    return 0;
}
"""
PLANTED = {
    "wrong-transpose": ("0", "+ B[j]", '["none"]'),  # reads y as [K, N] even when trans_y
    "dropped-bias": ('opc_attr_bool(call, "trans_y", 0)', "", '["none"]'),
    "gelu-erf": ('opc_attr_bool(call, "trans_y", 0)', "+ B[j]", '["none", "gelu"]'),  # erf form for the tanh gelu
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_opc_check_catches_planted_bugs(bug, tmp_path, capsys) -> None:
    trans_y, bias, activations = PLANTED[bug]
    source = BUGGY_GEMM.replace("TRANS_Y", trans_y).replace("BIAS", bias)
    toml = device(tmp_path, f'[external.fused_gemm_epilogue]\nsource = "bug.c"\nsymbol = "bug_gemm"\n'
                  f'dtypes = ["f32"]\nactivation = {activations}\n', {"bug.c": source})
    assert main(["check", "--target", toml, "--ops", "fused_gemm_epilogue"]) == 1
    out = capsys.readouterr().out
    ran = [r for r in rows(out) if r[6] == "pass" or r[6].startswith("FAIL")]
    failing = {(r[1], r[3]) for r in ran if r[6] != "pass"}
    if bug == "wrong-transpose":  # every trans_y case but the 1x1 one, and nothing else
        want = {(r[1], r[3]) for r in ran if "trans_y=true" in r[1] and r[3] != "M=1 K=1 N=1"}
        assert failing == want and len(want) == 2 * 8
    elif bug == "dropped-bias":
        assert failing == {(r[1], r[3]) for r in ran} and len(failing) == 4 * 9
    else:  # the erf form differs from the tanh form by up to ~5e-4: every gelu case past 1x1
        assert all("activation=gelu" in a for a, _ in failing)
        assert {(a, s) for a, s in failing if s != "M=1 K=1 N=1"} == \
            {(r[1], r[3]) for r in ran if "activation=gelu" in r[1] and r[3] != "M=1 K=1 N=1"}
    assert f"0 pass, {len(failing)} FAIL" in out or f", {len(failing)} FAIL;" in out
    named = out.splitlines()[-1]
    assert named.startswith("failing: fused_gemm_epilogue ") and next(iter(sorted(failing)))[0] in out


# ---------------------------------------------------------------------------
# A kernel's errors and crashes
# ---------------------------------------------------------------------------

FLAKY_RELU = r"""
#include <signal.h>
#include "opc_kernel.h"

int npu_relu(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0];
    const int64_t count = opc_numel(x);
    if (count == 7) raise(SIGSEGV);  /* a crash, for the test */
    if (count == 15) return opc_kernel_fail(call, "queue full for %lld elements", (long long)count);
    for (int64_t i = 0; i < count; i++) {
        const float v = ((const float *)x->data)[i];
        ((float *)call->outputs[0].data)[i] = v < 0.0f ? 0.0f : v;
    }
    return 0;
}
"""


# Kernels that read int-list and float attributes: transpose by `perm` (any element size), full by `value`.
TRANSPOSE_AND_FULL = r"""
#include "opc_kernel.h"

static size_t width(opc_dtype t) {
    return t == OPC_DTYPE_I64 || t == OPC_DTYPE_F64 ? 8 : t == OPC_DTYPE_I32 || t == OPC_DTYPE_F32 ? 4
         : t == OPC_DTYPE_I16 || t == OPC_DTYPE_F16 || t == OPC_DTYPE_BF16 ? 2 : 1;
}

int npu_transpose(const opc_kernel_call *call) {
    const opc_tensor *x = &call->inputs[0], *out = &call->outputs[0];
    int32_t rank;
    const int64_t *perm = opc_attr_ints(call, "perm", &rank);
    if (rank != x->rank) return opc_kernel_fail(call, "perm has %d entries for rank %d", rank, x->rank);
    int64_t in_stride[4], idx[4] = {0, 0, 0, 0};
    for (int d = rank - 1, s = 1; d >= 0; s *= (int)x->shape[d], d--) in_stride[d] = s;
    const size_t w = width(x->dtype);
    for (int64_t i = 0, n = opc_numel(out); i < n; i++) {  /* idx: out's index, last dim fastest */
        int64_t src = 0;
        for (int d = 0; d < rank; d++) src += idx[d] * in_stride[perm[d]];
        memcpy((char *)out->data + i * w, (const char *)x->data + src * w, w);
        for (int d = rank - 1; d >= 0 && ++idx[d] == out->shape[d]; d--) idx[d] = 0;
    }
    return 0;
}

int npu_full(const opc_kernel_call *call) {
    const double value = opc_attr_float(call, "value", -1.0);
    for (int64_t i = 0, n = opc_numel(&call->outputs[0]); i < n; i++) ((float *)call->outputs[0].data)[i] = (float)value;
    return 0;
}
"""


@pytest.fixture(scope="module")
def flaky(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("flaky")
    return device(d, '[external.relu]\nsource = "relu.c"\nsymbol = "npu_relu"\ndtypes = ["f32"]\n'
                  '[external.transpose]\nsource = "more.c"\nsymbol = "npu_transpose"\ndtypes = ["f32", "i64", "bf16"]\n'
                  '[external.full]\nsource = "more.c"\nsymbol = "npu_full"\ndtypes = ["f32"]\n',
                  {"relu.c": FLAKY_RELU, "more.c": TRANSPOSE_AND_FULL}, name="flaky")


def test_kernel_error_raises_runtime_error(flaky) -> None:
    src = """
func.func @f(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %r = opc.relu %x : (tensor<3x5xf32>) -> tensor<3x5xf32>
  func.return %r : tensor<3x5xf32>
}
func.func @g(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x3xf32>) {
  %r = opc.relu %x : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %c = opc.full {value = 2.5 : f64} : () -> tensor<2x3xf32>
  func.return %r, %c : tensor<2x2xf32>, tensor<2x3xf32>
}
"""
    m = opc.compile(src, target=flaky)
    assert "npu_full(&opc_call)" in m.c_source and "OPC_ATTR_FLOAT" in m.c_source
    with pytest.raises(RuntimeError, match=r"^f\(\): npu_relu: queue full for 15 elements$"):
        m.f(np.ones((3, 5), np.float32))
    r, c = m.g(np.array([[-1, 2], [3, -4]], np.float32))
    np.testing.assert_array_equal(r, [[0, 2], [3, 0]])
    np.testing.assert_array_equal(c, np.full((2, 3), 2.5, np.float32))


def test_check_survives_a_crashing_kernel(flaky, capsys) -> None:
    assert main(["check", "--target", flaky]) == 1
    out = capsys.readouterr().out
    table = rows(out)
    result = {r[3]: r[6].split("; rerun: ")[0] for r in table if r[0] == "relu" and r[2] == "f32" and r[3] != "(any)"}
    crash, error = "FAIL: crashed (SIGSEGV)", "FAIL: kernel error: npu_relu: queue full for 15 elements"
    count = {shape: math.prod(int(d) for d in shape.split()[0].split("x")) for shape in result}
    assert result == {s: crash if count[s] == 7 else error if count[s] == 15 else "pass" for s in result}
    assert {s for s in result if result[s] != "pass"} == {"7", "7 specials", "3x5", "3x5 specials", "15", "3x5 large",
                                                          "3x5 large-negative"}
    rerun = next(r[6] for r in table if r[0] == "relu" and r[3] == "7").split("; rerun: ")[1]
    assert re.fullmatch(rf"opc check --target {re.escape(flaky)} --ops relu --case [0-9a-f]{{8}} --show", rerun)
    transposes = [r for r in table if r[0] == "transpose" and r[3] != "(any)"]
    assert len(transposes) == 12 and all(r[6] == "pass" and r[5] == "exact" for r in transposes)
    assert ["full", "-", "f32", "-", "-", "-", "n/a: opc check has no grid for opc.full yet (opc/check.py GRIDS)"] in table
    assert out.splitlines()[-1] == "failing: relu - f32 7; relu - f32 3x5; relu - f32 15; relu - f32 7 specials; " \
        "relu - f32 3x5 specials; relu - f32 3x5 large; relu - f32 3x5 large-negative"


# ---------------------------------------------------------------------------
# Bad input: one line naming the file and the key, exit 1
# ---------------------------------------------------------------------------

GOOD_KERNEL = '#include "opc_kernel.h"\nint k(const opc_kernel_call *call) { (void)call; return 0; }\n'


@pytest.mark.parametrize("section, needle", [
    ('[external.fused_gemm_epilogue]\nsource = "missing.c"\nsymbol = "k"\ndtypes = ["f32"]\n',
     "[external.fused_gemm_epilogue].source: no such file 'missing.c'"),
    ('[external.fused_gemm]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\n', "[external.fused_gemm]: unknown op 'fused_gemm'"),
    ('[external.fused_gemm_epilogue]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f8"]\n',
     "[external.fused_gemm_epilogue].dtypes: unknown dtype 'f8'"),
    ('[external.fused_gemm_epilogue]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\nactivaton = ["none"]\n',
     "[external.fused_gemm_epilogue].activaton: unknown attribute of opc.fused_gemm_epilogue (its attributes: "
     "activation, trans_x, trans_y"),
    ('[external.fused_gemm_epilogue]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\nactivation = ["swish"]\n',
     "[external.fused_gemm_epilogue].activation: unknown value 'swish' (expected none, relu, gelu)"),
    ('[external.fused_gemm_epilogue]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\ntrans_x = ["no"]\n',
     "[external.fused_gemm_epilogue].trans_x: 'no' is not a bool value"),
    ('[external.cast]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\ndtype = ["f128"]\n',
     "[external.cast].dtype: unknown value 'f128'"),
    ('[external.cast]\nsource = "k.c"\nsymbol = "k-1"\ndtypes = ["f32"]\n', "[external.cast].symbol: must be a C function name"),
    ('[external.cast]\nsource = "k.c"\nsymbol = "opc_cast"\ndtypes = ["f32"]\n', "names starting with opc_ are opc's own"),
    ('[external.cast]\nsource = "k.c"\ndtypes = ["f32"]\n', "[external.cast]: missing key 'symbol'"),
    ('backend = "cuda"\n[external.cast]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\n',
     "[external.cast]: external C kernels run on the cpu backend; backend 'cuda' is not supported for them"),
])
def test_bad_device_files(section, needle, tmp_path, capsys) -> None:
    (tmp_path / "k.c").write_text(GOOD_KERNEL)
    toml = tmp_path / "dev.toml"
    head, _, rest = section.partition("[external")
    toml.write_text(f'{head}name = "dev"\nkernels = ["add"]\n[external{rest}')
    assert main(["explain", "--target", str(toml)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {toml}: ") and needle in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("source, needle", [
    ("int other(void) { return 0; }\n", "[external.relu].symbol: 'k' is not defined in"),
    ('#include "opc_kernel.h"\nstatic int k(const opc_kernel_call *c) { return c == 0; }\nint u(void) { return k(0); }\n',
     "static declaration of 'k' follows non-static declaration"),
    ('#include "opc_kernel.h"\nint k(const opc_kernel_call *call) { return undeclared_name; }\n',
     "error: 'undeclared_name' undeclared"),
    ('#include "opc_kernel.h"\nint k(float *x) { return 0; }\n', "conflicting types for 'k'"),
])
def test_kernels_that_do_not_build(source, needle, tmp_path, capsys) -> None:
    toml = device(tmp_path, '[external.relu]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\n', {"k.c": source})
    model = tmp_path / "m.mlir"
    model.write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %r = opc.relu %x : (tensor<4xf32>) -> "
                     "tensor<4xf32>\n  func.return %r : tensor<4xf32>\n}\n")
    assert main(["compile", str(model), "--target", toml, "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {toml}: [external.relu].") and needle in err, err
    if "does not compile" in err:  # the compiler's first lines, naming the file
        assert f"[external.relu].source: {tmp_path / 'k.c'} does not compile:" in err and len(err.splitlines()) <= 9


def test_check_and_emit_refuse_what_they_cannot_do(tmp_path, capsys) -> None:
    assert main(["check", "--target", str(ROOT / "examples" / "device_no_fused.toml")]) == 1
    assert "has no kernels of its own" in capsys.readouterr().err
    assert main(["check", "--target", NPU, "--ops", "relu"]) == 1
    assert "no kernel of its own for 'relu' (it has: fused_gemm_epilogue, fused_gemm_epilogue_grad, cast)" in \
        capsys.readouterr().err
    shutil.copy(ROOT / "examples" / "npu" / "mlp.mlir", tmp_path / "mlp.mlir")
    assert main(["compile", str(tmp_path / "mlp.mlir"), "--target", NPU, "--emit", "cuda"]) == 1
    assert "run on the cpu backend only" in capsys.readouterr().err
    with pytest.raises(OpcError, match="unknown attribute"):
        get_target(device(tmp_path, '[external.relu]\nsource = "k.c"\nsymbol = "k"\ndtypes = ["f32"]\naxis = [1]\n',
                          {"k.c": GOOD_KERNEL}))


def test_a_select_kernel_is_chosen_by_its_values_dtype() -> None:
    """select's first operand is its i1 condition: a device's select kernel is picked by the values' dtype."""
    from opc.ir import parse_text
    from opc.targets.device_kernels import instance_dtype

    module = parse_text("func.func @f(%c: tensor<4xi1>, %a: tensor<4xf16>, %b: tensor<4xf16>) -> tensor<4xf16> {\n"
                        "  %r = opc.select %c, %a, %b : (tensor<4xi1>, tensor<4xf16>, tensor<4xf16>) -> tensor<4xf16>\n"
                        "  func.return %r : tensor<4xf16>\n}\n", "<t>").module
    (select,) = [op for op in module.walk() if op.name == "opc.select"]
    (add,) = [op for op in parse_text("func.func @g(%a: tensor<4xi32>) -> tensor<4xi32> {\n"
                                      "  %r = opc.add %a, %a : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>\n"
                                      "  func.return %r : tensor<4xi32>\n}\n", "<t>").module.walk() if op.name == "opc.add"]
    assert (instance_dtype(select), instance_dtype(add)) == ("f16", "i32")
