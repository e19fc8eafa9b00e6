"""ai.onnx.ml, the classical-ML domain, where its ops are numbers: each composed from opc ops.

    Binarizer(X) {threshold}                   -> X > threshold ? 1 : 0, in X's type
    ArrayFeatureExtractor(X, Y)                -> X[..., Y] (Y flattened; a 1-D X gives one row)
    LabelEncoder(X) {keys_*, values_*, default_*}  -> each element's value, or the default
    TreeEnsemble(X) {nodes_*, leaf_*, tree_roots, ...}  -> [N, n_targets], the trees' leaves aggregated

LabelEncoder compares each element with every key (an [..., K] equality), takes the last key that
matches (as a dict built from the pairs keeps it) and gathers its value. Keys or values that are
strings are refused: opc has no string tensors.

TreeEnsemble walks every tree of the ensemble at once, for every row: the node each (row, tree) is
at is an index into tables of the nodes' features, thresholds, modes and children, advanced by a
gather and a select once per level, max depth times (leaves point at themselves, so a walk that
has arrived stays). The cost is depth * rows * trees, whatever the size of the trees, and the
function's size does not grow with them. The leaves' weights are then gathered as rows of
n_targets (zero off the leaf's target) and aggregated over the trees.
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
    found = e.value(o.EqualOp(column, e.constant(np.where(np.isnan(keys), 0, keys) if keys.dtype.kind == "f"
                                                  else keys)))
    if keys.dtype.kind == "f" and np.isnan(keys).any():  # a NaN key matches a NaN element
        nan_keys = bool_constant(node, True, (1,) * len(shape) + (len(keys),))
        found = e.select(e.constant(np.isnan(keys)), e.select(is_nan(node, column), nan_keys,
                                                              bool_constant(node, False)), found)
    positions = e.constant(np.arange(1, len(keys) + 1, dtype=np.int64))
    position = e.value(o.ReduceMaxOp(e.select(found, positions, e.constant(np.array(0, np.int64))), [len(shape)],
                                     False))
    return [e.value(o.GatherOp(e.constant(np.concatenate([default[:1], values])), position, 0))]


# ---------------------------------------------------------------------------
# TreeEnsemble (ai.onnx.ml opset 5)
# ---------------------------------------------------------------------------

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
SUM, AVERAGE, MIN, MAX = 1, 0, 2, 3  # aggregate_function
# post_transform as the operator's spec numbers it (4, PROBIT, needs erfinv); onnxruntime 1.23 reads 1 as
# LOGISTIC and 2 as SOFTMAX (its own enum's order), against the spec: opc follows the spec
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO = 0, 1, 2, 3


class Forest:
    """The trees as tables over one index space: interior nodes 0..M-1, then leaves M..M+L-1 (each a
    node that leads to itself)."""

    def __init__(self, node: Node) -> None:
        def ints(name: str) -> np.ndarray:
            value = node.attr(name)
            if value is None:
                raise node.fail(f"attribute {name} is required")
            return np.asarray(value, np.int64)

        features, true_ids, false_ids = ints("nodes_featureids"), ints("nodes_truenodeids"), ints("nodes_falsenodeids")
        true_leaf, false_leaf = ints("nodes_trueleafs").astype(bool), ints("nodes_falseleafs").astype(bool)
        splits, modes = tensor_attr(node, "nodes_splits"), tensor_attr(node, "nodes_modes")
        weights, targets, roots = tensor_attr(node, "leaf_weights"), ints("leaf_targetids"), ints("tree_roots")
        if splits is None or modes is None or weights is None:
            raise node.fail("attributes nodes_splits, nodes_modes and leaf_weights are required")
        m, leaves = len(features), len(weights)
        if not all(len(a) == m for a in (true_ids, false_ids, true_leaf, false_leaf, splits, modes)):
            raise node.fail(f"the nodes_* attributes must have one entry per node ({m})")
        if len(targets) != leaves:
            raise node.fail(f"{len(targets)} leaf_targetids for {leaves} leaf_weights")
        missing = node.attr("nodes_missing_value_tracks_true")
        self.missing = np.zeros(m, bool) if missing is None else np.asarray(missing, bool)
        self.n_targets = int(node.attr("n_targets", 0) or 0)
        if self.n_targets < 1 or ((targets < 0) | (targets >= self.n_targets)).any():
            raise node.fail(f"n_targets {self.n_targets} must be positive and cover leaf_targetids")
        for ids, is_leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
            bound = np.where(is_leaf, leaves, m)
            if ((ids < 0) | (ids >= bound)).any():
                raise node.fail("a node's child index is out of range")
        self.true_next = np.concatenate([np.where(true_leaf, m + true_ids, true_ids), m + np.arange(leaves)])
        self.false_next = np.concatenate([np.where(false_leaf, m + false_ids, false_ids), m + np.arange(leaves)])
        # a root that is a leaf on both sides with one child names that leaf by its own index (ONNX's reference)
        degenerate = true_leaf[roots] & false_leaf[roots] & (true_ids[roots] == false_ids[roots])
        self.roots = np.where(degenerate, m + roots, roots)
        self.features = np.concatenate([features, np.zeros(leaves, np.int64)])
        self.splits = np.concatenate([splits, np.zeros(leaves, splits.dtype)])
        self.modes = np.concatenate([modes.astype(np.int64), np.full(leaves, LEQ)])
        self.missing = np.concatenate([self.missing, np.zeros(leaves, bool)])
        self.weights, self.targets, self.n_nodes = weights, targets, m
        self.members = self.member_sets(node, tensor_attr(node, "membership_values"), modes)
        self.depth = self.max_depth(node)

    def member_sets(self, node: Node, values: np.ndarray | None, modes: np.ndarray) -> np.ndarray:
        """[nodes + leaves, widest set]: each MEMBER node's set, padded with NaN (equal to nothing)."""
        members = np.flatnonzero(modes == MEMBER)
        sets: list[list[float]] = [[]]
        for v in (values if values is not None else np.zeros(0)).reshape(-1):
            if np.isnan(v):
                sets.append([])
            else:
                sets[-1].append(float(v))
        sets = sets[:-1] if sets[-1] == [] else sets  # the list ends with a NaN
        if len(members) != (len(sets) if values is not None and values.size else 0):
            raise node.fail(f"{len(members)} BRANCH_MEMBER nodes, membership_values holds "
                            f"{len(sets) if values is not None and values.size else 0} sets")
        width = max([len(s) for s in sets] + [1])
        table = np.full((len(self.features), width), np.nan, self.splits.dtype)
        for k, s in zip(members, sets):
            table[k, :len(s)] = s
        return table if len(members) else np.zeros((0, 0), self.splits.dtype)

    def max_depth(self, node: Node) -> int:
        """The most branchings on a path from a root to a leaf; a cycle is refused."""
        depth = np.zeros(len(self.features), np.int64)  # of the subtree below each index; leaves 0
        state = np.zeros(len(self.features), np.int8)  # 0 new, 1 on the path, 2 done
        for root in self.roots:
            stack = [int(root)]
            while stack:
                u = stack[-1]
                if u >= self.n_nodes or state[u] == 2:
                    state[u] = 2
                    stack.pop()
                    continue
                children = [int(self.true_next[u]), int(self.false_next[u])]
                pending = [c for c in children if c < self.n_nodes and state[c] != 2]
                if state[u] == 0:
                    state[u] = 1
                    if any(state[c] == 1 for c in pending):
                        raise node.fail("the nodes form a cycle")
                    stack += pending
                    continue
                depth[u] = 1 + max(depth[c] for c in children)
                state[u] = 2
                stack.pop()
        return int(max(depth[self.roots])) if len(self.roots) else 0


def branch(node: Node, forest: Forest, x: SSAValue, at: SSAValue, value: SSAValue) -> SSAValue:
    """Whether each (row, tree) at node `at` (its feature's `value`) takes the true branch."""
    e = node.e

    def table(array: np.ndarray) -> SSAValue:
        return e.value(o.GatherOp(e.constant(array), at, 0))

    split = table(forest.splits.astype(numpy_of(x)))
    tests = {LEQ: lambda: either(node, e.value(o.LessThanOp(value, split)), e.value(o.EqualOp(value, split))),
             LT: lambda: e.value(o.LessThanOp(value, split)),
             GTE: lambda: either(node, e.value(o.GreaterThanOp(value, split)), e.value(o.EqualOp(value, split))),
             GT: lambda: e.value(o.GreaterThanOp(value, split)),
             EQ: lambda: e.value(o.EqualOp(value, split)),
             NEQ: lambda: e.select(e.value(o.EqualOp(value, split)), bool_constant(node, False),
                                   bool_constant(node, True)),
             MEMBER: lambda: member(node, forest, x, at, value)}
    used = sorted(set(int(m) for m in forest.modes[:forest.n_nodes]))
    mode = table(forest.modes) if len(used) > 1 else None
    taken = tests[used[-1]]()
    for m in reversed(used[:-1]):
        assert mode is not None
        taken = e.select(e.value(o.EqualOp(mode, e.constant(np.array(m, np.int64)))), tests[m](), taken)
    if forest.missing.any():  # a NaN feature also goes the true way where the node says so
        taken = either(node, taken, e.select(is_nan(node, value), table(forest.missing), bool_constant(node, False)))
    return taken


def member(node: Node, forest: Forest, x: SSAValue, at: SSAValue, value: SSAValue) -> SSAValue:
    e = node.e
    sets = e.value(o.GatherOp(e.constant(forest.members.astype(numpy_of(x))), at, 0))  # [N, T, width]
    hits = e.value(o.EqualOp(sets, e.reshape(value, [*shape_of(value), 1])))
    count = e.select(hits, e.constant(np.array(1, np.int64)), e.constant(np.array(0, np.int64)))
    return e.value(o.GreaterThanOp(e.value(o.ReduceMaxOp(count, [len(shape_of(value))], False)),
                                   e.constant(np.array(0, np.int64))))


def walk(node: Node, forest: Forest, x: SSAValue) -> SSAValue:
    """The leaf (an index into the tables) each row reaches in each tree: [N, trees]."""
    e = node.e
    n, features = shape_of(x)
    trees = len(forest.roots)
    flat = e.reshape(x, [n * features])
    row_start = e.constant((np.arange(n, dtype=np.int64) * features).reshape(n, 1))
    at = e.constant(np.broadcast_to(forest.roots, (n, trees)).copy())
    for _ in range(forest.depth):
        feature = e.value(o.GatherOp(e.constant(forest.features), at, 0))
        value = e.value(o.GatherOp(flat, e.add(row_start, feature), 0))
        taken = branch(node, forest, x, at, value)
        at = e.select(taken, e.value(o.GatherOp(e.constant(forest.true_next), at, 0)),
                      e.value(o.GatherOp(e.constant(forest.false_next), at, 0)))
    return at


@converter(f"{ML}.TreeEnsemble", since=5)
def tree_ensemble(node: Node) -> Values:
    x = node.input(0)
    if len(shape_of(x)) != 2 or numpy_of(x).kind != "f":
        raise node.fail(f"X must be a float matrix [rows, features], got {x.type}")
    forest = Forest(node)
    if int(forest.features[:forest.n_nodes].max(initial=0)) >= shape_of(x)[1]:
        raise node.fail(f"a node reads feature {int(forest.features.max())}, X has {shape_of(x)[1]}")
    dtype, k = numpy_of(x), forest.n_targets
    aggregate, post = int(node.attr("aggregate_function", SUM)), int(node.attr("post_transform", NONE))
    if aggregate not in (SUM, AVERAGE, MIN, MAX):
        raise node.fail(f"aggregate_function {aggregate} is not one of 0 (AVERAGE), 1 (SUM), 2 (MIN), 3 (MAX)")
    if post not in (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO):
        raise node.fail(f"post_transform {post} is not supported (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO; "
                        "PROBIT needs an inverse erf opc lacks)")
    e = node.e
    leaves = walk(node, forest, x)  # [N, T]
    m, n_leaves = forest.n_nodes, len(forest.weights)
    hit = np.zeros((m + n_leaves, k), bool)  # each index's row of targets: the leaf's own
    hit[m + np.arange(n_leaves), forest.targets] = True
    weights = np.zeros((m + n_leaves, k), dtype)
    weights[m + np.arange(n_leaves), forest.targets] = forest.weights
    rows = e.value(o.GatherOp(e.constant(weights), leaves, 0))  # [N, T, K]
    if aggregate in (SUM, AVERAGE):
        out = e.reduce_sum(rows, [1])
        if aggregate == AVERAGE:
            out = e.div(out, scalar(node, len(forest.roots), out))
    else:
        hits = e.value(o.GatherOp(e.constant(hit.astype(np.int64)), leaves, 0))
        far = np.finfo(dtype).max if aggregate == MIN else np.finfo(dtype).min
        rows = e.select(e.value(o.EqualOp(hits, e.constant(np.array(1, np.int64)))), rows, scalar(node, far, rows))
        out = e.value((o.ReduceMinOp if aggregate == MIN else o.ReduceMaxOp)(rows, [1], False))
        # a target no tree's leaf scores is 0, as in onnxruntime (ONNX's reference leaves the extreme)
        scored = e.value(o.GreaterThanOp(e.value(o.ReduceMaxOp(hits, [1], False)), e.constant(np.array(0, np.int64))))
        out = e.select(scored, out, scalar(node, 0, out))
    return [post_transform(node, out, post)]


def post_transform(node: Node, out: SSAValue, post: int) -> SSAValue:
    e = node.e
    if post == LOGISTIC:
        return e.value(o.SigmoidOp(out))
    if post == SOFTMAX:
        return e.value(o.SoftmaxOp(out, 1))
    if post == SOFTMAX_ZERO:  # onnxruntime's: a softmax over the entries beyond 1e-7 of 0; the others stay 0
        nonzero = e.value(o.GreaterThanOp(e.value(o.AbsOp(out)), scalar(node, 1e-7, out)))
        top = e.value(o.ReduceMaxOp(out, [1], True))
        weights = e.select(nonzero, e.value(o.ExpOp(e.sub(out, top))), scalar(node, 0, out))
        return e.div(weights, e.reduce_sum(weights, [1], keepdim=True))
    return out
