"""Fuzzed programs (tests/support/fuzz_programs.py) inside control flow: each random program runs in
both branches of an scf.if and as the body of an scf.for whose initial value is the program run
once; the results must be the program's own (NumPy's), whatever the condition and trip count."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fuzz_programs import Program, check_forward, generate

import opc

COUNT = 12


def defined(lines: list[str]) -> list[str]:
    """The names the lines define (`%v =`, `%v:2 =`, `%v, %w =`)."""
    heads = [m[1] for line in lines if (m := re.match(r"\s*(%[^=]+)=", line))]
    return [n for head in heads for n in re.findall(r"%(\w+)", head)]


def renamed(lines: list[str], prefix: str) -> list[str]:
    """The program's lines with the values they define renamed (a second copy in the same function)."""
    names = set(defined(lines))
    return [re.sub(r"%(\w+)", lambda m: f"%{prefix}{m[1]}" if m[1] in names else m[0], line) for line in lines]


def region(prog: Program, prefix: str, terminator: str = "scf.yield") -> list[str]:
    body = renamed(prog.lines, prefix)
    names = set(defined(prog.lines))
    outs = ", ".join(f"%{prefix}{r.name}" if r.name in names else f"%{r.name}" for r in prog.results)
    return ["  " + line for line in body] + [f"    {terminator} {outs} : {', '.join(r.type for r in prog.results)}"]


def in_if(prog: Program) -> str:
    """@NAME_if(%flag, args...): the program in both branches of an if."""
    params = ", ".join(["%flag: tensor<i1>", *(f"%{a.name}: {a.type}" for a in prog.args)])
    types = ", ".join(r.type for r in prog.results)
    lines = [f"func.func @{prog.name}_if({params}) -> ({types}) {{",
             "  %flag_p = tensor.extract %flag[] : tensor<i1>",
             f"  %res:{len(prog.results)} = scf.if %flag_p -> ({types}) {{", *region(prog, "t_"),
             "  } else {", *region(prog, "e_"), "  }",
             f"  func.return {', '.join(f'%res#{i}' for i in range(len(prog.results)))} : {types}", "}"]
    return "\n".join(lines) + "\n"


def in_for(prog: Program) -> str:
    """@NAME_for(%n, args...): the program run once, then n times as the body of a loop."""
    params = ", ".join(["%n: tensor<i64>", *(f"%{a.name}: {a.type}" for a in prog.args)])
    types = ", ".join(r.type for r in prog.results)
    first = [f"%{r.name}" for r in prog.results]
    carried = ", ".join(f"%acc{i} = {v}" for i, v in enumerate(first))
    lines = [f"func.func @{prog.name}_for({params}) -> ({types}) {{", *prog.lines,
             "  %c0 = arith.constant 0 : index", "  %c1 = arith.constant 1 : index",
             "  %n_i = tensor.extract %n[] : tensor<i64>", "  %n_x = arith.index_cast %n_i : i64 to index",
             f"  %res:{len(prog.results)} = scf.for %i = %c0 to %n_x step %c1 iter_args({carried}) -> ({types}) {{",
             *region(prog, "b_"), "  }",
             f"  func.return {', '.join(f'%res#{i}' for i in range(len(prog.results)))} : {types}", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def fuzzed(request):
    seed = request.config.getoption("--fuzz-seed")
    progs = [generate(seed, 900 + i) for i in range(COUNT)]
    module = opc.compile("".join(in_if(p) + in_for(p) for p in progs))
    return progs, module


class Renamed:
    """A module whose function NAME is the given function with fixed leading arguments."""

    def __init__(self, module, suffix: str, lead: list[np.ndarray]):
        self.module, self.suffix, self.lead = module, suffix, lead

    def __getattr__(self, name: str):
        f = getattr(self.module, name + self.suffix)
        return lambda *args: f(*self.lead, *args)


@pytest.mark.parametrize("flag", [True, False])
def test_fuzzed_programs_in_both_branches(fuzzed, flag):
    progs, module = fuzzed
    bad = [m for p in progs for m in check_forward(Renamed(module, "_if", [np.array(flag)]), p)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_fuzzed_programs_as_loop_bodies(fuzzed, n):
    progs, module = fuzzed
    bad = [m for p in progs for m in check_forward(Renamed(module, "_for", [np.array(n)]), p)]
    assert not bad, "\n".join(bad)
