"""`opc check --target DEVICE.toml [--ops ...] [--case ID [--show]]`: every kernel
a device brings ([external.OP] in its .toml) against opc's own reference, over
the full grid and the op's reference inputs.

For each kernel, the grid is every combination of the op's enumerable
attributes (bools, enumerations, cast's dtype) times every dtype, as far as
the op's verifier admits them:
  - a combination the kernel admits runs at every size of the op's grid
    (size 1, odd sizes, sizes past a GEMM tile, rows around vector widths;
    every trans flag is an attribute) and on the op's reference inputs (a
    table beside each grid: IEEE specials, large magnitudes, constant rows,
    every epsilon, cast ranges), one row per case: error vs budget, pass or
    FAIL (naming the worst element and a `--case ID --show` rerun);
  - any other combination is one `fallback` row saying why (which value the
    kernel does not take) and which route it takes on the device instead;
  - a declared dtype the op does not admit, or an op without a grid here,
    is one `n/a` row saying so. Nothing is left out silently.

The reference is the op compiled for opc's built-in cpu target: its own
kernel for a forward op, the composite (or invoke) rule for a grad op; in f64
for float cases (same inputs, widened), in the case's dtype for ops that must
match bit for bit. Inputs, seeds and budgets: opc/check_inputs.py.

All cases of a run are built into two modules (device and reference: a C
build costs about half a second); they run in a child process, so a kernel
that crashes or hangs is one FAIL row and the run goes on.
"""

from __future__ import annotations

import ctypes
import io
import itertools
import math
import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import BoolAttr, IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.utils.exceptions import VerifyException

from opc.api import compile
from opc.check_inputs import Operand, Worst, case_id, case_seed, compare, compare_exact, draw, tolerance
from opc.check_inputs import is_float as is_float_dtype
from opc.dialects import opc as o
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import is_float
from opc.dtypes import MLIR_DTYPES, numpy_dtype, numpy_name
from opc.errors import InputError, OpcError
from opc.ops.registry import REGISTRY
from opc.targets.device_kernels import ExternalKernel, attribute_kinds, domain, op_classes, show
from opc.targets.routing import route_op
from opc.targets.target import Target, get_target

# ---------------------------------------------------------------------------
# The grid: sizes per op family
# ---------------------------------------------------------------------------

# M, K, N: all 1; odd; past the tiles of opc's GEMM (MC = 144 rows, KC = 256, NR = 16 columns), odd too.
GEMM_SIZES = ((1, 1, 1), (7, 5, 3), (150, 260, 21))
# ... and N, then K, around vector widths (a kernel's tail loop), at a few rows.
GEMM_TAILS = (*((2, 3, n) for n in (9, 17, 33, 65)), (3, 17, 4))
ELEMENTWISE_SHAPES = ((1,), (7,), (3, 5), (2, 3, 37))
BINARY_SHAPES = (((1,), (1,)), ((7,), (7,)), ((3, 5), (5,)), ((4, 1), (1, 6)), ((2, 3, 37), (2, 3, 37)))
REDUCE_CASES = (((1,), (0,)), ((7,), (0,)), ((3, 5), (1,)), ((3, 5), (0,)), ((2, 3, 37), (0, 2)), ((2, 3, 37), ()))
TRANSPOSE_CASES = (((1,), (0,)), ((3, 5), (1, 0)), ((2, 3, 37), (2, 0, 1)), ((2, 3, 37), (1, 2, 0)))
WIDTHS = (*range(2, 18), 31, 32, 33, 63, 64, 65)
"""Row lengths around vector widths (4, 8, 16, 32, 64 lanes): a kernel's main loop and its tail."""
FLAT_WIDTHS = (3, 5, 9, 15, 16, 17, 31, 33, 63, 65)
"""Elementwise sizes one short of and one past each vector width (a flat loop's tail)."""

EXACT_OPS = {"opc.cast", "opc.cast_grad", "opc.relu", "opc.relu_grad", "opc.select", "opc.transpose", "opc.reshape",
             "opc.broadcast_to", "opc.maximum", "opc.minimum", "opc.neg", "opc.abs", "opc.reduce_max", "opc.full",
             "opc.greater_than", "opc.less_than", "opc.equal", "opc.reduce_min"}  # fmt: skip
CASE_TIMEOUT_S = 120.0
ROUTE_WORDS = {"kernel": "-> opc's own kernel", "invoke": "-> invoke rule", "composite": "-> composite rule",
               "cannot run": "-> CANNOT RUN on the device (no opc kernel there, no rule)"}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """One size of a grid: its label, argument types, how to build the op on them, and its inputs."""

    label: str
    args: tuple[TensorType, ...]
    make: Callable[[Sequence[SSAValue]], Operation]
    fill: str = "uniform"  # the input recipe (opc/check_inputs.py FILLS) of the float operands
    scale: float = 2.0  # uniform inputs in [-scale, scale]
    n: int = 0  # the length of the op's reductions (0: elementwise): its error budget grows with it
    labels: int = 0  # integer operands are class labels in [0, labels)
    cond: float = 1.0  # the budget's factor for inputs ill-conditioned on purpose

    def but(self, fill: str, **changes: Any) -> Shape:
        """The same case with another input recipe (named in the label)."""
        return replace(self, label=f"{self.label} {fill}", fill=fill, **changes)


Grid = Callable[[type[Operation], dict[str, Attribute], Attribute], list[Shape]]


def tensor(shape: Sequence[int], element: Attribute) -> TensorType:
    return TensorType(element, list(shape))


def gemm_args(props: dict[str, Attribute], dtype: Attribute, m: int, k: int, n: int) -> tuple[TensorType, ...]:
    tx, ty = (o.flag(cast(BoolAttr, props[k])) for k in ("trans_x", "trans_y"))
    return tensor([k, m] if tx else [m, k], dtype), tensor([n, k] if ty else [k, n], dtype)


def fused_gemm_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    act = props["activation"].data
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])
    return [Shape(f"M={m} K={k} N={n}", (*gemm_args(props, dtype, m, k, n), tensor([n], dtype)),
                  lambda a: o.FusedGemmEpilogueOp(a[0], a[1], a[2], tx, ty, act), scale=1.0, n=k)
            for m, k, n in GEMM_SIZES + GEMM_TAILS]


def fused_gemm_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    act = props["activation_grad"].data
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])
    shapes = []
    for m, k, n in GEMM_SIZES + GEMM_TAILS:
        z = (tensor([m, n], dtype),) if act != "none" else ()
        make = (lambda a: o.FusedGemmEpilogueGradOp(a[0], a[1], a[2], a[3], tx, ty, act)) if z else \
            (lambda a: o.FusedGemmEpilogueGradOp(a[0], a[1], None, a[2], tx, ty, act))
        shapes.append(Shape(f"M={m} K={k} N={n}", (*gemm_args(props, dtype, m, k, n), *z, tensor([m, n], dtype)),
                            make, scale=1.0, n=max(m, k, n)))
    return shapes


def matmul_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])
    shapes = [Shape(f"M={m} K={k} N={n}", gemm_args(props, dtype, m, k, n), lambda a: o.MatmulOp(a[0], a[1], tx, ty),
                    scale=1.0, n=k) for m, k, n in GEMM_SIZES + GEMM_TAILS]
    x, y = gemm_args(props, dtype, 7, 5, 3)
    batched = (tensor([2, *x.get_shape()], dtype), tensor([2, *y.get_shape()], dtype))
    return [*shapes, Shape("B=2 M=7 K=5 N=3", batched, lambda a: o.MatmulOp(a[0], a[1], tx, ty), scale=1.0, n=5)]


def gemm_inputs(shapes: list[Shape]) -> list[Shape]:
    """IEEE specials in x of the largest case: a NaN or inf poisons its row of the output, the other
    rows still check the arithmetic (specials in y or bias would poison whole columns)."""
    return [s.but("specials-in-x") for s in shapes if s.label == "M=150 K=260 N=21"]


def label(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def widths(shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The grid's shapes, then vectors of every length in WIDTHS it lacks."""
    return [*shapes, *((w,) for w in FLAT_WIDTHS if (w,) not in shapes)]


def unary_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, dtype),), lambda a: cls.create(operands=[a[0]], result_types=[a[0].type],
                                                                      properties=dict(props)))
            for s in widths(ELEMENTWISE_SHAPES)]


def elementwise_inputs(shapes: list[Shape]) -> list[Shape]:
    """IEEE specials in every operand at every size of two elements or more; large magnitudes (exp
    overflows and underflows) at one size."""
    special = [s.but("specials") for s in shapes if s.label in ("7", "3x5", "2x3x37", "3")]
    return special + [s.but(f) for s in shapes if s.label == "3x5" for f in ("large", "large-negative")]


def activation_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, dtype),) * 2, lambda a: cls.create(
        operands=list(a), result_types=[a[0].type], properties=dict(props))) for s in widths(ELEMENTWISE_SHAPES)]


def binary_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    pairs = [*BINARY_SHAPES, *(((w,), (w,)) for w in FLAT_WIDTHS)]
    return [Shape(f"{label(s)}, {label(t)}", (tensor(s, dtype), tensor(t, dtype)), lambda a: cls(a[0], a[1]))
            for s, t in pairs]


def binary_inputs(shapes: list[Shape]) -> list[Shape]:
    return [s.but("specials") for s in shapes if s.label in ("3, 3", "7, 7", "3x5, 5", "4x1, 1x6", "2x3x37, 2x3x37")]


def select_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, MLIR_DTYPES["i1"]), tensor(s, dtype), tensor(s, dtype)),
                  lambda a: o.SelectOp(*a)) for s in widths(ELEMENTWISE_SHAPES)]


def cast_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    sat = "saturate" in props and props["saturate"].value.data != 0  # to float8 (the verifier refuses others)
    return [Shape(label(s), (tensor(s, dtype),), lambda a: o.CastOp(a[0], props["dtype"], saturate=sat))
            for s in widths(ELEMENTWISE_SHAPES)]


def cast_inputs(shapes: list[Shape]) -> list[Shape]:
    """Values around every integer type's range (casts saturate there), IEEE specials, f16's overflow
    and its ties; integer sources get their type's extremes."""
    return [s.but("cast-range") for s in shapes if s.label in ("7", "3x5", "2x3x37")]


def cast_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(f"{label(s)} dout {d}", (tensor(s, dtype), tensor(s, MLIR_DTYPES[d])), lambda a: o.CastGradOp(*a))
            for s in ELEMENTWISE_SHAPES[1:3] for d in ("f16", "bf16", "f32", "f64")]


def cast_grad_inputs(shapes: list[Shape]) -> list[Shape]:
    return [s.but("cast-range") for s in shapes if s.label.startswith("3x5")]


def reduce_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    keep = o.flag(props["keepdim"])
    cases = [*REDUCE_CASES, *(((3, w), (1,)) for w in WIDTHS)]
    return [Shape(f"{label(s)} axes={list(axes)}", (tensor(s, dtype),), lambda a, axes=axes: cls(a[0], axes, keep),
                  n=math.prod(s[a] for a in axes)) for s, axes in cases]


def reduce_inputs(shapes: list[Shape]) -> list[Shape]:
    """Specials along a row and across rows; large magnitudes, where a sum overflows f16 unless it is kept
    in f32; rows of negatives only (a max that starts at 0)."""
    return [s.but(f) for s in shapes if s.label in ("3x5 axes=[1]", "2x3x37 axes=[0, 2]")
            for f in ("specials", "wide", "large", "large-negative")]


def transpose_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(f"{label(s)} perm={list(p)}", (tensor(s, dtype),), lambda a, p=p: o.TransposeOp(a[0], p))
            for s, p in TRANSPOSE_CASES]


AXIS_CASES = (((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 37), 1), ((4, 70), -1))  # shape, axis


def axis_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    """softmax, log_softmax (one operand) and their grads (two): every axis layout, rows past a vector."""
    arity = len(cls.get_irdl_definition().operands)
    cases = [*AXIS_CASES, ((1, 1), -1), *(((3, w), -1) for w in WIDTHS)]
    return [Shape(f"{label(s)} axis={a}", (tensor(s, dtype),) * arity,
                  lambda v, a=a: cls.create(operands=list(v), result_types=[v[0].type],
                                            properties={"axis": IntegerAttr(a, 64)}), scale=3.0, n=s[a])
            for s, a in cases]


def axis_inputs(shapes: list[Shape]) -> list[Shape]:
    """Large magnitudes (exp(x) overflows or underflows without the max subtraction) along every axis
    layout, magnitudes up to 1e4, and IEEE specials."""
    big = [s.but(f) for s in shapes if s.label in ("3x5 axis=-1", "3x5 axis=0", "2x3x37 axis=1", "4x70 axis=-1")
           for f in ("large", "large-negative", "wide")]
    return big + [s.but("specials") for s in shapes if s.label in ("3x5 axis=-1", "2x3x37 axis=1")]


def cross_entropy_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    """softmax_cross_entropy (logits, label) or its grad (label, softmax, dloss) with class labels, per axis."""
    shapes = []
    for s, a in (((4, 10), -1), ((7, 3), 0), ((2, 5, 3), 1), *(((3, w), -1) for w in WIDTHS[::3])):
        lab = tensor(o.label_shape(s, a % len(s)), MLIR_DTYPES["i64"])
        if cls is o.SoftmaxCrossEntropyOp:
            args, make = (tensor(s, dtype), lab), lambda v, a=a: o.SoftmaxCrossEntropyOp(v[0], v[1], a)
        else:
            args = (lab, tensor(s, dtype), tensor(o.label_shape(s, a % len(s)), dtype))
            make = lambda v, a=a: o.SoftmaxCrossEntropyGradOp(v[0], v[1], v[2], a)  # noqa: E731
        shapes.append(Shape(f"{label(s)} axis={a}", args, make, scale=3.0, n=s[a], labels=s[a]))
    return shapes


def cross_entropy_inputs(shapes: list[Shape]) -> list[Shape]:
    return [s.but(f) for s in shapes if s.label in ("4x10 axis=-1", "7x3 axis=0")
            for f in ("large", "large-negative", "wide")]


LAYER_NORM_CASES = (((7,), 0), ((3, 5), 1), ((2, 3, 37), 1), ((4, 300), -1))  # shape, begin_norm_axis
EPSILONS = (0.0, 1e-12, 0.1)
"""layer_norm's epsilon besides its default 1e-5."""


def layer_norm_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    """layer_norm (x, scale, bias) or layer_norm_grad (x, scale, mean, rstd, dy) over each begin_norm_axis."""
    shapes = []
    for s, b in (*LAYER_NORM_CASES, ((3, 1), -1), *(((3, w), -1) for w in WIDTHS)):
        lead, trail, stats = s[:b % len(s)], s[b % len(s):], o.stats_element(dtype)
        if cls is o.LayerNormOp:
            args = (tensor(s, dtype), tensor(trail, dtype), tensor(trail, dtype))
            make = lambda v, b=b, e=1e-5: o.LayerNormOp(*v, begin_norm_axis=b, epsilon=e)  # noqa: E731
        else:
            args = (tensor(s, dtype), tensor(trail, dtype), tensor(lead, stats), tensor(lead, stats), tensor(s, dtype))
            make = lambda v, b=b: o.LayerNormGradOp(*v, begin_norm_axis=b)  # noqa: E731
        shapes.append(Shape(f"{label(s)} begin_norm_axis={b}", args, make, n=max(math.prod(lead), math.prod(trail))))
    return shapes


def layer_norm_inputs(shapes: list[Shape]) -> list[Shape]:
    """Every epsilon; constant rows (variance 0: epsilon alone keeps rstd finite) and near-constant ones
    (variance below epsilon), huge variances, IEEE specials (whose squares stay finite)."""
    out = []
    for s in shapes:
        if s.label not in ("3x5 begin_norm_axis=1", "2x3x37 begin_norm_axis=1"):
            continue
        b = int(s.label.rsplit("=", 1)[1])
        if len(s.args) == 5:  # layer_norm_grad: no epsilon
            out += [s.but("wide"), s.but("specials-finite-squares")]
            continue
        with_eps = [replace(s, label=f"{s.label} epsilon={e}", make=lambda v, b=b, e=e: o.LayerNormOp(
            *v, begin_norm_axis=b, epsilon=e)) for e in EPSILONS]
        out += with_eps + [s.but("constant"), with_eps[2].but("constant"), s.but("near-constant", cond=100.0),
                           s.but("wide"), s.but("specials-finite-squares")]
    return out


Inputs = Callable[[list[Shape]], list[Shape]]
"""An op's reference inputs (like OpInfo's): adversarial cases picked from its grid's shapes."""


def no_inputs(shapes: list[Shape]) -> list[Shape]:
    return []


GRIDS: dict[type[Operation], tuple[Grid, Inputs]] = {
    o.FusedGemmEpilogueOp: (fused_gemm_grid, gemm_inputs),
    o.FusedGemmEpilogueGradOp: (fused_gemm_grad_grid, gemm_inputs),
    o.MatmulOp: (matmul_grid, gemm_inputs),
    o.CastOp: (cast_grid, cast_inputs), o.CastGradOp: (cast_grad_grid, cast_grad_inputs),
    o.SelectOp: (select_grid, elementwise_inputs), o.TransposeOp: (transpose_grid, no_inputs),
    o.LayerNormOp: (layer_norm_grid, layer_norm_inputs), o.LayerNormGradOp: (layer_norm_grid, layer_norm_inputs),
    o.SoftmaxCrossEntropyOp: (cross_entropy_grid, cross_entropy_inputs),
    o.SoftmaxCrossEntropyGradOp: (cross_entropy_grid, cross_entropy_inputs),
}  # fmt: skip
"""Grids and reference inputs by op; families below serve the ops not named here."""
FAMILY_GRIDS: tuple[tuple[type, tuple[Grid, Inputs]], ...] = (
    (o.UnaryElementwiseOp, (unary_grid, elementwise_inputs)), (o.BinaryElementwiseOp, (binary_grid, binary_inputs)),
    (o.ActivationGradOp, (activation_grad_grid, elementwise_inputs)), (o.ReduceOp, (reduce_grid, reduce_inputs)),
    (o.AxisOp, (axis_grid, axis_inputs)), (o.AxisGradOp, (axis_grid, axis_inputs)),
)  # fmt: skip


def grid_for(name: str) -> Grid | None:
    """The op's grid followed by its reference inputs: one list of shapes per attributes and dtype."""
    cls = op_classes()[name]
    found = GRIDS.get(cls) or next((pair for base, pair in FAMILY_GRIDS if issubclass(cls, base)), None)
    if found is None:
        return None
    grid, extra = found

    def shapes(cls: type[Operation], props: dict[str, Attribute], dtype: Attribute) -> list[Shape]:
        unique: dict[str, Shape] = {}
        for s in grid(cls, props, dtype):  # a width the grid already has is one case, not two
            unique.setdefault(s.label, s)
        base = list(unique.values())
        return base + extra(base)

    return shapes


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


@dataclass
class Case:
    kernel: ExternalKernel
    attrs: dict[str, Any]  # enumerable attribute values, as the .toml spells them
    dtype: str
    shape: str
    status: str  # run | fallback | n/a
    why: str = ""
    spec: Shape | None = None  # what runs: the op on its arguments, and its inputs
    grad: bool = False  # the gradient of the function through the op (opc's vjp over the device's forward)
    reference64: bool = False  # the reference is the op in f64, on the same inputs
    reduces: bool = False
    function: str = ""  # the case's function in the device's module
    ref_function: str = ""  # ... and its reference in the reference module
    tol: float = 0.0
    error: float | None = None
    result: str = ""
    repro: str = ""  # the command that reruns the case alone (on a FAIL)

    @property
    def identity(self) -> tuple[str, ...]:
        return (self.kernel.op, self.attr_text, self.dtype, self.shape)

    @property
    def id(self) -> str:
        return case_id(*self.identity)

    @property
    def op(self) -> str:
        return self.kernel.op.removeprefix("opc.")

    @property
    def attr_text(self) -> str:
        return " ".join(f"{k}={show(v)}" for k, v in self.attrs.items()) or "-"


def combinations(name: str) -> list[dict[str, Any]]:
    """Every combination of the op's enumerable attributes (bools, enumerations, dtypes)."""
    names = [a for a in attribute_kinds(name) if domain(name, a) is not None]
    return [dict(zip(names, values)) for values in itertools.product(*(domain(name, a) or () for a in names))]


def to_attribute(name: str, attr: str, value: Any) -> Attribute:
    kind = attribute_kinds(name)[attr]
    if kind == "bool":
        return BoolAttr.from_bool(value)
    if kind == "dtype":
        return MLIR_DTYPES[value]
    return StringAttr(value)


def build_op(shape: Shape) -> tuple[Block, Operation]:
    block = Block(arg_types=list(shape.args))
    return block, shape.make(block.args)


def admitted(grid: Grid, name: str, props: dict[str, Attribute], dtype: str) -> list[Shape] | None:
    """The grid's shapes, if the op's verifier admits this attribute combination and dtype."""
    try:
        shapes = grid(op_classes()[name], props, MLIR_DTYPES[dtype])
        build_op(shapes[0])[1].verify()  # the sizes of a grid do not change what the verifier admits
    except (VerifyException, AssertionError, IndexError, ValueError):
        return None
    return shapes


def plan(target: Target, kernels: Sequence[ExternalKernel], only: str | None = None, grad: bool = False
         ) -> tuple[list[Case], list[func.FuncOp], list[func.FuncOp]]:
    """The rows of the run, in order, and per case that runs one device function and one reference
    function (`only`: the case of that id alone)."""
    cases: list[Case] = []
    funcs: list[func.FuncOp] = []
    refs: dict[tuple[str, ...], func.FuncOp] = {}
    for kernel in kernels:
        cases += plan_kernel(target, kernel, funcs, refs, only, grad)
    return cases, funcs, list(refs.values())


def plan_kernel(target: Target, kernel: ExternalKernel, funcs: list[func.FuncOp],
                refs: dict[tuple[str, ...], func.FuncOp], only: str | None = None, grad: bool = False) -> list[Case]:
    """One kernel's rows; the functions of the cases that run are added to funcs and refs (where the
    f16, bf16 and f32 cases of a shape share one f64 reference: half of a run's build)."""
    grid = grid_for(kernel.op)
    if grid is None:
        return [Case(kernel, {}, ",".join(kernel.dtypes), "-", "n/a",
                     f"opc check has no grid for {kernel.op} yet (opc/check.py GRIDS)")]
    cases: list[Case] = []
    seen: set[str] = set()
    cls = op_classes()[kernel.op]
    for attrs in combinations(kernel.op):
        props = {a: to_attribute(kernel.op, a, v) for a, v in attrs.items()}
        for dtype in MLIR_DTYPES:
            shapes = admitted(grid, kernel.op, props, dtype)
            if shapes is None:
                continue
            seen.add(dtype)
            probe = build_op(shapes[0])[1]
            why = kernel.mismatch(probe)
            if why is not None and only is not None:
                continue
            if why is not None:
                cases.append(Case(kernel, attrs, dtype, "(any)", "fallback", f"{why} {fallback_route(probe, target)}"))
                continue
            exact = kernel.op in EXACT_OPS or not dtype.startswith(("f", "bf"))
            grad_labels = {s.label for s in shapes[:GRAD_SHAPES] if s.fill == "uniform" and differentiable(kernel)}
            wide = dtype != "f64" and not exact
            shapes64 = grid(cls, props, MLIR_DTYPES["f64"]) if wide else shapes
            for shape, shape64 in zip(shapes, shapes64, strict=True):
                assert shape.label == shape64.label, (shape.label, shape64.label)
                case = Case(kernel, attrs, dtype, shape.label, "run", spec=shape, reference64=wide,
                            reduces=shape.n > 0, tol=0.0 if exact else tolerance(kernel.op, dtype, shape.n, shape.cond))
                tried = [case]
                if grad and shape.label in grad_labels:
                    n = max([shape.n, *(d for t in shape.args for d in t.get_shape())])
                    tried.append(replace(case, shape=f"{shape.label} grad", grad=True, reduces=True,
                                         tol=case.tol and GRAD_ROUNDINGS * tolerance(kernel.op, dtype, n, shape.cond)))
                chosen = [c for c in tried if only is None or c.id == only]
                if not chosen:
                    continue
                function = f"case{len(funcs)}"  # the forward; a grad case calls its gradient
                funcs.append(case_function(function, shape))
                key = (kernel.op, case.attr_text, "f64", shape.label) if wide else (function,)
                if key not in refs:
                    refs[key] = case_function(f"ref{len(refs)}", shape64)
                suffix = lambda c: "_grad" if c.grad else ""  # noqa: E731
                for c in chosen:
                    c.function, c.ref_function = function + suffix(c), refs[key].sym_name.data + suffix(c)
                cases += chosen
    if only is not None:
        return cases
    if not seen:
        return [Case(kernel, {}, ",".join(kernel.dtypes), "-", "n/a",
                     f"the grid of opc/check.py built no instance of {kernel.op} the verifier admits")]
    cases += [Case(kernel, {}, d, "-", "n/a", f"{kernel.op} does not admit dtype {d}")
              for d in kernel.dtypes if d not in seen]
    return cases


GRAD_SHAPES = 3
"""`--grad`: the gradient through a forward kernel at the first sizes of its grid (uniform inputs)."""
GRAD_ROUNDINGS = 4
"""A gradient's budget is the forward's four times over: its vjp rounds a few intermediates to the dtype."""


def differentiable(kernel: ExternalKernel) -> bool:
    """A forward op: its gradient runs opc's vjp over the device's forward (and the device's grad kernel
    where it brings one)."""
    return REGISTRY[kernel.op].kind != "grad"


def fallback_route(op: Operation, target: Target) -> str:
    """Where an instance the kernel does not take goes on the device, and whether it can run there."""
    from opc.explain import runs_as

    route = route_op(op, target)
    if route in ("invoke", "composite"):
        bad = runs_as(op, target)[1]
        if bad:
            return f"{ROUTE_WORDS[route]}, but {', '.join(bad)} CANNOT RUN on the device"
    return ROUTE_WORDS[route]


def case_function(name: str, shape: Shape) -> func.FuncOp:
    block, op = build_op(shape)
    for i, arg in enumerate(block.args):
        arg.name_hint = f"a{i}"
    block.add_op(op)
    block.add_op(func.ReturnOp(*op.results))
    return func.FuncOp(name, (list(shape.args), [r.type for r in op.results]), Region(block))


# ---------------------------------------------------------------------------
# Running: two modules, a child process
# ---------------------------------------------------------------------------


def inputs(case: Case) -> list[np.ndarray]:
    """The case's inputs, seeded by its identity: the same whatever else the run selects."""

    spec = case.spec
    assert spec is not None
    operands = [Operand(np.dtype(numpy_dtype(numpy_name(t.element_type))), tuple(t.get_shape()), i, spec.scale,
                        spec.labels) for i, t in enumerate(spec.args)]
    args = draw(spec.fill, operands, case_seed(*case.identity))
    if not case.grad:
        return args
    results = [r.type for r in build_op(spec)[1].results]
    douts = [Operand(np.dtype(numpy_dtype(numpy_name(element_of(t)))), shape_of(t), i, 1.0, 0)
             for i, t in enumerate(results)]
    return args + draw("uniform", douts, case_seed(*case.identity, "dout"))


def widened(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs of the f64 reference: float operands in f64 (exactly), the others as they are."""
    return [a.astype(np.float64) if is_float_dtype(a.dtype) else a for a in arrays]  # bf16, float8 too


def outputs(value: Any) -> list[np.ndarray]:
    return list(value) if isinstance(value, tuple) else [value]


def run_pair(device, reference, case: Case) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:  # noqa: ANN001
    """The case's inputs, the device's outputs and the reference's."""
    args = inputs(case)
    want = outputs(getattr(reference, case.ref_function)(*(widened(args) if case.reference64 else args)))
    got = outputs(getattr(device, case.function)(*args))
    return args, got, want


def verdict(case: Case, got: list[np.ndarray], want: list[np.ndarray]) -> Worst | None:
    return compare_exact(got, want) if case.tol == 0.0 else compare(got, want, case.reduces)


def describe_worst(case: Case, worst: Worst, args: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str:
    """`out 0 [2, 17]: device 0.1, reference 0.2 (x=800.5)`: where, what, and the inputs there."""
    spec = case.spec
    assert spec is not None
    block, op = build_op(spec)
    assert isinstance(op, IRDLOperation)
    names = [name for name, _ in type(op).get_irdl_definition().operands]
    results = [name for name, _ in type(op).get_irdl_definition().results]
    if case.grad:  # the gradient function: (operands, d-results) -> d-operands of the float operands
        names, results = names + [f"d{r}" for r in results], [f"d{n}" for n, t in zip(names, spec.args)
                                                               if is_float(t.element_type)]
    at = []
    shape = np.asarray(got[worst.output]).shape
    for name, a in zip(names, args):
        if a.ndim <= len(shape) and all(d in (1, s) for d, s in zip(a.shape, shape[len(shape) - a.ndim:])):
            idx = tuple(0 if d == 1 else i for d, i in zip(a.shape, worst.index[len(shape) - a.ndim:]))
            at.append(f"{name}={number(a[idx])}")
    where = f"{results[worst.output] if worst.output < len(results) else worst.output}{list(worst.index)}"
    return (f"{where}: device {number(worst.got)}, reference {number(worst.want)}"
            + (f" ({', '.join(at)})" if at else ""))


def number(v: Any) -> str:
    return f"{float(v):.7g}" if not isinstance(v, (bool, np.bool_)) else str(bool(v)).lower()


def run_one(device, reference, case: Case) -> tuple[float | None, str]:  # noqa: ANN001
    try:
        args, got, want = run_pair(device, reference, case)
    except RuntimeError as err:
        return None, f"kernel error: {str(err).removeprefix(f'{case.function}(): ')}"
    worst = verdict(case, got, want)
    if worst is None:
        return 0.0, ""
    detail = describe_worst(case, worst, args, got) if worst.error > case.tol else ""
    return worst.error, detail


def openmp_single_thread() -> None:
    """In a forked child: run OpenMP regions on this thread alone. libgomp is not fork-safe: the
    child inherits the parent's thread pool but not its threads, so the first parallel region
    (a GEMM of the reference, with OMP_NUM_THREADS > 1) waits forever for workers that do not exist."""
    from opc.threads import set_num_threads

    set_num_threads(1)  # opc's own count: its regions ask for num_threads(...) of it (opc/threads.py)
    try:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(1)
    except OSError:  # not gcc's OpenMP runtime: nothing of it is loaded
        pass


def child(conn, device, reference, cases: list[Case], start: int) -> None:  # noqa: ANN001
    import faulthandler

    faulthandler.disable()  # a crash is reported as a row, not as a Python stack dump
    openmp_single_thread()
    for i in range(start, len(cases)):
        conn.send(("start", i))
        try:
            outcome = run_one(device, reference, cases[i])
        except Exception as err:  # noqa: BLE001 - reported as the case's failure
            outcome = (None, f"{type(err).__name__}: {err}")
        conn.send(("done", i, *outcome))
    conn.close()


def run_cases(device, reference, cases: list[Case], progress: Callable[[int], None]) -> None:  # noqa: ANN001
    """Fill in each case's error and message, in a child process restarted past any case that kills it."""
    if "fork" not in multiprocessing.get_all_start_methods():
        for i, case in enumerate(cases):
            case.error, case.result = run_one(device, reference, case)
            progress(i + 1)
        return
    ctx = multiprocessing.get_context("fork")
    start = 0
    while start < len(cases):
        parent, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child, args=(child_end, device, reference, cases, start), daemon=True)
        proc.start()
        child_end.close()
        current, start = start, len(cases)
        while True:
            if not parent.poll(CASE_TIMEOUT_S):
                proc.kill()
                cases[current].result = f"timed out after {CASE_TIMEOUT_S:.0f} s"
                start = current + 1
                break
            try:
                message = parent.recv()
            except EOFError:
                proc.join()
                if current < len(cases) and proc.exitcode != 0:
                    cases[current].result = f"crashed ({describe_exit(proc.exitcode)})"
                    start = current + 1
                break
            if message[0] == "start":
                current = message[1]
            else:
                _, i, error, why = message
                cases[i].error, cases[i].result = error, why
                current = i + 1
                progress(i + 1)
        proc.join()
        parent.close()
        progress(min(start, len(cases)))


def describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


def select_kernels(target: Target, ops: str | Sequence[str] | None) -> list[ExternalKernel]:
    if not target.externals:
        raise InputError(f"{target.source}: the device has no kernels of its own ([external.OP] sections)")
    if not ops:
        return list(target.externals)
    names = [n.strip() for n in ops.split(",")] if isinstance(ops, str) else list(ops)
    chosen = []
    for n in filter(None, names):
        kernel = target.external_of(n if n.startswith("opc.") else f"opc.{n}")
        if kernel is None:
            have = ", ".join(k.op.removeprefix("opc.") for k in target.externals)
            raise InputError(f"--ops: the device has no kernel of its own for '{n}' (it has: {have})")
        chosen.append(kernel)
    return chosen


def reference_decompose(kernels: Sequence[ExternalKernel]) -> str:
    """Grad ops are checked against their composite (or invoke) rule, forward ops against opc's kernel."""
    return ",".join(k.op for k in kernels if REGISTRY[k.op].kind == "grad" and REGISTRY[k.op].rewrite)


class Progress:
    """A one-line bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int):
        self.total, self.on = total, sys.stderr.isatty() and total > 0

    def note(self, text: str) -> None:
        if self.on:
            sys.stderr.write(f"\r\033[K{text}")
            sys.stderr.flush()

    def __call__(self, done: int) -> None:
        filled = 30 * done // max(self.total, 1)
        self.note(f"opc check [{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} cases")

    def close(self) -> None:
        self.note("")


def check(target_spec: str, ops: str | Sequence[str] | None = None, cache_dir: str | None = None,
          case: str | None = None, grad: bool = False) -> list[Case]:
    """Build and run the grid of every chosen device kernel (`case`: the case of that id alone; `grad`:
    and the gradients through its forward kernels); the rows, in order."""
    target = get_target(target_spec)
    kernels = select_kernels(target, ops)
    cases, funcs, refs = plan(target, kernels, only=case, grad=grad or case is not None)
    if case is not None and not cases:
        raise InputError(f"--case: no case {case} among the chosen kernels' cases (the FAIL rows name them)")
    runs = [c for c in cases if c.status == "run"]
    if runs:
        progress = Progress(len(runs))
        progress.note(f"opc check: building {len(funcs)} cases for the device and the reference...")
        try:
            device, reference = build(target_spec, kernels, funcs, refs, cache_dir, runs)
        except OpcError as err:  # a gradient needs an op the device cannot run: its rows say so, the rest runs
            if not any(c.grad for c in runs):
                raise
            why = str(err).splitlines()[0]
            for c in runs:
                if c.grad:
                    c.status, c.why = "n/a", f"the gradient does not build for the device: {why}"
            runs = [c for c in runs if not c.grad]
            device, reference = build(target_spec, kernels, funcs, refs, cache_dir, runs)
        run_and_judge(device, reference, runs, target_spec, progress)
    return cases


def run_and_judge(device, reference, runs: list[Case], target_spec: str,  # noqa: ANN001
                  progress: Progress | None = None) -> None:
    """Run the cases on the built modules and set each one's verdict (again, if it ran before)."""
    for c in runs:
        c.error, c.result, c.repro = None, "", ""
    progress = progress or Progress(0)
    try:
        run_cases(device, reference, runs, progress)
    finally:
        progress.close()
    for c in runs:
        if not c.result:
            c.result = "pass" if c.error is not None and c.error <= c.tol else "FAIL"
        elif not c.result.startswith("FAIL"):
            c.result = f"FAIL: {c.result}"
        if c.result != "pass":
            c.repro = f"opc check --target {target_spec} --ops {c.op} --case {c.id} --show"
            c.result += f"; rerun: {c.repro}"


def build(target_spec: str, kernels: Sequence[ExternalKernel], funcs: list[func.FuncOp], refs: list[func.FuncOp],
          cache_dir: str | None, runs: Sequence[Case] = ()) -> tuple[Any, Any]:
    """The two modules: the cases on the device, and their references on opc's cpu target (with the
    gradient functions the grad cases among `runs` call)."""
    from opc.autodiff import add_grad_functions

    def module(fs: list[func.FuncOp], grads: set[str]) -> ModuleOp:
        m = ModuleOp([f.clone() for f in fs])  # the plan's functions stay free for another build
        if grads:
            add_grad_functions(m, sorted(grads))
            for f in [f for f in m.ops if isinstance(f, func.FuncOp) and f.sym_name.data.endswith("_value_and_grad")]:
                m.body.block.erase_op(f)
        return m

    grads = [c for c in runs if c.grad]
    device = compile(module(funcs, {c.function.removesuffix("_grad") for c in grads}), target=target_spec,
                     cache_dir=cache_dir)
    reference = compile(module(refs, {c.ref_function.removesuffix("_grad") for c in grads}), target="cpu",
                        decompose=reference_decompose(kernels) or None, cache_dir=cache_dir)
    return device, reference


def show_case(target_spec: str, ops: str | Sequence[str] | None, case: str, npz: str | None = None) -> bool:
    """`opc check ... --case ID --show`: the case's function, inputs, outputs and verdict; its inputs
    (and both outputs) written to opc-check-ID.npz. True when it passes."""
    from xdsl.printer import Printer

    target = get_target(target_spec)
    kernels = select_kernels(target, ops)
    cases, funcs, refs = plan(target, kernels, only=case, grad=True)
    if not cases:
        raise InputError(f"--case: no case {case} among the chosen kernels' cases (the FAIL rows name them)")
    (c,) = cases
    buffer = io.StringIO()
    Printer(stream=buffer).print_op(funcs[0].clone())
    device, reference = build(target_spec, kernels, funcs, refs, None, cases)
    args, got, want = run_pair(device, reference, c)
    worst = verdict(c, got, want)
    ok = worst is None or worst.error <= c.tol
    path = npz or f"opc-check-{case}.npz"
    arrays: dict[str, Any] = {**{f"a{i}": a for i, a in enumerate(args)},
                              **{f"device{i}": g for i, g in enumerate(got)},
                              **{f"reference{i}": w for i, w in enumerate(want)}}
    np.savez(path, **arrays)
    out = [f"case {case}: {c.op} {c.attr_text} {c.dtype} {c.shape} (inputs: {c.spec.fill if c.spec else '-'}; "
           f"reference: opc's cpu target{' in f64' if c.reference64 else ''})", buffer.getvalue().rstrip()]
    with np.printoptions(threshold=200, precision=7, linewidth=110):
        out += [f"input a{i} {a.dtype}{list(a.shape)}:\n{a}" for i, a in enumerate(args)]
        out += [f"device output {i}:\n{g}\nreference output {i}:\n{w}" for i, (g, w) in enumerate(zip(got, want))]
    tol = f"{c.tol:.1e}" if c.tol else "exact"
    out.append("result: pass (all equal)" if worst is None else
               f"result: {'pass' if ok else 'FAIL'}: error {worst.error:.2e} (tol {tol}) at "
               f"{describe_worst(c, worst, args, got)}")
    out.append(f"inputs and outputs written to {path}")
    sys.stdout.write("\n".join(out) + "\n")
    return ok


def report(target: Target, cases: Sequence[Case]) -> str:
    cols = ["op", "attributes", "dtype", "shape", "error", "tol", "result"]
    rows = []
    for c in cases:
        if c.status == "run":
            err = "-" if c.error is None else "inf" if math.isinf(c.error) else f"{c.error:.1e}" if c.error else "0"
            rows.append([c.op, c.attr_text, c.dtype, c.shape, err, f"{c.tol:.1e}" if c.tol else "exact", c.result])
        else:
            rows.append([c.op, c.attr_text, c.dtype, c.shape, "-", "-", f"{c.status}: {c.why}"])
    widths = [max(len(r[i]) for r in [cols, *rows]) for i in range(len(cols) - 1)]

    def line(r: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1]

    run = [c for c in cases if c.status == "run"]
    failed = [c for c in run if c.result != "pass"]
    count = {s: sum(c.status == s for c in cases) for s in ("fallback", "n/a")}
    head = (f"opc check: device {target.name} ({target.source}), {len({c.kernel.symbol for c in cases})} kernel(s) "
            "against opc's cpu reference")
    summary = (f"summary: {len(run)} cases run: {len(run) - len(failed)} pass, {len(failed)} FAIL; "
               f"{count['fallback']} fallback; {count['n/a']} n/a")
    lines = [head, line(cols), *map(line, rows), summary]
    if failed:
        lines.append("failing: " + "; ".join(f"{c.op} {c.attr_text} {c.dtype} {c.shape}" for c in failed[:10])
                     + (f"; ... ({len(failed) - 10} more)" if len(failed) > 10 else ""))
    return "\n".join(lines) + "\n"


def check_device(target_spec: str, ops: str | Sequence[str] | None = None, case: str | None = None,
                 grad: bool = False) -> bool:
    """`opc check`: print the rows and the summary; True when nothing failed."""
    cases = check(target_spec, ops, case=case, grad=grad)
    sys.stdout.write(report(get_target(target_spec), cases))
    sys.stdout.flush()
    return all(c.result == "pass" for c in cases if c.status == "run")

