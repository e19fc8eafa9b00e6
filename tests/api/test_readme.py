"""The outputs the README shows are the outputs the commands print.

The convention (README, "Outputs shown in this README"): an indented line `$ COMMAND` is run
from the repository root (`opc ...` as `python -m opc ...`, `python ...` with this Python); the
indented lines after it, up to the next `$` line or the end of the indented block, are its
stdout. A line `...` stands for any number of lines. Indented commands without `$` are not run.
The `$` commands of one block run in order, in one test.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PROMPT = "    $ "


def shown_commands(text: str) -> list[tuple[int, list[tuple[str, list[str]]]]]:
    """(line number, [(command, expected stdout lines), ...]) of each indented block with `$` lines:
    the commands of one block run in order (a later one may read what an earlier one wrote)."""
    lines = text.splitlines()
    blocks: list[tuple[int, list[tuple[str, list[str]]]]] = []
    i, in_block = 0, False
    while i < len(lines):
        if not lines[i].startswith(PROMPT):
            in_block = in_block and (lines[i].startswith("    ") or not lines[i].strip())
            i += 1
            continue
        if not in_block:
            blocks.append((i + 1, []))
            in_block = True
        command = lines[i][len(PROMPT):]
        i += 1
        expected: list[str] = []
        while i < len(lines) and not lines[i].startswith(PROMPT) and (lines[i].startswith("    ")
                                                                       or not lines[i].strip()):
            expected.append(lines[i][4:].rstrip())
            i += 1
        while expected and not expected[-1]:
            expected.pop()
        blocks[-1][1].append((command, expected))
        in_block = i < len(lines) and lines[i].startswith(PROMPT)
    return blocks


def matches(expected: list[str], got: list[str]) -> bool:
    """Line by line, `...` matching any run of lines (none included)."""
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and expected[0] == got[0] and matches(expected[1:], got[1:])


def argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    if words[0] == "opc":
        return [sys.executable, "-m", "opc", *words[1:]]
    if words[0] in ("python", "python3"):
        return [sys.executable, *words[1:]]
    pytest.fail(f"README: `$ {command}`: only opc and python commands are run")


BLOCKS = shown_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands():
    assert sum(len(b) for _, b in BLOCKS) >= 6, "the README lost its `$` examples (or the convention changed)"


def test_matches():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "b"], ["a", "b", "c"]) and not matches(["a", "...", "d"], ["a", "b"])


def test_blocks():
    text = "x\n\n    $ a\n    1\n\n    2\n    $ b\n\ny\n    $ c\n    3\n"
    assert shown_commands(text) == [(3, [("a", ["1", "", "2"]), ("b", [])]), (10, [("c", ["3"])])]


@pytest.mark.parametrize("line,commands", BLOCKS, ids=[f"README:{n}" for n, _ in BLOCKS])
def test_readme_output(line, commands):
    for command, expected in commands:
        proc = subprocess.run(argv(command), cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, f"README:{line}: `{command}` failed:\n{proc.stderr}"
        got = [ln.rstrip() for ln in proc.stdout.rstrip("\n").splitlines()]
        assert matches(expected, got), (f"README:{line}: `{command}` prints (paste over the README's lines):\n"
                                        + "\n".join("    " + ln if ln else "" for ln in got))
