"""opc: an op compiler for deep-learning operators and their gradients.

    import opc
    m = opc.compile("model.mlir", target="cpu", grad=True)
    out = m.mlp(x, w, b)
    dx, dw, db = m.mlp_grad(x, w, b, dout)
    out, dx, dw, db = m.mlp_value_and_grad(x=x, w=w, b=b, ds=dout)
"""

from opc.errors import BuildError, InputError, InternalError, OpcError, UnsupportedError
from opc.threads import apply_wait_policy, get_num_threads, set_num_threads

__all__ = ["BuildError", "InputError", "InternalError", "OpcError", "UnsupportedError", "__version__", "compile",
           "get_num_threads", "import_onnx", "jax", "load_onnx", "onnx_backend", "paddle", "profile", "set_num_threads",
           "torch"]

apply_wait_policy()  # before any module loads libgomp (opc/threads.py)


# The frameworks' submodules (opc/torch.py, opc/jax.py, opc/paddle.py): `import opc.torch` and `opc.torch` alike
LAZY_SUBMODULES = ("torch", "jax", "paddle", "onnx_backend")


def __getattr__(name: str):
    """opc.torch, opc.jax, opc.paddle and opc.onnx_backend, imported on first use (they import
    torch, JAX, Paddle, onnx); opc.__version__, read on first use."""
    if name in LAZY_SUBMODULES:
        import importlib

        module = importlib.import_module(f"opc.{name}")
        globals()[name] = module
        return module
    if name == "__version__":
        globals()[name] = version()
        return globals()[name]
    raise AttributeError(f"module 'opc' has no attribute {name!r}")


def version() -> str:
    """opc's version, as pyproject.toml declares it: a source checkout reads its pyproject.toml
    (what runs is that tree, whatever an installed opc says), an installed package its metadata."""
    import re
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[)", pyproject.read_text(encoding="utf-8"), re.M | re.S) \
        if pyproject.is_file() else None
    if project and re.search(r'^name\s*=\s*"opc"', project[1], re.M):
        found = re.search(r'^version\s*=\s*"([^"]+)"', project[1], re.M)
        if found:
            return found[1]
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("opc")
    except PackageNotFoundError:
        return "0+unknown"


def compile(  # noqa: A001 - the name SPEC.md gives
    source, target: str = "cpu", grad: bool | int = False, decompose: str | None = None, cache_dir: str | None = None,
    fuse: bool = True, arrays: str = "numpy",
):
    """Compile a path, MLIR text or ModuleOp into a module of callables.

    grad=True (or 1) adds NAME_grad and NAME_value_and_grad, grad=2 also
    NAME_grad_grad; fuse=False turns opc-fuse (matmul + bias + activation ->
    fused_gemm_epilogue) off. The functions read NumPy arrays and any CPU array with
    __dlpack__ (torch, JAX) in place; they return `arrays`: "numpy", "torch" or "jax" (no copy)."""
    from opc import compile_cache

    _, hit = compile_cache.find(source, target, grad, decompose, fuse, cache_dir, arrays)  # compiled before: no xDSL
    if hit is not None:
        return hit
    from opc.api import compile as _compile

    return _compile(source, target=target, grad=grad, decompose=decompose, cache_dir=cache_dir, fuse=fuse,
                    arrays=arrays)


def import_onnx(model, shapes=None, constants=None):
    """An ONNX model (path or onnx.ModelProto) -> (ModuleOp, {argument name: weight}); see opc.onnx_import.
    constants: initializers compiled in as constants (names, or a predicate of (name, array))."""
    from opc.onnx_import import import_onnx as _import_onnx

    return _import_onnx(model, shapes, constants)


def load_onnx(model, target: str = "cpu", cache_dir: str | None = None, specialize: bool = False):
    """An ONNX model (path or onnx.ModelProto) as a callable, f(*inputs) -> [outputs], compiled on first call
    and reused after: once for every size where the inputs' open dims (dim_param) can stay run-time (`?`)
    sizes, else per input shape (and shape-like input values); specialize=True always compiles per shape."""
    from opc.onnx_load import load_onnx as _load_onnx

    return _load_onnx(model, target, cache_dir, specialize)


def profile(module):
    """Time every kernel of a compiled CPU module from now on: `with opc.profile(m) as p: ...`,
    then p.table() and p.chrome_trace(path); see opc/profiler.py."""
    from opc.profiler import profile as _profile

    return _profile(module)
