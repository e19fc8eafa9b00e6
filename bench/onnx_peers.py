"""The peers' side of the model rows: an ONNX graph of the CNN op set (ResNet's, MobileNetV2's) run
node by node in torch eager, or traced as one JAX function, on the graph's own initializers.

    run = onnx_torch(torch, model)             # forward, no autograd
    step = onnx_torch_train(torch, model)      # forward + backward of sum(y * dy): a training step
    run = onnx_jax(jax, model)                 # jitted forward

A node outside the op set is a KeyError naming it: these are benchmark peers, not an importer."""

from __future__ import annotations

from typing import Any

from onnx import helper, numpy_helper


def attrs(node) -> dict[str, Any]:  # noqa: ANN001
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constants(model) -> dict[str, Any]:  # noqa: ANN001
    """The graph's initializers and Constant nodes' values, as NumPy arrays."""
    out = {t.name: numpy_helper.to_array(t).copy() for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            out[node.output[0]] = numpy_helper.to_array(attrs(node)["value"]).copy()
    return out


def clip_bounds(a: dict[str, Any], lo, hi) -> tuple[float | None, float | None]:  # noqa: ANN001
    """Clip's bounds: inputs from opset 11 (scalars here), attributes before."""
    lo = a.get("min") if lo is None else float(lo)
    hi = a.get("max") if hi is None else float(hi)
    return lo, hi


def torch_ops(torch) -> dict[str, Any]:  # noqa: ANN001
    F = torch.nn.functional

    def conv(a, x, w, b=None):
        p = a.get("pads", [0, 0, 0, 0])
        if p[:2] != p[2:]:
            raise ValueError("asymmetric pads")
        return F.conv2d(x, w, b, a.get("strides", [1, 1]), p[:2], a.get("dilations", [1, 1]), a.get("group", 1))

    def max_pool(a, x):
        p = a.get("pads", [0, 0, 0, 0])
        return F.max_pool2d(x, a["kernel_shape"], a.get("strides", [1, 1]), p[:2],
                            ceil_mode=bool(a.get("ceil_mode", 0)))

    def avg_pool(a, x):
        p = a.get("pads", [0, 0, 0, 0])
        return F.avg_pool2d(x, a["kernel_shape"], a.get("strides", [1, 1]), p[:2],
                            ceil_mode=bool(a.get("ceil_mode", 0)),
                            count_include_pad=bool(a.get("count_include_pad", 0)))

    def gemm(a, x, w, b):
        return a.get("alpha", 1.0) * (x @ (w.T if a.get("transB", 0) else w)) + a.get("beta", 1.0) * b

    def batch_norm(a, x, scale, bias, mean, var):
        # training_mode: the batch's statistics (the running ones updated in copies: outputs 1-2 unused)
        training = bool(a.get("training_mode", 0))
        if training:
            mean, var = mean.detach().clone(), var.detach().clone()
        return F.batch_norm(x, mean, var, scale, bias, training=training, momentum=1 - a.get("momentum", 0.9),
                            eps=a.get("epsilon", 1e-5))

    def clip(a, x, lo=None, hi=None):
        return torch.clamp(x, *clip_bounds(a, lo, hi))

    return {"Conv": conv, "Relu": lambda a, x: F.relu(x), "Add": lambda a, x, y: x + y, "MaxPool": max_pool,
            "BatchNormalization": batch_norm, "GlobalAveragePool": lambda a, x: x.mean(dim=(2, 3), keepdim=True),
            "Flatten": lambda a, x: torch.flatten(x, a.get("axis", 1)), "Gemm": gemm, "Identity": lambda a, x: x,
            "Clip": clip, "AveragePool": avg_pool}


def torch_graph(torch, model, init: dict[str, Any]):  # noqa: ANN001, ANN201
    """f(x) evaluating the graph's nodes in torch, reading weights from `init` (name -> tensor)."""
    ops = torch_ops(torch)
    nodes = [(n.op_type, attrs(n), list(n.input), n.output[0]) for n in model.graph.node if n.op_type != "Constant"]
    first, last = model.graph.input[0].name, model.graph.output[0].name

    def run(x):
        env = dict(init, **{first: x})
        for op, a, ins, out in nodes:
            env[out] = ops[op](a, *(env[i] if i else None for i in ins))
        return env[last]

    return run


def onnx_torch(torch, model):  # noqa: ANN001, ANN201
    """A torch eager function running the ONNX graph's nodes one by one, without autograd."""
    values = constants(model)
    graph = torch_graph(torch, model, {k: torch.from_numpy(v) if v.ndim else v for k, v in values.items()})

    def run(x):
        with torch.no_grad():
            return graph(x)

    return run


def onnx_torch_train(torch, model):  # noqa: ANN001, ANN201
    """step(x, dy) -> (y, x.grad, [each weight's grad]): the forward and the gradients of
    sum(y * dy) w.r.t. the input and every float initializer in torch eager autograd, except batch
    norm's running mean and variance (torch refuses to differentiate them; opc's value_and_grad
    computes those too)."""
    values = constants(model)
    stats = {i for n in model.graph.node if n.op_type == "BatchNormalization" for i in n.input[3:5]}
    weights = {t.name for t in model.graph.initializer} - stats
    init = {k: (torch.from_numpy(v).requires_grad_(k in weights and v.dtype.kind == "f") if v.ndim else v)
            for k, v in values.items()}
    graph = torch_graph(torch, model, init)
    params = [init[t.name] for t in model.graph.initializer if init[t.name].requires_grad]

    def step(x, dy):
        x = x.detach().requires_grad_(True)
        for p in params:
            p.grad = None
        y = graph(x)
        y.backward(dy)
        return y, x.grad, [p.grad for p in params]

    return step


def onnx_jax(jax, model):  # noqa: ANN001, ANN201
    """The same graph for JAX, jitted as one function."""
    lax, jnp = jax.lax, jax.numpy
    init = {k: jnp.asarray(v) if v.ndim else v for k, v in constants(model).items()}

    def conv(a, x, w, b=None):
        p = a.get("pads", [0, 0, 0, 0])
        y = lax.conv_general_dilated(x, w, a.get("strides", [1, 1]), [(p[0], p[2]), (p[1], p[3])],
                                     rhs_dilation=a.get("dilations", [1, 1]), feature_group_count=a.get("group", 1),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y if b is None else y + b[None, :, None, None]

    def max_pool(a, x):
        p, k, s = a.get("pads", [0, 0, 0, 0]), a["kernel_shape"], a.get("strides", [1, 1])
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, *k), (1, 1, *s),
                                 [(0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])])

    def gemm(a, x, w, b):
        return a.get("alpha", 1.0) * (x @ (w.T if a.get("transB", 0) else w)) + a.get("beta", 1.0) * b

    def batch_norm(a, x, scale, bias, mean, var):
        k = scale / jnp.sqrt(var + a.get("epsilon", 1e-5))
        return x * k[None, :, None, None] + (bias - mean * k)[None, :, None, None]

    def clip(a, x, lo=None, hi=None):
        return jnp.clip(x, *clip_bounds(a, lo, hi))

    ops = {"Conv": conv, "Relu": lambda a, x: jnp.maximum(x, 0), "Add": lambda a, x, y: x + y, "MaxPool": max_pool,
           "BatchNormalization": batch_norm, "GlobalAveragePool": lambda a, x: x.mean(axis=(2, 3), keepdims=True),
           "Flatten": lambda a, x: x.reshape(x.shape[0], -1), "Gemm": gemm, "Identity": lambda a, x: x,
           "Clip": clip}
    nodes = [(n.op_type, attrs(n), list(n.input), n.output[0]) for n in model.graph.node if n.op_type != "Constant"]

    @jax.jit
    def run(x):
        env = dict(init, **{model.graph.input[0].name: x})
        for op, a, ins, out in nodes:
            env[out] = ops[op](a, *(env[i] if i else None for i in ins))
        return env[model.graph.output[0].name]

    return run
