"""ai.onnx.ml's tree ensembles, composed from opc ops:

    TreeEnsemble(X) {nodes_*, leaf_*, tree_roots, ...}              (ml opset 5) -> [N, n_targets]
    TreeEnsembleRegressor(X) {nodes_*, target_*, base_values, ...}  (ml opsets 1, 3) -> [N, n_targets]
    TreeEnsembleClassifier(X) {nodes_*, class_*, classlabels_int64s, base_values, ...}  (ml opsets 1, 3)
        -> Y: labels int64 [N], Z: scores float32 [N, n_classes]

All three become one `Forest`: tables over one index space of nodes, where a leaf is a node whose two
children are itself. Every tree is walked at once, for every row: the node each (row, tree) is at
is an index into the tables of the nodes' features, thresholds, modes and children, advanced by a
gather and a select once per level, max depth times (a walk that has reached its leaf stays). The
cost is depth * rows * trees whatever the size of the trees, and the function's size does not grow
with them. The leaves' weights are then gathered as rows of n_targets (zero off the leaf's targets)
and aggregated over the trees (sum, average, min, max), base values added, post-transformed.

A NaN feature takes the true branch where the comparison holds (NaN != t) or the node's
missing_value_tracks_true says so, as onnxruntime does for both ops. A target no tree scores is 0
under MIN and MAX, as in onnxruntime (ONNX's reference leaves the float's extreme there); base values
are then added to every target, as the spec and ONNX's reference do (onnxruntime leaves a target no
leaf scores at 0).

The classifier follows onnxruntime (tree_ensemble_aggregator.h, TreeAggregatorClassifier), which the
spec leaves room for: the class sums over the trees (SUM), a class "scored" where a leaf reached gave
it a weight. With three or more classes, base values are added (every class then scored), Y is the
label of the first largest scored class, Z the post-transformed scores (an unscored class reads 0).
With two, onnxruntime has rules of its own (two_classes says which), chiefly its binary case, the
weights naming one class only (skl2onnx's boosted trees): the label is labels[1] where the score is
above 0.5 (all weights >= 0) or above 0, and a single score s widens to [1 - s, s], [-s, s] or under
LOGISTIC [sigmoid(-s), sigmoid(s)]. Where both of two classes have weights, onnxruntime writes the
label 1 or 0 itself, not the class label; opc writes classlabels_int64s[1] or [0] (the same for the
labels [0, 1]). classlabels_strings: the label's index is computed and returned as the string
(lists.Labels: a graph output only); PROBIT is refused as above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import Float32Type
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import F32, Values, along, numpy_of, scalar
from opc.onnx_import.graph import Node, converter
from opc.onnx_import.lists import Items, Labels
from opc.onnx_import.ml import ML, bool_constant, either, is_nan, strings, tensor_attr

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
         "BRANCH_NEQ": NEQ}
AVERAGE, SUM, MIN, MAX = range(4)  # TreeEnsemble's aggregate_function numbers
AGGREGATES = {"AVERAGE": AVERAGE, "SUM": SUM, "MIN": MIN, "MAX": MAX}
# post_transform as TreeEnsemble's spec numbers it (4, PROBIT, needs an inverse erf opc lacks); onnxruntime
# 1.23 reads 1 as LOGISTIC and 2 as SOFTMAX (its own enum's order), against the spec: opc follows the spec
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)
POSTS = {"NONE": NONE, "SOFTMAX": SOFTMAX, "LOGISTIC": LOGISTIC, "SOFTMAX_ZERO": SOFTMAX_ZERO, "PROBIT": PROBIT}


@dataclass
class Forest:
    """The trees as tables, one entry per node (leaves included: both children themselves)."""

    features: np.ndarray  # int64
    splits: np.ndarray  # float64 thresholds
    modes: np.ndarray  # int64, LEQ..MEMBER
    missing: np.ndarray  # bool: a NaN feature takes the true branch
    true_next: np.ndarray  # int64
    false_next: np.ndarray
    roots: np.ndarray  # int64, one per tree
    weights: np.ndarray  # [nodes, n_targets] float64: a leaf's weight per target
    hits: np.ndarray  # [nodes, n_targets] bool: which targets a leaf scores
    members: np.ndarray  # [nodes, widest set] float64: a MEMBER node's set, NaN-padded ([0, 0] if none)

    def is_leaf(self) -> np.ndarray:
        index = np.arange(len(self.features))
        return (self.true_next == index) & (self.false_next == index)

    def depth(self, node: Node) -> int:
        """The most branchings on a path from a root to a leaf; a cycle is refused."""
        leaf = self.is_leaf()
        depth = np.zeros(len(self.features), np.int64)
        state = np.where(leaf, 2, 0)  # 0 new, 1 on the path, 2 done
        for root in self.roots:
            stack = [int(root)]
            while stack:
                u = stack[-1]
                if state[u] == 2:
                    stack.pop()
                    continue
                children = [int(self.true_next[u]), int(self.false_next[u])]
                if state[u] == 0:
                    state[u] = 1
                    if any(state[c] == 1 for c in children):
                        raise node.fail("the nodes form a cycle")
                    stack += [c for c in children if state[c] == 0]
                    continue
                depth[u] = 1 + max(depth[c] for c in children)
                state[u] = 2
                stack.pop()
        return int(depth[self.roots].max(initial=0))


def ints(node: Node, name: str, default: list[int] | None = None) -> np.ndarray:
    value = node.attr(name, default)
    if value is None:
        raise node.fail(f"attribute {name} is required")
    return np.asarray(value, np.int64)


def floats(node: Node, name: str) -> np.ndarray | None:
    """A float list attribute, or its *_as_tensor twin (opset 3), as float64."""
    as_tensor = tensor_attr(node, f"{name}_as_tensor")
    if as_tensor is not None:
        return as_tensor.astype(np.float64).reshape(-1)
    value = node.attr(name)
    return None if value is None else np.asarray(value, np.float32).astype(np.float64)


def leaf_table(node: Node, size: int, n_targets: int, at: np.ndarray, targets: np.ndarray, weights: np.ndarray,
               aggregate: int, counted: str = "n_targets") -> tuple[np.ndarray, np.ndarray]:
    """[size, n_targets] weights and hits from (node index, target, weight) triples; `counted` names
    where n_targets came from, for the error."""
    if n_targets < 1 or ((targets < 0) | (targets >= n_targets)).any():
        raise node.fail(f"{counted} {n_targets} must be positive and cover the target ids")
    table, hits = np.zeros((size, n_targets)), np.zeros((size, n_targets), bool)
    pairs = at * n_targets + targets
    if aggregate in (MIN, MAX) and len(np.unique(pairs)) != len(pairs):
        raise node.fail("a leaf has two weights for one target: MIN and MAX of them are not supported")
    np.add.at(table, (at, targets), weights)
    hits[at, targets] = True
    return table, hits


def member_sets(node: Node, values: np.ndarray | None, modes: np.ndarray, size: int) -> np.ndarray:
    """Each MEMBER node's set from membership_values (the sets in node order, each ended by a NaN)."""
    members = np.flatnonzero(modes == MEMBER)
    flat = np.zeros(0) if values is None else values.astype(np.float64).reshape(-1)
    sets: list[list[float]] = []
    current: list[float] = []
    for v in flat:
        if np.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(float(v))
    if current:
        sets.append(current)
    if len(members) != len(sets):
        raise node.fail(f"{len(members)} BRANCH_MEMBER nodes, membership_values holds {len(sets)} sets")
    if not len(members):
        return np.zeros((0, 0))
    table = np.full((size, max(len(s) for s in sets) or 1), np.nan)
    for k, s in zip(members, sets):
        table[k, :len(s)] = s
    return table


def forest_v5(node: Node) -> tuple[Forest, int]:
    """TreeEnsemble's attributes (interior nodes indexed 0..M-1, leaves by their own list): leaves
    placed after the nodes. And n_targets."""
    features, true_ids, false_ids = (ints(node, n) for n in ("nodes_featureids", "nodes_truenodeids",
                                                            "nodes_falsenodeids"))
    true_leaf, false_leaf = ints(node, "nodes_trueleafs").astype(bool), ints(node, "nodes_falseleafs").astype(bool)
    splits, modes = tensor_attr(node, "nodes_splits"), tensor_attr(node, "nodes_modes")
    weights, targets, roots = tensor_attr(node, "leaf_weights"), ints(node, "leaf_targetids"), ints(node, "tree_roots")
    if splits is None or modes is None or weights is None:
        raise node.fail("attributes nodes_splits, nodes_modes and leaf_weights are required")
    m, leaves = len(features), len(weights)
    modes = modes.astype(np.int64).reshape(-1)
    if not all(len(a) == m for a in (true_ids, false_ids, true_leaf, false_leaf, splits, modes)):
        raise node.fail(f"the nodes_* attributes must have one entry per node ({m})")
    if len(targets) != leaves:
        raise node.fail(f"{len(targets)} leaf_targetids for {leaves} leaf_weights")
    if ((modes < LEQ) | (modes > MEMBER)).any():
        raise node.fail(f"nodes_modes must be 0 to 6, got {sorted(set(modes.tolist()))}")
    for ids, is_leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
        if ((ids < 0) | (ids >= np.where(is_leaf, leaves, m))).any():
            raise node.fail("a node's child index is out of range")
    if ((roots < 0) | (roots >= m)).any():
        raise node.fail("a tree root is out of range")
    missing = ints(node, "nodes_missing_value_tracks_true", [0] * m).astype(bool)
    own = m + np.arange(leaves)
    # a root that is a leaf on both sides with one child names that leaf by its own index (ONNX's reference)
    degenerate = true_leaf[roots] & false_leaf[roots] & (true_ids[roots] == false_ids[roots])
    n_targets = int(node.attr("n_targets", 0) or 0)
    table, hits = leaf_table(node, m + leaves, n_targets, own, targets, weights.astype(np.float64),
                             int(node.attr("aggregate_function", SUM)))
    return Forest(
        features=np.concatenate([features, np.zeros(leaves, np.int64)]),
        splits=np.concatenate([splits.astype(np.float64), np.zeros(leaves)]),
        modes=np.concatenate([modes, np.full(leaves, LEQ)]),
        missing=np.concatenate([missing, np.zeros(leaves, bool)]),
        true_next=np.concatenate([np.where(true_leaf, m + true_ids, true_ids), own]),
        false_next=np.concatenate([np.where(false_leaf, m + false_ids, false_ids), own]),
        roots=np.where(degenerate, m + roots, roots), weights=table, hits=hits,
        members=member_sets(node, tensor_attr(node, "membership_values"), np.concatenate([modes, np.full(leaves, LEQ)]),
                            m + leaves)), n_targets


def forest_v3(node: Node, aggregate: int, votes: str = "target", n_classes: int | None = None) -> tuple[Forest, int]:
    """TreeEnsembleRegressor's and TreeEnsembleClassifier's attributes: nodes named (tree id, node id),
    children by node id in the same tree, leaves of mode LEAF, each tree's root its first node in the
    list. The leaves' weights are `votes`_* (target_* or class_*), over n_targets or n_classes."""
    trees, ids, features = ints(node, "nodes_treeids"), ints(node, "nodes_nodeids"), ints(node, "nodes_featureids")
    true_ids, false_ids = ints(node, "nodes_truenodeids"), ints(node, "nodes_falsenodeids")
    names = [v.decode() if isinstance(v, bytes) else str(v) for v in node.attr("nodes_modes") or []]
    splits = floats(node, "nodes_values")
    m = len(trees)
    splits = np.zeros(m) if splits is None else splits
    if not all(len(a) == m for a in (ids, features, true_ids, false_ids, names, splits)):
        raise node.fail(f"the nodes_* attributes must have one entry per node ({m})")
    unknown = sorted(set(names) - set(MODES) - {"LEAF"})
    if unknown:
        raise node.fail(f"nodes_modes {unknown[0]!r} is not a branch mode or LEAF")
    index = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(trees, ids))}
    leaf = np.array([n == "LEAF" for n in names], bool)

    def child(k: int, i: int) -> int:
        if (int(trees[k]), i) not in index:
            raise node.fail(f"node {int(ids[k])} of tree {int(trees[k])} has no child {i} in its tree")
        return index[int(trees[k]), i]

    own = np.arange(m)
    true_next = np.array([k if leaf[k] else child(k, int(true_ids[k])) for k in range(m)], np.int64)
    false_next = np.array([k if leaf[k] else child(k, int(false_ids[k])) for k in range(m)], np.int64)
    roots = np.array([int(np.flatnonzero(trees == t)[0]) for t in dict.fromkeys(trees.tolist())], np.int64)
    at_trees, at_ids, targets = (ints(node, f"{votes}_{n}") for n in ("treeids", "nodeids", "ids"))
    weights = floats(node, f"{votes}_weights")
    if weights is None or not len(at_trees) == len(at_ids) == len(targets) == len(weights):
        raise node.fail(f"{votes}_treeids, {votes}_nodeids, {votes}_ids and {votes}_weights must have one entry each")
    at = np.array([index.get((int(t), int(i)), -1) for t, i in zip(at_trees, at_ids)], np.int64)
    if (at < 0).any() or (len(at) and not leaf[at].all()):
        raise node.fail(f"a {votes} weight names a node that is not a leaf of its tree")
    if n_classes is None:
        table, hits = leaf_table(node, m, int(node.attr("n_targets", 0) or 0), at, targets, weights, aggregate)
    else:
        table, hits = leaf_table(node, m, n_classes, at, targets, weights, aggregate, "classlabels' count")
    modes = np.array([MODES.get(n, LEQ) for n in names], np.int64)
    return Forest(features=np.where(leaf, 0, features), splits=np.where(leaf, 0.0, splits), modes=modes,
                  missing=ints(node, "nodes_missing_value_tracks_true", [0] * m).astype(bool) & ~leaf,
                  true_next=np.where(leaf, own, true_next), false_next=np.where(leaf, own, false_next),
                  roots=roots, weights=table, hits=hits, members=np.zeros((0, 0))), table.shape[1]


# ---------------------------------------------------------------------------
# The walk and the aggregation
# ---------------------------------------------------------------------------


def branch(node: Node, forest: Forest, at: SSAValue, value: SSAValue) -> SSAValue:
    """Whether each (row, tree) at node `at` (its feature's `value`) takes the true branch."""
    e = node.e
    dtype = numpy_of(value)

    def table(array: np.ndarray) -> SSAValue:
        return e.value(o.GatherOp(e.constant(array), at, 0))

    split = table(forest.splits.astype(dtype))
    tests = {LEQ: lambda: either(node, e.value(o.LessThanOp(value, split)), e.value(o.EqualOp(value, split))),
             LT: lambda: e.value(o.LessThanOp(value, split)),
             GTE: lambda: either(node, e.value(o.GreaterThanOp(value, split)), e.value(o.EqualOp(value, split))),
             GT: lambda: e.value(o.GreaterThanOp(value, split)),
             EQ: lambda: e.value(o.EqualOp(value, split)),
             NEQ: lambda: e.select(e.value(o.EqualOp(value, split)), bool_constant(node, False),
                                   bool_constant(node, True)),
             MEMBER: lambda: member(node, forest, at, value)}
    used = sorted(set(forest.modes[~forest.is_leaf()].tolist()) or {LEQ})
    mode = table(forest.modes) if len(used) > 1 else None
    taken = tests[used[-1]]()
    for m in reversed(used[:-1]):
        assert mode is not None
        taken = e.select(e.value(o.EqualOp(mode, e.constant(np.array(m, np.int64)))), tests[m](), taken)
    if forest.missing.any():  # a NaN feature also goes the true way where the node says so
        taken = either(node, taken, e.select(is_nan(node, value), table(forest.missing), bool_constant(node, False)))
    return taken


def member(node: Node, forest: Forest, at: SSAValue, value: SSAValue) -> SSAValue:
    e = node.e
    sets = e.value(o.GatherOp(e.constant(forest.members.astype(numpy_of(value))), at, 0))  # [N, T, widest]
    hits = e.value(o.EqualOp(sets, e.reshape(value, [*shape_of(value), 1])))
    count = e.select(hits, e.constant(np.array(1, np.int64)), e.constant(np.array(0, np.int64)))
    return e.value(o.GreaterThanOp(e.value(o.ReduceMaxOp(count, [len(shape_of(value))], False)),
                                   e.constant(np.array(0, np.int64))))


def walk(node: Node, forest: Forest, x: SSAValue) -> SSAValue:
    """The leaf (an index into the tables) each row reaches in each tree: [N, trees]."""
    e = node.e
    n, features = shape_of(x)
    if int(forest.features.max(initial=0)) >= features:
        raise node.fail(f"a node reads feature {int(forest.features.max())}, X has {features}")
    trees = len(forest.roots)
    flat = e.reshape(x, [n * features])
    row_start = e.constant((np.arange(n, dtype=np.int64) * features).reshape(n, 1))
    at = e.constant(np.broadcast_to(forest.roots, (n, trees)).copy())
    for _ in range(forest.depth(node)):
        value = e.value(o.GatherOp(flat, e.add(row_start, e.value(o.GatherOp(e.constant(forest.features), at, 0))), 0))
        taken = branch(node, forest, at, value)
        at = e.select(taken, e.value(o.GatherOp(e.constant(forest.true_next), at, 0)),
                      e.value(o.GatherOp(e.constant(forest.false_next), at, 0)))
    return at


def scores(node: Node, forest: Forest, x: SSAValue, aggregate: int) -> SSAValue:
    """[N, n_targets]: the leaves' weights aggregated over the trees, in x's type."""
    e, dtype = node.e, numpy_of(x)
    leaves = walk(node, forest, x)  # [N, T]
    rows = e.value(o.GatherOp(e.constant(forest.weights.astype(dtype)), leaves, 0))  # [N, T, K]
    if aggregate in (SUM, AVERAGE):
        out = e.reduce_sum(rows, [1])
        return e.div(out, scalar(node, len(forest.roots), out)) if aggregate == AVERAGE else out
    hits = e.value(o.GatherOp(e.constant(forest.hits.astype(np.int64)), leaves, 0))
    far = float(np.finfo(dtype).max if aggregate == MIN else np.finfo(dtype).min)
    rows = e.select(e.value(o.EqualOp(hits, e.constant(np.array(1, np.int64)))), rows, scalar(node, far, rows))
    out = e.value((o.ReduceMinOp if aggregate == MIN else o.ReduceMaxOp)(rows, [1], False))
    scored = e.value(o.GreaterThanOp(e.value(o.ReduceMaxOp(hits, [1], False)), e.constant(np.array(0, np.int64))))
    return e.select(scored, out, scalar(node, 0, out))


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


def features_of(node: Node, floats_only: bool) -> SSAValue:
    x = node.input(0)
    if len(shape_of(x)) != 2:
        raise node.fail(f"X must be a matrix [rows, features], got {x.type}")
    if numpy_of(x).kind != "f":
        if floats_only:
            raise node.fail(f"X must be float, got {numpy_of(x)}")
        x = node.e.cast(x, F32)  # integer features compared as floats, as onnxruntime does
    return x


def enum(node: Node, name: str, table: dict[str, int], default: str) -> int:
    """An attribute given as a number (TreeEnsemble) or a name (the older ops)."""
    value = node.attr(name, default)
    if isinstance(value, int):
        if value not in table.values():
            raise node.fail(f"{name} {value} is not one of {', '.join(f'{v} ({k})' for k, v in table.items())}")
        return value
    if value not in table:
        raise node.fail(f"{name} {value!r} is not one of {', '.join(table)}")
    return table[value]


def refuse_probit(node: Node, post: int) -> None:
    if post == PROBIT:
        raise node.fail("post_transform PROBIT is not supported: it needs an inverse erf, which opc lacks")


@converter(f"{ML}.TreeEnsemble", since=5)
def tree_ensemble(node: Node) -> Values:
    x = features_of(node, floats_only=True)
    aggregate, post = enum(node, "aggregate_function", AGGREGATES, "SUM"), enum(node, "post_transform", POSTS, "NONE")
    refuse_probit(node, post)
    forest, _ = forest_v5(node)
    return [post_transform(node, scores(node, forest, x, aggregate), post)]


@converter(f"{ML}.TreeEnsembleRegressor", since=1)
def tree_ensemble_regressor(node: Node) -> Values:
    """Y (float32) = post_transform(aggregate over trees + base_values)."""
    x = features_of(node, floats_only=False)
    aggregate, post = enum(node, "aggregate_function", AGGREGATES, "SUM"), enum(node, "post_transform", POSTS, "NONE")
    refuse_probit(node, post)
    forest, k = forest_v3(node, aggregate)
    out = scores(node, forest, x, aggregate)
    base = floats(node, "base_values")
    if base is not None and base.size:
        if base.size != k:
            raise node.fail(f"{base.size} base_values for {k} targets")
        out = node.e.add(out, node.e.constant(base.astype(numpy_of(out))))
    out = post_transform(node, out, post)
    return [out if isinstance(element_of(out), Float32Type) else node.e.cast(out, F32)]


# ---------------------------------------------------------------------------
# TreeEnsembleClassifier: onnxruntime's labels and scores
# ---------------------------------------------------------------------------


def class_scores(node: Node, forest: Forest, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """[N, classes] in x's type: the leaves' weights summed over the trees, and whether any leaf
    reached gave the class a weight (onnxruntime's has_score: a class no leaf scores is skipped by the
    argmax and reads 0 in the scores)."""
    e = node.e
    leaves = walk(node, forest, x)  # [N, T]
    total = e.reduce_sum(e.value(o.GatherOp(e.constant(forest.weights.astype(numpy_of(x))), leaves, 0)), [1])
    if forest.hits[forest.is_leaf()].all():
        return total, bool_constant(node, True, shape_of(total))
    hits = e.value(o.GatherOp(e.constant(forest.hits.astype(np.int64)), leaves, 0))  # [N, T, K]
    return total, e.value(o.GreaterThanOp(e.value(o.ReduceMaxOp(hits, [1], False)), e.constant(np.array(0, np.int64))))


def first_max(node: Node, x: SSAValue) -> SSAValue:
    """[N]: the first position of each row's max (onnxruntime's argmax keeps the first of equals)."""
    e = node.e
    n, k = shape_of(x)
    top = e.value(o.EqualOp(x, e.value(o.ReduceMaxOp(x, [1], True))))
    where = e.select(top, e.constant(np.arange(k, dtype=np.int64)), e.constant(np.array(k, np.int64)))
    return e.value(o.ReduceMinOp(where, [1], False))


def several_classes(node: Node, total: SSAValue, scored: SSAValue, base: np.ndarray, labels: np.ndarray,
                    post: int) -> tuple[SSAValue, SSAValue]:
    """Three or more classes: base values added (a class then counts as scored), the label of the
    largest scored class, the scores post-transformed."""
    e = node.e
    if base.size:
        total = e.add(total, e.constant(base.astype(numpy_of(total))))
        scored = bool_constant(node, True, shape_of(total))
    far = scalar(node, -float(np.finfo(numpy_of(total)).max), total)
    label = e.value(o.GatherOp(e.constant(labels), first_max(node, e.select(scored, total, far)), 0))
    return label, post_transform(node, e.select(scored, total, scalar(node, 0, total)), post)


def two_classes(node: Node, total: SSAValue, scored: SSAValue, base: np.ndarray, labels: np.ndarray, post: int,
                one_class: bool, positive: bool) -> tuple[SSAValue, SSAValue]:
    """onnxruntime's two-class rules (tree_ensemble_aggregator.h, FinalizeScores). With two base values
    and class 1 scored, class 1's score is base[1] + class 0's sum and class 0's its negation (class
    1's own sum is dropped); otherwise base[0] goes to class 0. The label is labels[1] where the
    positive score (class 1's if scored, else class 0's) is above 0.5 (`one_class` - the weights name
    one class only - and all weights >= 0) or above 0. A row where class 1 is unscored (and fewer than
    two base values) has one score s, widened to two: [1 - s, s] (one class, weights >= 0), [-s, s]
    (one class, some weight < 0; or no base values), [sigmoid(-s), sigmoid(s)] under LOGISTIC there;
    and [s, 0] where onnxruntime leaves the second unwritten (both classes weighted, one base value).
    Other rows: both scores post-transformed."""
    e = node.e
    zero = scalar(node, 0, total)

    def column(v: SSAValue, k: int) -> SSAValue:
        return along(node, v, 1, k, k + 1)

    s0, s1, h0, h1 = column(total, 0), column(total, 1), column(scored, 0), column(scored, 1)
    wide = h1
    if base.size == 2:
        shifted = e.add(s0, scalar(node, base[1], total))
        s0 = e.select(h1, e.neg(shifted), e.add(s0, scalar(node, base[0], total)))
        s1 = shifted
        wide = bool_constant(node, True, shape_of(h1))
    elif base.size == 1:
        s0 = e.add(s0, scalar(node, base[0], total))
    z0, z1 = e.select(h0, s0, zero), e.select(h1, s1, zero)
    positive_score = e.select(h1, z1, z0)
    above = e.value(o.GreaterThanOp(positive_score, scalar(node, 0.5 if one_class and positive else 0, total)))
    label = e.select(above, e.constant(labels[1:2]), e.constant(labels[:1]))
    both = post_transform(node, e.value(o.ConcatOp([z0, z1], 1)), post)
    if base.size == 2:
        return e.reshape(label, shape_of(label)[:1]), both
    if post == LOGISTIC and (one_class or not base.size):
        one = [e.value(o.SigmoidOp(e.neg(z0))), e.value(o.SigmoidOp(z0))]
    elif one_class and positive:
        one = [e.sub(scalar(node, 1, z0), z0), z0]
    elif one_class or not base.size:
        one = [e.neg(z0), z0]
    else:
        one = [z0, e.constant(np.zeros(shape_of(z0), numpy_of(z0)))]
    widened = e.value(o.ConcatOp(one, 1))
    return e.reshape(label, shape_of(label)[:1]), e.select(wide, both, widened)


@converter(f"{ML}.TreeEnsembleClassifier", since=1)
def tree_ensemble_classifier(node: Node) -> Items:
    """Y (int64, [N]; string labels: lists.Labels) the labels and Z (float32, [N, classes]) the scores, as
    onnxruntime computes them."""
    names = strings(node, "classlabels_strings")
    labels = ints(node, "classlabels_int64s") if names is None else np.arange(len(names), dtype=np.int64)
    if len(labels) < 2:
        raise node.fail(f"the class labels name {len(labels)} class(es); a classifier needs 2 or more")
    x = features_of(node, floats_only=False)
    post = enum(node, "post_transform", POSTS, "NONE")
    refuse_probit(node, post)
    forest, k = forest_v3(node, SUM, "class", len(labels))
    base = floats(node, "base_values")
    base = np.zeros(0) if base is None else base
    if base.size not in (0, k) and not (k == 2 and base.size == 1):  # one base value for two: onnxruntime's class 0's
        raise node.fail(f"{base.size} base_values for {k} classes")
    total, scored = class_scores(node, forest, x)
    if k > 2:
        label, z = several_classes(node, total, scored, base, labels, post)
    else:
        weights = floats(node, "class_weights")
        one_class = len(set(ints(node, "class_ids").tolist())) == 1
        positive = weights is None or bool((weights >= 0).all())
        label, z = two_classes(node, total, scored, base, labels, post, one_class, positive)
    z = z if isinstance(element_of(z), Float32Type) else node.e.cast(z, F32)
    return [label if names is None else Labels(label, names), z]
