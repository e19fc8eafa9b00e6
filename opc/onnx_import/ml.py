"""ai.onnx.ml, the classical-ML domain, where its ops are numbers: each composed from opc ops.

    Binarizer(X) {threshold}                   -> X > threshold ? 1 : 0, in X's type
    ArrayFeatureExtractor(X, Y)                -> X[..., Y] (Y flattened; a 1-D X gives one row)
    LabelEncoder(X) {keys_*, values_*, default_*}  -> each element's value, or the default

(The tree ensembles are in trees.py.)

LabelEncoder compares each element with every key (an [..., K] equality), takes the last key that
matches (as the spec says, and a dict built from the pairs keeps it) and gathers its value; from
ai.onnx.ml opset 4 a NaN key matches a NaN element (before, as in onnxruntime, nothing). Keys or values that are
strings are refused: opc has no string tensors.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import Values, numpy_of, scalar
from opc.onnx_import.graph import BY_NUMPY, Node, converter

ML = "ai.onnx.ml"


def tensor_attr(node: Node, name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    value = node.attr(name)
    return None if value is None else numpy_helper.to_array(value)


def strings(node: Node, name: str) -> tuple[str, ...] | None:
    """A list-of-strings attribute (onnx.helper gives bytes), None when absent."""
    value = node.attr(name)
    return None if value is None else tuple(s.decode() if isinstance(s, bytes) else str(s) for s in value)


def bool_constant(node: Node, value: bool, shape: tuple[int, ...] = ()) -> SSAValue:
    return node.e.constant(np.full(shape, value, np.bool_))


def either(node: Node, a: SSAValue, b: SSAValue) -> SSAValue:
    """a or b, elementwise."""
    return node.e.select(a, bool_constant(node, True), b)


def is_nan(node: Node, x: SSAValue) -> SSAValue:
    return node.e.select(node.e.value(o.EqualOp(x, x)), bool_constant(node, False), bool_constant(node, True))


@converter(f"{ML}.Binarizer", since=1)
def binarizer(node: Node) -> Values:
    x = node.input(0)
    threshold = float(node.attr("threshold", 0.0))
    if numpy_of(x).kind in "iu":  # an integer is above t when it is above floor(t)
        threshold = math.floor(threshold)
    above = node.e.value(o.GreaterThanOp(x, scalar(node, threshold, x)))
    return [node.e.select(above, scalar(node, 1, x), scalar(node, 0, x))]


@converter(f"{ML}.ArrayFeatureExtractor", since=1)
def array_feature_extractor(node: Node) -> Values:
    x, y = node.input(0), node.input(1)
    shape = list(shape_of(x))
    count = math.prod(shape_of(y))
    flat = node.e.reshape(y, [count])
    if element_of(flat) != BY_NUMPY[np.dtype(np.int64)]:
        raise node.fail(f"Y must be int64, got {element_of(flat)}")
    out = node.e.value(o.GatherOp(x, flat, len(shape) - 1))
    return [node.e.reshape(out, [1, count] if len(shape) == 1 else [*shape[:-1], count])]


# LabelEncoder's attributes by what they hold: (keys or values, their NumPy type); ml opset 4 adds tensors
KEYS = {"keys_int64s": np.int64, "keys_floats": np.float32, "keys_tensor": None}
VALUES = {"values_int64s": np.int64, "values_floats": np.float32, "values_tensor": None}
DEFAULTS = {np.dtype(np.int64): ("default_int64", -1), np.dtype(np.float32): ("default_float", -0.0)}


def label_encoder_table(node: Node, table: dict, what: str) -> np.ndarray:
    """The keys (or values) as an array, from whichever attribute holds them; strings refused."""
    strings = f"{what}_strings"
    if node.attr(strings) is not None or (what == "keys" and node.attr("classes_strings") is not None):
        raise node.fail(f"{what} are strings: opc has no string tensors")
    found = [(name, t) for name, t in table.items() if node.attr(name) is not None]
    if len(found) != 1:
        raise node.fail(f"one attribute of {', '.join(table)} must hold the {what}, found {len(found)}")
    name, dtype = found[0]
    if dtype is None:
        array = tensor_attr(node, name)
        assert array is not None
        if array.dtype.kind not in "iuf":
            raise node.fail(f"{name} holds {array.dtype} values: opc has no string tensors")
        return array.reshape(-1)
    return np.asarray(node.attr(name), dtype)


@converter(f"{ML}.LabelEncoder", since=1)
def label_encoder(node: Node) -> Values:
    keys = label_encoder_table(node, KEYS, "keys")
    values = label_encoder_table(node, VALUES, "values")
    if len(keys) != len(values):
        raise node.fail(f"{len(keys)} keys for {len(values)} values")
    x = node.input(0)
    if numpy_of(x) != keys.dtype:
        raise node.fail(f"X has type {numpy_of(x)}, the keys {keys.dtype}")
    if node.attr("values_tensor") is not None:
        default = tensor_attr(node, "default_tensor")
        fallback = np.array([-1 if values.dtype.kind in "iu" else -0.0], values.dtype)
        default = fallback if default is None else default.reshape(-1).astype(values.dtype)
    else:
        name, value = DEFAULTS[values.dtype]
        default = np.array([node.attr(name, value)], values.dtype)
    e = node.e
    shape = list(shape_of(x))
    # the position (1 + key index) of the last key equal to each element, 0 where none is
    column = e.reshape(x, [*shape, 1])
    found = e.value(o.EqualOp(column, e.constant(keys)))
    if keys.dtype.kind == "f" and np.isnan(keys).any() and node.opset >= 4:  # from 4 a NaN key matches a NaN
        nan_keys = bool_constant(node, True, (1,) * len(shape) + (len(keys),))
        found = e.select(e.constant(np.isnan(keys)), e.select(is_nan(node, column), nan_keys,
                                                              bool_constant(node, False)), found)
    positions = e.constant(np.arange(1, len(keys) + 1, dtype=np.int64))
    position = e.value(o.ReduceMaxOp(e.select(found, positions, e.constant(np.array(0, np.int64))), [len(shape)],
                                     False))
    return [e.value(o.GatherOp(e.constant(np.concatenate([default[:1], values])), position, 0))]
