"""A module's kernels built as several translation units at once (opc/lowering/parallel_build.py):
the same numbers as one unit and as NumPy, every kernel in exactly one unit, and build keys that
separate what builds differently."""

from __future__ import annotations

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
    return emit_c(lower(prepare(load_module(text))))


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
