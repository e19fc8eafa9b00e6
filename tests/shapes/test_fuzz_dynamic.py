"""Random programs with run-time sizes (tests/support/fuzz_dynamic.py), each compiled once and
called at sizes 0, 1, 3 and 17, forward and gradient against NumPy. CI runs 80 programs;
`--fuzz-count N --fuzz-seed S` runs others, `python tests/support/fuzz_dynamic.py --count N` long."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from fuzz_dynamic import run  # noqa: E402

CI_COUNT, BATCH = 80, 40


def pytest_generate_tests(metafunc):
    if "batch" in metafunc.fixturenames:
        count = metafunc.config.getoption("--fuzz-count") or CI_COUNT
        cases = [(s, min(BATCH, count - s)) for s in range(0, count, BATCH)]
        metafunc.parametrize("batch", cases, ids=[f"{s}-{s + n - 1}" for s, n in cases])


def test_programs_at_run_time_sizes(request, batch):
    start, count = batch
    programs, defects = run(request.config.getoption("--fuzz-seed"), start, count)
    assert programs == count
    assert not defects, "\n".join(defects)

