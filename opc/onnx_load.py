"""ONNX models run as they come: shapes (and shape-like input values) known at the call.

    f = opc.load_onnx("model.onnx")        # nothing is compiled yet
    y = f(x)                               # imports + compiles for x's shape, then runs
    y = f(x2)                              # same shapes: the compiled module is reused

Each call's input shapes and dtypes pick a compiled variant (kept in memory, and on
disk: a variant compiled before, by any process, loads without an import or a pass,
opc/onnx_cache.py). An input that a converter needs
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
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opc import compile_cache, onnx_cache
from opc.onnx_import.lists import TENSOR, flatten, key_of, regroup, shapes_of


@dataclass
class Variant:
    call: Any  # the compiled function with the weights (its last arguments, our own arrays) bound
    bound: dict[str, np.ndarray]  # inputs whose values were compiled in
    layouts: list[Any]  # each output's layout: how to regroup the results into sequences (lists.regroup)


class OnnxModel:
    """A callable ONNX model: f(*inputs) or f(**inputs) -> list of outputs (NumPy arrays)."""

    def __init__(self, model: Any, target: str = "cpu", cache_dir: str | None = None,
                 specialize: bool = False) -> None:
        self.target = target
        self.cache_dir = cache_dir
        # compiles are found again on disk for the cpu target (the key: the model's bytes, onnx_cache.py)
        cached = target == "cpu" and (cache_dir is None or isinstance(cache_dir, (str, os.PathLike)))
        self.source = model
        self.path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
        self.where = self.path if self.path is not None else "<ModelProto>"
        self.weight_places: dict[str, Any] = {}  # initializer -> where its bytes lie in the file (onnx_cache)
        self.inputs: list[tuple[str, str, int, list[Any] | None]] = []  # onnx_cache.input_facts
        # the file's real path and stat when it is known by them (onnx_cache.file_state)
        self.file = onnx_cache.file_state(self.path) if cached and self.path is not None else None
        file_key = onnx_cache.file_key(self.file, target) if self.file is not None else None
        facts = compile_cache.read_note(file_key, cache_dir) if file_key is not None else None
        if not self.known(facts):
            self.parse(cached, file_key)
        self.input_names = [name for name, _, _, _ in self.inputs]
        # sequence and optional inputs: kept as lists (or None), each array an argument
        self.list_inputs = {name for name, kind, _, _ in self.inputs if kind in ("sequence_type", "optional_type")}
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

    def known(self, facts: Any) -> bool:
        """Whether the file's facts (onnx_cache.file_key's note) were found and read: then the model
        itself is parsed only if an import needs it."""
        try:
            digest, inputs, places = facts["digest"], facts["inputs"], facts["weights"]
            self.inputs = [(str(n), str(kind), int(elem), None if dims is None else list(dims))
                           for n, kind, elem, dims in inputs]
        except (KeyError, TypeError, ValueError):
            return False
        if not isinstance(digest, str) or not isinstance(places, dict):
            return False
        self.digest, self.weight_places = digest, places
        return True

    def parse(self, cached: bool, file_key: str | None) -> None:
        """The model read and checked (onnx.checker, unless these bytes passed it before), its digest
        taken, and where it is a file, its facts noted under `file_key` for the next load."""
        from opc.onnx_import.proto import onnx_module, read

        onnx = onnx_module()
        model = self.source
        if isinstance(model, onnx.ModelProto):
            own = onnx.ModelProto()
            own.CopyFrom(model)
            model = own
        self.model, data, whole_file = read(model, self.where, identify=cached)
        self.digest = None if data is None else onnx_cache.model_digest(data)
        self.checked()
        self.inputs = [(n, kind, elem, dims) for n, kind, elem, dims in onnx_cache.input_facts(self.model)]
        if file_key is not None and self.digest is not None:
            self.weight_places = onnx_cache.weight_places(self.model, data) if whole_file and data else {}
            compile_cache.write_note(file_key, {"digest": self.digest, "inputs": [list(f) for f in self.inputs],
                                                "weights": self.weight_places}, self.cache_dir)

    @functools.cached_property
    def model(self) -> Any:
        """The ModelProto, parsed where the file's facts were found in the cache and an import needs it;
        an InputError where the file no longer holds the bytes those facts describe."""
        from opc.errors import InputError
        from opc.onnx_import.proto import read

        model, data, _ = read(self.source, self.where, identify=True)
        if data is None or onnx_cache.model_digest(data) != self.digest:
            raise InputError(f"{self.where} changed since it was loaded: load it again (opc.load_onnx)")
        return model

    @functools.cached_property
    def inference_model(self) -> Any:
        """The model as it is imported: each BatchNorm after a Conv folded into it (onnx_import/fold.py)."""
        from opc.onnx_import.fold import fold_batch_norms

        return fold_batch_norms(self.model)

    def checked(self) -> None:
        """onnx.checker on the model, unless these bytes passed it before (a note in the cache)."""
        from opc.onnx_import.proto import check

        key = self.cache_key("checked")
        if key is not None and compile_cache.read_note(key, self.cache_dir) is not None:
            return
        check(self.model, self.where)
        if key is not None:
            compile_cache.write_note(key, {"passed": True}, self.cache_dir)

    def cache_key(self, *variant: str) -> str | None:
        """The cache key of a fact about this model, or None where its compiles are not cached."""
        return None if self.digest is None else onnx_cache.key(self.digest, self.target, *variant)

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
        kind = next(k for n, k, _, _ in self.inputs if n == name)
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
    def declared(self) -> dict[str, tuple[int, list[int | str | None]]]:
        """Each graph input's (element type, dims as proto.dims_of gives them)."""
        return {n: (elem, [None] if dims is None else dims) for n, _, elem, dims in self.inputs}

    def check(self, feeds: Mapping[str, Any]) -> None:
        """A call's inputs against the graph's declared dtypes, ranks and static dims."""
        for name, value in feeds.items():
            elem, dims = self.declared[name]
            if name in self.list_inputs:
                vi = next(vi for vi in self.model.graph.input if vi.name == name)
                self.check_list(f"input '{name}'", vi.type, value)
                continue
            if (want := declared_dtype(elem)) is not None and value.dtype != want:
                from opc.onnx_import.proto import dtype_name

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
        from opc.onnx_import.proto import TENSOR_TYPES, dtype_name

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
        if t.elem_type in TENSOR_TYPES and value.dtype != TENSOR_TYPES[t.elem_type][1]:
            raise ValueError(f"{what} has dtype {value.dtype}, the model wants {dtype_name(t.elem_type).lower()}")
        if t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            if len(dims) != value.ndim or any(d is not None and d != got for d, got in zip(dims, value.shape)):
                raise ValueError(f"{what} has shape {list(value.shape)}, the model wants "
                                 f"{[d if d is not None else '?' for d in dims]}")

    def open_dims(self) -> bool:
        """Whether some input leaves a dim open (a dim_param, or no size): a `?` dim to compile once."""
        return any(kind == "tensor_type" and dims is not None and any(not isinstance(d, int) for d in dims)
                   for _, kind, _, dims in self.inputs)

    def variant(self, feeds: Mapping[str, Any]) -> Variant:
        if not self.specialize:
            dyn_key = tuple((n, v.dtype, v.ndim) for n, v in feeds.items())
            if dyn_key not in self.dynamic:
                self.dynamic[dyn_key] = self.build_dynamic(dyn_key)
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
        from opc.onnx_import import import_graph

        shape_key = self.cache_key("shapes", repr(tuple((n, key_of(v)) for n, v in feeds.items())))
        if shape_key is not None:  # the note names the inputs the import binds (their values join the key)
            note = compile_cache.read_note(shape_key, self.cache_dir)
            names = note.get("bound") if isinstance(note, dict) else None
            key = onnx_cache.bound_key(shape_key, names, feeds) if isinstance(names, list) else None
            found = self.cached(key, feeds) if key is not None else None
            if found is not None:
                return found
        layouts: list[Any] = []
        weights: list[str] = []
        module, params, bound = import_graph(self.inference_model, {n: shapes_of(v) for n, v in feeds.items()}, feeds,
                                             self.where, layouts=layouts, weight_sources=weights, checked=True)
        key = None if shape_key is None else onnx_cache.bound_key(shape_key, bound, feeds)
        compiled, function = self.compile(module, key, weights, bound, layouts)
        if key is not None and shape_key is not None:
            compile_cache.write_note(shape_key, {"bound": list(bound)}, self.cache_dir)
        # the weights are the import's own arrays, never the caller's: bound once, not checked per call
        call = compiled[function].with_last(cache_aligned(params.values()), frozen=True)
        return Variant(call, {n: feeds[n].copy() for n in bound}, layouts)

    def build_dynamic(self, dyn_key: tuple) -> Variant | None:
        """The variant with the open dims `?`, or None (static_reason says why) where an op needs a size
        at compile time (a Shape computed into a Reshape, a value read at import...)."""
        from opc.errors import BuildError
        from opc.onnx_import import import_graph

        key = self.cache_key("dynamic", repr(dyn_key))
        note = compile_cache.read_note(key, self.cache_dir) if key is not None else None
        if isinstance(note, dict) and isinstance(note.get("refused"), str):
            self.static_reason = note["refused"]
            return None
        found = self.cached(key, {}) if key is not None else None
        if found is not None:
            return found
        layouts: list[Any] = []
        weights: list[str] = []
        try:
            module, params, _ = import_graph(self.inference_model, None, None, self.where, layouts=layouts,
                                             dynamic=True, weight_sources=weights, checked=True)
            compiled, function = self.compile(module, key, weights, [], layouts)
        except Exception as err:  # noqa: BLE001  (any refusal: the per-shape path still runs the model)
            self.static_reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if key is not None and not isinstance(err, (BuildError, OSError)):  # (a build may pass next time)
                compile_cache.write_note(key, {"refused": self.static_reason}, self.cache_dir)
            return None
        return Variant(compiled[function].with_last(cache_aligned(params.values()), frozen=True), {}, layouts)

    def compile(self, module: Any, key: str | None, weights: list[str], bound: list[str],
                layouts: list[Any]) -> tuple[Any, str]:
        """(the imported function compiled, its name), recorded under `key` with what a hit needs."""
        from xdsl.dialects import func

        from opc.api import compile, full_compile, load_extension_name

        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        function = f.sym_name.data
        if key is None:
            return compile(module, target=self.target, cache_dir=self.cache_dir), function
        compiled, sigs = full_compile(module, self.target, cache_dir=self.cache_dir)
        entry = onnx_cache.extra(function, weights, bound, layouts)
        if sigs is not None and entry is not None:
            compile_cache.store(key, compiled, sigs, load_extension_name(compiled), self.cache_dir, entry)
        return compiled, function

    def cached(self, key: str, feeds: Mapping[str, Any]) -> Variant | None:
        """The variant compiled before under `key`, its weights read from the model, or None."""
        found = compile_cache.lookup_entry(key, self.cache_dir)
        if found is None:
            return None
        module, entry = found
        try:
            function, bound = module[entry["function"]], {n: feeds[n].copy() for n in entry["bound"]}
            weights = self.initializers(entry["weights"])
            layouts = list(onnx_cache.as_tuples(entry["layouts"]))
        except (KeyError, TypeError, ValueError, AttributeError):  # a record this opc did not write
            return None
        return Variant(function.with_last(cache_aligned(weights), frozen=True), bound, layouts)

    def initializers(self, names: list[str]) -> list[np.ndarray]:
        """The named initializers as arrays, as the import reads them (graph.read_initializers); a folded
        one (onnx_import/fold.py) computed again from the ones it comes from."""
        from opc.onnx_import.fold import compute, is_folded, sources

        if any(is_folded(n) for n in names):
            uses = Counter(s for n in names for s in (sources(n) if is_folded(n) else [n]))
            plain = sorted(uses)
            arrays = dict(zip(plain, self.file_initializers(plain)))
            # a conv weight read by its folded weight alone is scaled where it was read
            return cache_aligned([compute(n, lambda ns: [arrays[m] for m in ns], uses[sources(n)[0]] == 1)
                                  if is_folded(n) else arrays[n] for n in names])
        return self.file_initializers(names)

    def file_initializers(self, names: list[str]) -> list[np.ndarray]:
        """The named initializers of the model's file (or ModelProto) as arrays."""
        found = None if self.file is None else onnx_cache.read_weights(*self.file, self.weight_places, names)
        if found is not None:
            return found
        from onnx import numpy_helper

        by_name = {t.name: t for t in self.model.graph.initializer}
        base = os.path.dirname(self.where) if os.path.isfile(self.where) else ""
        return [raw_aligned(by_name[n]) if by_name[n].data_type in RAW_DTYPES and by_name[n].HasField("raw_data")
                else numpy_helper.to_array(by_name[n], base_dir=base) for n in names]

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The outputs: arrays; lists of arrays for sequences, None for an empty optional, lists of dicts
        for ZipMap's maps."""
        signature = None if kwargs else repeat_signature(args)
        if signature is not None and (hit := self.repeats.get(signature)) is not None:
            v, grouped = hit
            out = v.call(*args)
            flat = list(out) if isinstance(out, tuple) else [out]
            return regroup(v.layouts, flat) if grouped else flat
        feeds = self.feeds(args, kwargs)
        self.check(feeds)
        v = self.variant(feeds)
        out = v.call(*[a for n, x in feeds.items() if n not in v.bound for a in flatten(x)])
        if signature is not None and not v.bound and not self.list_inputs and len(args) == len(self.input_names):
            if len(self.repeats) >= MAX_REPEATS:  # a model called with ever new shapes: keep the newest
                self.repeats.clear()
            self.repeats[signature] = (v, any(layout != TENSOR for layout in v.layouts))
        return regroup(v.layouts, list(out) if isinstance(out, tuple) else [out])


def declared_dtype(elem: int) -> np.dtype | None:
    """The NumPy dtype of ONNX element type `elem`; ml_dtypes (0.5 s to import with NumPy 2.4) only
    imported for the types it holds."""
    if elem in onnx_cache.PLAIN_TYPES:
        return np.dtype(onnx_cache.PLAIN_TYPES[elem])
    from opc.onnx_import.proto import TENSOR_TYPES

    return TENSOR_TYPES[elem][1] if elem in TENSOR_TYPES else None


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


def load_onnx(model: Any, target: str = "cpu", cache_dir: str | None = None,
              specialize: bool = False) -> OnnxModel:
    """An ONNX model (path or onnx.ModelProto) as a callable, compiled on first call: once for every size
    where its inputs' open dims (dim_param) can stay `?`, else (and with specialize=True) per input shape."""
    return OnnxModel(model, target, cache_dir, specialize)


# f32 and f64 tensors whose bytes are raw_data: read straight into a 64-byte aligned array (to_array and
# cache_aligned's copy took 70 ms of a cached ResNet-18 load's 260)
RAW_DTYPES = {1: np.dtype("<f4"), 11: np.dtype("<f8")}


def raw_aligned(tensor: Any) -> np.ndarray:
    from opc.lowering.build import aligned_empty

    dtype = RAW_DTYPES[tensor.data_type]
    raw = np.frombuffer(tensor.raw_data, dtype)
    out = aligned_empty(tuple(tensor.dims), dtype.newbyteorder("="))
    out.reshape(-1)[...] = raw
    return out


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
