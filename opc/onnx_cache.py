"""opc.load_onnx's compiles found again: a model compiled before, in this process or another, loads
its extension and binds its weights without importing the model or running a pass (for ResNet-18
that import and the passes take 0.7 s; a hit, tens of ms, most of them hashing and parsing the model).

The key (`key`): the model's bytes as proto.read names them (the file's bytes; the proto serialized
where it was given in memory or keeps external data) by SHA-256, the variant, the installed onnx's
version (its checker, shape inference and folding shape the import), the target ("cpu" only), and
compile_cache's flavor (OPC_SANITIZE, CC...) and opc's code digest. The variants:

- dynamic: each input's dtype and rank (the open dims stay `?`);
- per shape: each input's dtype and shape, then (`bound_key`) the values of the inputs the import
  bound, which a note under the shape's key names (no input, for most models).

The entry is compile_cache's record, with as its extra (`extra`): the function's name, the initializers
its weights are in order (read from the model again at a hit: the key holds their bytes, and the import
passes them on unchanged), the inputs bound and the outputs' layouts. Notes (compile_cache.write_note)
keep two more facts: a model that passed onnx.checker (0.1 s for ResNet-18, not run again on the same
bytes), and a dynamic import that failed, with why (a later process goes straight to the per-shape
variants). A record that is gone, cut short or corrupt is a miss, and the compile runs again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opc.compile_cache import code_digest, flavor
from opc.lowering.build import content_key


def model_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key(digest: str, target: str, *variant: str) -> str:
    """The key of a fact about the model `digest` (its variant, or "checked")."""
    import onnx

    return content_key("onnx", digest, target, onnx.__version__, *variant, flavor(), code_digest(), length=32)


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
