"""Hexadecimal float elements of dense literals are bit patterns, as MLIR prints inf and NaN
(`dense<[0.0, 0xFF800000]> : tensor<2xf32>`): opc's parser reads them so (xDSL 0.75 reads them as
integers, 0xFF800000 as 4.29e9), so IR that opc prints, a causal mask of -inf say, reads back."""

from __future__ import annotations

import numpy as np
import pytest

from opc.errors import OpcError
from opc.ir import parse_text


def constant_values(literal: str, t: str) -> np.ndarray:
    src = parse_text(f"func.func @f() -> {t} {{\n  %c = arith.constant {literal} : {t}\n  func.return %c : {t}\n}}\n")
    (f,) = src.module.ops
    (c, _) = f.body.block.ops
    return np.array(c.value.get_values(), np.float64)


@pytest.mark.parametrize("t, hex_bits, want", [
    ("f32", "0xFF800000", -np.inf), ("f32", "0x7F800000", np.inf), ("f32", "0x3F800000", 1.0),
    ("f32", "0x80000000", -0.0), ("f64", "0xFFF0000000000000", -np.inf), ("f64", "0x3FF8000000000000", 1.5),
    ("f16", "0xFC00", -np.inf), ("f16", "0x3C00", 1.0), ("bf16", "0xFF80", -np.inf), ("bf16", "0x4040", 3.0),
])  # fmt: skip
def test_hex_elements_are_bits(t: str, hex_bits: str, want: float) -> None:
    got = constant_values(f"dense<[2.5, {hex_bits}]>", f"tensor<2x{t}>")
    assert got[0] == 2.5
    assert got[1] == want and np.signbit(got[1]) == np.signbit(want)


def test_hex_nan_and_integer_elements() -> None:
    assert np.isnan(constant_values("dense<[0x7FC00000]>", "tensor<1xf32>")[0])
    assert constant_values("dense<[0x10, 7]>", "tensor<2xi32>").tolist() == [16, 7]  # integers: the number


def test_printed_non_finite_constants_read_back() -> None:
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, Float32Type, TensorType

    values = np.array([-np.inf, np.inf, 0.0, -1.25], np.float32)
    c = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(TensorType(Float32Type(), [4]), values.tolist()))
    printed = str(c)  # xDSL's printer writes -inf and inf as MLIR does, in hexadecimal
    assert "0xff800000" in printed.lower()
    literal = printed.split("arith.constant ", 1)[1].rsplit(" : ", 1)[0]
    np.testing.assert_array_equal(constant_values(literal, "tensor<4xf32>").astype(np.float32), values)


def test_too_wide_hex_element_is_an_error() -> None:
    with pytest.raises(OpcError, match="has more than 16 bits"):
        constant_values("dense<[0x1FFFF]>", "tensor<1xf16>")
