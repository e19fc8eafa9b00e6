"""Differential fuzzing with run-time sizes: random programs over `tensor<?xKxf64>` values (the
rows a run-time size, the features static), compiled once and called at sizes 0, 1, 3 and 17
against a NumPy oracle, forward and gradient (central differences).

Each program is a chain of ops drawn from the families whose sizes follow their operands:
elementwise (unary, binary with a row of weights broadcast), reductions over the features or the
rows, matmul by a weight, softmax, layer norm, concat along the features or the rows, reshape
of the features, transpose there and back, and a concat along the rows sliced back
(tensor.extract_slice at a run-time offset and size). The oracle builds the program op by op, as
fuzz_programs.py does for static shapes.

    python tests/support/fuzz_dynamic.py --count 500 [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

SIZES = (0, 1, 3, 17)
T = "f64"
SCALAR = f"tensor<{T}>"


def ttype(k: tuple[int, ...], rows: bool = True) -> str:
    dims = (["?"] if rows else []) + [str(d) for d in k]
    return f"tensor<{'x'.join(dims)}x{T}>" if dims else f"tensor<{T}>"


@dataclass
class Val:
    name: str
    feats: tuple[int, ...]  # the static dims after the run-time rows
    fn: Callable[[dict[str, np.ndarray]], np.ndarray]  # the oracle, from the arguments

    @property
    def type(self) -> str:
        return ttype(self.feats)


@dataclass
class Program:
    name: str
    args: list[tuple[str, str, tuple[int, ...], bool]] = field(default_factory=list)  # name, type, dims, rows
    lines: list[str] = field(default_factory=list)
    result: Val | None = None

    def text(self) -> str:
        assert self.result is not None
        params = ", ".join(f"%{n}: {t}" for n, t, _, _ in self.args)
        r = self.result
        return (f"func.func @{self.name}({params}) -> {SCALAR} {{\n" + "\n".join(self.lines) +
                f"\n  func.return %{r.name} : {SCALAR}\n}}\n")

    def arrays(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {name: rng.uniform(-1.0, 1.0, ((n,) if rows else ()) + dims) for name, _, dims, rows in self.args}


class Generator:
    def __init__(self, seed: int, index: int) -> None:
        self.rng = np.random.default_rng([seed, index])
        self.p = Program(f"d{index}")
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def arg(self, dims: tuple[int, ...], rows: bool = True) -> str:
        name = f"a{len(self.p.args)}"
        self.p.args.append((name, ttype(dims, rows), dims, rows))
        return name

    def op(self, text: str, feats: tuple[int, ...], fn: Callable) -> Val:
        name = self.fresh()
        self.p.lines.append(f"  %{name} = {text.format(r=ttype(feats))}")
        return Val(name, feats, fn)

    def step(self, x: Val) -> Val:
        kind = self.rng.choice(["unary", "binary", "matmul", "softmax", "layer_norm", "concat", "reduce",
                                "reshape", "transpose", "slice"])
        k = x.feats
        f = x.fn
        if kind == "unary" or len(k) != 1:
            op = str(self.rng.choice(["tanh", "sin", "neg", "exp"]))
            np_op = {"tanh": np.tanh, "sin": np.sin, "neg": np.negative, "exp": lambda a: np.exp(np.tanh(a))}[op]
            if op == "exp":  # kept tame: exp of a tanh
                t = self.op(f"opc.tanh %{x.name} : ({x.type}) -> {{r}}", k, lambda a: np.tanh(f(a)))
                return self.op(f"opc.exp %{t.name} : ({t.type}) -> {{r}}", k, lambda a: np.exp(np.tanh(f(a))))
            return self.op(f"opc.{op} %{x.name} : ({x.type}) -> {{r}}", k, lambda a: np_op(f(a)))
        (n,) = k
        if kind == "binary":
            w = self.arg((n,), rows=False)
            op = str(self.rng.choice(["add", "mul", "sub"]))
            np_op = {"add": np.add, "mul": np.multiply, "sub": np.subtract}[op]
            return self.op(f"opc.{op} %{x.name}, %{w} : ({x.type}, {ttype((n,), False)}) -> {{r}}", k,
                           lambda a: np_op(f(a), a[w]))
        if kind == "matmul":
            m = int(self.rng.integers(1, 6))
            w = self.arg((n, m), rows=False)
            return self.op(f"opc.matmul %{x.name}, %{w} : ({x.type}, {ttype((n, m), False)}) -> {{r}}", (m,),
                           lambda a: f(a) @ a[w])
        if kind == "softmax":
            def softmax(a: dict) -> np.ndarray:
                v = f(a)
                e = np.exp(v - v.max(-1, keepdims=True)) if v.size else v
                return e / e.sum(-1, keepdims=True) if v.size else v
            return self.op(f"opc.softmax %{x.name} {{{{axis = -1 : i64}}}} : ({x.type}) -> {{r}}", k, softmax)
        if kind == "layer_norm" and n > 1:
            g, h = self.arg((n,), rows=False), self.arg((n,), rows=False)
            name = self.fresh()
            st = ttype((), True)
            self.p.lines.append(f"  %{name}, %{name}m, %{name}r = opc.layer_norm %{x.name}, %{g}, %{h} "
                                f"{{begin_norm_axis = 1 : i64, epsilon = 1.0e-05 : f64}} : ({x.type}, "
                                f"{ttype((n,), False)}, {ttype((n,), False)}) -> ({x.type}, {st}, {st})")

            def ln(a: dict) -> np.ndarray:
                v = f(a)
                mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
                return (v - mu) / np.sqrt(var + 1e-5) * a[g] + a[h]
            return Val(name, k, ln)
        if kind == "concat":
            m = int(self.rng.integers(1, 4))
            y = self.arg((m,))
            return self.op(f"opc.concat %{x.name}, %{y} {{{{axis = 1 : i64}}}} : ({x.type}, {ttype((m,))}) -> {{r}}",
                           (n + m,), lambda a: np.concatenate([f(a), a[y]], 1))
        if kind == "reduce":
            return self.op(f"opc.reduce_sum %{x.name} {{{{axes = array<i64: 1>, keepdim = true}}}} : ({x.type}) -> {{r}}",
                           (1,), lambda a: f(a).sum(1, keepdims=True))
        if kind == "reshape" and n % 2 == 0:
            r = self.op(f"opc.reshape %{x.name} : ({x.type}) -> {{r}}", (n // 2, 2),
                        lambda a: f(a).reshape(-1, n // 2, 2))
            t = self.op(f"opc.transpose %{r.name} {{{{perm = array<i64: 0, 2, 1>}}}} : ({r.type}) -> {{r}}",
                        (2, n // 2), lambda a: f(a).reshape(-1, n // 2, 2).transpose(0, 2, 1))
            return self.op(f"opc.reshape %{t.name} : ({t.type}) -> {{r}}", (n,),
                           lambda a: f(a).reshape(-1, n // 2, 2).transpose(0, 2, 1).reshape(-1, n))
        if kind == "slice" and n > 1:  # [x; tanh x] along the rows, then rows [r, 2r) and features [1, n)
            c0, rows, t, cat = self.fresh(), self.fresh(), self.fresh(), self.fresh()
            self.p.lines += [f"  %{c0} = arith.constant 0 : index",
                             f"  %{rows} = tensor.dim %{x.name}, %{c0} : {x.type}",
                             f"  %{t} = opc.tanh %{x.name} : ({x.type}) -> {x.type}",
                             f"  %{cat} = opc.concat %{x.name}, %{t} {{axis = 0 : i64}} : ({x.type}, {x.type}) -> {x.type}"]
            return self.op(f"tensor.extract_slice %{cat}[%{rows}, 1] [%{rows}, {n - 1}] [1, 1] : {x.type} to {{r}}",
                           (n - 1,), lambda a: np.tanh(f(a))[:, 1:])
        if kind == "transpose":  # there and back: [?, n] -> [n, ?] -> [?, n]
            t, back, tt = self.fresh(), self.fresh(), f"tensor<{n}x?x{T}>"
            self.p.lines.append(f"  %{t} = opc.transpose %{x.name} {{perm = array<i64: 1, 0>}} : ({x.type}) -> {tt}")
            self.p.lines.append(f"  %{back} = opc.transpose %{t} {{perm = array<i64: 1, 0>}} : ({tt}) -> {x.type}")
            return Val(back, k, f)
        return self.op(f"opc.tanh %{x.name} : ({x.type}) -> {{r}}", k, lambda a: np.tanh(f(a)))

    def generate(self) -> Program:
        k = int(self.rng.integers(1, 7))
        x0 = self.arg((k,))
        x = Val(x0, (k,), lambda a: a[x0])
        for _ in range(int(self.rng.integers(1, 6))):
            x = self.step(x)
        axes = ", ".join(str(i) for i in range(1 + len(x.feats)))
        f = x.fn
        name = self.fresh()
        self.p.lines.append(f"  %{name} = opc.reduce_sum %{x.name} {{axes = array<i64: {axes}>}} : ({x.type}) -> "
                            f"{SCALAR}")
        self.p.result = Val(name, (), lambda a: np.asarray(f(a).sum()))
        return self.p


def generate(seed: int, index: int) -> Program:
    return Generator(seed, index).generate()


def check(module, prog: Program, seed: int, grad: bool) -> list[str]:  # noqa: ANN001
    """Forward at every size against the oracle; with grad, <grad, v> against central differences."""
    defects = []
    f = getattr(module, prog.name)
    assert prog.result is not None
    oracle = prog.result.fn
    for n in SIZES:
        rng = np.random.default_rng([seed, n])
        a = prog.arrays(n, rng)
        try:
            got = f(*a.values())
        except Exception as err:  # noqa: BLE001 - a valid program that fails is a defect
            defects.append(f"{prog.name} at n={n}: raised {type(err).__name__}: {err}")
            continue
        want = oracle(a)
        if not np.allclose(got, want, rtol=1e-9, atol=1e-9):
            defects.append(f"{prog.name} at n={n}: {float(got)!r}, expected {float(want)!r}")
        if not grad or n == 0:
            continue
        grads = getattr(module, f"{prog.name}_grad")(*a.values(), np.float64(1.0))
        grads = grads if isinstance(grads, tuple) else (grads,)
        d = {k: rng.standard_normal(v.shape) for k, v in a.items()}
        analytic = sum(float(np.sum(g * d[k])) for g, k in zip(grads, a))
        fd = (float(oracle({k: v + 1e-6 * d[k] for k, v in a.items()})) -
              float(oracle({k: v - 1e-6 * d[k] for k, v in a.items()}))) / 2e-6
        if abs(analytic - fd) > 1e-5 * (1 + abs(fd)):
            defects.append(f"{prog.name}_grad at n={n}: <grad, v> = {analytic!r}, differences {fd!r}")
    return defects


def run(seed: int, start: int, count: int, grad: bool = True) -> tuple[int, list[str]]:
    import opc

    progs = [generate(seed, i) for i in range(start, start + count)]
    module = opc.compile("".join(p.text() for p in progs), grad=grad)
    defects = [d for p in progs for d in check(module, p, seed, grad)]
    return len(progs), defects


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--batch", type=int, default=40)
    ap.add_argument("--show", type=int, default=None, help="print program INDEX")
    ns = ap.parse_args(argv)
    if ns.show is not None:
        print(generate(ns.seed, ns.show).text())
        return 0
    total, defects = 0, []
    for b in range(0, ns.count, ns.batch):
        n, d = run(ns.seed, b, min(ns.batch, ns.count - b))
        total, defects = total + n, defects + d
    print(f"{total} programs with run-time sizes at n = {SIZES}, forward and gradient: {len(defects)} defects")
    for d in defects:
        print("DEFECT", d)
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
