"""Signal processing: the window functions (HannWindow, HammingWindow, BlackmanWindow: constants),
DFT and STFT (matmuls by cos/sin matrices, in f64, known at import), MelWeightMatrix (computed
at compile time)."""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue

from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.onnx_import.common import Values, along, evaluated, rows_times
from opc.onnx_import.graph import BY_NUMPY, Node, converter, numpy_dtype_of

# Windows: known at compile time (the size is), computed with NumPy as ONNX's formulas say.
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
    shape = list(shape_of(x))
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise node.fail(f"the last dim must be 1 (real) or 2 (complex), got shape {list(shape)}")
    if axis == rank - 1:
        raise node.fail("axis must not be the last (the real/imaginary) dim")
    if length < 1:
        raise node.fail(f"dft_length must be positive, got {length}")
    cos, sin = dft_matrices(shape[axis], length, inverse, onesided)
    dtype = numpy_dtype_of(element_of(x))
    if dtype != np.float64:  # sums of n terms in float64, rounded once (as numpy.fft's result, cast)
        x = e.cast(x, BY_NUMPY[np.dtype(np.float64)])
    squeeze = [*shape[:-1]]
    re = e.reshape(along(node, x, rank - 1, 0, 1), squeeze)
    im = e.reshape(along(node, x, rank - 1, 1, 2), squeeze) if shape[-1] == 2 else None
    out_re = rows_times(node, re, axis, cos)
    if im is not None:
        out_re = e.sub(out_re, rows_times(node, im, axis, sin))
    out_shape = list(shape_of(out_re))
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


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(node: Node) -> Values:
    return evaluated(node, "MelWeightMatrix's sizes")
