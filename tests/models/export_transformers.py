"""Export tiny transformer models with PyTorch's ONNX exporter, as a user would, and record
torch's forward and gradients: the test data of tests/frontend/test_exported_models.py.

    /work/exportenv/bin/python tests/models/export_transformers.py [NAME ...]
    # needs torch (>= 2.6), transformers, timm, onnxscript; writes NAME.onnx and NAME.npz here

Each model is built from a public config shrunk to 2 layers of width 64, with random weights
(a fixed seed), and exported by `torch.onnx.export(..., dynamo=True, opset_version=18)` with
the library's default attention (scaled-dot-product attention). The .npz holds

    in_<input>      the inputs the model was traced with (and is checked at)
    out_<i>         torch's outputs (eval mode: no dropout)
    dy_<i>          fixed random cotangents: the loss is sum_i sum(out_i * dy_i)
    grad_<name>     d loss / d parameter, keyed by the ONNX initializer that holds it
    gradin_<input>  d loss / d input, for float inputs

so the tests need neither torch nor network access. Tied weights (GPT-2's lm_head = wte) are
one torch parameter: their gradient is the sum over both uses, as opc's must be.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
OPSET = 18
SEED = 0


class Outputs(torch.nn.Module):
    """A model called with positional inputs, returning a tuple of tensors (no ModelOutput)."""

    def __init__(self, net: torch.nn.Module, keys: tuple[str, ...] | None = None, names: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.net, self.keys, self.names = net, keys, names

    def forward(self, *args):
        # by keyword where names are given (GPT-2's second positional parameter is past_key_values)
        out = self.net(*args[:len(args) - len(self.names)], **dict(zip(self.names, args[len(args) - len(self.names):])))
        if isinstance(out, torch.Tensor):
            return (out,)
        if self.keys is not None:
            return tuple(out[k] for k in self.keys)
        return tuple(out)


def tokens(rng: np.random.Generator, vocab: int, batch: int = 2, seq: int = 8) -> np.ndarray:
    return rng.integers(0, vocab, (batch, seq), dtype=np.int64)


def padding_mask(batch: int = 2, seq: int = 8) -> np.ndarray:
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1, 5:] = 0  # the second sequence is padded: the attention mask has work to do
    return mask


def bert(rng):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=128, type_vocab_size=2)
    # (128 positions: the exporter leaves the GatherElements of the token_type_ids buffer, as at 512)
    net = Outputs(BertModel(cfg), ("last_hidden_state", "pooler_output"))
    return net, {"input_ids": tokens(rng, 1000), "attention_mask": padding_mask()}


def gpt2(rng):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=32, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    net = Outputs(GPT2LMHeadModel(cfg), ("logits",), ("input_ids", "attention_mask"))
    assert net.net.lm_head.weight is net.net.transformer.wte.weight  # tied
    return net, {"input_ids": tokens(rng, 1000), "attention_mask": padding_mask()}


def gpt2_dynamic(rng):
    """GPT-2 (1 layer, 256 tokens) exported with a dynamic batch and sequence length: the graph computes
    its position ids, causal mask and reshapes from Shape/Gather/Concat/Range of the input's sizes."""
    from torch.export import Dim
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=256, n_embd=64, n_layer=1, n_head=2, n_positions=32, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    net = Outputs(GPT2LMHeadModel(cfg), ("logits",), ("input_ids", "attention_mask"))
    batch, seq = Dim("batch", max=64), Dim("seq", max=32)
    return net, {"input_ids": tokens(rng, 256), "attention_mask": padding_mask()}, \
        {"dynamic_shapes": (({0: batch, 1: seq},) * 2,)}


def gpt2_torchscript(rng):
    """The same small GPT-2 through the older TorchScript exporter (dynamo=False, opset 17), which folds
    lm_head = wte^T into an initializer of its own (`onnx::MatMul_NNN`): a tied weight as files carry it."""
    net, inputs, _ = gpt2_dynamic(rng)
    return net, inputs, {"dynamo": False, "opset_version": 17}


def bart(rng):
    from transformers import BartConfig, BartModel

    cfg = BartConfig(vocab_size=1000, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=32,
                     use_cache=False)
    net = Outputs(BartModel(cfg), ("last_hidden_state", "encoder_last_hidden_state"))
    return net, {"input_ids": tokens(rng, 1000), "attention_mask": padding_mask()}


def encoder_layer(rng):
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                             batch_first=True)
    return Outputs(layer), {"src": rng.standard_normal((2, 8, 64)).astype(np.float32)}


def vit(rng):
    import timm

    net = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=64, depth=2, num_heads=2, mlp_ratio=2.0)
    return Outputs(net), {"pixels": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}


MODELS: dict[str, Callable] = {"bert": bert, "gpt2": gpt2, "gpt2_dynamic": gpt2_dynamic,
                               "gpt2_torchscript": gpt2_torchscript, "bart": bart, "encoder_layer": encoder_layer,
                               "vit": vit}


def export(name: str) -> None:
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    net, inputs, *options = MODELS[name](rng)  # options: torch.onnx.export's, where they differ
    net.eval()
    with torch.no_grad():  # no two parameters alike (LayerNorm's ones, zero biases), or the exporter merges them
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    path = HERE / f"{name}.onnx"
    kwargs = {"dynamo": True, "opset_version": OPSET, "input_names": list(inputs)} | (options[0] if options else {})
    with torch.no_grad():
        if kwargs["dynamo"]:
            torch.onnx.export(net, args, **kwargs).save(str(path), external_data=False)
        else:
            torch.onnx.export(net, args, str(path), **kwargs)
    model = onnx.load(str(path))

    # torch's forward and gradients of sum(out * dy) w.r.t. every parameter and float input
    targs = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    outs = net(*targs)
    dys = [torch.from_numpy(rng.uniform(-1, 1, tuple(o.shape)).astype(np.float32)) for o in outs]
    loss = sum((o * d).sum() for o, d in zip(outs, dys))
    params = dict(net.named_parameters())
    float_inputs = {k: a for k, a in zip(inputs, targs) if a.requires_grad}
    grads = torch.autograd.grad(loss, [*params.values(), *float_inputs.values()], allow_unused=True)
    by_param = dict(zip(params, grads))
    ref = {f"in_{k}": v for k, v in inputs.items()}
    ref |= {f"out_{i}": o.detach().numpy() for i, o in enumerate(outs)}
    ref |= {f"dy_{i}": d.numpy() for i, d in enumerate(dys)}
    ref |= {f"gradin_{k}": g.numpy() for k, g in zip(float_inputs, grads[len(params):])}
    grad_of_initializers(name, model, {k: (params[k].detach().numpy(), g) for k, g in by_param.items()}, ref)
    np.savez_compressed(HERE / f"{name}.npz", **ref)
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"{name}: {path.stat().st_size / 1e6:.2f} MB onnx, {(HERE / f'{name}.npz').stat().st_size / 1e6:.2f} MB npz, "
          f"{len(model.graph.node)} nodes: {' '.join(ops)}")


def grad_of_initializers(name: str, model, params: dict, ref: dict) -> None:
    """ref['grad_<initializer>'] for each float initializer that holds a parameter, as it is or as the
    exporter's optimizer folded it (a transpose of a weight, a reshape): found by value (the parameters
    were made distinct)."""
    from onnx import numpy_helper

    used: set[str] = set()
    first_holder: dict[str, str] = {}  # parameter -> the initializer that holds it
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind != "f" or a.size < 2:
            continue
        for pname, (p, g) in params.items():
            g = np.zeros_like(p) if g is None else g.numpy()
            if pname in used and (np.array_equal(p, a) or (p.ndim == 2 and np.array_equal(p.T, a))):
                # a tied weight written twice (lm_head = wte^T): one argument in opc, whose gradient
                # is the parameter's (both uses); the copy is no argument
                ref[f"tied_{t.name}"] = np.array(first_holder[pname])
                break
            if p.shape == a.shape and np.array_equal(p, a):
                ref[f"grad_{t.name}"] = g
            elif p.ndim == 2 and p.T.shape == a.shape and np.array_equal(p.T, a):
                ref[f"grad_{t.name}"] = np.ascontiguousarray(g.T)
            elif p.size == a.size and np.array_equal(p.reshape(-1), a.reshape(-1)):
                ref[f"grad_{t.name}"] = g.reshape(a.shape)
            else:
                continue
            used.add(pname)
            first_holder[pname] = t.name
            break
        else:
            if not rows_of_parameter(t.name, a, params, ref, used):
                print(f"  {name}: float initializer {t.name} {list(a.shape)} holds no parameter")
    for pname in params.keys() - used:
        print(f"  {name}: parameter {pname} is in no initializer")


def rows_of_parameter(name: str, a: np.ndarray, params: dict, ref: dict, used: set) -> bool:
    """An initializer the exporter folded from rows of a parameter (position embeddings gathered at
    0..seq-1, a token type's row broadcast to every token, timm's cls token expanded to the batch):
    rowsof_<name> = (the parameter's row of each row of it), gradrows_<name> = torch's gradient of that
    parameter, which is the scatter-add of opc's gradient w.r.t. the initializer over those rows."""
    for pname, (p, g) in params.items():
        if p.ndim == 0 or p.shape[-1] != a.shape[-1]:
            continue
        prows = p.reshape(-1, p.shape[-1])
        index = {r.tobytes(): i for i, r in enumerate(prows)}
        found = [index.get(r.tobytes()) for r in a.reshape(-1, a.shape[-1])]
        if None in found:
            continue
        ref[f"rowsof_{name}"] = np.array(found, dtype=np.int64)
        ref[f"gradrows_{name}"] = np.zeros_like(p) if g is None else g.numpy()
        used.add(pname)
        return True
    return False


def main(names: list[str]) -> None:
    for name in names or list(MODELS):
        export(name)


if __name__ == "__main__":
    main(sys.argv[1:])
