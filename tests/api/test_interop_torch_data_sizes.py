"""opc.torch on a function whose results' sizes depend on the data (sig.found: opc.nonzero's
count): eager forward and backward through both wrappers, torch.compile (a graph break where
dynamic output shapes are not captured; captured, with unbacked SymInts, where they are), and
the note a tracer without such sizes gets. Oracle: the same formula in NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from requires import import_or_skip

torch = import_or_skip("torch", "opc.torch wraps compiled functions as torch custom ops")
from interop_source import DATA_SIZED, MASKS, numpy_compress  # noqa: E402

import opc  # noqa: E402
from opc.interop import torch as opc_torch  # noqa: E402  (opc.torch is this module)

RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def m():
    return opc.compile(DATA_SIZED, grad=True)


def cases():
    for mask in MASKS:
        yield RNG.standard_normal((len(mask), 3)), np.array(mask, bool)


def loss_of(fn):  # noqa: ANN001, ANN201
    def loss(x, c):  # noqa: ANN001, ANN202
        t, _ = fn(x, c)  # the int64 result unused: its cotangent is zeros at its run-time size
        return (t ** 2).sum()
    return loss


@pytest.mark.parametrize("wrapper", ["op", "function"])
def test_eager_forward_and_backward_match_numpy(m, wrapper):
    fn = getattr(opc_torch, wrapper)(m.compress)
    for x, c in cases():
        t_want, idx_want, dx_want = numpy_compress(x, c)
        xt = torch.from_numpy(x).requires_grad_()
        t, idx = fn(xt, torch.from_numpy(c))
        assert t.shape == t_want.shape and idx.dtype == torch.int64
        np.testing.assert_allclose(t.detach().numpy(), t_want, rtol=1e-12)
        np.testing.assert_array_equal(idx.numpy(), idx_want)
        loss_of(fn)(xt, torch.from_numpy(c)).backward()
        assert xt.grad is not None
        np.testing.assert_allclose(xt.grad.numpy(), dx_want, rtol=1e-12, atol=1e-15)


def test_torch_compile_breaks_the_graph_and_runs_it_eagerly(m):
    torch._dynamo.reset()
    loss = torch.compile(loss_of(opc_torch.op(m.compress)))
    for x, c in list(cases())[:3]:
        xt = torch.from_numpy(x).requires_grad_()
        loss(xt, torch.from_numpy(c)).backward()
        np.testing.assert_allclose(xt.grad.numpy(), numpy_compress(x, c)[2], rtol=1e-12, atol=1e-15)


def test_torch_compile_captures_the_data_size_as_an_unbacked_symint(m):
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        loss = torch.compile(loss_of(opc_torch.op(m.compress)), fullgraph=True)
        for x, c in list(cases())[:3]:
            xt = torch.from_numpy(x).requires_grad_()
            value = loss(xt, torch.from_numpy(c))
            value.backward()
            t, _, dx = numpy_compress(x, c)
            np.testing.assert_allclose(value.item(), (t ** 2).sum(), rtol=1e-12)
            np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-12, atol=1e-15)
    torch._dynamo.reset()


def test_a_tracer_without_data_sizes_says_the_size_depends_on_the_data(m):
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

    fn = opc_torch.op(m.compress)
    x, c = torch.zeros(4, 3, dtype=torch.float64), torch.ones(4, dtype=torch.bool)
    with pytest.raises(DynamicOutputShapeException) as err, FakeTensorMode() as mode:
        fn(mode.from_tensor(x), mode.from_tensor(c))
    notes = getattr(err.value, "__notes__", [])
    assert any("compress(): its results' sizes depend on the data" in n for n in notes), notes
