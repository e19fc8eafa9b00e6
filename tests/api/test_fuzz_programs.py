"""Differential fuzzing of random well-typed programs against the NumPy oracle of
tests/support/fuzz_programs.py (which see): forward over every op, dtype and rank 0-4, and f64
gradients against finite differences, each by default and with decompose="all".

CI runs a few hundred programs, BATCH to a compiled module; `--fuzz-count N` and
`--fuzz-seed S` run others (N forward and N // 4 gradient programs per path), and
`python tests/support/fuzz_programs.py --count N` is the long run.
"""

from __future__ import annotations

import pytest
from fuzz_programs import BATCH, Report, generate, run_batch

FORWARD_CI, GRAD_CI = 200, 40


def batches(config, grad: bool) -> list[tuple[int, int]]:
    count = config.getoption("--fuzz-count")
    total = (FORWARD_CI if not grad else GRAD_CI) if count is None else (count if not grad else max(1, count // 4))
    return [(start, min(BATCH, total - start)) for start in range(0, total, BATCH)]


def pytest_generate_tests(metafunc):
    if "batch" in metafunc.fixturenames:
        grad = metafunc.function.__name__.endswith("gradients")
        cases = batches(metafunc.config, grad)
        metafunc.parametrize("batch", cases, ids=[f"{s}-{s + n - 1}" for s, n in cases])


@pytest.mark.parametrize("decompose", [None, "all"], ids=["default", "decompose_all"])
def test_fuzz_forward(request, batch, decompose):
    seed = request.config.getoption("--fuzz-seed")
    start, count = batch
    report = Report()
    run_batch([generate(seed, i) for i in range(start, start + count)], False, decompose, seed, report)
    assert not report.defects, "\n".join(report.defects)
    assert report.programs == count


@pytest.mark.parametrize("decompose", [None, "all"], ids=["default", "decompose_all"])
def test_fuzz_gradients(request, batch, decompose):
    seed = request.config.getoption("--fuzz-seed")
    start, count = batch
    report = Report()
    run_batch([generate(seed, i, grad=True) for i in range(start, start + count)], True, decompose, seed, report)
    assert not report.defects, "\n".join(report.defects)
    assert report.programs == count
    assert report.not_smooth <= count // 4, "most points must be smooth, or the check says little"


def test_every_result_of_multi_result_ops_is_read():
    """Issue 38: a program reading fused_gemm_epilogue's second result crashed the scheduler. Over
    the CI programs, every result position of every multi-result op the generator draws (forward
    and --grad) is read by a later op or returned somewhere, so that class stays covered."""
    read: dict[tuple[str, int], int] = {}
    for grad in (False, True):
        for i in range(FORWARD_CI if not grad else GRAD_CI * 4):
            p = generate(0, i, grad)
            lines = p.lines + ["return " + ", ".join("%" + r.name for r in p.results)]
            for n, line in enumerate(lines):
                names, _, rest = line.strip().partition(" = ")
                outs = [x.strip() for x in names.split(",")] if rest.startswith("opc.") else []
                if len(outs) < 2:
                    continue
                later = " ".join(lines[n + 1:]).replace(",", " ").split()
                for k, name in enumerate(outs):
                    key = (rest.split()[0], k)
                    read[key] = read.get(key, 0) + (name in later)
    unread = sorted(k for k, v in read.items() if v == 0)
    assert not unread, f"results never read: {unread}"
    ops = {op for op, _ in read}
    assert {"opc.max_pool", "opc.batch_norm", "opc.attention", "opc.group_norm", "opc.layer_norm",
            "opc.fused_gemm_epilogue", "opc.fused_conv_epilogue", "opc.attention_grad"} <= ops, ops
