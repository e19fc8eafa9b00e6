"""ONNX Attention, RotaryEmbedding, SwiGLU, TensorScatter, LinearAttention and CausalConvWithState
(opc/onnx_import/attention.py): every case imported into one module; the forward
against onnxruntime (SwiGLU, which onnxruntime 1.32 does not run, against its NumPy formula);
the gradient of imported Attention models (f64) against torch autograd of
scaled_dot_product_attention and against central differences of opc's own forward."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx_helpers import call, function_name, graph_model, helper, import_all, run_ort

import opc

B, S, T, D = 2, 3, 5, 8


def rand(name: str, shape, dtype=np.float32, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(repr((name, shape)).encode()))
    return rng.uniform(low, high, shape).astype(dtype)


def attention_case(rank: int = 4, hq: int = 4, hkv: int = 4, mask: str | None = None, past: int = 0,
                   nonpad: list[int] | None = None, outputs: int = 1, opset: int = 23, dtype=np.float32,
                   **attrs):  # noqa: ANN001, ANN201
    """(model, feeds) of one Attention node; mask: None, 'bool' / 'float' [S, T], 'bool4' / 'float4'
    [B, 1, S, T], 'short' (a float [S, T - 1] mask, padded with -inf), 'row' (a bool mask with a fully
    masked row)."""
    key = repr((rank, hq, hkv, mask, past, nonpad, sorted(attrs.items())))
    if rank == 4:
        q, k, v = rand("q" + key, (B, hq, S, D), dtype), rand("k" + key, (B, hkv, T, D), dtype), \
            rand("v" + key, (B, hkv, T, D), dtype)
    else:
        q, k, v = rand("q" + key, (B, S, hq * D), dtype), rand("k" + key, (B, T, hkv * D), dtype), \
            rand("v" + key, (B, T, hkv * D), dtype)
        attrs = dict(q_num_heads=hq, kv_num_heads=hkv, **attrs)
    feeds = {"Q": q, "K": k, "V": v}
    names = ["Q", "K", "V", "", "", "", ""]
    total = T + past
    if mask is not None:
        shape = {"bool4": (B, 1, S, total), "float4": (B, 1, S, total), "short": (S, total - 1),
                 "long": (S, total + 2)}.get(mask, (S, total))
        if mask.startswith("bool") or mask == "row":
            m = rand("m" + key, shape) > -0.4
            if mask == "row":
                m[1] = False
        else:
            m = rand("m" + key, shape, dtype)
        feeds["attn_mask"], names[3] = m, "attn_mask"
    if past:
        feeds["past_key"] = rand("pk" + key, (B, hkv, past, D), dtype)
        feeds["past_value"] = rand("pv" + key, (B, hkv, past, D), dtype)
        names[4:6] = ["past_key", "past_value"]
    if nonpad is not None:
        feeds["nonpad_kv_seqlen"], names[6] = np.array(nonpad, np.int64), "nonpad_kv_seqlen"
    while names[-1] == "":
        names.pop()
    outs = ["Y", "present_key", "present_value", "qk_matmul_output"][:outputs]
    if not past:  # ONNX's shape inference types present_* only with a past
        outs[1:3] = [""] * len(outs[1:3])
    node = helper.make_node("Attention", names, outs, name="the_Attention", **attrs)
    return graph_model([node], feeds, [o for o in outs if o], opset=opset), feeds


ATTENTION = {
    "4d": dict(),
    "4d-scale": dict(scale=0.3),
    "4d-softcap": dict(softcap=2.0),
    "4d-causal": dict(is_causal=1),
    "4d-gqa-causal": dict(hq=4, hkv=2, is_causal=1),
    "4d-mqa": dict(hq=4, hkv=1),
    "4d-bool-mask": dict(mask="bool"),
    "4d-float-mask": dict(mask="float"),
    "4d-bool-mask-4d": dict(mask="bool4"),
    "4d-float-mask-4d-causal": dict(mask="float4", is_causal=1),
    "4d-short-mask": dict(mask="short"),
    "4d-masked-row": dict(mask="row"),
    "4d-past-causal": dict(past=2, is_causal=1, outputs=3),
    "4d-gqa-past-mask": dict(hq=4, hkv=2, past=2, mask="float", outputs=3),
    "4d-qk-raw": dict(softcap=3.0, outputs=4, qk_matmul_output_mode=0),
    "4d-qk-softmax": dict(mask="bool", outputs=4, qk_matmul_output_mode=3),
    "3d": dict(rank=3),
    "3d-gqa-causal-scale": dict(rank=3, hq=4, hkv=2, is_causal=1, scale=0.5),
    "3d-past-mask": dict(rank=3, past=2, mask="bool", outputs=3),
    "4d-nonpad": dict(nonpad=[5, 3], opset=24),
    "4d-nonpad-causal": dict(nonpad=[5, 4], is_causal=1, opset=24),
    "4d-window": dict(opset=25, is_causal=1, left_window_size=1),
    "4d-f64-causal": dict(dtype=np.float64, is_causal=1, mask="float"),
}


def rotary_case(rank: int = 4, interleaved: int = 0, rot: int = 0, ids: bool = True):  # noqa: ANN201
    key = repr((rank, interleaved, rot, ids))
    heads = 2
    x = rand("x" + key, (B, heads, S, D) if rank == 4 else (B, S, heads * D))
    half = (rot or D) // 2
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rot, **({"num_heads": heads} if rank == 3 else {}))
    feeds = {"X": x}
    if ids:
        feeds |= {"cos": rand("c" + key, (7, half)), "sin": rand("s" + key, (7, half)),
                  "position_ids": np.array([[0, 3, 6], [2, 2, 1]], np.int64)}
    else:
        feeds |= {"cos": rand("c" + key, (B, S, half)), "sin": rand("s" + key, (B, S, half))}
    node = helper.make_node("RotaryEmbedding", list(feeds), ["Y"], name="the_RotaryEmbedding", **attrs)
    return graph_model([node], feeds, ["Y"], opset=23), feeds


def scatter_case(mode: str, axis: int, indices: list[int] | None):  # noqa: ANN201
    key = repr((mode, axis, indices))
    shape, update = [B, 3, 6, 4], [B, 3, 6, 4]
    update[axis] = 2
    feeds = {"past": rand("p" + key, shape), "update": rand("u" + key, update)}
    if indices is not None:
        feeds["write_indices"] = np.array(indices, np.int64)
    node = helper.make_node("TensorScatter", list(feeds), ["Y"], name="the_TensorScatter", mode=mode, axis=axis)
    return graph_model([node], feeds, ["Y"], opset=24), feeds


def linear_case(rule: str, hq: int = 2, hkv: int = 2, per_head: bool = True, past: bool = True):  # noqa: ANN201
    key = repr((rule, hq, hkv, per_head, past))
    t, dk, dv = 4, 4, 3
    feeds = {"query": rand("q" + key, (B, t, hq * dk)), "key": rand("k" + key, (B, t, hkv * dk)) / 2,
             "value": rand("v" + key, (B, t, hkv * dv))}
    names = ["query", "key", "value", "", "", ""]
    if past:
        feeds["past_state"], names[3] = rand("s" + key, (B, hkv, dk, dv)), "past_state"
    if rule in ("gated", "gated_delta"):
        feeds["decay"] = rand("g" + key, (B, t, hkv if per_head else hkv * dk), low=-1.0, high=0.0)
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        feeds["beta"], names[5] = rand("b" + key, (B, t, hkv), low=0.0, high=1.0), "beta"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["Y", "state"], name="the_LinearAttention",
                            q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    return graph_model([node], feeds, ["Y", "state"], opset=27), feeds


def conv_case(bias: bool, past: bool, activation: str, k: int = 4):  # noqa: ANN201
    """k = 1: the state is empty ([B, C, 0]), given or returned."""
    key = repr((bias, past, activation) + ((k,) if k != 4 else ()))
    c, length = 3, 5
    feeds = {"input": rand("x" + key, (B, c, length)), "weight": rand("w" + key, (c, 1, k))}
    names = ["input", "weight", "", ""]
    if bias:
        feeds["bias"], names[2] = rand("b" + key, (c,)), "bias"
    if past:
        feeds["past_state"], names[3] = rand("s" + key, (B, c, k - 1)), "past_state"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["Y", "state"], name="the_CausalConvWithState",
                            activation=activation)
    return graph_model([node], feeds, ["Y", "state"], opset=27), feeds


CASES = {
    **{f"attention-{cid}": (attention_case, spec) for cid, spec in ATTENTION.items()},
    **{f"rotary-{r}d-i{i}-rot{rot}-ids{int(ids)}": (rotary_case, dict(rank=r, interleaved=i, rot=rot, ids=ids))
       for r in (3, 4) for i in (0, 1) for rot in (0, 4) for ids in (True, False)},
    **{f"scatter-{m}-axis{a}-{w}": (scatter_case, dict(mode=m, axis=a, indices=w))
       for m, a, w in [("linear", 2, [0, 4]), ("linear", -2, None), ("circular", 2, [5, 3]),
                       ("circular", 1, [2, 0]), ("linear", 3, [1, 2])]},
    **{f"linear-{rule}": (linear_case, dict(rule=rule)) for rule in ("linear", "gated", "delta", "gated_delta")},
    "linear-gated-per-key-gqa": (linear_case, dict(rule="gated", hq=4, hkv=2, per_head=False)),
    "linear-gated_delta-mqa-nopast": (linear_case, dict(rule="gated_delta", hq=2, hkv=1, past=False)),
    **{f"conv-b{int(b)}-p{int(p)}-{a}": (conv_case, dict(bias=b, past=p, activation=a))
       for b, p, a in [(False, False, "none"), (True, True, "none"), (True, False, "silu"), (False, True, "swish")]},
    **{f"conv-k{k}-b{int(b)}-p{int(p)}": (conv_case, dict(bias=b, past=p, activation="none", k=k))
       for k, b, p in [(1, False, False), (1, True, False), (2, False, True), (2, True, False)]},
}


# an attn_mask shorter than the keys (padded with -inf): onnxruntime 1.32 wants it as long as past + new keys
REFERENCE_ONLY = {"attention-4d-short-mask"}


@pytest.fixture(scope="module")
def compiled():
    built = {cid: make(**spec) for cid, (make, spec) in CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module), params, built


@pytest.mark.parametrize("cid", list(CASES))
def test_forward_matches_onnxruntime(compiled, cid: str) -> None:
    m, params, built = compiled
    model, feeds = built[cid]
    got = call(m, cid, feeds, params[cid])
    if cid in REFERENCE_ONLY:  # onnxruntime refuses it
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(model).run(None, feeds)
    else:
        want = run_ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_an_empty_past_state_of_a_kernel_of_one() -> None:
    """k = 1 with a past_state [B, C, 0] given: a 0 in a graph input's declared shape is taken as a
    size once the caller gives it (shapes=)."""
    model, feeds = conv_case(bias=True, past=True, activation="silu", k=1)
    module, weights = opc.import_onnx(model, shapes={n: a.shape for n, a in feeds.items()})
    got = opc.compile(module).main_graph(*feeds.values(), *weights.values())
    for g, w in zip(got, run_ort(model, feeds), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def swiglu_model(alpha: float | None, dtype):  # noqa: ANN001, ANN201
    feeds = {"A": rand(f"a{alpha}", (3, 4, 5), dtype, -4, 4), "B": rand(f"b{alpha}", (3, 4, 5), dtype)}
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node("SwiGLU", ["A", "B"], ["Y"], name="the_SwiGLU", **attrs)
    return graph_model([node], feeds, ["Y"], opset=28), feeds


@pytest.mark.parametrize("alpha", [None, 1.702])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swiglu_matches_its_formula(alpha: float | None, dtype) -> None:  # noqa: ANN001
    model, feeds = swiglu_model(alpha, dtype)
    module, _ = opc.import_onnx(model)
    (y,) = [opc.compile(module).main_graph(feeds["A"], feeds["B"])]
    a, b = feeds["A"].astype(np.float64), feeds["B"].astype(np.float64)
    want = a / (1 + np.exp(-(alpha or 1.0) * a)) * b
    assert y.dtype == dtype
    np.testing.assert_allclose(y, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-7)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

GRAD_CASES = {
    "causal-gqa-float-mask": dict(hq=4, hkv=2, is_causal=1, mask="float4"),
    "3d-past-softcap-scale": dict(rank=3, past=2, softcap=2.0, scale=0.4, mask="bool", outputs=3),
    "masked-row-qk": dict(mask="row", outputs=4, qk_matmul_output_mode=2),
}
OTHER_GRAD_CASES = {  # (RotaryEmbedding takes no f64)
    "scatter-circular": (scatter_case, dict(mode="circular", axis=2, indices=[5, 3])),
}


def f64(model_and_feeds):  # noqa: ANN001, ANN201
    """The f32 case rebuilt in f64 (float inputs only)."""
    model, feeds = model_and_feeds
    feeds = {n: a.astype(np.float64) if a.dtype == np.float32 else a for n, a in feeds.items()}
    node = model.graph.node[0]
    return graph_model([node], feeds, [o for o in node.output if o], opset=model.opset_import[0].version), feeds


@pytest.fixture(scope="module")
def compiled_grad():
    built = {f"grad-{cid}": attention_case(dtype=np.float64, **spec) for cid, spec in GRAD_CASES.items()}
    built |= {f"grad-{cid}": f64(make(**spec)) for cid, (make, spec) in OTHER_GRAD_CASES.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module, grad=True), built


def differentiable(feeds: dict[str, np.ndarray]) -> list[str]:
    return [n for n, a in feeds.items() if a.dtype == np.float64]


@pytest.mark.parametrize("cid", [f"grad-{c}" for c in [*GRAD_CASES, *OTHER_GRAD_CASES]])
def test_gradient_matches_central_differences(compiled_grad, cid: str) -> None:
    """<grad, v> == (L(a + h v) - L(a - h v)) / 2h for L = sum of every output times a fixed random
    cotangent, v a random direction over every float input (a masked entry's -inf stays fixed)."""
    m, built = compiled_grad
    _, feeds = built[cid]
    args = list(feeds.values())
    outs = call(m, cid, feeds, {})
    rng = np.random.default_rng(11)
    # an output held at -inf (a masked score of qk_matmul_output) is not a function of the inputs: no cotangent
    douts = [np.where(np.isfinite(o), rng.uniform(-1, 1, o.shape), 0.0) for o in outs]
    grads = getattr(m, function_name(cid) + "_grad")(*args, *douts)
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    floats = differentiable(feeds)
    assert len(grads) == len(floats)

    def loss(values: list[np.ndarray]) -> float:
        ys = call(m, cid, dict(zip(feeds, values)), {})
        return float(sum(np.sum(np.where(d != 0, y, 0) * d) for y, d in zip(ys, douts)))

    for trial in range(2):
        v = [rng.uniform(-1, 1, a.shape) if a.dtype == np.float64 else np.zeros_like(a) for a in args]
        h = 1e-6
        shifted = [[a + sign * h * d if a.dtype == np.float64 else a for a, d in zip(args, v)] for sign in (1, -1)]
        fd = (loss(shifted[0]) - loss(shifted[1])) / (2 * h)
        analytic = float(sum(np.sum(g * d) for g, d in zip(grads, [d for a, d in zip(args, v)
                                                                   if a.dtype == np.float64])))
        assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (trial, fd, analytic)


def test_gradient_matches_torch_sdpa(compiled_grad) -> None:
    """dQ, dK, dV, d(mask) of the causal GQA case against torch autograd of scaled_dot_product_attention."""
    torch = pytest.importorskip("torch", reason="torch autograd is this test's oracle")
    m, built = compiled_grad
    cid = "grad-causal-gqa-float-mask"
    _, feeds = built[cid]
    (y,) = call(m, cid, feeds, {})
    dy = np.random.default_rng(3).uniform(-1, 1, y.shape)
    grads = getattr(m, function_name(cid) + "_grad")(*feeds.values(), dy)
    q, k, v, mask = (torch.tensor(a, requires_grad=True) for a in feeds.values())
    causal = torch.ones(S, T, dtype=torch.bool).tril()
    bias = mask.masked_fill(~causal, float("-inf"))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    out.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for g, t in zip(grads, (q, k, v, mask)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("spec, message", [
    (dict(mask="long"), "attn_mask of shape \\[3, 7\\] must have rank >= 1 and at most 5 keys"),
    (dict(hq=3, hkv=2), "3 query heads cannot share 2 key"),
    (dict(qk_matmul_output_mode=5, outputs=4), "qk_matmul_output_mode must be 0 to 3"),
])
def test_bad_attention_is_one_line_error(spec: dict, message: str) -> None:
    model, _ = attention_case(**spec)
    with pytest.raises(opc.OpcError, match=message) as err:
        opc.import_onnx(model)
    assert str(err.value).startswith("node 'the_Attention' (Attention): ")
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------
# FlexAttention (ai.onnx.preview): score_mod / prob_mod graphs converted in place
# ---------------------------------------------------------------------------


def flex_model(dtype, hq: int = 4, hkv: int = 2):  # noqa: ANN001, ANN201
    """score_mod: scores + rel (rel an input of the outer graph, read from inside) then causal by Where;
    prob_mod: probs * Q, a subgraph initializer named like the outer graph's input Q (its own scope)."""
    from onnx import TensorProto

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = ["B", "H", "L", "S"]
    causal = np.tril(np.ones((S, T), bool), 1)
    score_mod = helper.make_graph(
        [helper.make_node("Add", ["scores", "rel"], ["biased"]),
         helper.make_node("Where", ["keep", "biased", "neg_inf"], ["scores_out"])],
        "score_mod", [helper.make_tensor_value_info("scores", elem, dims)],
        [helper.make_tensor_value_info("scores_out", elem, dims)],
        [helper.make_tensor("keep", TensorProto.BOOL, causal.shape, causal.reshape(-1).tolist()),
         helper.make_tensor("neg_inf", elem, [], [float("-inf")])])
    prob_mod = helper.make_graph(
        [helper.make_node("Mul", ["probs", "Q"], ["probs_out"])], "prob_mod",
        [helper.make_tensor_value_info("probs", elem, dims)], [helper.make_tensor_value_info("probs_out", elem, dims)],
        [helper.make_tensor("Q", elem, [], [2.0])])
    feeds = {"Q": rand("fq", (B, hq, S, D), dtype), "K": rand("fk", (B, hkv, T, D), dtype),
             "V": rand("fv", (B, hkv, T, D), dtype), "rel": rand("fr", (S, T), dtype)}
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], name="the_FlexAttention",
                            domain="ai.onnx.preview", score_mod=score_mod, prob_mod=prob_mod, scale=0.25)
    ins = [helper.make_tensor_value_info(n, elem, a.shape) for n, a in feeds.items()]
    opsets = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    graph = helper.make_graph([node], "main_graph", ins, [helper.make_tensor_value_info("Y", elem, [B, hq, S, D])])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return model, feeds


def flex_numpy(q, k, v, rel):  # noqa: ANN001, ANN201
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.swapaxes(-1, -2) * 0.25 + rel
    s = np.where(np.tril(np.ones((S, T), bool), 1), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return 2.0 * p / p.sum(-1, keepdims=True) @ v


def test_flex_attention_matches_numpy_and_gradient_central_differences() -> None:
    model, feeds = flex_model(np.float64)
    module, _ = opc.import_onnx(model)
    m = opc.compile(module, grad=True)
    args = list(feeds.values())
    y = m.main_graph(*args)
    np.testing.assert_allclose(y, flex_numpy(*args), rtol=1e-12, atol=1e-13)
    rng = np.random.default_rng(5)
    dy = rng.uniform(-1, 1, y.shape)
    grads = m.main_graph_grad(*args, dy)
    direction = [rng.uniform(-1, 1, a.shape) for a in args]
    h = 1e-6
    fd = (np.sum(m.main_graph(*[a + h * d for a, d in zip(args, direction)]) * dy)
          - np.sum(m.main_graph(*[a - h * d for a, d in zip(args, direction)]) * dy)) / (2 * h)
    analytic = sum(np.sum(g * d) for g, d in zip(grads, direction))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd))


# ---------------------------------------------------------------------------
# LinearAttention's gradient (f32 only, so against torch autograd of the recurrence in f64)
# ---------------------------------------------------------------------------

LINEAR_GRAD = {"linear": dict(rule="linear"), "gated-gqa": dict(rule="gated", hq=4, hkv=2),
               "gated-per-key": dict(rule="gated", per_head=False), "gated_delta": dict(rule="gated_delta")}


def torch_linear_attention(torch, feeds: dict, rule: str, hq: int, hkv: int):  # noqa: ANN001, ANN201
    """onnx's reference recurrence (op_linear_attention.py) in torch."""
    def heads(x, h):  # noqa: ANN001, ANN202
        b, t, hd = x.shape
        return x.reshape(b, t, h, hd // h).permute(0, 2, 1, 3)

    q, k, v = heads(feeds["query"], hq), heads(feeds["key"], hkv), heads(feeds["value"], hkv)
    state = feeds["past_state"]
    decay = heads(feeds["decay"], hkv) if "decay" in feeds else None  # [B, H, T, 1 or dk]
    beta = heads(feeds["beta"], feeds["beta"].shape[-1]) if "beta" in feeds else None  # [B, H or 1, T, 1]
    outs = []
    for i in range(q.shape[2]):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if decay is not None:
            state = state * torch.exp(decay[:, :, i])[..., None]
        if beta is not None:
            v_t = beta[:, :, i] * (v_t - torch.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        outs.append(torch.einsum("bhd,bhdm->bhm", q[:, :, i], state.repeat_interleave(hq // hkv, 1)))
    out = torch.stack(outs, 2) / np.sqrt(q.shape[-1])
    return out.permute(0, 2, 1, 3).reshape(q.shape[0], q.shape[2], -1), state


@pytest.fixture(scope="module")
def compiled_linear_grad():
    built = {f"lgrad-{cid}": linear_case(**spec) for cid, spec in LINEAR_GRAD.items()}
    module, params = import_all({cid: m for cid, (m, _) in built.items()})
    return opc.compile(module, grad=True), built


@pytest.mark.parametrize("cid", list(LINEAR_GRAD))
def test_linear_attention_gradient_matches_torch(compiled_linear_grad, cid: str) -> None:
    torch = pytest.importorskip("torch", reason="torch autograd is this test's oracle")
    m, built = compiled_linear_grad
    _, feeds = built[f"lgrad-{cid}"]
    spec = LINEAR_GRAD[cid]
    outs = call(m, f"lgrad-{cid}", feeds, {})
    rng = np.random.default_rng(13)
    douts = [rng.uniform(-1, 1, o.shape).astype(np.float32) for o in outs]
    grads = getattr(m, function_name(f"lgrad-{cid}") + "_grad")(*feeds.values(), *douts)
    ts = {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in feeds.items()}
    want = torch_linear_attention(torch, ts, spec["rule"], spec.get("hq", 2), spec.get("hkv", 2))
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-4, atol=1e-5)
    sum((w * torch.tensor(d, dtype=torch.float64)).sum() for w, d in zip(want, douts)).backward()
    assert len(grads) == len(ts)
    for g, t in zip(grads, ts.values()):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=1e-5)
