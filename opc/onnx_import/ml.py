"""ai.onnx.ml, the classical-ML domain, where its ops are numbers: each composed from opc ops.

    Binarizer(X) {threshold}                   -> X > threshold ? 1 : 0, in X's type
    ArrayFeatureExtractor(X, Y)                -> X[..., Y] (Y flattened; a 1-D X gives one row)
    LabelEncoder(X) {keys_*, values_*, default_*}  -> each element's value, or the default
    Scaler(X) {offset, scale}                  -> (X - offset) * scale in float32, per feature (the last axis)
    Normalizer(X) {norm}                       -> each row over its max (MAX), sum |x| (L1) or sqrt(sum x^2)
                                                  (L2), in float32; a row whose divisor is 0 as it is
    Imputer(X) {imputed_value_*, replaced_value_*}  -> X with each element equal to the replaced value
                                                  (NaN: a NaN) set to its feature's imputed value
    OneHotEncoder(X) {cats_int64s, zeros}      -> [..., categories] float32 rows, 1 at each element's
                                                  category (a float truncated toward 0, as onnxruntime
                                                  compares), none for another (zeros=0: an IndexError)
    LinearRegressor(X) {coefficients, intercepts, targets}  -> X @ coefficients^T + intercepts, float32

onnxruntime's semantics where the spec leaves room: Normalizer's L2 keeps the sign (the spec's formula,
sqrt(x^2 / sum x^2), would not), and a row of zeros (or, under MAX, a row whose largest value is 0)
comes back as it is. (LinearClassifier and ZipMap are in classifiers.py, the tree ensembles in trees.py.)

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
from opc.onnx_import.common import F32, Values, numpy_of, scalar
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


def as_float32(node: Node, x: SSAValue) -> SSAValue:
    """X in float32, as these ops compute (integers and float64 converted)."""
    return x if numpy_of(x) == np.float32 else node.e.cast(x, F32)


def per_feature(node: Node, name: str, values: np.ndarray, features: int, dtype: type) -> SSAValue:
    """An attribute of one value or one per feature (the last axis), as a constant that broadcasts."""
    if values.size not in (1, features):
        raise node.fail(f"{name} has {values.size} values for {features} features: 1 or one per feature")
    return node.e.constant(values.astype(dtype).reshape(-1 if values.size > 1 else ()))


@converter(f"{ML}.Scaler", since=1)
def scaler(node: Node) -> Values:
    x = as_float32(node, node.input(0))
    features = shape_of(x)[-1] if shape_of(x) else 1
    offset = per_feature(node, "offset", np.asarray(node.attr("offset") or [0.0]), features, np.float32)
    scale = per_feature(node, "scale", np.asarray(node.attr("scale") or [1.0]), features, np.float32)
    return [node.e.mul(node.e.sub(x, offset), scale)]


NORMS = ("MAX", "L1", "L2")


@converter(f"{ML}.Normalizer", since=1)
def normalizer(node: Node) -> Values:
    norm = node.attr("norm", "MAX")
    if norm not in NORMS:
        raise node.fail(f"norm '{norm}' is not one of {', '.join(NORMS)}")
    e, x = node.e, as_float32(node, node.input(0))
    if len(shape_of(x)) not in (1, 2):
        raise node.fail(f"X must be [N, C] or [C], got {x.type}")
    axis = len(shape_of(x)) - 1
    if norm == "MAX":
        d = e.value(o.ReduceMaxOp(x, [axis], True))
    elif norm == "L1":
        d = e.reduce_sum(e.value(o.AbsOp(x)), [axis], keepdim=True)
    else:
        d = e.value(o.SqrtOp(e.reduce_sum(e.mul(x, x), [axis], keepdim=True)))
    zero = e.value(o.EqualOp(d, scalar(node, 0.0, d)))
    return [e.div(x, e.select(zero, scalar(node, 1.0, d), d))]


@converter(f"{ML}.Imputer", since=1)
def imputer(node: Node) -> Values:
    e, x = node.e, node.input(0)
    kind = numpy_of(x).kind
    features = shape_of(x)[-1] if shape_of(x) else 1
    if kind == "f":
        imputed, replaced = node.attr("imputed_value_floats"), float(node.attr("replaced_value_float", 0.0))
    else:
        imputed, replaced = node.attr("imputed_value_int64s"), int(node.attr("replaced_value_int64", 0))
    if not imputed:
        raise node.fail(f"imputed_value_{'floats' if kind == 'f' else 'int64s'} must give the value(s) for X's "
                        f"{numpy_of(x)} elements")
    fill = per_feature(node, "the imputed values", np.asarray(imputed), features, numpy_of(x).type)
    hit = is_nan(node, x) if kind == "f" and math.isnan(replaced) else e.value(o.EqualOp(x, scalar(node, replaced, x)))
    return [e.select(hit, e.broadcast_to(fill, shape_of(x)), x)]


@converter(f"{ML}.OneHotEncoder", since=1)
def one_hot_encoder(node: Node) -> Values:
    if node.attr("cats_strings") is not None:
        raise node.fail("cats_strings: the categories are strings, and opc has no string tensors")
    cats = np.asarray(node.attr("cats_int64s") or [], np.int64)
    if not cats.size:
        raise node.fail("cats_int64s must list the categories")
    e, x = node.e, node.input(0)
    shape = list(shape_of(x))
    if numpy_of(x).kind == "f":  # onnxruntime compares the value truncated toward 0; a NaN matches none
        x = e.select(e.value(o.LessThanOp(x, scalar(node, 0.0, x))), e.value(o.CeilOp(x)), e.value(o.FloorOp(x)))
    found = e.value(o.EqualOp(e.reshape(x, [*shape, 1]), e.constant(cats.astype(numpy_of(x)))))
    # the index of the (first) matching category, len(cats) where none matches: the zero row appended
    # below, or (zeros=0) an index past the identity's rows, an IndexError naming X at the call
    positions = e.constant(np.arange(len(cats), 0, -1, dtype=np.int64))
    first = e.value(o.ReduceMaxOp(e.select(found, positions, e.constant(np.array(0, np.int64))), [len(shape)], False))
    index = e.sub(e.constant(np.array(len(cats), np.int64)), first)
    rows = np.eye(len(cats), dtype=np.float32)
    if int(node.attr("zeros", 1)):
        rows = np.concatenate([rows, np.zeros((1, len(cats)), np.float32)])
    return [e.value(o.GatherOp(e.constant(rows), index, 0))]


@converter(f"{ML}.LinearRegressor", since=1)
def linear_regressor(node: Node) -> Values:
    post = node.attr("post_transform", "NONE")
    if post != "NONE":
        raise node.fail(f"post_transform {post!r} is not supported: only NONE (PROBIT needs an inverse erf, "
                        "which opc lacks)")
    e, x = node.e, as_float32(node, node.input(0))
    shape = shape_of(x)
    if len(shape) not in (1, 2):
        raise node.fail(f"X must be [N, C] or [C], got {x.type}")
    if len(shape) == 1:
        x = e.reshape(x, [1, shape[0]])
    features, targets = shape_of(x)[1], int(node.attr("targets", 1))
    coefficients = np.asarray(node.attr("coefficients") or [], np.float32)
    intercepts = np.asarray(node.attr("intercepts") or [0.0] * targets, np.float32)
    if coefficients.size != targets * features or intercepts.size != targets:
        raise node.fail(f"{coefficients.size} coefficients and {intercepts.size} intercepts for {targets} targets "
                        f"and {features} features: one row of coefficients and one intercept per target")
    y = e.matmul(x, e.constant(coefficients.reshape(targets, features)), trans_y=True)
    return [e.add(y, e.constant(intercepts))]
