"""The benchmark's own machinery (no timing here: speed is measured only in bench/).

The compile-time row stands on the generated models having exactly the ops they claim,
and every row stands on the number check stopping a wrong contender.
"""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_cpu  # noqa: E402
import benchlib  # noqa: E402

from opc.ir import parse_text  # noqa: E402


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 100, 1000])
def test_layered_model_has_n_ops_broken_every_8(n):
    module = parse_text(bench_cpu.layered_model(n)).module
    ops = [op.name for op in module.walk() if op.name.startswith("opc.")]
    assert len(ops) == n
    kinds = Counter(ops)
    breaks = n // 8
    assert kinds["opc.matmul"] == (breaks + 1) // 2
    assert kinds["opc.reduce_max"] == breaks // 2
    assert all(name in ("opc.matmul", "opc.reduce_max") for i, name in enumerate(ops) if i % 8 == 7)


@pytest.mark.parametrize(("got", "want", "stops"), [
    ([np.ones(3)], [np.ones(3) + 1e-7], False),
    ([np.ones(3)], [np.zeros(3)], True),
    ([np.full(3, 1000.0)], [np.full(3, 1000.5)], False),  # error scaled by the magnitude: 5e-4
    ([np.full(3, 1e-3)], [np.full(3, 2e-3)], False),  # below the absolute floor of 1 ...
    ([np.ones(4)], [np.ones(3)], True),  # shapes differ
    ([np.array([1.0, np.nan])], [np.array([1.0, 1.0])], True),  # a NaN where a number is due
    ([np.array([1.0, np.nan])], [np.array([1.0, np.nan])], False),
    ([np.ones(3)], [np.ones(3), np.ones(3)], True),  # an output missing
])
def test_check_stops_a_wrong_contender(got, want, stops):
    if stops:
        with pytest.raises(SystemExit, match="bench: c "):
            benchlib.check("c", got, want)
    else:
        benchlib.check("c", got, want)


def test_check_tolerance_is_the_callers():
    with pytest.raises(SystemExit, match="disagrees with NumPy"):  # ... which a tighter tol catches
        benchlib.check("c", [np.full(3, 1e-3)], [np.full(3, 2e-3)], tol=1e-4)


def test_cases_listed_and_unknown_names_rejected():
    listed = subprocess.run([sys.executable, str(BENCH / "bench_cpu.py"), "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    for name in ("softmax", "layernorm", "rowsum", "colsum", "chain", "gelu-fwd-bwd", "matmul-1024", "bmm-qk",
                 "compile"):
        assert name in listed
    bad = subprocess.run([sys.executable, str(BENCH / "bench_cpu.py"), "--only", "nosuch"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 1 and bad.stderr.strip() == "error: no case named nosuch (see --list)"
