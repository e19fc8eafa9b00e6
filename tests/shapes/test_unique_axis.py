"""Unique along an axis (issue 33 item 5; docs/shapes.md, "Sizes that depend on the data"): the
slices of x along the axis compared as whole slices, their number a data size. One module of
`opc.unique` over axes 0/1/-1 of rank-2 and rank-3 inputs with every dim `?`, sorted and not, f32
and i64, called at several sizes with repeated, all-equal and all-distinct slices against
np.unique(axis=...); then ONNX Unique with an axis on a run-time input against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import opc

TYPES = {np.float32: "f32", np.int64: "i64"}
RANKS = {2: (4,), 3: (2, 3)}  # the other dims' sizes at the call (the axis' size varies)
AXES = [0, 1, -1]
SIZES = [1, 2, 7, 19]
FILLS = ["repeats", "equal", "distinct"]


def function(rank: int, axis: int, is_sorted: bool, dtype) -> tuple[str, str]:
    name = f"u{rank}_{axis % rank}_{int(is_sorted)}_{TYPES[dtype]}"
    t = f"tensor<{'?x' * rank}{TYPES[dtype]}>"
    types = f"{t}, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>"
    return name, f"""
func.func @{name}(%x: {t}) -> ({types}) {{
  %y, %f, %i, %c = opc.unique %x {{axis = {axis}, sorted = {str(is_sorted).lower()}}} : ({t}) -> ({types})
  func.return %y, %f, %i, %c : {types}
}}"""


GRID = [(rank, axis, is_sorted, dtype) for rank in RANKS for axis in AXES for is_sorted in (True, False)
        for dtype in TYPES if not (rank == 2 and axis == 1)]  # axis 1 of rank 2 is its axis -1


@pytest.fixture(scope="module")
def m():
    return opc.compile("\n".join(function(*case)[1] for case in GRID))


def sample(shape: tuple[int, ...], axis: int, dtype, fill: str, seed: int) -> np.ndarray:
    """Slices along `axis` from a small alphabet (repeats, and slices equal but for their last
    element, so the order is decided late), all one slice, or all distinct (their last element)."""
    rng = np.random.default_rng(seed)
    x = np.moveaxis(rng.integers(0, 2, shape), axis, 0).copy()
    n = x.shape[0]
    flat = x.reshape(n, -1)
    if fill == "equal":
        flat[:] = flat[0]
    elif fill == "distinct":
        flat[:, -1] = rng.permutation(n) - n // 2
    return np.moveaxis(flat.reshape(x.shape), 0, axis).astype(dtype)


def numpy_unique(x: np.ndarray, axis: int, is_sorted: bool) -> list[np.ndarray]:
    """np.unique of the slices along `axis`; for sorted=False in the order each first occurs."""
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not is_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(x, first, axis=axis)
    return [y, first, inverse, counts]


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("rank,axis,is_sorted,dtype", GRID,
                         ids=lambda v: np.dtype(v).name if isinstance(v, type) else str(v))
def test_unique_along_an_axis(m, rank, axis, is_sorted, dtype, fill):
    fn = getattr(m, function(rank, axis, is_sorted, dtype)[0])
    for seed, n in enumerate(SIZES):  # one compile, every size
        shape = list(RANKS[rank])
        shape.insert(axis % rank, n)
        x = sample(tuple(shape), axis % rank, dtype, fill, seed)
        got, want = fn(x), numpy_unique(x, axis, is_sorted)
        assert [g.dtype for g in got] == [x.dtype] + [np.dtype(np.int64)] * 3
        for g, w in zip(got, want):
            assert g.shape == w.shape, (g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
        if fill != "repeats":
            assert len(got[1]) == (1 if fill == "equal" else n)


def test_unique_of_no_slices(m):
    """An axis of size 0: no slices, so nothing distinct (y keeps the other dims)."""
    x = np.zeros((0, 4), np.float32)
    got = m.u2_0_1_f32(x)
    assert [g.shape for g in got] == [(0, 4), (0,), (0,), (0,)]


def keyed_unique(x: np.ndarray, axis: int, is_sorted: bool) -> list[np.ndarray]:
    """The documented order with NaN, by Python tuples: a number is (0, it), a NaN (1, its slice),
    so a slice holding NaN equals no other and sorts after the numbers, in the order of the slices."""
    slices = list(np.moveaxis(x, axis, 0))
    keys = [tuple((1, i) if np.isnan(v) else (0, v) for v in s.ravel().tolist()) for i, s in enumerate(slices)]
    firsts = list({k: i for i, k in reversed(list(enumerate(keys)))}.values())
    firsts = sorted(firsts, key=lambda i: keys[i] if is_sorted else i)
    place = {keys[i]: p for p, i in enumerate(firsts)}
    inverse = np.array([place[k] for k in keys], np.int64)
    return [np.take(x, firsts, axis=axis), np.array(firsts, np.int64), inverse, np.bincount(inverse)]


@pytest.mark.parametrize("is_sorted", [True, False])
@pytest.mark.parametrize("rank,axis", [(2, 0), (2, -1), (3, 1)])
def test_nan_equals_nothing_and_sorts_last(m, rank, axis, is_sorted):
    shape = list(RANKS[rank])
    shape.insert(axis % rank, 9)
    x = sample(tuple(shape), axis % rank, np.float32, "repeats", 3)
    flat = np.moveaxis(x, axis, 0).reshape(9, -1).copy()
    flat[[1, 4, 5], 0] = np.nan  # three slices with a NaN first: distinct, after the rest
    flat[7, -1] = np.nan  # one with a NaN last
    flat[8] = flat[0]
    x = np.moveaxis(flat.reshape(np.moveaxis(x, axis, 0).shape), 0, axis).copy()
    got = getattr(m, function(rank, axis, is_sorted, np.float32)[0])(x)
    for g, w in zip(got, keyed_unique(x, axis, is_sorted)):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def test_a_static_axis_with_run_time_slices():
    """The axis' size is known, the slices' is not: the count is still found at run time."""
    m = opc.compile("""
func.func @u(%x: tensor<5x?xi64>) -> (tensor<?x?xi64>, tensor<?xi64>, tensor<5xi64>, tensor<?xi64>) {
  %y, %f, %i, %c = opc.unique %x : (tensor<5x?xi64>) -> (tensor<?x?xi64>, tensor<?xi64>, tensor<5xi64>, tensor<?xi64>)
  func.return %y, %f, %i, %c : tensor<?x?xi64>, tensor<?xi64>, tensor<5xi64>, tensor<?xi64>
}""")
    for k in (1, 3, 8):
        x = sample((5, k), 0, np.int64, "repeats", k)
        for g, w in zip(m.u(x), numpy_unique(x, 0, True)):
            np.testing.assert_array_equal(g, w)


def test_the_axis_is_checked():
    with pytest.raises(opc.errors.InputError, match="unique axis 2 is out of range for rank 2"):
        opc.compile("""
func.func @u(%x: tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) {
  %y, %f, %i, %c = opc.unique %x {axis = 2} : (tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  func.return %y, %f, %i, %c : tensor<?x3xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>
}""")


ONNX_CASES = [(["n", 3], 0), (["n", 3], -1), (["b", "n", 2], 1), ([2, 3, "n"], -1), ([2, "n", 2], 0)]


@pytest.mark.parametrize("is_sorted", [1, 0])
@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dims,axis", ONNX_CASES, ids=str)
def test_onnx_unique_with_an_axis_of_a_run_time_input(dims, axis, dtype, is_sorted):
    from onnx_helpers import helper, onnx, run_ort
    from test_dynamic_onnx import model

    elem = {np.float32: onnx.TensorProto.FLOAT, np.int64: onnx.TensorProto.INT64}[dtype]
    outs = ["y", "first", "inverse", "counts"]
    m = model([helper.make_node("Unique", ["x"], outs, name="u", axis=axis, sorted=is_sorted)],
              [("x", elem, dims)], outs)
    run = opc.load_onnx(m)
    for seed, (n, fill) in enumerate([(1, "repeats"), (6, "repeats"), (9, "equal"), (13, "distinct")]):
        shape = tuple(n if isinstance(d, str) else d for d in dims)
        x = sample(shape, axis % len(dims), dtype, fill, seed)
        for g, w in zip(run(x=x), run_ort(m, {"x": x})):
            assert g.shape == w.shape, (g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
    assert run.static_reason is None and not run.variants  # one compile for every size and value
