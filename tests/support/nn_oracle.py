"""NumPy references of the nn ops for the differential fuzzer, written from SPEC.md and ONNX's
operator docs (layout NC + spatial; pads lists every begin pad, then every end pad), in float64.

Nothing here calls opc: the convolutions are sums over kernel taps of strided views of the padded
input, the pools walk their windows tap by tap, the norms and attention are their formulas.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np


def _padded(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    r = x.ndim - 2
    return np.pad(x, [(0, 0), (0, 0), *((pads[d], pads[r + d]) for d in range(r))], constant_values=value)


def conv_out(inp: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
             pads: Sequence[int]) -> tuple[int, ...]:
    r = len(inp)
    return tuple((inp[d] + pads[d] + pads[r + d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
                 for d in range(r))


def _taps(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]):
    """Each kernel offset k with the strided slice of the padded input that tap k reads for every output."""
    for k in itertools.product(*(range(n) for n in kernel)):
        yield k, tuple(slice(k[d] * dilations[d], k[d] * dilations[d] + strides[d] * (out[d] - 1) + 1, strides[d])
                       for d in range(len(kernel)))


def conv(x: np.ndarray, w: np.ndarray, strides, dilations, pads, group: int) -> np.ndarray:
    """y[n, o, p] = sum over c in o's group and k of x_pad[n, c, p * s + k * d] * w[o, c, k]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = _padded(x, pads)
    out = conv_out(x.shape[2:], w.shape[2:], strides, dilations, pads)
    og, cg = w.shape[0] // group, x.shape[1] // group
    y = np.zeros((x.shape[0], w.shape[0], *out))
    for k, window in _taps(w.shape[2:], strides, dilations, out):
        patch = xp[(slice(None), slice(None), *window)]
        for g in range(group):
            y[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg:(g + 1) * cg],
                                                   w[(slice(g * og, (g + 1) * og), slice(None), *k)])
    return y


def conv_input_grad(dout: np.ndarray, w: np.ndarray, x_shape, strides, dilations, pads, group: int) -> np.ndarray:
    """The adjoint of conv in x: every tap's product scattered back into the padded input, then cropped."""
    dout, w = dout.astype(np.float64), w.astype(np.float64)
    r = len(x_shape) - 2
    out = dout.shape[2:]
    big = [x_shape[2 + d] + pads[d] + pads[r + d] for d in range(r)]
    big = [max(b, dilations[d] * (w.shape[2 + d] - 1) + strides[d] * (out[d] - 1) + 1) for d, b in enumerate(big)]
    dxp = np.zeros((x_shape[0], x_shape[1], *big))
    og, cg = w.shape[0] // group, x_shape[1] // group
    for k, window in _taps(w.shape[2:], strides, dilations, out):
        for g in range(group):
            dxp[(slice(None), slice(g * cg, (g + 1) * cg), *window)] += np.einsum(
                "no...,oc->nc...", dout[:, g * og:(g + 1) * og], w[(slice(g * og, (g + 1) * og), slice(None), *k)])
    return dxp[(slice(None), slice(None), *(slice(pads[d], pads[d] + x_shape[2 + d]) for d in range(r)))]


def conv_filter_grad(x: np.ndarray, dout: np.ndarray, w_shape, strides, dilations, pads, group: int) -> np.ndarray:
    """dw[o, c, k] = sum over n and p of dout[n, o, p] * x_pad[n, c, p * s + k * d]."""
    x, dout = x.astype(np.float64), dout.astype(np.float64)
    xp = _padded(x, pads)
    og, cg = w_shape[0] // group, x.shape[1] // group
    dw = np.zeros(w_shape)
    for k, window in _taps(w_shape[2:], strides, dilations, dout.shape[2:]):
        patch = xp[(slice(None), slice(None), *window)]
        for g in range(group):
            summed = [0, *range(2, x.ndim)]  # n and the output positions
            dw[(slice(g * og, (g + 1) * og), slice(None), *k)] = np.tensordot(
                dout[:, g * og:(g + 1) * og], patch[:, g * cg:(g + 1) * cg], axes=(summed, summed))
    return dw


def conv_transpose(x: np.ndarray, w: np.ndarray, strides, dilations, pads, output_padding, group: int) -> np.ndarray:
    """PyTorch's ConvTranspose, w [C, O / group, *K]: each input element times the kernel, scattered to
    i * s + k * d of the full output, whose [pads_begin, pads_begin + out) part is the result."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    r = x.ndim - 2
    inp, kernel = x.shape[2:], w.shape[2:]
    out = [(inp[d] - 1) * strides[d] - pads[d] - pads[r + d] + dilations[d] * (kernel[d] - 1) + output_padding[d] + 1
           for d in range(r)]
    full = [max((inp[d] - 1) * strides[d] + dilations[d] * (kernel[d] - 1) + 1, pads[d] + out[d]) for d in range(r)]
    cg, og = x.shape[1] // group, w.shape[1]
    y = np.zeros((x.shape[0], og * group, *full))
    for k, window in _taps(kernel, strides, dilations, inp):
        for g in range(group):
            y[(slice(None), slice(g * og, (g + 1) * og), *window)] += np.einsum(
                "nc...,co->no...", x[:, g * cg:(g + 1) * cg], w[(slice(g * cg, (g + 1) * cg), slice(None), *k)])
    return y[(slice(None), slice(None), *(slice(pads[d], pads[d] + out[d]) for d in range(r)))]


def pool_out(inp: Sequence[int], kernel, strides, dilations, pads, ceil_mode: bool) -> tuple[int, ...]:
    """ONNX's and PyTorch's output length: floor or ceil, and with ceil_mode no window that starts in the end pad."""
    r, out = len(inp), []
    for d in range(r):
        span = inp[d] + pads[d] + pads[r + d] - dilations[d] * (kernel[d] - 1) - 1
        o = (math.ceil(span / strides[d]) if ceil_mode else span // strides[d]) + 1
        if ceil_mode and (o - 1) * strides[d] >= inp[d] + pads[d]:
            o -= 1
        out.append(o)
    return tuple(out)


def pool_windows(inp: Sequence[int], kernel, strides, dilations, pads, ceil_mode: bool):
    """(output position, the taps of its window as input positions (None in padding), how many of
    them lie in the padded input) for every output position."""
    r = len(inp)
    out = pool_out(inp, kernel, strides, dilations, pads, ceil_mode)
    for p in itertools.product(*(range(o) for o in out)):
        taps, padded = [], 0
        for k in itertools.product(*(range(n) for n in kernel)):
            pos = tuple(p[d] * strides[d] - pads[d] + k[d] * dilations[d] for d in range(r))
            inside = all(0 <= pos[d] < inp[d] for d in range(r))
            padded += all(pos[d] < inp[d] + pads[r + d] for d in range(r))
            taps.append(pos if inside else None)
        yield p, taps, padded


def max_pool(x: np.ndarray, kernel, strides, dilations, pads, ceil_mode: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """(y, indices, margin): the first maximum in window order and its flat index into x (ONNX's
    Indices, n and c included); margin is the least gap between a window's maximum and the next
    distinct value in it (a rounding difference smaller than that cannot move an index)."""
    x = x.astype(np.float64)
    n, c, inp = x.shape[0], x.shape[1], x.shape[2:]
    out = pool_out(inp, kernel, strides, dilations, pads, ceil_mode)
    y, idx = np.zeros((n, c, *out)), np.zeros((n, c, *out), np.int64)
    margin = math.inf
    for p, taps, _ in pool_windows(inp, kernel, strides, dilations, pads, ceil_mode):
        inside = [t for t in taps if t is not None]
        for i, j in itertools.product(range(n), range(c)):
            vals = [x[(i, j, *t)] for t in inside]
            best = int(np.argmax(vals))  # the first maximum
            y[(i, j, *p)] = vals[best]
            idx[(i, j, *p)] = np.ravel_multi_index((i, j, *inside[best]), x.shape)
            below = [vals[best] - v for v in vals if v != vals[best]]
            margin = min(margin, *below) if below else margin
    return y, idx, margin


def avg_pool(x: np.ndarray, kernel, strides, dilations, pads, ceil_mode: bool, count_include_pad: bool) -> np.ndarray:
    """The sum of a window's taps inside x over their count, or (count_include_pad) over the count
    of its taps inside the padded input."""
    x = x.astype(np.float64)
    n, c, inp = x.shape[0], x.shape[1], x.shape[2:]
    y = np.zeros((n, c, *pool_out(inp, kernel, strides, dilations, pads, ceil_mode)))
    for p, taps, padded in pool_windows(inp, kernel, strides, dilations, pads, ceil_mode):
        inside = [t for t in taps if t is not None]
        total = sum(x[(slice(None), slice(None), *t)] for t in inside)
        y[(slice(None), slice(None), *p)] = total / (padded if count_include_pad else len(inside))
    return y


def max_pool_grad(x_shape, indices: np.ndarray, dout: np.ndarray) -> np.ndarray:
    dx = np.zeros(int(np.prod(x_shape)))
    np.add.at(dx, indices.reshape(-1), dout.astype(np.float64).reshape(-1))
    return dx.reshape(x_shape)


def avg_pool_grad(x_shape, dout: np.ndarray, kernel, strides, dilations, pads, ceil_mode: bool,
                  count_include_pad: bool) -> np.ndarray:
    dout = dout.astype(np.float64)
    dx = np.zeros(x_shape)
    for p, taps, padded in pool_windows(x_shape[2:], kernel, strides, dilations, pads, ceil_mode):
        inside = [t for t in taps if t is not None]
        share = dout[(slice(None), slice(None), *p)] / (padded if count_include_pad else len(inside))
        for t in inside:
            dx[(slice(None), slice(None), *t)] += share
    return dx


def channel_view(v: np.ndarray, rank: int) -> np.ndarray:
    """A [C] vector as [C, 1, ...] to broadcast against [N, C, *spatial]."""
    return v.astype(np.float64).reshape((-1,) + (1,) * (rank - 2))


def batch_norm_training(x, scale, bias, mean, var, epsilon: float, momentum: float):
    """(y, running_mean, running_var, saved_mean, saved_rstd), statistics over N and the spatial dims
    (the biased variance, as ONNX)."""
    x = x.astype(np.float64)
    axes = (0, *range(2, x.ndim))
    m, v = x.mean(axis=axes), x.var(axis=axes)
    rstd = 1 / np.sqrt(v + epsilon)
    y = (x - channel_view(m, x.ndim)) * channel_view(rstd * scale, x.ndim) + channel_view(bias, x.ndim)
    return (y, momentum * mean.astype(np.float64) + (1 - momentum) * m,
            momentum * var.astype(np.float64) + (1 - momentum) * v, m, rstd)


def batch_norm_inference(x, scale, bias, mean, var, epsilon: float) -> np.ndarray:
    x, r = x.astype(np.float64), x.ndim
    return (x - channel_view(mean, r)) / np.sqrt(channel_view(var, r) + epsilon) * channel_view(scale, r) \
        + channel_view(bias, r)


def batch_norm_grad(x, scale, saved_mean, saved_rstd, dy):
    """xhat = (x - mean) * rstd, g = dy * scale; dx = rstd * (g - E[g] - xhat * E[g * xhat])."""
    x, dy, r = x.astype(np.float64), dy.astype(np.float64), x.ndim
    axes = (0, *range(2, r))
    xhat = (x - channel_view(saved_mean, r)) * channel_view(saved_rstd, r)
    g = dy * channel_view(scale, r)
    dx = channel_view(saved_rstd, r) * (g - g.mean(axis=axes, keepdims=True)
                                        - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


def group_norm(x, scale, bias, groups: int, epsilon: float):
    """(y, mean [N, G], rstd [N, G]): each group of C / G channels normalized over them and the spatial dims."""
    x = x.astype(np.float64)
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, math.prod(x.shape[1:]) // groups)  # (not -1: n may be 0)
    m, v = xg.mean(axis=2), xg.var(axis=2)
    rstd = 1 / np.sqrt(v + epsilon)
    y = ((xg - m[..., None]) * rstd[..., None]).reshape(x.shape)
    return y * channel_view(scale, x.ndim) + channel_view(bias, x.ndim), m, rstd


def attention_scores(q, k, mask, scale: float, causal: bool) -> np.ndarray:
    s = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
    if causal:
        lq, lk = s.shape[-2:]
        s = np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None], s, -np.inf)  # query i sees keys j <= i
    return s


def attention(q, k, v, mask, scale: float, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(softmax(q k^T * scale + mask) v, the logsumexp of each score row)."""
    s = attention_scores(q, k, mask, scale, causal)
    top = s.max(axis=-1, keepdims=True)
    lse = top + np.log(np.exp(s - top).sum(axis=-1, keepdims=True))
    return np.exp(s - lse) @ v.astype(np.float64), lse[..., 0]


def attention_grad(q, k, v, out, lse, dout, mask, scale: float, causal: bool):
    """p = exp(s - lse), dv = p^T dout, ds = p * (dout v^T - rowsum(dout * out)), dq = ds k * scale,
    dk = ds^T q * scale."""
    p = np.exp(attention_scores(q, k, mask, scale, causal) - lse.astype(np.float64)[..., None])
    dout, v64 = dout.astype(np.float64), v.astype(np.float64)
    ds = p * (dout @ np.swapaxes(v64, -1, -2) - (dout * out.astype(np.float64)).sum(axis=-1, keepdims=True))
    return (ds @ k.astype(np.float64) * scale, np.swapaxes(ds, -1, -2) @ q.astype(np.float64) * scale,
            np.swapaxes(p, -1, -2) @ dout)
