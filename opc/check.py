"""`opc check --target DEVICE.toml [--ops ...]`: every kernel a device brings
([external.OP] in its .toml) against opc's own reference, over the full grid.

For each kernel, the grid is every combination of the op's enumerable
attributes (bools, enumerations, cast's dtype) times every dtype, as far as
the op's verifier admits them:
  - a combination the kernel admits runs at every size of the op's grid
    (size 1, odd sizes, sizes past a GEMM tile; every trans flag is an
    attribute), one row per size: error vs tolerance, pass or FAIL;
  - any other combination is one `fallback` row saying why (which value the
    kernel does not take) and which route it takes on the device instead;
  - a declared dtype the op does not admit, or an op without a grid here,
    is one `n/a` row saying so. Nothing is left out silently.

The reference is the op compiled for opc's built-in cpu target: its own
kernel for a forward op, the composite (or invoke) rule for a grad op. The
error of a case is the largest |device - reference| over its outputs,
relative to max(1, the largest |reference|); NaN must match NaN. Ops that
only move or round values (cast, relu, select, ...) and integer results must
match exactly; the rest within a per-dtype tolerance.

All cases of a run are built into two modules (device and reference: a C
build costs about half a second); they run in a child process, so a kernel
that crashes or hangs is one FAIL row and the run goes on.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import BoolAttr, IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from opc.dialects import opc as o
from opc.external import DTYPES, ExternalKernel, attribute_kinds, domain, op_classes, show
from opc.ir import OpcError
from opc.registry import REGISTRY, route_op
from opc.targets import Target, get_target

# ---------------------------------------------------------------------------
# The grid: sizes per op family
# ---------------------------------------------------------------------------

# M, K, N: all 1; odd; past the tiles of opc's GEMM (MC = 144 rows, KC = 256, NR = 16 columns), odd too.
GEMM_SIZES = ((1, 1, 1), (7, 5, 3), (150, 260, 21))
ELEMENTWISE_SHAPES = ((1,), (7,), (3, 5), (2, 3, 37))
BINARY_SHAPES = (((1,), (1,)), ((7,), (7,)), ((3, 5), (5,)), ((4, 1), (1, 6)), ((2, 3, 37), (2, 3, 37)))
REDUCE_CASES = (((1,), (0,)), ((7,), (0,)), ((3, 5), (1,)), ((3, 5), (0,)), ((2, 3, 37), (0, 2)), ((2, 3, 37), ()))
TRANSPOSE_CASES = (((1,), (0,)), ((3, 5), (1, 0)), ((2, 3, 37), (2, 0, 1)), ((2, 3, 37), (1, 2, 0)))

# Relative to max(1, |reference|): a few roundings of the dtype (GEMMs accumulate in f32).
TOLERANCE = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
EXACT_OPS = {"opc.cast", "opc.cast_grad", "opc.relu", "opc.relu_grad", "opc.select", "opc.transpose", "opc.reshape",
             "opc.broadcast_to", "opc.maximum", "opc.minimum", "opc.neg", "opc.abs", "opc.reduce_max", "opc.full",
             "opc.greater_than", "opc.less_than", "opc.equal"}  # fmt: skip
SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0e5, 3.0e38, 1.0e-6, 2.5, -2.5, 0.5 + 2.0**-12)
CASE_TIMEOUT_S = 120.0
ROUTE_WORDS = {"kernel": "-> opc's own kernel", "invoke": "-> invoke rule", "composite": "-> composite rule",
               "cannot run": "-> CANNOT RUN on the device (no opc kernel there, no rule)"}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """One size of a grid: its label, argument types, and how to build the op on them."""

    label: str
    args: tuple[TensorType, ...]
    make: Callable[[Sequence[SSAValue]], Operation]
    special: bool = False  # mix IEEE special values into float inputs
    scale: float = 2.0  # inputs uniform in [-scale, scale]


Grid = Callable[[type[Operation], dict[str, Attribute], Attribute], list[Shape]]


def tensor(shape: Sequence[int], element: Attribute) -> TensorType:
    return TensorType(element, list(shape))


def gemm_args(props: dict[str, Attribute], dtype: Attribute, m: int, k: int, n: int) -> tuple[TensorType, ...]:
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])  # type: ignore[arg-type]
    return tensor([k, m] if tx else [m, k], dtype), tensor([n, k] if ty else [k, n], dtype)


def fused_gemm_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    act = props["activation"].data  # type: ignore[attr-defined]
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])  # type: ignore[arg-type]
    return [Shape(f"M={m} K={k} N={n}", (*gemm_args(props, dtype, m, k, n), tensor([n], dtype)),
                  lambda a: o.FusedGemmEpilogueOp(a[0], a[1], a[2], tx, ty, act), scale=1.0)
            for m, k, n in GEMM_SIZES]


def fused_gemm_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    act = props["activation_grad"].data  # type: ignore[attr-defined]
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])  # type: ignore[arg-type]
    shapes = []
    for m, k, n in GEMM_SIZES:
        z = (tensor([m, n], dtype),) if act != "none" else ()
        make = (lambda a: o.FusedGemmEpilogueGradOp(a[0], a[1], a[2], a[3], tx, ty, act)) if z else \
            (lambda a: o.FusedGemmEpilogueGradOp(a[0], a[1], None, a[2], tx, ty, act))
        shapes.append(Shape(f"M={m} K={k} N={n}", (*gemm_args(props, dtype, m, k, n), *z, tensor([m, n], dtype)),
                            make, scale=1.0))
    return shapes


def matmul_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    tx, ty = o.flag(props["trans_x"]), o.flag(props["trans_y"])  # type: ignore[arg-type]
    shapes = [Shape(f"M={m} K={k} N={n}", gemm_args(props, dtype, m, k, n), lambda a: o.MatmulOp(a[0], a[1], tx, ty),
                    scale=1.0) for m, k, n in GEMM_SIZES]
    x, y = gemm_args(props, dtype, 7, 5, 3)
    batched = (tensor([2, *x.get_shape()], dtype), tensor([2, *y.get_shape()], dtype))
    return [*shapes, Shape("B=2 M=7 K=5 N=3", batched, lambda a: o.MatmulOp(a[0], a[1], tx, ty), scale=1.0)]


def label(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def unary_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, dtype),), lambda a: cls.create(operands=[a[0]], result_types=[a[0].type],
                                                                      properties=dict(props)), special=True)
            for s in ELEMENTWISE_SHAPES]


def activation_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, dtype),) * 2, lambda a: cls.create(
        operands=list(a), result_types=[a[0].type], properties=dict(props)), special=True) for s in ELEMENTWISE_SHAPES]


def binary_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(f"{label(s)}, {label(t)}", (tensor(s, dtype), tensor(t, dtype)), lambda a: cls(a[0], a[1]),
                  special=True) for s, t in BINARY_SHAPES]


def select_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, DTYPES["i1"]), tensor(s, dtype), tensor(s, dtype)),
                  lambda a: o.SelectOp(*a), special=True) for s in ELEMENTWISE_SHAPES]


def cast_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(label(s), (tensor(s, dtype),), lambda a: o.CastOp(a[0], props["dtype"]), special=True)
            for s in ELEMENTWISE_SHAPES]


def cast_grad_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(f"{label(s)} dout {d}", (tensor(s, dtype), tensor(s, DTYPES[d])), lambda a: o.CastGradOp(*a),
                  special=True) for s in ELEMENTWISE_SHAPES[1:3] for d in ("f16", "bf16", "f32", "f64")]


def reduce_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    keep = o.flag(props["keepdim"])  # type: ignore[arg-type]
    return [Shape(f"{label(s)} axes={list(axes)}", (tensor(s, dtype),), lambda a, axes=axes: cls(a[0], axes, keep))
            for s, axes in REDUCE_CASES]


def transpose_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    return [Shape(f"{label(s)} perm={list(p)}", (tensor(s, dtype),), lambda a, p=p: o.TransposeOp(a[0], p))
            for s, p in TRANSPOSE_CASES]


AXIS_CASES = (((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 37), 1), ((4, 70), -1))  # shape, axis


def axis_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    """softmax, log_softmax (one operand) and their grads (two): every axis layout, rows past a vector."""
    arity = len(cls.get_irdl_definition().operands)
    return [Shape(f"{label(s)} axis={a}", (tensor(s, dtype),) * arity,
                  lambda v, a=a: cls.create(operands=list(v), result_types=[v[0].type],
                                            properties={"axis": IntegerAttr(a, 64)}), scale=3.0)
            for s, a in AXIS_CASES]


LAYER_NORM_CASES = (((7,), 0), ((3, 5), 1), ((2, 3, 37), 1), ((4, 300), -1))  # shape, begin_norm_axis


def layer_norm_grid(cls, props, dtype) -> list[Shape]:  # noqa: ANN001
    """layer_norm (x, scale, bias) or layer_norm_grad (x, scale, mean, rstd, dy) over each begin_norm_axis."""
    shapes = []
    for s, b in LAYER_NORM_CASES:
        lead, trail, stats = s[:b % len(s)], s[b % len(s):], o.stats_element(dtype)
        if cls is o.LayerNormOp:
            args = (tensor(s, dtype), tensor(trail, dtype), tensor(trail, dtype))
            make = lambda v, b=b: o.LayerNormOp(*v, begin_norm_axis=b)  # noqa: E731
        else:
            args = (tensor(s, dtype), tensor(trail, dtype), tensor(lead, stats), tensor(lead, stats), tensor(s, dtype))
            make = lambda v, b=b: o.LayerNormGradOp(*v, begin_norm_axis=b)  # noqa: E731
        shapes.append(Shape(f"{label(s)} begin_norm_axis={b}", args, make))
    return shapes


GRIDS: dict[str, Grid] = {
    "opc.fused_gemm_epilogue": fused_gemm_grid, "opc.fused_gemm_epilogue_grad": fused_gemm_grad_grid,
    "opc.matmul": matmul_grid, "opc.cast": cast_grid, "opc.cast_grad": cast_grad_grid, "opc.select": select_grid,
    "opc.transpose": transpose_grid, "opc.layer_norm": layer_norm_grid, "opc.layer_norm_grad": layer_norm_grid,
}  # fmt: skip
"""Grids by op; families below serve the ops not named here."""
FAMILY_GRIDS: tuple[tuple[type, Grid], ...] = (
    (o.UnaryElementwiseOp, unary_grid), (o.BinaryElementwiseOp, binary_grid),
    (o.ActivationGradOp, activation_grad_grid), (o.ReduceOp, reduce_grid),
    (o.AxisOp, axis_grid), (o.AxisGradOp, axis_grid),
)  # fmt: skip


def grid_for(name: str) -> Grid | None:
    if name in GRIDS:
        return GRIDS[name]
    cls = op_classes()[name]
    return next((g for base, g in FAMILY_GRIDS if issubclass(cls, base)), None)


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
    args: tuple[TensorType, ...] = ()
    special: bool = False
    scale: float = 2.0
    function: str = ""
    tol: float = 0.0
    error: float | None = None
    result: str = ""

    @property
    def op(self) -> str:
        return self.kernel.op.removeprefix("opc.")

    @property
    def attr_text(self) -> str:
        return " ".join(f"{k}={show(v)}" for k, v in self.attrs.items()) or "-"


def combinations(name: str) -> list[dict[str, Any]]:
    """Every combination of the op's enumerable attributes (bools, enumerations, dtypes)."""
    names = [a for a in attribute_kinds(name) if domain(name, a) is not None]
    return [dict(zip(names, values)) for values in itertools.product(*(domain(name, a) for a in names))]


def to_attribute(name: str, attr: str, value: Any) -> Attribute:
    kind = attribute_kinds(name)[attr]
    if kind == "bool":
        return BoolAttr.from_bool(value)
    if kind == "dtype":
        return DTYPES[value]
    return StringAttr(value)


def build_op(shape: Shape) -> tuple[Block, Operation]:
    block = Block(arg_types=list(shape.args))
    return block, shape.make(block.args)


def admitted(grid: Grid, name: str, props: dict[str, Attribute], dtype: str) -> list[Shape] | None:
    """The grid's shapes, if the op's verifier admits this attribute combination and dtype."""
    try:
        shapes = grid(op_classes()[name], props, DTYPES[dtype])
        build_op(shapes[0])[1].verify()  # the sizes of a grid do not change what the verifier admits
    except (VerifyException, AssertionError, IndexError, ValueError):
        return None
    return shapes


def plan(target: Target, kernels: Sequence[ExternalKernel]) -> tuple[list[Case], list[func.FuncOp]]:
    """The rows of the run, in order, and one function per case that runs."""
    cases: list[Case] = []
    funcs: list[func.FuncOp] = []
    for kernel in kernels:
        cases += plan_kernel(target, kernel, funcs)
    return cases, funcs


def plan_kernel(target: Target, kernel: ExternalKernel, funcs: list[func.FuncOp]) -> list[Case]:
    """One kernel's rows; the functions of the cases that run are appended to funcs."""
    grid = grid_for(kernel.op)
    if grid is None:
        return [Case(kernel, {}, ",".join(kernel.dtypes), "-", "n/a",
                     f"opc check has no grid for {kernel.op} yet (opc/check.py GRIDS)")]
    cases: list[Case] = []
    seen: set[str] = set()
    for attrs in combinations(kernel.op):
        props = {a: to_attribute(kernel.op, a, v) for a, v in attrs.items()}
        for dtype in DTYPES:
            shapes = admitted(grid, kernel.op, props, dtype)
            if shapes is None:
                continue
            seen.add(dtype)
            probe = build_op(shapes[0])[1]
            why = kernel.mismatch(probe)
            if why is not None:
                cases.append(Case(kernel, attrs, dtype, "(any)", "fallback", f"{why} {fallback_route(probe, target)}"))
                continue
            exact = kernel.op in EXACT_OPS or not dtype.startswith(("f", "bf"))
            for shape in shapes:
                case = Case(kernel, attrs, dtype, shape.label, "run", args=shape.args, special=shape.special,
                            scale=shape.scale, function=f"case{len(funcs)}", tol=0.0 if exact else TOLERANCE[dtype])
                funcs.append(case_function(case.function, shape))
                cases.append(case)
    if not seen:
        return [Case(kernel, {}, ",".join(kernel.dtypes), "-", "n/a",
                     f"the grid of opc/check.py built no instance of {kernel.op} the verifier admits")]
    cases += [Case(kernel, {}, d, "-", "n/a", f"{kernel.op} does not admit dtype {d}")
              for d in kernel.dtypes if d not in seen]
    return cases


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


def inputs(case: Case, seed: int) -> list[np.ndarray]:
    from opc.lowering.build import numpy_dtype
    from opc.lowering.c_emitter import dtype_name

    rng = np.random.default_rng(seed)
    arrays = []
    for t in case.args:
        dt, shape = numpy_dtype(dtype_name(t.element_type)), tuple(t.get_shape())
        if dt == np.bool_:
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            arrays.append(rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(dt))
        else:
            x = rng.uniform(-case.scale, case.scale, size=shape)
            if case.special and x.size >= len(SPECIALS):
                x.reshape(-1)[: len(SPECIALS)] = SPECIALS
            with np.errstate(over="ignore"):
                arrays.append(x.astype(dt))
    return arrays


def case_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """max |got - want| / max(1, max |want|) over the outputs; a NaN mismatch or a wrong inf is inf."""
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64)
        g_nan, w_nan = np.isnan(g), np.isnan(w)
        if (g_nan != w_nan).any():
            return math.inf
        same = (g == w) | g_nan
        if same.all():
            continue
        with np.errstate(invalid="ignore"):
            diff = np.abs(np.where(same, 0.0, g - w))
        finite = np.abs(w[np.isfinite(w)])
        worst = max(worst, float(diff.max()) / max(1.0, float(finite.max()) if finite.size else 1.0))
    return worst


def run_one(device, reference, case: Case, seed: int) -> tuple[float | None, str]:  # noqa: ANN001
    args = inputs(case, seed)
    want = getattr(reference, case.function)(*args)
    try:
        got = getattr(device, case.function)(*args)
    except RuntimeError as err:
        return None, f"kernel error: {str(err).removeprefix(f'{case.function}(): ')}"
    one = not isinstance(want, tuple)
    return case_error([got] if one else got, [want] if one else want), ""


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
            outcome = run_one(device, reference, cases[i], seed=i)
        except Exception as err:  # noqa: BLE001 - reported as the case's failure
            outcome = (None, f"{type(err).__name__}: {err}")
        conn.send(("done", i, *outcome))
    conn.close()


def run_cases(device, reference, cases: list[Case], progress: Callable[[int], None]) -> None:  # noqa: ANN001
    """Fill in each case's error and message, in a child process restarted past any case that kills it."""
    if "fork" not in multiprocessing.get_all_start_methods():
        for i, case in enumerate(cases):
            case.error, case.result = run_one(device, reference, case, seed=i)
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
        raise OpcError(f"error: {target.source}: the device has no kernels of its own ([external.OP] sections)")
    if not ops:
        return list(target.externals)
    names = [n.strip() for n in ops.split(",")] if isinstance(ops, str) else list(ops)
    chosen = []
    for n in filter(None, names):
        kernel = target.external_of(n if n.startswith("opc.") else f"opc.{n}")
        if kernel is None:
            have = ", ".join(k.op.removeprefix("opc.") for k in target.externals)
            raise OpcError(f"error: --ops: the device has no kernel of its own for '{n}' (it has: {have})")
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


def check(target_spec: str, ops: str | Sequence[str] | None = None, cache_dir: str | None = None) -> list[Case]:
    """Build and run the grid of every chosen device kernel; the rows, in order."""
    import opc

    target = get_target(target_spec)
    kernels = select_kernels(target, ops)
    cases, funcs = plan(target, kernels)
    runs = [c for c in cases if c.status == "run"]
    progress = Progress(len(runs))
    if runs:
        progress.note(f"opc check: building {len(funcs)} cases for the device and the reference...")
        device = opc.compile(ModuleOp([f.clone() for f in funcs]), target=target_spec, cache_dir=cache_dir)
        reference = opc.compile(ModuleOp(funcs), target="cpu", decompose=reference_decompose(kernels) or None,
                                cache_dir=cache_dir)
        try:
            run_cases(device, reference, runs, progress)
        finally:
            progress.close()
    for c in runs:
        if not c.result:
            c.result = "pass" if c.error is not None and c.error <= c.tol else "FAIL"
        elif not c.result.startswith("FAIL"):
            c.result = f"FAIL: {c.result}"
    return cases


def report(target: Target, cases: Sequence[Case]) -> str:
    cols = ["op", "attributes", "dtype", "shape", "error", "tol", "result"]
    rows = []
    for c in cases:
        if c.status == "run":
            err = "-" if c.error is None else "inf" if math.isinf(c.error) else f"{c.error:.1e}" if c.error else "0"
            rows.append([c.op, c.attr_text, c.dtype, c.shape, err, f"{c.tol:.0e}" if c.tol else "exact", c.result])
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


def check_device(target_spec: str, ops: str | Sequence[str] | None = None) -> bool:
    """`opc check`: print the rows and the summary; True when nothing failed."""
    cases = check(target_spec, ops)
    sys.stdout.write(report(get_target(target_spec), cases))
    sys.stdout.flush()
    return all(c.result == "pass" for c in cases if c.status == "run")

