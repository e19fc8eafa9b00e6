"""Transformer models as PyTorch's exporter writes them (tests/models/export_transformers.py:
tiny BERT, GPT-2 (also with a dynamic batch and length, and through the TorchScript exporter),
BART from transformers configs, nn.TransformerEncoderLayer, a timm ViT; random weights, default
attention, torch.onnx.export(dynamo=True, opset_version=18)). No torch here: the
.npz beside each model holds the inputs, torch's outputs and torch's gradients. Each model is
imported as it is, compiled once with grad=True, and checked
  * forward against onnxruntime and torch;
  * the gradient of sum(out * dy) w.r.t. every float initializer (and float input) against torch's
    autograd: an initializer that holds a parameter (or its transpose, as the exporter folds it)
    directly, one folded from rows of a parameter (position embeddings, a cls token expanded to
    the batch) through the scatter-add of opc's gradient over those rows."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from onnx_helpers import ROOT, onnx, run_ort

import opc
from opc.onnx_import.graph import identifier

MODELS_DIR = ROOT / "tests" / "models"
MODELS = ["encoder_layer", "bert", "gpt2", "gpt2_dynamic", "gpt2_torchscript", "bart", "vit"]


def path(name: str) -> Path:
    return MODELS_DIR / f"{name}.onnx"


@functools.cache
def compiled(name: str, run_time_sizes: bool = False):
    """(compiled module with gradients, {argument name: weight}, {argument name: ONNX initializer});
    run_time_sizes: the open dims stay `?` (one module for every batch and length)."""
    sizes = {k: v.shape for k, v in inputs(reference(name)).items()}  # gpt2_dynamic's: its batch and length
    module, params = opc.import_onnx(str(path(name)), shapes=None if run_time_sizes else sizes)
    inits = [t.name for t in onnx.load(str(path(name))).graph.initializer]
    onnx_name = {identifier(n, set(), "w"): n for n in inits}
    assert len(onnx_name) == len(inits)  # argument names are the initializers' own, one to one
    return opc.compile(module, grad=True), params, {k: onnx_name[k] for k in params}


def reference(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(MODELS_DIR / f"{name}.npz"))


def inputs(ref) -> dict[str, np.ndarray]:
    return {k.removeprefix("in_"): v for k, v in ref.items() if k.startswith("in_")}


def numbered(ref, prefix: str) -> list[np.ndarray]:
    return [ref[f"{prefix}{i}"] for i in range(sum(k.startswith(prefix) for k in ref))]


def as_list(x) -> list[np.ndarray]:
    return list(x) if isinstance(x, tuple) else [x]


def test_the_exported_files_are_small() -> None:
    sizes = {p.name: p.stat().st_size for p in MODELS_DIR.iterdir() if p.suffix in (".onnx", ".npz")}
    assert {f"{m}{suffix}" for m in MODELS for suffix in (".onnx", ".npz")} <= set(sizes)
    assert max(sizes.values()) < 1.5e6 and sum(sizes.values()) < 8e6, sizes


@pytest.mark.parametrize("name", MODELS)
def test_forward_matches_onnxruntime_and_torch(name: str) -> None:
    m, params, _ = compiled(name)
    ref = reference(name)
    feeds = inputs(ref)
    got = as_list(m.main_graph(*feeds.values(), *params.values()))
    want_ort = run_ort(onnx.load(str(path(name))), feeds)
    want_torch = numbered(ref, "out_")
    assert len(got) == len(want_ort) == len(want_torch)
    for g, w_ort, w_torch in zip(got, want_ort, want_torch):
        assert g.shape == w_ort.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w_ort, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, w_torch, rtol=1e-4, atol=1e-4)


GRADIENT_CASES = [(name, False) for name in MODELS] + [("gpt2_dynamic", True)]


@pytest.mark.parametrize(("name", "run_time_sizes"), GRADIENT_CASES)
def test_gradients_match_torch_autograd(name: str, run_time_sizes: bool) -> None:
    m, params, onnx_names = compiled(name, run_time_sizes)
    if run_time_sizes:
        assert m.main_graph_grad.sig.sizes, "the gradient takes the batch and length at run time"
    ref = reference(name)
    feeds = inputs(ref)
    float_inputs = [k for k, v in feeds.items() if v.dtype.kind == "f"]
    grads = as_list(m.main_graph_grad(*feeds.values(), *params.values(), *numbered(ref, "dy_")))
    assert len(grads) == len(float_inputs) + len(params)  # one gradient per float input and per weight
    by_name = dict(zip([f"in_{k}" for k in float_inputs] + [onnx_names[k] for k in params], grads))
    checked = set()
    for key, g in by_name.items():
        if key.startswith("in_"):
            want = ref[f"gradin_{key.removeprefix('in_')}"]
        elif f"grad_{key}" in ref:
            want = ref[f"grad_{key}"]
        elif f"rowsof_{key}" in ref:  # folded from rows of a parameter: scatter-add back onto them
            want = ref[f"gradrows_{key}"]
            rows = np.zeros((want.size // want.shape[-1], want.shape[-1]), np.float32)
            np.add.at(rows, ref[f"rowsof_{key}"], g.reshape(-1, g.shape[-1]))
            g = rows.reshape(want.shape)
        else:
            continue  # an exporter's constant that holds no parameter (BART's causal mask)
        # (a key bias's true gradient is zero, softmax ignoring a shift shared by a row: rounding noise)
        atol = max(1e-4 * float(np.abs(want).max()), 1e-6)
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=atol, err_msg=f"{name}: gradient of {key}")
        checked.add(key)
    recorded = {k.removeprefix("grad_") for k in ref if k.startswith("grad_")}
    recorded |= {k.removeprefix("rowsof_") for k in ref if k.startswith("rowsof_")}
    assert recorded <= checked, sorted(recorded - checked)  # every parameter torch differentiates


@pytest.mark.parametrize(("name", "vocab"), [("gpt2", 1000), ("gpt2_torchscript", 256)])
def test_gpt2_tied_embedding_is_one_argument_with_one_gradient(name: str, vocab: int) -> None:
    """GPT-2's lm_head is wte: one [vocab, width] argument, whose gradient (checked above against torch's,
    which sums both uses) covers the token lookup and the logits. PyTorch's exporter writes it once; the
    TorchScript exporter also writes wte^T (`onnx::MatMul_NNN`), which opc rebinds to transpose(wte)."""
    _, params, onnx_names = compiled(name)
    tables = [k for k, v in params.items() if ("wte" in k or "lm_head" in k) and v.shape == (vocab, 64)]
    assert len(tables) == 1, tables
    ref = reference(name)
    assert f"grad_{onnx_names[tables[0]]}" in ref
    tied = {k.removeprefix("tied_"): str(v) for k, v in ref.items() if k.startswith("tied_")}
    assert len(tied) == (name == "gpt2_torchscript")
    for copy, original in tied.items():
        assert copy not in onnx_names.values() and original == onnx_names[tables[0]]


@functools.cache
def dynamic_gpt2():  # noqa: ANN201  (an opc.onnx_load.OnnxModel)
    return opc.load_onnx(str(path("gpt2_dynamic")))


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 16), (2, 1), (1, 32), (4, 9)])
def test_dynamic_gpt2_compiles_once_for_every_size(batch, seq) -> None:
    """Exported with a dynamic batch and length: opc.load_onnx compiles it once, its position ids,
    causal mask and reshapes (Shape/Gather/Concat/Range/Expand/GatherND) computed from run-time sizes."""
    rng = np.random.default_rng(batch * 100 + seq)
    ids = rng.integers(0, 256, (batch, seq)).astype(np.int64)
    mask = (rng.uniform(size=(batch, seq)) < 0.8).astype(np.int64)
    mask[:, 0] = 1
    model = dynamic_gpt2()
    (got,) = model(ids, mask)
    (want,) = run_ort(onnx.load(str(path("gpt2_dynamic"))), {"input_ids": ids, "attention_mask": mask})
    assert got.shape == (batch, seq, 256)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert model.static_reason is None and not model.variants, model.static_reason
