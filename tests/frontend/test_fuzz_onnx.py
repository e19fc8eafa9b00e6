"""Differential fuzzing of ONNX import (tests/support/fuzz_onnx.py, which see): random LSTM, GRU and
RNN nodes and Conv/ConvTranspose -> BatchNormalization -> Relu -> pool chains over their attribute
grids, imported by opc and checked against onnxruntime; some RNNs with a run-time sequence length
(through opc.load_onnx, compiled once, run at three lengths).

CI runs a couple of batches; `--fuzz-count N` and `--fuzz-seed S` run others, and
`python tests/support/fuzz_onnx.py --count N` is the long run.
"""

from __future__ import annotations

import pytest
from fuzz_onnx import BATCH, Report, run

CI_GRAPHS = 2 * BATCH


def pytest_generate_tests(metafunc):
    if "batch" in metafunc.fixturenames:
        count = metafunc.config.getoption("--fuzz-count") or CI_GRAPHS
        starts = list(range(0, count, BATCH))
        metafunc.parametrize("batch", [(s, min(BATCH, count - s)) for s in starts],
                             ids=[f"{s}-{min(s + BATCH, count) - 1}" for s in starts])


def test_fuzz_onnx_graphs(request, batch):
    seed = request.config.getoption("--fuzz-seed")
    start, count = batch
    report = run(seed, start, count, Report())
    assert not report.defects, "\n".join(report.defects)
    assert report.graphs >= count // 2, f"most draws must run: {report.skipped}, {len(report.refused)} refused"


@pytest.mark.parametrize("index", [0, 1])
def test_fuzz_onnx_load_onnx(request, index):
    """A graph through opc.load_onnx itself, the entry point users call."""
    from fuzz_onnx import check_load_onnx, generate

    case = generate(request.config.getoption("--fuzz-seed"), index)
    if isinstance(case, str):
        pytest.skip(f"draw {index} is not a model both sides run ({case})")
    assert not check_load_onnx(case)


def test_the_ci_graphs_draw_run_time_sequences():
    """LSTM, GRU and RNN each with a run-time sequence length in the CI graphs (seed 0), so a change
    of the drawer cannot quietly drop them."""
    from fuzz_onnx import generate

    kinds = {c.kind for i in range(CI_GRAPHS) for c in [generate(0, i)] if not isinstance(c, str)}
    for op in ("LSTM", "GRU", "RNN"):
        assert any(k.startswith(op) and k.endswith("run-time seq") for k in kinds), (op, sorted(kinds))
