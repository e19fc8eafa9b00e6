"""The outputs the README shows are the outputs the commands print.

The convention (README, "Outputs shown in this README"): an indented line `$ COMMAND` is run
from the repository root (`opc ...` as `python -m opc ...`, `python ...` with this Python); the
indented lines after it, up to the next `$` line or the end of the indented block, are its
stdout. A line `...` stands for any number of lines. Indented commands without `$` are not run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PROMPT = "    $ "


def shown_commands(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number, command, expected stdout lines) of every `$` line in the README's indented blocks."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(PROMPT):
            i += 1
            continue
        start, command = i + 1, lines[i][len(PROMPT):]
        i += 1
        expected: list[str] = []
        while i < len(lines) and not lines[i].startswith(PROMPT) and (lines[i].startswith("    ")
                                                                       or not lines[i].strip()):
            expected.append(lines[i][4:].rstrip())
            i += 1
        while expected and not expected[-1]:
            expected.pop()
        out.append((start, command, expected))
    return out


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


COMMANDS = shown_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 4, "the README lost its `$` examples (or the convention changed)"


def test_matches():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "b"], ["a", "b", "c"]) and not matches(["a", "...", "d"], ["a", "b"])


@pytest.mark.parametrize("line,command,expected", COMMANDS, ids=[f"README:{n}" for n, _, _ in COMMANDS])
def test_readme_output(line, command, expected, tmp_path):
    proc = subprocess.run(argv(command), cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, f"README:{line}: `{command}` failed:\n{proc.stderr}"
    got = [ln.rstrip() for ln in proc.stdout.rstrip("\n").splitlines()]
    assert matches(expected, got), (f"README:{line}: `{command}` prints (paste over the README's lines):\n"
                                    + "\n".join("    " + ln if ln else "" for ln in got))
