"""The integer ops: bitwise and/or/xor/not, shifts, division and power of integers, in every integer
dtype, compiled for the CPU in one module and checked against Python's integers (exact, then wrapped
to the dtype). The edges C leaves undefined are in the data: shifts below 0 and of the width or
more, x / 0, MIN / -1, negative exponents, overflowing powers."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import compile_funcs

import opc  # noqa: F401

DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
MLIR = {"int8": "i8", "uint8": "ui8", "int16": "i16", "uint16": "ui16", "int32": "i32", "uint32": "ui32",
        "int64": "i64", "uint64": "ui64"}
BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right", "div", "pow")
SIGNED_ONLY = {"pow"}  # opc.pow of unsigned integers is refused by its verifier
SHAPE, B_SHAPE = (4, 6), (6,)
ROWS = (9, 6)  # 9 row results: 72 bytes of a 64-bit type, past one 64-byte arena slot


def tt(shape, dt: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{MLIR[dt]}>"


def cases():
    for op in BINARY:
        for dt in DTYPES:
            if not (op in SIGNED_ONLY and dt.startswith("u")):
                yield op, dt


def sources() -> list[str]:
    out = []
    for op, dt in cases():
        out.append(f"func.func @{op}_{dt}(%a: {tt(SHAPE, dt)}, %b: {tt(B_SHAPE, dt)}) -> {tt(SHAPE, dt)} {{\n"
                   f"  %r = opc.{op} %a, %b : ({tt(SHAPE, dt)}, {tt(B_SHAPE, dt)}) -> {tt(SHAPE, dt)}\n"
                   f"  func.return %r : {tt(SHAPE, dt)}\n}}\n")
    for dt in DTYPES:
        out.append(f"func.func @bitwise_not_{dt}(%a: {tt(SHAPE, dt)}) -> {tt(SHAPE, dt)} {{\n"
                   f"  %r = opc.bitwise_not %a : ({tt(SHAPE, dt)}) -> {tt(SHAPE, dt)}\n"
                   f"  func.return %r : {tt(SHAPE, dt)}\n}}\n")
        t, r = tt(ROWS, dt), tt(ROWS[:1] + (1,), dt)  # two row results live at once: buffers of the dtype
        out.append(f"func.func @row_span_{dt}(%a: {t}) -> {t} {{\n"
                   f"  %hi = opc.reduce_max %a {{axes = array<i64: 1>, keepdim = true}} : ({t}) -> {r}\n"
                   f"  %lo = opc.reduce_min %a {{axes = array<i64: 1>, keepdim = true}} : ({t}) -> {r}\n"
                   f"  %d = opc.sub %a, %lo : ({t}, {r}) -> {t}\n  %s = opc.sub %hi, %lo : ({r}, {r}) -> {r}\n"
                   f"  %y = opc.sub %s, %d : ({r}, {t}) -> {t}\n  func.return %y : {t}\n}}\n")
    return out


@pytest.fixture(scope="module")
def compiled():
    return compile_funcs(sources())


def wrap(v: int, dt: str) -> int:
    """v modulo 2^width, read in dt (two's complement for the signed types)."""
    info = np.iinfo(dt)
    v %= 1 << info.bits
    return v - (1 << info.bits) if v > info.max else v


def shift(a: int, b: int, dt: str, left: bool) -> int:
    bits = np.iinfo(dt).bits
    if not 0 <= b < bits:
        return 0 if left or a >= 0 else -1
    return wrap(a << b, dt) if left else a >> b  # Python's >> is arithmetic (floor) for negative a


def div(a: int, b: int, dt: str) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return wrap(q if (a < 0) == (b < 0) else -q, dt)


def power(a: int, b: int, dt: str) -> int:
    if b < 0:
        return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
    return wrap(pow(a, b, 1 << np.iinfo(dt).bits), dt)


ORACLE = {
    "bitwise_and": lambda a, b, dt: a & b, "bitwise_or": lambda a, b, dt: a | b,
    "bitwise_xor": lambda a, b, dt: a ^ b,
    "shift_left": lambda a, b, dt: shift(a, b, dt, True), "shift_right": lambda a, b, dt: shift(a, b, dt, False),
    "div": div, "pow": power,
}  # fmt: skip


def operands(op: str, dt: str, rng) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dt)
    edges = [info.min, info.max, 0, 1, -1 if info.min else 2, info.min + 1]
    a = rng.integers(max(info.min, -1000), min(info.max, 1000), size=SHAPE, endpoint=True).astype(dt)
    a.reshape(-1)[:len(edges)] = edges
    if op.startswith("shift"):  # counts in and out of [0, width)
        b = np.array([0, 1, info.bits - 1, info.bits, info.bits + 5, -3 if info.min else 200], dtype=dt)
    elif op == "div":
        b = np.array([0, -1 if info.min else 1, 7, info.max, 3, info.min if info.min else 2], dtype=dt)
    elif op == "pow":  # -1 in row 1 meets every exponent: even and odd, negative ones included
        b = np.array([0, 1, 3, -2, 63, -3], dtype=dt)
        a[1] = -1
    else:
        b = rng.integers(info.min, info.max, size=B_SHAPE, dtype=dt, endpoint=True)
    return a, b


@pytest.mark.parametrize("op,dt", list(cases()))
def test_integer_binary_matches_python(compiled, op, dt):
    a, b = operands(op, dt, np.random.default_rng(3))
    got = getattr(compiled, f"{op}_{dt}")(a, b)
    want = np.array([[ORACLE[op](int(x), int(y), dt) for x, y in zip(row, b)] for row in a.tolist()], dtype=dt)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", DTYPES)
def test_bitwise_not_matches_numpy(compiled, dt):
    a, _ = operands("bitwise_and", dt, np.random.default_rng(4))
    np.testing.assert_array_equal(getattr(compiled, f"bitwise_not_{dt}")(a), np.invert(a))


@pytest.mark.parametrize("dt", DTYPES)
def test_row_results_of_every_width_get_their_own_bytes(compiled, dt):
    """(max - min) - (x - min) per row, wrapping: the two row results are intermediate buffers of the
    dtype, alive at once, each needing its own bytes in the arena (one-byte types: not 0; 64-bit
    types: 9 rows, 8 bytes each, past a 64-byte slot)."""
    info = np.iinfo(dt)
    a = np.random.default_rng(5).integers(info.min, info.max, size=ROWS, dtype=dt, endpoint=True)
    hi, lo = a.max(1, keepdims=True), a.min(1, keepdims=True)
    np.testing.assert_array_equal(getattr(compiled, f"row_span_{dt}")(a), (hi - lo) - (a - lo))
