"""Weights packed once (runtime/opc_frozen.h): opc.load_onnx registers its weights as frozen, and
the channel-vector conv keeps their packed panels between calls. What must hold: models that
share one compiled module but not their weights each get their own weights' results, also after
one is collected and another takes its memory; a function bound without the promise sees weights
changed in place; with it (with_last(frozen=True)) the packed copy is what runs, which is the
promise's point. Convs against a NumPy oracle. One compiled module per geometry."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import opc

# x [1, C, H, W] * w [O, C / g, 3, 3], pads 1: 8x8 rows take the channel-vector kernel's 8-wide tiles
# (2x2: few positions, whose weights are read in place unless frozen, then packed once); depthwise
# ones on planes narrower than a vector take the channels-last kernel, its taps packed once per 16
# channels (40: the last block partial; a 7x7 plane at stride 2), except planes of one vector
# (2x2), whose taps are read in place
GEOMETRIES = [(16, 32, 8, 1, 1), (16, 32, 8, 2, 1), (32, 48, 8, 1, 2), (24, 64, 4, 1, 1), (24, 64, 2, 1, 1),
              (40, 40, 2, 1, 40), (40, 40, 5, 1, 40), (20, 20, 7, 2, 20),
              (8, 24, 20, 1, 1), (16, 24, 20, 1, 2)]  # the last two: the stride-1 kernel's panels (20x20)


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og].astype(np.float64))
            for g in range(groups)]
    return np.concatenate(outs, axis=1)


def conv_model(c: int, o: int, hw: int, stride: int, groups: int, w: np.ndarray) -> onnx.ModelProto:
    out = (hw + 2 - 3) // stride + 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[stride, stride],
                            pads=[1, 1, 1, 1], group=groups)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def weights(c: int, o: int, groups: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((o, c // groups, 3, 3)).astype(np.float32)


@pytest.mark.parametrize("c,o,hw,stride,groups", GEOMETRIES)
def test_models_sharing_a_module_keep_their_own_weights(c: int, o: int, hw: int, stride: int, groups: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, c, hw, hw)).astype(np.float32)
    ws = [weights(c, o, groups, seed) for seed in (1, 2, 3)]
    first, second = (opc.load_onnx(conv_model(c, o, hw, stride, groups, w)) for w in ws[:2])
    for _ in range(2):  # the second round runs on the packed copies kept by the first
        for run, w in ((first, ws[0]), (second, ws[1])):
            np.testing.assert_allclose(run(x)[0], conv_ref(x, w, stride, groups), rtol=1e-4, atol=1e-4)
    del first
    gc.collect()  # its weights' registration dropped with it: memory that a new model may reuse
    third = opc.load_onnx(conv_model(c, o, hw, stride, groups, ws[2]))
    for run, w in ((third, ws[2]), (second, ws[1]), (third, ws[2])):
        np.testing.assert_allclose(run(x)[0], conv_ref(x, w, stride, groups), rtol=1e-4, atol=1e-4)


def conv_text(c: int, o: int, hw: int) -> str:
    """A 3x3, stride-1, padded conv of [1, c, hw, hw] by [o, c, 3, 3], weight last."""
    x, w, y = f"tensor<1x{c}x{hw}x{hw}xf32>", f"tensor<{o}x{c}x3x3xf32>", f"tensor<1x{o}x{hw}x{hw}xf32>"
    return f"""
func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %y = opc.conv %x, %w {{strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>,
                        dilations = array<i64: 1, 1>, group = 1 : i64}} : ({x}, {w}) -> {y}
  return %y : {y}
}}
"""


FUNCTIONS = {  # a channel-vector conv (its panels), the stride-1 kernel's (a 20x20 image), a GEMM past
    # the few-rows kernel (its B panels), and one row (the few-rows kernel: B in place, or its panels
    # where frozen)
    "conv": (conv_text(16, 32, 8), (1, 16, 8, 8), (32, 16, 3, 3), lambda x, w: conv_ref(x, w, 1, 1)),
    "conv_rows": (conv_text(8, 24, 20), (1, 8, 20, 20), (24, 8, 3, 3), lambda x, w: conv_ref(x, w, 1, 1)),
    "matmul": ("""
func.func @f(%x: tensor<24x40xf32>, %w: tensor<40x48xf32>) -> tensor<24x48xf32> {
  %y = opc.matmul %x, %w : (tensor<24x40xf32>, tensor<40x48xf32>) -> tensor<24x48xf32>
  return %y : tensor<24x48xf32>
}
""", (24, 40), (40, 48), lambda x, w: x.astype(np.float64) @ w.astype(np.float64)),
    "gemv": ("""
func.func @f(%x: tensor<1x40xf32>, %w: tensor<40x70xf32>) -> tensor<1x70xf32> {
  %y = opc.matmul %x, %w : (tensor<1x40xf32>, tensor<40x70xf32>) -> tensor<1x70xf32>
  return %y : tensor<1x70xf32>
}
""", (1, 40), (40, 70), lambda x, w: x.astype(np.float64) @ w.astype(np.float64)),
}


@pytest.mark.parametrize("kind", FUNCTIONS)
@pytest.mark.parametrize("frozen", [False, True])
def test_weights_changed_in_place_are_seen_unless_frozen(kind: str, frozen: bool) -> None:
    text, x_shape, w_shape, ref = FUNCTIONS[kind]
    f = opc.compile(text, target="cpu").f
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    w = np.random.default_rng(4).standard_normal(w_shape).astype(np.float32)
    before = ref(x, w)
    bound = f.with_last([w], frozen=frozen)
    np.testing.assert_allclose(bound(x), before, rtol=1e-4, atol=1e-4)
    w *= -2.0  # a change in place: seen by a plain binding; a frozen one promised there would be none
    want = before if frozen else ref(x, w)
    np.testing.assert_allclose(bound(x), want, rtol=1e-4, atol=1e-4)

def matmul_model(m: int, k: int, n: int, trans_b: int, w: np.ndarray) -> onnx.ModelProto:
    """y = x @ W (Gemm, W stored [n, k] when trans_b) + b: the GEMM's B is the frozen weight."""
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b)
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(n, np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# rows past the few-rows kernel (which reads B in place); K past one depth block (256); N past one
# column block and not a whole panel
@pytest.mark.parametrize("m,k,n,trans_b", [(40, 300, 70, 0), (40, 300, 70, 1), (13, 64, 3100, 1)])
def test_gemm_weights_packed_once_stay_each_models_own(m: int, k: int, n: int, trans_b: int) -> None:
    x = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
    ws = [np.random.default_rng(s).standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) for s in (5, 6)]
    runs = [opc.load_onnx(matmul_model(m, k, n, trans_b, w)) for w in ws]
    for _ in range(2):
        for run, w in zip(runs, ws):
            want = x.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64) + 1.0
            np.testing.assert_allclose(run(x)[0], want, rtol=1e-4, atol=1e-3)


# few rows (<= 8: B read in place unless frozen, then from its panels): one row (the LSTM step's
# 1x128 @ (512x128)^T), rows in groups of up to 4, K of 300 (two depth blocks), edge panels
@pytest.mark.parametrize("m,k,n,trans_b", [(1, 128, 512, 1), (1, 300, 70, 0), (3, 300, 70, 1), (5, 40, 100, 0),
                                           (8, 257, 33, 1), (2, 7, 16, 0)])
def test_few_rows_of_frozen_weights(m: int, k: int, n: int, trans_b: int) -> None:
    test_gemm_weights_packed_once_stay_each_models_own(m, k, n, trans_b)


@pytest.mark.parametrize("c,o,hw", [(24, 40, 6), (300, 20, 4)])
def test_pointwise_conv_weights_packed_once(c: int, o: int, hw: int) -> None:
    """A 1x1 conv is a GEMM whose A is the weight: packed once where frozen (K of 300: two depth blocks)."""
    x = np.random.default_rng(0).standard_normal((1, c, hw, hw)).astype(np.float32)
    ws = [np.random.default_rng(s).standard_normal((o, c, 1, 1)).astype(np.float32) for s in (7, 8)]
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])
    runs = []
    for w in ws:
        graph = helper.make_graph([node], "pw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, hw, hw])],
                                  [numpy_helper.from_array(w, "w")])
        runs.append(opc.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))
    for _ in range(2):
        for run, w in zip(runs, ws):
            want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
            np.testing.assert_allclose(run(x)[0], want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m", [1, 3, 5, 8])
def test_few_rows_of_frozen_weights_same_bits_at_every_thread_count(m: int) -> None:
    """One thread reads the frozen panels two at a time for 2-4 rows, all rows at once for 5-8;
    threads share tiles of one panel and 4 rows: each column's sum must not change."""
    k, n = 1024, 1100  # 9M multiply-adds: two threads even where idle threads sleep (opc_par_min)
    text = f"""
func.func @f(%x: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32> {{
  %y = opc.matmul %x, %w {{trans_y = true}} : (tensor<{m}x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32>
  return %y : tensor<{m}x{n}xf32>
}}
"""
    x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    w = np.random.default_rng(9).standard_normal((n, k)).astype(np.float32)
    f = opc.compile(text, target="cpu").f.with_last([w], frozen=True)
    count = opc.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 1, 2):
            opc.set_num_threads(threads)
            results.append(f(x))
    finally:
        opc.set_num_threads(count)
    np.testing.assert_allclose(results[0], x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-3)
    for r in results[1:]:
        assert np.array_equal(r, results[0])


def test_the_first_call_of_frozen_weights_runs_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded model's first call packs its frozen weights and touches its buffers for the first
    time, on one thread (build.with_last); its later calls run on opc's count, with the same bits."""
    from opc import threads
    from opc.lowering import build

    seen: list[int] = []
    real = threads.one_thread

    def spy(setter):  # noqa: ANN001, ANN202
        return real(lambda n: (seen.append(n), setter(n)))

    monkeypatch.setattr(build, "one_thread", spy)
    c, o, hw = 16, 32, 8
    w = weights(c, o, 1, 7)
    x = np.random.default_rng(1).standard_normal((1, c, hw, hw)).astype(np.float32)
    run = opc.load_onnx(conv_model(c, o, hw, 1, 1, w))
    first = run(x)[0]
    assert seen == [1, opc.get_num_threads()]  # one thread for the call, then the count again
    second = run(x)[0]
    assert seen == [1, opc.get_num_threads()]  # only the first call
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second, conv_ref(x, w, 1, 1), rtol=1e-4, atol=1e-4)
