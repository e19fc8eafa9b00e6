"""ONNX sequences and optionals as opc imports them: lists fixed at compile time.

opc functions take and return tensors only, so at import a sequence is a Python
list of tensors (SSA values, or arrays known at compile time) whose length is
known at compile time, and an optional holds 0 or 1 of them (a tensor or a
sequence). A sequence graph input of k tensors is k function arguments, a
sequence output k results: callers flatten their list inputs into arguments
(`flatten`) and regroup the results (`regroup`) by the layout the import
reports; the lengths join the compile key as shapes do (`shapes_of`).

In a call, as onnx's test data and onnxruntime have them: a sequence is a list
of arrays, an empty optional None, an optional with a value that value.

Two more kinds are values the caller receives as Python objects where opc computes
a tensor, graph outputs only: ZipMap's sequence of maps (`Maps`: the probabilities
[N, K], each row a dict {label: float} after the call) and a classifier's string
labels (`Labels`: int64 indices into the labels, a NumPy array of str after the
call, as onnxruntime returns string tensors). Strings never reach the C.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    Value = SSAValue | np.ndarray
else:  # a call of a model whose compile was cached (onnx_load) flattens and regroups without importing xDSL
    Value = Any


@dataclass(frozen=True)
class Seq:
    """A sequence value at import: its tensors in order."""

    items: tuple[Value, ...] = ()


@dataclass(frozen=True)
class Appended(Seq):
    """A sequence a Loop carries, as its body sees it: the tensors it held before this iteration live
    in the loop's stacked buffers, known only at run time, so the body may only append to it
    (SequenceInsert at the back); `items` are the tensors this iteration appended."""


@dataclass(frozen=True)
class Opt:
    """An optional value at import: None (empty), a tensor or a Seq."""

    item: Value | Seq | None = None


@dataclass(frozen=True)
class Maps:
    """ZipMap's output: one map {label: probability} per row of `item` ([N, K], or [K] for one row)."""

    item: Value
    labels: tuple[int | str, ...]


@dataclass(frozen=True)
class Labels:
    """Class labels that are strings: `item` holds each one's index into `labels` (int64)."""

    item: Value
    labels: tuple[str, ...]


Item = Value | Seq | Opt | Maps | Labels
Items = list[Item]  # what a converter of sequences and optionals returns

# A graph output's layout, to regroup the flat results: TENSOR (one result), ("sequence", [layouts]),
# ("optional", layout or None when empty), ("maps", labels), ("labels", labels).
TENSOR = "tensor"


def is_list(v: Any) -> bool:
    """Whether v is no plain tensor: a sequence, an optional, or a value returned as Python objects."""
    return isinstance(v, (Seq, Opt, Maps, Labels))


def layout_of(v: Item) -> Any:
    if isinstance(v, Seq):
        return ("sequence", [layout_of(x) for x in v.items])
    if isinstance(v, Opt):
        return ("optional", None if v.item is None else layout_of(v.item))
    if isinstance(v, Maps):
        return ("maps", v.labels)
    if isinstance(v, Labels):
        return ("labels", v.labels)
    return TENSOR


def leaves(v: Item) -> list[Value]:
    """The tensors of a value, in argument (and result) order."""
    if isinstance(v, Seq):
        return [x for item in v.items for x in leaves(item)]
    if isinstance(v, Opt):
        return [] if v.item is None else leaves(v.item)
    if isinstance(v, (Maps, Labels)):
        return [v.item]
    return [v]


def regroup(layouts: Sequence[Any], results: Sequence[Any]) -> list[Any]:
    """A function's flat results as the graph's outputs: lists for sequences, None for empty optionals."""
    it = iter(results)
    out = [take(layout, it) for layout in layouts]
    if next(it, None) is not None:
        raise ValueError(f"{len(results)} results do not fit the layout {layouts}")
    return out


def take(layout: Any, it: Iterator[Any]) -> Any:
    if layout == TENSOR:
        return next(it)
    kind, inner = layout
    if kind == "sequence":
        return [take(x, it) for x in inner]
    if kind == "maps":  # onnxruntime's ZipMap: Python floats (the float32 values), keys sorted (a std::map)
        rows = np.asarray(next(it))
        return [dict(sorted(zip(inner, row.tolist()))) for row in rows.reshape(-1, len(inner))]
    if kind == "labels":
        return np.asarray(inner, dtype=object)[np.asarray(next(it))]
    return None if inner is None else take(inner, it)


def flatten(value: Any) -> list[np.ndarray]:
    """A call's input as function arguments: a list's arrays in order, nothing for None."""
    if value is None:
        return []
    if isinstance(value, list):
        return [a for v in value for a in flatten(v)]
    return [np.asarray(value)]


def shapes_of(value: Any) -> Any:
    """An input's shape for import: a tuple for an array, a list of shapes for a sequence, None when empty."""
    if value is None:
        return None
    if isinstance(value, list):
        return [shapes_of(v) for v in value]
    return tuple(np.shape(value))


def key_of(value: Any) -> Any:
    """An input's part of a compile key: dtypes and shapes, the structure of lists."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(key_of(v) for v in value)
    a = np.asarray(value)
    return (a.dtype.str, a.shape)
