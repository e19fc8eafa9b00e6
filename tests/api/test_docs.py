"""Every code block of README.md and docs/ is tested, and the generated reference is current.

What each kind of block gets is in tests/support/docblocks.py: console blocks run and their output is
compared, python/pycon blocks run per page in one namespace (pycon outputs compared), mlir blocks
are parsed and verified, c/toml blocks compile or load (or include files the suite builds), sh
blocks (benchmarks, installs) are checked without running them. A block of another kind fails.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import tomllib
from docblocks import KINDS, ROOT, Block, blocks, console_commands, matches, pages

sys.path.insert(0, str(ROOT / "tools"))
import gen_docs  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PAGES = pages()
ALL = [b for p in PAGES for b in blocks(p)]
REFERENCE = ROOT / "docs" / "reference"


def ids(bs: list[Block]) -> list[str]:
    return [b.where for b in bs]


def of(*langs: str, generated: bool = False) -> list[Block]:
    """The blocks of these languages that are code of their own (not file inclusions)."""
    return [b for b in ALL if b.lang in langs and (b.page.parent == REFERENCE) == generated and not b.snippets()]


def test_pages_have_blocks():
    assert len(PAGES) >= 12 and len(ALL) >= 40, "the docs lost their examples (or the fence syntax changed)"


@pytest.mark.parametrize("block", ALL, ids=ids(ALL))
def test_every_block_is_of_a_tested_kind(block):
    allowed = KINDS + (("text",) if block.page.parent == REFERENCE else ())
    assert block.lang in allowed, (f"{block.where}: a ```{block.lang or ''} block: the docs' blocks are "
                                   f"{', '.join(KINDS)} (tests/support/docblocks.py says how each is tested)")


def test_matches():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "b"], ["a", "b", "c"]) and not matches(["a", "...", "d"], ["a", "b"])


def test_console_commands():
    assert console_commands("$ a\n1\n\n2\n$ b\n\n") == [("a", ["1", "", "2"]), ("b", [])]


NEEDS = {"torch": ("import torch", "opc.torch"), "jax": ("import jax", "opc.jax"),
         "onnx": ("import onnx", "zoo", ".onnx", "import_onnx", "onnx_backend"),
         "onnxruntime": ("onnxruntime",)}


def skip_without_optional(text: str, where: str) -> None:
    """Skip, naming the package, only where a framework the example uses is not installed at all
    (the suite's rule, tests/support/requires.py: an installed package that fails to import fails)."""
    import importlib.util

    for package, marks in NEEDS.items():
        if any(m in text for m in marks) and importlib.util.find_spec(package) is None:
            pytest.skip(f"{where}: {package} is not installed (pip install '.[test]')")


def argv(command: str, where: str) -> list[str]:
    words = shlex.split(command, comments=True)
    if words[0] == "opc":
        return [sys.executable, "-m", "opc", *words[1:]]
    if words[0] in ("python", "python3"):
        return [sys.executable, *words[1:]]
    pytest.fail(f"{where}: `$ {command}`: only opc and python commands are run (a long one goes in an sh block)")


CONSOLE = of("console")


@pytest.mark.parametrize("block", CONSOLE, ids=ids(CONSOLE))
def test_console_output(block):
    skip_without_optional(block.body, block.where)
    for command, expected in console_commands(block.body):
        proc = subprocess.run(argv(command, block.where), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=900, env=ENV)
        fails = bool(expected) and "error:" in expected[-1]
        assert (proc.returncode != 0) == fails, (f"{block.where}: `{command}` exited {proc.returncode}"
                                                 f"{' (the page shows an error)' if fails else ''}:\n{proc.stdout}")
        got = [ln.rstrip() for ln in proc.stdout.rstrip("\n").splitlines()]
        assert matches(expected, got), (f"{block.where}: `{command}` prints (paste over the page's lines):\n"
                                        + "\n".join(got))


PYTHON_PAGES = sorted({b.page for b in of("python", "pycon")})


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_python_blocks(page):
    skip_without_optional("\n".join(b.body for b in blocks(page) if b.lang in ("python", "pycon")),
                          str(page.relative_to(ROOT)))
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "docblocks.py"), str(page)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=ENV)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]


MLIR = of("mlir") + of("mlir", generated=True)


@pytest.mark.parametrize("block", MLIR, ids=ids(MLIR))
def test_mlir_blocks_verify(block):
    from opc.ir import parse_text

    text = block.body
    if "func.func" not in text and "builtin.module" not in text:
        assert len(text.strip().splitlines()) == 1, f"{block.where}: an mlir block is a module or one op line"
        text = gen_docs.function_text(text.strip())
    parse_text(text, block.where)


FILES = [b for b in ALL if b.snippets()]


@pytest.mark.parametrize("block", FILES, ids=ids(FILES))
def test_included_files_exist_and_are_tracked(block):
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    for path in block.snippets():
        assert (ROOT / path).is_file() and path in tracked, f"{block.where}: includes {path}, not a tracked file"


C_CODE = of("c")


@pytest.mark.parametrize("block", C_CODE, ids=ids(C_CODE))
def test_c_blocks_compile(block, tmp_path):
    src = tmp_path / "block.c"
    src.write_text('#include "opc_kernel.h"\n#include <string.h>\n' + block.body)
    proc = subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Werror", "-I", str(ROOT / "runtime"), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{block.where}: gcc:\n{proc.stderr}"


def test_toml_blocks_are_repository_files():
    """A device file shown in the docs is one the suite loads (examples/), included, not a copy."""
    assert not of("toml"), f"{of('toml')[0].where}: include the device file (--8<-- \"PATH\") instead of a copy"


REPO_DIRS = ("examples/", "bench/", "tests/", "tools/", "docs/", "runtime/", ".ci/")
SH = of("sh")


def check_sh_command(words: list[str], where: str) -> None:
    for w in words:
        if w.startswith(REPO_DIRS):
            assert (ROOT / w.rstrip("/")).exists(), f"{where}: names {w}, which does not exist"
    if words[0] == "opc":
        from opc.cli import build_parser, spell_grad_order

        try:
            build_parser().parse_args(spell_grad_order(words[1:]))
        except SystemExit:
            pytest.fail(f"{where}: `{' '.join(words)}`: opc's parser refuses it")
        return
    scripts = [w for w in words if w.endswith(".py") and w.startswith(REPO_DIRS)]
    if scripts and words[0] in ("python", "python3", "torchrun", "env"):
        # pytest's own options come from tests/conftest.py
        where_flags = "tests/conftest.py" if words[1:3] == ["-m", "pytest"] else scripts[0]
        text = (ROOT / where_flags).read_text(encoding="utf-8")
        for w in words[words.index(scripts[0]) + 1:]:
            flag = w.split("=")[0]
            if flag.startswith("--"):
                assert f'"{flag}"' in text, f"{where}: {where_flags} has no option {flag}"


@pytest.mark.parametrize("block", SH, ids=ids(SH))
def test_sh_blocks_name_what_exists(block):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for line in block.body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        words = [w for w in words if "=" not in w or w.startswith("-")] if words[0] not in ("opc",) else words
        if words[0] == "env":
            words = [w for w in words[1:] if not w.startswith("-") and w not in ("OPENBLAS_CORETYPE",
                                                                                  "OPENBLAS_L2_SIZE")]
        if not words:
            continue
        if words[:4] == ["python3", "-m", "pip", "install"] or words[:2] == ["pip", "install"]:
            for w in words:
                if "[" in w:
                    for extra in w.split("[", 1)[-1].rstrip("]\"'").split(","):
                        assert extra in extras, f"{block.where}: no extra [{extra}] in pyproject.toml"
            continue
        check_sh_command(words, block.where)


def test_reference_is_current():
    pages = gen_docs.generate()
    stale = [n for n, text in pages.items() if not (REFERENCE / n).is_file() or (REFERENCE / n).read_text() != text]
    assert not stale, f"docs/reference/{', '.join(stale)} out of date with the code; regenerate: {gen_docs.REGENERATE}"


def test_reference_covers_every_op_and_command():
    from opc.cli import build_parser
    from opc.dialects.opc import Opc

    ops = (REFERENCE / "ops.md").read_text()
    missing = [c.name for c in Opc.operations if f"\n### {c.name}\n" not in ops]
    assert not missing, f"ops missing from docs/reference/ops.md: {missing}"
    cli = (REFERENCE / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    assert all(f"\n## opc {name}\n" in cli for name in sub.choices)
    for name, p in sub.choices.items():
        for a in p._actions:
            for flag in (f for f in a.option_strings if f not in ("-h", "--help")):
                assert f"`{flag}`" in cli, f"opc {name} {flag} missing from docs/reference/cli.md"


def test_ci_runs_the_readme_commands():
    """.ci/run calls the README's own install and test commands, then builds the docs strictly."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in ('python3 -m pip install ".[test]"', "python3 -m pytest -q -n auto --dist loadfile"):
        assert f"```sh\n{command}\n```" in readme, f"the README lost its command {command}"
        assert f"\n{command}\n" in ci, f".ci/run does not run the README's {command}"
    assert "mkdocs build --strict" in ci and "mkdocs build --strict" in readme
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(e.startswith("mkdocs>=") for e in extras) and any(e.startswith("mkdocs-material>=") for e in extras)


def test_plotted_figures_come_from_committed_results():
    """Every results JSON holds exactly the figures its committed source file prints (nothing made
    up), and every plot in docs/img is shown by a page."""
    sys.path.insert(0, str(ROOT / "bench"))
    import json

    import plot_results

    found = sorted((ROOT / "bench" / "results").glob("*.json"))
    jsons = [p for p in found if "traceEvents" not in p.read_text()]
    assert jsons, "no results JSON: the performance page's plots have no source"
    for path in jsons:
        data = json.loads(path.read_text())
        sources = [ROOT / name for name in data["source"].split(", ")]  # extract merges several files' runs
        for source in sources:
            assert source.is_file(), f"{path.name}: its source {source.relative_to(ROOT)} is not committed"
        runs = [run for source in sources for run in plot_results.extract(source.read_text())]
        assert data["runs"] == (plot_results.merged(runs) if len(sources) > 1 else runs), (
            f"{path.name} differs from what {data['source']} holds; python3 bench/plot_results.py extract ...")
    shown = "".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    for svg in (ROOT / "docs" / "img").glob("*.svg"):
        assert f"img/{svg.name}" in shown, f"docs/img/{svg.name} is on no page"
