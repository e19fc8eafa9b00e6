"""Conv epilogues (opc-schedule's sweep 3 for opc.conv, opc_loops.call's epilogue region,
runtime/opc_nn.h's opc_nn_conv_ep_*): ResNet's inference BatchNorm + ReLU, with and without the
residual add, runs on each finished block of the conv's output inside the conv kernel. Against a
float64 NumPy conv over the kernel routes (stride-1 implicit GEMM, channel-vector kernel, im2col +
GEMM, the depthwise kernels, and the fallback that runs the epilogue per row after the conv), odd sizes,
batch 1 and 2, at 1 and 2 threads; the fused result is bitwise the unfused one (same op order)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import opc
from opc.frontend import load_module

DT = {"f32": np.float32, "f64": np.float64}

# (name, n, c, o, hw, k, stride, pad, group, dtype): which runtime route each takes (runtime/opc_nn.h)
CASES = [
    ("s1_3x3", 1, 16, 24, (13, 11), 3, 1, 1, 1, "f32"),  # stride-1 implicit GEMM (opc_nn_conv_fast.h)
    ("s1_batch2", 2, 8, 5, (9, 9), 3, 1, 1, 1, "f32"),  # its rows: batch * channel, channels < a tile
    ("s1_deep", 1, 8, 120, (30, 30), 3, 1, 1, 1, "f32"),  # its channel tiles outer (panels > the input)
    ("s1_pad0", 2, 6, 9, (12, 10), 3, 1, 0, 1, "f32"),  # no padding: tiles span rows
    ("s2_3x3", 1, 16, 40, (15, 17), 3, 2, 1, 1, "f32"),  # stride 2: the channel-vector kernel (conv_cw)
    ("s2_batch2", 2, 8, 33, (12, 13), 3, 2, 1, 1, "f32"),
    ("s2_7x7", 1, 3, 16, (29, 29), 7, 2, 3, 1, "f32"),  # ResNet's stem
    ("s2_1x1", 2, 8, 16, (14, 14), 1, 2, 0, 1, "f32"),  # ResNet's downsample
    ("pointwise", 2, 24, 40, (9, 10), 1, 1, 0, 1, "f32"),  # the GEMM, the epilogue on each block it finishes
    ("cw_4x4", 1, 32, 72, (4, 4), 3, 1, 1, 1, "f32"),  # conv_cw's tiles of two rows (ResNet's layer3 at 64x64)
    ("cw_2x2", 2, 40, 48, (2, 2), 3, 1, 1, 1, "f32"),  # (its layer4)
    # at most 8 outputs per channel: transposed, the few-rows GEMM adding the bias (opc_nn_conv_few), per
    # image: MobileNetV2's 1x1 convs at 2x2; a strided 1x1 through im2col
    ("pw_2x2", 2, 40, 48, (2, 2), 1, 1, 0, 1, "f32"),
    ("few_1x1_s2", 1, 24, 40, (4, 4), 1, 2, 0, 1, "f32"),
    ("depthwise", 2, 8, 8, (9, 10), 3, 1, 1, 8, "f32"),  # channels last (rows under a vector): per 16 channels
    ("dw_rows", 2, 5, 5, (11, 37), 3, 1, 1, 5, "f32"),  # the depthwise row kernel: per plane
    ("dw_rows_s2", 1, 6, 6, (9, 40), 3, 2, 1, 6, "f32"),
    ("dw_2x2", 1, 24, 24, (2, 2), 3, 1, 1, 24, "f32"),  # planes of a vector: a permute per tap (AVX-512)
    ("dw_4x4_chunks", 2, 70, 70, (4, 4), 3, 1, 1, 70, "f32"),  # the epilogue per 64 channels and the rest
    ("dw_k5", 1, 3, 3, (7, 20), 5, 1, 2, 3, "f32"),
    ("f64", 2, 6, 7, (9, 8), 3, 2, 1, 1, "f64"),  # im2col + GEMM in f64: the same fallback
    ("conv1d", 2, 8, 20, (37,), 3, 1, 1, 1, "f32"),  # rank 3: BatchNorm's [c, 1] operands
]


def t(shape: tuple[int, ...], dt: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dt}>"


def out_hw(hw: tuple[int, ...], k: int, stride: int, pad: int) -> tuple[int, ...]:
    return tuple((d + 2 * pad - k) // stride + 1 for d in hw)


def function(case: tuple, residual: bool) -> str:  # noqa: ANN001
    name, n, c, o, hw, k, stride, pad, group, dt = case
    xs, ws, ys, v = (n, c, *hw), (o, c // group, *(k,) * len(hw)), (n, o, *out_hw(hw, k, stride, pad)), t((o,), dt)
    strides, pads = ", ".join([str(stride)] * len(hw)), ", ".join([str(pad)] * 2 * len(hw))
    args = f"%x: {t(xs, dt)}, %w: {t(ws, dt)}, %s: {v}, %b: {v}, %m: {v}, %v: {v}" + (
        f", %r: {t(ys, dt)}" if residual else "")
    y = t(ys, dt)
    lines = [f"func.func @{name}{'_res' if residual else ''}({args}) -> {y} {{",
             f"  %c = opc.conv %x, %w {{strides = array<i64: {strides}>, pads = array<i64: {pads}>, group = {group} : i64}}"
             f" : ({t(xs, dt)}, {t(ws, dt)}) -> {y}",
             f"  %n = opc.batch_norm %c, %s, %b, %m, %v {{epsilon = 1.0e-5 : f64}} : ({y}, {v}, {v}, {v}, {v}) -> {y}"]
    last = "%n"
    if residual:
        lines.append(f"  %a = opc.add %n, %r : ({y}, {y}) -> {y}")
        last = "%a"
    lines += [f"  %z = opc.relu {last} : ({y}) -> {y}", f"  func.return %z : {y}", "}"]
    return "\n".join(lines) + "\n"


GRID = [(case, residual) for case in CASES for residual in (False, True)]
SOURCE = "".join(function(case, residual) for case, residual in GRID)


def fname(case: tuple, residual: bool) -> str:  # noqa: ANN001
    return case[0] + ("_res" if residual else "")


@pytest.fixture(scope="module")
def modules():  # noqa: ANN201
    return opc.compile(SOURCE)


def conv_numpy(x: np.ndarray, w: np.ndarray, stride: int, pad: int, group: int) -> np.ndarray:
    if x.ndim == 3:  # 1-D
        (n, c, length), (o, cg, k), og = x.shape, w.shape, w.shape[0] // group
        xp, ol = np.pad(x, ((0, 0), (0, 0), (pad, pad))), (length + 2 * pad - k) // stride + 1
        y = np.zeros((n, o, ol))
        for g in range(group):
            for i in range(k):
                y[:, g * og:(g + 1) * og] += np.einsum("ncl,oc->nol", xp[:, g * cg:(g + 1) * cg, i:i + stride * ol:stride],
                                                       w[g * og:(g + 1) * og, :, i])
        return y
    n, c, h, wd = x.shape
    o, cg, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, o, oh, ow))
    og = o // group
    for g in range(group):
        xg, wg = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for i in range(k):
            for j in range(k):
                patch = xg[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                y[:, g * og:(g + 1) * og] += np.einsum("ncij,oc->noij", patch, wg[:, :, i, j])
    return y


def inputs(case: tuple, residual: bool) -> tuple[np.ndarray, ...]:  # noqa: ANN001
    name, n, c, o, hw, k, stride, pad, group, dt = case
    rng = np.random.default_rng(len(name) + 3 * residual)
    x = rng.standard_normal((n, c, *hw)).astype(DT[dt])
    w = (rng.standard_normal((o, c // group, *(k,) * len(hw))) / np.sqrt(c // group * k ** len(hw))).astype(DT[dt])
    s, b, m = (rng.standard_normal(o).astype(DT[dt]) for _ in range(3))
    v = rng.uniform(0.5, 1.5, o).astype(DT[dt])
    r = rng.standard_normal((n, o, *out_hw(hw, k, stride, pad))).astype(DT[dt])
    return (x, w, s, b, m, v, r) if residual else (x, w, s, b, m, v)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case,residual", GRID, ids=[fname(*g) for g in GRID])
def test_conv_bn_relu_matches_numpy(modules, case, residual: bool, threads: int) -> None:  # noqa: ANN001
    args = inputs(case, residual)
    x, w, s, b, m, v = (a.astype(np.float64) for a in args[:6])
    col = (slice(None), *(None,) * len(case[4]))
    want = (conv_numpy(x, w, case[6], case[7], case[8]) - m[col]) / np.sqrt(v[col] + 1e-5) * s[col] + b[col]
    if residual:
        want = want + args[6].astype(np.float64)
    want = np.maximum(want, 0)
    assert_matches(call_at(threads, getattr(modules, fname(case, residual)), *args), want, case[-1])


def call_at(threads: int, fn, *args: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """fn(*args) with opc at `threads` threads (the setting restored after)."""
    before = opc.get_num_threads()
    try:
        opc.set_num_threads(threads)
        return fn(*args)
    finally:
        opc.set_num_threads(before)


def assert_matches(got: np.ndarray, want: np.ndarray, dt: str) -> None:
    tol = 1e-4 if dt == "f32" else 1e-10
    assert got.dtype == DT[dt] and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_every_chain_is_fused(modules) -> None:  # noqa: ANN001
    """Each function's BatchNorm + (add +) ReLU runs as its conv's epilogue: one opc_nn_conv_ep_ call
    and no nest over the conv's output of its own (only BatchNorm's [c] rsqrt nest)."""
    src = modules.c_source
    for case, residual in GRID:
        body = src.split(f"int opc_fn_{fname(case, residual)}(")[1].split("cleanup:")[0]
        assert f"opc_nn_conv_ep_{case[-1]}(" in body, fname(case, residual)
        assert len(re.findall(r"^\s+opc_k_\w+\(", body, re.MULTILINE)) <= 1, fname(case, residual)  # the rsqrt
    assert re.search(r"kernel epilogue: sub, mul, add, add, relu", src)


def test_schedule_takes_the_chain_into_the_conv() -> None:
    """`opc explain`'s kernels: the conv with BatchNorm, the add and the ReLU (only BatchNorm's [c]
    rsqrt apart); CUDA's convs take no epilogue."""
    from opc.explain import explain_kernels

    module = load_module(function(CASES[0], True)).module
    cpu, cuda = explain_kernels(module, "cpu"), explain_kernels(module, "cuda")
    assert "(library): conv, sub, mul, add, add, relu\n    boundary: opc.conv runs as a runtime kernel " \
        "(its epilogue fused)" in cpu, cpu
    assert "(elementwise): add, rsqrt, mul" in cpu and "(library): conv\n" in cuda, cuda


@pytest.mark.parametrize("name", ["s1_3x3", "s2_3x3", "s2_1x1"])
def test_fused_is_bitwise_the_unfused(name: str) -> None:
    """The same chain with the conv's result also read by a reduction before the chain runs (the
    chain then stays a nest of its own): the chain's values are bitwise equal either way."""
    case = next(c for c in CASES if c[0] == name)
    n, o, (h, w) = case[1], case[3], out_hw(case[4], case[5], case[6], case[7])
    y, q = t((n, o, h, w), "f32"), t((n, 1, h, w), "f32")
    src = function(case, True)
    apart = src.replace(f"@{name}_res(", "@apart(").replace(
        "  %n = opc.batch_norm", f"  %e = opc.exp %c : ({y}) -> {y}\n"
        f"  %q = opc.reduce_sum %e {{axes = array<i64: 1>, keepdim = true}} : ({y}) -> {q}\n  %n = opc.batch_norm").replace(
        f"func.return %z : {y}", f"func.return %z, %q : {y}, {q}").replace(f"-> {y} {{", f"-> ({y}, {q}) {{", 1)
    m = opc.compile(src + apart)
    body = m.c_source.split("int opc_fn_apart(")[1].split("cleanup:")[0]
    assert "opc_nn_conv_ep_" not in body and "opc_nn_conv_f32(" in body
    args = inputs(case, True)
    fused, (unfused, _) = getattr(m, f"{name}_res")(*args), m.apart(*args)
    np.testing.assert_array_equal(fused, unfused)


# A folded BatchNorm (torch.onnx.export in eval mode folds it into the conv's weights and bias): opc-fuse
# makes conv + bias a fused_conv_epilogue, and what follows runs as its epilogue (the runtime's
# opc_nn_fused_conv_epilogue_ep_*): ResNet's residual add + ReLU, and a ReLU the fused op applies itself
# before the nest (an add after it); MobileNetV2's Clip to [0, 6] becomes the fused op's relu6.
FOLDED = {"clip": "bias, then clip to [0, 6]", "res": "bias, + r, relu", "relu_add": "bias, relu, + r"}


def folded_function(case: tuple, tail: str) -> str:  # noqa: ANN001
    name, n, c, o, hw, k, stride, pad, group, dt = case
    xs, ws, ys = (n, c, *hw), (o, c // group, *(k,) * len(hw)), (n, o, *out_hw(hw, k, stride, pad))
    strides, pads = ", ".join([str(stride)] * len(hw)), ", ".join([str(pad)] * 2 * len(hw))
    y, bc, s = t(ys, dt), t((o, *(1,) * len(hw)), dt), t((), dt)
    args = f"%x: {t(xs, dt)}, %w: {t(ws, dt)}, %b: {t((o,), dt)}" + (f", %r: {y}" if tail != "clip" else "")
    lines = [f"func.func @{name}_{tail}({args}) -> {y} {{",
             f"  %c = opc.conv %x, %w {{strides = array<i64: {strides}>, pads = array<i64: {pads}>, group = {group} : i64}}"
             f" : ({t(xs, dt)}, {t(ws, dt)}) -> {y}",
             f"  %bc = opc.reshape %b : ({t((o,), dt)}) -> {bc}",
             f"  %p = opc.add %c, %bc : ({y}, {bc}) -> {y}"]
    if tail == "clip":
        lines += [f"  %lo = arith.constant dense<0.0> : {s}", f"  %hi = arith.constant dense<6.0> : {s}",
                  f"  %m = opc.maximum %p, %lo : ({y}, {s}) -> {y}", f"  %z = opc.minimum %m, %hi : ({y}, {s}) -> {y}"]
    elif tail == "res":
        lines += [f"  %a = opc.add %p, %r : ({y}, {y}) -> {y}", f"  %z = opc.relu %a : ({y}) -> {y}"]
    else:
        lines += [f"  %q = opc.relu %p : ({y}) -> {y}", f"  %z = opc.add %q, %r : ({y}, {y}) -> {y}"]
    lines += [f"  func.return %z : {y}", "}"]
    return "\n".join(lines) + "\n"


FOLDED_GRID = [(case, tail) for case in CASES for tail in FOLDED]


@pytest.fixture(scope="module")
def folded_modules():  # noqa: ANN201
    return opc.compile("".join(folded_function(case, tail) for case, tail in FOLDED_GRID))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case,tail", FOLDED_GRID, ids=[f"{c[0]}_{tail}" for c, tail in FOLDED_GRID])
def test_folded_conv_and_its_tail_match_numpy(folded_modules, case, tail: str, threads: int) -> None:  # noqa: ANN001
    x, w, b, *_ = inputs(case, False)
    r = inputs(case, True)[-1]
    col = (slice(None), *(None,) * len(case[4]))
    pre = conv_numpy(x.astype(np.float64), w.astype(np.float64), case[6], case[7], case[8]) + b.astype(np.float64)[col]
    want = {"clip": lambda: np.clip(pre, 0, 6), "res": lambda: np.maximum(pre + r, 0),
            "relu_add": lambda: np.maximum(pre, 0) + r}[tail]()
    fn = getattr(folded_modules, f"{case[0]}_{tail}")
    assert_matches(call_at(threads, fn, x, w, b, *(() if tail == "clip" else (r,))), want, case[-1])


def test_every_folded_tail_runs_in_the_fused_conv(folded_modules) -> None:  # noqa: ANN001
    """Each function is one runtime call, the fused conv with its tail as the epilogue, and no nest of
    its own over the conv's output; the Clip to [0, 6] is the fused op's own relu6 (code 4, the
    kernels' store), no epilogue at all."""
    src = folded_modules.c_source
    for case, tail in FOLDED_GRID:
        body = src.split(f"int opc_fn_{case[0]}_{tail}(")[1].split("cleanup:")[0]
        call = re.search(rf"opc_nn_fused_conv_epilogue_(ep_)?{case[-1]}\((.*)\);", body)
        assert call is not None and bool(call[1]) == (tail != "clip"), (case[0], tail)
        assert tail != "clip" or call[2].endswith(", 4"), (case[0], call[2])
        assert not re.findall(r"^\s+opc_k_\w+\(", body, re.MULTILINE), (case[0], tail)
    for ops in ("add, relu", "add"):
        assert f"kernel epilogue: {ops}\n" in src or f"kernel epilogue: {ops} " in src, ops
