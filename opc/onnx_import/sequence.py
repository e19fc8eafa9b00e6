"""Sequence and optional ops: list plumbing at import (lists.py), no opc op of their own.

A sequence is a Python list of tensors whose length is known at compile time,
an optional 0 or 1 value, so these ops only move SSA values around: positions
must be known at compile time (a graph input that gives one is bound by value,
as a shape is), but SequenceAt's in a Loop body reading element i (the tensors,
of one element type and rank, stacked before the loop, padded where their shapes
differ; the row and its shape read at run time);
SequenceLength and OptionalHasElement are constants, and ConcatFromSequence /
SplitToSequence become one `concat` / a few `slice`s. Gradients flow through
them unchanged. SequenceMap's body is imported once per element. A sequence a
Loop carries is, in its body, one the body appends to (lists.Appended: the
loop stacks what each iteration appends, control_flow.py).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import tensor as xtensor
from xdsl.dialects.builtin import IndexType, IntegerAttr, i64
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects import slices
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.control_flow import as_value, import_body, slice_at, stackable, stacked_rows
from opc.onnx_import.graph import Node, converter
from opc.onnx_import.lists import Appended, Item, Items, Opt, Seq, Value


def sequence(node: Node, i: int, appending: bool = False) -> Seq:
    """Input i, a sequence; one a Loop carries (Appended) only where the node appends to it."""
    v = node.item(i)
    if not isinstance(v, Seq):
        raise node.fail(f"input {i} ('{node.proto.input[i]}') is not a sequence")
    if isinstance(v, Appended) and not appending:
        raise node.fail(f"input {i} ('{node.proto.input[i]}') is a sequence the Loop carries: opc keeps its "
                        "tensors in the loop's stacked buffers, so its body may only append to it "
                        "(SequenceInsert at the back)")
    return v


def position(node: Node, i: int, n: int, default: int, allow_end: bool) -> int:
    """Input i, a position in a sequence of n (negative: from the end), known at compile time."""
    p = int(np.asarray(node.const(i, "position")).reshape(-1)[0]) if node.has(i) else default
    high = n if allow_end else n - 1
    if not -n <= p <= high:
        raise node.fail(f"position {p} is out of range for a sequence of {n} "
                        f"(allowed: {-n} to {high})")
    return p + n if p < 0 else p


@converter("SequenceConstruct", "SequenceEmpty", since=11)
def sequence_construct(node: Node) -> Items:
    return [Seq(tuple(tensor(node, i) for i in range(node.n_inputs)))]


def tensor(node: Node, i: int) -> Value:
    v = node.item(i)
    if isinstance(v, (Seq, Opt)):
        raise node.fail(f"input {i} ('{node.proto.input[i]}') is a sequence or optional: "
                        "a sequence holds tensors only")
    return v


@converter("SequenceAt", since=11)
def sequence_at(node: Node) -> Items:
    seq = sequence(node, 0)
    if node.has(1) and not node.known(1) and node.proto.input[1] not in node.importer.graph_inputs \
            and seq.items and stackable(seq):  # (a graph input is bound by value, as positions are)
        return [at_run_time(node, seq)]
    return [seq.items[position(node, 1, len(seq.items), 0, allow_end=False)]]


def at_run_time(node: Node, seq: Seq) -> SSAValue:
    """The tensor at a position known at run time only (a Loop's iteration number) of a sequence of
    tensors of one element type and rank: the tensors stacked (before the loop where a Loop's body
    reads them: control_flow.sequences_stacked), the row at the position read as a view (negative:
    from the end; out of range: the slice's ValueError at the call). Where their shapes differ, the
    stack is padded and the row cut to the tensor's own shape, read from a table of the shapes
    (sizes read from values, at most the padded ones)."""
    e = node.e
    given = node.importer.stacked.get(id(seq))
    stacked = given[1] if given is not None and given[0] is seq else stacked_rows(node, seq)
    n_rows = len(seq.items)
    p = e.value(arith.IndexCastOp(e.value(xtensor.ExtractOp(e.reshape(node.input(1), []), [],
                                                            element_of(node.input(1)))), IndexType()))
    zero, n = (e.value(arith.ConstantOp(IntegerAttr(k, IndexType()))) for k in (0, n_rows))
    from_end = e.value(arith.AddiOp(p, n))
    p = e.value(arith.SelectOp(e.value(arith.CmpiOp(p, zero, "slt")), from_end, p))
    shapes = np.array([dims(v) for v in seq.items], np.int64).reshape(n_rows, -1)
    varying = [d for d in range(shapes.shape[1]) if len(set(shapes[:, d])) > 1]
    if not varying:
        return slice_at(e, stacked, 0, p)
    table = e.constant(shapes[:, varying])
    padded = list(shape_of(stacked))[1:]
    sizes: list[int | SSAValue] = list(padded)
    for k, d in enumerate(varying):
        at = e.value(arith.ConstantOp(IntegerAttr(k, IndexType())))
        n_d = e.value(arith.IndexCastOp(e.value(xtensor.ExtractOp(table, [p, at], i64)), IndexType()))
        if e.tracker is not None:  # at most the padded size: what a loop stacking it pads it to
            s = e.tracker.sizes
            s.scalars[n_d] = s.fresh_data(n_d.owner, padded[d], "a size of a sequence's tensor")  # type: ignore[arg-type]
        sizes[d] = n_d
    result = o.tensor([o.DYNAMIC if d in varying else n for d, n in enumerate(padded)], element_of(stacked))
    return e.value(slices.extract_slice(stacked, [p, *[0] * len(padded)], [1, *sizes], [1] * (1 + len(padded)),
                                        result))


@converter("SequenceInsert", since=11)
def sequence_insert(node: Node) -> Items:
    seq = sequence(node, 0, appending=not node.has(2))
    items = list(seq.items)
    items.insert(position(node, 2, len(items), len(items), allow_end=True), tensor(node, 1))
    return [type(seq)(tuple(items))]


@converter("SequenceErase", since=11)
def sequence_erase(node: Node) -> Items:
    seq = sequence(node, 0)
    if not seq.items:
        raise node.fail("the sequence is empty: nothing to erase")
    items = list(seq.items)
    del items[position(node, 1, len(items), -1, allow_end=False)]
    return [Seq(tuple(items))]


@converter("SequenceLength", since=11)
def sequence_length(node: Node) -> Items:
    return [np.array(len(sequence(node, 0).items), np.int64)]


# ---------------------------------------------------------------------------
# Tensors from sequences and back
# ---------------------------------------------------------------------------


def dims(v: Value) -> list[int]:
    """The shape of a tensor of a sequence: an SSA value or an array known at compile time."""
    return list(shape_of(v)) if isinstance(v, SSAValue) else list(np.shape(v))


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(node: Node) -> Items:
    items = list(sequence(node, 0).items)
    if not items:
        raise node.fail("the sequence is empty: ConcatFromSequence needs at least one tensor")
    new_axis = int(node.attr("new_axis", 0))
    rank = len(dims(items[0]))
    axis = node.axis(int(node.attr("axis")), rank + 1 if new_axis else rank)
    if new_axis:  # each tensor gets a 1 at axis, then they are concatenated: a stack
        items = [np.expand_dims(np.asarray(v), axis) if not isinstance(v, SSAValue)
                 else node.e.reshape(v, dims(v)[:axis] + [1] + dims(v)[axis:]) for v in items]
    if all(not isinstance(v, SSAValue) for v in items):
        return [np.concatenate([np.asarray(v) for v in items], axis=axis)]
    if len(items) == 1:
        return [items[0]]
    return [node.e.value(o.ConcatOp([as_value(node, v) for v in items], axis))]


def cut(node: Node, x: Value, axis: int, start: int, stop: int) -> Value:
    """x[..., start:stop, ...] along axis."""
    if not isinstance(x, SSAValue):
        return np.take(np.asarray(x), np.arange(start, stop), axis=axis)
    shape = dims(x)
    if (start, stop) == (0, shape[axis]):
        return x
    begin, limit = [0] * len(shape), list(shape)
    begin[axis], limit[axis] = start, stop
    return node.e.value(o.SliceOp(x, begin, limit, [1] * len(shape)))


@converter("SplitToSequence", since=11)
def split_to_sequence(node: Node) -> Items:
    x = tensor(node, 0)
    shape = dims(x)
    axis = node.axis(int(node.attr("axis", 0)), len(shape))
    length = shape[axis]
    keepdims = int(node.attr("keepdims", 1))
    if node.has(1):
        split = np.asarray(node.const(1, "split")).astype(np.int64)
        if split.ndim == 0:  # chunks of that size, the last one shorter
            size = int(split)
            if size < 1:
                raise node.fail(f"split must be positive, got {size}")
            sizes = [min(size, length - s) for s in range(0, length, size)]
        else:
            sizes = [int(s) for s in split.reshape(-1)]
            if any(s < 0 for s in sizes) or sum(sizes) != length:
                raise node.fail(f"split {sizes} does not add up to the length {length} of axis {axis}")
        keepdims = 1  # ignored when split is given
    else:
        sizes = [1] * length
    out: list[Value] = []
    start = 0
    for size in sizes:
        piece = cut(node, x, axis, start, start + size)
        if not keepdims:
            piece = (np.squeeze(np.asarray(piece), axis) if not isinstance(piece, SSAValue)
                     else node.e.reshape(piece, shape[:axis] + shape[axis + 1:]))
        out.append(piece)
        start += size
    return [Seq(tuple(out))]


# ---------------------------------------------------------------------------
# SequenceMap
# ---------------------------------------------------------------------------


@converter("SequenceMap", since=17)
def sequence_map(node: Node) -> Items:
    inputs = [sequence(node, i) if isinstance(node.item(i), Seq) else node.item(i) for i in range(node.n_inputs)]
    lengths = {len(v.items) for v in inputs if isinstance(v, Seq)}
    if not isinstance(inputs[0], Seq):
        raise node.fail("input 0 is not a sequence")
    if len(lengths) != 1:
        raise node.fail(f"its sequences have different lengths {sorted(lengths)}")
    (n,) = lengths
    n_out = len(node.attr("body").output)
    outs: list[list[Value]] = [[] for _ in range(n_out)]
    for k in range(n):
        args = [v.items[k] if isinstance(v, Seq) else v for v in inputs]
        for j, out in enumerate(import_body(node, "body", args)):
            if isinstance(out, (Seq, Opt)):
                raise node.fail(f"the body's output {j} is a sequence or optional: SequenceMap maps to tensors")
            outs[j].append(out)
    return [Seq(tuple(o_)) for o_ in outs]


# ---------------------------------------------------------------------------
# Optionals
# ---------------------------------------------------------------------------


@converter("Optional", since=15)
def optional(node: Node) -> Items:
    return [Opt(node.item(0) if node.has(0) else None)]


def has_element(v: Item | None) -> bool:
    return v is not None and not (isinstance(v, Opt) and v.item is None)


@converter("OptionalHasElement", since=15)
def optional_has_element(node: Node) -> Items:
    return [np.array(has_element(node.item(0) if node.has(0) else None))]


@converter("OptionalGetElement", since=15)
def optional_get_element(node: Node) -> Items:
    v = node.item(0)
    if isinstance(v, Opt):  # a tensor or a sequence (opset 18 on) is its own element
        if v.item is None:
            raise node.fail(f"the optional '{node.proto.input[0]}' is empty: it has no element to get")
        return [v.item]
    return [v]
