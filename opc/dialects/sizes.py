"""The run-time sizes of a function: which `?` dim of which value is which size.

Each `?` dim of an argument starts as a size symbol of its own (n0, n1, ...); each op's
shape rule then states its results' dims from its operands' (an add's `?` dim is its
operands' `?` dim, a reshape's inferred dim is the element count over the static dims, a
reduction drops dims) and the sizes an op needs equal are unified: two symbols become one
(the binding then checks at the call that both arguments give the same size), a symbol
equal to an expression of others is replaced by it, and what remains (two expressions)
is a constraint checked at the call, before any kernel runs. So every `?` dim of every
value is a polynomial over the function's size parameters (opc/symbolic.py), and
shape_of() answers with it while the function is lowered (`symbolic_shapes`).

A size can also come from the data (torch's unbacked SymInt): `opc.nonzero`'s count is known
only once the op has run. Its rule makes a fresh symbol with `fresh_data`, recorded in `data`
with an upper bound over the sizes before it (the count of nonzero elements is at most the
element count); the op's lowering computes it at run time, and later ops use it like any other
symbol. Unified with a size known before the op runs (a gradient's dout argument), the data
symbol is replaced by that size and the op checks at run time that its count agrees (`predicted`).

A size no polynomial gives, max / min of two sizes or a size floor-divided by a number (ONNX
Slice's bounds clamped to a run-time dim: arith.maxsi / minsi / floordivsi on `index` values), is
a derived size (`derive`): a symbol of its own, one per formula, that the binding computes from the
others before the call and passes as a size parameter. It is never replaced by another size: an
equality with one is a constraint checked at the call.

An op with `?` dims and no rule here is refused, naming it: its lowering has not been
taught run-time sizes yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from xdsl.dialects import arith, func, scf, tensor
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block, Operation, SSAValue

from opc.dialects import opc, slices
from opc.dialects.control import CONTROL_OPS
from opc.dialects.kinds import ELEMENTWISE
from opc.dialects.opc import DYNAMIC, SYMBOLIC_SHAPES, shaped_type
from opc.dialects.opc_stack import PopOp
from opc.errors import UnsupportedError
from opc.symbolic import DERIVED, Size, Sym, SymbolicComparison, exact_quotient, parsed, product_quotient

Shape = tuple[Size, ...]


@dataclass
class Constraint:
    """lhs == rhs at the call, else ValueError(message with both sizes)."""

    lhs: Size
    rhs: Size
    what: str


@dataclass
class DataSize:
    """A size an op computes from the data it reads (opc.nonzero's count), or an `index` value read
    from a tensor that an op takes as a size (opc.full's rows from a loop's trip count)."""

    op: Operation
    bound: Size | None  # at most this, over the sizes known before the op runs (a result's allocation);
    # None: no bound known before the call (a value read from a tensor), the function allocates its results


DERIVED_OPS: dict[str, type[Operation]] = {"max": arith.MaxSIOp, "min": arith.MinSIOp, "floordiv": arith.FloorDivSIOp}
"""The `index` op computing each kind of derived size (symbolic.DERIVED), in the IR."""


@dataclass(frozen=True)
class DerivedSize:
    """A size computed from others at the call (symbolic.DERIVED: max, min, floordiv of a and b):
    ONNX Slice's bounds clamped to a run-time dim, a stepped slice's count."""

    kind: str
    a: Size
    b: Size


@dataclass
class FunctionSizes:
    """The size symbols of one function and every value's shape in them."""

    fn: func.FuncOp | None  # None: the ONNX importer's, fed op by op as it emits them
    shapes: dict[SSAValue, Shape] = field(default_factory=dict)
    scalars: dict[SSAValue, Size] = field(default_factory=dict)  # index values that are sizes (tensor.dim)
    subst: dict[str, Size] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # symbol -> "argument 'x' dim 0"
    sources: dict[str, tuple[SSAValue, int]] = field(default_factory=dict)  # symbol -> (argument or result, dim)
    data: dict[str, DataSize] = field(default_factory=dict)  # symbol -> the op computing it from data
    predicted: dict[str, str] = field(default_factory=dict)  # data symbol -> why it equals a size known before
    calls: dict[Operation, list[Size]] = field(default_factory=dict)  # a body's call -> its size arguments
    derived: dict[str, DerivedSize] = field(default_factory=dict)  # symbol -> how the call computes it
    derived_by: dict[DerivedSize, Sym] = field(default_factory=dict)  # the same formula, the same symbol
    count: int = 0

    # -- symbols -----------------------------------------------------------------------

    def fresh(self, where: str) -> Sym:
        name = f"n{self.count}"
        self.count += 1
        self.origin[name] = where
        return Sym.symbol(name)

    def fresh_data(self, op: Operation, bound: Size | None, what: str = "the count") -> Sym:
        """A size that `op` computes from data (at most `bound`): a symbol its lowering defines."""
        sym = self.fresh(f"{what} of {op.name}")
        self.data[sym.render()] = DataSize(op, bound)
        return sym

    def resolve(self, d: Size) -> Size:
        if isinstance(d, int):
            return d
        return d.substitute(lambda s: self.resolve(self.subst[s]) if s in self.subst else Sym.symbol(s))

    def unify(self, a: Size, b: Size, what: str) -> Size:
        """a and b are one size: a symbol is replaced by the other side (the later of two symbols
        goes, so the first argument's names stay), else a constraint checked at the call."""
        a, b = self.resolve(a), self.resolve(b)
        if a == b:
            return a
        if self.data_symbols(a) or self.data_symbols(b):
            return self.unify_data(a, b, what)
        if self.derived_symbols(a) or self.derived_symbols(b):  # its formula stays: equal is checked at the call
            self.constraints.append(Constraint(a, b, what))
            return a
        later_first = isinstance(a, Sym) and isinstance(b, Sym) and symbol_number(b) > symbol_number(a)
        for x, y in ((b, a), (a, b)) if later_first else ((a, b), (b, a)):
            if isinstance(x, Sym) and replaceable(x, y):
                self.subst[x.render()] = y
                return y
        if isinstance(a, int) and isinstance(b, int):
            raise UnsupportedError(f"{what}: sizes {a} and {b} differ")
        self.constraints.append(Constraint(a, b, what))
        return a

    def derived_symbols(self, d: Size) -> list[str]:
        return [] if isinstance(d, int) else sorted(n for n in d.symbols if n in self.derived)

    def derive(self, kind: str, a: Size, b: Size) -> Size:
        """max(a, b), min(a, b) or a // b (b a positive number): a number or one of a and b where the
        order of the two is known for every size, else a derived symbol (one per formula), which the
        binding computes at the call."""
        a, b = self.resolve(a), self.resolve(b)
        if isinstance(a, int) and isinstance(b, int):
            return DERIVED[kind](a, b)
        if kind == "floordiv":
            quotient = exact_quotient(a, b)
            if quotient is not None:
                return quotient
        elif self.nonnegative(a - b):
            return a if kind == "max" else b
        elif self.nonnegative(b - a):
            return b if kind == "max" else a
        key = DerivedSize(kind, a, b)
        if kind != "floordiv" and key not in self.derived_by:
            key = DerivedSize(kind, b, a) if DerivedSize(kind, b, a) in self.derived_by else key
        if key in self.derived_by:
            return self.derived_by[key]
        data = self.data_symbols(a) + self.data_symbols(b)
        if data:
            raise UnsupportedError(f"{kind}({a}, {b}): {data[0]} ({self.origin[data[0]]}) is known only when its op "
                                   "runs: a size clamped to it cannot be computed at the call")
        sym = self.fresh(f"{kind}({a}, {b})")
        self.derived[sym.render()] = key
        self.derived_by[key] = sym
        return sym

    def nonnegative(self, d: Size) -> bool:
        """d >= 0 for every size: a polynomial with no negative coefficient in sizes that are >= 0
        (every symbol but a derived one that may be negative: a clamp to [-1, dim - 1])."""
        if isinstance(d, int):
            return d >= 0
        return all(c >= 0 for _, c in d.terms) and all(self.nonnegative_symbol(n) for n in d.symbols)

    def nonnegative_symbol(self, name: str) -> bool:
        f = self.derived.get(name)
        if f is None:
            return True
        if f.kind == "max":
            return self.nonnegative(f.a) or self.nonnegative(f.b)
        if f.kind == "min":
            return self.nonnegative(f.a) and self.nonnegative(f.b)
        return self.nonnegative(f.a)

    def derived_table(self) -> list[tuple[str, str, str, str]]:
        """The derived sizes as the binding computes them: (symbol, kind, a, b), each after those it reads."""
        return [(n, f.kind, str(self.resolve(f.a)), str(self.resolve(f.b))) for n, f in self.derived.items()]

    def upper_bound(self, d: Size) -> Size | None:
        """d with each data size replaced by its bound: a size known before the call, at least d (the
        sizes are products of dims, monotone in each); None where a data size has no bound."""
        d = self.resolve(d)
        if isinstance(d, int):
            return d
        if any(self.data[n].bound is None or self.upper_bound(self.data[n].bound) is None  # type: ignore[arg-type]
               for n in self.data_symbols(d)):
            return None
        return d.substitute(lambda n: self.upper_bound(self.data[n].bound) if n in self.data  # type: ignore[arg-type]
                            else Sym.symbol(n))

    def value_size(self, v: SSAValue, user: Operation) -> Sym:
        """The size an `index` value read from a tensor gives (tensor.extract, arith.index_cast, ...):
        a data size of its own, defined where the value is computed, with no bound before the call."""
        if v in self.scalars:
            return cast(Sym, self.scalars[v])
        owner = v.owner
        if not isinstance(owner, Operation) or (self.fn is not None and owner.parent_block() is not self.fn.body.block):
            raise UnsupportedError(f"{user.name}: a size read from a tensor's values inside a loop or branch body "
                                   "(opc reads such sizes at a function's top level)")
        sym = self.fresh_data(owner, None, "the value")
        self.scalars[v] = sym
        return sym

    def value_sizes(self) -> dict[str, SSAValue]:
        """The data sizes read from values (value_size): symbol -> the `index` value giving it."""
        # by the data symbol's own name: one the analysis equated with a known size (`predicted`) maps to
        # that size in `scalars`, and still needs its definition, where its check runs
        unbounded: dict[Operation | Block, str] = {d.op: n for n, d in self.data.items() if d.bound is None}
        return {unbounded[v.owner]: v for v in self.scalars if v.owner in unbounded}

    def data_symbols(self, d: Size) -> list[str]:
        return [] if isinstance(d, int) else sorted(n for n in d.symbols if n in self.data)

    def unify_data(self, a: Size, b: Size, what: str) -> Size:
        """A data size equal to a size known before its op runs takes that size, and its op checks
        at run time that the count agrees (torch's deferred runtime assert); anything else would
        need a check opc cannot place, and is refused."""
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Sym) and x.is_symbol() and x.render() in self.data and replaceable(x, y) and all(
                    symbol_number(Sym.symbol(n)) < symbol_number(x) for n in ([] if isinstance(y, int) else y.symbols)):
                self.subst[x.render()] = y
                self.predicted[x.render()] = what
                return y
        # c * s = y: s = y / c where c divides y, a number or every term of a size (9 * count = 9 * n: a
        # gradient's rows, an argument's size, reshaped like the rows a nonzero's count gathered)
        for x, y in ((a, b), (b, a)):
            scaled = self.scaled_data_symbol(x)
            if scaled is None:
                continue
            quotient = exact_quotient(y, scaled[1])
            if isinstance(quotient, int) and quotient >= 0:
                self.subst[scaled[0]] = quotient
                self.predicted[scaled[0]] = what
                return y
            if isinstance(quotient, Sym) and scaled[1] > 1:
                self.unify_data(Sym.symbol(scaled[0]), quotient, what)
                return y
        name = (self.data_symbols(a) or self.data_symbols(b))[0]
        raise UnsupportedError(f"{what}: sizes {a} and {b} must be equal, and {name} ({self.origin[name]}) is "
                               "known only when its op runs: opc cannot check that equality")

    def scaled_data_symbol(self, x: Size) -> tuple[str, int] | None:
        """(s, c) where x is c * s, s a data symbol and c a whole number above 0 (a loop's stacked rows
        of c elements each, reshaped to a shape the model declares); else None."""
        if not isinstance(x, Sym) or len(x.symbols) != 1:
            return None
        (name,) = x.symbols
        c = x.substitute(lambda _: 1)
        if name not in self.data or not isinstance(c, int) or c <= 0 or Sym.symbol(name) * c != x:
            return None
        return name, c

    # -- the analysis ----------------------------------------------------------------------

    def seed(self, args: Sequence[SSAValue]) -> FunctionSizes:
        """Each `?` dim of each argument a symbol of its own."""
        for i, arg in enumerate(args):
            name = arg.name_hint or f"in{i}"
            dims: list[Size] = []
            for d, n in enumerate(shaped_type(arg).get_shape()):
                if n == DYNAMIC:
                    sym = self.fresh(f"argument '{name}' dim {d}")
                    self.sources[sym.render()] = (arg, d)
                    dims.append(sym)
                else:
                    dims.append(n)
            self.shapes[arg] = tuple(dims)
        return self

    def run(self) -> FunctionSizes:
        assert self.fn is not None
        self.seed(self.fn.args)
        for op in self.fn.body.walk():
            if op is self.fn:
                continue
            self.visit(op)
        for k, v in self.shapes.items():
            self.shapes[k] = tuple(self.resolve(d) for d in v)
        self.scalars = {k: self.resolve(v) for k, v in self.scalars.items()}
        for c in self.constraints:
            c.lhs, c.rhs = self.resolve(c.lhs), self.resolve(c.rhs)
        self.constraints = [c for c in self.constraints if c.lhs != c.rhs]
        return self

    def shape(self, v: SSAValue) -> Shape:
        return tuple(self.resolve(d) for d in self.shapes[v])

    def visit(self, op: Operation) -> None:
        if isinstance(op, func.ReturnOp):
            return
        if isinstance(op, (*CONTROL_OPS, scf.YieldOp, scf.ConditionOp, func.CallOp)):
            self.visit_control(op)
            return
        tensors = [v for v in (*op.operands, *op.results) if isinstance(v.type, opc.TensorType)]
        dynamic = any(DYNAMIC in shaped_type(v).get_shape() for v in tensors)
        if isinstance(op, tensor.DimOp):
            self.scalars[op.result] = self.dim_of(op)
            return
        if len(op.results) == 1 and isinstance(op.results[0].type, IndexType):
            value = self.index_value(op)
            if value is not None:
                self.scalars[op.results[0]] = value
            return
        if not any(isinstance(r.type, opc.TensorType) for r in op.results):
            return  # a scalar read from a tensor (tensor.extract of a run-time-sized one): no sizes to derive
        if not dynamic:
            for r in op.results:
                if isinstance(r.type, opc.TensorType):
                    self.shapes[r] = tuple(shaped_type(r).get_shape())
            return
        derived = rule_for(op)(self, op)
        for r, shape in zip(op.results, derived):
            declared = shaped_type(r).get_shape()
            out = []
            for d, (want, got) in enumerate(zip(declared, shape)):
                if want == DYNAMIC:
                    out.append(got)
                else:
                    if got != want:
                        self.unify(got, want, f"{op.name} result dim {d}")
                    out.append(want)
                if isinstance(got, Sym) and got.is_symbol() and got.render() in self.data:
                    self.sources.setdefault(got.render(), (r, d))  # where tensor.dim reads it (the importer)
            self.shapes[r] = tuple(out)

    # -- control flow (after opc-outline-control-flow: its regions call the lowered bodies) --------

    def visit_control(self, op: Operation) -> None:
        """A loop's carried values keep their sizes (the body's yields are unified with them), an
        if's results are its branches' (unified), a body's call gives its results' sizes from the
        lowered body's, with the body's sizes read off the call's operands."""
        if isinstance(op, scf.ForOp):
            self.carry(op.iter_args, op.body.block.args[1:], op.results)
        elif isinstance(op, scf.WhileOp):  # (its condition's forwarded values, where visited, refine these)
            self.carry(op.arguments, op.before_region.block.args, op.after_region.block.args, op.results)
        elif isinstance(op, (scf.IfOp, scf.IndexSwitchOp)):  # built with its regions (ONNX): its yields now
            for region in op.regions:
                term = region.block.last_op if region.blocks else None
                if isinstance(term, scf.YieldOp) and all(v in self.shapes for v in term.operands
                                                         if isinstance(v.type, opc.TensorType)):
                    self.yielded(term)
        elif isinstance(op, scf.ConditionOp):
            loop = op.parent_op()
            assert isinstance(loop, scf.WhileOp)
            self.carry(op.args, loop.after_region.block.args, loop.results)
        elif isinstance(op, scf.YieldOp):
            self.yielded(op)
        elif isinstance(op, func.CallOp):
            self.call(op)

    def carry(self, values: Sequence[SSAValue], *targets: Sequence[SSAValue]) -> None:
        for group in targets:
            for v, t in zip(values, group):
                if isinstance(v.type, opc.TensorType):
                    self.shapes[t] = self.shape(v)

    def yielded(self, op: scf.YieldOp) -> None:
        around = op.parent_op()
        if isinstance(around, scf.ForOp):
            targets: Sequence[SSAValue] = around.body.block.args[1:]
        elif isinstance(around, scf.WhileOp):
            targets = around.before_region.block.args
        else:
            assert isinstance(around, (scf.IfOp, scf.IndexSwitchOp))
            targets = around.results
        for k, (v, t) in enumerate(zip(op.operands, targets)):
            if t not in self.shapes:
                self.shapes[t] = self.shape(v)
                continue
            for d, (a, b) in enumerate(zip(self.shape(t), self.shape(v))):
                self.unify(a, b, f"{around.name} value #{k} dim {d} (a loop-carried value keeps its sizes, the "
                                 "branches of an if give the same)")

    def call(self, op: func.CallOp) -> None:
        """A call of a lowered body (opc/lowering/control_flow_lowering.py): its `?` sizes in the
        caller's terms, its size checks made the caller's."""
        callee = self.lowered(op.callee.root_reference.data)
        shapes = lowered_shapes(callee) if callee is not None else None
        if shapes is None:  # a body of static sizes
            for r in op.results:
                if isinstance(r.type, opc.TensorType):
                    self.shapes[r] = tuple(shaped_type(r).get_shape())
            return
        names, checks = lowered_sizes(callee)  # type: ignore[arg-type]
        given = [self.shape(v) for v in op.arguments]
        where = f"the body @{op.callee.root_reference.data}"
        if "opc.found_sizes" in callee.attributes:  # type: ignore[union-attr]  (size_lowering.FOUND_ATTR)
            raise UnsupportedError(f"{where}: a result whose size depends on the data (a count its ops make) "
                                   "cannot leave a loop or branch body yet")
        env: dict[str, Size] = {}
        for shape, dims in zip(shapes, given):  # a body's size is first an argument's lone dim
            for want, got in zip(shape, dims):
                if isinstance(want, str) and want in names:
                    env.setdefault(want, got)
        for name, kind, a, b in lowered_derived(callee):  # type: ignore[arg-type]  (a clamp in the body: the caller's)
            env[name] = self.derive(kind, substitute(parsed_size(a), env), substitute(parsed_size(b), env))
        missing = [n for n in names if n not in env]
        if missing:
            raise UnsupportedError(f"{where}: its run-time size {missing[0]} is no argument's dim")
        for k, (shape, dims) in enumerate(zip(shapes, given)):
            for d, (want, got) in enumerate(zip(shape, dims)):
                self.unify(got, substitute(want, env), f"{where} argument #{k} dim {d}")
        for lhs, rhs, what in checks:
            self.unify(substitute(lhs, env), substitute(rhs, env), f"{where}: {what}")
        for r, shape in zip(op.results, shapes[len(given):]):
            self.shapes[r] = tuple(substitute(d, env) for d in shape)
        self.calls[op] = [env[n] for n in names]

    def lowered(self, name: str) -> Operation | None:
        module = self.fn.parent_op() if self.fn is not None else None
        if module is None:
            return None
        return next((f for f in module.regions[0].block.ops
                     if isinstance(f, func.FuncOp) and f.sym_name.data == name), None)

    def index_value(self, op: Operation) -> Size | None:
        """The size an `index` op computes from sizes (constants, tensor.dim, + - *), else None."""
        if isinstance(op, arith.ConstantOp):
            return opc.int_of(op.value)
        args = [self.scalars.get(v) for v in op.operands]
        if any(a is None for a in args) or len(args) != 2:
            return None
        a, b = cast(list[Size], args)
        if isinstance(op, arith.AddiOp):
            return a + b
        if isinstance(op, arith.SubiOp):
            return a - b
        if isinstance(op, arith.MuliOp):
            return a * b
        kind = next((k for k, cls in DERIVED_OPS.items() if isinstance(op, cls)), None)
        if kind is not None and (kind != "floordiv" or (isinstance(b, int) and b > 0)):
            # (of a data size: a value computed where it runs, as before, never a size the call computes)
            return None if self.data_symbols(a) or self.data_symbols(b) else self.derive(kind, a, b)
        if isinstance(op, (arith.DivUIOp, arith.DivSIOp, arith.FloorDivSIOp)):
            return exact_quotient(a, b)  # sizes are >= 0: the three divisions agree where exact
        return None

    def size_operands(self, op: Operation, result: SSAValue) -> list[Size] | None:
        """The result's dims from the op's `index` size operands (None: it has none)."""
        sizes = list(op.sizes)  # type: ignore[attr-defined]
        if not sizes:
            return None
        given = iter(sizes)
        out: list[Size] = []
        for d in shaped_type(result).get_shape():
            if d != DYNAMIC:
                out.append(d)
                continue
            v = next(given)
            out.append(self.scalars[v] if v in self.scalars else self.value_size(v, op))
        return out

    def dim_of(self, op: tensor.DimOp) -> Size:
        index = op.index.owner
        if not (isinstance(index, arith.ConstantOp)):
            raise UnsupportedError("tensor.dim with a run-time dim number: give the dim as a constant")
        return self.shape(op.source)[opc.int_of(index.value)]

    def broadcast(self, shapes: Sequence[Shape], what: str) -> Shape:
        """NumPy broadcasting of symbolic shapes: a `?` pairs with 1 (broadcast) or an equal size."""
        rank = max((len(s) for s in shapes), default=0)
        out: list[Size] = []
        for i in range(rank):
            dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
            sizes = [d for d in dims if d != 1]
            size: Size = 1
            for d in sizes:
                size = d if size == 1 else self.unify(size, d, f"{what}: dim {i} of the broadcast operands")
            out.append(size)
        return tuple(out)


def lowered_shapes(fn: Operation) -> list[tuple[int | str, ...]] | None:
    """A lowered function's input and output shapes (opc/lowering/size_lowering.py's attribute)."""
    attr = fn.attributes.get("opc.arg_shapes")
    if attr is None:
        return None
    return [tuple(int(d.data) if d.data.lstrip("-").isdigit() else d.data for d in shape.data)  # type: ignore
            for shape in attr.data]  # type: ignore[attr-defined]


def lowered_sizes(fn: Operation) -> tuple[list[str], list[tuple[str, str, str]]]:
    names, checks = fn.attributes.get("opc.sizes"), fn.attributes.get("opc.size_checks")
    return ([n.data for n in names.data] if names is not None else [],  # type: ignore[attr-defined]
            [tuple(p.data for p in c.data) for c in checks.data] if checks is not None else [])  # type: ignore


def lowered_derived(fn: Operation) -> list[tuple[str, str, str, str]]:
    """A lowered body's derived sizes (size_lowering.DERIVED_ATTR): (symbol, kind, a, b), in order."""
    rows = fn.attributes.get("opc.derived_sizes")
    return [tuple(p.data for p in row.data) for row in rows.data] if rows is not None else []  # type: ignore


def parsed_size(text: str) -> int | str:
    """A size's text as the attributes hold it: a number, or a polynomial's text."""
    return int(text) if text.lstrip("-").isdigit() else text


def substitute(d: int | str, env: Mapping[str, Size]) -> Size:
    """A lowered body's size (a number, or a polynomial's text in its symbols) in the caller's sizes."""
    if isinstance(d, int):
        return d
    total: Size = 0
    for coeff, names in parsed(d):
        term: Size = coeff
        for n in names:
            term = term * env[n]
        total = total + term
    return total


def symbol_number(s: Sym) -> int:
    return int(s.render()[1:]) if s.is_symbol() else -1


def replaceable(x: Size, y: Size) -> bool:
    """x is a lone symbol that y can stand for (not an expression of x itself, not negative)."""
    if not (isinstance(x, Sym) and x.is_symbol()):
        return False
    return y >= 0 if isinstance(y, int) else x.render() not in y.symbols


# ---------------------------------------------------------------------------
# Shape rules: (sizes, op) -> the shape of each result
# ---------------------------------------------------------------------------

Rule = Callable[[FunctionSizes, Operation], list[Shape]]
RULES: dict[type[Operation], Rule] = {}  # by op class, each registered where it is written


def shape_rule(*classes: type[Operation]) -> Callable[[Callable[..., list[Shape]]], Callable[..., list[Shape]]]:
    """Registers a rule for the op classes (and their subclasses: a family's base class)."""
    def register(rule: Callable[..., list[Shape]]) -> Callable[..., list[Shape]]:
        for cls in classes:
            RULES[cls] = rule
        return rule
    return register


def elementwise(s: FunctionSizes, op: Operation) -> list[Shape]:
    shape = s.broadcast([s.shape(v) for v in op.operands], op.name)
    return [shape] * len(op.results)


@shape_rule(opc.AxisOp, opc.AxisGradOp)
def same_as_first(s: FunctionSizes, op: Operation) -> list[Shape]:
    """softmax and the like: every tensor operand and result of the first operand's shape."""
    first = s.shape(op.operands[0])
    for v in op.operands[1:]:
        if isinstance(v.type, opc.TensorType) and len(s.shape(v)) == len(first):
            for d, (a, b) in enumerate(zip(first, s.shape(v))):
                s.unify(a, b, f"{op.name} operand dim {d}")
    return [first] * len(op.results)


@shape_rule(opc.ReduceOp)
def reduction(s: FunctionSizes, op: opc.ReduceOp) -> list[Shape]:
    shape = s.shape(op.x)
    axes = op.axes_list()
    keep = opc.flag(op.keepdim)
    return [tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep
            else tuple(d for i, d in enumerate(shape) if i not in axes)]


@shape_rule(opc.TransposeOp)
def transpose(s: FunctionSizes, op: opc.TransposeOp) -> list[Shape]:
    shape = s.shape(op.x)
    return [tuple(shape[p] for p in op.perm_list())]


@shape_rule(opc.MatmulOp)
def matmul(s: FunctionSizes, op: opc.MatmulOp) -> list[Shape]:
    x, y = s.shape(op.x), s.shape(op.y)
    tx, ty = opc.flag(op.trans_x), opc.flag(op.trans_y)
    m, kx = (x[-1], x[-2]) if tx else (x[-2], x[-1])
    ky, n = (y[-1], y[-2]) if ty else (y[-2], y[-1])
    s.unify(kx, ky, "opc.matmul inner dims")
    batch = s.broadcast([x[:-2], y[:-2]], "opc.matmul batch dims")
    return [(*batch, m, n)]


@shape_rule(opc.FusedGemmEpilogueOp)
def fused_gemm(s: FunctionSizes, op: opc.FusedGemmEpilogueOp) -> list[Shape]:
    x, y = s.shape(op.x), s.shape(op.y)
    tx, ty = opc.flag(op.trans_x), opc.flag(op.trans_y)
    m, kx = (x[1], x[0]) if tx else (x[0], x[1])
    ky, n = (y[1], y[0]) if ty else (y[0], y[1])
    s.unify(kx, ky, "opc.fused_gemm_epilogue inner dims")
    s.unify(s.shape(op.bias)[0], n, "opc.fused_gemm_epilogue bias")
    return [(m, n)] * len(op.results)


@shape_rule(opc.LayerNormOp)
def layer_norm(s: FunctionSizes, op: opc.LayerNormOp) -> list[Shape]:
    x = s.shape(op.x)
    begin = op.begin()
    for v in (op.scale, op.bias):
        if v is not None:
            for d, (a, b) in enumerate(zip(x[begin:], s.shape(v))):
                s.unify(a, b, f"opc.layer_norm {v.name_hint or 'scale'} dim {d}")
    stats = x[:begin]
    return [x, stats, stats]


@shape_rule(opc.ReshapeOp)
def reshape(s: FunctionSizes, op: opc.ReshapeOp) -> list[Shape]:
    """The result's static dims as declared; its `?` dims: those that keep the operand's leading
    `?` dims, then at most one inferred from the element count."""
    x = s.shape(op.x)
    given = s.size_operands(op, op.result)
    if given is not None:
        s.unify(math.prod(x), math.prod(given), "opc.reshape element count")
        return [tuple(given)]
    declared = list(shaped_type(op.result).get_shape())
    for k in range(min(len(x), len(declared)), -1, -1):  # the longest prefix kept, then one dim inferred
        if not all((d == DYNAMIC and isinstance(n, Sym)) or d == n for d, n in zip(declared[:k], x[:k])):
            continue
        rest = declared[k:]
        if sum(d == DYNAMIC for d in rest) > 1:
            continue
        known = math.prod(d for d in rest if d != DYNAMIC)
        total = math.prod(x[k:])
        if DYNAMIC not in rest:
            if isinstance(total, int) and total != known:
                continue  # a shorter prefix (a `?` dim merged into the inferred one: [?, 5] -> [?])
            s.unify(total, known, "opc.reshape element count")
            return [(*x[:k], *rest)]
        q = product_quotient(x[k:], [d for d in rest if d != DYNAMIC])
        if q is None:
            continue
        return [(*x[:k], *(q if d == DYNAMIC else d for d in rest))]
    raise UnsupportedError(f"opc.reshape of {op.x.type} to {op.result.type}: give the result's `?` sizes as "
                           "index operands (they cannot be inferred)")


@shape_rule(opc.ConcatOp)
def concat(s: FunctionSizes, op: opc.ConcatOp) -> list[Shape]:
    shapes = [s.shape(v) for v in op.inputs]
    axis = op.axis_index()
    first = shapes[0]
    for other in shapes[1:]:
        for d, (a, b) in enumerate(zip(first, other)):
            if d != axis:
                s.unify(a, b, f"opc.concat operand dim {d}")
    total: Size = 0
    for sh in shapes:
        total = total + sh[axis]
    return [(*first[:axis], total, *first[axis + 1:])]


@shape_rule(opc.SliceOp)
def slice_(s: FunctionSizes, op: opc.SliceOp) -> list[Shape]:
    """A `?` dim is sliced whole (start 0, limit `?`, stride 1); static dims as declared."""
    x = s.shape(op.x)
    start, limit, strides = op.slice_params()
    declared = shaped_type(op.result).get_shape()
    return [tuple(n if (a, b, st) == (0, DYNAMIC, 1) else d
                  for n, d, a, b, st in zip(x, declared, start, limit, strides))]


def slice_size(s: FunctionSizes, op: Operation, n: int | SSAValue) -> Size:
    if isinstance(n, int):
        return n
    return s.scalars[n] if n in s.scalars else s.value_size(n, op)


@shape_rule(tensor.ExtractSliceOp)
def extract_slice(s: FunctionSizes, op: tensor.ExtractSliceOp) -> list[Shape]:
    """The slice's dims are its sizes (a size operand: the size it computes), unit dims dropped."""
    p = slices.params(op)
    return [tuple(slice_size(s, op, p.sizes[d]) for d in p.kept)]


@shape_rule(tensor.InsertSliceOp)
def insert_slice(s: FunctionSizes, op: tensor.InsertSliceOp) -> list[Shape]:
    """The dest's shape; the source's dims are the slice's sizes."""
    p = slices.params(op)
    for k, (d, got) in enumerate(zip(p.kept, s.shape(op.source))):
        s.unify(got, slice_size(s, op, p.sizes[d]), f"{op.name} source dim {k}")
    return [s.shape(op.dest)]


@shape_rule(opc.GatherOp)
def gather(s: FunctionSizes, op: opc.GatherOp) -> list[Shape]:
    x, idx, axis = s.shape(op.x), s.shape(op.indices), op.axis_index()
    return [(*x[:axis], *idx, *x[axis + 1:])]


@shape_rule(opc.GatherGradOp)
def gather_grad(s: FunctionSizes, op: opc.GatherGradOp) -> list[Shape]:
    """dx like x; dout must be gather's result shape (a data-dependent index count included)."""
    x, idx, axis = s.shape(op.x), s.shape(op.indices), op.axis_index()
    for d, (a, b) in enumerate(zip(s.shape(op.dout), (*x[:axis], *idx, *x[axis + 1:]))):
        s.unify(a, b, f"opc.gather_grad dout dim {d}")
    return [x]


@shape_rule(opc.NonzeroOp)
def nonzero(s: FunctionSizes, op: opc.NonzeroOp) -> list[Shape]:
    """[rank, count]: the count is a data size, at most x's element count."""
    x = s.shape(op.x)
    return [(len(x), s.fresh_data(op, math.prod(x)))]


@shape_rule(opc.TopkOp)
def topk(s: FunctionSizes, op: opc.TopkOp) -> list[Shape]:
    """x with its axis dim k: a data size (read from the k operand), at most the axis size."""
    x, axis = s.shape(op.x), op.axis_index()
    shape = (*x[:axis], s.fresh_data(op, x[axis], "k"), *x[axis + 1:])
    return [shape, shape]


@shape_rule(opc.UniqueOp)
def unique(s: FunctionSizes, op: opc.UniqueOp) -> list[Shape]:
    """The number of distinct slices along the axis, a data size at most the axis size: y's axis dim,
    first's and counts'; inverse has one element per slice."""
    x, axis = s.shape(op.x), op.axis_index()
    found = s.fresh_data(op, x[axis])
    return [(*x[:axis], found, *x[axis + 1:]), (found,), (x[axis],), (found,)]


@shape_rule(opc.NonMaxSuppressionOp)
def non_max_suppression(s: FunctionSizes, op: opc.NonMaxSuppressionOp) -> list[Shape]:
    """[rows, 3]: the rows kept, a data size at most B*C*N (scores' element count)."""
    s.unify(s.shape(op.boxes)[0], s.shape(op.scores)[0], f"{op.name} batch")
    s.unify(s.shape(op.boxes)[1], s.shape(op.scores)[2], f"{op.name} boxes")
    return [(s.fresh_data(op, math.prod(s.shape(op.scores)), "the rows"), 3)]


@shape_rule(opc.FullOp, opc.IotaOp)
def full(s: FunctionSizes, op: opc.FullOp | opc.IotaOp) -> list[Shape]:
    given = s.size_operands(op, op.result)
    if given is None:
        raise UnsupportedError(f"{op.name} with `?` dims takes their sizes as index operands")
    return [tuple(given)]


@shape_rule(PopOp)
def pop(s: FunctionSizes, op: PopOp) -> list[Shape]:
    """A loop's saved value: its `?` sizes as operands (the pushed value's, opc/autodiff/control_flow.py)."""
    given = s.size_operands(op, op.result)
    if given is None:
        raise UnsupportedError("opc_stack.pop with `?` dims takes their sizes as index operands")
    return [tuple(given)]


@shape_rule(opc.BroadcastToOp)
def broadcast_to(s: FunctionSizes, op: opc.BroadcastToOp) -> list[Shape]:
    """The `?` dims from the size operands, else from the operand's dim at the same place (counted
    from the end): a `?` operand dim pairs with an equal size, never broadcast from a run-time 1."""
    given = s.size_operands(op, op.result)
    x = s.shape(op.x)
    declared = shaped_type(op.result).get_shape()
    out: list[Size] = list(given) if given is not None else list(declared)
    lead = len(declared) - len(x)
    for i, d in enumerate(x):
        target = out[lead + i]
        if d == 1:
            continue
        if target == DYNAMIC:
            out[lead + i] = d
        else:
            s.unify(d, target, f"opc.broadcast_to dim {lead + i}")
    if DYNAMIC in out:
        raise UnsupportedError(f"opc.broadcast_to to {op.result.type}: a `?` dim the operand does not give takes "
                               "its size as an index operand")
    return [tuple(out)]


@shape_rule(opc.AttentionOp)
def attention(s: FunctionSizes, op: opc.AttentionOp) -> list[Shape]:
    """q [B.., Lq, D], k [B.., Lk, D], v [B.., Lk, Dv]: out [B.., Lq, Dv], lse [B.., Lq]."""
    q, k, v = s.shape(op.q), s.shape(op.k), s.shape(op.v)
    for d, (a, b, c) in enumerate(zip(q[:-2], k[:-2], v[:-2])):
        s.unify(s.unify(a, b, f"{op.name} q and k batch dim {d}"), c, f"{op.name} k and v batch dim {d}")
    s.unify(q[-1], k[-1], f"{op.name} q and k last dims")
    s.unify(k[-2], v[-2], f"{op.name} k and v key dims")
    if op.mask is not None:
        s.broadcast([s.shape(op.mask), (*q[:-1], k[-2])], f"{op.name} mask")
    return [(*q[:-1], v[-1]), q[:-1]]


@shape_rule(opc.AttentionGradOp)
def attention_grad(s: FunctionSizes, op: opc.AttentionGradOp) -> list[Shape]:
    """dq, dk, dv: the shapes of q, k, v."""
    return [s.shape(op.q), s.shape(op.k), s.shape(op.v)]


@shape_rule(arith.ConstantOp)
def constant(s: FunctionSizes, op: Operation) -> list[Shape]:
    return [tuple(shaped_type(r).get_shape()) for r in op.results]




def like_operands(s: FunctionSizes, op: Operation) -> list[Shape]:
    """The grads and nn ops: a result whose declared shape is an operand's (dx like x, dscale like
    scale) has that operand's sizes; else one whose only `?` dim is the batch (dim 0) has the first
    operand's batch (a conv's or a pool's output). Anything else is refused."""
    tensors = [v for v in op.operands if isinstance(v.type, opc.TensorType)]
    out = []
    for r in op.results:
        declared = shaped_type(r).get_shape()
        same = [v for v in tensors if shaped_type(v).get_shape() == declared]
        if same:
            out.append(s.shape(same[0]))
            continue
        first = s.shape(tensors[0]) if tensors else ()
        if declared and declared[0] == DYNAMIC and DYNAMIC not in declared[1:] and first and isinstance(first[0], Sym):
            out.append((first[0], *declared[1:]))
            continue
        if DYNAMIC in declared:
            raise UnsupportedError(f"'{op.name}': the run-time sizes of its result {r.type} do not follow from "
                                   "its operands' here")
        out.append(tuple(declared))
    return out


def rule_for(op: Operation) -> Rule:
    if isinstance(op, ELEMENTWISE):
        return elementwise
    for cls, rule in RULES.items():
        if isinstance(op, cls):
            return rule
    return like_operands


def analyze(fn: func.FuncOp) -> FunctionSizes:
    return FunctionSizes(fn).run()


def has_dynamic_shapes(fn: func.FuncOp) -> bool:
    return any(isinstance(v.type, opc.TensorType) and DYNAMIC in shaped_type(v).get_shape()
               for op in fn.walk() for v in (*op.operands, *op.results)) or any(
        isinstance(a.type, opc.TensorType) and DYNAMIC in shaped_type(a).get_shape() for a in fn.args)


@contextmanager
def symbolic_shapes(table: Mapping[SSAValue, Shape] | None) -> Iterator[None]:
    """shape_of() answers with `table`'s symbolic shapes while the block runs (the lowering)."""
    token = SYMBOLIC_SHAPES.set(table)
    try:
        yield
    finally:
        SYMBOLIC_SHAPES.reset(token)


__all__ = ["DERIVED_OPS", "Constraint", "DataSize", "DerivedSize", "FunctionSizes", "SymbolicComparison", "analyze",
           "has_dynamic_shapes", "symbolic_shapes"]
