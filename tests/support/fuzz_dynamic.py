"""Differential fuzzing with run-time sizes: random programs over `tensor<?xKxf64>` values (the
rows a run-time size, the features static), compiled once and called at sizes 0, 1, 3 and 17
against a NumPy oracle, forward and gradient (central differences).

Each program is a chain of steps over a [?, K] value, drawn from families whose sizes follow their
operands or come from the data:

- elementwise (unary, binary with a row of weights broadcast), reductions over the features,
  matmul by a weight, softmax over the features or the run-time rows, layer norm, concat along the
  features or the rows, reshape of the features, transpose there and back, a concat along the rows
  sliced back (tensor.extract_slice at a run-time offset and size);
- nn ops over a run-time batch (the [?, K] value projected and reshaped to [?, C, *spatial]): conv,
  fused_conv_epilogue, conv_transpose, max_pool, avg_pool, batch_norm (training statistics over the
  run-time batch, or inference), group_norm and instance_norm (their mean and rstd read too), each
  with drawn strides, dilations, pads, groups, ceil_mode; attention over a run-time batch
  ([?, L, d], a mask, causal) or a run-time sequence ([1, ?, K], causal), its lse read too;
- value sizes: topk over the features with a run-time k (an argument), both results read; a
  compress (nonzero of a row test, gathered: the rows become a data size); unique of a run-time
  label column (its first rows gathered, scaled by the counts, gathered back by the inverse);
- scf.for over a static or run-time trip count carrying the value through a chain of the steps
  above (nn ops included), each iteration's value stacked as a scan output is (tensor.insert_slice
  at row i of a [T, ?, K] buffer, then weighted and summed; with a run-time trip count the buffer
  is [?, ?, K] and summed);
- scf.if on a condition from the data (the value's sum against a threshold: both branches are
  taken across the sizes), each branch a chain; scf.while carrying the value and an i64 counter
  while its sum is below a threshold and the counter below a bound (1 to 3): a trip count from the
  data; loops, ifs and whiles nest two deep (a loop in a loop, an if in a loop, a loop in an if);
- dtypes: most programs are f64; some f32 (gradients too) and f16 / bf16 (ml_dtypes, forward
  only), over the families whose rounding error stays bounded (no normalizations, no row tests or
  orderings of rounded values; nn ops but the norms, and attention, in f32 only); the oracle runs in
  f64 from the rounded arguments, the tolerance scaled to the dtype. A condition within rounding
  distance of its threshold is not judged.

The result is the final [?, K] value itself (compared element by element), its gradient that of
sum(dout * result) for a random dout. The oracle builds the program op by op, as fuzz_programs.py
does for static shapes; the nn references are nn_oracle.py's.

    python tests/support/fuzz_dynamic.py --count 500 [--seed 0] [--no-grad]
    python tests/support/fuzz_dynamic.py --seed 0 --show 17       # one program
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nn_oracle as nn  # noqa: E402

SIZES = (0, 1, 3, 17)
T = "f64"
SCALAR = f"tensor<{T}>"
# the step families: BASIC those of the first version (the CUDA simulator's test draws only these)
BASIC = ("unary", "binary", "matmul", "softmax", "layer_norm", "concat", "reduce", "reshape", "transpose", "slice")
EXTENDED = ("softmax_rows", "nn", "attention", "topk", "compress", "unique", "loop", "branch", "while")
WEIGHTS = {**{k: 1.0 for k in BASIC}, "softmax_rows": 0.5, "nn": 2.5, "attention": 1.0, "topk": 0.7,
           "compress": 0.5, "unique": 0.5, "loop": 1.0, "branch": 0.8, "while": 0.7}
# steps that keep the rows (an scf region carries a value of one run-time size through its body)
ROW_CHANGING = ("compress",)
REGIONS = ("loop", "branch", "while")  # nested at most NEST deep
NEST = 2
# the dtypes, drawn per program (by a stream of their own): f64 mostly
DTYPES, DTYPE_P = ("f64", "f32", "f16", "bf16"), (0.7, 0.1, 0.1, 0.1)
# the families drawn in f32 / f16 / bf16: those whose rounding error stays near the dtype's epsilon
# (normalizations divide by a small spread, topk / compress / unique order or test rounded values)
LOW_KINDS = ("unary", "binary", "matmul", "softmax", "concat", "reduce", "reshape", "transpose", "slice",
             "softmax_rows", "loop", "branch", "while")
# f32 also draws the nn ops but the normalizations, and attention (f32 is what models train in)
F32_KINDS = (*LOW_KINDS, "nn", "attention")
NN_OPS = ("conv", "fused_conv_epilogue", "conv_transpose", "max_pool", "avg_pool", "batch_norm", "grouped_norm")
NORMS = ("batch_norm", "grouped_norm")
GRAD_DTYPES = ("f64", "f32")  # gradients in f16 / bf16 are not a thing users check against differences
# forward tolerance |got - want| <= TOL * (1 + max |want|) (f64: np.allclose at 1e-9), gradient
# tolerance relative to 1 + |differences|, and the margin within which a condition is not judged,
# times 1 + the sum of |value| it compares
# (f16 20, bf16 16 units of roundoff: an intermediate of 4 to 8 rounds by 1/32 in bf16, and a tanh
# after it keeps that error in a small result; f32 sums in f32: a 100-term dot is off by hundreds)
TOL = {"f64": 1e-9, "f32": 2e-5, "f16": 1e-2, "bf16": 6e-2}
GRAD_TOL = {"f64": 1e-5, "f32": 2e-3}
MARGIN = {"f64": 1e-9, "f32": 1e-5, "f16": 1e-2, "bf16": 5e-2}


def np_dtype(name: str) -> np.dtype:
    if name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f64": np.float64, "f32": np.float32, "f16": np.float16}[name])


class Ambiguous(Exception):
    """A condition within rounding distance of its threshold: either branch is right."""


def ttype(k: tuple[int, ...], rows: bool = True, el: str = T) -> str:
    dims = (["?"] if rows else []) + [str(d) for d in k]
    return f"tensor<{'x'.join(dims)}x{el}>" if dims else f"tensor<{el}>"


Env = dict[str, np.ndarray]


@dataclass
class Val:
    name: str
    feats: tuple[int, ...]  # the static dims after the run-time rows
    fn: Callable[[Env], np.ndarray]  # the oracle, from the arguments

    @property
    def type(self) -> str:
        return ttype(self.feats)


@dataclass
class Arg:
    name: str
    dims: tuple[int, ...]
    rows: bool  # a leading run-time dim of the call's size
    kind: str = "float"  # float | labels (i64 in [0, 4)) | k (i64 in [0, dims...]) | trips (i64 in [0, 3])
    bound: int = 0  # k's largest value

    @property
    def type(self) -> str:
        return ttype(self.dims, self.rows, T if self.kind == "float" else "i64")


@dataclass
class Program:
    name: str
    args: list[Arg] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    result: Val | None = None
    kinds: set[str] = field(default_factory=set)  # the step families drawn
    dtype: str = "f64"
    seen: dict[str, set] = field(default_factory=dict)  # per if / while: the branches / trip counts run

    def text(self) -> str:
        assert self.result is not None
        params = ", ".join(f"%{a.name}: {a.type}" for a in self.args)
        r = self.result
        out = (f"func.func @{self.name}({params}) -> {r.type} {{\n" + "\n".join(self.lines) +
               f"\n  func.return %{r.name} : {r.type}\n}}\n")
        if self.dtype == "f64":
            return out
        # written in f64, then every f64 tensor (and cast) retyped; attributes stay f64
        return out.replace("xf64>", f"x{self.dtype}>").replace("tensor<f64>", f"tensor<{self.dtype}>").replace(
            "dtype = f64", f"dtype = {self.dtype}")

    def feeds(self, a: Env) -> Env:
        """The arguments as the call takes them: floats rounded to the dtype."""
        dt = np_dtype(self.dtype)
        return {a_.name: a[a_.name].astype(dt) if a_.kind == "float" else a[a_.name] for a_ in self.args}

    def see(self, key: str, what: object) -> None:
        self.seen.setdefault(key, set()).add(what)

    def arrays(self, n: int, rng: np.random.Generator) -> Env:
        out = {}
        for a in self.args:
            shape = ((n,) if a.rows else ()) + a.dims
            if a.kind == "float":
                out[a.name] = rng.uniform(-1.0, 1.0, shape)
            elif a.kind == "labels":
                out[a.name] = rng.integers(0, 4, shape).astype(np.int64)
            elif a.kind == "k":
                out[a.name] = np.array(rng.integers(0, a.bound + 1), np.int64)
            else:
                out[a.name] = np.array(rng.integers(0, 4), np.int64)
        return out

    def float_args(self) -> list[str]:
        return [a.name for a in self.args if a.kind == "float"]


def quiet(fn: Callable[[Env], np.ndarray]) -> Callable[[Env], np.ndarray]:
    """The oracle without NumPy's warnings (a mean over no rows, whose result nothing reads)."""
    def run(a: Env) -> np.ndarray:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return fn(a)
    return run


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask, scale: float, causal: bool):
    """nn_oracle's attention, defined at no queries or keys (empty results)."""
    if 0 in q.shape or 0 in k.shape:
        return np.zeros((*q.shape[:-1], v.shape[-1])), np.zeros(q.shape[:-1])
    return nn.attention(q, k, v, mask, scale, causal)


class Generator:
    def __init__(self, seed: int, index: int, kinds: tuple[str, ...] = BASIC + EXTENDED) -> None:
        self.rng = np.random.default_rng([seed, index])
        dtype = str(np.random.default_rng([seed, index, 4]).choice(DTYPES, p=DTYPE_P))
        self.p = Program(f"d{index}", dtype=dtype)
        self.count = 0
        self.kinds = kinds if dtype == "f64" else tuple(k for k in kinds if k in (F32_KINDS if dtype == "f32"
                                                                                 else LOW_KINDS))
        self.margin = MARGIN[dtype]
        self.depth = 0  # inside an scf region
        self.regions: list[str] = []  # the enclosing regions' kinds, innermost last
        self.rows_n = True  # the chain's rows are the call's size (not a data size)

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def arg(self, dims: tuple[int, ...], rows: bool = True, kind: str = "float", bound: int = 0) -> str:
        name = f"a{len(self.p.args)}"
        self.p.args.append(Arg(name, dims, rows, kind, bound))
        return name

    def line(self, text: str) -> None:
        self.p.lines.append("  " * (1 + self.depth) + text)

    def op(self, text: str, feats: tuple[int, ...], fn: Callable) -> Val:
        name = self.fresh()
        self.line(f"%{name} = {text.format(r=ttype(feats))}")
        return Val(name, feats, fn)

    def const_index(self, v: int) -> str:
        name = self.fresh()
        self.line(f"%{name} = arith.constant {v} : index")
        return name

    def rows_of(self, x: Val) -> str:
        """x's run-time rows as an `index` value."""
        name = self.fresh()
        self.line(f"%{name} = tensor.dim %{x.name}, %{self.const_index(0)} : {x.type}")
        return name

    def project(self, x: Val, m: int) -> Val:
        """x [?, n] as [?, m]: itself when n = m, else times an [n, m] weight."""
        (n,) = x.feats
        if n == m and self.rng.random() < 0.7:
            return x
        w, f = self.arg((n, m), rows=False), x.fn
        return self.op(f"opc.matmul %{x.name}, %{w} : ({x.type}, {ttype((n, m), False)}) -> {{r}}", (m,),
                       lambda a: f(a) @ a[w])

    def flatten(self, name: str, dims: tuple[int, ...], fn: Callable) -> Val:
        """A [?, *dims] value as [?, prod(dims)]."""
        m = math.prod(dims)
        return self.op(f"opc.reshape %{name} : ({ttype(dims)}) -> {{r}}", (m,),
                       lambda a: fn(a).reshape(-1, m))

    def concat_feats(self, parts: list[Val]) -> Val:
        """[?, n1], [?, n2], ... along the features."""
        if len(parts) == 1:
            return parts[0]
        total = sum(p.feats[0] for p in parts)
        fns = [p.fn for p in parts]
        ins, types = ", ".join(f"%{p.name}" for p in parts), ", ".join(p.type for p in parts)
        return self.op(f"opc.concat {ins} {{{{axis = 1 : i64}}}} : ({types}) -> {{r}}", (total,),
                       lambda a: np.concatenate([f(a) for f in fns], 1))

    # -- the first families ---------------------------------------------------
    def step(self, x: Val) -> Val:
        allowed = [k for k in self.kinds if not (self.depth and k in ROW_CHANGING)
                   and not (k in REGIONS and self.depth >= NEST)]
        if not self.rows_n:
            allowed = [k for k in allowed if k != "unique"]  # its labels have the call's rows
        w = np.array([WEIGHTS[k] for k in allowed])
        kind = str(self.rng.choice(allowed, p=w / w.sum()))
        self.p.kinds.add(kind)
        if kind in EXTENDED and len(x.feats) == 1:
            return getattr(self, "while_loop" if kind == "while" else kind)(x)
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
            self.line(f"%{name}, %{name}m, %{name}r = opc.layer_norm %{x.name}, %{g}, %{h} "
                      f"{{begin_norm_axis = 1 : i64, epsilon = 1.0e-05 : f64}} : ({x.type}, "
                      f"{ttype((n,), False)}, {ttype((n,), False)}) -> ({x.type}, {st}, {st})")

            def ln(a: dict) -> np.ndarray:
                v = f(a)
                mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
                return (v - mu) / np.sqrt(var + 1e-5) * a[g] + a[h]
            return Val(name, k, ln)
        if kind == "concat":
            m = int(self.rng.integers(1, 4))
            if not self.rows_n:  # a data-sized row count: the second part from the value itself
                t = self.op(f"opc.tanh %{x.name} : ({x.type}) -> {{r}}", k, lambda a: np.tanh(f(a)))
                return self.concat_feats([x, t])
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
            rows = self.rows_of(x)
            t, cat = self.fresh(), self.fresh()
            self.line(f"%{t} = opc.tanh %{x.name} : ({x.type}) -> {x.type}")
            self.line(f"%{cat} = opc.concat %{x.name}, %{t} {{axis = 0 : i64}} : ({x.type}, {x.type}) -> {x.type}")
            return self.op(f"tensor.extract_slice %{cat}[%{rows}, 1] [%{rows}, {n - 1}] [1, 1] : {x.type} to {{r}}",
                           (n - 1,), lambda a: np.tanh(f(a))[:, 1:])
        if kind == "transpose":  # there and back: [?, n] -> [n, ?] -> [?, n]
            t, back, tt = self.fresh(), self.fresh(), f"tensor<{n}x?x{T}>"
            self.line(f"%{t} = opc.transpose %{x.name} {{perm = array<i64: 1, 0>}} : ({x.type}) -> {tt}")
            self.line(f"%{back} = opc.transpose %{t} {{perm = array<i64: 1, 0>}} : ({tt}) -> {x.type}")
            return Val(back, k, f)
        return self.op(f"opc.tanh %{x.name} : ({x.type}) -> {{r}}", k, lambda a: np.tanh(f(a)))

    # -- softmax over the run-time rows ---------------------------------------
    def softmax_rows(self, x: Val) -> Val:
        log = bool(self.rng.random() < 0.4)
        f = x.fn

        def ref(a: Env) -> np.ndarray:
            v = f(a)
            if not v.size:
                return v
            s = v - v.max(0, keepdims=True)
            lse = np.log(np.exp(s).sum(0, keepdims=True))
            return s - lse if log else np.exp(s - lse)
        op = "log_softmax" if log else "softmax"
        return self.op(f"opc.{op} %{x.name} {{{{axis = 0 : i64}}}} : ({x.type}) -> {{r}}", x.feats, ref)

    # -- nn ops over a run-time batch ------------------------------------------
    def image(self, x: Val) -> tuple[Val, tuple[int, ...]]:
        """x [?, n] as an image batch [?, C, *spatial] (projected first when n is not C * spatial)."""
        r = int(self.rng.choice([1, 2, 3], p=[0.45, 0.45, 0.1]))
        c = int(self.rng.integers(1, 5))
        spatial = tuple(int(d) for d in self.rng.integers(1, {1: 7, 2: 5, 3: 3}[r] + 1, size=r))
        dims = (c, *spatial)
        p = self.project(x, math.prod(dims))
        f = p.fn
        img = self.op(f"opc.reshape %{p.name} : ({p.type}) -> {{r}}", dims, lambda a: f(a).reshape(-1, *dims))
        return img, dims

    def window(self, r: int) -> tuple[list[int], list[int], list[int]]:
        strides = [int(s) for s in self.rng.integers(1, 3, size=r)]
        dilations = [int(d) for d in self.rng.integers(1, 3, size=r)] if self.rng.random() < 0.4 else [1] * r
        pads = [int(p) for p in self.rng.integers(0, 3, size=2 * r)] if self.rng.random() < 0.6 else [0] * 2 * r
        return strides, dilations, pads

    @staticmethod
    def spell(**attrs) -> str:
        out = []
        for k, v in attrs.items():
            if isinstance(v, list):
                out.append(f"{k} = array<i64: {', '.join(map(str, v))}>")
            elif isinstance(v, bool):
                out.append(f"{k} = {str(v).lower()}")
            elif isinstance(v, float):
                out.append(f"{k} = {v:.17e} : f64")
            elif isinstance(v, str):
                out.append(f'{k} = "{v}"')
            else:
                out.append(f"{k} = {v}")
        return ", ".join(out)

    def fits(self, spatial: tuple[int, ...], kernel: list[int], dilations: list[int], pads: list[int]) -> bool:
        r = len(spatial)
        return all(dilations[d] * (kernel[d] - 1) + 1 <= spatial[d] + pads[d] + pads[r + d] for d in range(r))

    def nn(self, x: Val) -> Val:
        img, dims = self.image(x)
        c, spatial = dims[0], dims[1:]
        r = len(spatial)
        f = img.fn
        kind = str(self.rng.choice([k for k in NN_OPS if self.p.dtype == "f64" or k not in NORMS]))
        self.p.kinds.add(kind)
        kernel = [int(k) for k in self.rng.integers(1, 4, size=r)]
        strides, dilations, pads = self.window(r)
        it = ttype(dims)
        if kind in ("conv", "fused_conv_epilogue", "conv_transpose"):
            divisors = [g for g in range(1, c + 1) if c % g == 0]
            group = c if self.rng.random() < 0.3 else int(self.rng.choice(divisors))
            per = int(self.rng.integers(1, 3))
            if kind == "conv_transpose":
                output_padding = [int(self.rng.integers(0, s)) for s in strides]

                def out_of(pads: list[int]) -> tuple[int, ...]:
                    return nn.conv_transpose(np.zeros((1, *dims)), np.zeros((c, per, *kernel)), strides, dilations,
                                             pads, output_padding, group).shape[1:]
                out = out_of(pads)
                if 0 in out:  # the pads ate the output: none
                    pads = [0] * 2 * r
                    out = out_of(pads)
                w = self.arg((c, per, *kernel), rows=False)
                y = self.op(f"opc.conv_transpose %{img.name}, %{w} {{{{{self.spell(strides=strides, dilations=dilations, pads=pads, output_padding=output_padding, group=group)}}}}} : "
                            f"({it}, {ttype((c, per, *kernel), False)}) -> {{r}}", out,
                            lambda a: nn.conv_transpose(f(a), a[w], strides, dilations, pads, output_padding, group))
                return self.flatten(y.name, out, y.fn)
            if not self.fits(spatial, kernel, dilations, pads):
                kernel = [1] * r  # (always fits)
            o = group * per
            w = self.arg((o, c // group, *kernel), rows=False)
            wt = ttype((o, c // group, *kernel), False)
            out = (o, *nn.conv_out(spatial, kernel, strides, dilations, pads))
            attrs = self.spell(strides=strides, dilations=dilations, pads=pads, group=group)
            if kind == "conv":
                y = self.op(f"opc.conv %{img.name}, %{w} {{{{{attrs}}}}} : ({it}, {wt}) -> {{r}}", out,
                            lambda a: nn.conv(f(a), a[w], strides, dilations, pads, group))
                return self.flatten(y.name, out, y.fn)
            b = self.arg((o,), rows=False)
            act = str(self.rng.choice(["none", "relu", "gelu"]))

            def z(a: Env) -> np.ndarray:
                return nn.conv(f(a), a[w], strides, dilations, pads, group) + nn.channel_view(a[b], 2 + r)

            def activated(a: Env) -> np.ndarray:
                v = z(a)
                return {"none": v, "relu": np.maximum(v, 0),
                        "gelu": 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))}[act]
            name = self.fresh()
            ot = ttype(out)
            outs = f"%{name}" + (f", %{name}z" if act != "none" else "")
            types = ot if act == "none" else f"({ot}, {ot})"
            self.line(f"{outs} = opc.fused_conv_epilogue %{img.name}, %{w}, %{b} "
                      f"{{{attrs}, activation = \"{act}\"}} : ({it}, {wt}, {ttype((o,), False)}) -> {types}")
            y = self.flatten(name, out, activated)
            if act == "none" or self.rng.random() < 0.5:
                return y
            return self.concat_feats([y, self.flatten(f"{name}z", out, z)])  # the reserve space read too
        if kind in ("max_pool", "avg_pool"):
            strides = [int(s) for s in self.rng.integers(1, 4, size=r)]
            ceil = bool(self.rng.random() < 0.3)
            if not self.fits(spatial, kernel, dilations, pads) or any(
                    all(t is None for t in taps) for _, taps, _ in nn.pool_windows(spatial, kernel, strides, dilations,
                                                                                   pads, ceil)):
                kernel, pads = [1] * r, [0] * 2 * r  # (every window holds an input element)
            out = (c, *nn.pool_out(spatial, kernel, strides, dilations, pads, ceil))
            geom = (kernel, strides, dilations, pads, ceil)
            if kind == "max_pool":
                attrs = self.spell(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil)
                name = self.fresh()
                self.line(f"%{name}, %{name}i = opc.max_pool %{img.name} {{{attrs}}} : ({it}) -> "
                          f"({ttype(out)}, {ttype(out, el='i64')})")
                y = self.flatten(name, out, lambda a: nn.max_pool(f(a), *geom)[0])
                if self.rng.random() < 0.5:
                    return y
                # the indices read too (as f64 times 0.01: a wrong index shows; no gradient flows there)
                m, it_ = math.prod(out), ttype(out, el="i64")
                flat, cast, hundredth = self.fresh(), self.fresh(), self.fresh()
                self.line(f"%{flat} = opc.reshape %{name}i : ({it_}) -> {ttype((m,), el='i64')}")
                self.line(f"%{cast} = opc.cast %{flat} {{dtype = f64}} : ({ttype((m,), el='i64')}) -> {ttype((m,))}")
                self.line(f"%{hundredth} = arith.constant dense<0.01> : {SCALAR}")
                idx = self.op(f"opc.mul %{cast}, %{hundredth} : ({ttype((m,))}, {SCALAR}) -> {{r}}", (m,),
                              lambda a: nn.max_pool(f(a), *geom)[1].reshape(-1, m) * 0.01)
                return self.concat_feats([y, idx])
            include = bool(self.rng.random() < 0.5)
            attrs = self.spell(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil,
                               count_include_pad=include)
            y = self.op(f"opc.avg_pool %{img.name} {{{{{attrs}}}}} : ({it}) -> {{r}}", out,
                        lambda a: nn.avg_pool(f(a), *geom, include))
            return self.flatten(y.name, out, y.fn)
        if kind == "batch_norm":
            scale, bias = self.arg((c,), rows=False), self.arg((c,), rows=False)
            mean, var = self.arg((c,), rows=False), self.arg((c,), rows=False)
            training = bool(self.rng.random() < 0.6)
            eps = float(self.rng.choice([1e-5, 1e-3]))
            attrs = self.spell(epsilon=eps, momentum=0.9, training=training)
            ct = ttype((c,), False)
            ab, pos, tenth, name = self.fresh(), self.fresh(), self.fresh(), self.fresh()
            self.line(f"%{ab} = opc.abs %{var} : ({ct}) -> {ct}")  # the running variance |var| + 0.1
            self.line(f"%{tenth} = arith.constant dense<0.1> : {ct}")
            self.line(f"%{pos} = opc.add %{ab}, %{tenth} : ({ct}, {ct}) -> {ct}")
            outs = f"%{name}" + ("".join(f", %{name}s{i}" for i in range(4)) if training else "")
            types = it if not training else f"({it}, {ct}, {ct}, {ct}, {ct})"
            self.line(f"{outs} = opc.batch_norm %{img.name}, %{scale}, %{bias}, %{mean}, %{pos} {{{attrs}}} : "
                      f"({it}, {ct}, {ct}, {ct}, {ct}) -> {types}")

            def bn(a: Env) -> np.ndarray:
                v = np.abs(a[var]) + 0.1
                if training:
                    return nn.batch_norm_training(f(a), a[scale], a[bias], a[mean], v, eps, 0.9)[0]
                return nn.batch_norm_inference(f(a), a[scale], a[bias], a[mean], v, eps)
            return self.flatten(name, dims, bn)
        # group_norm / instance_norm, their mean and rstd [?, G] read too
        instance = self.rng.random() < 0.4
        groups = c if instance else int(self.rng.choice([g for g in range(1, c + 1) if c % g == 0]))
        scale, bias = self.arg((c,), rows=False), self.arg((c,), rows=False)
        eps = float(self.rng.choice([1e-5, 1e-3]))
        attrs = self.spell(epsilon=eps) if instance else self.spell(num_groups=groups, epsilon=eps)
        ct, st = ttype((c,), False), ttype((groups,))
        name = self.fresh()
        self.line(f"%{name}, %{name}m, %{name}r = opc.{'instance_norm' if instance else 'group_norm'} %{img.name}, "
                  f"%{scale}, %{bias} {{{attrs}}} : ({it}, {ct}, {ct}) -> ({it}, {st}, {st})")

        def gn(i: int) -> Callable[[Env], np.ndarray]:
            return lambda a: nn.group_norm(f(a), a[scale], a[bias], groups, eps)[i]
        parts = [self.flatten(name, dims, gn(0))]
        if self.rng.random() < 0.5:
            parts += [Val(f"{name}m", (groups,), gn(1)), Val(f"{name}r", (groups,), gn(2))]
            # rstd up to 1/sqrt(eps): kept in tanh's range
            t = parts[2].fn
            parts[2] = self.op(f"opc.tanh %{name}r : ({st}) -> {{r}}", (groups,), lambda a: np.tanh(t(a)))
        return self.concat_feats(parts)

    # -- attention over a run-time batch or sequence ---------------------------
    def attention(self, x: Val) -> Val:
        scale = float(self.rng.choice([1.0, 0.5]))
        causal = bool(self.rng.random() < 0.5)
        name = self.fresh()
        if self.rng.random() < 0.5:  # a run-time batch: [?, L, d]
            lq, d = int(self.rng.integers(1, 4)), int(self.rng.integers(1, 4))
            q = self.project(x, lq * d)
            fq = q.fn
            qi = self.op(f"opc.reshape %{q.name} : ({q.type}) -> {{r}}", (lq, d), lambda a: fq(a).reshape(-1, lq, d))
            kv = qi
            if self.rng.random() < 0.5:  # keys and values projected from the queries' rows
                wk = self.arg((d, d), rows=False)
                fk = qi.fn
                kv = self.op(f"opc.matmul %{qi.name}, %{wk} : ({qi.type}, {ttype((d, d), False)}) -> {{r}}", (lq, d),
                             lambda a: fk(a) @ a[wk])
            mask = self.arg((lq, lq), rows=False) if self.rng.random() < 0.4 else None
            fqi, fkv = qi.fn, kv.fn
            ops = f"%{qi.name}, %{kv.name}, %{kv.name}" + (f", %{mask}" if mask else "")
            types = f"{qi.type}, {kv.type}, {kv.type}" + (f", {ttype((lq, lq), False)}" if mask else "")
            self.line(f"%{name}, %{name}l = opc.attention {ops} {{{self.spell(scale=scale, is_causal=causal)}}} : "
                      f"({types}) -> ({qi.type}, {ttype((lq,))})")

            def ref(i: int) -> Callable[[Env], np.ndarray]:
                return lambda a: attention_ref(fqi(a), fkv(a), fkv(a), None if mask is None else a[mask], scale,
                                               causal)[i]
            parts = [self.flatten(name, (lq, d), ref(0))]
            if self.rng.random() < 0.5:
                parts.append(Val(f"{name}l", (lq,), ref(1)))
            self.p.kinds.add("attention_batch")
            return self.concat_feats(parts)
        # a run-time sequence: [1, ?, n], self-attention (causal or not)
        (n,) = x.feats
        f = x.fn
        seq, st = f"tensor<1x?x{n}x{T}>", f"tensor<1x?x{T}>"
        q = self.fresh()
        self.line(f"%{q} = opc.reshape %{x.name} : ({x.type}) -> {seq}")
        self.line(f"%{name}, %{name}l = opc.attention %{q}, %{q}, %{q} {{{self.spell(scale=scale, is_causal=causal)}}}"
                  f" : ({seq}, {seq}, {seq}) -> ({seq}, {st})")

        def sref(i: int) -> Callable[[Env], np.ndarray]:
            def run(a: Env) -> np.ndarray:
                v = f(a)[None]
                return attention_ref(v, v, v, None, scale, causal)[i][0]
            return run
        out = self.op(f"opc.reshape %{name} : ({seq}) -> {{r}}", (n,), sref(0))
        self.p.kinds.add("attention_sequence")
        if self.rng.random() < 0.5:
            return out
        lse = self.op(f"opc.reshape %{name}l : ({st}) -> {{r}}", (1,), lambda a: sref(1)(a)[:, None])
        return self.concat_feats([out, lse])

    # -- sizes from the data ---------------------------------------------------
    def topk(self, x: Val) -> Val:
        """topk over the features with a run-time k: [?, k] values and indices, each row's sum of
        values plus 0.01 * indices read back as [?, 1]."""
        (n,) = x.feats
        f = x.fn
        k = self.arg((), rows=False, kind="k", bound=n)
        largest = bool(self.rng.random() < 0.6)
        v, vt, it = self.fresh(), f"tensor<?x?x{T}>", "tensor<?x?xi64>"
        self.line(f"%{v}, %{v}i = opc.topk %{x.name}, %{k} {{axis = 1, largest = {str(largest).lower()}}} : "
                  f"({x.type}, tensor<i64>) -> ({vt}, {it})")
        c, s, hundredth, t = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.line(f"%{c} = opc.cast %{v}i {{dtype = f64}} : ({it}) -> {vt}")
        self.line(f"%{hundredth} = arith.constant dense<0.01> : {SCALAR}")
        self.line(f"%{s} = opc.mul %{c}, %{hundredth} : ({vt}, {SCALAR}) -> {vt}")
        self.line(f"%{t} = opc.add %{v}, %{s} : ({vt}, {vt}) -> {vt}")

        def ref(a: Env) -> np.ndarray:
            v = f(a)
            kk = int(a[k])
            order = np.argsort(-v if largest else v, axis=1, kind="stable")[:, :kk]
            vals = np.take_along_axis(v, order, 1)
            return (vals + 0.01 * order).sum(1, keepdims=True)
        return self.op(f"opc.reduce_sum %{t} {{{{axes = array<i64: 1>, keepdim = true}}}} : ({vt}) -> {{r}}", (1,), ref)

    def compress(self, x: Val) -> Val:
        """The rows whose sum is positive (nonzero of the test, gathered): a data-sized row count."""
        (n,) = x.feats
        f = x.fn
        s, z, p, nz, i = (self.fresh() for _ in range(5))
        self.line(f"%{s} = opc.reduce_sum %{x.name} {{axes = array<i64: 1>}} : ({x.type}) -> tensor<?x{T}>")
        self.line(f"%{z} = arith.constant dense<0.0> : {SCALAR}")
        self.line(f"%{p} = opc.greater_than %{s}, %{z} : (tensor<?x{T}>, {SCALAR}) -> tensor<?xi1>")
        self.line(f"%{nz} = opc.nonzero %{p} : (tensor<?xi1>) -> tensor<1x?xi64>")
        self.line(f"%{i} = opc.reshape %{nz} : (tensor<1x?xi64>) -> tensor<?xi64>")
        self.rows_n = False
        return self.op(f"opc.gather %{x.name}, %{i} {{{{axis = 0}}}} : ({x.type}, tensor<?xi64>) -> {{r}}", (n,),
                       lambda a: f(a)[f(a).sum(1) > 0])

    def unique(self, x: Val) -> Val:
        """unique of a label column (one per row): each label's first row, times its count, tanh,
        gathered back to every row by the inverse."""
        (n,) = x.feats
        f = x.fn
        lab = self.arg((), rows=True, kind="labels")
        srt = bool(self.rng.random() < 0.5)
        u, g, cf, c2, m, t = (self.fresh() for _ in range(6))
        lt = "tensor<?xi64>"
        self.line(f"%{u}, %{u}f, %{u}i, %{u}c = opc.unique %{lab} {{sorted = {str(srt).lower()}}} : ({lt}) -> "
                  f"({lt}, {lt}, {lt}, {lt})")
        self.line(f"%{g} = opc.gather %{x.name}, %{u}f {{axis = 0}} : ({x.type}, {lt}) -> {x.type}")
        self.line(f"%{cf} = opc.cast %{u}c {{dtype = f64}} : ({lt}) -> tensor<?x{T}>")
        self.line(f"%{c2} = opc.reshape %{cf} : (tensor<?x{T}>) -> {ttype((1,))}")
        self.line(f"%{m} = opc.mul %{g}, %{c2} : ({x.type}, {ttype((1,))}) -> {x.type}")
        self.line(f"%{t} = opc.tanh %{m} : ({x.type}) -> {x.type}")

        def ref(a: Env) -> np.ndarray:
            v, labels = f(a), a[lab]
            y, first, inverse, counts = np.unique(labels, return_index=True, return_inverse=True, return_counts=True)
            if not srt:  # in the order of first occurrence
                order = np.argsort(first, kind="stable")
                rank = np.empty_like(order)
                rank[order] = np.arange(len(order))
                first, counts, inverse = first[order], counts[order], rank[inverse]
            return np.tanh(v[first] * counts[:, None])[inverse.reshape(-1)]
        return self.op(f"opc.gather %{t}, %{u}i {{{{axis = 0}}}} : ({x.type}, {lt}) -> {{r}}", (n,), ref)

    # -- scf.for carrying the value through a chain, its values stacked ---------
    def loop(self, x: Val) -> Val:
        (n,) = x.feats
        f = x.fn
        static = self.rng.random() < 0.6
        trips = int(self.rng.integers(1, 4))  # (static: the trip count; else a run-time one from 0 to 3)
        targ = "" if static else self.arg((), rows=False, kind="trips")
        stack = self.rng.random() < (0.6 if static else 0.5)
        c0, c1 = self.const_index(0), self.const_index(1)
        if static:
            bound = self.const_index(trips)
        else:
            ti, bound = self.fresh(), self.fresh()
            self.line(f"%{ti} = tensor.extract %{targ}[] : tensor<i64>")
            self.line(f"%{bound} = arith.index_cast %{ti} : i64 to index")
        i, h, buf, res = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        bt = f"tensor<{trips if static else '?'}x?x{n}x{T}>"
        carried, types = f"%{h} = %{x.name}", x.type
        if stack:  # the buffer [T, ?, n], T the trip count (static or the run-time bound)
            rows, buf0 = self.rows_of(x), self.fresh()
            sizes, its = (f"%{rows}", "index") if static else (f"%{bound}, %{rows}", "index, index")
            self.line(f"%{buf0} = opc.full {sizes} {{value = 0.0 : f64}} : ({its}) -> {bt}")
            carried, types = f"{carried}, %{buf} = %{buf0}", f"{types}, {bt}"
        self.nested("loop")
        self.line(f"%{res}:{2 if stack else 1} = scf.for %{i} = %{c0} to %{bound} step %{c1} iter_args({carried}) "
                  f"-> ({types}) {{")
        key = f"__carried_{h}"
        self.depth += 1
        self.regions.append("loop")
        y = Val(h, (n,), lambda a: a[key])
        for _ in range(int(self.rng.integers(1, 4))):
            y = self.step(y)
        # back to [?, n], kept in tanh's range so that the trips do not blow it up
        y = self.project(y, n)
        fy = y.fn
        y = self.op(f"opc.tanh %{y.name} : ({y.type}) -> {{r}}", (n,), lambda a: np.tanh(fy(a)))
        body = y.fn
        if stack:
            y3, b2, rows_b = self.fresh(), self.fresh(), self.rows_of(y)
            self.line(f"%{y3} = opc.reshape %{y.name} : ({y.type}) -> tensor<1x?x{n}x{T}>")
            self.line(f"%{b2} = tensor.insert_slice %{y3} into %{buf}[%{i}, 0, 0] [1, %{rows_b}, {n}] [1, 1, 1] : "
                      f"tensor<1x?x{n}x{T}> into {bt}")
            self.line(f"scf.yield %{y.name}, %{b2} : {y.type}, {bt}")
        else:
            self.line(f"scf.yield %{y.name} : {y.type}")
        self.depth -= 1
        self.regions.pop()
        self.line("}")

        def run(a: Env) -> tuple[np.ndarray, list[np.ndarray]]:
            v, seen = f(a), []
            for _ in range(trips if static else int(a[targ])):
                v = body({**a, key: v})
                seen.append(v)
            return v, seen
        self.p.kinds.add(("loop_stacked" if static else "loop_stacked_run_time") if stack else
                         "loop_static" if static else "loop_run_time")
        if not stack:
            return Val(f"{res}#0", (n,), lambda a: run(a)[0])
        if not static:  # the stack [?, ?, n] summed over the iterations, added to the last
            s = self.fresh()
            self.line(f"%{s} = opc.reduce_sum %{res}#1 {{axes = array<i64: 0>}} : ({bt}) -> {ttype((n,))}")

            def summed(a: Env) -> np.ndarray:
                v, seen = run(a)
                return v + sum(seen, np.zeros_like(v))
            return self.op(f"opc.add %{res}#0, %{s} : ({x.type}, {x.type}) -> {{r}}", (n,), summed)
        # the stacked values weighted by iteration ([T, 1, 1]) and summed, added to the last
        wt = self.arg((trips, 1, 1), rows=False)
        wtt = f"tensor<{trips}x1x1x{T}>"
        m, s = self.fresh(), self.fresh()
        self.line(f"%{m} = opc.mul %{res}#1, %{wt} : ({bt}, {wtt}) -> {bt}")
        self.line(f"%{s} = opc.reduce_sum %{m} {{axes = array<i64: 0>}} : ({bt}) -> {ttype((n,))}")

        def stacked(a: Env) -> np.ndarray:
            v, seen = run(a)
            return v + sum(w * s for w, s in zip(a[wt][:, 0, 0], seen))
        return self.op(f"opc.add %{res}#0, %{s} : ({x.type}, {x.type}) -> {{r}}", (n,), stacked)

    def nested(self, kind: str) -> None:
        """Note a region drawn inside another (loop_in_loop, branch_in_loop, loop_in_branch, ...)."""
        if self.regions:
            self.p.kinds.add(f"{kind}_in_{self.regions[-1]}")

    def region_chain(self, x: Val, kind: str, start: Val, steps: int) -> Val:
        """A chain of `steps` steps from start inside a region, back to [?, n] (x's features)."""
        self.depth += 1
        self.regions.append(kind)
        y = start
        for _ in range(steps):
            y = self.step(y)
        y = self.project(y, x.feats[0])
        self.depth -= 1
        self.regions.pop()
        return y

    def condition(self, x: Val, less: bool, threshold: float) -> tuple[str, Callable[[Env], bool]]:
        """An i1 from the data: sum(x) < threshold (or >), and its oracle (Ambiguous within the
        dtype's rounding distance of the threshold)."""
        s, t, p, c = (self.fresh() for _ in range(4))
        self.line(f"%{s} = opc.reduce_sum %{x.name} {{axes = array<i64: 0, 1>}} : ({x.type}) -> {SCALAR}")
        self.line(f"%{t} = arith.constant dense<{threshold:.1f}> : {SCALAR}")
        op = "less_than" if less else "greater_than"
        self.line(f"%{p} = opc.{op} %{s}, %{t} : ({SCALAR}, {SCALAR}) -> tensor<i1>")
        self.line(f"%{c} = tensor.extract %{p}[] : tensor<i1>")
        f, margin = x.fn, self.margin

        def holds(a: Env) -> bool:
            v = f(a)
            total = float(v.sum())
            if abs(total - threshold) <= margin * (1 + float(np.abs(v).sum())):
                raise Ambiguous
            return total < threshold if less else total > threshold
        return c, holds

    def branch(self, x: Val) -> Val:
        """scf.if on sum(x) against a threshold, each branch a chain from x (none: x itself)."""
        threshold = float(self.rng.choice([0.0, 0.5, -0.5]))
        c, holds = self.condition(x, bool(self.rng.random() < 0.5), threshold)
        self.nested("branch")
        res = self.fresh()
        self.line(f"%{res} = scf.if %{c} -> ({x.type}) {{")
        arms = []
        for i in range(2):
            if i:
                self.line("} else {")
            y = self.region_chain(x, "branch", x, int(self.rng.integers(0, 3)))
            self.depth += 1
            self.line(f"scf.yield %{y.name} : {y.type}")
            self.depth -= 1
            arms.append(y.fn)
        self.line("}")
        then, other, p, key = arms[0], arms[1], self.p, res

        def ref(a: Env) -> np.ndarray:
            taken = holds(a)
            p.see(key, taken)
            return then(a) if taken else other(a)
        return Val(res, x.feats, ref)

    def while_loop(self, x: Val) -> Val:
        """scf.while carrying x and an i64 counter: while sum < threshold and counter < bound, x
        through a chain (then tanh, kept in range), the counter plus 1."""
        (n,) = x.feats
        f = x.fn
        bound = int(self.rng.integers(1, 4))
        threshold = float(self.rng.choice([0.0, 0.5, 1.0, -0.5]))
        z, one, res, h, k, hb, kb, k2 = (self.fresh() for _ in range(8))
        it = "tensor<i64>"
        self.line(f"%{z} = arith.constant dense<0> : {it}")
        self.nested("while")
        self.line(f"%{res}:2 = scf.while (%{h} = %{x.name}, %{k} = %{z}) : ({x.type}, {it}) -> ({x.type}, {it}) {{")
        self.depth += 1
        c, holds = self.condition(Val(h, (n,), lambda a: a[key]), True, threshold)
        b, q, qe, both = (self.fresh() for _ in range(4))
        self.line(f"%{b} = arith.constant dense<{bound}> : {it}")
        self.line(f"%{q} = opc.less_than %{k}, %{b} : ({it}, {it}) -> tensor<i1>")
        self.line(f"%{qe} = tensor.extract %{q}[] : tensor<i1>")
        self.line(f"%{both} = arith.andi %{c}, %{qe} : i1")
        self.line(f"scf.condition(%{both}) %{h}, %{k} : {x.type}, {it}")
        self.depth -= 1
        self.line("} do {")
        self.line(f"^bb0(%{hb}: {x.type}, %{kb}: {it}):")
        key = f"__carried_{h}"
        y = self.region_chain(x, "while", Val(hb, (n,), lambda a: a[key]), int(self.rng.integers(1, 3)))
        self.depth += 1
        fy = y.fn
        y = self.op(f"opc.tanh %{y.name} : ({y.type}) -> {{r}}", (n,), lambda a: np.tanh(fy(a)))
        self.line(f"%{one} = arith.constant dense<1> : {it}")
        self.line(f"%{k2} = opc.add %{kb}, %{one} : ({it}, {it}) -> {it}")
        self.line(f"scf.yield %{y.name}, %{k2} : {y.type}, {it}")
        self.depth -= 1
        self.line("}")
        body, p = y.fn, self.p

        def ref(a: Env) -> np.ndarray:
            v, trips = f(a), 0
            while trips < bound and holds({**a, key: v}):
                v, trips = body({**a, key: v}), trips + 1
            p.see(res, trips)
            return v
        return Val(f"{res}#0", (n,), ref)

    def generate(self) -> Program:
        k = int(self.rng.integers(1, 7))
        x0 = self.arg((k,))
        x = Val(x0, (k,), lambda a: a[x0])
        for _ in range(int(self.rng.integers(1, 6))):
            x = self.step(x)
        f = x.fn
        self.p.result = Val(x.name, x.feats, quiet(lambda a: np.asarray(f(a))))
        return self.p


def generate(seed: int, index: int, kinds: tuple[str, ...] = BASIC + EXTENDED) -> Program:
    return Generator(seed, index, kinds).generate()


def check(module, prog: Program, seed: int, grad: bool, counts: dict[str, int] | None = None) -> list[str]:  # noqa: ANN001
    """Forward at every size against the oracle; with grad, <grad, v> of sum(dout * result) against
    central differences at two steps (a point where they disagree is not smooth: counted, skipped)."""
    defects = []
    f = getattr(module, prog.name)
    assert prog.result is not None
    oracle = prog.result.fn
    wrt = prog.float_args()
    dt, tol = np_dtype(prog.dtype), TOL[prog.dtype]
    counts = counts if counts is not None else {}

    def note(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1
    for n in SIZES:
        rng = np.random.default_rng([seed, n])
        feeds = prog.feeds(prog.arrays(n, rng))
        a = {k: v.astype(np.float64) if v.dtype == dt else v for k, v in feeds.items()}  # the rounded arguments
        try:
            got = f(*feeds.values())
        except Exception as err:  # noqa: BLE001 - a valid program that fails is a defect
            defects.append(f"{prog.name} ({prog.dtype}) at n={n}: raised {type(err).__name__}: {err}")
            continue
        try:
            want = oracle(a)
        except Ambiguous:  # a condition on the threshold: either answer is right
            note("near_threshold")
            continue
        if got.dtype != dt:
            defects.append(f"{prog.name} at n={n}: dtype {got.dtype}, expected {dt}")
            continue
        got = got.astype(np.float64)
        if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol) or (
                prog.dtype != "f64" and want.size and np.abs(got - want).max() > tol * (1 + np.abs(want).max())):
            bad = "shape " + str(got.shape) if got.shape != want.shape else \
                f"max error {float(np.abs(got - want).max()):.3g}"
            defects.append(f"{prog.name} ({prog.dtype}) at n={n}: {bad}, expected shape {want.shape}")
            continue
        if not grad or want.size == 0 or prog.dtype not in GRAD_DTYPES:
            continue
        dout = rng.standard_normal(want.shape)
        try:
            grads = getattr(module, f"{prog.name}_grad")(*feeds.values(), dout.astype(dt))
        except Exception as err:  # noqa: BLE001
            defects.append(f"{prog.name}_grad ({prog.dtype}) at n={n}: raised {type(err).__name__}: {err}")
            continue
        grads = grads if isinstance(grads, tuple) else (grads,)
        d = {k: rng.standard_normal(a[k].shape) for k in wrt}
        analytic = sum(float(np.sum(g.astype(np.float64) * d[k])) for g, k in zip(grads, wrt))

        def loss(t: float) -> float:
            return float(np.sum(dout * oracle({**a, **{k: a[k] + t * d[k] for k in wrt}})))
        try:
            fd = [(loss(h) - loss(-h)) / (2 * h) for h in (1e-5, 1e-6)]
        except Ambiguous:  # a step crosses a condition's threshold
            note("not_smooth")
            continue
        scale = 1 + abs(fd[1])
        if abs(fd[0] - fd[1]) > 1e-5 * scale:
            note("not_smooth")
            continue
        if abs(analytic - fd[1]) > GRAD_TOL[prog.dtype] * scale:
            defects.append(f"{prog.name}_grad ({prog.dtype}) at n={n}: <grad, v> = {analytic!r}, "
                           f"differences {fd[1]!r}")
    for key, what in prog.seen.items():  # how many ifs took both branches, whiles ran several trip counts
        if len(what) > 1:
            note("branch_both" if isinstance(next(iter(what)), bool) else "while_trips_vary")
    return defects


def run(seed: int, start: int, count: int, grad: bool = True, counts: dict[str, int] | None = None,
        kinds: tuple[str, ...] = BASIC + EXTENDED, decompose: str | None = None) -> tuple[int, list[str]]:
    """Programs start .. start + count - 1 compiled as one module (with `decompose`), each checked;
    a batch the compiler refuses is compiled program by program, each refusal a defect."""
    import opc

    def build(progs: list[Program]):  # noqa: ANN202 - gradients of the f64 / f32 programs only
        return opc.compile("".join(p.text() for p in progs), grad=grad and progs[0].dtype in GRAD_DTYPES,
                           decompose=decompose)

    progs = [generate(seed, i, kinds) for i in range(start, start + count)]
    if counts is not None:
        for p in progs:
            for k in p.kinds | {f"dtype_{p.dtype}"}:
                counts[k] = counts.get(k, 0) + 1
    where = f" (decompose={decompose})" if decompose else ""
    defects = []
    # one module for the programs with gradients (f64, f32), one for the forward-only dtypes
    for group in ([p for p in progs if p.dtype in GRAD_DTYPES], [p for p in progs if p.dtype not in GRAD_DTYPES]):
        if not group:
            continue
        try:
            module = build(group)
        except Exception:  # noqa: BLE001 - find the program(s) the compiler rejects or crashes on, check the others
            good = []
            for p in group:
                try:
                    build([p])
                    good.append(p)
                except opc.OpcError as one:
                    defects.append(f"{p.name} ({p.dtype}): does not compile: {one}{where}")
                except Exception as crash:  # noqa: BLE001 - an internal compiler error
                    defects.append(f"{p.name} ({p.dtype}): internal compiler error: {type(crash).__name__}: "
                                   f"{crash}{where}")
            if len(good) == len(group):
                raise
            group = good
            if not group:
                continue
            module = build(group)
        defects += [d + where for p in group for d in check(module, p, seed, grad, counts)]
    return count, defects


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", type=int, default=0, help="the first program")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--batch", type=int, default=40)
    ap.add_argument("--no-grad", action="store_true", help="forward only (no gradient functions compiled)")
    ap.add_argument("--decompose", choices=["none", "all"], default="none",
                    help="compile with decompose='all' (every composite op in primitives)")
    ap.add_argument("--show", type=int, default=None, help="print program INDEX")
    ns = ap.parse_args(argv)
    if ns.show is not None:
        print(generate(ns.seed, ns.show).text())
        return 0
    total, defects, counts, began = 0, [], {}, time.monotonic()
    for b in range(ns.index, ns.index + ns.count, ns.batch):
        n, d = run(ns.seed, b, min(ns.batch, ns.index + ns.count - b), not ns.no_grad, counts,
                   decompose=None if ns.decompose == "none" else ns.decompose)
        total, defects = total + n, defects + d
        print(f"[{time.monotonic() - began:.0f} s] programs {ns.index}-{b + n - 1}: {len(defects)} defects",
              *(f"\nDEFECT {x}" for x in d), file=sys.stderr, flush=True)
    what = ("forward" if ns.no_grad else "forward and gradient") + (", decompose='all'" if ns.decompose == "all" else "")
    print(f"{total} programs with run-time sizes at n = {SIZES}, {what}: {len(defects)} defects, "
          f"{counts.pop('not_smooth', 0)} gradient points not smooth")
    print("drawn (programs holding each):", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for d in defects:
        print("DEFECT", d)
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
