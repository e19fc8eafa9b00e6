"""`opc check` over the low-precision types: a device's own cast to and from float8, float4, int4 and
int2 (tests/planted/lowp/cast_lowp.c) runs over the grid's dtypes (every combination the toml
declares and the verifier admits), against opc's reference bit for bit; the correct kernel passes
every case, and each planted bug fails the cases it breaks and no other."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from opc.check import Case, build, plan, run_and_judge
from opc.check_inputs import Operand, draw, tolerance
from opc.targets.target import get_target

TOML = str(Path(__file__).resolve().parents[1] / "planted" / "lowp" / "lowp.toml")
Pick = Callable[[Case], bool]


def where(pattern: str) -> Pick:
    return lambda c: re.search(pattern, f"{c.attr_text} {c.dtype} {c.shape}") is not None


# bug: (must fail, may fail)
BUGS: dict[str, tuple[Pick, Pick]] = {
    # clamping shows where the drawn values pass the type's max: cast-range's +-1e30 and kin, from f32,
    # in the inputs large enough to hold them (7 elements hold the first few of the recipe only)
    "lowp-saturates": (where(r"dtype=f8E(4M3FN|5M2FNUZ) f32 \d+x.* cast-range"),
                       where(r"dtype=f8E(4M3FN|5M2FNUZ) ")),
    # wrapping shows for the floats past int4's range (cast-range) and for uniform negatives into ui2
    "lowp-int-wraps": (lambda c: where(r"dtype=(i4|ui2) (f32|f8E4M3FN) .*cast-range")(c)
                       or where(r"dtype=ui2 f32 \d+x\d+$")(c), where(r"dtype=(i4|ui2) (f32|f8E4M3FN) ")),
}


@pytest.fixture(scope="module")
def built() -> tuple[list[Case], object, object]:
    target = get_target(TOML)
    cases, funcs, refs = plan(target, target.externals)
    runs = [c for c in cases if c.status == "run"]
    device, reference = build(TOML, target.externals, funcs, refs, None, runs)
    return runs, device, reference


def test_the_grid_runs_every_declared_pair(built) -> None:
    """Each source dtype the toml lists meets each target it lists (sources f32, f8E4M3FN, i4; casts
    to the same type too)."""
    runs, _, _ = built
    pairs = {(re.search(r"dtype=(\w+)", c.attr_text).group(1), c.dtype) for c in runs}  # type: ignore[union-attr]
    targets = ("f32", "f8E4M3FN", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN", "i4", "ui2")
    assert pairs == {(t, s) for t in targets for s in ("f32", "f8E4M3FN", "i4")}


def test_correct_kernel_passes(built, monkeypatch) -> None:
    monkeypatch.delenv("OPC_PLANTED", raising=False)
    runs, device, reference = built
    run_and_judge(device, reference, runs, TOML)
    assert [f"{c.attr_text} {c.dtype} {c.shape}: {c.result}" for c in runs if c.result != "pass"] == []


@pytest.mark.parametrize("bug", list(BUGS))
def test_planted_bug_fails_exactly_the_affected_cases(bug, built, monkeypatch) -> None:
    must, may = BUGS[bug]
    monkeypatch.setenv("OPC_PLANTED", bug)
    runs, device, reference = built
    run_and_judge(device, reference, runs, TOML)
    name = lambda c: f"{c.attr_text} {c.dtype} {c.shape}"  # noqa: E731
    assert any(must(c) for c in runs)
    assert [name(c) for c in runs if must(c) and c.result == "pass"] == [], "cases the bug breaks that passed"
    assert [name(c) for c in runs if c.result != "pass" and not may(c)] == [], "false alarms"


def test_sub_byte_integers_draw_their_extremes() -> None:
    """int4/int2 operands are integers (ml_dtypes' kind is 'V'): in range, with the extremes where
    a cast wraps or saturates."""
    for dt in (ml_dtypes.int4, ml_dtypes.uint2):
        (x,) = draw("cast-range", [Operand(np.dtype(dt), (64,), 0, 1.0, 0)], 7)
        info = ml_dtypes.iinfo(dt)
        assert x.dtype == np.dtype(dt) and {int(info.min), int(info.max)} <= set(x.astype(np.int64).tolist())


def test_float8_budget_is_half_their_spacing() -> None:
    assert tolerance("opc.add", "f8E4M3FN", 0) == pytest.approx(2.0**-4 + 4 * 2.0**-23)
    assert tolerance("opc.add", "f4E2M1FN", 0) == pytest.approx(2.0**-2 + 4 * 2.0**-23)
