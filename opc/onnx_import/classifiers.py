"""ai.onnx.ml's LinearClassifier and ZipMap, as onnxruntime computes them:

    LinearClassifier(X) {coefficients, intercepts, classlabels_ints | classlabels_strings, post_transform}
        -> Y: labels [N], Z: scores float32 [N, classes]
    ZipMap(X) {classlabels_int64s | classlabels_strings}  -> a sequence of N maps {label: X[n, k]}

skl2onnx writes a ZipMap after every classifier by default. opc compiles tensors only, so ZipMap's
output is its input, the probabilities tensor, inside the compiled function; opc.load_onnx and the
ONNX backend turn it into what onnxruntime returns, a list of N dicts {label: float} (lists.Maps).
Labels that are strings are Python's business as well: a classifier's string Y is computed as each
row's label index (int64) and handed back as a NumPy array of str (lists.Labels). Either may only be
a graph output: an op reading one is refused.

LinearClassifier (onnxruntime's linearclassifier.cc): X ([N, C], or [C] for one row; integers and
float64 cast to float32) times the coefficients ([classes, C] row-major, classes = the number of
intercepts) plus the intercepts, in float32. With two or more classes, Y is the label of the first
largest score and Z the post-transformed scores. With one (a binary model written as one score s), Y
is labels[1] where s > 0 else labels[0] (1 and 0 without labels), and Z is [1 - p, p] with two labels,
p = sigmoid(s) under LOGISTIC and s under the others, or [s] without labels, as onnxruntime 1.32
computes it (ONNX's reference writes [-s, s] and post-transforms it: opc follows onnxruntime).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import Float32Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import shape_of
from opc.onnx_import.common import F32, numpy_of, scalar
from opc.onnx_import.graph import Node, converter
from opc.onnx_import.lists import Items, Labels, Maps
from opc.onnx_import.ml import ML, strings
from opc.onnx_import.trees import LOGISTIC, NONE, POSTS, enum, first_max, post_transform, refuse_probit


def class_labels(node: Node, ints_name: str) -> tuple[int, ...] | tuple[str, ...] | None:
    """The labels from `ints_name` or classlabels_strings: one of the two, None when neither is given."""
    ints, names = node.attr(ints_name), strings(node, "classlabels_strings")
    if ints is not None and names is not None:
        raise node.fail(f"both {ints_name} and classlabels_strings are given: one names the labels")
    return names if names is not None else None if ints is None else tuple(int(v) for v in ints)


@converter(f"{ML}.ZipMap", since=1)
def zip_map(node: Node) -> Items:
    labels = class_labels(node, "classlabels_int64s")
    if not labels:
        raise node.fail("one of classlabels_int64s and classlabels_strings must name the labels")
    x = node.input(0)
    shape = shape_of(x)
    if not isinstance(x.type.element_type, Float32Type):  # type: ignore[attr-defined]
        raise node.fail(f"X must be float32, got {x.type}")
    if len(shape) not in (1, 2) or shape[-1] != len(labels):
        raise node.fail(f"X must be [N, {len(labels)}] or [{len(labels)}] for {len(labels)} labels, got {x.type}")
    return [Maps(x, labels)]


@converter(f"{ML}.LinearClassifier", since=1)
def linear_classifier(node: Node) -> Items:
    labels = class_labels(node, "classlabels_ints")
    post = enum(node, "post_transform", POSTS, "NONE")
    refuse_probit(node, post)
    e, x = node.e, node.input(0)
    shape = shape_of(x)
    if len(shape) not in (1, 2):
        raise node.fail(f"X must be [N, C] or [C], got {x.type}")
    if numpy_of(x) != np.float32:
        x = e.cast(x, F32)
    if len(shape) == 1:
        x = e.reshape(x, [1, shape[0]])
    features = shape_of(x)[1]
    coefficients = np.asarray(node.attr("coefficients") or [], np.float32)
    intercepts = np.asarray(node.attr("intercepts") or [], np.float32)
    classes = len(intercepts)
    if not classes or coefficients.size != classes * features:
        raise node.fail(f"{coefficients.size} coefficients for {classes} intercepts and {features} features: "
                        "one row of coefficients per intercept")
    scores = e.add(e.matmul(x, e.constant(coefficients.reshape(classes, features)), trans_y=True),
                   e.constant(intercepts))
    names = labels if labels is not None else (0, 1)
    if classes == 1:
        if labels is not None and len(labels) != 2:
            raise node.fail(f"{len(labels)} class labels for one score (a binary model): 2 or none")
        index = e.select(e.value(o.GreaterThanOp(scores, scalar(node, 0, scores))),
                         e.constant(np.array(1, np.int64)), e.constant(np.array(0, np.int64)))
        index = e.reshape(index, shape_of(index)[:1])
        z = scores
        if labels is not None:  # [1 - p, p], p the score or under LOGISTIC its sigmoid (the other transforms unapplied)
            p = e.value(o.SigmoidOp(scores)) if post == LOGISTIC else scores
            z = e.value(o.ConcatOp([e.sub(scalar(node, 1, p), p), p], 1))
    else:
        if labels is not None and len(labels) != classes:
            raise node.fail(f"{len(labels)} class labels for {classes} classes")
        index = first_max(node, scores)
        z = post_transform(node, scores, post) if post != NONE else scores
    return [label_output(node, index, names), z]


def label_output(node: Node, index: SSAValue, names: tuple[int, ...] | tuple[str, ...]) -> SSAValue | Labels:
    """Y from each row's label index: int64 labels gathered from a table, string labels as Labels."""
    if isinstance(names[0], str):
        return Labels(index, tuple(map(str, names)))
    if names == tuple(range(len(names))):
        return index
    return node.e.value(o.GatherOp(node.e.constant(np.asarray(names, np.int64)), index, 0))

