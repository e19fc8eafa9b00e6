"""Differential fuzzing: random well-typed opc programs against a NumPy oracle written from SPEC.md.

A seeded generator builds each program op by op, evaluating the oracle as it goes, so every
value has its NumPy twin and every type in the MLIR text is the oracle's. Programs cover every
primitive, shape, reduction, matmul and nn op, every dtype, ranks 0 to 4. Many programs are
compiled into ONE module (one C build per batch), by default and with decompose="all".

Forward: each result against the oracle within a per-dtype tolerance (halves computed in f32
and rounded after each op, as SPEC.md says). Values are kept tame so the oracle is stable:
domain-limited ops (log, sqrt, rsqrt, pow, div) only see operands bounded away from 0, a result
that overflows or grows past LIMIT is not emitted, and discontinuous ops (compares, float-to-int
casts) only see values computed exactly on both sides (arguments, sign and shape ops), so a
rounding difference can never flip a branch.

Gradients (--grad, f64 programs): the directional derivative <grad, v> of L = sum <dout, f(x)>
against central finite differences at two step sizes (a point where they disagree is not smooth
there and is skipped, counted), and value_and_grad against f and f_grad.

    python tests/support/fuzz_programs.py --count 2000 [--seed 0] [--grad]    # a long run
    python tests/support/fuzz_programs.py --seed 0 --index 17 --show          # one program and its check
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # oracle.py
import nn_oracle as nn  # noqa: E402
from oracle import ALL_DTYPES, FLOATS, INTS, MLIR_TYPES, np_dtype, random_array, spec_cast, ttype  # noqa: E402

HALVES = ("float16", "bfloat16")
# |got - want| <= TOL * max(1, max |want|) per result (a few ulps through a few ops)
TOL = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 2e-4, "float64": 1e-9}
LIMIT = {"float16": 300.0, "bfloat16": 300.0, "float32": 1e4, "float64": 1e4}
BATCH = 40  # programs per compiled module

_erf = np.vectorize(math.erf, otypes=[np.float64])


def ctype(dtype: str) -> np.dtype:
    """The NumPy type an op computes in (SPEC.md: halves in f32)."""
    return np.dtype(np.float32) if dtype in HALVES else np_dtype(dtype)


def broadcasts_to(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def wide(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(ctype(dtype))


@dataclass
class Value:
    name: str
    arr: np.ndarray
    dtype: str
    exact: bool  # computed bit-exactly by both sides (so compares and int casts are safe on it)
    tol: float = 0.0  # the relative error it may carry: that of the coarsest float type it came through

    @property
    def type(self) -> str:
        return ttype(self.arr.shape, self.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.arr.shape)


@dataclass
class Program:
    name: str
    args: list[Value] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)
    ops: set[str] = field(default_factory=set)

    def text(self) -> str:
        params = ", ".join(f"%{a.name}: {a.type}" for a in self.args)
        outs = ", ".join(r.type for r in self.results)
        ret = f"  func.return {', '.join('%' + r.name for r in self.results)} : {outs}"
        return "\n".join([f"func.func @{self.name}({params}) -> ({outs}) {{", *self.lines, ret, "}"]) + "\n"


class Reject(Exception):
    """This op does not fit here (its result overflows, an operand is out of domain): try another."""


class Generator:
    def __init__(self, seed: int, index: int, grad: bool):
        self.rng = np.random.default_rng([seed, index, int(grad)])
        self.grad = grad
        self.p = Program(f"p{index}")
        self.values: list[Value] = []
        self.counter = 0
        self.used: set[str] = set()
        # results of a multi-result op that later ops are to read, every one of them (issue 38: an
        # epilogue nest reading fused_gemm_epilogue_grad's dx and dy crashed the scheduler)
        self.pending: dict[str, list[Value]] = {}  # name -> its op's results
        self.cast_from: dict[str, str] = {}  # a cast's result -> its operand's dtype

    # -- values ---------------------------------------------------------------
    def float_dtype(self) -> str:
        return "float64" if self.grad else str(self.rng.choice(FLOATS))

    def any_dtype(self) -> str:
        if self.rng.random() < (0.8 if self.grad else 0.6):
            return self.float_dtype()
        return str(self.rng.choice(["bool", *INTS] if self.grad else ALL_DTYPES))  # --grad: f64 the only float

    def numeric_dtype(self) -> str:
        return self.float_dtype() if self.rng.random() < (0.8 if self.grad else 0.6) else str(self.rng.choice(INTS))

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = int(self.rng.integers(0, 5)) if rank is None else rank
        return tuple(int(d) for d in self.rng.integers(1, 6 if rank < 3 else 4, size=rank))

    def arg(self, shape, dtype: str, low: float = -2.0, high: float = 2.0) -> Value:
        arr = random_array(shape, dtype, self.rng, low, high)
        if dtype in INTS and self.rng.random() < 0.3:  # the whole range, for wrapping
            info = np.iinfo(np_dtype(dtype))
            arr = self.rng.integers(info.min, info.max, size=shape, endpoint=True).astype(np_dtype(dtype))
        v = Value(f"a{len(self.p.args)}", np.asarray(arr), dtype, True)
        self.p.args.append(v)
        self.values.append(v)
        return v

    def pick(self, want=lambda v: True, fresh=None) -> Value:
        """An existing value that fits, most likely a recent one (or a multi-result op's result
        nothing reads yet), else a fresh argument."""
        fits = [v for v in self.values if want(v)]
        waiting = [v for v in fits if v.name in self.pending]
        if waiting and self.rng.random() < 0.5:
            return waiting[int(self.rng.integers(0, len(waiting)))]
        if fits and self.rng.random() < 0.8:
            weights = np.arange(1, len(fits) + 1, dtype=float)
            return fits[int(self.rng.choice(len(fits), p=weights / weights.sum()))]
        if fresh is None:
            raise Reject
        return fresh()

    def pick_float(self, want=lambda v: True, min_rank: int = 0, low: float = -2.0) -> Value:
        """A float value that fits, else a fresh argument of rank >= min_rank with values >= low."""
        return self.pick(lambda v: v.dtype in FLOATS and v.arr.ndim >= min_rank and want(v),
                         lambda: self.arg(self.shape(int(self.rng.integers(min_rank, 5))), self.float_dtype(), low,
                                          max(2.0, low + 2)))

    def emit(self, op: str, operands: list[Value], attrs: str, results: list[tuple[np.ndarray, str]],
             exact: bool = False) -> list[Value]:
        for arr, dt in results:
            if dt in FLOATS:
                a = arr.astype(np.float64)
                if not np.isfinite(a).all() or (a.size and np.abs(a).max() > LIMIT[dt]):
                    raise Reject
        outs = []
        carried = max([v.tol for v in operands], default=0.0)
        for arr, dt in results:
            self.counter += 1
            tol = 0.0 if exact else max(carried, TOL.get(dt, 0.0))  # exact: compared bit for bit
            outs.append(Value(f"v{self.counter}", np.asarray(arr).astype(np_dtype(dt)), dt, exact, tol))
        names = ", ".join("%" + o.name for o in outs)
        ins = ", ".join("%" + v.name for v in operands)
        in_types = ", ".join(v.type for v in operands)
        out_types = ", ".join(o.type for o in outs)
        if len(outs) > 1:
            out_types = f"({out_types})"
        attr = f" {{{attrs}}}" if attrs else ""
        self.p.lines.append(f"  {names} = opc.{op} {ins}{attr} : ({in_types}) -> {out_types}")
        self.p.ops.add(op)
        self.used.update(v.name for v in operands)
        for v in operands:
            self.pending.pop(v.name, None)
        if len(outs) > 1 and self.rng.random() < 0.7:
            self.pending.update((o.name, outs) for o in outs)
        self.values.extend(outs)
        return outs

    def use_pending(self) -> None:
        """Every result of a multi-result op that nothing reads yet read by an op: the sum,
        difference or product with a sibling result of its shape (then one nest reads two results
        of the op), else its negation."""
        while self.pending:
            name, outs = next(iter(self.pending.items()))
            v = next(o for o in outs if o.name == name)
            sibling = [o for o in outs if o is not v and o.shape == v.shape and o.dtype == v.dtype]
            partner = sibling[0] if sibling else v
            x, y = wide(v.arr, v.dtype), wide(partner.arr, partner.dtype)
            emitted = False
            for op in self.rng.permutation(["add", "sub", "mul"]):
                try:
                    r = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[str(op)](x, y)
                    self.emit(str(op), [v, partner], "", [(r, v.dtype)])
                    emitted = True
                    break
                except Reject:
                    continue
            if not emitted:
                self.emit("neg", [v], "", [(-x, v.dtype)])

    # -- ops ------------------------------------------------------------------
    def broadcast_partner(self, v: Value, dtype: str) -> Value:
        """A second operand of dtype whose shape broadcasts with v's."""
        shape = list(v.shape)
        if shape and self.rng.random() < 0.5:
            shape = shape[int(self.rng.integers(0, len(shape) + 1)):]  # a suffix
        shape = [1 if self.rng.random() < 0.25 else d for d in shape]
        return self.pick(lambda w: w.dtype == dtype and w is not v and broadcasts_to(w.shape, v.shape) == v.shape,
                         lambda: self.arg(tuple(shape), dtype))

    def binary(self) -> None:
        op = str(self.rng.choice(["add", "sub", "mul", "div", "maximum", "minimum", "pow"]))
        if op in ("div", "pow"):
            a = self.pick_float()
            if op == "pow":
                a = self.pick_float(lambda v: v.exact and v.arr.astype(float).min() >= 0.1, low=0.1)
            b = self.broadcast_partner(a, a.dtype)
            if op == "div" and (not b.exact or np.abs(b.arr.astype(float)).min() < 0.1):
                raise Reject
            if op == "pow" and np.abs(b.arr.astype(float)).max() > 3:
                raise Reject
        else:
            a = self.pick(lambda v: v.dtype != "bool", lambda: self.arg(self.shape(), self.numeric_dtype()))
            b = self.broadcast_partner(a, a.dtype)
        if self.rng.random() < 0.5:
            a, b = b, a
        x, y = wide(a.arr, a.dtype), wide(b.arr, b.dtype)
        with np.errstate(all="ignore"):
            r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
                 "minimum": np.minimum, "pow": np.power}[op](x, y)
        ints = a.dtype not in FLOATS
        self.emit(op, [a, b], "", [(r, a.dtype)], exact=(ints or op in ("maximum", "minimum")) and a.exact and b.exact)

    def compare(self) -> None:
        op = str(self.rng.choice(["greater_than", "less_than", "equal"]))
        a = self.pick(lambda v: v.dtype != "bool" and v.exact, lambda: self.arg(self.shape(), self.numeric_dtype()))
        b = self.broadcast_partner(a, a.dtype)
        if not b.exact:
            raise Reject
        if op == "equal" and self.rng.random() < 0.5:
            b = a  # equal is true somewhere
        f = {"greater_than": np.greater, "less_than": np.less, "equal": np.equal}[op]
        self.emit(op, [a, b], "", [(f(a.arr.astype(np.float64), b.arr.astype(np.float64)), "bool")], exact=True)

    def select(self) -> None:
        c = self.pick(lambda v: v.dtype == "bool", lambda: self.arg(self.shape(), "bool"))
        a = self.pick(lambda v: broadcasts_to(v.shape, c.shape) in (v.shape, c.shape))
        b = self.broadcast_partner(a, a.dtype) if self.rng.random() < 0.7 else self.arg(a.shape, a.dtype)
        if broadcasts_to(c.shape, a.shape) is None or broadcasts_to(broadcasts_to(c.shape, a.shape), b.shape) is None:
            raise Reject
        self.emit("select", [c, a, b], "", [(np.where(c.arr, a.arr, b.arr), a.dtype)], exact=a.exact and b.exact)

    def unary(self) -> None:
        op = str(self.rng.choice(["neg", "abs", "relu", "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "sigmoid",
                                  "gelu_tanh", "gelu_erf"]))
        if op in ("neg", "abs", "relu"):
            a = self.pick(lambda v: v.dtype != "bool", lambda: self.arg(self.shape(), self.numeric_dtype()))
        elif op in ("log", "sqrt", "rsqrt"):
            a = self.pick_float(lambda v: v.arr.astype(float).min() >= 0.1, low=0.1)
            if a.arr.astype(float).min() < 0.1:
                raise Reject
        else:
            a = self.pick_float()
        x = wide(a.arr, a.dtype)
        with np.errstate(all="ignore"):
            r = {"neg": lambda: -x, "abs": lambda: np.abs(x), "relu": lambda: np.maximum(x, x.dtype.type(0)),
                 "exp": lambda: np.exp(x), "log": lambda: np.log(x), "tanh": lambda: np.tanh(x),
                 "erf": lambda: _erf(x), "sqrt": lambda: np.sqrt(x), "rsqrt": lambda: 1 / np.sqrt(x),
                 "sigmoid": lambda: 1 / (1 + np.exp(-x.astype(np.float64))),
                 "gelu_tanh": lambda: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(float)**3))),
                 "gelu_erf": lambda: 0.5 * x * (1 + _erf(x / np.sqrt(2)))}[op]()
        name, attrs = ("gelu", f"approximate = {str(op == 'gelu_tanh').lower()}") if op.startswith("gelu") else (op, "")
        self.emit(name, [a], attrs, [(r, a.dtype)], exact=op in ("neg", "abs", "relu") and a.exact)

    def cast(self) -> None:
        a = self.pick(lambda v: True, lambda: self.arg(self.shape(), self.any_dtype()))
        choices = [d for d in ALL_DTYPES if d != a.dtype]
        if self.grad:  # from f64 Paddle's cast passes cotangents, not derivatives: only casts from integers
            choices = [] if a.dtype in FLOATS else [d for d in choices if d not in FLOATS or d == "float64"]
        if a.dtype in FLOATS and not a.exact:
            choices = [d for d in choices if d in FLOATS]  # a rounding difference must not move an integer
        if not choices:
            raise Reject
        dst = str(self.rng.choice(choices))
        back = self.cast_from.get(a.name)
        if back in choices and self.rng.random() < 0.5:
            dst = back  # there and back: gcc 12.2 once dropped the rounding of (double)(float)x
        (out,) = self.emit("cast", [a], f"dtype = {MLIR_TYPES[dst]}", [(spec_cast(a.arr, dst), dst)],
                           exact=a.exact)  # one IEEE rounding or SPEC's int rule: the same bits on both sides
        self.cast_from[out.name] = a.dtype

    def bitcast(self) -> None:
        """The bits of an exactly known value as another type of its width (NumPy's view); forward
        only: a bit pattern has no derivative that finite differences could check."""
        if self.grad:
            raise Reject
        a = self.pick(lambda v: v.exact and v.dtype != "bool", lambda: self.arg(self.shape(), self.any_dtype()))
        width = np_dtype(a.dtype).itemsize
        choices = [d for d in ALL_DTYPES if d not in ("bool", a.dtype) and np_dtype(d).itemsize == width]
        if a.dtype == "bool" or not choices:
            raise Reject
        dst = str(self.rng.choice(choices))
        self.emit("bitcast", [a], f"dtype = {MLIR_TYPES[dst]}", [(a.arr.view(np_dtype(dst)), dst)], exact=True)

    def full(self) -> None:
        dt = self.any_dtype()
        value = float(self.rng.choice([0.0, 1.0, -1.5, 2.25, 3.0, -7.0]))
        shape = self.shape()
        self.counter += 1
        v = Value(f"v{self.counter}", spec_cast(np.full(shape, value), dt), dt, True, TOL.get(dt, 0.0))
        self.p.lines.append(f"  %{v.name} = opc.full {{value = {value!r} : f64}} : () -> {v.type}")
        self.p.ops.add("full")
        self.values.append(v)

    def broadcast_to(self) -> None:
        a = self.pick(lambda v: v.arr.ndim < 4)
        lead = self.shape(int(self.rng.integers(0, 5 - a.arr.ndim)))
        shape = tuple(lead) + tuple(int(self.rng.integers(2, 4)) if d == 1 and self.rng.random() < 0.5 else d
                                    for d in a.shape)
        self.emit("broadcast_to", [a], "", [(np.broadcast_to(a.arr, shape), a.dtype)], exact=a.exact)

    def reshape(self) -> None:
        a = self.pick()
        dims = [d for d in a.shape if d > 1]
        self.rng.shuffle(dims)
        dims = dims[:4]
        if int(np.prod(dims)) != a.arr.size:
            dims = [a.arr.size] if a.arr.size > 1 else []
        while len(dims) < 4 and self.rng.random() < 0.3:
            dims.insert(int(self.rng.integers(0, len(dims) + 1)), 1)
        self.emit("reshape", [a], "", [(a.arr.reshape(dims), a.dtype)], exact=a.exact)

    def transpose(self) -> None:
        a = self.pick(lambda v: v.arr.ndim >= 2)
        perm = [int(p) for p in self.rng.permutation(a.arr.ndim)]
        self.emit("transpose", [a], f"perm = array<i64: {', '.join(map(str, perm))}>",
                  [(np.transpose(a.arr, perm), a.dtype)], exact=a.exact)

    def reduce(self) -> None:
        op = str(self.rng.choice(["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]))
        a = (self.pick_float() if op == "reduce_mean"
             else self.pick(lambda v: v.dtype != "bool", lambda: self.arg(self.shape(), self.numeric_dtype())))
        rank = a.arr.ndim
        k = int(self.rng.integers(0, rank + 1))
        axes = sorted(int(i) for i in self.rng.choice(rank, size=k, replace=False)) if rank else []
        spelled = [ax - rank if self.rng.random() < 0.3 else ax for ax in axes]
        keepdim = bool(self.rng.random() < 0.4)
        x, ax = wide(a.arr, a.dtype), tuple(axes)
        with np.errstate(all="ignore"):
            if op == "reduce_sum":
                r = x.sum(axis=ax, keepdims=keepdim, dtype=x.dtype)
            elif op == "reduce_mean":
                r = x.mean(axis=ax, keepdims=keepdim)
            else:
                r = getattr(np, op[7:])(x, axis=ax, keepdims=keepdim)
        attrs = f"axes = array<i64{': ' if spelled else ''}{', '.join(map(str, spelled))}>, keepdim = {str(keepdim).lower()}"
        self.emit(op, [a], attrs, [(np.asarray(r), a.dtype)],
                  exact=a.exact and (op in ("reduce_max", "reduce_min") or a.dtype not in FLOATS or not axes))

    def matmul(self) -> None:
        dt = self.float_dtype()
        rank = int(self.rng.integers(2, 5))
        batch = self.shape(rank - 2)
        m, k, n = (int(d) for d in self.rng.integers(1, 7, size=3))
        tx, ty = bool(self.rng.random() < 0.5), bool(self.rng.random() < 0.5)
        ybatch = batch[int(self.rng.integers(0, len(batch) + 1)):] if self.rng.random() < 0.3 else batch
        x = self.arg((*batch, *((k, m) if tx else (m, k))), dt)
        y = self.arg((*ybatch, *((n, k) if ty else (k, n))), dt)
        xs = np.swapaxes(wide(x.arr, dt), -1, -2) if tx else wide(x.arr, dt)
        ys = np.swapaxes(wide(y.arr, dt), -1, -2) if ty else wide(y.arr, dt)
        self.emit("matmul", [x, y], f"trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}", [(xs @ ys, dt)])

    def slice(self) -> None:
        a = self.pick(lambda v: v.arr.ndim >= 1)
        start, limit, strides = [], [], []
        for d in a.shape:
            s = int(self.rng.integers(0, d))
            e = int(self.rng.integers(s + 1, d + 1))
            start.append(s), limit.append(e), strides.append(int(self.rng.integers(1, 3)))
        r = a.arr[tuple(slice(s, e, st) for s, e, st in zip(start, limit, strides))]
        attrs = ", ".join(f"{k} = array<i64: {', '.join(map(str, v))}>"
                          for k, v in (("start", start), ("limit", limit), ("strides", strides)))
        self.emit("slice", [a], attrs, [(r, a.dtype)], exact=a.exact)

    def concat(self) -> None:
        a = self.pick(lambda v: v.arr.ndim >= 1)
        axis = int(self.rng.integers(0, a.arr.ndim))
        parts = [a]
        for _ in range(int(self.rng.integers(1, 3))):
            shape = list(a.shape)
            shape[axis] = int(self.rng.integers(1, 4))
            parts.append(self.pick(lambda v: v.dtype == a.dtype and v.arr.ndim == a.arr.ndim and all(
                v.shape[i] == a.shape[i] for i in range(a.arr.ndim) if i != axis), lambda: self.arg(tuple(shape), a.dtype)))
        spelled = axis - a.arr.ndim if self.rng.random() < 0.3 else axis
        self.emit("concat", parts, f"axis = {spelled}", [(np.concatenate([p.arr for p in parts], axis), a.dtype)],
                  exact=all(p.exact for p in parts))

    def gather_operands(self) -> tuple[Value, int, tuple[int, ...], Value]:
        """A float tensor, an axis of it, and an index argument (i32 or i64, negative indices too)
        whose shape keeps the result within rank 4: the operands of gather and gather_grad."""
        a = self.pick_float(lambda v: v.arr.ndim <= 4, min_rank=1)  # a 3-d conv's rank 5 leaves no room
        axis = int(self.rng.integers(0, a.arr.ndim))
        n = a.shape[axis]
        ishape = self.shape(int(self.rng.integers(0, 5 - a.arr.ndim)))
        idx_dt = str(self.rng.choice(["int32", "int64"]))
        idx = Value(f"a{len(self.p.args)}", self.rng.integers(-n, n, size=ishape).astype(np_dtype(idx_dt)), idx_dt, True)
        self.p.args.append(idx)
        return a, axis, ishape, idx

    def gather(self) -> None:
        a, axis, _, idx = self.gather_operands()
        self.emit("gather", [a, idx], f"axis = {axis}", [(np.take(a.arr, idx.arr.astype(np.int64), axis), a.dtype)],
                  exact=a.exact)

    def fused_gemm_epilogue(self) -> None:
        dt = self.float_dtype()
        m, k, n = (int(d) for d in self.rng.integers(1, 7, size=3))
        tx, ty = bool(self.rng.random() < 0.5), bool(self.rng.random() < 0.5)
        act = str(self.rng.choice(["none", "relu", "gelu"]))
        same = self.rng.random() < 0.3  # x as y too (its gradient the sum of dx and dy)
        if same:
            k = n = m
        x = self.arg((k, m) if tx else (m, k), dt)
        y, b = (x if same else self.arg((n, k) if ty else (k, n), dt)), self.arg((n,), dt)
        xs, ys = wide(x.arr, dt), wide(y.arr, dt)
        z = (xs.T if tx else xs) @ (ys.T if ty else ys) + wide(b.arr, dt)
        zr = z.astype(np_dtype(dt)).astype(ctype(dt))  # the activation reads the stored Z
        out = {"none": z, "relu": np.maximum(zr, 0),
               "gelu": 0.5 * zr * (1 + np.tanh(np.sqrt(2 / np.pi) * (zr + 0.044715 * zr.astype(float)**3)))}[act]
        results = [(out, dt)] + ([(z, dt)] if act != "none" else [])
        attrs = f"activation = \"{act}\", trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}"
        self.emit("fused_gemm_epilogue", [x, y, b], attrs, results)

    def softmax(self) -> None:
        op = str(self.rng.choice(["softmax", "log_softmax"]))
        a = self.pick_float(min_rank=1)
        axis = int(self.rng.integers(-a.arr.ndim, a.arr.ndim))
        x = wide(a.arr, a.dtype)
        s = x - x.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(s).sum(axis=axis, keepdims=True))
        r = np.exp(s - lse) if op == "softmax" else s - lse
        self.emit(op, [a], f"axis = {axis}", [(r, a.dtype)])

    def layer_norm(self) -> None:
        a = self.pick_float(min_rank=1)
        begin = int(self.rng.integers(0, a.arr.ndim)) if self.rng.random() < 0.7 else -1
        b = begin % a.arr.ndim
        trailing = a.shape[b:]
        scale, bias = self.arg(trailing, a.dtype), self.arg(trailing, a.dtype)
        x = wide(a.arr, a.dtype)
        axes = tuple(range(b, a.arr.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        rstd = 1 / np.sqrt(var + 1e-5)
        y = (x - mean) * rstd * wide(scale.arr, a.dtype) + wide(bias.arr, a.dtype)
        stats = "float32" if a.dtype in HALVES else a.dtype
        lead = a.shape[:b]
        self.emit("layer_norm", [a, scale, bias], f"begin_norm_axis = {begin}, epsilon = 1.0e-05 : f64",
                  [(y, a.dtype), (mean.reshape(lead), stats), (rstd.reshape(lead), stats)])

    def softmax_cross_entropy(self) -> None:
        a = self.pick_float(min_rank=1)
        axis = int(self.rng.integers(-a.arr.ndim, a.arr.ndim))
        ax = axis % a.arr.ndim
        lshape = tuple(1 if i == ax else d for i, d in enumerate(a.shape))
        ldt = str(self.rng.choice(["int32", "int64"]))
        label = Value(f"a{len(self.p.args)}", self.rng.integers(0, a.shape[ax], size=lshape).astype(np_dtype(ldt)),
                      ldt, True)
        self.p.args.append(label)
        x = wide(a.arr, a.dtype)
        s = x - x.max(axis=ax, keepdims=True)
        logp = s - np.log(np.exp(s).sum(axis=ax, keepdims=True))
        loss = -np.take_along_axis(logp, label.arr.astype(np.int64), ax)
        self.emit("softmax_cross_entropy", [a, label], f"axis = {axis}", [(loss, a.dtype), (np.exp(logp), a.dtype)])

    # -- grad ops, called directly (in --grad programs they come from opc-grad) --
    def activation_grad(self) -> None:
        op = str(self.rng.choice(["relu_grad", "gelu_tanh", "gelu_erf"]))
        x = self.pick_float(lambda v: v.exact) if op == "relu_grad" else self.pick_float()
        if not x.exact and op == "relu_grad":
            raise Reject  # its step at 0 must not see a rounding difference
        d = self.pick(lambda v: v.type == x.type and v is not x, lambda: self.arg(x.shape, x.dtype))
        z, g = wide(x.arr, x.dtype).astype(np.float64), wide(d.arr, d.dtype)
        if op == "relu_grad":
            r, name, attrs = np.where(z > 0, g, 0), op, ""
        elif op == "gelu_tanh":
            c = np.sqrt(2 / np.pi)
            t = np.tanh(c * (z + 0.044715 * z**3))
            r, name, attrs = g * (0.5 * (1 + t) + 0.5 * z * (1 - t**2) * c * (1 + 3 * 0.044715 * z**2)), "gelu_grad", \
                "approximate = true"
        else:
            r, name, attrs = g * (0.5 * (1 + _erf(z / np.sqrt(2))) + z * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)), \
                "gelu_grad", "approximate = false"
        self.emit(name, [x, d], attrs, [(r, x.dtype)])

    def cast_grad(self) -> None:
        x = self.pick_float()
        d = self.pick(lambda v: v.shape == x.shape and v is not x, lambda: self.arg(x.shape, self.any_dtype()))
        if d.dtype in FLOATS and x.dtype not in FLOATS and not d.exact:
            raise Reject
        self.emit("cast_grad", [x, d], "", [(spec_cast(d.arr, x.dtype), x.dtype)], exact=d.exact)

    def softmax_grad(self) -> None:
        op = str(self.rng.choice(["softmax_grad", "log_softmax_grad"]))
        out = self.pick_float(min_rank=1)
        axis = int(self.rng.integers(-out.arr.ndim, out.arr.ndim))
        d = self.pick(lambda v: v.type == out.type and v is not out, lambda: self.arg(out.shape, out.dtype))
        y, g = wide(out.arr, out.dtype), wide(d.arr, d.dtype)
        if op == "softmax_grad":
            r = y * (g - (g * y).sum(axis=axis, keepdims=True))
        else:
            r = g - np.exp(y) * g.sum(axis=axis, keepdims=True)
        self.emit(op, [out, d], f"axis = {axis}", [(r, out.dtype)])

    def slice_grad(self) -> None:
        x = self.pick_float(min_rank=1)
        start, limit, strides = [], [], []
        for n in x.shape:
            a = int(self.rng.integers(0, n))
            start.append(a), limit.append(int(self.rng.integers(a + 1, n + 1))), strides.append(int(self.rng.integers(1, 3)))
        window = tuple(slice(a, b, st) for a, b, st in zip(start, limit, strides))
        d = self.arg(np.zeros(x.shape)[window].shape, x.dtype)
        r = np.zeros(x.shape, ctype(x.dtype))
        r[window] = d.arr
        attrs = ", ".join(f"{k} = array<i64: {', '.join(map(str, v))}>"
                          for k, v in (("start", start), ("limit", limit), ("strides", strides)))
        self.emit("slice_grad", [x, d], attrs, [(r, x.dtype)], exact=True)

    def gather_grad(self) -> None:
        x, axis, ishape, idx = self.gather_operands()
        n = x.shape[axis]
        d = self.arg(x.shape[:axis] + ishape + x.shape[axis + 1:], x.dtype)
        r = np.zeros(x.shape, np.float64)
        moved = np.moveaxis(r, axis, 0)  # a view: scatter-add along axis 0 of it
        np.add.at(moved, idx.arr.astype(np.int64).reshape(-1) % n,
                  np.moveaxis(d.arr.astype(np.float64).reshape(x.shape[:axis] + (-1,) + x.shape[axis + 1:]), axis, 0))
        self.emit("gather_grad", [x, idx, d], f"axis = {axis}", [(r, x.dtype)])

    # -- nn ops (their NumPy references in nn_oracle.py) ---------------------
    SPATIAL_MAX = {1: 7, 2: 5, 3: 3}  # the longest spatial dim drawn for 1-, 2- and 3-d inputs

    def nn_input(self, ranks: tuple[int, ...] = (3, 4, 5), want=lambda v: True) -> Value:
        """A small float [N, C, *spatial] value, else a fresh argument of that form."""
        def fresh() -> Value:
            rank = int(self.rng.choice(ranks))
            spatial = self.rng.integers(1, self.SPATIAL_MAX.get(rank - 2, 1) + 1, size=rank - 2)
            shape = (int(self.rng.integers(1, 3)), int(self.rng.integers(1, 5)), *(int(d) for d in spatial))
            return self.arg(shape, self.float_dtype())
        return self.pick(lambda v: v.dtype in FLOATS and v.arr.ndim in ranks and v.arr.size <= 400 and want(v), fresh)

    def window_attrs(self, r: int) -> tuple[list[int], list[int], list[int]]:
        """strides, dilations and pads (begins, then ends) for r spatial dims."""
        strides = [int(s) for s in self.rng.integers(1, 3, size=r)]
        dilations = [int(d) for d in self.rng.integers(1, 3, size=r)] if self.rng.random() < 0.4 else [1] * r
        pads = [int(p) for p in self.rng.integers(0, 3, size=2 * r)] if self.rng.random() < 0.6 else [0] * 2 * r
        return strides, dilations, pads

    def spell(self, **attrs) -> str:
        """The attribute dictionary's body; a list at its default is now and then left out."""
        out = []
        for k, v in attrs.items():
            default = {"strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}.get(k)
            if isinstance(v, list):
                if default is not None and all(e == default for e in v) and self.rng.random() < 0.5:
                    continue
                out.append(f"{k} = array<i64: {', '.join(map(str, v))}>")
            elif isinstance(v, bool):
                out.append(f"{k} = {str(v).lower()}")
            elif isinstance(v, float):
                out.append(f"{k} = {v:.17e} : f64")  # 17 digits: the double itself
            elif isinstance(v, str):
                out.append(f'{k} = "{v}"')
            else:
                out.append(f"{k} = {v}")
        return ", ".join(out)

    def conv_geometry(self, x: Value, o_per_group: int | None = None):
        """group, output channels, kernel, strides, dilations, pads of a conv over x (depthwise a
        third of the time); Reject when the kernel outgrows the padded input."""
        c, inp = x.shape[1], x.shape[2:]
        r = len(inp)
        divisors = [g for g in range(1, c + 1) if c % g == 0]
        group = c if self.rng.random() < 0.3 else int(self.rng.choice(divisors))
        o = group * (o_per_group or int(self.rng.integers(1, 3)))
        kernel = [int(k) for k in self.rng.integers(1, 4, size=r)]
        strides, dilations, pads = self.window_attrs(r)
        for d in range(r):
            if dilations[d] * (kernel[d] - 1) + 1 > inp[d] + pads[d] + pads[r + d]:
                raise Reject
        return group, o, kernel, strides, dilations, pads

    def conv(self) -> None:
        x = self.nn_input()
        group, o, kernel, strides, dilations, pads = self.conv_geometry(x)
        w = self.arg((o, x.shape[1] // group, *kernel), x.dtype)
        y = nn.conv(x.arr, w.arr, strides, dilations, pads, group)
        self.emit("conv", [x, w], self.spell(strides=strides, dilations=dilations, pads=pads, group=group),
                  [(y, x.dtype)])

    def fused_conv_epilogue(self) -> None:
        x = self.nn_input()
        group, o, kernel, strides, dilations, pads = self.conv_geometry(x)
        w, b = self.arg((o, x.shape[1] // group, *kernel), x.dtype), self.arg((o,), x.dtype)
        z = nn.conv(x.arr, w.arr, strides, dilations, pads, group) + nn.channel_view(b.arr, x.arr.ndim)
        act = str(self.rng.choice(["none", "relu", "gelu"]))
        zr = z.astype(np_dtype(x.dtype)).astype(np.float64)  # the activation reads the stored Z
        out = {"none": z, "relu": np.maximum(zr, 0),
               "gelu": 0.5 * zr * (1 + np.tanh(np.sqrt(2 / np.pi) * (zr + 0.044715 * zr**3)))}[act]
        attrs = self.spell(strides=strides, dilations=dilations, pads=pads, group=group, activation=act)
        self.emit("fused_conv_epilogue", [x, w, b], attrs, [(out, x.dtype)] + ([(z, x.dtype)] if act != "none" else []))

    def conv_transpose(self) -> None:
        x = self.nn_input()
        c, inp = x.shape[1], x.shape[2:]
        r = len(inp)
        group = int(self.rng.choice([g for g in range(1, c + 1) if c % g == 0]))
        og = int(self.rng.integers(1, 3))
        kernel = [int(k) for k in self.rng.integers(1, 4, size=r)]
        strides, dilations, pads = self.window_attrs(r)
        output_padding = [int(self.rng.integers(0, s)) for s in strides]
        w = self.arg((c, og, *kernel), x.dtype)
        y = nn.conv_transpose(x.arr, w.arr, strides, dilations, pads, output_padding, group)
        if 0 in y.shape:
            raise Reject  # the pads ate the output
        self.emit("conv_transpose", [x, w], self.spell(strides=strides, dilations=dilations, pads=pads,
                                                       output_padding=output_padding, group=group), [(y, x.dtype)])

    def conv_grads(self) -> None:
        """conv_grad_input (dout, w -> dx) or conv_grad_filter (x, dout -> dw) of a drawn conv geometry."""
        x = self.nn_input()
        group, o, kernel, strides, dilations, pads = self.conv_geometry(x)
        w_shape = (o, x.shape[1] // group, *kernel)
        out = nn.conv_out(x.shape[2:], kernel, strides, dilations, pads)
        dout = self.pick(lambda v: v.type == ttype((x.shape[0], o, *out), x.dtype),
                         lambda: self.arg((x.shape[0], o, *out), x.dtype))
        attrs = self.spell(strides=strides, dilations=dilations, pads=pads, group=group)
        if self.rng.random() < 0.5:
            w = self.arg(w_shape, x.dtype)
            dx = nn.conv_input_grad(dout.arr, w.arr, x.shape, strides, dilations, pads, group)
            self.emit("conv_grad_input", [dout, w], attrs, [(dx, x.dtype)])
        else:
            dw = nn.conv_filter_grad(x.arr, dout.arr, w_shape, strides, dilations, pads, group)
            self.emit("conv_grad_filter", [x, dout], attrs, [(dw, x.dtype)])

    def pool_geometry(self, x: Value):
        """kernel, strides, dilations, pads, ceil_mode of a pool over x; Reject a window of padding only."""
        inp = x.shape[2:]
        r = len(inp)
        kernel = [int(k) for k in self.rng.integers(1, 4, size=r)]
        strides, dilations, pads = self.window_attrs(r)
        strides = [int(s) for s in self.rng.integers(1, 4, size=r)]
        ceil = bool(self.rng.random() < 0.3)
        for d in range(r):
            if dilations[d] * (kernel[d] - 1) + 1 > inp[d] + pads[d] + pads[r + d]:
                raise Reject
        for _, taps, _ in nn.pool_windows(inp, kernel, strides, dilations, pads, ceil):
            if all(t is None for t in taps):
                raise Reject
        return kernel, strides, dilations, pads, ceil

    def max_pool(self) -> None:
        x = self.nn_input()
        geom = self.pool_geometry(x)
        y, idx, margin = nn.max_pool(x.arr, *geom)
        if not x.exact and margin <= 4 * x.tol * max(1.0, float(np.abs(x.arr.astype(float)).max())):
            raise Reject  # a rounding difference could pick another element of a window
        kernel, strides, dilations, pads, ceil = geom
        attrs = self.spell(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil)
        vy, vi = self.emit("max_pool", [x], attrs, [(y, x.dtype), (idx, "int64")], exact=x.exact)
        vy.tol, vi.tol = x.tol, 0.0
        vi.exact = True
        if self.rng.random() < 0.3:  # its backward fed by its own indices
            dout = self.arg(y.shape, x.dtype)
            self.emit("max_pool_grad", [x, vi, dout], attrs, [(nn.max_pool_grad(x.shape, idx, dout.arr), x.dtype)])

    def avg_pool(self) -> None:
        x = self.nn_input()
        geom = self.pool_geometry(x)
        include = bool(self.rng.random() < 0.5)
        kernel, strides, dilations, pads, ceil = geom
        attrs = self.spell(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil,
                           count_include_pad=include)
        if self.rng.random() < 0.25:
            out = nn.pool_out(x.shape[2:], *geom)
            dout = self.pick(lambda v: v.type == ttype((*x.shape[:2], *out), x.dtype),
                             lambda: self.arg((*x.shape[:2], *out), x.dtype))
            self.emit("avg_pool_grad", [x, dout], attrs, [(nn.avg_pool_grad(x.shape, dout.arr, *geom, include), x.dtype)])
        else:
            self.emit("avg_pool", [x], attrs, [(nn.avg_pool(x.arr, *geom, include), x.dtype)])

    def spread(self, x: Value, groups: int) -> None:
        """Reject an x whose normalized groups barely vary: 1 / sqrt(var + eps) would magnify the
        rounding of its operands past any tolerance (a group of one element is exact: x - mean = 0)."""
        g = x.arr.astype(np.float64).reshape(x.shape[0], groups, -1) if groups else \
            np.moveaxis(x.arr.astype(np.float64), 1, 0).reshape(x.shape[1], -1)
        if g.shape[-1] > 1 and g.var(axis=-1).min() < 0.05:
            raise Reject

    def batch_norm(self) -> None:
        x = self.nn_input((2, 3, 4))
        c, dt = x.shape[1], x.dtype
        stats = "float32" if dt in HALVES else dt
        scale, bias = self.arg((c,), dt), self.arg((c,), dt)
        mean, var = self.arg((c,), dt), self.arg((c,), dt, 0.2, 2.0)
        eps, momentum = float(self.rng.choice([1e-5, 1e-3])), float(self.rng.choice([0.9, 0.1, 0.5]))
        training = bool(self.rng.random() < 0.6)
        attrs = self.spell(epsilon=eps, momentum=momentum, training=training)
        if not training:
            y = nn.batch_norm_inference(x.arr, scale.arr, bias.arr, mean.arr, var.arr, eps)
            self.emit("batch_norm", [x, scale, bias, mean, var], attrs, [(y, dt)])
            return
        self.spread(x, 0)
        y, rm, rv, sm, sr = nn.batch_norm_training(x.arr, scale.arr, bias.arr, mean.arr, var.arr, eps, momentum)
        outs = self.emit("batch_norm", [x, scale, bias, mean, var], attrs,
                         [(y, dt), (rm, dt), (rv, dt), (sm, stats), (sr, stats)])
        if self.rng.random() < 0.3:  # the backward from its saved statistics
            dy = self.arg(x.shape, dt)
            dx, ds, db = nn.batch_norm_grad(x.arr, scale.arr, outs[3].arr, outs[4].arr, dy.arr)
            self.emit("batch_norm_grad", [x, scale, outs[3], outs[4], dy], "", [(dx, dt), (ds, dt), (db, dt)])

    def grouped_norm(self) -> None:
        x = self.nn_input((2, 3, 4))
        c, dt = x.shape[1], x.dtype
        instance = self.rng.random() < 0.4
        groups = c if instance else int(self.rng.choice([g for g in range(1, c + 1) if c % g == 0]))
        self.spread(x, groups)
        scale, bias = self.arg((c,), dt), self.arg((c,), dt)
        eps = float(self.rng.choice([1e-5, 1e-3]))
        y, m, r = nn.group_norm(x.arr, scale.arr, bias.arr, groups, eps)
        stats = "float32" if dt in HALVES else dt
        attrs = self.spell(epsilon=eps) if instance else self.spell(num_groups=groups, epsilon=eps)
        self.emit("instance_norm" if instance else "group_norm", [x, scale, bias], attrs,
                  [(y, dt), (m, stats), (r, stats)])

    def attention(self) -> None:
        dt = self.float_dtype()
        batch = self.shape(int(self.rng.integers(0, 3)))
        lq, lk, d, dv = (int(n) for n in self.rng.integers(1, 6, size=4))
        q = self.pick(lambda v: v.dtype == dt and v.arr.ndim == len(batch) + 2 and v.shape[:-2] == batch,
                      lambda: self.arg((*batch, lq, d), dt))
        lq, d = q.shape[-2:]
        self_attention = self.rng.random() < 0.2
        k = q if self_attention else self.arg((*batch, lk, d), dt)
        lk = k.shape[-2]
        v = q if self_attention else self.arg((*batch, lk, dv), dt)
        mask = None
        if self.rng.random() < 0.4:
            full = (*batch, lq, lk)
            mshape = tuple(1 if self.rng.random() < 0.3 else n for n in full[int(self.rng.integers(0, len(full) - 1)):])
            mask = self.arg(mshape, dt)
        scale = float(self.rng.choice([1.0, 0.5, 1 / math.sqrt(d)]))
        causal = bool(self.rng.random() < 0.4)
        out, lse = nn.attention(q.arr, k.arr, v.arr, None if mask is None else mask.arr, scale, causal)
        ops = [q, k, v] + ([mask] if mask is not None else [])
        attrs = self.spell(scale=scale, is_causal=causal)
        vo, vl = self.emit("attention", ops, attrs, [(out, dt), (lse, "float32" if dt in HALVES else dt)])
        if self.rng.random() < 0.25:  # its backward fed by its own out and lse
            dout = self.arg(out.shape, dt)
            grads = nn.attention_grad(q.arr, k.arr, v.arr, vo.arr, vl.arr, dout.arr,
                                      None if mask is None else mask.arr, scale, causal)
            self.emit("attention_grad", [q, k, v, vo, vl, dout] + ([mask] if mask is not None else []), attrs,
                      [(g, dt) for g in grads])

    OPS = {"binary": 6, "compare": 2, "select": 2, "unary": 6, "cast": 3, "bitcast": 1, "full": 1, "broadcast_to": 1,
           "reshape": 1, "transpose": 1, "reduce": 3, "matmul": 2, "slice": 1, "concat": 1, "gather": 1,
           "fused_gemm_epilogue": 1, "softmax": 1, "layer_norm": 1, "softmax_cross_entropy": 1,
           "activation_grad": 1, "cast_grad": 1, "softmax_grad": 1, "slice_grad": 1, "gather_grad": 1,
           "conv": 2, "fused_conv_epilogue": 1, "conv_transpose": 1, "conv_grads": 1, "max_pool": 2, "avg_pool": 2,
           "batch_norm": 1, "grouped_norm": 1, "attention": 2}

    def generate(self) -> Program:
        names = list(self.OPS)  # grad ops too: in --grad programs their own vjps (higher order) are checked
        weights = np.array([self.OPS[n] for n in names], float)
        self.arg(self.shape(), self.float_dtype() if self.grad else self.any_dtype())
        target = int(self.rng.integers(1, 7))
        made, tries = 0, 0
        while made < target and tries < 60:
            tries += 1
            before = (len(self.p.lines), len(self.p.args), len(self.values), self.counter)
            pending = dict(self.pending)
            try:
                getattr(self, str(self.rng.choice(names, p=weights / weights.sum())))()
                made += 1
            except Reject:  # undo what the failed attempt added
                del self.p.lines[before[0]:], self.p.args[before[1]:], self.values[before[2]:]
                self.counter = before[3]
                self.used &= {v.name for v in self.values}
                self.pending = pending
        self.use_pending()
        computed = [v for v in self.values if v.name.startswith("v")]
        if not computed:
            a = self.p.args[0]
            self.emit("neg", [a], "", [(-wide(a.arr, a.dtype), a.dtype)])
            computed = [self.values[-1]]
        results = [computed[-1]]  # and most values nothing reads, so little is dead code
        for v in computed[:-1]:
            if self.rng.random() < (0.7 if v.name not in self.used else 0.1):
                results.append(v)
        self.p.results = results
        return self.p


def generate(seed: int, index: int, grad: bool = False) -> Program:
    return Generator(seed, index, grad).generate()


# ---------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------


def compare(got: np.ndarray, want: Value, what: str) -> str | None:
    if got.dtype != np_dtype(want.dtype) or got.shape != want.shape:
        return f"{what}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype not in FLOATS:
        if not np.array_equal(got, want.arr):
            bad = np.argwhere(got != want.arr)[:3].tolist()
            return f"{what}: differs at {bad}: got {got[tuple(np.array(bad).T)]}, expected {want.arr[tuple(np.array(bad).T)]}"
        return None
    g, w = np.atleast_1d(got.astype(np.float64)), np.atleast_1d(want.arr.astype(np.float64))
    tol = want.tol * max(1.0, float(np.abs(w).max()) if w.size else 1.0)
    err = np.abs(g - w)
    err[np.isnan(g) & np.isnan(w)] = 0
    if w.size and not (err <= tol).all():
        i = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), w.shape)
        return f"{what}: max error {float(err[i]):.3g} > {tol:.3g} at {list(i)}: got {g[i]!r}, expected {w[i]!r}"
    return None


def check_forward(module, prog: Program) -> list[str]:
    try:
        got = getattr(module, prog.name)(*[a.arr for a in prog.args])
    except Exception as err:  # noqa: BLE001 - any failure of a valid program is a defect to report
        return [f"{prog.name}: raised {type(err).__name__}: {err}"]
    got = got if isinstance(got, tuple) else (got,)
    return [m for i, (g, r) in enumerate(zip(got, prog.results)) if (m := compare(g, r, f"{prog.name} result {i}"))]


def float_args(prog: Program) -> list[int]:
    return [i for i, a in enumerate(prog.args) if a.dtype in FLOATS]


def check_grad(module, prog: Program, seed: int) -> tuple[list[str], bool]:
    """(defects, smooth): <grad, v> against central differences of L(x) = sum <dout, f(x)>."""
    rng = np.random.default_rng([seed, 7])
    f = getattr(module, prog.name)
    args = [a.arr for a in prog.args]
    douts = [rng.normal(size=r.shape) if r.dtype in FLOATS else np.zeros(r.shape, np_dtype(r.dtype))
             for r in prog.results]
    wrt = float_args(prog)
    try:
        grads = getattr(module, f"{prog.name}_grad")(*args, *douts)
        both = getattr(module, f"{prog.name}_value_and_grad")(*args, *douts)
    except Exception as err:  # noqa: BLE001
        return [f"{prog.name}_grad: raised {type(err).__name__}: {err}"], True
    grads = grads if isinstance(grads, tuple) else (grads,)
    defects = []
    values = f(*args)
    values = values if isinstance(values, tuple) else (values,)
    for i, (v, w) in enumerate(zip(both, [*values, *grads])):
        scale = max(1.0, float(np.abs(w).max()) if w.size else 1.0)
        if not np.allclose(v, w, rtol=1e-12, atol=1e-12 * scale, equal_nan=True):  # FMA contraction may differ
            defects.append(f"{prog.name}_value_and_grad: output {i} differs from {prog.name} / {prog.name}_grad")
    direction = [rng.normal(size=prog.args[i].shape) for i in wrt]

    def loss(t: float) -> float:
        moved = list(args)
        for i, d in zip(wrt, direction):
            moved[i] = args[i] + t * d
        out = f(*moved)
        out = out if isinstance(out, tuple) else (out,)
        return sum(float(np.sum(o * d)) for o, d, r in zip(out, douts, prog.results) if r.dtype in FLOATS)

    analytic = sum(float(np.sum(g * d)) for g, d in zip(grads, direction))
    fd = [(loss(h) - loss(-h)) / (2 * h) for h in (1e-5, 1e-6)]
    scale = 1.0 + abs(analytic) + sum(float(np.sum(np.abs(g * d))) for g, d in zip(grads, direction))
    if abs(fd[0] - fd[1]) > 1e-5 * scale:
        return defects, False  # not smooth at this point (a compare flipped, a kink of relu/abs/max)
    if not abs(analytic - fd[1]) <= 1e-5 * scale:
        defects.append(f"{prog.name}_grad: <grad, v> = {analytic!r}, finite differences {fd[1]!r}")
    return defects, True


@dataclass
class Report:
    programs: int = 0
    defects: list[str] = field(default_factory=list)
    not_smooth: int = 0
    ops: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)


def compile_batch(progs: list[Program], grad: bool, decompose: str | None):
    import opc

    return opc.compile("".join(p.text() for p in progs), grad=grad, decompose=decompose)


def run_batch(progs: list[Program], grad: bool, decompose: str | None, seed: int, report: Report) -> None:
    from opc.errors import OpcError

    try:
        module = compile_batch(progs, grad, decompose)
    except Exception:  # noqa: BLE001 - find the program(s) the compiler rejects or crashes on, report them,
        good = []      # check the others
        for p in progs:
            try:
                compile_batch([p], grad, decompose)
                good.append(p)
            except OpcError as one:
                report.defects.append(f"{p.name}: does not compile: {one}")
            except Exception as crash:  # noqa: BLE001 - an internal compiler error (issue 38: the scheduler's)
                report.defects.append(f"{p.name}: internal compiler error: {type(crash).__name__}: {crash}"
                                      f" (decompose={decompose})")
        if len(good) == len(progs):
            raise
        progs = good
        module = compile_batch(progs, grad, decompose) if progs else None
    for p in progs:
        report.programs += 1
        report.ops |= p.ops
        for v in [*p.args, *p.results]:
            report.dtypes.add(v.dtype)
            report.ranks.add(v.arr.ndim)
        report.defects += [f"{d} (decompose={decompose})" for d in check_forward(module, p)]
        if grad:
            defects, smooth = check_grad(module, p, seed)
            report.not_smooth += not smooth
            report.defects += [f"{d} (decompose={decompose})" for d in defects]


def run(seed: int, start: int, count: int, grad: bool, decompose: str | None, report: Report | None = None,
        batch: int = BATCH) -> Report:
    report = report or Report()
    progs = [generate(seed, i, grad) for i in range(start, start + count)]
    for b in range(0, len(progs), batch):
        run_batch(progs[b:b + batch], grad, decompose, seed, report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", type=int, default=0, help="the first program (with --show: the one shown)")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--grad", action="store_true", help="f64 programs, gradients checked too")
    ap.add_argument("--show", action="store_true", help="print program INDEX, its inputs and its check")
    ap.add_argument("--batch", type=int, default=BATCH)
    ns = ap.parse_args(argv)
    if ns.show:
        p = generate(ns.seed, ns.index, ns.grad)
        print(p.text())
        for a in p.args:
            print(f"// %{a.name} = {a.arr.tolist()!r}")
        for r in p.results:
            print(f"// expected %{r.name} = {r.arr.tolist()!r}")
        ns.count, ns.batch = 1, 1
    total, began = Report(), time.monotonic()
    for b in range(ns.index, ns.index + ns.count, ns.batch):  # batch by batch, both paths: a run cut short still
        n = min(ns.batch, ns.index + ns.count - b)              # counts whole programs
        seen = len(total.defects)
        for decompose in (None, "all"):
            run(ns.seed, b, n, ns.grad, decompose, total, ns.batch)
        if not ns.show:
            print(f"[{time.monotonic() - began:.0f} s] programs {ns.index}-{b + n - 1}: {total.programs // 2} run, "
                  f"{len(total.defects)} defects", *(f"\nDEFECT {d}" for d in total.defects[seen:]), file=sys.stderr,
                  flush=True)
    print(f"{total.programs // 2} programs x 2 paths (default, decompose=all), {len(total.defects)} defects, "
          f"{total.not_smooth} gradient points not smooth; ops {len(total.ops)}, dtypes {sorted(total.dtypes)}, "
          f"ranks {sorted(total.ranks)}")
    for d in total.defects:
        print("DEFECT", d)
    return 1 if total.defects else 0


if __name__ == "__main__":
    sys.exit(main())
