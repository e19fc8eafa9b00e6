"""Random programs with run-time sizes (tests/support/fuzz_dynamic.py), each compiled once and
called at sizes 0, 1, 3 and 17, forward and gradient against NumPy: elementwise, reductions,
matmul, softmax (over the features and the run-time rows), layer norm, concat, reshape, transpose,
slices at run-time bounds; nn ops over a run-time batch (conv, fused_conv_epilogue,
conv_transpose, pools, batch, group and instance norm) and attention over a run-time batch or
sequence; topk with a run-time k, nonzero (a data-sized row count), unique; scf.for loops carrying
the value through these, their values stacked as scan outputs (at a static or run-time trip count);
scf.if on a condition from the data and scf.while with a data-dependent trip count, regions nested
two deep; f32 (gradients too), f16 and bf16 programs. CI runs 80 programs, the second 40
with decompose='all'; `--fuzz-count N --fuzz-seed S` runs others, `python
tests/support/fuzz_dynamic.py --count N [--decompose all]` long."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from fuzz_dynamic import EXTENDED, generate, run  # noqa: E402

CI_COUNT, BATCH = 80, 40


def pytest_generate_tests(metafunc):
    if "batch" in metafunc.fixturenames:
        count = metafunc.config.getoption("--fuzz-count") or CI_COUNT
        cases = [(s, min(BATCH, count - s)) for s in range(0, count, BATCH)]
        metafunc.parametrize("batch", cases, ids=[f"{s}-{s + n - 1}" for s, n in cases])


def test_programs_at_run_time_sizes(request, batch):
    """Every other batch with decompose='all' (each composite op written out in primitives)."""
    start, count = batch
    decompose = "all" if (start // BATCH) % 2 else None
    counts: dict[str, int] = {}
    programs, defects = run(request.config.getoption("--fuzz-seed"), start, count, counts=counts,
                            decompose=decompose)
    assert programs == count
    assert not defects, "\n".join(defects)
    # the data decides: some scf.if took both branches across the sizes, some scf.while ran
    # different trip counts
    assert counts.get("branch_both", 0) and counts.get("while_trips_vary", 0), counts


def test_the_ci_programs_draw_every_family():
    """Each step family, nn op, attention form, loop form, nesting and dtype is in some CI program
    (seed 0), so a change of the generator's weights cannot quietly drop one from CI."""
    drawn = {k for i in range(CI_COUNT) for p in [generate(0, i)] for k in p.kinds | {f"dtype_{p.dtype}"}}
    wanted = {*EXTENDED, "conv", "fused_conv_epilogue", "conv_transpose", "max_pool", "avg_pool", "batch_norm",
              "grouped_norm", "attention_batch", "attention_sequence", "loop_static", "loop_run_time",
              "loop_stacked", "loop_stacked_run_time", "branch", "while", "loop_in_loop", "branch_in_loop",
              "loop_in_branch", "dtype_f32", "dtype_f16", "dtype_bf16"}
    assert wanted <= drawn, f"not drawn: {sorted(wanted - drawn)}"
