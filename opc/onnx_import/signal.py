"""More ONNX converters (issue 18, item 3): BitShift and BitwiseAnd / Or / Xor / Not onto opc's
bitwise ops (which give ONNX's values where C leaves a shift undefined: a count below 0 or of the
width or more gives 0 to the left, the sign fill to the right); BitCast onto opc.bitcast; the window
functions (constants);
CumProd, TopK, ReverseSequence, CenterCropPad, LpPool, DFT, STFT and Col2Im composed of slices, gathers, reductions,
avg_pool. Sizes, K and sequence lengths must be known at compile time."""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.onnx_import.tensor import iota, scalar
from opc.onnx_import.graph import BY_NUMPY, ELEMENT_TYPES, Node, converter, dtype_name, numpy_dtype_of

Values = list[SSAValue | np.ndarray]

BITWISE = {"BitwiseAnd": o.BitwiseAndOp, "BitwiseOr": o.BitwiseOrOp, "BitwiseXor": o.BitwiseXorOp}


@converter(*BITWISE, since=18)
def bitwise(node: Node) -> Values:
    return [node.e.value(BITWISE[node.op_type](node.input(0), node.input(1)))]


@converter("BitwiseNot", since=18)
def bitwise_not(node: Node) -> Values:
    return [node.e.value(o.BitwiseNotOp(node.input(0)))]


@converter("BitCast", since=26)
def bit_cast(node: Node) -> Values:
    """The bits of each element read as `to`, of the same width (float8 / int4 types are refused: opc
    has no such element type)."""
    to = node.attr("to")
    if to not in ELEMENT_TYPES:
        raise node.fail(f"bitcast to {dtype_name(to)} is not supported")
    x, element = node.input(0), ELEMENT_TYPES[to][1]
    src = x.type.element_type  # type: ignore[attr-defined]
    if o.storage_bits(src) != o.storage_bits(element) or (o.is_bool(element) and not o.is_bool(src)):
        raise node.fail(f"bitcast from {src} to {element}: the element types must have one width "
                        "(and to bool only from bool)")
    return [x if src == element else node.e.value(o.BitcastOp(x, element))]


@converter("BitShift", since=11)
def bit_shift(node: Node) -> Values:
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    op = o.ShiftLeftOp if direction == "LEFT" else o.ShiftRightOp
    return [node.e.value(op(node.input(0), node.input(1)))]


# ---------------------------------------------------------------------------
# Windows: known at compile time (the size is), computed with NumPy as ONNX's formulas say
# ---------------------------------------------------------------------------

WINDOWS = {  # w[n] from the angle 2 pi n / N' (N' = N periodic, N - 1 symmetric)
    "HannWindow": lambda t: np.sin(t / 2) ** 2,
    "HammingWindow": lambda t: 25 / 46 - (1 - 25 / 46) * np.cos(t),
    "BlackmanWindow": lambda t: 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t),
}


@converter(*WINDOWS, since=17)
def window(node: Node) -> Values:
    from onnx.helper import tensor_dtype_to_np_dtype

    size = int(node.const(0, "size").reshape(-1)[0])
    if size < 1:
        raise node.fail(f"size must be positive, got {size}")
    periodic = int(node.attr("periodic", 1))
    n = np.arange(size, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # symmetric of size 1: 0 / 0, NaN as ONNX's reference gives
        angle = 2 * np.pi * n / (size if periodic else size - 1)
    return [WINDOWS[node.op_type](angle).astype(tensor_dtype_to_np_dtype(int(node.attr("output_datatype", 1))))]


# ---------------------------------------------------------------------------
# Scans and selections along an axis
# ---------------------------------------------------------------------------


def along(node: Node, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
    """x[..., start:stop, ...] on `axis`."""
    shape = list(x.type.get_shape())  # type: ignore[attr-defined]
    lo, hi = [0] * len(shape), list(shape)
    lo[axis], hi[axis] = start, stop
    return node.e.value(o.SliceOp(x, lo, hi))


def flip(node: Node, x: SSAValue, axis: int) -> SSAValue:
    n = x.type.get_shape()[axis]  # type: ignore[attr-defined]
    return node.e.value(o.GatherOp(x, node.e.constant(np.arange(n - 1, -1, -1, dtype=np.int64)), axis))


def shifted_in(node: Node, x: SSAValue, axis: int, k: int, fill: float) -> SSAValue:
    """x moved k places along axis, the first k filled with `fill`."""
    shape = list(x.type.get_shape())  # type: ignore[attr-defined]
    head = list(shape)
    head[axis] = k
    pad = node.e.constant(np.full(head, fill, numpy_dtype_of(x.type.element_type)))  # type: ignore[attr-defined]
    if k >= shape[axis]:
        return pad if k == shape[axis] else along(node, pad, axis, 0, shape[axis])
    return node.e.value(o.ConcatOp([pad, along(node, x, axis, 0, shape[axis] - k)], axis))


@converter("CumProd", since=26)
def cumprod(node: Node) -> Values:
    """Prefix products by doubling (Hillis-Steele): y *= y shifted by 1, 2, 4, ... places (1s shifted in),
    log2(n) multiplies of the whole tensor; exclusive shifts x by one first, reverse flips around it.
    Integers wrap as their multiply does."""
    x = node.input(0)
    shape = node.shape(0)
    axis = node.axis(int(node.const(1, "axis").reshape(-1)[0]), len(shape))
    n = shape[axis] if shape else 1
    if not shape or n == 0:
        return [x]
    reverse = bool(node.attr("reverse", 0))
    y = flip(node, x, axis) if reverse else x
    if node.attr("exclusive", 0):
        y = shifted_in(node, y, axis, 1, 1)
    k = 1
    while k < n:
        y = node.e.mul(y, shifted_in(node, y, axis, k, 1))
        k *= 2
    return [flip(node, y, axis) if reverse else y]


@converter("TopK", since=11)
def top_k(node: Node) -> Values:
    """k rounds of (the extreme of what is left, its first position), each position taken then masked
    out: sorted, ties to the lower index, as ONNX specifies. Floats with NaN are not ordered here."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    axis = node.axis(int(node.attr("axis", -1)), len(shape))
    k = int(node.const(1, "K").reshape(-1)[0])
    if not 0 <= k <= shape[axis]:
        raise node.fail(f"K = {k} is out of range for axis {axis} of size {shape[axis]}")
    if k == 0:
        raise node.fail("K = 0 (an empty result) is not supported")
    largest = bool(node.attr("largest", 1))
    dtype = numpy_dtype_of(x.type.element_type)  # type: ignore[attr-defined]
    if dtype.kind == "f":
        worst = -np.inf if largest else np.inf
    else:
        worst = np.iinfo(dtype).min if largest else np.iinfo(dtype).max
    reduce = o.ReduceMaxOp if largest else o.ReduceMinOp
    where = e.constant(iota(shape, axis))
    past_end = e.constant(np.array(shape[axis], np.int64))
    no, sentinel = e.constant(np.array(False)), e.constant(np.array(worst, dtype))
    taken = None
    values, indices = [], []
    for _ in range(k):
        left = x if taken is None else e.select(taken, sentinel, x)
        best = e.value(reduce(left, [axis], True))
        hit = e.value(o.EqualOp(left, best))
        if taken is not None:
            hit = e.select(taken, no, hit)
        first = e.value(o.ReduceMinOp(e.select(hit, where, past_end), [axis], True))
        values.append(best)
        indices.append(first)
        chosen = e.value(o.EqualOp(where, first))
        taken = chosen if taken is None else e.select(taken, taken, chosen)
    if k == 1:
        return [values[0], indices[0]]
    return [e.value(o.ConcatOp(values, axis)), e.value(o.ConcatOp(indices, axis))]


@converter("ReverseSequence", since=10)
def reverse_sequence(node: Node) -> Values:
    """One gather from the flattened data at indices known at compile time (the lengths must be):
    x[b, t] <- x[b, len[b] - 1 - t] for t < len[b]."""
    e = node.e
    shape = node.shape(0)
    if len(shape) < 2:
        raise node.fail(f"the input must have rank 2 or more, got rank {len(shape)}")
    batch_axis, time_axis = int(node.attr("batch_axis", 1)), int(node.attr("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise node.fail(f"batch_axis and time_axis must be 0 and 1, got {batch_axis} and {time_axis}")
    lens = node.const(1, "sequence_lens").reshape(-1).astype(np.int64)
    if len(lens) != shape[batch_axis] or np.any(lens < 0) or np.any(lens > shape[time_axis]):
        raise node.fail(f"sequence_lens {lens.tolist()} must be {shape[batch_axis]} lengths in "
                        f"[0, {shape[time_axis]}]")
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    source = index.copy()
    for b, n in enumerate(lens):
        pick = [slice(None)] * len(shape)
        pick[batch_axis] = b
        dst, src = list(pick), list(pick)
        dst[time_axis], src[time_axis] = slice(0, n), slice(n - 1, None, -1) if n else slice(0, 0)
        source[tuple(dst)] = index[tuple(src)]
    flat = e.reshape(node.input(0), [math.prod(shape)])
    return [e.value(o.GatherOp(flat, e.constant(source), 0))]


@converter("CenterCropPad", since=18)
def center_crop_pad(node: Node) -> Values:
    """Per axis: a centred slice where the target is smaller, zeros around where it is larger
    (the odd one of the difference at the end), as ONNX's reference."""
    e, x = node.e, node.input(0)
    shape = list(node.shape(0))
    target = [int(v) for v in node.const(1, "shape").reshape(-1)]
    axes = [node.axis(int(a), len(shape)) for a in node.attr("axes", list(range(len(shape))))]
    if len(axes) != len(target):
        raise node.fail(f"shape has {len(target)} sizes for {len(axes)} axes")
    dtype = numpy_dtype_of(x.type.element_type)  # type: ignore[attr-defined]
    for a, want in zip(axes, target):
        have = list(x.type.get_shape())[a]  # type: ignore[attr-defined]
        if want < have:
            start = (have - want) // 2
            x = along(node, x, a, start, start + want)
        elif want > have:
            before = (want - have) // 2
            parts = []
            for size in (before, want - have - before):
                pad_shape = list(x.type.get_shape())  # type: ignore[attr-defined]
                pad_shape[a] = size
                parts.append(e.constant(np.zeros(pad_shape, dtype)) if size else None)
            x = e.value(o.ConcatOp([p for p in (parts[0], x, parts[1]) if p is not None], a))
    return [x]


@converter("LpPool", since=11)
def lp_pool(node: Node) -> Values:
    """(sum over the window of |x|^p)^(1/p): an avg_pool of |x|^p that counts the padding, times the kernel
    size (padding adds nothing to the sum)."""
    from opc.onnx_import.nn import built, pool_props

    e, x = node.e, node.input(0)
    p = float(node.attr("p", 2))
    if p <= 0:
        raise node.fail(f"p must be positive, got {p}")
    ax = e.value(o.AbsOp(x))
    powered = e.mul(ax, ax) if p == 2 else e.value(o.PowOp(ax, scalar(node, p, x)))
    props = pool_props(node, True)
    props["count_include_pad"] = o.BoolAttr.from_bool(True)
    avg = built(node, "avg_pool", lambda: o.AvgPoolOp(powered, props)).results[0]
    total = e.mul(avg, scalar(node, float(math.prod(int(k) for k in node.attr("kernel_shape"))), x))
    return [e.value(o.SqrtOp(total)) if p == 2 else e.value(o.PowOp(total, scalar(node, 1 / p, x)))]


# ---------------------------------------------------------------------------
# Linear maps known at compile time: one matmul with a constant matrix
# ---------------------------------------------------------------------------


def rows_times(node: Node, x: SSAValue, axis: int, matrix: np.ndarray) -> SSAValue:
    """x with its `axis` (moved last, flattened with the others into rows) multiplied by matrix,
    the new axis put back in place."""
    e = node.e
    shape = list(x.type.get_shape())  # type: ignore[attr-defined]
    perm = [d for d in range(len(shape)) if d != axis] + [axis]
    moved = e.transpose(x, perm)
    lead = [shape[d] for d in perm[:-1]]
    dtype = numpy_dtype_of(x.type.element_type)  # type: ignore[attr-defined]
    out = e.matmul(e.reshape(moved, [max(math.prod(lead), 1), shape[axis]]), e.constant(matrix.astype(dtype)))
    out = e.reshape(out, [*lead, matrix.shape[1]])
    return e.transpose(out, list(np.argsort(perm)))


def dft_matrices(n_in: int, length: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, np.ndarray]:
    """(C, S): the output's real part is re @ C - im @ S, its imaginary part re @ S + im @ C, where the
    input has n_in points (zero-padded or cut to `length`, as numpy.fft's n=)."""
    j = np.arange(n_in)[:, None]
    if inverse and onesided:  # irfft: the Hermitian half, each inner frequency counted twice, real out
        k, t = np.arange(n_in)[:, None], np.arange(length)[None, :]
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0) * (k <= length // 2)
        angle = 2 * np.pi * k * t / length
        return weight * np.cos(angle) / length, weight * np.sin(angle) / length
    k = np.arange(length // 2 + 1 if onesided else length)[None, :]
    angle = 2 * np.pi * j * k / length
    used = j < length
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    return used * np.cos(angle) * scale, used * sign * np.sin(angle) * scale


def dft(node: Node, axis: int, length_input: int | None) -> Values:
    """DFT as two matmuls with cos / sin matrices along the axis (known at compile time: O(n^2) work,
    exact to rounding); the last dim holds (real) or (real, imaginary)."""
    shape = node.shape(0)
    rank = len(shape)
    axis = node.axis(axis, rank)
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    n_in = shape[axis]
    if length_input is not None and node.has(length_input):
        length = int(node.const(length_input, "dft_length").reshape(-1)[0])
    else:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    return [transform(node, node.input(0), axis, length, inverse, onesided)]


def transform(node: Node, x: SSAValue, axis: int, length: int, inverse: bool, onesided: bool) -> SSAValue:
    e = node.e
    shape = list(x.type.get_shape())  # type: ignore[attr-defined]
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise node.fail(f"the last dim must be 1 (real) or 2 (complex), got shape {list(shape)}")
    if axis == rank - 1:
        raise node.fail("axis must not be the last (the real/imaginary) dim")
    if length < 1:
        raise node.fail(f"dft_length must be positive, got {length}")
    cos, sin = dft_matrices(shape[axis], length, inverse, onesided)
    dtype = numpy_dtype_of(x.type.element_type)  # type: ignore[attr-defined]
    if dtype != np.float64:  # sums of n terms in float64, rounded once (as numpy.fft's result, cast)
        x = e.cast(x, BY_NUMPY[np.dtype(np.float64)])
    squeeze = [*shape[:-1]]
    re = e.reshape(along(node, x, rank - 1, 0, 1), squeeze)
    im = e.reshape(along(node, x, rank - 1, 1, 2), squeeze) if shape[-1] == 2 else None
    out_re = rows_times(node, re, axis, cos)
    if im is not None:
        out_re = e.sub(out_re, rows_times(node, im, axis, sin))
    out_shape = list(out_re.type.get_shape())  # type: ignore[attr-defined]
    parts = [out_re]
    if not (inverse and onesided):
        out_im = rows_times(node, re, axis, sin)
        if im is not None:
            out_im = e.add(out_im, rows_times(node, im, axis, cos))
        parts.append(out_im)
    parts = [e.reshape(p, [*out_shape, 1]) for p in parts]
    out = parts[0] if len(parts) == 1 else e.value(o.ConcatOp(parts, rank - 1))
    return out if dtype == np.float64 else e.cast(out, BY_NUMPY[dtype])


@converter("STFT", since=17)
def stft(node: Node) -> Values:
    """Frames (one gather at compile-time positions: frame_step and the frame length must be known),
    times the window, then the DFT of each frame (one-sided by default)."""
    e, signal = node.e, node.input(0)
    batch, n, last = node.shape(0)
    step = int(node.const(1, "frame_step").reshape(-1)[0])
    if node.has(3):
        length = int(node.const(3, "frame_length").reshape(-1)[0])
    elif node.has(2):
        length = node.shape(2)[0]
    else:
        raise node.fail("the window or frame_length must be given")
    if step < 1 or not 1 <= length <= n:
        raise node.fail(f"frame_step {step} and frame_length {length} do not fit a signal of {n}")
    frames = (n - length) // step + 1
    at = (np.arange(frames)[:, None] * step + np.arange(length)[None, :]).astype(np.int64)
    x = e.value(o.GatherOp(signal, e.constant(at), 1))  # [batch, frames, length, last]
    if node.has(2):
        if node.shape(2) != (length,):
            raise node.fail(f"the window has shape {list(node.shape(2))}, expected [{length}]")
        x = e.mul(x, e.reshape(node.input(2), [1, 1, length, 1]))
    onesided = bool(node.attr("onesided", 1))
    if onesided and last == 2:
        raise node.fail("a one-sided STFT of a complex signal is not defined")
    return [transform(node, x, 2, length, False, onesided)]


@converter("DFT", since=17)
def dft_axis_attribute(node: Node) -> Values:
    return dft(node, int(node.attr("axis", 1)), 1)


@converter("DFT", since=20)
def dft_axis_input(node: Node) -> Values:
    axis = int(node.const(2, "axis").reshape(-1)[0]) if node.has(2) else -2
    return dft(node, axis, 1)


@converter("Col2Im", since=18)
def col2im(node: Node) -> Values:
    """The sum of the columns' blocks into the image: [N, C * K, L] times a 0/1 matrix [K * L, H * W]
    (each block element's pixel, from strides, pads and dilations), known at compile time."""
    e = node.e
    n, ckk, blocks = node.shape(0)
    image = [int(v) for v in node.const(1, "image_shape").reshape(-1)]
    block = [int(v) for v in node.const(2, "block_shape").reshape(-1)]
    r = len(image)
    if len(block) != r:
        raise node.fail(f"image_shape {image} and block_shape {block} differ in rank")
    strides = [int(v) for v in node.attr("strides", [1] * r)]
    dilations = [int(v) for v in node.attr("dilations", [1] * r)]
    pads = [int(v) for v in node.attr("pads", [0] * 2 * r)]
    counts = [(image[d] + pads[d] + pads[r + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(r)]
    k = math.prod(block)
    if ckk % k or blocks != math.prod(counts) or min(counts) < 1:
        raise node.fail(f"input shape {list(node.shape(0))} does not fit image {image}, block {block}: "
                        f"expected [N, C * {k}, {math.prod(counts)}]")
    matrix = np.zeros((k * blocks, math.prod(image)))
    for ki, offset in enumerate(np.ndindex(*block)):
        for li, at in enumerate(np.ndindex(*counts)):
            pixel = [at[d] * strides[d] - pads[d] + offset[d] * dilations[d] for d in range(r)]
            if all(0 <= pixel[d] < image[d] for d in range(r)):
                matrix[ki * blocks + li, np.ravel_multi_index(pixel, image)] += 1
    rows = e.reshape(node.input(0), [n * (ckk // k), k * blocks])
    dtype = numpy_dtype_of(rows.type.element_type)  # type: ignore[attr-defined]
    return [e.reshape(e.matmul(rows, e.constant(matrix.astype(dtype))), [n, ckk // k, *image])]


@converter("LRN", since=7)
def lrn(node: Node) -> Values:
    """x / (bias + alpha / size * window sum of x^2 over channels)^beta: the window sum one matmul of the
    channel axis by a 0/1 band matrix (channel c sums c - floor((size-1)/2) .. c + ceil((size-1)/2))."""
    e, x = node.e, node.input(0)
    shape = node.shape(0)
    if len(shape) < 3:
        raise node.fail(f"input must be [N, C, *spatial], got shape {list(shape)}")
    size = int(node.attr("size", 0))
    if size < 1:
        raise node.fail(f"size must be at least 1, got {size}")
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    channels = shape[1]
    c = np.arange(channels)
    band = ((c[:, None] >= c[None, :] - (size - 1) // 2) & (c[:, None] <= c[None, :] + size // 2)).astype(np.float64)
    window = rows_times(node, e.mul(x, x), 1, band)
    base = e.add(scalar(node, bias, x), e.scale(window, alpha / size))
    return [e.div(x, e.value(o.PowOp(base, scalar(node, beta, x))))]
