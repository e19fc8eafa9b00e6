"""Checkpointed scf.while gradients (`opc.checkpoint = k`: every k-th state saved, segments rerun as
scf.for loops) against central differences in f64 and the full-save gradient, and the loop stack's
memory: what the checkpoints save (the stack's peak), and a large buffer freed when a call ends."""

import sys
from typing import Any

import numpy as np
import pytest
from test_control_flow_grad import WHILE64, check_grad, while_ref

import opc
from opc.lowering.c_control_emission import STACK_KEEP_BYTES


def with_while_checkpoint(src: str, k: int) -> str:
    """Each scf.while of src (its `do` region closed by a line `  }` before `%o`) marked checkpoint = k."""
    return src.replace("  }\n  %o", f"  }} attributes {{opc.checkpoint = {k} : i64}}\n  %o")


def stack_lib(m):
    """The extension's C functions (opc_stack_capacity / opc_stack_peak, where the module uses the stack)."""
    return sys.modules[m.path.name.split(".")[0]].lib


@pytest.fixture(scope="module")
def whiles():
    return {k: opc.compile(with_while_checkpoint(WHILE64, k) if k else WHILE64, grad=True) for k in (0, 1, 2, 3, 10)}


def test_checkpoint_marks_the_while():
    assert "opc.checkpoint = 3" in with_while_checkpoint(WHILE64, 3)


@pytest.mark.parametrize("k", [1, 2, 3, 10])
@pytest.mark.parametrize("lim, trips", [(-100.0, 0), (2.5, 1), (39.0, 7)])
def test_grad_through_checkpointed_while(whiles, k, lim, trips):
    """Every k, trip counts 0, 1 and 7: the full-save gradients, and central differences."""
    rng = np.random.default_rng(8)
    x, w = rng.uniform(0.0, 0.2, 4), rng.uniform(0.9, 1.0, 4)
    want, n = while_ref(x, w, lim)
    assert n == trips, n
    m = whiles[k]
    np.testing.assert_allclose(m.f(x, w, np.array(lim)), want, rtol=1e-12)
    dout = rng.standard_normal(4)
    for a, b in zip(m.f_grad(x, w, np.array(lim), dout), whiles[0].f_grad(x, w, np.array(lim), dout)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    check_grad(m, [], [x, w], rng, tail=[np.array(lim)])


def test_checkpointed_while_grad_ir():
    """The forward keeps a count on the stack and pushes under an scf.if; the backward reruns
    segments as scf.for loops, no backward scf.while."""
    from opc.api import prepare
    from opc.frontend import load_module

    src = load_module(with_while_checkpoint(WHILE64, 3))
    prepare(src, grad=True)
    text = str(src.module)
    grad_fn = text[text.index("@f_grad("):]
    grad_fn = grad_fn[:grad_fn.find("func.func")] if "func.func" in grad_fn else grad_fn
    assert "trips_ckpt" in grad_fn and grad_fn.count("scf.while") == 1
    assert "scf.for" in grad_fn


def test_opc_grad_checkpoint_option_marks_whiles():
    from opc.frontend import load_module
    from opc.ir import make_context
    from opc.transforms.opc_grad import GradPass

    src = load_module(WHILE64)
    GradPass(checkpoint=4).apply(make_context(), src.module)
    assert "opc.checkpoint = 4" in str(src.module)


# a <- a * w + 1 over a large state (N f64), while sum(a) < lim: one push is 8 N bytes
BIG_WHILE = """
func.func @f(%x: tensor<NNxf64>, %w: tensor<NNxf64>, %lim: tensor<f64>) -> tensor<NNxf64> {
  %r = scf.while (%a = %x) : (tensor<NNxf64>) -> (tensor<NNxf64>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<NNxf64>) -> tensor<f64>
    %t = opc.less_than %s, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    scf.condition(%c) %a : tensor<NNxf64>
  } do {
  ^bb0(%b: tensor<NNxf64>):
    %m = opc.mul %b, %w : (tensor<NNxf64>, tensor<NNxf64>) -> tensor<NNxf64>
    %one = opc.full {value = 1.0 : f64} : () -> tensor<NNxf64>
    %n = opc.add %m, %one : (tensor<NNxf64>, tensor<NNxf64>) -> tensor<NNxf64>
    scf.yield %n : tensor<NNxf64>
  }ATTRS
  %o = opc.mul %r, %w : (tensor<NNxf64>, tensor<NNxf64>) -> tensor<NNxf64>
  return %o : tensor<NNxf64>
}
"""


def big_while(n: int, attrs: str = "") -> str:
    return BIG_WHILE.replace("NN", str(n)).replace("ATTRS", f" attributes {{{attrs}}}" if attrs else "")


def big_ref(x, w, lim):
    a, trips = x.copy(), 0
    while a.sum() < lim:
        a, trips = a * w + 1, trips + 1
    return a * w, trips


@pytest.mark.parametrize("k", [4, 10])
def test_checkpointing_saves_less(k):
    """The stack's peak over a call: (T / k + k) states with checkpoints against T + 1 without."""
    n, size = 1024, 8 * 1024
    full, ckpt = opc.compile(big_while(n), grad=True), opc.compile(big_while(n, f"opc.checkpoint = {k} : i64"),
                                                                   grad=True)
    x, w, dout = np.zeros(n), np.ones(n), np.ones(n)
    lim = np.array(float(n * 40 - 1))  # 40 trips: a += 1 each
    assert big_ref(x, w, lim)[1] == 40
    for a, b in zip(full.f_grad(x, w, lim, dout), ckpt.f_grad(x, w, lim, dout)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    full.f_grad(x, w, lim, dout)
    peak_full = stack_lib(full).opc_stack_peak()
    ckpt.f_grad(x, w, lim, dout)
    peak_ckpt = stack_lib(ckpt).opc_stack_peak()
    assert peak_full >= 41 * size
    assert peak_ckpt <= (40 // k + 1 + k + 1) * size + 64, (peak_ckpt, peak_full)
    assert peak_ckpt < peak_full


def test_large_stack_freed_after_the_call():
    """A call that pushed past STACK_KEEP_BYTES leaves the thread's stack under it; a small one is kept."""
    n = 1 << 16  # 512 KiB a push
    m: Any = opc.compile(big_while(n), grad=True)
    lib = stack_lib(m)
    x, w, dout = np.zeros(n), np.ones(n), np.ones(n)
    trips = STACK_KEEP_BYTES // (8 * n) + 20  # past the cap
    lim = np.array(float(n * trips - 1))
    gx, gw, _ = m.f_grad(x, w, lim, dout)
    np.testing.assert_allclose(gx, np.ones(n))
    np.testing.assert_allclose(gw, np.full(n, trips) * (trips - 1) / 2 + trips, rtol=1e-12)
    assert lib.opc_stack_peak() > STACK_KEEP_BYTES
    assert lib.opc_stack_capacity() <= STACK_KEEP_BYTES
    m.f_grad(x, w, np.array(float(n * 3 - 1)), dout)  # 4 pushes: the buffer is kept for the next call
    assert 0 < lib.opc_stack_capacity() <= STACK_KEEP_BYTES


def test_failed_call_leaves_the_stack_consistent():
    """A call that fails mid-loop (opc.max_trips) after pushing past the cap frees the buffer, and the
    next call's gradients are right."""
    n = 1 << 16
    trips = STACK_KEEP_BYTES // (8 * n) + 20
    m: Any = opc.compile(big_while(n, f"opc.max_trips = {trips - 5} : i64"), grad=True)
    lib = stack_lib(m)
    x, w, dout = np.zeros(n), np.ones(n), np.ones(n)
    with pytest.raises(RuntimeError):
        m.f_grad(x, w, np.array(float(n * trips - 1)), dout)
    assert lib.opc_stack_peak() > STACK_KEEP_BYTES  # it had pushed past the cap when it failed
    assert lib.opc_stack_capacity() <= STACK_KEEP_BYTES
    gx, gw, _ = m.f_grad(x, w, np.array(float(n * 5 - 1)), dout)
    np.testing.assert_allclose(gx, np.ones(n))
    np.testing.assert_allclose(gw, np.full(n, 5 * 4 / 2 + 5.0))


# a checkpointed while inside a checkpointed for: the for's segment reruns hold the while's count and
# checkpoints, popped within each backward step
WHILE_IN_FOR = """
func.func @f(%n: tensor<i64>, %x: tensor<4xf64>, %w: tensor<4xf64>, %lim: tensor<f64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
    %q = scf.while (%a = %acc) : (tensor<4xf64>) -> (tensor<4xf64>) {
      %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4xf64>) -> tensor<f64>
      %t = opc.less_than %s, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %c = tensor.extract %t[] : tensor<i1>
      scf.condition(%c) %a : tensor<4xf64>
    } do {
    ^bb0(%b: tensor<4xf64>):
      %m = opc.mul %b, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
      %d = opc.sigmoid %b : (tensor<4xf64>) -> tensor<4xf64>
      %e = opc.add %m, %d : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
      scf.yield %e : tensor<4xf64>
    } attributes {opc.checkpoint = 2 : i64}
    %h = opc.tanh %q : (tensor<4xf64>) -> tensor<4xf64>
    %z = opc.mul %h, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %z : tensor<4xf64>
  } {opc.checkpoint = 2 : i64}
  return %r : tensor<4xf64>
}
"""


@pytest.mark.parametrize("n", [0, 1, 3, 5])
def test_checkpointed_while_in_checkpointed_for(n):
    m = opc.compile(WHILE_IN_FOR, grad=True)
    full = opc.compile(WHILE_IN_FOR.replace("opc.checkpoint = 2", "opc.checkpoint = 1"), grad=True)
    rng = np.random.default_rng(1)
    x, w, lim, dout = rng.uniform(0, 0.2, 4), rng.uniform(0.9, 1.0, 4), np.array(3.0), rng.standard_normal(4)
    for a, b in zip(m.f_grad(np.array(n), x, w, lim, dout), full.f_grad(np.array(n), x, w, lim, dout)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    check_grad(m, [np.array(n)], [x, w], rng, tail=[lim])
