"""CI: the ONNX backend node tests (onnx.backend.test.case.node) through opc, against the committed
expectations (tests/support/onnx_node_expectations.txt; tests/support/onnx_node_suite.py explains and rewrites it).

A wrong result or a crash fails, and so does a case the file lists as passing that no longer passes;
a refused case that now passes is reported (rewrite the file to keep it). All cases are imported,
compiled a few hundred per module, and run in one go (a couple of minutes on two cores)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (pip install '.[onnx]')")

import onnx_node_suite as suite  # noqa: E402


@pytest.fixture(scope="module")
def status() -> dict[str, str]:
    return suite.run(log=lambda _: None)


def test_every_case_is_listed(status):
    expected = suite.read_expectations()
    assert sorted(status) == sorted(expected), "cases added or gone: rewrite the expectations file"


def test_no_wrong_result_or_crash(status):
    bad = {n: s for n, s in status.items() if s.startswith(("wrong", "crash"))}
    assert not bad, "\n".join(f"{n} {s}" for n, s in sorted(bad.items()))


def test_no_pass_falls_to_refused(status):
    expected = suite.read_expectations()
    fallen = {n: s for n, s in status.items() if expected.get(n) == "pass" and s != "pass"}
    assert not fallen, "\n".join(f"{n} {s}" for n, s in sorted(fallen.items()))
    gained = sorted(n for n, s in status.items() if s == "pass" and expected.get(n, "pass") != "pass")
    if gained:
        print(f"{len(gained)} cases pass that the expectations file lists as refused: {', '.join(gained[:20])}")
