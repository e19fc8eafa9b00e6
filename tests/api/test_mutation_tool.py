"""tools/mutation.py stays runnable as the code moves: every hand-written mutant's text is
found exactly once in its file (else the mutant silently tests nothing), and every module and
test file it names exists. Mutation runs themselves are by hand (docs/testing.md: Mutation testing)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("opc_mutation_tool", ROOT / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mutation  # dataclasses look their module up
spec.loader.exec_module(mutation)


@pytest.mark.parametrize("m", mutation.HAND_MUTANTS, ids=[m.what for m in mutation.HAND_MUTANTS])
def test_hand_mutant_applies_once(m) -> None:
    text = (ROOT / m.path).read_text()
    assert text.count(m.old) == 1, f"{m.path}: {m.old!r} found {text.count(m.old)} times"
    assert text.replace(m.old, m.new) != text


def named_test_files(command: str) -> list[str]:
    return [w.partition("::")[0] for w in shlex.split(command) if w.startswith("tests/")]


@pytest.mark.parametrize("name", list(mutation.MODULES))
def test_module_and_its_tests_exist(name: str) -> None:
    module = mutation.MODULES[name]
    assert (ROOT / module.path).is_file()
    assert all((ROOT / t).is_file() for t in named_test_files(module.tests))
    assert all((ROOT / t).is_file() for m in mutation.HAND_MUTANTS for t in named_test_files(m.tests))
