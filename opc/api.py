"""The Python API behind `opc.compile` and `opc compile`.

    source -> [opc-grad] -> legalize for the target (kernel / invoke /
    composite) -> canonicalize, dce -> opc-lower-to-loops -> C or CUDA C
    -> compiled module
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from opc.autodiff import grad_order, no_grad_reasons
from opc.errors import InputError, UnsupportedError
from opc.frontend import load_module
from opc.ir import Source, is_lowered, make_context, verify
from opc.lowering.abi import FunctionSignature
from opc.lowering.binding import bind
from opc.lowering.build import (
    MODULE_TEMPLATE_TAIL,
    CompiledModule,
    build_extension,
    cache_dir,
    load_extension,
    python_names,
    sanitizing,
    self_contained,
)
from opc.lowering.c_emitter import emit_c


def prepare(source: Source, target: str = "cpu", grad: bool | int = False, decompose: str | None = None,
            fuse: bool = True) -> Source:
    """Fused (opc-fuse, where the target has the kernel), grad functions added,
    ops legalized for the target, cleaned up (in place)."""
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    from opc.targets.target import get_target
    from opc.transforms.canonicalize import CanonicalizePass
    from opc.transforms.opc_decompose import legalize, resolve_ops

    order = grad_order(grad)
    if not isinstance(fuse, bool):
        raise TypeError(f"fuse must be True or False, got {fuse!r}")
    check_target(target)
    if decompose is not None and not isinstance(decompose, str):
        raise TypeError(f"decompose must be a comma-separated string of op names (or 'all'), got {decompose!r}")
    if is_lowered(source.module):
        raise InputError(f"{source.name}: the module is already lowered (opc-lower-to-loops ran); "
                         "opc compiles opc-level IR")
    ctx = make_context()
    if fuse:
        from opc.transforms.opc_attention import AttentionPass
        from opc.transforms.opc_fuse import FusePass

        if "opc.attention" not in resolve_ops(decompose or None):  # asked to decompose it: nothing to fuse
            AttentionPass(target).apply(ctx, source.module)  # before opc-fuse: a rank-2 score GEMM is its prey too
        FusePass(target).apply(ctx, source.module)
        verify(source, stage="opc-fuse")
    if order:
        from opc.autodiff import add_grad_functions

        add_grad_functions(source.module, order=order)
        verify(source, stage="opc-grad")
    legalize(source.module, get_target(target), decompose or None)
    verify(source, stage="opc-decompose")
    from opc.transforms.opc_widen import widen

    widen(source.module)  # float8/float4/int4/int2 compute in f32 / 8-bit integers
    verify(source, stage="opc-widen")
    CanonicalizePass().apply(ctx, source.module)
    # the rules and the vjps rebuild what the forward already has (x - mean, rsqrt(var + eps), the
    # same reshape and constant many times): one copy of each pure op feeds them all
    CommonSubexpressionElimination().apply(ctx, source.module)
    DeadCodeElimination().apply(ctx, source.module)
    if fuse and not order and get_target(target).backend == "cpu":
        from opc.transforms.opc_channels_last import ChannelsLastPass

        ChannelsLastPass().apply(ctx, source.module)  # inference only: the backward would read its layouts
        verify(source, stage="opc-channels-last")
    return source


def lower(source: Source, target: str = "cpu") -> ModuleOp:
    """The loop-level module for the target's backend (the input is left untouched)."""
    from opc.lowering.opc_lower_to_loops import LowerToLoopsPass

    module = source.module.clone()
    LowerToLoopsPass(target=target_backend(target)).apply(make_context(), module)
    verify(Source(module, source.name, {}), stage="opc-lower-to-loops")
    return module


def check_target(target: object) -> None:
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"target must be 'cpu', 'cuda' or the path of a device .toml file, got {target!r}")


def target_backend(target: str) -> str:
    from opc.targets.target import get_target

    return get_target(target).backend


def emit(source: Source, what: str, target: str = "cpu", grad: bool | int = False, decompose: str | None = None,
         fuse: bool = True) -> str:
    """`--emit mlir|c|cuda`: the lowered IR or the generated source."""
    from opc.targets.target import get_target

    if what == "cuda" and get_target(target).externals:
        raise UnsupportedError(f"{target}: the device's own C kernels ([external.*]) run on the cpu backend only; "
                               "--emit cuda is not supported for it")
    prepare(source, target, grad, decompose, fuse)
    loops = lower(source, "cuda" if what == "cuda" else target)
    if what == "mlir":
        return str(loops) + "\n"
    if what == "c":  # the runtime headers inlined: a bare `gcc -c` compiles it
        return self_contained(emit_c(loops, sanitizing())[0])
    from opc.lowering.cuda_emitter import emit_cuda

    return self_contained(emit_cuda(loops)[0])


def compile(source, target: str = "cpu", grad: bool | int = False, decompose: str | None = None,  # noqa: A001
            cache_dir: str | None = None, fuse: bool = True, arrays: str = "numpy"):
    """A path, MLIR text (str or UTF-8 bytes) or ModuleOp -> a module of NumPy-callable functions
    (which also read any CPU array with __dlpack__ in place, and return `arrays`: "numpy", "torch", "jax")."""
    from opc.interop.arrays import result_converter

    check_target(target)
    result_converter(arrays)  # a wrong kind, or torch/JAX not installed, fails before the build
    target = os.fspath(target)
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir must be a directory path, got {cache_dir!r}")
    from opc import compile_cache

    key, hit = compile_cache.find(source, target, grad, decompose, fuse, cache_dir, arrays)
    if hit is not None:
        return hit
    compiled, sigs = full_compile(source, target, grad, decompose, fuse, cache_dir, arrays)
    if key is not None and sigs is not None:
        compile_cache.store(key, compiled, sigs, load_extension_name(compiled), cache_dir)
    return compiled


def full_compile(source, target: str, grad: bool | int = False, decompose: str | None = None, fuse: bool = True,
                 cache_dir: str | None = None,
                 arrays: str = "numpy") -> tuple[CompiledModule, list[FunctionSignature] | None]:
    """compile's full path, past its cache: (the module, its signatures for compile_cache.store; None
    for a CUDA build, which is not recorded there)."""
    src = prepare(load_module(source), target, grad, decompose, fuse)
    loops = lower(src, target)
    sigs = None
    if target_backend(target) == "cuda":
        from opc.lowering.cuda_build import compile_cuda

        compiled = compile_cuda(loops, cache_dir)
    else:
        c_source, sigs, data = emit_c(loops, sanitizing())
        compiled = load_c(c_source, sigs, cache_dir, device_kernels(loops, target, cache_dir), data)
    compiled.no_grad.update(no_grad_reasons(src.module))
    compiled.wrt.update(grad_arguments(src.module))
    compiled.set_arrays(arrays)
    return compiled, sigs


def grad_arguments(module: ModuleOp) -> dict[str, list[int]]:
    """Per function that has a NAME_grad: the arguments it differentiates (default_wrt), in its order."""
    from xdsl.dialects import func

    from opc.autodiff import default_wrt

    funcs = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
    return {name: default_wrt(f) for name, f in funcs.items() if f"{name}_grad" in funcs}


def load_extension_name(module: CompiledModule) -> str:
    """The extension module's name: its file name up to the first dot (_opc_KEY)."""
    assert module.path is not None  # a module built from (or loaded as) an extension file
    return Path(module.path).name.split(".")[0]


def load_c(c_source: str, sigs: list[FunctionSignature], cache: str | None = None,
           objects: Sequence[Path] = (), data: Mapping[str, bytes] | None = None) -> CompiledModule:
    name, path = build_extension(c_source, sigs, cache_dir(cache), objects, data)
    return CompiledModule(bind(load_extension(name, path), sigs), c_source, path)


def device_kernels(loops: ModuleOp, target: str, cache: str | None = None) -> list[Path]:
    """The compiled objects of the device kernels the lowered module calls (opc/targets/device_kernels.py)."""
    from opc.dialects.opc_loops import ExternalCallOp
    from opc.lowering.device_build import kernel_objects
    from opc.targets.target import get_target

    symbols = {op.symbol.data for op in loops.walk() if isinstance(op, ExternalCallOp)}
    return kernel_objects(get_target(target).externals, symbols, cache_dir(cache)) if symbols else []


MODULE_TEMPLATE = '''"""{name}: compiled by opc from {origin}. Import it; call its functions with NumPy arrays."""

import os as _os

from opc.lowering.binding import bind as _bind
from opc.lowering.build import load_extension as _load
from opc.lowering.abi import FunctionSignature as _Sig

_SIGNATURES = {signatures!r}
_EXT = _load({ext_name!r}, _os.path.join(_os.path.dirname(__file__), {ext_file!r}))
globals().update(_bind(_EXT, [_Sig(*s) for s in _SIGNATURES]))
''' + MODULE_TEMPLATE_TAIL


def compile_to_dir(source: Source, out_dir: str, name: str, target: str = "cpu", grad: bool | int = False,
                   decompose: str | None = None, fuse: bool = True) -> list[str]:
    """`opc compile -o DIR`: an importable `name.py` plus its extension (and .cu for cuda), and an
    ONNX model's weights as `name.npz` (the functions take them as arguments, by name)."""
    if not name.isidentifier():
        raise InputError(f"'{name}' is not a valid Python module name; rename the input file")
    os.makedirs(out_dir, exist_ok=True)
    origin = source.name
    prepare(source, target, grad, decompose, fuse)
    loops = lower(source, target)
    weights = write_weights(source, out_dir, name)
    if target_backend(target) == "cuda":
        from opc.lowering.cuda_build import write_cuda_module

        return write_cuda_module(loops, out_dir, name, origin) + weights
    c_source, sigs, data = emit_c(loops, sanitizing())
    ext_name, built = build_extension(c_source, sigs, cache_dir(), device_kernels(loops, target), data)
    ext_file = built.name
    shutil.copy2(built, os.path.join(out_dir, ext_file))
    c_path = os.path.join(out_dir, f"{name}.c")
    with open(c_path, "w", encoding="utf-8") as f:
        f.write(c_source)
    data_paths = [os.path.join(out_dir, file) for file in data]  # what the .c's .incbin lines name
    for path, blob in zip(data_paths, data.values()):
        Path(path).write_bytes(blob)
    py_path = os.path.join(out_dir, f"{name}.py")
    signatures = [(s.name, s.inputs, s.outputs, s.errors, s.sizes, s.checks, s.found, s.handed, s.derived)
                  for s in sigs]
    with open(py_path, "w", encoding="utf-8") as f:
        f.write(MODULE_TEMPLATE.format(name=name, origin=os.path.basename(origin), signatures=signatures,
                                       ext_name=ext_name, ext_file=ext_file, names=python_names(sigs),
                                       no_grad=no_grad_reasons(source.module)))
    return [py_path, os.path.join(out_dir, ext_file), c_path, *data_paths, *weights]


def write_weights(source: Source, out_dir: str, name: str) -> list[str]:
    """An ONNX model's initializers as `name.npz` (as `opc import` writes them); [] for MLIR."""
    if not source.weights:
        return []
    import numpy as np

    path = os.path.join(out_dir, f"{name}.npz")
    np.savez(path, **source.weights)
    return [path]
