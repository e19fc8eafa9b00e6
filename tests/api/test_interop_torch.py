"""opc.torch: compiled functions as torch.library custom ops with opc's own gradient, checked by
torch.library.opcheck, gradcheck / gradgradcheck in float64, against torch's autograd of the same
formula, inside torch.compile(fullgraph=True) and torch.func.grad; opc.torch.Module trains an
imported ONNX model with a torch optimizer, step for step like the same model written in torch."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch not installed", allow_module_level=True)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from interop_source import RUN_TIME, SOURCE  # noqa: E402

import opc  # noqa: E402


def reference_f(x, w):
    return torch.tanh(x @ w), x.exp().sum(1)


def reference_g(x, i):
    return torch.sigmoid(x[i]), x.detach().to(torch.int32)


REFERENCES = {"f": reference_f, "g": reference_g}
GEN = torch.Generator().manual_seed(21)


def inputs(name: str) -> tuple[torch.Tensor, ...]:
    if name == "f":
        return (torch.randn(3, 4, dtype=torch.float64, generator=GEN, requires_grad=True),
                torch.randn(4, 2, dtype=torch.float64, generator=GEN, requires_grad=True))
    return (torch.randn(4, 3, generator=GEN, requires_grad=True), torch.tensor([3, -1, 0, 3, 1]))


@pytest.fixture(scope="module")
def m():
    return opc.compile(SOURCE, grad=2)


@pytest.mark.parametrize("name", ["f", "g"])
@pytest.mark.parametrize("wrapper", ["op", "function"])
def test_values_and_gradients_match_torch(m, name, wrapper):
    fn = getattr(opc.torch, wrapper)(m[name])
    args = inputs(name)
    ref_args = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
    outs, want = fn(*args), REFERENCES[name](*ref_args)
    tol = {"rtol": 1e-12} if name == "f" else {"rtol": 1e-6}
    for o, r in zip(outs, want):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o, r, **tol, atol=0)
    weights = [torch.randn(o.shape, dtype=torch.float64, generator=GEN) for o in want]
    sum(((o * w).sum() for o, w in zip(outs, weights) if o.is_floating_point()), torch.zeros(())).backward()
    sum(((r * w).sum() for r, w in zip(want, weights) if r.is_floating_point()), torch.zeros(())).backward()
    for a, r in zip(args, ref_args):
        if r.requires_grad:
            torch.testing.assert_close(a.grad, r.grad, **tol, atol=1e-12)


def test_inputs_are_read_in_place_and_results_are_opc_buffers(m):
    """A contiguous CPU tensor crosses as its own data pointer; the results are opc's buffers."""
    seen, outs = [], []
    fn = m.f
    cfunc, empty = fn.cfunc, fn.empty
    fn.cfunc = lambda *ptrs: seen.extend(int(fn.ffi.cast("intptr_t", p)) for p in ptrs) or cfunc(*ptrs)
    fn.empty = lambda shape, dtype: outs.append(empty(shape, dtype)) or outs[-1]
    try:
        x, w = (a.detach() for a in inputs("f"))
        t, s = opc.torch.op(m.f)(x, w)
    finally:
        fn.cfunc, fn.empty = cfunc, empty
    assert seen == [x.data_ptr(), w.data_ptr(), t.data_ptr(), s.data_ptr()]
    assert [o.ctypes.data for o in outs] == [t.data_ptr(), s.data_ptr()]


def test_gradcheck_and_gradgradcheck_float64(m):
    f = opc.torch.op(m.f)
    assert torch.autograd.gradcheck(f, inputs("f"))
    assert torch.autograd.gradgradcheck(f, inputs("f"))


@pytest.mark.parametrize("name", ["f", "g"])
def test_opcheck(m, name):
    """Schema, fake (meta) kernel against the real one, autograd registration, AOT dispatch."""
    torch.library.opcheck(opc.torch.op(m[name]), inputs(name))


def test_inside_torch_compile_without_graph_break(m):
    """fullgraph=True fails on any graph break; AOTAutograd traces the forward and the backward
    through the fake kernels of f and f_grad. (aot_eager: the same tracing as inductor without its
    C++ build, which costs 15 s here; inductor was checked by hand.)"""
    f = opc.torch.op(m.f)
    torch._dynamo.reset()

    def loss(x, w):
        t, s = f(x * 2, w)
        return (t ** 2).sum() + s.mean()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    x, w = inputs("f")
    rx, rw = (a.detach().clone().requires_grad_() for a in (x, w))
    got = compiled(x, w)
    got.backward()
    t, s = reference_f(rx * 2, rw)
    want = (t ** 2).sum() + s.mean()
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    torch.testing.assert_close((x.grad, w.grad), (rx.grad, rw.grad), rtol=1e-12, atol=1e-12)


def test_torch_func_grad_and_its_grad(m):
    """torch.func transforms take opc.torch.function (an autograd.Function with setup_context);
    grad of grad runs through f_grad_grad."""
    f = opc.torch.function(m.f)
    x, w = (a.detach() for a in inputs("f"))

    def loss(fn):
        return lambda x: (fn(x, w)[0] ** 2).sum() + fn(x, w)[1].sum()

    torch.testing.assert_close(torch.func.grad(loss(f))(x), torch.func.grad(loss(reference_f))(x), rtol=1e-12,
                               atol=1e-12)
    twice = [torch.func.grad(lambda x, fn=fn: torch.func.grad(loss(fn))(x).sum())(x) for fn in (f, reference_f)]
    torch.testing.assert_close(twice[0], twice[1], rtol=1e-10, atol=1e-10)


def test_the_custom_op_of_torch_func_is_refused_with_the_reason(m):
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: opc.torch.op(m.f)(x, inputs("f")[1].detach())[0].sum())(inputs("f")[0].detach())


def test_backward_without_a_gradient_function_says_how_to_get_one():
    plain = opc.compile(SOURCE)
    x, w = inputs("f")
    t, _ = opc.torch.op(plain.f)(x, w)
    with pytest.raises(RuntimeError, match=r"opc::f has no gradient: compile the module with grad=True"):
        t.sum().backward()


def test_trace_time_shape_error_names_the_argument(m):
    """The fake kernel checks shapes as a call would (dynamo wraps the ValueError in its own error)."""
    with pytest.raises((ValueError, torch._dynamo.exc.TorchRuntimeError), match=r"f\(\): argument 'w' must have shape \(4, 2\), got \(4, 3\)"):
        torch.compile(opc.torch.op(m.f), fullgraph=True, backend="aot_eager")(
            torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 3, dtype=torch.float64))


# ---------------------------------------------------------------------------
# opc.torch.Module: an imported ONNX model trained with a torch optimizer
# ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def torch_mlp(x, labels, w):
    """The zoo's MLP classifier written in torch (its ONNX weights: Linear [out, in])."""
    h = F.gelu(x @ w["fc1.weight"].T + w["fc1.bias"])
    logits = h @ w["fc2.weight"].T + w["fc2.bias"]
    return F.cross_entropy(logits, labels), logits


def test_module_trains_an_onnx_model_like_torch():
    if importlib.util.find_spec("onnx") is None:
        pytest.skip("onnx not installed (the model comes in as ONNX)")
    sys.path.insert(0, str(ROOT / "examples"))
    from zoo import common, mlp_classifier

    sizes = mlp_classifier.Sizes(batch=16, features=8, hidden=32, classes=4)
    model = mlp_classifier.build(sizes, np.float64, opset=17, seed=0)
    net = opc.torch.Module(opc.import_onnx(model))
    onnx_weights = common.weights(model)
    params = dict(net.named_parameters())
    assert list(params) == [k.replace(".", "_") for k in onnx_weights] == net.arguments[2:]
    ref = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in onnx_weights.items()}
    for (k, v), p in zip(onnx_weights.items(), params.values()):
        np.testing.assert_array_equal(p.detach().numpy(), v, err_msg=k)
    opts = [torch.optim.Adam(net.parameters(), lr=0.05), torch.optim.Adam(ref.values(), lr=0.05)]
    for step in range(4):
        feeds = mlp_classifier.inputs(sizes, np.float64, seed=step)
        x, labels = torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["labels"])
        for opt in opts:
            opt.zero_grad()
        loss, logits = net(x, labels)
        want, want_logits = torch_mlp(x, labels, ref)
        torch.testing.assert_close((loss, logits), (want, want_logits), rtol=1e-10, atol=1e-12)
        loss.backward()
        want.backward()
        for opt in opts:
            opt.step()
    for p, r in zip(params.values(), ref.values()):
        torch.testing.assert_close(p, r, rtol=1e-9, atol=1e-12)
    assert not np.array_equal(params["fc1_weight"].detach().numpy(), onnx_weights["fc1.weight"])  # it moved


def test_run_time_batch_in_eager_autograd_and_torch_compile_dynamic():
    """A `?` batch: any size eagerly with autograd, and under torch.compile(dynamic=True), whose fake
    kernel gives the result's size from the input's symbolic one."""
    f = opc.torch.op(opc.compile(RUN_TIME, grad=True).mlp)
    w = torch.randn(8, 4, requires_grad=True)
    compiled = torch.compile(lambda x, w: f(x, w) * 2, dynamic=True, fullgraph=True)
    for n in (1, 5, 9):
        x = torch.randn(n, 8, requires_grad=True)
        y = f(x, w)
        y.sum().backward()
        x_ref = x.detach().clone().requires_grad_()
        torch.tanh(x_ref @ w.detach()).sum().backward()
        torch.testing.assert_close(y, torch.tanh(x @ w), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled(x.detach(), w.detach()), 2 * torch.tanh(x.detach() @ w.detach()),
                                   rtol=1e-5, atol=1e-5)


def test_module_of_an_onnx_model_with_an_open_batch_trains_at_any_batch():
    """opc.import_onnx keeps the open batch `?`: opc.torch.Module runs and trains at batch 3, then 7."""
    pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
         helper.make_node("Tanh", ["z"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    net = opc.torch.Module(opc.import_onnx(model))
    tw = torch.tensor(w, requires_grad=True)
    for n in (3, 7):
        x = torch.from_numpy(rng.standard_normal((n, 4)).astype(np.float32))
        net.zero_grad()
        y = net(x)
        y.sum().backward()
        tw.grad = None
        ref = torch.tanh(x @ tw + torch.from_numpy(b))
        ref.sum().backward()
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(net.w.grad, tw.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrapper", ["op", "function"])
def test_one_result_is_a_tensor_not_a_tuple(wrapper):
    """A function of one result returns a tensor, as torch ops do (its schema says `-> Tensor`)."""
    fn = getattr(opc.torch, wrapper)(opc.compile(RUN_TIME).mlp)
    x, w = torch.randn(2, 8, generator=GEN), torch.randn(8, 4, generator=GEN)
    y = fn(x, w)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, torch.tanh(x @ w))  # RUN_TIME's mlp


def test_argument_names_torch_cannot_spell_become_argn():
    """MLIR names that are Python keywords or `self` are no schema names: they become arg0, arg1."""
    src = ("func.func @k(%in: tensor<3xf32>, %self: tensor<3xf32>) -> tensor<3xf32> {\n"
           "  %r = opc.sub %in, %self : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
           "  func.return %r : tensor<3xf32>\n}\n")
    fn = opc.torch.op(opc.compile(src).k)
    a, b = torch.randn(3, generator=GEN), torch.randn(3, generator=GEN)
    torch.testing.assert_close(fn(a, b), a - b)
    torch.library.opcheck(fn, (a, b))



@pytest.mark.parametrize("w_shape", [(4, 3), (4, 2, 1), (4,)])
def test_fake_kernel_checks_rank_and_shape(m, w_shape):
    """The fake kernel's check (what torch.compile and export run at trace time) refuses a rank too
    high or too low, not only a wrong size: meta tensors, as tracing sees them."""
    from opc.interop.torch import check_meta

    x, w = torch.empty(3, 4, dtype=torch.float64, device="meta"), torch.empty(w_shape, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match=re.escape(f"f(): argument 'w' must have shape (4, 2), got {w_shape}")):
        check_meta(m.f, [x, w])


def test_the_schema_keeps_the_names_torch_can_spell():
    """Arguments named as Python can spell them keep their MLIR names in the schema: the op takes
    them as keywords, in any order."""
    src = ("func.func @kw(%x: tensor<3xf32>, %weight: tensor<3xf32>) -> tensor<3xf32> {\n"
           "  %r = opc.sub %x, %weight : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
           "  func.return %r : tensor<3xf32>\n}\n")
    fn = opc.torch.op(opc.compile(src).kw)
    a, b = torch.randn(3, generator=GEN), torch.randn(3, generator=GEN)
    torch.testing.assert_close(fn(weight=b, x=a), a - b)
    torch.testing.assert_close(fn(a, weight=b), a - b)


def test_two_modules_with_one_function_name_are_two_ops():
    """Each op is named after its function and its library's hash: two modules that both define
    @same each keep their own kernel."""
    body = "func.func @same(%x: tensor<4xf64>) -> tensor<4xf64> {{\n  %r = opc.{op} %x, %x : " \
           "(tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>\n  func.return %r : tensor<4xf64>\n}}\n"
    add, mul = (opc.torch.op(opc.compile(body.format(op=op)).same) for op in ("add", "mul"))
    a = torch.randn(4, dtype=torch.float64, generator=GEN)
    torch.testing.assert_close(add(a), a + a, rtol=0, atol=0)
    torch.testing.assert_close(mul(a), a * a, rtol=0, atol=0)
    torch.testing.assert_close(add(a), a + a, rtol=0, atol=0)


@pytest.mark.parametrize("wrapper", ["op", "function"])
@pytest.mark.parametrize("used", ["both", "float"])
def test_an_integer_result_of_a_one_input_function_gets_zeros_in_the_backward(wrapper, used):
    """A function of one input with a float and an integer result: the integer one has no
    cotangent in torch (None, or zeros of another dtype), and opc's grad function takes one at
    its dtype and shape: zeros, made alike the (only) input. d/dx sum(sin x) = cos x."""
    src = ("func.func @two(%x: tensor<5xf64>) -> (tensor<5xf64>, tensor<5xi32>) {\n"
           "  %s = opc.sin %x : (tensor<5xf64>) -> tensor<5xf64>\n"
           "  %c = opc.cast %x {dtype = i32} : (tensor<5xf64>) -> tensor<5xi32>\n"
           "  func.return %s, %c : tensor<5xf64>, tensor<5xi32>\n}\n")
    fn = getattr(opc.torch, wrapper)(opc.compile(src, grad=True).two)
    x = torch.randn(5, dtype=torch.float64, generator=GEN) * 3
    x.requires_grad_(True)
    s, c = fn(x)
    torch.testing.assert_close(c, x.detach().to(torch.int32))
    loss = s.sum() + (c.sum() if used == "both" else 0)
    loss.backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.cos(x.detach()), rtol=1e-12, atol=0)


@pytest.mark.parametrize("extra", [-1, 1])
def test_module_forward_refuses_too_few_or_too_many_inputs(extra):
    """opc.torch.Module.forward takes the graph's inputs, no more and no fewer: a TypeError that
    says how many (an extra input would otherwise be dropped silently)."""
    src = ("func.func @lin(%x: tensor<2x3xf64>, %w: tensor<3x4xf64>) -> tensor<2x4xf64> {\n"
           "  %y = opc.matmul %x, %w : (tensor<2x3xf64>, tensor<3x4xf64>) -> tensor<2x4xf64>\n"
           "  func.return %y : tensor<2x4xf64>\n}\n")
    w = np.random.default_rng(3).standard_normal((3, 4))
    net = opc.torch.Module((src, {"w": w}))
    x = torch.randn(2, 3, dtype=torch.float64, generator=GEN)
    torch.testing.assert_close(net(x), x @ torch.from_numpy(w), rtol=1e-12, atol=0)
    with pytest.raises(TypeError, match=re.escape(f"forward() takes 1 input(s) (x), got {1 + extra}")):
        net(*[x] * (1 + extra))


@pytest.mark.parametrize("arrays", ["torch", "jax"])
def test_a_module_returning_torch_or_jax_arrays_gives_torch_tensors(arrays):
    """opc.torch.op over a module compiled with arrays='torch' or 'jax': the op's results are torch
    tensors (a JAX array read through DLPack), with the kernel's numbers."""
    pytest.importorskip(arrays, reason=f"arrays={arrays!r} needs {arrays}")
    src = ("func.func @sq(%x: tensor<4xf64>) -> tensor<4xf64> {\n"
           "  %r = opc.mul %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>\n"
           "  func.return %r : tensor<4xf64>\n}\n")
    fn = opc.torch.op(opc.compile(src, arrays=arrays).sq)
    x = torch.randn(4, dtype=torch.float64, generator=GEN)
    y = fn(x)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, x * x, rtol=0, atol=0)


def test_a_function_without_results_is_refused_in_one_line():
    """A function that returns nothing is no torch op (torch registers no autograd for it)."""
    m = opc.compile("func.func @z(%x: tensor<3xf64>) {\n  func.return\n}\n")
    with pytest.raises(TypeError, match=re.escape("opc.torch.op: z() returns nothing; a torch op needs a result")):
        opc.torch.op(m.z)
