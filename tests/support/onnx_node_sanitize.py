"""The ONNX backend node cases that import, run with every C object built with ASan + UBSan.

onnx_node_suite.py's run, in child processes under opc.sanitize's environment (OPC_SANITIZE=1,
libasan preloaded, float-cast-overflow included, -fno-sanitize-recover=all, halt_on_error): any
report aborts the child, so none can pass silently. A child takes a batch of cases and writes
each case's name to stderr before calling it; when it dies, the report after the last name is
that case's, and the batch runs again with that case imported and compiled (the same modules,
found in the compile cache) but not called, until the batch finishes.

    python3 tests/support/onnx_node_sanitize.py            # every case the expectations file does not refuse
    python3 tests/support/onnx_node_sanitize.py -k conv    # only cases whose name contains 'conv'
    python3 tests/support/onnx_node_sanitize.py -j 2       # two children at once (a machine of your own)

It prints the cases run, every report (the case and the report's first lines) and every case
whose status differs from tests/support/onnx_node_expectations.txt (a result the sanitizer's
build changes), and exits 1 if there is either. Use a compile cache of your own
(OPC_CACHE_DIR): sanitized builds are kept apart from the others but fill it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import onnx_node_suite as suite  # noqa: E402

from opc.sanitize import sanitized_env  # noqa: E402

BATCH = 300  # cases per child: about 10 s of start-up and collection each, and one module per 200 functions
MARK = "opc-sanitize: calling "
REPORT_START = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|AddressSanitizer:DEADLYSIGNAL|"
                          r"AddressSanitizer: CHECK failed")
REPORT_LINES = 8
RETRIES = 40  # reports one batch may give before it is given up (each costs a child's start-up)


@dataclass
class BatchResult:
    status: dict[str, str] = field(default_factory=dict)  # case -> status line, as onnx_node_suite gives it
    reports: dict[str, str] = field(default_factory=dict)  # case -> the report's first lines
    failure: str | None = None  # a child that died outside any case's call


def child_main(names_file: str, skip_file: str, out_file: str) -> int:
    """In the sanitized child: run the cases named in names_file (not calling those in skip_file)."""
    names = json.loads(Path(names_file).read_text())
    skip = set(json.loads(Path(skip_file).read_text()))

    def before_call(p: suite.Prepared) -> list:
        os.write(2, f"{MARK}{p.case}\n".encode())  # unbuffered, so it lands before any report of the call
        # each argument copied into a malloc of its own, exactly its size, which ASan's redzones border
        # (test data read from protobuf may be a view into a bytes object among Python's small objects)
        return [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in p.args]

    status = suite.run(names=names, log=lambda _: None, before_call=before_call, skip=skip)
    Path(out_file).write_text(json.dumps(status))
    return 0


def report_of(stderr: str) -> tuple[str | None, str]:
    """(the case whose call was running when the child died, or None; the report's first lines)."""
    marks = [m for m in re.finditer(rf"^{re.escape(MARK)}(\S+)$", stderr, re.M)]
    case = marks[-1].group(1) if marks else None
    tail = stderr[marks[-1].end():] if marks else stderr
    lines = [line for line in tail.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if REPORT_START.search(line)), None)
    if start is None:  # died without a sanitizer's word (a signal, an exception): its last lines
        return case, "\n".join(["no sanitizer report; the child's last lines:", *lines[-REPORT_LINES:]])
    return case, "\n".join(lines[start:start + REPORT_LINES])


def run_batch(names: list[str], prelude: str = "", timeout: float = 3600) -> BatchResult:
    """Run one batch in sanitized children until it finishes; a child's report skips its case next time.
    prelude: Python run in the child first (a test plants a bug that way)."""
    result = BatchResult()
    env = sanitized_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(suite.ROOT), env.get("PYTHONPATH")]))
    code = (f"{prelude}\nimport sys\nsys.path.insert(0, {str(HERE)!r})\nimport onnx_node_sanitize\n"
            "sys.exit(onnx_node_sanitize.child_main(*sys.argv[1:]))")
    with tempfile.TemporaryDirectory(prefix="opc-sanitize-") as tmp:
        names_file, skip_file, out_file = (Path(tmp) / n for n in ("names.json", "skip.json", "out.json"))
        names_file.write_text(json.dumps(names))
        for _ in range(RETRIES):
            skip_file.write_text(json.dumps(sorted(result.reports)))
            try:
                proc = subprocess.run([sys.executable, "-c", code, str(names_file), str(skip_file), str(out_file)],
                                      capture_output=True, text=True, env=env, cwd=suite.ROOT, timeout=timeout)
            except subprocess.TimeoutExpired as err:
                stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else err.stderr or ""
                case, _ = report_of(stderr)
                if case is None:
                    result.failure = f"timed out after {timeout:.0f} s before calling any case"
                    return result
                result.reports[case] = f"timed out after {timeout:.0f} s in this case's call"
                continue
            if proc.returncode == 0:
                result.status = json.loads(out_file.read_text())
                result.status.update({c: "sanitizer report" for c in result.reports})
                return result
            case, report = report_of(proc.stderr)
            if case is None or case in result.reports:
                result.failure = f"the child died (exit {proc.returncode}) outside a case's call:\n{report}"
                return result
            result.reports[case] = report
    result.failure = f"gave up after {RETRIES} reports"
    return result


def selected(pattern: str | None) -> list[str]:
    """The cases that import (not refused in the expectations file) whose names contain pattern."""
    expected = suite.read_expectations()
    return sorted(n for n, s in expected.items()
                  if not s.startswith("refused") and (pattern is None or pattern in n))


def sanitize(names: Sequence[str], batch: int = BATCH, jobs: int = 1, prelude: str = "",
             log=print) -> BatchResult:
    """Every named case run sanitized, batch cases a child, jobs children at once; the results merged."""
    batches = [list(names[i:i + batch]) for i in range(0, len(names), batch)]
    merged = BatchResult()
    failures = []

    def one(k: int) -> BatchResult:
        t = time.time()
        r = run_batch(batches[k], prelude)
        log(f"batch {k + 1}/{len(batches)}: {len(batches[k])} cases, {len(r.reports)} reports, "
            f"{time.time() - t:.0f} s")
        return r

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for k, r in enumerate(pool.map(one, range(len(batches)))):
            merged.status.update(r.status)
            merged.reports.update(r.reports)
            if r.failure:
                failures.append(f"batch {k + 1} ({batches[k][0]} .. {batches[k][-1]}): {r.failure}")
    merged.failure = "\n".join(failures) or None
    return merged


def changed(status: dict[str, str], expected: dict[str, str], reported: Collection[str]) -> dict[str, str]:
    """Cases whose status differs from the expectations file's, a report aside: case -> 'was X, now Y'."""
    return {n: f"was '{expected.get(n)}', now '{s}'" for n, s in status.items()
            if n not in reported and s != expected.get(n)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-k", dest="pattern", help="only cases whose name contains this")
    parser.add_argument("-j", dest="jobs", type=int, default=1, help="children at once (default 1)")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"cases per child (default {BATCH})")
    args = parser.parse_args(argv)
    try:
        sanitized_env()
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    names = selected(args.pattern)
    t0 = time.time()
    result = sanitize(names, args.batch, args.jobs, log=lambda line: print(line, flush=True))  # a long run's progress
    ran = [n for n, s in result.status.items() if s not in ("skipped",) and not s.startswith("refused")]
    print(f"{len(ran)} of {len(names)} cases run under ASan + UBSan in {time.time() - t0:.0f} s")
    print(f"{len(result.reports)} with a sanitizer report")
    for case, report in sorted(result.reports.items()):
        print(f"  {case}:\n" + "\n".join(f"    {line}" for line in report.splitlines()))
    moved = changed(result.status, suite.read_expectations(), result.reports)
    print(f"{len(moved)} whose result changed under the sanitizer")
    for case, what in sorted(moved.items()):
        print(f"  {case}: {what}")
    if result.failure:
        print(f"not run to the end:\n{result.failure}")
    return 1 if result.reports or moved or result.failure else 0


if __name__ == "__main__":
    sys.exit(main())
