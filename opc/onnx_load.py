"""ONNX models run as they come: shapes (and shape-like input values) known at the call.

    f = opc.load_onnx("model.onnx")        # nothing is compiled yet
    y = f(x)                               # imports + compiles for x's shape, then runs
    y = f(x2)                              # same shapes: the compiled module is reused

Each call's input shapes and dtypes pick a compiled variant (kept in memory; the
C build itself is cached on disk by opc.compile). An input that a converter needs
at compile time (Reshape's shape, an axes or a size given as a graph input) is
bound: its value joins the variant's key and it is no argument of the function.
A sequence input is a list of arrays (its length and their shapes join the key;
each array is an argument), an optional one an array, a list or None (empty);
sequence outputs come back as lists, an empty optional as None, ZipMap's maps as
onnxruntime's list of dicts {label: float}, string class labels as a NumPy array
of str (opc computes the probabilities and the label indices: lists.regroup).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func


@dataclass
class Variant:
    call: Any  # the compiled function with the weights (its last arguments, our own arrays) bound
    bound: dict[str, np.ndarray]  # inputs whose values were compiled in
    layouts: list[Any]  # each output's layout: how to regroup the results into sequences (lists.regroup)


class OnnxModel:
    """A callable ONNX model: f(*inputs) or f(**inputs) -> list of outputs (NumPy arrays)."""

    def __init__(self, model: Any, target: str = "cpu", cache_dir: str | None = None,
                 specialize: bool = False) -> None:
        from opc.onnx_import.graph import load, onnx_module

        onnx = onnx_module()
        self.where = "<ModelProto>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
        if isinstance(model, onnx.ModelProto):
            own = onnx.ModelProto()
            own.CopyFrom(model)
            model = own
        self.model = load(model, self.where)
        self.target = target
        self.cache_dir = cache_dir
        init_names = {t.name for t in self.model.graph.initializer}
        self.input_names = [vi.name for vi in self.model.graph.input if vi.name not in init_names]
        # sequence and optional inputs: kept as lists (or None), each array an argument
        self.list_inputs = {vi.name for vi in self.model.graph.input if vi.name in self.input_names
                            and vi.type.WhichOneof("value") in ("sequence_type", "optional_type")}
        self.variants: dict[tuple, list[Variant]] = {}
        # one compile for every size: per dtype and rank signature, the variant whose open dims are `?`
        # (None where the model needs its sizes at compile time: then a variant per shape, as asked
        # by specialize=True); static_reason says why the last such model fell back
        self.specialize = specialize or bool(self.list_inputs) or not self.open_dims()
        self.dynamic: dict[tuple, Variant | None] = {}
        self.static_reason: str | None = None if not self.specialize or specialize else "no open input dims"
        # (dtype, shape) of each positional array of a call that passed check() -> its variant and whether
        # its results need regrouping: a repeat call of those skips feeds/check/variant (~7 us of Python,
        # 1-2% of a small recurrent model's call). Only variants without bound values, and no list inputs.
        self.repeats: dict[tuple, tuple[Variant, bool]] = {}

    def feeds(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.input_names):
            raise TypeError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                            f"got {len(args)}")
        feeds = dict(zip(self.input_names, args))
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise TypeError(f"the model has no input '{name}' (inputs: {', '.join(self.input_names)})")
            if name in feeds:
                raise TypeError(f"input '{name}' is given twice")
            feeds[name] = value
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise TypeError(f"input '{missing[0]}' is missing")
        return {n: self.list_input(n, feeds[n]) if n in self.list_inputs else np.asarray(feeds[n])
                for n in self.input_names}

    def list_input(self, name: str, value: Any) -> Any:
        """A sequence input as a list of arrays; an optional one as None, a list or an array."""
        kind = {vi.name: vi for vi in self.model.graph.input}[name].type.WhichOneof("value")
        if value is None:
            if kind == "sequence_type":
                raise ValueError(f"input '{name}' is a sequence: give a list of arrays, not None")
            return None
        if isinstance(value, (list, tuple)):
            return [np.asarray(v) for v in value]
        if kind == "sequence_type":
            raise ValueError(f"input '{name}' is a sequence: give a list of arrays, got {type(value).__name__}")
        return np.asarray(value)

    @functools.cached_property
    def declared(self) -> dict[str, tuple[Any, int, list[int | str | None]]]:
        """Each graph input's (value info, element type, dims), read off the proto once."""
        from opc.onnx_import.graph import dims_of

        return {vi.name: (vi, vi.type.tensor_type.elem_type, dims_of(vi)) for vi in self.model.graph.input}

    def check(self, feeds: Mapping[str, Any]) -> None:
        """A call's inputs against the graph's declared dtypes, ranks and static dims."""
        from opc.onnx_import.graph import ELEMENT_TYPES, dtype_name

        for name, value in feeds.items():
            vi, elem, dims = self.declared[name]
            if name in self.list_inputs:
                self.check_list(f"input '{name}'", vi.type, value)
                continue
            if elem in ELEMENT_TYPES and value.dtype != ELEMENT_TYPES[elem][2]:
                raise ValueError(f"input '{name}' has dtype {value.dtype}, the model wants {dtype_name(elem).lower()}")
            if dims == [None]:
                continue
            if len(dims) != value.ndim:
                raise ValueError(f"input '{name}' has rank {value.ndim}, the model wants rank {len(dims)} {dims}")
            for i, (d, got) in enumerate(zip(dims, value.shape)):
                if isinstance(d, int) and d > 0 and d != got:
                    raise ValueError(f"input '{name}' has shape {list(value.shape)}: dim {i} must be {d}")

    def check_list(self, what: str, type_proto: Any, value: Any) -> None:
        """A sequence or optional input's arrays against the declared element dtype, rank and static dims."""
        from opc.onnx_import.graph import ELEMENT_TYPES, dtype_name

        kind = type_proto.WhichOneof("value")
        if kind == "optional_type":
            if value is not None:
                self.check_list(what, type_proto.optional_type.elem_type, value)
            return
        if kind == "sequence_type":
            if not isinstance(value, list):
                raise ValueError(f"{what} is a sequence: give a list of arrays")
            for k, v in enumerate(value):
                self.check_list(f"{what} item {k}", type_proto.sequence_type.elem_type, v)
            return
        if kind != "tensor_type" or not isinstance(value, np.ndarray):
            raise ValueError(f"{what} must be an array, got {type(value).__name__}")
        t = type_proto.tensor_type
        if t.elem_type in ELEMENT_TYPES and value.dtype != ELEMENT_TYPES[t.elem_type][2]:
            raise ValueError(f"{what} has dtype {value.dtype}, the model wants {dtype_name(t.elem_type).lower()}")
        if t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            if len(dims) != value.ndim or any(d is not None and d != got for d, got in zip(dims, value.shape)):
                raise ValueError(f"{what} has shape {list(value.shape)}, the model wants "
                                 f"{[d if d is not None else '?' for d in dims]}")

    def open_dims(self) -> bool:
        """Whether some input leaves a dim open (a dim_param, or no size): a `?` dim to compile once."""
        for vi in self.model.graph.input:
            if vi.name in self.input_names and vi.type.HasField("tensor_type"):
                if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
                    return True
        return False

    def variant(self, feeds: Mapping[str, Any]) -> Variant:
        from opc.onnx_import.lists import key_of

        if not self.specialize:
            dyn_key = tuple((n, v.dtype, v.ndim) for n, v in feeds.items())
            if dyn_key not in self.dynamic:
                self.dynamic[dyn_key] = self.build_dynamic()
            found = self.dynamic[dyn_key]
            if found is not None:
                return found

        key = tuple((n, key_of(v)) for n, v in feeds.items())
        for v in self.variants.get(key, []):
            if all(np.array_equal(feeds[n], value) for n, value in v.bound.items()):
                return v
        v = self.build(feeds)
        self.variants.setdefault(key, []).append(v)
        return v

    def build(self, feeds: Mapping[str, Any]) -> Variant:
        from opc.api import compile
        from opc.onnx_import import import_graph
        from opc.onnx_import.lists import shapes_of

        layouts: list[Any] = []
        module, params, bound = import_graph(self.model, {n: shapes_of(v) for n, v in feeds.items()}, feeds,
                                             self.where, layouts=layouts)
        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        compiled = compile(module, target=self.target, cache_dir=self.cache_dir)
        # the weights are the import's own arrays, never the caller's: bound once, not checked per call
        call = compiled[f.sym_name.data].with_last(cache_aligned(params.values()), frozen=True)
        return Variant(call, {n: feeds[n].copy() for n in bound}, layouts)

    def build_dynamic(self) -> Variant | None:
        """The variant with the open dims `?`, or None (static_reason says why) where an op needs a size
        at compile time (a Shape computed into a Reshape, a value read at import...)."""
        from opc.api import compile
        from opc.onnx_import import import_graph

        layouts: list[Any] = []
        try:
            module, params, _ = import_graph(self.model, None, None, self.where, layouts=layouts, dynamic=True)
            (f,) = list(module.ops)
            assert isinstance(f, func.FuncOp)
            compiled = compile(module, target=self.target, cache_dir=self.cache_dir)
        except Exception as err:  # noqa: BLE001  (any refusal: the per-shape path still runs the model)
            self.static_reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            return None
        return Variant(compiled[f.sym_name.data].with_last(cache_aligned(params.values()), frozen=True), {}, layouts)

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The outputs: arrays; lists of arrays for sequences, None for an empty optional, lists of dicts
        for ZipMap's maps."""
        signature = None if kwargs else repeat_signature(args)
        if signature is not None and (hit := self.repeats.get(signature)) is not None:
            v, grouped = hit
            out = v.call(*args)
            flat = list(out) if isinstance(out, tuple) else [out]
            return regroup_results(v.layouts, flat) if grouped else flat
        from opc.onnx_import.lists import TENSOR, flatten, regroup

        feeds = self.feeds(args, kwargs)
        self.check(feeds)
        v = self.variant(feeds)
        out = v.call(*[a for n, x in feeds.items() if n not in v.bound for a in flatten(x)])
        if signature is not None and not v.bound and not self.list_inputs and len(args) == len(self.input_names):
            if len(self.repeats) >= MAX_REPEATS:  # a model called with ever new shapes: keep the newest
                self.repeats.clear()
            self.repeats[signature] = (v, any(layout != TENSOR for layout in v.layouts))
        return regroup(v.layouts, list(out) if isinstance(out, tuple) else [out])


# Distinct input signatures OnnxModel remembers for its fast repeat path.
MAX_REPEATS = 64


def repeat_signature(args: Sequence[Any]) -> tuple | None:
    """The call's (dtype, shape) per argument where each is a plain ndarray (what check() and the
    variant's key depend on), else None."""
    signature = []
    for a in args:
        if type(a) is not np.ndarray:
            return None
        signature.append((a.dtype, a.shape))
    return tuple(signature)


def regroup_results(layouts: list[Any], flat: list[Any]) -> list[Any]:
    from opc.onnx_import.lists import regroup

    return regroup(layouts, flat)


def load_onnx(model: Any, target: str = "cpu", cache_dir: str | None = None,
              specialize: bool = False) -> OnnxModel:
    """An ONNX model (path or onnx.ModelProto) as a callable, compiled on first call: once for every size
    where its inputs' open dims (dim_param) can stay `?`, else (and with specialize=True) per input shape."""
    return OnnxModel(model, target, cache_dir, specialize)


def cache_aligned(weights: Iterable[np.ndarray]) -> list[np.ndarray]:
    """The weights, each starting on a 64-byte boundary (copied once where it does not): a weight
    read by vector loads that straddle cache lines, as one from the ONNX file's bytes may be (NumPy
    aligns to 16), cost an LSTM step's 1x128 @ 512x128 product a fifth of its time."""
    from opc.lowering.build import aligned_empty

    out = []
    for w in weights:
        if w.ctypes.data % 64 and w.size:
            copy = aligned_empty(w.shape, w.dtype)
            copy[...] = w
            w = copy
        out.append(w)
    return out
