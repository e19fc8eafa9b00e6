"""The code blocks of README.md and docs/**/*.md, and how each kind is tested (tests/api/test_docs.py).

A fenced block's language says what the test does with it:

- `console`: every line `$ COMMAND` is run from the repository root (`opc ...` as
  `python -m opc ...`, `python ...` with this Python), in order; the lines after it, up to the
  next `$` line, are what it prints, stdout and stderr as a terminal shows them (`...` stands
  for any number of lines). It must exit 0, unless its last line shown is an `error:` line.
- `python`: run; a page's `python` and `pycon` blocks run in order in one namespace (one process
  per page, from the repository root), like a notebook.
- `pycon`: `>>>` lines run by doctest in that namespace, outputs compared (ELLIPSIS on), so a
  shown exception is checked too.
- `mlir`: parsed and verified by opc (a single op line is wrapped into a function).
- a block of any language made of `--8<-- "PATH"` lines includes files of the repository (the
  docs show the examples' device files and kernels, FileCheck tests), which the suite itself
  loads, builds or runs; the test checks they exist and are tracked.
- `c`: compiled by gcc -fsyntax-only -Wall -Werror against runtime/opc_kernel.h.
- `toml`: only as an inclusion (a device file the suite loads), never a copy.
- `sh`: commands to type that take too long to run in the suite (benchmarks, installs, torchrun):
  checked, not run: `opc` commands parse with opc's argument parser, every repository path they
  name exists, and each `--flag` given to a repository script appears in that script.
- `text`: only in the generated reference (argparse usage lines).

Any other language, or a block without one, fails the test.

Run as a script, `python tests/support/docblocks.py PAGE.md` runs the page's python and pycon blocks
(what the test does in a subprocess).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S)
KINDS = ("console", "python", "pycon", "mlir", "c", "toml", "sh")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    def snippets(self) -> list[str] | None:
        """The files a block of `--8<--` lines includes, or None when it is code of its own."""
        lines = [ln.strip() for ln in self.body.strip().splitlines()]
        found = [SNIPPET.match(ln) for ln in lines]
        return [m.group(1) for m in found] if lines and all(found) else None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        body = "\n".join(ln[indent:] for ln in m.group("body").splitlines())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"), body))
    return out


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """[(command, expected stdout lines)] of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line.rstrip())
        elif line.strip():
            raise ValueError(f"a console block begins with `$ COMMAND`, not {line!r}")
    for _, expected in out:
        while expected and not expected[-1]:
            expected.pop()
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """Line by line, `...` matching any run of lines (none included)."""
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and expected[0] == got[0] and matches(expected[1:], got[1:])


def run_python_blocks(page: Path) -> int:
    """Run the page's python and pycon blocks in one namespace; report the first failure."""
    import doctest
    import os
    import traceback

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    globs: dict = {"__name__": "__main__"}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for b in blocks(page):
        if b.lang == "python":
            try:
                exec(compile(b.body, b.where, "exec"), globs)  # noqa: S102 - the docs' own example
            except Exception:  # noqa: BLE001
                print(f"{b.where}: the python block raised:\n{traceback.format_exc()}")
                return 1
        elif b.lang == "pycon":
            test = parser.get_doctest(b.body, globs, b.where, str(page), b.line)
            result = runner.run(test, clear_globs=False)
            globs.update(test.globs)  # DocTest copies the namespace it is given
            if result.failed:
                print(f"{b.where}: the pycon block's output differs (above)")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_python_blocks(Path(sys.argv[1]).resolve()))
