"""The arena's offsets (opc/lowering/arena_plan.py): buffers live at the same time never share a byte,
dead ones' bytes are reused, and a view keeps the buffer it reads alive. Against random lifetimes
(the exact invariant, checked byte range by byte range) and compiled chains against NumPy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import opc
from opc.lowering.arena_plan import arena_offsets


@pytest.mark.parametrize("seed", range(12))
def test_buffers_alive_together_never_share_a_byte(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    firsts = rng.integers(0, 40, n)
    ranges = {i: (int(f), int(f + rng.integers(0, 12))) for i, f in enumerate(firsts)}
    sizes = {i: 64 * int(rng.integers(1, 50)) for i in range(n)}
    offsets = arena_offsets(ranges, sizes)
    assert set(offsets) == set(sizes)
    for a in range(n):
        assert offsets[a] >= 0 and offsets[a] % 64 == 0
        for b in range(a + 1, n):
            together = ranges[a][0] <= ranges[b][1] and ranges[b][0] <= ranges[a][1]
            apart = offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]
            assert apart or not together, (a, b, ranges[a], ranges[b], offsets[a], offsets[b])
    total = max(offsets[i] + sizes[i] for i in range(n))
    most_alive = max(sum(sizes[i] for i in range(n) if ranges[i][0] <= p <= ranges[i][1]) for p in range(60))
    assert most_alive <= total <= sum(sizes.values())


def t(*shape: int) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


# four products in a chain: each GEMM's result is a buffer of its own that the next reads, so at most
# two are alive at once and the first's bytes serve the third
CHAIN = f"""
func.func @chain(%x: {t(64, 64)}, %w1: {t(64, 64)}, %w2: {t(64, 64)}, %w3: {t(64, 64)}, %w4: {t(64, 64)}) -> {t(64, 64)} {{
  %a = opc.matmul %x, %w1 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %b = opc.matmul %a, %w2 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %c = opc.matmul %b, %w3 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %d = opc.matmul %c, %w4 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  func.return %d : {t(64, 64)}
}}

func.func @view(%x: {t(64, 64)}, %w1: {t(64, 64)}, %w2: {t(64, 64)}, %w3: {t(64, 64)}, %w4: {t(128, 64)}) -> ({t(32, 64)}, {t(64, 64)}) {{
  %a = opc.matmul %x, %w1 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %v = opc.reshape %a : ({t(64, 64)}) -> {t(32, 128)}
  %b = opc.matmul %x, %w2 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %c = opc.matmul %b, %w3 : ({t(64, 64)}, {t(64, 64)}) -> {t(64, 64)}
  %e = opc.matmul %v, %w4 : ({t(32, 128)}, {t(128, 64)}) -> {t(32, 64)}
  func.return %e, %c : {t(32, 64)}, {t(64, 64)}
}}

func.func @loop(%trips: tensor<i64>, %x: {t(16, 16)}, %w: {t(16, 16)}) -> {t(16, 16)} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %trips[] : tensor<i64>
  %c3 = arith.index_cast %ni : i64 to index
  %p = opc.matmul %x, %w : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %q = opc.matmul %p, %w : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %r0, %r1 = scf.for %i = %c0 to %c3 step %c1 iter_args(%a = %p, %b = %q) -> ({t(16, 16)}, {t(16, 16)}) {{
    %n = opc.matmul %a, %w : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
    scf.yield %b, %n : {t(16, 16)}, {t(16, 16)}
  }}
  %s = opc.matmul %x, %x : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %u = opc.matmul %r0, %s : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %v = opc.add %u, %r1 : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  func.return %v : {t(16, 16)}
}}

func.func @choose(%flag: tensor<i1>, %x: {t(16, 16)}, %w: {t(16, 16)}) -> {t(16, 16)} {{
  %p = opc.matmul %x, %w : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %q = opc.matmul %p, %w : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %f = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %f -> ({t(16, 16)}) {{
    scf.yield %p : {t(16, 16)}
  }} else {{
    scf.yield %q : {t(16, 16)}
  }}
  %s = opc.matmul %x, %x : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  %u = opc.matmul %r, %s : ({t(16, 16)}, {t(16, 16)}) -> {t(16, 16)}
  func.return %u : {t(16, 16)}
}}
"""


@pytest.fixture(scope="module")
def module():  # noqa: ANN201
    return opc.compile(CHAIN)


def test_a_chain_reuses_the_bytes_of_dead_products(module) -> None:  # noqa: ANN001
    x, *ws = (np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) / 8 for i in range(5))
    np.testing.assert_allclose(module.chain(x, *ws), x.astype(np.float64) @ ws[0] @ ws[1] @ ws[2] @ ws[3],
                               rtol=1e-4, atol=1e-5)
    body = module.c_source.split("int opc_fn_chain(")[1].split("cleanup:")[0]
    (arena,) = re.findall(r"opc_arena_get\((\d+)\)", body)
    assert int(arena) == 2 * 64 * 64 * 4, arena  # a, b, c in two buffers' bytes


def test_a_view_keeps_its_buffer_alive(module) -> None:  # noqa: ANN001
    """%a is read through its reshape after %b is made: %b may not take its bytes."""
    x, w1, w2, w3 = (np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) / 8 for i in range(4))
    w4 = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32) / 8
    e, c = module.view(x, w1, w2, w3, w4)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(e, (x64 @ w1).reshape(32, 128) @ w4, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c, x64 @ w2 @ w3, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trips", [0, 1, 2, 3])
def test_a_loops_results_keep_what_its_iterations_rotate_through_alive(module, trips: int) -> None:  # noqa: ANN001
    """The loop's results are whichever of its buffers the rotation left them in (its initial values
    %p and %q after no trip at all): %s, made after the loop, may take none of their bytes."""
    x, w = (np.random.default_rng(i).standard_normal((16, 16)) / 4 for i in range(2))
    a, b = x @ w, x @ w @ w
    for _ in range(trips):
        a, b = b, a @ w
    want = a @ (x @ x) + b
    got = module.loop(np.array(trips), x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flag", [True, False])
def test_what_a_branch_yields_stays_alive(module, flag: bool) -> None:  # noqa: ANN001
    """%r is %p or %q as a branch yields it (the branches copy it into %r's own buffer), and %s, made
    after the if, may take the bytes of whichever is dead: the product reads the chosen values."""
    x, w = (np.random.default_rng(i).standard_normal((16, 16)) / 4 for i in range(2))
    want = (x @ w if flag else x @ w @ w) @ (x @ x)
    got = module.choose(np.array(flag), x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
