"""Fuzzed programs (tests/support/fuzz_programs.py) inside control flow: each random program runs in
both branches of an scf.if, in every case and the default of an scf.index_switch, and as the body
of an scf.for and of an scf.while (counting to a run-time bound) whose initial value is the program
run once; the results must be the program's own (NumPy's), whatever the condition, case and trip
count."""

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
    """The program's lines renamed with `prefix`, then the terminator yielding its results."""
    body = renamed(prog.lines, prefix)
    outs = ", ".join(body_results(prog, prefix))
    return ["  " + line for line in body] + [f"    {terminator} {outs} : {', '.join(r.type for r in prog.results)}"]


def body_results(prog: Program, prefix: str) -> list[str]:
    """The program's results as a renamed copy names them (an argument returned as is keeps its name)."""
    names = set(defined(prog.lines))
    return [f"%{prefix}{r.name}" if r.name in names else f"%{r.name}" for r in prog.results]


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


def in_switch(prog: Program) -> str:
    """@NAME_switch(%k, args...): the program in cases 0 and 2 and in the default of an index_switch."""
    params = ", ".join(["%k: tensor<i64>", *(f"%{a.name}: {a.type}" for a in prog.args)])
    types = ", ".join(r.type for r in prog.results)
    lines = [f"func.func @{prog.name}_switch({params}) -> ({types}) {{",
             "  %k_i = tensor.extract %k[] : tensor<i64>", "  %k_x = arith.index_cast %k_i : i64 to index",
             f"  %res:{len(prog.results)} = scf.index_switch %k_x -> {types}",
             "  case 0 {", *region(prog, "c0_"), "  }", "  case 2 {", *region(prog, "c2_"), "  }",
             "  default {", *region(prog, "d_"), "  }",
             f"  func.return {', '.join(f'%res#{i}' for i in range(len(prog.results)))} : {types}", "}"]
    return "\n".join(lines) + "\n"


def in_while(prog: Program) -> str:
    """@NAME_while(%n, args...): the program run once, then as the body of a while loop that counts
    an i64 tensor up to n (its condition read from a carried value, as a converged-test loop's)."""
    params = ", ".join(["%n: tensor<i64>", *(f"%{a.name}: {a.type}" for a in prog.args)])
    types = [r.type for r in prog.results]
    n_res = len(prog.results)
    inits = ", ".join([*(f"%acc{i} = %{r.name}" for i, r in enumerate(prog.results)), "%cnt = %zero"])
    after = [f"%w_a{i}: {t}" for i, t in enumerate(types)]
    all_types = ", ".join([*types, "tensor<i64>"])
    lines = [f"func.func @{prog.name}_while({params}) -> ({', '.join(types)}) {{", *prog.lines,
             "  %zero = arith.constant dense<0> : tensor<i64>", "  %one = arith.constant dense<1> : tensor<i64>",
             f"  %res:{n_res + 1} = scf.while ({inits}) : ({all_types}) -> ({all_types}) {{",
             "    %go_t = opc.less_than %cnt, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>",
             "    %go = tensor.extract %go_t[] : tensor<i1>",
             f"    scf.condition(%go) {', '.join([*(f'%acc{i}' for i in range(n_res)), '%cnt'])} : {all_types}",
             "  } do {", f"  ^bb1({', '.join([*after, '%w_ac: tensor<i64>'])}):",
             *region(prog, "w_")[:-1],
             "    %w_next = opc.add %w_ac, %one : (tensor<i64>, tensor<i64>) -> tensor<i64>",
             f"    scf.yield {', '.join([*body_results(prog, 'w_'), '%w_next'])} : {all_types}", "  }",
             f"  func.return {', '.join(f'%res#{i}' for i in range(n_res))} : {', '.join(types)}", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def fuzzed(request):
    seed = request.config.getoption("--fuzz-seed")
    progs = [generate(seed, 900 + i) for i in range(COUNT)]
    module = opc.compile("".join(in_if(p) + in_for(p) + in_switch(p) + in_while(p) for p in progs))
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


@pytest.mark.parametrize("k", [0, 2, 5])
def test_fuzzed_programs_in_every_case(fuzzed, k):
    progs, module = fuzzed
    bad = [m for p in progs for m in check_forward(Renamed(module, "_switch", [np.array(k)]), p)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_fuzzed_programs_as_while_bodies(fuzzed, n):
    progs, module = fuzzed
    bad = [m for p in progs for m in check_forward(Renamed(module, "_while", [np.array(n)]), p)]
    assert not bad, "\n".join(bad)
