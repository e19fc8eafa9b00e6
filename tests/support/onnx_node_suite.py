"""The ONNX backend node tests (onnx.backend.test.case.node, 1,884 cases in onnx 1.23) run through opc.

Each case's model is imported for the shapes of its test data (and the values of
inputs a converter needs at compile time, as opc.onnx_backend does); the imported
functions are compiled CHUNK at a time into one module each (a C build per case
would cost too much), run on the test data and compared with onnx's expected
outputs at the case's rtol/atol. Every case ends as one line:

    pass                     the outputs match
    refused: REASON          the importer refused it (one line naming node and reason)
    wrong: DETAIL            imported and ran, but an output differs        (a bug)
    crash: DETAIL            the compile or the call raised                 (a bug)

    python3 tests/support/onnx_node_suite.py            # run, print the counts and every wrong/crash case
    python3 tests/support/onnx_node_suite.py --write    # ... and rewrite tests/support/onnx_node_expectations.txt
    python3 tests/support/onnx_node_suite.py -k relu    # only cases whose name contains 'relu'
                                                # (with --write: only their lines are rewritten)

tests/frontend/test_onnx_node_suite.py runs it in CI against the expectations file.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from opc.errors import OpcError  # noqa: E402

EXPECTATIONS = Path(__file__).with_name("onnx_node_expectations.txt")
CHUNK = 200  # functions per compiled module, about


@dataclass
class Prepared:
    """One data set of one case, imported: the function and what to call it with."""

    case: str
    fname: str
    function: object  # func.FuncOp
    args: list[np.ndarray]
    expected: list  # arrays; lists for sequences, None for empty optionals
    rtol: float
    atol: float
    layouts: list = field(default_factory=list)  # the outputs' layouts (opc.onnx_import.lists.regroup)


@dataclass
class Outcome:
    status: dict[str, str] = field(default_factory=dict)

    def set(self, case: str, line: str) -> None:
        if not self.status.get(case, "pass").startswith(("wrong", "crash", "refused")):  # the first bad line sticks
            self.status[case] = line


def collect(pattern: str | None = None, names: Collection[str] | None = None):
    """The node cases whose names contain `pattern` (all without one), and are among `names` if given."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    chosen = (c for c in cases if (pattern is None or pattern in c.name) and (names is None or c.name in names))
    return sorted(chosen, key=lambda c: c.name)


def one_line(text: str, case: str) -> str:
    line = " ".join(str(text).strip().splitlines()[0].split()) if str(text).strip() else "no message"
    line = re.sub(r"^error: ", "", line)
    return line.replace(f"{case}: ", "", 1)


def as_array(value):
    """Test data as NumPy: a TensorProto read, a NumPy scalar made rank 0; in sequences too; maps etc. stay."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, list):
        return [as_array(v) for v in value]
    if isinstance(value, TensorProto):
        try:
            return numpy_helper.to_array(value)
        except Exception:  # noqa: BLE001 - a dtype NumPy lacks (string, float4...): refused below
            return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def prepare_case(case) -> list[Prepared] | str:
    """The case's data sets imported (one function each where their shapes or bound values differ), or why not."""
    from xdsl.dialects.builtin import StringAttr

    from opc.onnx_import import import_graph
    from opc.onnx_import.lists import flatten, shapes_of

    graph = case.model.graph
    init_names = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in init_names]
    out: list[Prepared] = []
    built: list[tuple[dict, dict, Prepared, int]] = []
    for k, (feeds, expected) in enumerate(case.data_sets):
        feeds, expected = [as_array(v) for v in feeds], [as_array(v) for v in expected]
        for vi, value in zip(inputs, feeds):
            if not tensors_in(value):
                return (f"refused: input '{vi.name}' is a {type(value).__name__}: "
                        "opc imports tensors, sequences and optionals")
        if not all(tensors_in(v) for v in expected):
            return "refused: an output is not a tensor, sequence or optional: opc imports those only"
        values = {vi.name: v for vi, v in zip(inputs, feeds)}
        shapes = {n: shapes_of(v) for n, v in values.items()}
        for prev_shapes, prev_bound, prev, n_params in built:  # a data set the last import also fits
            if prev_shapes == shapes and all(np.array_equal(values[n], v) for n, v in prev_bound.items()):
                out.append(Prepared(case.name, prev.fname, None,
                                    [a for n, v in values.items() if n not in prev_bound for a in flatten(v)]
                                    + prev.args[len(prev.args) - n_params:], list(expected), case.rtol, case.atol,
                                    prev.layouts))
                break
        else:
            layouts: list = []
            try:
                module, params, bound = import_graph(case.model, shapes, values, where=case.name, layouts=layouts)
            except OpcError as err:
                return "refused: " + one_line(err, case.name)
            except Exception as err:  # noqa: BLE001 - a bug in the importer: recorded as a crash
                return f"crash: import: {type(err).__name__}: {one_line(err, case.name)}"
            (f,) = list(module.ops)
            f.detach()
            fname = re.sub(r"\W", "_", f"{case.name}_{k}")
            f.sym_name = StringAttr(fname)
            p = Prepared(case.name, fname, f,
                         [a for n, v in values.items() if n not in bound for a in flatten(v)] + list(params.values()),
                         list(expected), case.rtol, case.atol, layouts)
            built.append((shapes, {n: values[n] for n in bound}, p, len(params)))
            out.append(p)
    return out


def tensors_in(value) -> bool:
    """An array, a sequence of them (a list), or None (an empty optional)."""
    if isinstance(value, list):
        return all(tensors_in(v) for v in value)
    return value is None or isinstance(value, np.ndarray)


def structure(value):
    """The shape of nested data without the arrays: lists stay lists, arrays 'tensor', None None."""
    if isinstance(value, list):
        return [structure(v) for v in value]
    return None if value is None else "tensor"


def compile_chunk(functions: list, outcome: Outcome, owner: dict[str, str]) -> dict[str, object]:
    """fname -> compiled function; a chunk that fails to build is split until the culprit is found."""
    from xdsl.dialects.builtin import ModuleOp

    import opc

    if not functions:
        return {}
    try:
        module = ModuleOp([f.clone() for f in functions])
        compiled = opc.compile(module)
        return {f.sym_name.data: compiled[f.sym_name.data] for f in functions}
    except Exception as err:  # noqa: BLE001 - a bug in opc, whatever it raises: recorded as a crash
        if len(functions) == 1:
            name = functions[0].sym_name.data
            outcome.set(owner[name], f"crash: compile: {type(err).__name__}: {one_line(err, owner[name])}")
            return {}
        half = len(functions) // 2
        return {**compile_chunk(functions[:half], outcome, owner), **compile_chunk(functions[half:], outcome, owner)}


def compare(p: Prepared, results: Sequence[np.ndarray]) -> str | None:
    from opc.onnx_import.lists import flatten, regroup

    got = regroup(p.layouts, results) if p.layouts else list(results)
    if len(got) != len(p.expected):
        return f"{len(got)} outputs, expected {len(p.expected)}"
    for i, (g, e) in enumerate(zip(got, p.expected)):
        if structure(g) != structure(e):
            return f"output {i} is {structure(g)}, expected {structure(e)}"
    for i, (g, e) in enumerate(zip(flatten(got), flatten(p.expected))):
        g, e = np.asarray(g), np.asarray(e)
        if g.dtype != e.dtype:
            return f"output {i} has dtype {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"output {i} has shape {list(g.shape)}, expected {list(e.shape)}"
        if e.dtype.kind in "biuU" or e.dtype == object:
            if not np.array_equal(g, e):
                return f"output {i} differs at {int(np.sum(g != e))} of {e.size} elements"
            continue
        gf, ef = g.astype(np.float64), e.astype(np.float64)
        if e.dtype.kind == "V" and e.dtype.itemsize == 1:  # float8/float4/int4/int2 (ml_dtypes): one rounding, exact
            if not np.array_equal(gf, ef, equal_nan=True):
                return f"output {i} differs at {int(np.sum(~np.isclose(gf, ef, 0, 0, True)))} of {e.size} elements"
            continue
        # half types: the expected values round intermediates differently (in float32 or not at all);
        # two units in the last place of the dtype are within its resolution
        rtol = max(p.rtol, 2 * float(ml_dtypes.finfo(e.dtype).eps)) if e.dtype.itemsize == 2 else p.rtol
        # an output that should be 0 among large ones (a DFT's): the expected value carries the rounding of
        # the sums it came from, up to a few units in the last place of the largest value
        finite = np.abs(ef[np.isfinite(ef)])
        scale = float(finite.max()) if finite.size else 0.0
        atol = max(p.atol, 4 * float(ml_dtypes.finfo(e.dtype).eps) * scale)
        close = np.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            j = int(np.argmax(~close.reshape(-1)))
            return (f"output {i} differs at {int((~close).sum())} of {e.size} elements "
                    f"(e.g. {gf.reshape(-1)[j]!r} vs {ef.reshape(-1)[j]!r})")
    return None


def run(pattern: str | None = None, chunk: int = CHUNK, log=print, names: Collection[str] | None = None,
        before_call: Callable[[Prepared], list] | None = None, skip: Collection[str] = ()) -> dict[str, str]:
    """Every case's status line, by case name. names: only these cases; before_call(p) is told before
    each call and gives the arguments to call with (onnx_node_sanitize.py pins a sanitizer report on
    the case that way, and gives each argument memory of its own); the cases in `skip` are imported
    and compiled (the same modules) but not called, and their status is "skipped"."""
    t0 = time.time()
    cases = collect(pattern, names)
    outcome = Outcome()
    prepared: list[Prepared] = []
    for case in cases:
        result = prepare_case(case)
        if isinstance(result, str):
            outcome.status[case.name] = result
        else:
            outcome.status[case.name] = "pass"
            prepared += result
    t1 = time.time()
    log(f"{len(cases)} cases collected and imported in {t1 - t0:.0f} s")
    owner = {p.fname: p.case for p in prepared}
    functions = [p.function for p in prepared if p.function is not None]
    compiled: dict[str, object] = {}
    buckets: dict[int, list] = {}  # by a hash of the case name: a case added or changed rebuilds one module
    n_buckets = max(1, -(-len(functions) // chunk))
    for f in functions:
        buckets.setdefault(zlib.crc32(owner[f.sym_name.data].encode()) % n_buckets, []).append(f)
    for _, group in sorted(buckets.items()):
        compiled.update(compile_chunk(group, outcome, owner))
    t2 = time.time()
    log(f"{len(functions)} functions compiled in {t2 - t1:.0f} s")
    for p in prepared:
        fn = compiled.get(p.fname)
        if fn is None:
            continue
        if p.case in skip:
            outcome.status[p.case] = "skipped"
            continue
        args = p.args if before_call is None else before_call(p)
        try:
            with np.errstate(all="ignore"):
                out = fn(*args)
        except Exception as err:  # noqa: BLE001 - recorded as a crash
            outcome.set(p.case, f"crash: call: {type(err).__name__}: {one_line(err, p.case)}")
            continue
        problem = compare(p, list(out) if isinstance(out, tuple) else [out])
        if problem:
            outcome.set(p.case, f"wrong: {problem}")
    log(f"run in {time.time() - t2:.0f} s")
    return outcome.status


def read_expectations(path: Path = EXPECTATIONS) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, status = line.partition(" ")
            out[name] = status
    return out


def write_expectations(status: dict[str, str], path: Path = EXPECTATIONS) -> None:
    passed = sum(s == "pass" for s in status.values())
    head = (f"# ONNX backend node tests through opc: {passed} of {len(status)} pass "
            "(python3 tests/support/onnx_node_suite.py --write)\n# case status\n")
    path.write_text(head + "".join(f"{n} {s}\n" for n, s in sorted(status.items())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {EXPECTATIONS.name}")
    parser.add_argument("-k", dest="pattern", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    status = run(args.pattern)
    bad = {n: s for n, s in status.items() if s.startswith(("wrong", "crash"))}
    for n, s in sorted(bad.items()):
        print(f"{n} {s}")
    passed = sum(s == "pass" for s in status.values())
    print(f"{passed} of {len(status)} pass, {len(bad)} wrong or crashed")
    if args.write:  # with -k: those cases' lines replaced, the others kept
        write_expectations({**(read_expectations() if args.pattern else {}), **status})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
