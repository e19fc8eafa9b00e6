"""Converters of the ONNX attention family: Attention (opsets 23 to 25),
RotaryEmbedding, SwiGLU, TensorScatter, LinearAttention, CausalConvWithState and
ai.onnx.preview's FlexAttention.

Attention becomes opc primitives in the standard shape

    p = softmax(matmul(q, k, trans_y) * scale + bias);   y = matmul(p, v)

so that a fusion pass can recognise it: the scale is a multiply of the scores,
every mask (a bool attn_mask, is_causal, the sliding window, nonpad_kv_seqlen)
one additive float `bias` of 0 and -inf (a float attn_mask is added as it is),
the causal and window parts a compile-time constant. GQA repeats each K/V head
(broadcast_to + reshape, the reference's interleaved repeat). Where the spec
needs it, a query row whose bias is all -inf gives 0, not softmax's NaN: that
row's bias is made 0 and its output row set to 0 after the second matmul (the
gradient stays finite), by constant selects when the bias is known, else by
select(reduce_max(bias) == -inf, 0, .). The semantics follow onnx's reference
implementation (onnx/reference/ops/op_attention.py), which the node tests were
made with, and the spec where the two differ (qk_matmul_output_mode 0).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import Values, scalar
from opc.onnx_import.graph import ELEMENT_TYPES, Node, converter, numpy_dtype_of


def split_heads(node: Node, x: SSAValue, heads: int, what: str) -> SSAValue:
    """[B, S, H * D] -> [B, H, S, D]."""
    b, s, hidden = shape_of(x)
    if heads <= 0 or hidden % heads:
        raise node.fail(f"{what} hidden size {hidden} is not a multiple of its number of heads {heads}")
    return node.e.transpose(node.e.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def repeat_heads(node: Node, x: SSAValue, reps: int) -> SSAValue:
    """[B, H, T, D] -> [B, H * reps, T, D], each head repeated reps times in a row (h0, h0, h1, h1, ...)."""
    if reps == 1:
        return x
    b, h, t, d = shape_of(x)
    e = node.e
    wide = e.broadcast_to(e.reshape(x, [b, h, 1, t, d]), [b, h, reps, t, d])
    return e.reshape(wide, [b, h * reps, t, d])


def bool_and(node: Node, a: SSAValue | None, b: SSAValue) -> SSAValue:
    return b if a is None else node.e.select(a, b, node.e.constant(np.array(False)))


def additive(node: Node, allowed: SSAValue, like: SSAValue) -> SSAValue:
    """0 where allowed, -inf elsewhere, of like's element type."""
    return node.e.select(allowed, scalar(node, 0.0, like), scalar(node, -np.inf, like))


def static_allowed(causal: bool, left: int, right: int, offset: int, s: int, t: int) -> np.ndarray | None:
    """The reference's causal and sliding-window rules for a scalar offset (the past length): key j is
    allowed to query i iff j <= i + offset (causal) and -right <= i + offset - j <= left (window, -1:
    unbounded); None when every key is allowed."""
    diff = np.arange(s)[:, None] + offset - np.arange(t)[None, :]
    allowed = np.ones((s, t), bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return None if allowed.all() else allowed


def per_batch_allowed(node: Node, nonpad: SSAValue, causal: bool, left: int, right: int, s: int,
                      t: int) -> SSAValue:
    """The rules of static_allowed with a per-batch offset nonpad[b] - s (an external cache) and the
    padding rule j < nonpad[b], as compares of nonpad against constants: [B, 1, S, T] (or [B, 1, 1, T])."""
    e = node.e
    b = shape_of(nonpad)[0]
    n = e.reshape(nonpad, [b, 1, 1, 1])
    n_type = numpy_dtype_of(element_of(nonpad))
    j = np.arange(t)[None, :]
    i = np.arange(s)[:, None]

    def less(lhs: np.ndarray | SSAValue, rhs: np.ndarray | SSAValue) -> SSAValue:
        as_value = [e.constant(v.astype(n_type)[None, None]) if isinstance(v, np.ndarray) else v for v in (lhs, rhs)]
        return e.value(o.LessThanOp(*as_value))

    allowed = less(j, n)  # padding: j < nonpad
    if causal:  # j <= i + nonpad - s  <=>  j - i + s - 1 < nonpad
        allowed = bool_and(node, allowed, less(j - i + s - 1, n))
    if left >= 0:  # i + nonpad - s - j <= left  <=>  nonpad < left + j - i + s + 1
        allowed = bool_and(node, allowed, less(n, left + j - i + s + 1))
    if right >= 0:  # j - i - nonpad + s <= right  <=>  j - i + s - right - 1 < nonpad
        allowed = bool_and(node, allowed, less(j - i + s - right - 1, n))
    return allowed


def attention_mask(node: Node, t: int, like: SSAValue) -> tuple[SSAValue | None, SSAValue | None]:
    """attn_mask padded to t keys (False / -inf): (bool mask, float mask), one of them or neither."""
    if not node.has(3):
        return None, None
    e = node.e
    m = node.input(3)
    shape = shape_of(m)
    if not shape or shape[-1] > t:
        raise node.fail(f"attn_mask of shape {list(shape)} must have rank >= 1 and at most {t} keys")
    boolean = node.element(3) == ELEMENT_TYPES[9][1]
    if not boolean and element_of(m) != element_of(like):
        m = e.cast(m, element_of(like))
    if shape[-1] < t:
        pad = np.full((*shape[:-1], t - shape[-1]), False if boolean else -np.inf,
                      bool if boolean else numpy_dtype_of(element_of(m)))
        m = e.value(o.ConcatOp([m, e.constant(pad)], len(shape) - 1))
    return (m, None) if boolean else (None, m)


@converter("Attention", since=23)
def attention(node: Node) -> Values:
    """Y, present_key, present_value, qk_matmul_output (see the module's docstring)."""
    e = node.e
    q, k, v = node.input(0), node.input(1), node.input(2)
    rank = len(node.shape(0))
    if rank == 3:
        qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if qh is None or kvh is None:
            raise node.fail("3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        q, k, v = split_heads(node, q, qh, "Q"), split_heads(node, k, kvh, "K"), split_heads(node, v, kvh, "V")
    elif rank != 4:
        raise node.fail(f"Q must have rank 3 or 4, got shape {list(node.shape(0))}")
    past = 0
    if node.has(4) != node.has(5):
        raise node.fail("past_key and past_value must be given together")
    if node.has(4):
        past = node.shape(4)[2]
        k = e.value(o.ConcatOp([node.input(4), k], 2))
        v = e.value(o.ConcatOp([node.input(5), v], 2))
    present_k, present_v = k, v
    batch, hq, s, d = shape_of(q)
    hkv, t = shape_of(k)[1], shape_of(k)[2]
    if hq % hkv or shape_of(v)[1] != hkv:
        raise node.fail(f"{hq} query heads cannot share {hkv} key / {shape_of(v)[1]} value heads")
    k, v = repeat_heads(node, k, hq // hkv), repeat_heads(node, v, hq // hkv)

    scale = node.attr("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    raw = scores = e.mul(e.matmul(q, k, trans_y=True), scalar(node, scale, q))
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        scores = e.mul(e.value(o.TanhOp(e.div(scores, scalar(node, softcap, q)))), scalar(node, softcap, q))

    bias, known = attention_bias(node, batch, s, t, past, q)
    # a row with no allowed key (decided on the bias, as the reference does) softmaxes to 0, not to
    # softmax's NaN: its bias is made 0 (no NaN in the forward nor the gradient), its probabilities 0
    masked_rows = None
    softmax_bias = bias
    if known is not None and not known.any(-1).all():
        rows = ~known.any(-1, keepdims=True)
        masked_rows = e.constant(rows)
        softmax_bias = e.constant(np.where(known | rows, 0.0, -np.inf).astype(numpy_dtype_of(element_of(q))))
    elif known is None and bias is not None:
        row_max = e.value(o.ReduceMaxOp(bias, [-1], True))
        masked_rows = e.value(o.EqualOp(row_max, scalar(node, -np.inf, bias)))
        softmax_bias = e.select(masked_rows, scalar(node, 0.0, bias), bias)
    with_bias = scores if bias is None else e.add(scores, softmax_bias)
    p = softmax(node, with_bias, q)
    y = e.matmul(p, v)
    if masked_rows is not None:  # after the matmul, so that matmul(softmax(..), v) stays one pattern
        y = e.select(masked_rows, scalar(node, 0.0, y), y)
        p = e.select(masked_rows, scalar(node, 0.0, p), p)  # for qk_matmul_output_mode 3
        with_bias = e.add(scores, bias)  # for mode 2
    if rank == 3:
        y = e.reshape(e.transpose(y, [0, 2, 1, 3]), [batch, s, hq * shape_of(v)[3]])

    mode = int(node.attr("qk_matmul_output_mode", 0))
    # the spec's (and onnxruntime's) modes: 0 the scaled scores, 1 after softcap, 2 with the bias added,
    # 3 the softmax (onnx's reference gives mode 0 after softcap too; no node test has both)
    if mode not in (0, 1, 2, 3):
        raise node.fail(f"qk_matmul_output_mode must be 0 to 3, got {mode}")
    qk = {0: raw, 1: scores, 2: with_bias, 3: p}[mode]
    return [y, present_k, present_v, qk]


def attention_bias(node: Node, batch: int, s: int, t: int, past: int,
                   like: SSAValue) -> tuple[SSAValue | None, np.ndarray | None]:
    """(the additive bias or None, the allowed [S, T] keys when the bias is known at compile time, else None)."""
    e = node.e
    causal = bool(node.attr("is_causal", 0))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    if left < -1 or right < -1:
        raise node.fail(f"left_window_size and right_window_size must be -1 or >= 0, got {left} and {right}")
    mask, float_mask = attention_mask(node, t, like)
    nonpad = node.input(6) if node.has(6) else None
    if nonpad is not None and past:
        raise node.fail("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    if nonpad is not None:
        if shape_of(nonpad) != (batch,):
            raise node.fail(f"nonpad_kv_seqlen must have shape [{batch}], got {list(shape_of(nonpad))}")
        mask = bool_and(node, mask, per_batch_allowed(node, nonpad, causal, left, right, s, t))
        fixed = None
    else:
        fixed = static_allowed(causal, left, right, past, s, t)
        if mask is not None and fixed is not None:
            mask = bool_and(node, mask, e.constant(fixed))
    if mask is None and float_mask is None:
        if fixed is None:
            return None, np.ones((s, t), bool)
        return e.constant(np.where(fixed, 0.0, -np.inf).astype(numpy_dtype_of(element_of(like)))), \
            fixed
    bias = None if mask is None else additive(node, mask, like)
    if float_mask is not None:
        if fixed is not None and bias is None:
            bias = e.constant(np.where(fixed, 0.0, -np.inf).astype(numpy_dtype_of(element_of(like))))
        bias = float_mask if bias is None else e.add(float_mask, bias)
    return bias, None


def softmax(node: Node, x: SSAValue, like: SSAValue) -> SSAValue:
    """softmax over the keys, in softmax_precision's type when given (then back to like's)."""
    e = node.e
    precision = node.attr("softmax_precision")
    if precision is None or ELEMENT_TYPES.get(int(precision), (None, element_of(x)))[1] == element_of(x):
        return e.value(o.SoftmaxOp(x, len(shape_of(x)) - 1))
    if int(precision) not in ELEMENT_TYPES:
        raise node.fail(f"softmax_precision {precision} is not a type opc has")
    wide = e.cast(x, ELEMENT_TYPES[int(precision)][1])
    return e.cast(e.value(o.SoftmaxOp(wide, len(shape_of(x)) - 1)), element_of(like))


# ---------------------------------------------------------------------------
# RotaryEmbedding, SwiGLU, TensorScatter
# ---------------------------------------------------------------------------


def slice_last(node: Node, x: SSAValue, start: int, limit: int, stride: int = 1) -> SSAValue:
    shape = shape_of(x)
    r = len(shape)
    return node.e.value(o.SliceOp(x, [0] * (r - 1) + [start], [*shape[:-1], limit], [1] * (r - 1) + [stride]))


@converter("RotaryEmbedding", since=23)
def rotary_embedding(node: Node) -> Values:
    """The reference's rotation of the first rotary_embedding_dim features of each head, in the input's own
    layout: [B, H, S, D] (4-D) or [B, S, H * D] (3-D, num_heads given) seen as [B, S, H, D]."""
    e = node.e
    x = node.input(0)
    shape = node.shape(0)
    if len(shape) == 4:
        b, _, s, d = shape
        seq_axis = 2
    elif len(shape) == 3:
        heads = int(node.attr("num_heads", 0))
        if heads <= 0 or shape[2] % heads:
            raise node.fail(f"3-D input needs num_heads dividing its hidden size {shape[2]}, got {heads}")
        b, s, d = shape[0], shape[1], shape[2] // heads
        x = e.reshape(x, [b, s, heads, d])
        seq_axis = 1
    else:
        raise node.fail(f"input must have rank 3 or 4, got shape {list(shape)}")
    rot = int(node.attr("rotary_embedding_dim", 0)) or d
    if rot > d or rot % 2:
        raise node.fail(f"rotary_embedding_dim {rot} must be even and at most the head size {d}")
    cos, sin = node.input(1), node.input(2)
    if node.has(3):
        ids = node.input(3)
        cos, sin = e.value(o.GatherOp(cos, ids, 0)), e.value(o.GatherOp(sin, ids, 0))
    for c in (cos, sin):
        if shape_of(c) != (b, s, rot // 2):
            raise node.fail(f"cos/sin caches (after position_ids) must be [{b}, {s}, {rot // 2}], "
                            f"got {list(shape_of(c))}")
    # [B, S, rot/2] -> broadcast over the heads: [B, 1, S, rot/2] (4-D) or [B, S, 1, rot/2] (3-D)
    cos = e.reshape(cos, [b, 1, s, rot // 2] if seq_axis == 2 else [b, s, 1, rot // 2])
    sin = e.reshape(sin, shape_of(cos))
    rotated = slice_last(node, x, 0, rot)
    interleaved = bool(node.attr("interleaved", 0))
    if interleaved:
        x1, x2 = slice_last(node, rotated, 0, rot, 2), slice_last(node, rotated, 1, rot, 2)
    else:
        x1, x2 = slice_last(node, rotated, 0, rot // 2), slice_last(node, rotated, rot // 2, rot)
    real = e.sub(e.mul(cos, x1), e.mul(sin, x2))
    imag = e.add(e.mul(sin, x1), e.mul(cos, x2))
    if interleaved:
        pair = [*shape_of(real), 1]
        out = e.reshape(e.value(o.ConcatOp([e.reshape(real, pair), e.reshape(imag, pair)], 4)), shape_of(rotated))
    else:
        out = e.value(o.ConcatOp([real, imag], 3))
    if rot < d:
        out = e.value(o.ConcatOp([out, slice_last(node, x, rot, d)], 3))
    return [e.reshape(out, shape)]


@converter("SwiGLU", since=28)
def swiglu(node: Node) -> Values:
    """a * sigmoid(alpha * a) * b (A and B of one shape)."""
    e = node.e
    a, b = node.input(0), node.input(1)
    if node.shape(0) != node.shape(1):
        raise node.fail(f"A and B must have one shape, got {list(node.shape(0))} and {list(node.shape(1))}")
    alpha = float(node.attr("alpha", 1.0))
    gate_in = a if alpha == 1.0 else e.mul(a, scalar(node, alpha, a))
    return [e.mul(e.mul(a, e.value(o.SigmoidOp(gate_in))), b)]


@converter("TensorScatter", since=24)
def tensor_scatter(node: Node) -> Values:
    """present[b, ..., c, ...] = update[b, ..., c - w[b], ...] where 0 <= c - w[b] < S (taken mod the cache
    length in circular mode), past_cache elsewhere: one gather of update's rows by an index computed from
    write_indices at run time, then a select."""
    e = node.e
    past, update = node.input(0), node.input(1)
    shape, ushape = node.shape(0), node.shape(1)
    rank = len(shape)
    axis = node.axis(int(node.attr("axis", -2)), rank)
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise node.fail(f"mode must be 'linear' or 'circular', got '{mode}'")
    if axis == 0 or len(ushape) != rank or any(u != p for i, (u, p) in enumerate(zip(ushape, shape)) if i != axis) \
            or ushape[axis] > shape[axis]:
        raise node.fail(f"update {list(ushape)} does not fit past_cache {list(shape)} along axis {axis} (not 0)")
    b, length, n = shape[0], shape[axis], ushape[axis]
    mid, rest = math.prod(shape[1:axis]), math.prod(shape[axis + 1:])
    # c - w[b], [B, L] (int64)
    c = e.constant(np.arange(length, dtype=np.int64)[None, :])
    if node.has(2):
        w = node.input(2)
        if element_of(w) != ELEMENT_TYPES[7][1]:
            w = e.cast(w, ELEMENT_TYPES[7][1])
        rel = e.sub(c, e.reshape(w, [b, 1]))
    else:
        rel = e.broadcast_to(c, [b, length])
    zero = e.constant(np.array(0, np.int64))
    if mode == "circular":  # w in [0, L): c - w in (-L, L)
        negative = e.value(o.LessThanOp(rel, zero))
        rel = e.select(negative, e.add(rel, e.constant(np.array(length, np.int64))), rel)
    written = e.select(e.value(o.LessThanOp(rel, zero)), e.constant(np.array(False)),
                       e.value(o.LessThanOp(rel, e.constant(np.array(n, np.int64)))))
    safe = e.select(written, rel, zero)
    # row (b * mid + m) * n + safe[b, c] of update seen as [B * mid * n, rest]
    base = (np.arange(b)[:, None, None] * mid + np.arange(mid)[None, :, None]) * n
    rows = e.add(e.reshape(safe, [b, 1, length]), e.constant(base.astype(np.int64)))
    taken = e.value(o.GatherOp(e.reshape(update, [b * mid * n, rest]), rows, 0))
    present = e.select(e.reshape(written, [b, 1, length, 1]), taken, e.reshape(past, [b, mid, length, rest]))
    return [e.reshape(present, shape)]


# ---------------------------------------------------------------------------
# LinearAttention, CausalConvWithState (opset 27)
# ---------------------------------------------------------------------------

LINEAR_RULES = ("linear", "gated", "delta", "gated_delta")


def along_time(node: Node, x: SSAValue, i: int) -> SSAValue:
    """x[:, :, i:i+1, :] of a [B, H, T, D] value."""
    b, h, _, d = shape_of(x)
    return node.e.value(o.SliceOp(x, [0, 0, i, 0], [b, h, i + 1, d]))


@converter("LinearAttention", since=27)
def linear_attention(node: Node) -> Values:
    """The reference's recurrence, in float32 as the reference computes it: state = state * exp(decay_t)
    (gated); v_t = beta_t * (v_t - k_t @ state) (delta); state += k_t^T v_t; out_t = scale * q_t @ state
    (the q heads of a group read their kv head's state). The linear rule and the gated one with a decay
    per head in closed form (linear_at_once), the others unrolled over the T steps (T is static)."""
    e = node.e
    rule = node.attr("update_rule", "gated_delta")
    if rule not in LINEAR_RULES:
        raise node.fail(f"update_rule must be one of {', '.join(LINEAR_RULES)}, got '{rule}'")
    qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
    if qh is None or kvh is None or qh <= 0 or kvh <= 0 or qh % kvh:
        raise node.fail(f"q_num_heads ({qh}) must be a positive multiple of kv_num_heads ({kvh})")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for i, name, needed in ((4, "decay", gating), (5, "beta", delta)):
        if node.has(i) != needed:
            raise node.fail(f"update_rule '{rule}' {'needs' if needed else 'takes no'} input {name}")
    if any(len(node.shape(i)) != 3 for i in range(3)):
        raise node.fail("query, key and value must have rank 3 (B, T, H * D)")
    f32 = ELEMENT_TYPES[1][1]

    def wide(i: int) -> SSAValue:
        x = node.input(i)
        return x if element_of(x) == f32 else e.cast(x, f32)

    q, k, v = (split_heads(node, wide(i), h, what) for i, h, what in ((0, qh, "query"), (1, kvh, "key"),
                                                                      (2, kvh, "value")))
    b, _, t, dk = shape_of(q)
    dv = shape_of(v)[3]
    group = qh // kvh
    if shape_of(k)[3] != dk:
        raise node.fail(f"key head size {shape_of(k)[3]} differs from the query's {dk}")
    decay = beta = None
    if gating:
        last = node.shape(4)[-1]
        if node.shape(4) != (b, t, last) or last not in (kvh, kvh * dk):
            raise node.fail(f"decay must be [{b}, {t}, {kvh}] or [{b}, {t}, {kvh * dk}], got {list(node.shape(4))}")
        decay = split_heads(node, wide(4), kvh, "decay")  # [B, Hkv, T, 1 or dk], log-space
    if delta:
        last = node.shape(5)[-1]
        if node.shape(5) != (b, t, last) or last not in (kvh, 1):
            raise node.fail(f"beta must be [{b}, {t}, {kvh}] or [{b}, {t}, 1], got {list(node.shape(5))}")
        beta = split_heads(node, wide(5), last, "beta")  # [B, Hkv or 1, T, 1]
    state_shape = [b, kvh, dk, dv]
    if node.has(3):
        if node.shape(3) != tuple(state_shape):
            raise node.fail(f"past_state must be {state_shape}, got {list(node.shape(3))}")
        state = wide(3)
    else:
        state = e.constant(np.zeros(state_shape, np.float32))
    scale = float(node.attr("scale", 0.0)) or 1.0 / math.sqrt(dk)
    if beta is None and (decay is None or shape_of(decay)[3] == 1):
        out, state = linear_at_once(node, q, k, v, state, decay, group)
    else:
        out, state = linear_unrolled(node, q, k, v, state, decay, beta, group)
    out = e.mul(out, scalar(node, scale, out))
    out = e.reshape(e.transpose(out, [0, 2, 1, 3]), [b, t, qh * dv])
    out_type = node.element(0)
    state_type = node.element(3) if node.has(3) else out_type
    return [out if out_type == f32 else e.cast(out, out_type),
            state if state_type == f32 else e.cast(state, state_type)]


def linear_unrolled(node: Node, q: SSAValue, k: SSAValue, v: SSAValue, state: SSAValue, decay: SSAValue | None,
                    beta: SSAValue | None, group: int) -> tuple[SSAValue, SSAValue]:
    """The delta rules and the per-key decay: one step after the other, (out [B, Hq, T, dv], state)."""
    e = node.e
    b, kvh, t, dk = shape_of(k)
    dv = shape_of(v)[3]
    if decay is not None:
        decay = e.value(o.ExpOp(decay))
    outs = []
    for i in range(t):
        k_t, v_t = along_time(node, k, i), along_time(node, v, i)  # [B, Hkv, 1, dk / dv]
        if decay is not None:  # [B, Hkv, 1, 1 or dk] -> [B, Hkv, 1 or dk, 1]: over d_v
            g = along_time(node, decay, i)
            state = e.mul(state, e.reshape(g, [b, kvh, shape_of(g)[3], 1]))
        if beta is not None:
            v_t = e.mul(along_time(node, beta, i), e.sub(v_t, e.matmul(k_t, state)))
        state = e.add(state, e.matmul(k_t, v_t, trans_x=True))
        q_t = e.reshape(along_time(node, q, i), [b, kvh, group, dk])
        outs.append(e.reshape(e.matmul(q_t, state), [b, kvh * group, 1, dv]))
    return (outs[0] if t == 1 else e.value(o.ConcatOp(outs, 2))), state


def linear_at_once(node: Node, q: SSAValue, k: SSAValue, v: SSAValue, state: SSAValue, decay: SSAValue | None,
                   group: int) -> tuple[SSAValue, SSAValue]:
    """The linear rule and the gated one with a decay per head, every step at once (a few matmuls, not T
    steps): with G_t = g_1 + ... + g_t (0 without decay), S_t = exp(G_t) S_0 + sum_{u <= t} exp(G_t - G_u)
    k_u^T v_u, so out = (q k^T * W) v + exp(G) * (q S_0), W[t, u] = exp(min(G_t - G_u, 0)) for u <= t,
    else 0 (the min keeps exp finite where the select drops it, in the gradient too)."""
    e = node.e
    b, kvh, t, dk = shape_of(k)
    dv = shape_of(v)[3]
    q5 = e.reshape(q, [b, kvh, group, t, dk])  # query head h * group + g reads kv head h
    k5, v5 = e.reshape(k, [b, kvh, 1, t, dk]), e.reshape(v, [b, kvh, 1, t, dv])
    carried = e.matmul(q5, e.reshape(state, [b, kvh, 1, dk, dv]))
    tril = np.tril(np.ones((t, t), np.float32))
    if decay is None:
        weights = e.constant(tril)
        final = e.add(state, e.matmul(k, v, trans_x=True))
    else:
        zero = scalar(node, 0.0, decay)
        cum = e.matmul(e.constant(tril), decay)  # [B, Hkv, T, 1]: G
        below = e.value(o.MinimumOp(e.sub(cum, e.transpose(cum, [0, 1, 3, 2])), zero))  # min(G_t - G_u, 0)
        weights = e.reshape(e.select(e.constant(tril.astype(bool)), e.value(o.ExpOp(below)), zero), [b, kvh, 1, t, t])
        carried = e.mul(carried, e.reshape(e.value(o.ExpOp(cum)), [b, kvh, 1, t, 1]))
        last = e.value(o.SliceOp(cum, [0, 0, t - 1, 0], [b, kvh, t, 1]))  # G_T
        to_end = e.value(o.ExpOp(e.value(o.MinimumOp(e.sub(last, cum), zero))))  # exp(G_T - G_u)
        final = e.add(e.mul(state, e.value(o.ExpOp(last))), e.matmul(e.mul(k, to_end), v, trans_x=True))
    out = e.add(e.matmul(e.mul(e.matmul(q5, k5, trans_y=True), weights), v5), carried)
    return e.reshape(out, [b, kvh * group, t, dv]), final


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(node: Node) -> Values:
    """A depthwise 1-D conv over [past_state (zeros when absent), input], + bias, then SiLU if asked;
    the present state is the last k - 1 steps of that concatenation."""
    e = node.e
    x, w = node.input(0), node.input(1)
    activation = node.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise node.fail(f"activation must be 'none', 'silu' or 'swish', got '{activation}'")
    if len(node.shape(0)) != 3 or len(node.shape(1)) != 3:
        raise node.fail("input must be [B, C, L] and weight [C, 1, k]")
    b, c, length = node.shape(0)
    k = node.shape(1)[2]
    if node.shape(1) != (c, 1, k):
        raise node.fail(f"weight must be [{c}, 1, k], got {list(node.shape(1))}")
    if node.has(3) and node.shape(3) != (b, c, k - 1):
        raise node.fail(f"past_state must be [{b}, {c}, {k - 1}] (k - 1 steps), got {list(node.shape(3))}")
    if k < 2:  # the state is [B, C, 0]: nothing of the past enters the conv
        padded = x
    else:
        past = node.input(3) if node.has(3) else e.constant(np.zeros((b, c, k - 1), numpy_dtype_of(element_of(x))))
        padded = e.value(o.ConcatOp([past, x], 2))
    y = e.emit(o.ConvOp.of(padded, w, [1], [1], [0, 0], c)).results[0]
    if node.has(2):
        y = e.add(y, e.reshape(node.input(2), [c, 1]))
    if activation != "none":
        y = e.mul(y, e.value(o.SigmoidOp(y)))
    total = length + k - 1
    return [y, e.value(o.SliceOp(padded, [0, 0, total - (k - 1)], [b, c, total]))]


# ---------------------------------------------------------------------------
# FlexAttention (ai.onnx.preview)
# ---------------------------------------------------------------------------


@converter("ai.onnx.preview.FlexAttention", since=1)
def flex_attention(node: Node) -> Values:
    """softmax(score_mod(matmul(q, k^T) * scale)) -> prob_mod -> @ v, the softmax (and the mods) in
    softmax_precision (float32 for f16/bf16 inputs by default); score_mod and prob_mod, graphs of one
    input and one output, are converted in place (graph.py's GraphImporter.inline)."""
    e = node.e
    q, k, v = node.input(0), node.input(1), node.input(2)
    if any(len(node.shape(i)) != 4 for i in range(3)):
        raise node.fail("Q, K and V must have rank 4")
    hq, hkv, d = node.shape(0)[1], node.shape(1)[1], node.shape(0)[3]
    if hkv <= 0 or hq % hkv or node.shape(2)[1] != hkv:
        raise node.fail(f"{hq} query heads cannot share {hkv} key / {node.shape(2)[1]} value heads")
    k, v = repeat_heads(node, k, hq // hkv), repeat_heads(node, v, hq // hkv)
    scale = node.attr("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    scores = e.mul(e.matmul(q, k, trans_y=True), scalar(node, scale, q))
    precision = node.attr("softmax_precision")
    if precision is not None:
        if int(precision) not in (1, 10, 11, 16):
            raise node.fail(f"softmax_precision {precision} is not a float type opc has")
        compute = ELEMENT_TYPES[int(precision)][1]
    else:
        f32, f64 = ELEMENT_TYPES[1][1], ELEMENT_TYPES[11][1]
        compute = element_of(q) if element_of(q) in (f32, f64) else f32
    if element_of(scores) != compute:
        scores = e.cast(scores, compute)
    for name in ("score_mod", "prob_mod"):
        graph = node.attr(name)
        if name == "prob_mod":
            scores = e.value(o.SoftmaxOp(scores, 3))
        if graph is not None:
            (out,) = node.importer.inline(graph, [scores], node.importer.opset, node.label)  # ai.onnx nodes
            if shape_of(out) != shape_of(scores) or element_of(out) != compute:
                raise node.fail(f"{name} must keep its input's type {scores.type}, gives {out.type}")
            scores = out
    if element_of(v) != compute:
        v = e.cast(v, compute)
    y = e.matmul(scores, v)
    return [y if element_of(y) == node.element(2) else e.cast(y, node.element(2))]
