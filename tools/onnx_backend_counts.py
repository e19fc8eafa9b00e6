"""Counts of ONNX's own backend test categories run through opc.onnx_backend with the ONNX project's
runner (onnx.backend.test.BackendTest), CPU cases only, and each failure in one line:

    python3 tools/onnx_backend_counts.py                     # pytorch-converted and pytorch-operator
    python3 tools/onnx_backend_counts.py OnnxBackendSimpleModelTest

Category names are BackendTest's test-case classes (OnnxBackendNodeModelTest compiles every node case
on its own: tests/support/onnx_node_suite.py runs those in chunks, far faster)."""

from __future__ import annotations

import collections
import sys
import unittest
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx.backend.test  # noqa: E402

import opc.onnx_backend  # noqa: E402

DEFAULT = ["OnnxBackendPyTorchConvertedModelTest", "OnnxBackendPyTorchOperatorModelTest"]


def main(kinds: list[str]) -> None:
    backend: Any = opc.onnx_backend  # a module with the Backend class's functions, as onnx allows
    cases = onnx.backend.test.BackendTest(backend, __name__).test_cases
    suite = unittest.TestSuite()
    for kind in kinds:
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(cases[kind]))
    tests = [t for t in suite if isinstance(t, unittest.TestCase)]  # loadTestsFromTestCase: test cases
    ids = [(type(t).__name__, t.id().split(".")[-1]) for t in tests if not t.id().endswith("_cuda")]
    result = unittest.TestResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite.run(result)
    failed = {t.id().split(".")[-1]: err.strip().splitlines()[-1][:200] for t, err in result.failures + result.errors}
    skipped = {t.id().split(".")[-1] for t, _ in result.skipped}
    passed, total = collections.Counter(), collections.Counter()
    for kind, name in ids:
        total[kind] += 1
        passed[kind] += name not in failed and name not in skipped
    for kind in kinds:
        print(f"{kind}: {passed[kind]} of {total[kind]} pass")
    for name, line in sorted(failed.items()):
        if not name.endswith("_cuda"):
            print(f"  {name}: {line}")


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
