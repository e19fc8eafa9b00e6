"""bf16 GEMMs (runtime/opc_gemm.h's opc_gemm_bf16, and opc_gemm_bf16dp.h's vdpbf16ps kernel where the
CPU has AVX512-BF16) through opc.compile, against NumPy in f64 on the same bf16 inputs.

The grid: M and K over {1, 2, 15, 16, 17, 33, 64, 130} (odd K pads a pair, 130 is past a 12-row and a
32-column tile, K = 1 is a single half pair), N and the transposes cycling with them, batched and
broadcast operands, bias with relu (the GEMM's own activation) and the exporter's erf GELU (the
epilogue callback), at 1 and 2 threads. All in one compiled module (compile time dominates).

The bound each element must meet, from the arithmetic: the products of bf16 values are exact in f32,
f32 sums of K of them (plus the bias) are off by at most (K + 2) * 2^-24 * sum |a_k b_k| (vdpbf16ps
rounds once per pair, the f32 path once per k: both within it), then the result is rounded once to
bf16, half a unit of 8 significant bits: 2^-8 of its size. Where the bias and activation run in the
GEMM's epilogue (a batched x) they add to the product already rounded to bf16: one more 2^-8 of it.
The GELU chain runs in bf16 after the GEMM: each of its five ops rounds once more, which a few 2^-8
of |z| cover.

test_fallback_path runs the same cases in a child process with $OPC_GEMM_BF16DP=0 (the f32-widening
path, the only one on CPUs without AVX512-BF16) under the same bounds, and where this CPU has the
instruction checks that the two paths did run different kernels (their bits differ somewhere).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import opc

BF16 = np.dtype(ml_dtypes.bfloat16)
SIZES = [1, 2, 15, 16, 17, 33, 64, 130]
U = 2.0**-24  # f32's unit roundoff

# (M, N, K, trans_x, trans_y, batch, batched w, epilogue)
CASES = [(m, SIZES[(i + 3 * j) % 8], k, (i + j) % 2 == 1, (i + j) // 2 % 2 == 1, 1, False, "none")
         for i, m in enumerate(SIZES) for j, k in enumerate(SIZES)] + [
    (17, 33, 15, False, False, 2, False, "none"),  # 3-D x, 2-D w (broadcast)
    (16, 15, 130, True, True, 3, True, "none"),  # a w per batch, both transposed
    (33, 130, 17, False, True, 2, True, "none"),
    (33, 130, 64, False, False, 1, False, "relu"),  # bias + relu: the GEMM's store
    (130, 17, 33, True, False, 2, False, "relu"),
    (64, 33, 130, False, True, 1, False, "gelu"),  # bias + erf GELU: the epilogue callback
    (130, 64, 17, False, False, 2, True, "gelu"),
]  # fmt: skip


def name(c: tuple) -> str:
    m, n, k, tx, ty, b, bw, ep = c
    return f"mm_{b}x{m}x{n}x{k}{'_tx' if tx else ''}{'_ty' if ty else ''}{'_bw' if bw else ''}_{ep}"


def t(shape: tuple[int, ...]) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}bf16>"


def shapes(c: tuple) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    m, n, k, tx, ty, b, bw, _ = c
    lead = (b,) if b > 1 else ()
    xs = (*lead, *((k, m) if tx else (m, k)))
    ws = (*(lead if bw else ()), *((n, k) if ty else (k, n)))
    return xs, ws, (*lead, m, n)


def function(c: tuple) -> str:
    xs, ws, zs = shapes(c)
    ep, s, sc = c[-1], t(zs), t(())
    attrs = ", ".join(f"{a} = true" for a, on in (("trans_x", c[3]), ("trans_y", c[4])) if on)
    args = [f"%x: {t(xs)}", f"%w: {t(ws)}"] + ([f"%b: {t(zs[-1:])}"] if ep != "none" else [])
    body = [f"%z = opc.matmul %x, %w{' {' + attrs + '}' if attrs else ''} : ({t(xs)}, {t(ws)}) -> {s}"]
    if ep != "none":
        body.append(f"%zb = opc.add %z, %b : ({s}, {t(zs[-1:])}) -> {s}")
    if ep == "relu":
        body.append(f"%y = opc.relu %zb : ({s}) -> {s}")
    if ep == "gelu":  # the exporter's x * 0.5 * (1 + erf(x / sqrt 2))
        body += [f"%s2 = arith.constant dense<1.4142135623730951> : {sc}",
                 f"%d = opc.div %zb, %s2 : ({s}, {sc}) -> {s}",
                 f"%e = opc.erf %d : ({s}) -> {s}",
                 f"%one = arith.constant dense<1.0> : {sc}",
                 f"%a = opc.add %e, %one : ({s}, {sc}) -> {s}",
                 f"%p = opc.mul %zb, %a : ({s}, {s}) -> {s}",
                 f"%half = arith.constant dense<0.5> : {sc}",
                 f"%y = opc.mul %p, %half : ({s}, {sc}) -> {s}"]  # fmt: skip
    result = "%z" if ep == "none" else "%y"
    lines = "\n  ".join(body)
    return f"func.func @{name(c)}({', '.join(args)}) -> {s} {{\n  {lines}\n  func.return {result} : {s}\n}}\n"


SOURCE = "".join(function(c) for c in CASES)


def inputs(c: tuple) -> list[np.ndarray]:
    xs, ws, zs = shapes(c)
    rng = np.random.default_rng(zlib.crc32(name(c).encode()))  # the same in the fallback's child
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws)] + (
        [rng.standard_normal(zs[-1:])] if c[-1] != "none" else []
    )
    return [a.astype(BF16) for a in arrays]


def oracle(c: tuple, args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The f64 result, and the bound on each element's error (the module docstring's)."""
    x, w = (a.astype(np.float64) for a in args[:2])
    x = np.swapaxes(x, -1, -2) if c[3] else x
    w = np.swapaxes(w, -1, -2) if c[4] else w
    z = x @ w
    sums = (c[2] + 2) * U * (np.abs(x) @ np.abs(w) + np.abs(z))  # f32 accumulation (and the bias's addition)
    if c[-1] == "none":
        return z, 2.0**-8 * np.abs(z) + sums
    # the bias and relu in the GEMM's store (rounded once), or in its epilogue on the product
    # rounded to bf16 (once more: 2^-8 |x @ w|)
    rounded_product = 2.0**-8 * np.abs(z)
    z = z + args[2].astype(np.float64)
    if c[-1] == "relu":
        return np.maximum(z, 0), 2.0**-8 * np.maximum(z, 0) + rounded_product + 2 * sums
    want = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return want, 2.0**-8 * (np.abs(want) + 6 * np.abs(z)) + rounded_product + 2 * sums


def run_all(module, threads: int) -> dict[str, np.ndarray]:  # noqa: ANN001
    before = opc.get_num_threads()
    try:
        opc.set_num_threads(threads)
        return {name(c): getattr(module, name(c))(*inputs(c)) for c in CASES}
    finally:
        opc.set_num_threads(before)


def check(c: tuple, got: np.ndarray, args: list[np.ndarray] | None = None) -> None:
    want, bound = oracle(c, inputs(c) if args is None else args)
    assert got.dtype == BF16 and got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), f"{name(c)} at {worst}: got {got[worst]}, want {want[worst]}, bound {bound[worst]}"


def cpu_has_bf16() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def module():  # noqa: ANN201
    return opc.compile(SOURCE)


@pytest.fixture(scope="module")
def fallback(module, tmp_path_factory) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Every case's result (1 thread) in a child process on the f32-widening path."""
    del module  # compiled (and cached) first: the child loads it
    out = tmp_path_factory.mktemp("bf16") / "fallback.npz"
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "OPC_GEMM_BF16DP": "0",
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run([sys.executable, __file__, str(out)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as saved:
        return {k: saved[k].view(BF16) for k in saved.files}


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_gemm_matches_numpy(module, threads: int) -> None:  # noqa: ANN001
    for c, got in zip(CASES, run_all(module, threads).values(), strict=True):
        check(c, got)


def test_fallback_path(module, fallback) -> None:  # noqa: ANN001
    for c in CASES:
        check(c, fallback[name(c)])
    if cpu_has_bf16():  # the default path ran vdpbf16ps: pairs of k summed first, other bits somewhere
        fast = run_all(module, 1)
        assert any(not np.array_equal(fast[k].view(np.uint16), fallback[k].view(np.uint16)) for k in fast)


def test_every_case_calls_the_gemm(module) -> None:  # noqa: ANN001
    """What the grid tests is the runtime's GEMM: each function calls opc_rt_gemm_bf16 or its
    epilogue form (not a loop nest of its own)."""
    c_source = module.c_source
    for c in CASES:
        body = c_source.split(f"int opc_fn_{name(c)}(")[1].split("cleanup:")[0]
        assert "opc_rt_gemm_bf16(" in body or "opc_rt_gemm_ep_bf16(" in body, name(c)


# two depth blocks of the vdpbf16ps path (512), the last one odd; edge column panels; the weight as
# B (either layout) or as A
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("weight", ["b", "b_t", "a"])
def test_frozen_weights_packed_once(weight: str, threads: int) -> None:
    """A weight bound with the promise that it never changes (with_last(frozen=True)): its packed
    panels are made on the first call and kept, so a change in place is not seen -- what shows that
    the kept copy is what runs."""
    m, n, k = 40, 70, 601
    c = (m, n, k, False, weight == "b_t", 1, False, "none")
    xs, ws, zs = shapes(c)
    if weight == "a":  # w @ x: the weight is the product's A, and the function's last argument
        xs, ws = ws, xs
    attrs = " {trans_y = true}" if weight == "b_t" else ""
    operands = ("%w, %x" if weight == "a" else "%x, %w") + attrs
    types = f"({t(ws)}, {t(xs)})" if weight == "a" else f"({t(xs)}, {t(ws)})"
    f = opc.compile(
        f"func.func @f(%x: {t(xs)}, %w: {t(ws)}) -> {t(zs)} {{\n"
        f"  %y = opc.matmul {operands} : {types} -> {t(zs)}\n  func.return %y : {t(zs)}\n}}\n"
    ).f
    rng = np.random.default_rng(len(weight))
    x, w = rng.standard_normal(xs).astype(BF16), rng.standard_normal(ws).astype(BF16)
    product_args = [w, x] if weight == "a" else [x, w]
    before = opc.get_num_threads()
    try:
        opc.set_num_threads(threads)
        bound = f.with_last([w], frozen=True)
        first = bound(x)
        check(c, first, product_args)
        w *= BF16.type(-2.0)  # exact in bf16; a frozen binding promised there would be no such change
        np.testing.assert_array_equal(bound(x).view(np.uint16), first.view(np.uint16))
    finally:
        opc.set_num_threads(before)


if __name__ == "__main__":  # the fallback fixture's child: every case's result into the .npz argv[1]
    results = run_all(opc.compile(SOURCE), 1)
    as_bits: dict[str, Any] = {k: v.view(np.uint16) for k, v in results.items()}
    np.savez(sys.argv[1], **as_bits)
