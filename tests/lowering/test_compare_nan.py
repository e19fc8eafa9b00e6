"""Every float comparison predicate the C emitter accepts (CMP_C), with NaN on
either side, against IEEE 754's ordered/unordered rules written in NumPy:
an ordered predicate (o*) is false when either operand is NaN, an unordered
one (u*) is true. opc's own ops emit only oeq/ogt/olt/une, so each predicate
is put into a lowered `opc.equal` by hand and the module built as C."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import StringAttr

from opc.api import load_c, lower, prepare
from opc.frontend import load_module
from opc.lowering.c_emitter import emit_c
from opc.lowering.c_expressions import CMP_C

CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno",
        "true"]  # arith.cmpf's predicate numbering
PREDICATES = [p for p in CMPF if p in CMP_C]
DTYPES = {"f32": np.float32, "f64": np.float64}

# NumPy's comparisons are the ordered ones (False with NaN); the unordered are "NaN or the ordered form".
ORDERED = {"eq": np.equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal,
           "ne": lambda a, b: np.less(a, b) | np.greater(a, b)}


def want(pred: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ordered = ORDERED[pred[1:]](a, b)
    return ordered | np.isnan(a) | np.isnan(b) if pred[0] == "u" else ordered


@pytest.fixture(scope="module")
def compiled():
    t = {d: f"tensor<9x{d}>" for d in DTYPES}
    src = "".join(f"func.func @eq_{d}(%a: {t[d]}, %b: {t[d]}) -> tensor<9xi1> {{\n"
                  f"  %r = opc.equal %a, %b : ({t[d]}, {t[d]}) -> tensor<9xi1>\n"
                  f"  func.return %r : tensor<9xi1>\n}}\n" for d in DTYPES)
    loops = lower(prepare(load_module(src)))
    for fn in list(loops.ops):
        for pred in PREDICATES:
            copy = fn.clone()
            copy.sym_name = StringAttr(f"{pred}_{fn.sym_name.data.removeprefix('eq_')}")
            (cmp,) = [op for op in copy.walk() if isinstance(op, arith.CmpfOp)]
            cmp.predicate = arith.CmpfOp(cmp.lhs, cmp.rhs, pred).predicate
            loops.body.block.add_op(copy)
        loops.body.block.detach_op(fn)
    assert all(isinstance(f, func.FuncOp) for f in loops.ops)
    source, sigs, data = emit_c(loops)
    return load_c(source, sigs, data=data)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("pred", PREDICATES)
def test_float_predicate_with_nan(compiled, pred: str, dtype: str) -> None:
    nan, dt = np.nan, DTYPES[dtype]
    a = np.array([nan, 1.0, nan, 1.0, 2.0, 1.0, -0.0, np.inf, -np.inf], dt)
    b = np.array([1.0, nan, nan, 1.0, 1.0, 2.0, 0.0, np.inf, nan], dt)
    got = getattr(compiled, f"{pred}_{dtype}")(a, b)
    np.testing.assert_array_equal(got, want(pred, a, b), err_msg=f"{pred} on {list(zip(a, b))}")
