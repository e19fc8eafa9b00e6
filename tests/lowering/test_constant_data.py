"""Large constants reach the extension as data (.incbin), not as C text (opc/lowering/c_data.py).

Oracle: NumPy on the same arrays. Every dtype whose bytes go as they are, a constant below and
above DATA_MIN_BYTES, a splat, a split (several translation unit) build, and `opc compile -o`.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import opc
from opc.lowering import parallel_build
from opc.lowering.c_data import DATA_MIN_BYTES

DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8, "ui8": np.uint8,
          "i16": np.int16, "i32": np.int32, "i64": np.int64, "ui64": np.uint64}
SMALL = 7  # elements: C text
LARGE = DATA_MIN_BYTES  # elements: at least DATA_MIN_BYTES bytes for every dtype


def values(dt: str, n: int) -> np.ndarray:
    a = (np.arange(n) * 7919) % 251
    if np.issubdtype(DTYPES[dt], np.floating):
        return (a / 8.0 - 15.0).astype(DTYPES[dt])  # fractions exact in every float type
    return a.astype(DTYPES[dt])


def hex_literal(a: np.ndarray) -> str:
    """MLIR's hex form of a dense literal: the elements' bytes, little-endian as stored."""
    return '"0x' + a.tobytes().hex().upper() + '"'


def add_constant(name: str, dt: str, n: int) -> str:
    t = f"tensor<{n}x{dt}>"
    return (f"func.func @{name}(%x: {t}) -> {t} {{\n"
            f"  %c = arith.constant dense<{hex_literal(values(dt, n))}> : {t}\n"
            f"  %r = opc.add %x, %c : ({t}, {t}) -> {t}\n  func.return %r : {t}\n}}\n")


@pytest.fixture(scope="module")
def every_dtype():
    text = "".join(add_constant(f"{dt}_{size}", dt, n) for dt in DTYPES
                   for size, n in (("small", SMALL), ("large", LARGE)))
    return opc.compile(text)


@pytest.mark.parametrize("size,n", [("small", SMALL), ("large", LARGE)])
@pytest.mark.parametrize("dt", DTYPES)
def test_constant_values(every_dtype, dt, size, n):
    x = values(dt, n)[::-1].copy()
    got = every_dtype[f"{dt}_{size}"](x)
    np.testing.assert_array_equal(got, x + values(dt, n))


def test_only_large_constants_are_data(every_dtype):
    src = every_dtype.c_source
    assert src.count(".incbin") == len(DTYPES)  # one per large constant, none for the small ones
    assert re.search(r"opc_global_f32_small_const\d+\[7\] = \{", src)


def test_source_size_does_not_grow_with_the_constant():
    """What the C compiler reads is a few lines for 32 KB and for 8 MB of constant (as text, the
    first alone would be some 40,000 characters)."""
    sources = [opc.compile(add_constant("f", "i64", n)).c_source for n in (LARGE, 1 << 20)]
    assert all(len(s) < 5_000 for s in sources), [len(s) for s in sources]


def test_signed_zeros_are_not_a_splat():
    """[0.0, -0.0] is two values: 1 / c keeps the sign of each zero (compared by bytes, not ==)."""
    m = opc.compile("func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                    "  %c = arith.constant dense<[0.0, -0.0]> : tensor<2xf32>\n"
                    "  %r = opc.div %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
                    "  func.return %r : tensor<2xf32>\n}\n")
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(m.f(np.ones(2, np.float32)), np.float32(1) / np.array([0.0, -0.0], np.float32))


def test_split_build_shares_one_copy(tmp_path, monkeypatch):
    """Kernels in two translation units read one constant (declared in each, defined once)."""
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_CHARS", 1)
    monkeypatch.setattr(parallel_build, "MIN_UNIT_CHARS", 1)
    monkeypatch.setattr(parallel_build, "build_jobs", lambda: 2)
    n, t = LARGE, f"tensor<{LARGE}xf32>"
    text = (f"func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}) {{\n"
            f"  %c = arith.constant dense<{hex_literal(values('f32', n))}> : {t}\n"
            f"  %a = opc.mul %x, %c : ({t}, {t}) -> {t}\n"
            f"  %s = opc.reduce_sum %a {{axes = array<i64: 0>, keepdim = true}} : ({t}) -> tensor<1xf32>\n"
            f"  %b = opc.sub %y, %s : ({t}, tensor<1xf32>) -> {t}\n"
            f"  %d = opc.add %b, %c : ({t}, {t}) -> {t}\n"
            f"  func.return %a, %d : {t}, {t}\n}}\n")
    m = opc.compile(text, cache_dir=str(tmp_path))
    x, y, c = values("f32", n)[::-1].copy(), np.ones(n, np.float32), values("f32", n)
    a, d = m.f(x, y)
    np.testing.assert_array_equal(a, x * c)
    np.testing.assert_allclose(d, y - (x * c).sum(dtype=np.float64) + c, rtol=1e-6)


def test_compile_to_dir_writes_the_data_beside_the_c(tmp_path):
    src = tmp_path / "big.mlir"
    src.write_text(add_constant("f", "i32", LARGE))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "opc", "compile", str(src), "-o", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    data = list(out.glob("opc_data_*.bin"))
    assert len(data) == 1 and data[0].read_bytes() == values("i32", LARGE).tobytes()
    assert data[0].name in (out / "big.c").read_text()
    run = subprocess.run([sys.executable, "-c", "import big, numpy as np; "
                          "print(int(big.f(np.zeros(4096, np.int32)).sum()))"],
                         cwd=out, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == int(values("i32", LARGE).sum())



@pytest.mark.parametrize("t,dt", [("f8E4M3FN", "float8_e4m3fn"), ("f8E5M2", "float8_e5m2"),
                                  ("f4E2M1FN", "float4_e2m1fn"), ("f6E2M3FN", "float6_e2m3fn"), ("bf16", "bfloat16")])
def test_low_precision_constants_are_data(t, dt):
    """A bf16 or float8/6/4 constant of 4 KB or more reaches the module as its bytes (xDSL packs them
    as ml_dtypes' bits): every bit pattern, NaN where ml_dtypes has NaN."""
    import ml_dtypes

    count = {"f4E2M1FN": 16, "f6E2M3FN": 64}.get(t, 256)
    bits = (np.arange(4096) % count).astype(np.uint8 if t != "bf16" else np.uint16)
    if t == "bf16":
        bits = bits * 129 + 0x3f00  # values around 1, some of every exponent near it
    w = bits.view(getattr(ml_dtypes, dt))
    n = w.size
    c, x, j = f"tensor<{n}x{t}>", f"tensor<1x{t}>", f"tensor<{n + 1}x{t}>"
    src = (f"func.func @f(%x: {x}) -> tensor<{n + 1}xf32> {{\n"
           f"  %c = arith.constant dense<\"0x{w.tobytes().hex().upper()}\"> : {c}\n"
           f"  %j = opc.concat %c, %x {{axis = 0 : i64}} : ({c}, {x}) -> {j}\n"
           f"  %y = opc.cast %j {{dtype = f32}} : ({j}) -> tensor<{n + 1}xf32>\n"
           f"  func.return %y : tensor<{n + 1}xf32>\n}}\n")
    m = opc.compile(src)
    assert re.search(r"extern __attribute__\(\(visibility\(\"hidden\"\)\)\) const uint(8|16)_t opc_global_\w+\[4096\];",
                     m.c_source), "the constant is not bound as data"
    got, want = m.f(np.zeros(1, w.dtype))[:n], w.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
