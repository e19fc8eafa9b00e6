"""A pre-norm transformer encoder block with causal self-attention, as torch.onnx.export writes

    def forward(self, x):                                   # x [batch, seq, width]
        h = self.ln1(x)
        q, k, v = (p(h).view(B, S, H, D).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

The exporter's own patterns are kept: scaled_dot_product_attention's scale
from Shape/Slice/Cast/Sqrt/Div, split as sqrt(scale) on q and on k^T, and its
causal mask from Shape/Slice/Concat/Expand/Trilu/Equal/Where (-inf above the
diagonal); the final reshape's target from Shape/Gather/Unsqueeze/Concat.
With static sizes all of these are known at compile time.

    python examples/zoo/transformer_block.py block.onnx [--opset 17] [--dtype float64]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

try:
    from . import common
except ImportError:  # run as a script
    import common  # type: ignore[no-redef]

INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Sizes:
    batch: int = 2
    seq: int = 6
    width: int = 16
    heads: int = 2
    mlp: int = 32

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def heads(g: common.Graph, t: str, s: Sizes, scope: str) -> str:
    """[B, S, W] -> [B, H, S, D]: view + transpose(1, 2)."""
    v = g.node("Reshape", [t, g.ints([s.batch, s.seq, s.heads, s.head_dim], scope)], scope)
    return g.node("Transpose", [v], scope, perm=[0, 2, 1, 3])


def attention_scale(g: common.Graph, q: str, scope: str) -> str:
    """1 / sqrt(q.shape[-1]), as the exporter computes it."""
    d = g.node("Slice", [g.node("Shape", [q], scope), g.ints([-1], scope), g.ints([INT64_MAX], scope)], scope)
    d = g.node("Cast", [d], scope, to=onnx.TensorProto.FLOAT)
    scale = g.node("Div", [g.constant(np.float32(1.0), scope, np.float32), g.node("Sqrt", [d], scope)], scope)
    return g.node("Cast", [scale], scope, to=onnx.helper.np_dtype_to_tensor_dtype(g.dtype))


def causal_mask(g: common.Graph, q: str, k: str, s: Sizes, scope: str) -> str:
    """0 on and below the diagonal, -inf above, [S, S] (before opset 14, which has no Trilu: a folded constant)."""
    if g.opset < 14:
        return g.constant(np.triu(np.full((s.seq, s.seq), -np.inf, g.dtype), 1), scope)
    target = g.node("Slice", [g.node("Shape", [q], scope), g.ints([-2], scope), g.ints([-1], scope)], scope)
    source = g.node("Slice", [g.node("Shape", [k], scope), g.ints([-2], scope), g.ints([-1], scope)], scope)
    size = g.node("Concat", [target, source], scope, axis=0)
    ones = g.node("Expand", [g.constant([1.0], scope), size], scope)
    lower = g.node("Trilu", [ones], scope, upper=0)
    hidden = g.node("Equal", [lower, g.constant([0.0], scope)], scope)
    return g.node("Where", [hidden, g.constant([-np.inf], scope), g.constant([0.0], scope)], scope)


def attention(g: common.Graph, h: str, s: Sizes) -> str:
    sc = "/attn"
    q = heads(g, g.linear(h, 3, s.width, s.width, f"{sc}/q_proj"), s, sc)
    k = heads(g, g.linear(h, 3, s.width, s.width, f"{sc}/k_proj"), s, sc)
    v = heads(g, g.linear(h, 3, s.width, s.width, f"{sc}/v_proj"), s, sc)
    root = g.node("Sqrt", [attention_scale(g, q, sc)], sc)
    mask = causal_mask(g, q, k, s, sc)
    kt = g.node("Transpose", [k], sc, perm=[0, 1, 3, 2])
    scores = g.node("MatMul", [g.node("Mul", [q, root], sc), g.node("Mul", [kt, root], sc)], sc)
    probs = g.node("Softmax", [g.node("Add", [scores, mask], sc)], sc, axis=-1)
    out = g.node("Transpose", [g.node("MatMul", [probs, v], sc)], sc, perm=[0, 2, 1, 3])
    return g.linear(g.node("Reshape", [out, merged_shape(g, h, s, sc)], sc), 3, s.width, s.width, f"{sc}/out_proj")


def merged_shape(g: common.Graph, x: str, s: Sizes, scope: str) -> str:
    """[B, S, W] from x.shape, through Shape/Gather/Unsqueeze/Concat like a traced x.size(i)."""
    shape = g.node("Shape", [x], scope)
    dims = [g.node("Unsqueeze", [g.node("Gather", [shape, g.constant(np.int64(i), scope)], scope, axis=0),
                                 g.ints([0], scope)], scope) for i in (0, 1)]
    return g.node("Concat", [*dims, g.ints([s.width], scope)], scope, axis=0)


def build(sizes: Sizes = Sizes(), dtype=np.float32, opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    s = sizes
    g = common.Graph("main_graph", dtype, opset, seed)
    x = g.input("x", [s.batch, s.seq, s.width])
    x1 = g.node("Add", [x, attention(g, g.layer_norm(x, s.width, "/ln1"), s)], "")
    h = g.gelu(g.linear(g.layer_norm(x1, s.width, "/ln2"), 3, s.width, s.mlp, "/fc1"), "/act")
    g.node("Add", [x1, g.linear(h, 3, s.mlp, s.width, "/fc2")], "")
    g.rename_last("y")
    g.output("y", [s.batch, s.seq, s.width])
    return g.model()


def inputs(sizes: Sizes = Sizes(), dtype=np.float32, seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((sizes.batch, sizes.seq, sizes.width)).astype(dtype)}


def reference(feeds: dict[str, np.ndarray], w: dict[str, np.ndarray], sizes: Sizes = Sizes()) -> np.ndarray:
    """The block in float64; the weights in file order (the MatMul weights are named by position)."""
    s = sizes
    f = [np.asarray(v, np.float64) for v in w.values()]
    ln1_w, ln1_b, bq, wq, bk, wk, bv, wv, bo, wo, ln2_w, ln2_b, b1, w1, b2, w2 = f
    x = feeds["x"].astype(np.float64)

    def split(t):
        return t.reshape(s.batch, s.seq, s.heads, s.head_dim).transpose(0, 2, 1, 3)

    h = common.layer_norm(x, ln1_w, ln1_b)
    q, k, v = split(h @ wq + bq), split(h @ wk + bk), split(h @ wv + bv)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(s.head_dim)
    scores = scores + np.triu(np.full((s.seq, s.seq), -np.inf), 1)
    probs = np.exp(common.log_softmax(scores))
    a = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x1 = x + a @ wo + bo
    return x1 + common.gelu(common.layer_norm(x1, ln2_w, ln2_b) @ w1 + b1) @ w2 + b2


if __name__ == "__main__":
    common.save_from_command_line(build, __doc__)
