"""opc: an op compiler for deep-learning operators and their gradients.

    import opc
    m = opc.compile("model.mlir", target="cpu", grad=True)
    out = m.mlp(x, w, b)
    dx, dw, db = m.mlp_grad(x, w, b, dout)
"""

from opc.ir import OpcError

__all__ = ["OpcError", "compile", "import_onnx"]


def compile(  # noqa: A001 - the name SPEC.md gives
    source, target: str = "cpu", grad: bool = False, decompose: str | None = None, cache_dir: str | None = None
):
    """Compile a path, MLIR text or ModuleOp into a module of callables."""
    from opc.api import compile as _compile

    return _compile(source, target=target, grad=grad, decompose=decompose, cache_dir=cache_dir)


def import_onnx(model, shapes=None):
    """An ONNX model (path or onnx.ModelProto) -> (ModuleOp, {argument name: weight}); see opc.onnx_import."""
    from opc.onnx_import import import_onnx as _import_onnx

    return _import_onnx(model, shapes)
