"""opc.load_onnx's compiles found again: a model compiled before, in this process or another, loads
its extension and binds its weights without importing the model or running a pass (for ResNet-18
that import and the passes take 0.7 s; a hit, 20-40 ms).

The key (`key`): the model's bytes as proto.read names them (the file's bytes; the proto serialized
where it was given in memory or keeps external data) by SHA-256, the variant, the installed onnx
(`onnx_version`: its checker, shape inference and folding shape the import), the target ("cpu" only), and
compile_cache's flavor (OPC_SANITIZE, CC...) and opc's code digest. The variants:

- dynamic: each input's dtype and rank (the open dims stay `?`);
- per shape: each input's dtype and shape, then (`bound_key`) the values of the inputs the import
  bound, which a note under the shape's key names (no input, for most models).

A model given as a file path is found again before it is even parsed (`file_key`): a note
under the file's path and stat (size, mtime, ctime, inode: what git trusts for its index) holds its
digest, its inputs' names, kinds, dtypes and dims (`input_facts`), and where each initializer's raw bytes lie in the
file (`weight_places`). A hit then imports neither onnx nor protobuf and reads the weights straight from the file into
one buffer (`read_weights`: for ResNet-18, hashing and parsing the file took 60 ms, and importing onnx
and ml_dtypes 0.5 s). A changed file has another stat, so another key; one changed in the last two seconds
is parsed (RACY_S).

The entry is compile_cache's record, with as its extra (`extra`): the function's name, the initializers
its weights are in order (read from the model again at a hit: the key holds their bytes, and the import
passes them on unchanged), the inputs bound and the outputs' layouts. Notes (compile_cache.write_note)
keep two more facts: a model that passed onnx.checker (0.1 s for ResNet-18, not run again on the same
bytes), and a dynamic import that failed, with why (a later process goes straight to the per-shape
variants). A record that is gone, cut short or corrupt is a miss, and the compile runs again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opc.compile_cache import code_digest, flavor
from opc.lowering.build import content_key


def model_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.cache
def onnx_version() -> str:
    """Which onnx is installed, without importing it (0.5 s) or importlib.metadata (16 ms): its package's
    path and that file's stat, which an install or upgrade changes; "none" where there is none."""
    import importlib.util

    spec = importlib.util.find_spec("onnx")
    origin = spec.origin if spec is not None else None
    if origin is None:
        return "none"
    try:
        st = os.stat(origin)
    except OSError:
        return "none"
    return f"{origin}\0{st.st_size}\0{st.st_mtime_ns}"


def key(digest: str, target: str, *variant: str) -> str:
    """The key of a fact about the model `digest` (its variant, or "checked")."""
    return content_key("onnx", digest, target, onnx_version(), *variant, flavor(), code_digest(), length=32)


# A file changed this recently (seconds) is not known by its stat: a second write within the
# timestamps' granularity (a clock tick, 4 ms) would leave it the same (git's "racy clean" files).
RACY_S = 2.0


def file_state(path: str) -> tuple[str, str] | None:
    """(the real path, its stat as a string: size, mtime, ctime, inode, device) of the model file at
    `path`, or None where it cannot be read or was written too recently to be known by its stat (RACY_S)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    if time.time() - st.st_mtime < RACY_S:
        return None
    return real, stat_signature(st)


def stat_signature(st: os.stat_result) -> str:
    return f"{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}"


def file_key(state: tuple[str, str], target: str) -> str:
    """The key of the facts about the model file in `state` (file_state)."""
    return content_key("onnx-file", *state, target, onnx_version(), flavor(), code_digest(), length=32)


def input_facts(model: Any) -> list[list[Any]]:
    """Each graph input's [name, kind (the type's oneof), element type, dims (proto.dims_of's, None
    where it has no shape)], the initializers left out."""
    from opc.onnx_import.proto import dims_of

    init_names = {t.name for t in model.graph.initializer}
    facts = []
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        kind, t = vi.type.WhichOneof("value"), vi.type.tensor_type
        dims = dims_of(vi) if kind == "tensor_type" and t.HasField("shape") else None
        facts.append([vi.name, kind, t.elem_type if kind == "tensor_type" else 0, dims])
    return facts


# element types NumPy holds without ml_dtypes, as the dtypes of their raw little-endian bytes (the
# arrays onnx.numpy_helper.to_array gives)
PLAIN_TYPES = {1: "<f4", 2: "|u1", 3: "|i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "|b1", 10: "<f2",
                11: "<f8", 12: "<u4", 13: "<u8"}


def weight_places(model: Any, data: bytes) -> dict[str, list[Any]]:
    """Where each initializer's raw bytes lie in the file's bytes `data`: name -> [offset, dtype, dims],
    for the element types PLAIN_TYPES names. Found by searching for the bytes themselves (protobuf
    keeps no offsets), each search starting where the previous tensor's ended (the file keeps them in
    order): an earlier match of the same bytes is the same values."""
    places: dict[str, list[Any]] = {}
    start = 0
    for t in model.graph.initializer:
        if t.data_type not in PLAIN_TYPES or not t.HasField("raw_data") or t.data_location == 1:
            continue
        raw = t.raw_data
        dims = [int(d) for d in t.dims]
        if len(raw) != int(np.prod(dims, dtype=np.int64)) * np.dtype(PLAIN_TYPES[t.data_type]).itemsize:
            continue
        at = data.find(raw, start) if raw else 0
        if at < 0:
            at = data.find(raw)
        if at < 0:
            continue
        places[t.name] = [at, PLAIN_TYPES[t.data_type], dims]
        start = at + len(raw)
    return places


def read_at(f: Any, offset: int, into: memoryview) -> bool:
    """Whether `into` was filled from the file's bytes at `offset` (a read may return fewer: over 2 GB)."""
    f.seek(offset)
    got = 0
    while got < len(into):
        n = f.readinto(into[got:])
        if not n:
            return False
        got += n
    return True


def read_weights(path: str, signature: str, places: Mapping[str, Sequence[Any]],
                 names: Sequence[str]) -> list[np.ndarray] | None:
    """The named initializers read from the file at their places, each starting on a 64-byte boundary
    of one buffer that starts on a 2 MB one (NumPy asks the kernel for huge pages on a buffer that
    large: ResNet-18's 47 MB then read in 14 ms, not 50), or None where one has no place, the file's
    stat is no longer `signature` (it changed since its facts were read) or the read falls short."""
    if any(n not in places for n in names):
        return None
    layout, total = [], 0
    for n in names:
        offset, dtype, dims = places[n]
        dt = np.dtype(dtype)
        nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
        layout.append((total, int(offset), nbytes, dt.newbyteorder("="), tuple(dims)))
        total += (nbytes + 63) // 64 * 64
    huge = 1 << 21
    raw = np.empty(total + huge, np.uint8)
    buf = raw[-raw.ctypes.data % huge:][:total]
    out = []
    try:
        with open(path, "rb", buffering=0) as f:
            if stat_signature(os.fstat(f.fileno())) != signature:
                return None
            for at, offset, nbytes, dt, dims in layout:
                view = buf[at:at + nbytes]
                if not read_at(f, offset, memoryview(view.data)):
                    return None
                out.append(view.view(dt).reshape(dims))
    except OSError:
        return None
    return out


def bound_key(shape_key: str, names: Sequence[str], feeds: Mapping[str, Any]) -> str | None:
    """The per-shape variant's key with the bound inputs' values, or None where one is no array."""
    parts: list[str | bytes] = []
    for name in names:
        value = feeds.get(name)
        if not isinstance(value, np.ndarray):
            return None
        parts += [name, value.dtype.str, repr(value.shape), np.ascontiguousarray(value).tobytes()]
    return content_key(shape_key, *parts, length=32)


def extra(function: str, weights: Sequence[str], bound: Sequence[str], layouts: Sequence[Any]) -> Any:
    """What a hit needs besides the module, as JSON; None where the layouts are no JSON (then the
    variant is not recorded)."""
    entry = {"function": function, "weights": list(weights), "bound": list(bound), "layouts": list(layouts)}
    try:
        json.dumps(entry)
    except (TypeError, ValueError):
        return None
    return entry


def as_tuples(layout: Any) -> Any:
    """A layout read back from JSON: its lists as the import's tuples."""
    return tuple(as_tuples(x) for x in layout) if isinstance(layout, list) else layout
