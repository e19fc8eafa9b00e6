"""The model zoo: small networks built as ONNX with onnx.helper (no PyTorch needed),
each with its inputs and a NumPy reference. `python examples/zoo DIR` writes them all.

    from zoo import mlp_classifier                # with examples/ on sys.path
    model = mlp_classifier.build(dtype=np.float64, opset=17)
"""

from . import embedding_bag, mlp_classifier, transformer_block

MODELS = {"mlp_classifier": mlp_classifier, "transformer_block": transformer_block, "embedding_bag": embedding_bag}
