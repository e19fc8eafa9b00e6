"""The planted-bug catalogue (tests/planted/): `opc check` fails each bug a porting engineer
writes on exactly the cases it affects, and passes every correct twin (0 false alarms).

Each kernel file holds a correct kernel and its bugs, one `if (planted("NAME"))` each, chosen at
run time by OPC_PLANTED: the device and reference modules of the whole catalogue are built once,
and each bug reruns only its op's cases. A bug's row below says which cases it must fail (`must`)
and which it may fail besides (`may`, a superset: a case outside it that fails is a false alarm,
e.g. an epsilon dropped shows on short rows at the default 1e-5 but not on rows of 300)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from opc.check import Case, build, inputs, plan, run_and_judge
from opc.check_inputs import CAST_VALUES, SPECIALS, case_seed
from opc.cli import main
from opc.targets.target import get_target

ROOT = Path(__file__).resolve().parents[2]
TOML = str(ROOT / "tests" / "planted" / "planted.toml")

Pick = Callable[[Case], bool]


def fill(*names: str) -> Pick:
    return lambda c: c.spec is not None and c.spec.fill in names


def label(pattern: str) -> Pick:
    return lambda c: re.search(pattern, f"{c.attr_text} {c.dtype} {c.shape}") is not None


def both(*picks: Pick) -> Pick:
    return lambda c: all(p(c) for p in picks)


def gemm_k(c: Case) -> int:
    return int(re.search(r"K=(\d+)", c.shape).group(1))  # type: ignore[union-attr]


def last_axis(c: Case) -> bool:
    """softmax's axis is the last dim (a row in memory)."""
    dims, axis = c.shape.split()[0].split("x"), int(re.search(r"axis=(-?\d+)", c.shape).group(1))  # type: ignore[union-attr]
    return axis % len(dims) == len(dims) - 1


def size(at_least: int) -> Pick:
    """Cases whose first operand has this many elements (a truncation shows on a few in three)."""
    return lambda c: c.spec is not None and c.spec.args[0].element_count() >= at_least


EVERY_CAST_VALUE = len(CAST_VALUES + SPECIALS)
"""From this size on, a cast-range input holds every value of the recipe (f16's inf among them)."""
ANY: Pick = lambda c: True  # noqa: E731
UNIFORM = fill("uniform")
LARGE = fill("large", "large-negative", "wide")
TO_INT = label(r"dtype=i(8|32) ")

# bug: (op, must fail, may fail): `must` is what the bug breaks by construction; `may` adds the
# cases where it shows or not depending on the drawn values or the budget.
BUGS: dict[str, tuple[str, Pick, Pick]] = {
    "softmax-no-max": ("softmax", LARGE, fill("large", "large-negative", "wide", "specials")),
    "softmax-last-axis": ("softmax", both(UNIFORM, lambda c: not last_axis(c)), lambda c: not last_axis(c)),
    "softmax-tail": ("softmax", both(UNIFORM, label(" f32 "), lambda c: c.spec.n % 8 != 0), lambda c: c.spec.n % 8 != 0),
    "log-softmax-naive": ("log_softmax", fill("wide"), fill("wide", "large", "large-negative", "specials")),
    "ln-no-epsilon": ("layer_norm", lambda c: fill("constant")(c) or "epsilon=0.1" in c.shape, ANY),
    "ln-unbiased": ("layer_norm", UNIFORM, ANY),
    "ln-epsilon-outside": ("layer_norm", lambda c: fill("constant")(c) or "epsilon=0.1" in c.shape, ANY),
    "ln-one-pass": ("layer_norm", both(fill("near-constant"), label(" f32 ")), ANY),
    "ln-saves-var": ("layer_norm", UNIFORM, ANY),
    "sum-f16-accumulator": ("reduce_sum", both(label(" f16 "), fill("wide")), label(" f16 ")),
    "sum-first-axis-only": ("reduce_sum", label(r"axes=\[0, 2\]"), label(r"axes=\[0, 2\]")),
    "max-drops-nan": ("reduce_max", fill("specials"), fill("specials")),
    "max-starts-at-zero": ("reduce_max", fill("large-negative"), ANY),
    "maximum-fmaxf": ("maximum", fill("specials"), fill("specials")),
    "gelu-erf": ("gelu", both(label("approximate=true f32"), UNIFORM, size(3)),
                 label("approximate=true")),
    "gelu-f16-truncate": ("gelu", both(label(" f16 "), UNIFORM, size(15)),
                          label(" f16 ")),
    "cast-no-saturation": ("cast", both(TO_INT, fill("cast-range"), size(EVERY_CAST_VALUE)),
                           both(TO_INT, fill("cast-range"))),
    "cast-nan-not-zero": ("cast", both(label("dtype=i32 "), fill("cast-range"), size(EVERY_CAST_VALUE)),
                          both(TO_INT, fill("cast-range"))),
    "cast-f16-truncate": ("cast", both(label("dtype=f16 f32 "), UNIFORM, size(3)),
                          label("dtype=f16 f32 ")),
    "gemm-trans-y-ignored": ("fused_gemm_epilogue", both(label("trans_y=true"), lambda c: c.shape != "M=1 K=1 N=1"),
                             both(label("trans_y=true"), lambda c: c.shape != "M=1 K=1 N=1")),
    "gemm-bias-dropped": ("fused_gemm_epilogue", ANY, ANY),
    "gemm-k-tail": ("fused_gemm_epilogue", lambda c: gemm_k(c) % 4 != 0, lambda c: gemm_k(c) % 4 != 0),
    "gemm-reserve-not-written": ("fused_gemm_epilogue", label("activation=relu"), label("activation=relu")),
    "gemm-reserve-activated": ("fused_gemm_epilogue", both(label("activation=relu"), lambda c: c.shape != "M=1 K=1 N=1"),
                               label("activation=relu")),
    "gemm-relu-drops-nan": ("fused_gemm_epilogue", both(label("activation=relu"), fill("specials-in-x")),
                            both(label("activation=relu"), fill("specials-in-x"))),
    "xent-log-of-softmax": ("softmax_cross_entropy", fill("wide"), fill("wide", "large", "large-negative", "specials")),
}  # fmt: skip


@pytest.fixture(scope="module")
def built() -> tuple[list[Case], object, object]:
    """The catalogue's cases, its device module and its reference: built once for every bug."""
    target = get_target(TOML)
    cases, funcs, refs = plan(target, target.externals, grad=True)
    runs = [c for c in cases if c.status == "run"]
    device, reference = build(TOML, target.externals, funcs, refs, None, runs)
    return runs, device, reference


def test_catalogue_covers_twenty_bugs_of_ten_ops() -> None:
    assert len(BUGS) >= 20 and len({op for op, _, _ in BUGS.values()}) >= 10
    sources = "".join(p.read_text() for p in (ROOT / "tests" / "planted").glob("*.[ch]"))
    assert set(re.findall(r'planted\("([a-z0-9-]+)"\)', sources)) == set(BUGS)  # every bug in C has its row here


def test_correct_twins_pass(built, monkeypatch) -> None:
    """No OPC_PLANTED: every kernel is correct, and every case passes, gradients included (no false alarm)."""
    monkeypatch.delenv("OPC_PLANTED", raising=False)
    runs, device, reference = built
    run_and_judge(device, reference, runs, TOML)
    assert {c.op for c in runs} == {op for op, _, _ in BUGS.values()}
    assert {c.op for c in runs if c.grad} == {c.op for c in runs}  # every forward kernel's gradient ran
    assert [f"{c.op} {c.attr_text} {c.dtype} {c.shape}: {c.result}" for c in runs if c.result != "pass"] == []


@pytest.mark.parametrize("bug", list(BUGS))
def test_planted_bug_fails_exactly_the_affected_cases(bug, built, monkeypatch) -> None:
    op, must, may = BUGS[bug]
    monkeypatch.setenv("OPC_PLANTED", bug)
    runs, device, reference = built
    mine = [c for c in runs if c.op == op and not c.grad]
    run_and_judge(device, reference, mine, TOML)
    failing = [c for c in mine if c.result != "pass"]
    name = lambda c: f"{c.attr_text} {c.dtype} {c.shape}"  # noqa: E731
    assert [name(c) for c in mine if must(c) and c.result == "pass"] == [], "cases the bug breaks that passed"
    assert [name(c) for c in failing if not may(c)] == [], "false alarms"
    assert any(must(c) for c in mine)
    # every FAIL row says where and what: an element, the device's and the reference's values, a rerun
    for c in failing:
        assert re.search(r"(device .+, reference .+|kernel error|crashed); rerun: opc check --target .+ --ops "
                         rf"{op} --case [0-9a-f]{{8}} --show$", c.result), c.result


@pytest.mark.parametrize("bug", ["softmax-no-max", "ln-no-epsilon", "ln-epsilon-outside", "log-softmax-naive"])
def test_budget_misses_are_orders_of_magnitude(bug, built, monkeypatch) -> None:
    """Against an f64 reference with the op's own budget, a dropped epsilon or max subtraction is
    not a near miss: its worst case is off by 1000 budgets or more (NaN and inf count as inf)."""
    op, must, _ = BUGS[bug]
    monkeypatch.setenv("OPC_PLANTED", bug)
    runs, device, reference = built
    mine = [c for c in runs if c.op == op and must(c)]
    run_and_judge(device, reference, mine, TOML)
    assert max(c.error / c.tol for c in mine if c.error is not None) >= 1000


def test_inputs_depend_on_the_case_alone() -> None:
    """A case draws the same inputs (and keeps its id) whatever else the run selects."""
    target = get_target(TOML)
    everything = {c.id: c for c in plan(target, target.externals)[0] if c.status == "run"}
    alone = [c for c in plan(target, [target.external_of("opc.layer_norm")])[0] if c.status == "run"]
    assert len(everything) == sum(c.status == "run" for c in plan(target, target.externals)[0])  # ids are unique
    for c in alone[::7]:
        for a, b in zip(inputs(c), inputs(everything[c.id])):
            np.testing.assert_array_equal(a, b)
    assert case_seed("opc.softmax", "axis", "f32", "3x5") == 16631047577072157750  # sha256: no per-process salt


def test_show_reruns_one_case_and_writes_its_inputs(tmp_path, monkeypatch, capsys) -> None:
    """A FAIL row's rerun command prints the case and writes its inputs and both outputs to .npz."""
    monkeypatch.setenv("OPC_PLANTED", "softmax-no-max")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--target", TOML, "--ops", "softmax"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if " large " in f"{line} " and "FAIL" in line)
    rerun = row.split("; rerun: ")[1].split()
    case = rerun[rerun.index("--case") + 1]
    assert main(rerun[1:]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"case {case}: softmax ") and "opc.softmax" in out and "reference: opc's cpu target in f64" in out
    assert re.search(r"^result: FAIL: error inf \(tol .+\) at result\[\d+(, \d+)*\]: device nan, reference ", out, re.M)
    saved = np.load(tmp_path / f"opc-check-{case}.npz")
    assert np.all(np.abs(saved["a0"].astype(np.float64) - 800) <= 3.5)  # the large recipe: 800 +- 3
    assert np.isnan(saved["device0"]).any() and not np.isnan(saved["reference0"]).any()
    assert main(["check", "--target", TOML, "--ops", "softmax", "--case", case]) == 1  # the case alone, as a row
    assert capsys.readouterr().out.splitlines()[-2].startswith("summary: 1 cases run: 0 pass, 1 FAIL")
    assert main(["check", "--target", TOML, "--case", "00000000"]) == 1
    assert capsys.readouterr().err.strip() == "error: --case: no case 00000000 among the chosen kernels' cases " \
                                               "(the FAIL rows name them)"


@pytest.mark.parametrize(("bug", "op", "must", "may"), [
    ("ln-saves-var", "layer_norm", ANY, ANY),
    # garbage in reserve_space: only its sign reaches relu's gradient, which a 1x1 case may get right
    ("gemm-reserve-not-written", "fused_gemm_epilogue", both(label("activation=relu"), lambda c: "M=1 " not in c.shape),
     label("activation=relu")),
])  # fmt: skip
def test_gradients_through_a_forward_kernel(bug, op, must, may, built, monkeypatch) -> None:
    """`--grad`: opc's vjp runs over the device's forward, so a forward that saves the wrong statistics
    (rstd) or leaves reserve_space unwritten gives wrong gradients, even where its own output is right."""
    monkeypatch.setenv("OPC_PLANTED", bug)
    runs, device, reference = built
    grads = [c for c in runs if c.op == op and c.grad]
    run_and_judge(device, reference, grads, TOML)
    failing = [c for c in grads if c.result != "pass"]
    assert grads and all(c in failing for c in grads if must(c)) and all(may(c) for c in failing)
    assert all(re.search(r"^FAIL: d(x|y|bias|scale)\[", c.result) for c in grads if c.result != "pass")


def test_a_gradient_the_device_cannot_run_is_a_row(tmp_path, capsys) -> None:
    """--grad on a device whose kernel list lacks what layer_norm's gradient needs: n/a rows, the forward runs."""
    toml = tmp_path / "small.toml"
    toml.write_text(f'name = "small"\nkernels = ["add", "mul", "sub"]\n[external.layer_norm]\n'
                    f'source = "{ROOT / "tests" / "planted" / "layer_norm.c"}"\nsymbol = "planted_layer_norm"\n'
                    'dtypes = ["f32"]\n')
    assert main(["check", "--target", str(toml), "--grad"]) == 0
    out = capsys.readouterr().out
    grads = [line for line in out.splitlines() if " grad " in line]
    assert len(grads) == 3 and all("n/a: the gradient does not build for the device: opc." in g and
                                   "cannot run on target 'small'" in g for g in grads)
    assert re.search(r"^summary: \d+ cases run: \d+ pass, 0 FAIL; \d+ fallback; 3 n/a$", out.splitlines()[-1])
