"""Export a tiny decoder with a key/value cache, as a user writes one in PyTorch, with the cache's
length and the batch dynamic: the test data of tests/shapes/test_kv_cache.py and the model of
examples/kv_cache_decode.py.

    python3 tests/models/export_kv_decoder.py   # needs torch and onnxscript; writes kv_decoder.onnx here

One call takes the new tokens ids [batch, new] and the cache past_k, past_v [layers, batch, heads,
past, head_dim], and returns the logits of the new tokens and the grown cache (past + new). A
prompt is one call with an empty cache (past = 0), each generated token one call with new = 1.
Random weights, a fixed seed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent
VOCAB, WIDTH, HEADS, LAYERS, MAX_POS = 256, 64, 4, 2, 512
HEAD_DIM = WIDTH // HEADS


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, past_k, past_v, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=-1)
        q, k, v = (z.reshape(b, t, HEADS, HEAD_DIM).transpose(1, 2) for z in (q, k, v))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh")), k, v


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(MAX_POS, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)

    def forward(self, ids, past_k, past_v):
        past, t = past_k.shape[3], ids.shape[1]
        where = torch.arange(t) + past
        x = self.tok(ids) + self.pos(where)
        mask = torch.arange(past + t)[None, :] <= where[:, None]  # causal, the cache all visible
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, past_k[i], past_v[i], mask)
            ks.append(k)
            vs.append(v)
        return self.ln(x) @ self.tok.weight.T, torch.stack(ks), torch.stack(vs)


def example_inputs(batch: int = 2, new: int = 3, past: int = 5) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    cache = (LAYERS, batch, HEADS, past, HEAD_DIM)
    return (torch.randint(0, VOCAB, (batch, new), generator=g), torch.randn(cache, generator=g),
            torch.randn(cache, generator=g))


def main() -> None:
    torch.manual_seed(0)
    net = Decoder().eval()
    batch, new, past = torch.export.Dim("batch", max=64), torch.export.Dim("new", max=256), \
        torch.export.Dim("past", max=255)
    shapes = ({0: batch, 1: new}, {1: batch, 3: past}, {1: batch, 3: past})
    torch.onnx.export(net, example_inputs(), HERE / "kv_decoder.onnx", dynamo=True, opset_version=18,
                      dynamic_shapes=shapes, input_names=["ids", "past_k", "past_v"],
                      output_names=["logits", "present_k", "present_v"], external_data=False)


if __name__ == "__main__":
    main()
