"""A mutation fuzzer of the CLI: seeded mutants of examples/**/*.mlir and the FileCheck
inputs (tokens deleted, duplicated, swapped, spliced in from another file, numbers made
huge, deep nesting, stray bytes, truncation, a dim made `?` in one shape or in every like
shape) go through `opc opt`, `opc compile --emit c` and `opc explain`. Each run must end with exit code 0, or 1 and one located error line;
never "internal compiler error", a traceback, another exit code or a hang.

Mutants run in-process through the CLI's main() (no compiler: --emit stops before gcc);
a few run as real subprocesses that build with gcc. A long run:

    python -m pytest -q tests/api/test_fuzz_cli.py --fuzz-count 5000 --fuzz-seed 1
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opc.cli import main

ROOT = Path(__file__).resolve().parents[2]
# tests/fuzz_corpus: inputs that once broke the CLI (test_names.py writes its name grid there)
CORPUS = sorted([*ROOT.glob("examples/**/*.mlir"), *ROOT.glob("tests/filecheck/**/*.mlir"),
                 *ROOT.glob("tests/shapes/**/*.mlir"), *ROOT.glob("tests/fuzz_corpus/**/*.mlir")])
TEXTS = [p.read_text(encoding="utf-8") for p in CORPUS]

TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%@^#!]?[\w.$-]+|->|\s+|.', re.DOTALL)
NUMBERS = ["?", "0", "-1", "1", "3", "65504", "70000.0", "2147483648", "4294967296", "4611686018427387904",
           "9223372036854775807", "9223372036854775808", "18446744073709551616", "1e400", "-1e400", "nan",
           "0x7FC00000", "1.0e-50", "340282366920938463463374607431768211456"]  # "?": a dim made run-time
STRAY = ["\ufeff", "\x00", "é", "\u202e", "}", "{", "(", ")", "<", ">", ",", ":", "=", "%", "@", "^", "#", "!", '"',
         "//", "\\", "\t", "\n"]
NESTING = [("(", ")"), ("[", "]"), ("{a = ", "}"), ("tensor<", ">"), ("array<i64: ", ">"), ("<", ">")]
DTYPES = ["i1", "i8", "ui8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "index", "i0", "si32", "f8E4M3FN"]
DTYPE = r"\b(?:u?i\d+|bf16|f16|f32|f64)\b"
# A located error, or one line for input that is not IR; what the message says is free.
ONE_ERROR = re.compile(r"^(\S[^\n]*:\d+:\d+: error: [^\n]+|error: [^\n]+)\n$")
# ... in plain text: not a Python tuple or list of strings (an exception's args printed whole, a list), not
# an unfilled f-string field, no raw control character (a NUL is written '\x00')
NOT_PLAIN = re.compile(r"error: [(\[]['\"]|\['|\{[a-z_]+\}|[\x00-\x08\x0b-\x1f\x7f]")
MUTANT_TIMEOUT_S = 30


def mutate(rng: random.Random, text: str) -> str:
    tokens = TOKEN.findall(text)
    words = [i for i, t in enumerate(tokens) if not t.isspace()] or [0]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not tokens:
            tokens = [""]
        i = min(rng.choice(words), len(tokens) - 1)
        kind = rng.randrange(13)
        if kind == 0:  # delete a token
            del tokens[i]
        elif kind == 1:  # duplicate one
            tokens.insert(i, tokens[i])
        elif kind == 2:  # swap two
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == 3:  # splice a token run from another file
            other = TOKEN.findall(rng.choice(TEXTS))
            k = rng.randrange(len(other))
            tokens[i:i + rng.randrange(4)] = other[k:k + rng.randrange(1, 12)]
        elif kind == 4:  # a number made extreme
            numbers = [j for j, t in enumerate(tokens) if re.fullmatch(r"-?\d[\w.]*", t)]
            tokens[rng.choice(numbers) if numbers else i] = rng.choice(NUMBERS)
        elif kind == 5:  # deep nesting
            opening, closing = rng.choice(NESTING)
            n = rng.choice([3, 40, 70, 500, 3000])
            tokens.insert(i, opening * n + rng.choice(["f32", "1", "", "i64"]) + closing * rng.choice([n, n - 1, 0]))
        elif kind == 6:  # a stray byte
            tokens.insert(i if rng.random() < 0.8 else 0, rng.choice(STRAY))
        elif kind == 7:  # truncated
            tokens = tokens[:i]
        elif kind == 8:  # a line of another file
            lines = rng.choice(TEXTS).splitlines(keepends=True)
            tokens.insert(i, rng.choice(lines) if lines else "\n")
        elif kind == 9:  # a dim of a shape changed (still well-formed)
            shapes = [j for j, t in enumerate(tokens) if re.fullmatch(r"(\d+x)+[a-z]\w*", t)] or [i]
            j = rng.choice(shapes)
            dims = tokens[j].split("x")
            if len(dims) > 1:
                dims[rng.randrange(len(dims) - 1)] = rng.choice(["0", "1", "2", "5", "65536", "?", *NUMBERS[5:10]])
                tokens[j] = "x".join(dims)
        elif kind == 12:  # a dim made run-time in every like shape (still well-typed where the ops take `?`)
            shapes = [t for t in tokens if re.fullmatch(r"(\d+x)+[a-z]\w*", t)]
            if shapes:
                old = rng.choice(shapes)
                dims = old.split("x")
                dims[rng.randrange(len(dims) - 1)] = "?"
                tokens = ["x".join(dims) if t == old else t for t in tokens]
        else:  # an element type swapped (still well-formed)
            typed = [j for j, t in enumerate(tokens) if re.search(DTYPE, t)] or [i]
            j = rng.choice(typed)
            tokens[j] = re.sub(DTYPE, rng.choice(DTYPES), tokens[j], count=1)
        words = [j for j, t in enumerate(tokens) if not t.isspace()] or [0]
    return "".join(tokens)


COMMANDS = [["opt"], ["compile", "--emit", "c"], ["compile", "--emit", "c", "--grad"], ["explain"],
            ["compile", "--emit", "mlir", "--decompose", "all"], ["opt", "-p", "opc-grad,opc-lower-to-loops,cse"]]


def mutant(seed: int, index: int) -> tuple[str, list[str]]:
    """The mutant and the command of one (seed, index): reproducible alone."""
    rng = random.Random(f"{seed}:{index}")
    k = rng.randrange(len(TEXTS))
    return mutate(rng, TEXTS[k]), rng.choice(COMMANDS)


class Hang(BaseException):
    """Past MUTANT_TIMEOUT_S: not an Exception, so the CLI's catch-all cannot swallow it."""


def run_in_process(path: Path, command: list[str]) -> tuple[int, str]:
    def hang(signum, frame):  # noqa: ANN001
        raise Hang()

    err = io.StringIO()
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(MUTANT_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main([command[0], str(path), *command[1:]])
    except Hang:
        pytest.fail(f"opc {' '.join(command)} ran past {MUTANT_TIMEOUT_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return rc, err.getvalue()


def check_outcome(rc: int, err: str, path: Path, command: list[str]) -> None:
    assert "internal compiler error" not in err and "Traceback" not in err, f"{command} on {path}:\n{err}"
    assert rc in (0, 1), f"{command} on {path}: exit {rc}\n{err}"
    if rc == 1:
        assert ONE_ERROR.match(err), f"{command} on {path}: not one error line:\n{err!r}"
        assert not NOT_PLAIN.search(err), f"{command} on {path}: not plain text:\n{err!r}"


def pytest_generate_tests(metafunc):  # noqa: ANN001, ANN201
    if "mutant_index" in metafunc.fixturenames:
        metafunc.parametrize("mutant_index", range(metafunc.config.getoption("fuzz_count") or 300))


def test_cli_mutant(tmp_path, request, mutant_index):
    seed = request.config.getoption("fuzz_seed")
    text, command = mutant(seed, mutant_index)
    path = tmp_path / "mutant.mlir"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    rc, err = run_in_process(path, command)
    check_outcome(rc, err, path, command)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_corpus_file(path):
    """Each corpus file as it is, through every command: exit 0, or one plain located error line."""
    for command in COMMANDS:
        rc, err = run_in_process(path, command)
        check_outcome(rc, err, path, command)


def test_the_mutants_hold_run_time_dims_and_regions():
    """The new syntax reaches the CLI: of the CI mutants (seed 0), many hold a `?` dim (the corpus's
    run-time shapes, or a dim the mutation made `?`), many an scf region (if, for, while,
    index_switch), and some both (tests/fuzz_corpus/run_time_loops.mlir: loops over `?` dims)."""
    texts = [mutant(0, i)[0] for i in range(300)]
    dynamic = [t for t in texts if re.search(r"[<x]\?x", t)]
    regions = [t for t in texts if re.search(r"\bscf\.(if|for|while|index_switch)\b", t)]
    both = [t for t in dynamic if t in regions]
    assert len(dynamic) >= 45 and len(regions) >= 30 and len(both) >= 5, (len(dynamic), len(regions), len(both))


SUBPROCESS_MUTANTS = 4


@pytest.mark.parametrize("index", range(SUBPROCESS_MUTANTS))
def test_cli_mutant_in_a_real_process(tmp_path, request, index):
    """The whole way, gcc included, with the CLI's own stdout, stderr and exit code."""
    text, _ = mutant(request.config.getoption("fuzz_seed") + 1_000_003, index)
    path = tmp_path / "mutant.mlir"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "opc", "compile", str(path), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    check_outcome(proc.returncode, proc.stderr, path, ["compile", "-o"])
