"""A module's kernels built as several translation units at once (opc/lowering/parallel_build.py):
the same numbers as one unit and as NumPy, every kernel in exactly one unit, and build keys that
separate what builds differently."""

from __future__ import annotations

import re

import numpy as np
import pytest

from opc.api import load_c, lower, prepare
from opc.frontend import load_module
from opc.lowering import build, parallel_build
from opc.lowering.c_emitter import emit_c

pytestmark = pytest.mark.skipif(not parallel_build.supported(), reason="the split build is Linux's (gcc -shared)")

N = 8
T, R = f"tensor<{N}x{N}xf32>", f"tensor<{N}x1xf32>"
BINARY = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "maximum": np.maximum}
UNARY = {"tanh": np.tanh, "relu": lambda a: np.maximum(a, 0), "neg": np.negative}


def layered(n_ops: int) -> tuple[str, object]:
    """An n_ops-op model (runs of elementwise ops broken by a matmul or a row max broadcast back,
    as bench/bench_cpu.py's compile-time model) and its NumPy oracle (float64)."""
    lines, steps = [], []
    full, prev, reduced = "%x", "%w", None
    for i in range(n_ops):
        v = f"%v{i}"
        if i % 8 == 7 and (i // 8) % 2 == 0:
            lines.append(f"{v} = opc.matmul {full}, %w : ({T}, {T}) -> {T}")
            steps.append((v, "matmul", full, "%w"))
        elif i % 8 == 7:
            lines.append(f"{v} = opc.reduce_max {full} {{axes = array<i64: 1>, keepdim = true}} : ({T}) -> {R}")
            steps.append((v, "rowmax", full, None))
            reduced = v
            continue
        elif reduced is not None:
            lines.append(f"{v} = opc.sub {full}, {reduced} : ({T}, {R}) -> {T}")
            steps.append((v, "sub", full, reduced))
            reduced = None
        elif i % 3 == 2:
            name = list(UNARY)[(i // 3) % len(UNARY)]
            lines.append(f"{v} = opc.{name} {full} : ({T}) -> {T}")
            steps.append((v, name, full, None))
        else:
            name = list(BINARY)[i % len(BINARY)]
            lines.append(f"{v} = opc.{name} {full}, {prev} : ({T}, {T}) -> {T}")
            steps.append((v, name, full, prev))
        full, prev = v, full
    body = "\n".join("  " + line for line in lines)
    text = f"func.func @model(%x: {T}, %w: {T}) -> {T} {{\n{body}\n  func.return {full} : {T}\n}}\n"

    def oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        env = {"%x": x.astype(np.float64), "%w": w.astype(np.float64)}
        for v, name, a, b in steps:
            if name == "matmul":
                env[v] = env[a] @ env[b]
            elif name == "rowmax":
                env[v] = env[a].max(axis=1, keepdims=True)
            elif name in UNARY:
                env[v] = UNARY[name](env[a])
            else:
                env[v] = BINARY[name](env[a], env[b])
        return env[full]

    return text, oracle


def emitted(text: str):  # noqa: ANN201
    return emit_c(lower(prepare(load_module(text))))[:2]


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_split_build_gives_the_same_numbers(jobs, tmp_path, monkeypatch):
    """Small thresholds, so that a 40-op model splits into `jobs` kernel units (1: one unit, as CFFI builds it)."""
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_CHARS", 1)
    monkeypatch.setattr(parallel_build, "MIN_UNIT_CHARS", 1)
    monkeypatch.setattr(parallel_build, "build_jobs", lambda: jobs)
    text, oracle = layered(40)
    source, sigs = emitted(text)
    units = parallel_build.split_source(source, jobs)
    kernels = parallel_build.KERNEL_DEF.findall(source)
    if jobs == 1:
        assert units is None
    else:
        assert units is not None and len(units.kernels) == jobs
        for name, _ in kernels:  # each kernel defined in one unit, declared in the main one
            assert sum(f" {name}(" in unit for unit in units.kernels) == 1
            assert f"void {name}(" in units.main and f"static __attribute__((noinline)) void {name}(" not in units.main
    rng = np.random.default_rng(jobs)
    x = rng.standard_normal((N, N)).astype(np.float32) / 4
    w = rng.standard_normal((N, N)).astype(np.float32) / 4
    m = load_c(source, sigs, str(tmp_path / "cache"))
    got = m.model(x, w)
    np.testing.assert_allclose(got, oracle(x, w), rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_CHARS", 10**9)  # the same source as one unit
    monkeypatch.setattr(build, "BUILD_SCHEME", "one-unit")  # (else the cache gives the module above back)
    single = load_c(source, sigs, str(tmp_path / "cache"))
    assert single.path != m.path
    np.testing.assert_array_equal(single.model(x, w), got)


def test_small_modules_stay_one_unit():
    source, _ = emitted(layered(12)[0])
    assert parallel_build.KERNEL_DEF.search(source) is not None
    assert parallel_build.split_source(source, 8) is None


@pytest.mark.parametrize("change", ["source", "flags", "scheme", "cdef"])
def test_build_key_separates_what_builds_differently(change, monkeypatch):
    source, sigs = emitted(layered(12)[0])
    cdef = build.cdef_for(sigs)
    base = build.module_key(source, cdef)
    if change == "source":
        source = source.replace("opc_k_model_0", "opc_k_model_0x")
    elif change == "flags":
        monkeypatch.setattr(build, "MODULE_FLAGS", [*build.MODULE_FLAGS, "-fno-unroll-loops"])
    elif change == "scheme":
        monkeypatch.setattr(build, "BUILD_SCHEME", "other")
    else:
        cdef += "\nint f(void);"
    assert build.module_key(source, cdef) != base


CALL = re.compile(r"^\s+(opc_k_\w+)\(", re.MULTILINE)
EPILOGUE = re.compile(r"opc_rt_gemm_ep_\w+\([^\n]*, (opc_k_\w+), opc_ep_ctx\);")  # a GEMM's epilogue kernel


def test_repeated_layers_share_one_kernel(tmp_path):
    """Kernels that differ only by their locals' names are emitted once and called from every layer
    (here each layer's add, tanh, mul: its GEMM's epilogue)."""
    layer = ("  %m{k} = opc.matmul %h{k}, %w : ({T}, {T}) -> {T}\n"
             "  %s{k} = opc.add %m{k}, %x : ({T}, {T}) -> {T}\n"
             "  %t{k} = opc.tanh %s{k} : ({T}) -> {T}\n"
             "  %h{n} = opc.mul %t{k}, %m{k} : ({T}, {T}) -> {T}\n")
    body = "".join(layer.format(k=k, n=k + 1, T=T) for k in range(3))
    text = f"func.func @model(%h0: {T}, %w: {T}, %x: {T}) -> {T} {{\n{body}  func.return %h3 : {T}\n}}\n"

    def oracle(h, w, x):  # noqa: ANN001, ANN202
        h = h.astype(np.float64)
        for _ in range(3):
            m = h @ w
            h = np.tanh(m + x) * m
        return h

    source, sigs = emitted(text)
    defined = [name for name, _ in parallel_build.KERNEL_DEF.findall(source)]
    called = CALL.findall(source) + EPILOGUE.findall(source)
    assert len(set(defined)) == len(defined) and set(called) == set(defined)
    assert len(defined) == 1 and len(called) == 3
    h = np.linspace(-1, 1, N * N, dtype=np.float32).reshape(N, N)
    w = np.cos(np.arange(N * N, dtype=np.float32)).reshape(N, N) / 2
    x = np.sin(np.arange(N * N, dtype=np.float32)).reshape(N, N)
    got = load_c(source, sigs, str(tmp_path)).model(h, w, x)
    np.testing.assert_allclose(got, oracle(h, w, x), rtol=1e-4, atol=1e-5)


def test_kernels_reading_different_constants_stay_apart(tmp_path):
    """Same code but another global constant: not one kernel (opc_* names are not renamed)."""
    c1, c2 = np.round(np.arange(N * N).reshape(N, N) / 7, 6), np.round(np.arange(N * N).reshape(N, N)[::-1] / 5, 6)
    dense = [", ".join(", ".join(f"{v:.6f}" for v in row) for row in c) for c in (c1, c2)]
    text = (f"func.func @f(%x: {T}) -> ({T}, {T}) {{\n"
            f"  %c1 = arith.constant dense<[{dense[0]}]> : tensor<{N * N}xf32>\n"
            f"  %c2 = arith.constant dense<[{dense[1]}]> : tensor<{N * N}xf32>\n"
            f"  %r1 = opc.reshape %c1 : (tensor<{N * N}xf32>) -> {T}\n"
            f"  %r2 = opc.reshape %c2 : (tensor<{N * N}xf32>) -> {T}\n"
            f"  %a = opc.mul %x, %r1 : ({T}, {T}) -> {T}\n"
            f"  %b = opc.mul %x, %r2 : ({T}, {T}) -> {T}\n"
            f"  func.return %a, %b : {T}, {T}\n}}\n")
    x = np.linspace(-2, 2, N * N, dtype=np.float32).reshape(N, N)
    source, sigs = emitted(text)
    a, b = load_c(source, sigs, str(tmp_path)).f(x)
    np.testing.assert_allclose(a, x * c1, rtol=1e-6)
    np.testing.assert_allclose(b, x * c2, rtol=1e-6)
