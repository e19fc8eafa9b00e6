"""Sizes known only at run time: a `?` dim as a polynomial over size symbols (n0, n1, ...).

A function's `?` argument dims are its size symbols; every other `?` size (a result's, an
intermediate's) is a polynomial over them with integer coefficients: `n0`, `n0*64`,
`n0*n1 + 3`. The lowering computes with them as it does with ints (`math.prod(shape)`
works), the C code reads them as expressions over the function's size parameters
(`opc_n0 * 64`), and the binding evaluates them when it allocates results. Comparing a
symbolic size with a number (`n > 64`) has no answer at compile time: it raises
SymbolicComparison, so that a decision taken on a size is never taken by accident.

It imports nothing of the compiler, so that loading a compiled module stays light.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping

Monomial = tuple[str, ...]  # sorted symbol names (repeats for powers); () is the constant term


class SymbolicComparison(TypeError):
    """A comparison of a run-time size whose answer depends on the size."""


class Sym:
    """An integer polynomial over size symbols; immutable, hashable, compared structurally."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, int]):
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(sorted((m, c) for m, c in terms.items() if c))

    @staticmethod
    def symbol(name: str) -> Sym:
        return Sym({(name,): 1})

    @property
    def symbols(self) -> set[str]:
        return {s for m, _ in self.terms for s in m}

    def is_symbol(self) -> bool:
        return len(self.terms) == 1 and len(self.terms[0][0]) == 1 and self.terms[0][1] == 1

    # -- arithmetic: results are ints where the polynomial is a constant -----------------

    def substitute(self, value_of: Callable[[str], int | Sym]) -> int | Sym:
        """The polynomial with each symbol replaced by value_of(its name)."""
        out: int | Sym = 0
        for monomial, coeff in self.terms:
            term: int | Sym = coeff
            for name in monomial:
                term = term * value_of(name)
            out = out + term
        return out

    def __add__(self, other: int | Sym) -> int | Sym:
        terms = dict(self.terms)
        for m, c in as_sym(other).terms:
            terms[m] = terms.get(m, 0) + c
        return simplify(Sym(terms))

    __radd__ = __add__

    def __neg__(self) -> int | Sym:
        return simplify(Sym({m: -c for m, c in self.terms}))

    def __sub__(self, other: int | Sym) -> int | Sym:
        return self + -other

    def __rsub__(self, other: int | Sym) -> int | Sym:
        return -self + other

    def __mul__(self, other: int | Sym) -> int | Sym:
        terms: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in as_sym(other).terms:
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return simplify(Sym(terms))

    __rmul__ = __mul__

    def __floordiv__(self, other: int | Sym) -> int | Sym:
        """Exact division only (a reshape's inferred dim): by an int dividing every coefficient,
        or by a monomial dividing every term."""
        quotient = exact_quotient(self, other)
        if quotient is None:
            raise SymbolicComparison(f"{self} is not a multiple of {other} for every size")
        return quotient

    # -- comparisons -------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return False  # a constant polynomial is an int (simplify), never a Sym
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(self.terms)

    def _order(self, other: object) -> bool:
        raise SymbolicComparison(f"the order of run-time size {self} and {other} is known only at run time")

    __lt__ = __le__ = __gt__ = __ge__ = _order

    def __index__(self) -> int:
        raise SymbolicComparison(f"run-time size {self} used where a compile-time number is needed")

    __int__ = __index__

    # -- text ----------------------------------------------------------------------------

    def render(self, prefix: str = "") -> str:
        """`n0*64 + 3`; prefix names the symbols (`opc_` in C, whose parameters are opc_n0, ...)."""
        parts = []
        for m, c in self.terms:
            factors = [prefix + s for s in m]
            if c != 1 or not factors:
                factors.insert(0, str(c) if c >= 0 else f"({c})")
            parts.append("*".join(factors))
        return " + ".join(parts)

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Sym({self})"

    def c(self) -> str:
        return f"({self.render('opc_')})" if len(self.terms) > 1 else self.render("opc_")


Size = int | Sym


def as_sym(v: int | Sym) -> Sym:
    return v if isinstance(v, Sym) else Sym({(): int(v)})


def simplify(s: Sym) -> int | Sym:
    if not s.terms:
        return 0
    if len(s.terms) == 1 and s.terms[0][0] == ():
        return s.terms[0][1]
    return s


def exact_quotient(a: int | Sym, b: int | Sym) -> int | Sym | None:
    a, b = as_sym(a), as_sym(b)
    if len(b.terms) != 1:
        return a if a == b else None
    (mb, cb), = b.terms
    out: dict[Monomial, int] = {}
    for m, c in a.terms:
        rest = list(m)
        for s in mb:
            if s not in rest:
                return None
            rest.remove(s)
        if cb == 0 or c % cb:
            return None
        out[tuple(rest)] = c // cb
    return simplify(Sym(out))


def product_quotient(num: Iterable[int | Sym], den: Iterable[int | Sym]) -> int | Sym | None:
    """prod(num) / prod(den) where exact: equal factors cancel first (a reshape's `[b, h, n + p, d]`
    to `[-1, n + p, d]`, whose sum no monomial divides), the rest by exact_quotient."""
    rest, den = list(num), list(den)
    if 0 in den:
        return None
    left: list[int | Sym] = []
    for d in den:
        if d in rest:
            rest.remove(d)
        else:
            left.append(d)
    total: int | Sym = 1
    for d in rest:
        total = total * d
    divisor: int | Sym = 1
    for d in left:
        divisor = divisor * d
    return exact_quotient(total, divisor)


def is_static(d: object) -> bool:
    return isinstance(d, int)


def render_size(d: int | Sym) -> str:
    return str(d)


def c_size(d: int | Sym) -> str:
    """A size in C: the number, or the expression over the size parameters."""
    return d.c() if isinstance(d, Sym) else str(d)


def c_product(dims: Iterable[int | Sym]) -> str:
    """The product of sizes as one C expression (the static factors folded into one number)."""
    n: int | Sym = 1
    for d in dims:
        n = n * d
    return c_size(n)


TERM = re.compile(r"^(?:-?\d+|\(-\d+\)|[A-Za-z_]\w*)$")


@functools.lru_cache(maxsize=4096)
def parsed(expr: str) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """A Sym's text as (coefficient, symbols) terms: parsed once, evaluated at every call."""
    terms = []
    for part in expr.split(" + "):
        coeff, names = 1, []
        for factor in part.split("*"):
            if not TERM.match(factor):
                raise ValueError(f"malformed size expression {expr!r}")
            if factor[0].isalpha() or factor[0] == "_":
                names.append(factor)
            else:
                coeff *= int(factor.strip("()"))
        terms.append((coeff, tuple(names)))
    return tuple(terms)


def evaluate(expr: int | str, sizes: Mapping[str, int]) -> int:
    """A size as the binding stores it (an int, or a Sym's text) at the given symbol values."""
    if isinstance(expr, int):
        return expr
    total = 0
    for coeff, names in parsed(expr):
        for name in names:
            coeff *= sizes[name]
        total += coeff
    return total


# A size computed from others at the call where no polynomial gives it (ONNX Slice's clamping of a
# bound to a run-time dim): `max(a, b)`, `min(a, b)`, `a // b` (b a positive number). Such a size is
# a symbol of its own, a size parameter the binding computes from the others before the call.
DERIVED: dict[str, Callable[[int, int], int]] = {"max": max, "min": min, "floordiv": operator.floordiv}


def evaluate_derived(derived: Iterable[tuple[str, str, int | str, int | str]], sizes: dict[str, int]) -> None:
    """Each derived size (name, kind, a, b), in order (one may use those before it), into sizes."""
    for name, kind, a, b in derived:
        sizes[name] = DERIVED[kind](evaluate(a, sizes), evaluate(b, sizes))
