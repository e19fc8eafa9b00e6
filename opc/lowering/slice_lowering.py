"""`tensor.extract_slice` and `tensor.insert_slice` at the loop level (opc/dialects/slices.py).

- extract_slice is an index map, like opc.slice: its value at idx is the source's at
  offset + idx * stride (a dropped unit dim read at the offset), evaluated inside its
  consumer's nest;
- insert_slice is a placement: the dest copied into the result, then the source stored at
  offset + idx * stride;
- before either, on the host, each offset and size known only at run time is checked
  (opc_loops.check_bound): a size in [0, dim], an offset in [0, dim - extent]. A failed check
  ends the call with a ValueError naming the op, the dim and the bounds, so the nests after it
  never read or write out of bounds.

Offsets are any `index` value: a size the function knows (tensor.dim arithmetic) is read from
the size parameters, anything else (an scf.for induction variable, arithmetic on it) is
lowered as host scalar code before the slice.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, memref, tensor
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Operation, SSAValue

from opc.dialects import slices
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc_loops import CheckBoundOp
from opc.dialects.slices import DYNAMIC_INDEX
from opc.lowering.control_flow_lowering import on_host
from opc.lowering.nn_lowering import braces, contiguous_strides
from opc.lowering.size_lowering import memref_type
from opc.symbolic import Size, Sym
from opc.transforms.opc_outline_control_flow import in_place_pairs


def known_size(fl, v: SSAValue) -> Size | None:  # noqa: ANN001  (a FunctionLowering)
    """v as a size the function knows at compile time (a number or a polynomial of its size
    parameters), else None (a value computed at run time, e.g. from an induction variable)."""
    if fl.sizes is not None and v in fl.sizes.scalars:
        return fl.sizes.resolve(fl.sizes.scalars[v])
    op = v.owner
    if isinstance(op, arith.ConstantOp):
        return op.value.value.data  # type: ignore[union-attr]  (an index constant)
    if isinstance(op, tensor.DimOp) and isinstance(op.index.owner, arith.ConstantOp):
        n = shape_of(op.source)[op.index.owner.value.value.data]  # type: ignore[union-attr]
        return n if isinstance(n, int) or fl.sizes is not None else None
    return None


def index_value(fl, v: int | SSAValue) -> SSAValue:  # noqa: ANN001
    """The lowered `index` value of an offset or size."""
    if isinstance(v, int):
        return fl.e.index(v)
    size = known_size(fl, v)
    if size is not None:
        return fl.size_value(size)
    return fl.operand_buffer(v)


def size_of(fl, n: int | SSAValue) -> Size:  # noqa: ANN001
    if isinstance(n, int):
        return n
    size = known_size(fl, n)
    assert size is not None, "the size analysis admits only sizes it knows"
    return size


def text(d: Size) -> str:
    """`n0 - 2` rather than Sym's `(-2) + n0`: the symbols first, the constant after."""
    if isinstance(d, int):
        return str(d)
    const = dict(d.terms).get((), 0)
    rest = Sym({m: c for m, c in d.terms if m}).render()
    return rest if const == 0 else f"{rest} {'-' if const < 0 else '+'} {abs(const)}"


def describe(fl, d: Size) -> str:  # noqa: ANN001
    """A size for a message: its number, or its expression and what its symbols are."""
    if isinstance(d, int):
        return str(d)
    origin = fl.sizes.origin if fl.sizes is not None else {}
    names = ", ".join(f"{s} the size of {origin[s]}" for s in sorted(d.symbols) if s in origin)
    return f"{text(d)}, {names}" if names else text(d)


def host_index(fl, d: Size | None) -> SSAValue:  # noqa: ANN001
    """A size as an `index` value the host reads (the CUDA host declares only constants marked so)."""
    assert d is not None, "tensor.dim of a dim the size analysis knows"
    if isinstance(d, int):
        return fl.e.value(on_host(arith.ConstantOp(IntegerAttr(d, IndexType()))))
    return fl.size_value(d)


def check(fl, op: Operation, value: Size | SSAValue, bound: Size, message: str) -> None:  # noqa: ANN001
    code = fl.checks.code(op, "ValueError", f"{op.name}: {message}")
    v = value if isinstance(value, SSAValue) else host_index(fl, value)
    fl.e.emit(on_host(CheckBoundOp(v, host_index(fl, bound), code)))


def emit_checks(fl, op: tensor.ExtractSliceOp | tensor.InsertSliceOp) -> None:  # noqa: ANN001
    """Each offset and size not verified at compile time, checked on the host before the slice."""
    p = slices.params(op)
    whole = slices.whole_type(op).get_shape()
    dims = shape_of(op.source if isinstance(op, tensor.ExtractSliceOp) else op.dest)
    what = "source" if isinstance(op, tensor.ExtractSliceOp) else "dest"
    for d, (dim, off, n, st) in enumerate(zip(dims, p.offsets, p.sizes, p.strides)):
        size = size_of(fl, n)
        span: Size = slices.extent(size, st) if isinstance(size, int) else size
        dim_text = braces(describe(fl, dim))
        if isinstance(size, Sym):  # a run-time size: in [0, dim]
            check(fl, op, size, dim + 1,
                  f"dim {d} has size {{value}}, outside [0, {dim_text}] (the {what}'s dim {d})")
        if isinstance(off, int) and isinstance(dim, int) and isinstance(span, int) and whole[d] != -1:
            continue  # verified (opc/dialects/slices.py)
        bound = dim - span + 1
        if isinstance(off, int) and isinstance(bound, int) and off < bound:
            continue
        check(fl, op, off if isinstance(off, int) else index_value(fl, off), bound,
              f"dim {d} has offset {{value}}, outside [0, {braces(text(dim - span))}]: a slice of size "
              f"{braces(text(size))}{f' (stride {st})' if st != 1 else ''} of the {what}'s dim {d} of size {dim_text}")


def source_index(fl, op: tensor.ExtractSliceOp | tensor.InsertSliceOp,  # noqa: ANN001
                 idx: Sequence[SSAValue]) -> list[SSAValue]:
    """The whole tensor's index of the slice's element at idx."""
    p = slices.params(op)
    e = fl.e
    out, given = [], iter(idx)
    for d, (off, st) in enumerate(zip(p.offsets, p.strides)):
        i = next(given) if d in p.kept else e.index(0)
        v = i if st == 1 else e.value(arith.MuliOp(i, e.index(st)))
        if off != 0:
            v = e.value(arith.AddiOp(v, index_value(fl, off)))
        out.append(v)
    return out


def extract_value(fl, op: tensor.ExtractSliceOp, idx: Sequence[SSAValue]) -> SSAValue:  # noqa: ANN001
    """The scalar of the slice at idx (an index map, like opc.slice)."""
    return fl.value_at(op.source, source_index(fl, op, idx))


def lower_slice_view(fl, op: tensor.ExtractSliceOp) -> None:  # noqa: ANN001
    """A contiguous slice of an argument (opc-schedule's plan_slice_views): the source's buffer read
    from the slice's first element on, without a copy. Its offset is computed on the host, after
    emit_checks has bounded it."""
    e, p = fl.e, slices.params(op)
    steps = contiguous_strides([int(d) for d in shape_of(op.source)])  # static (plan_slice_views)
    offset = host_index(fl, sum(off * step for off, step in zip(p.offsets, steps) if isinstance(off, int)))
    for off, step in zip(p.offsets, steps):
        if not isinstance(off, int):
            term = index_value(fl, off)
            if step != 1:
                term = e.value(on_host(arith.MuliOp(term, host_index(fl, step))))
            offset = e.value(on_host(arith.AddiOp(offset, term)))
    shape = [int(d) for d in shape_of(op.result)]
    view = e.value(memref.ReinterpretCastOp(fl.operand_buffer(op.source), [offset], [], [], [DYNAMIC_INDEX], shape,
                                            contiguous_strides(shape), memref_type(element_of(op.result), shape)))
    view.name_hint = op.result.name_hint
    fl.buffers[op.result] = view


def lower_insert_slice(fl, op: tensor.InsertSliceOp) -> None:  # noqa: ANN001
    """The dest copied into the result, then the source placed at its offsets (in a loop body
    that updates the dest in place, the source only: the result's buffer is the dest's)."""
    e, out = fl.e, fl.buffer_for(op.result)
    if not in_place(fl, op):
        e.parallel(shape_of(op.result), lambda idx: e.store(fl.value_at(op.dest, idx), out, idx))
    e.parallel(shape_of(op.source), lambda idx: e.store(fl.value_at(op.source, idx), out,
                                                        source_index(fl, op, idx)))


def in_place(fl, op: tensor.InsertSliceOp) -> bool:  # noqa: ANN001
    """Whether op's dest is an argument its host passes in the buffer of the output op gives
    (opc-outline-control-flow's IN_PLACE_ATTR)."""
    if op.result not in fl.returned:
        return False
    args, out = list(fl.fn.args), fl.returned.index(op.result)
    return any(op.dest is args[a] and o == out for a, o in in_place_pairs(fl.fn))


__all__ = ["emit_checks", "extract_value", "host_index", "known_size", "lower_insert_slice", "lower_slice_view"]
