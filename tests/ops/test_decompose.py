"""The registry, targets, legalization, and kernel path == composite path
numerically for every op with a rule."""

from __future__ import annotations

import inspect
import math

import ml_dtypes
import numpy as np
import pytest
from oracle import gelu_tanh, gelu_tanh_grad
from xdsl.dialects.builtin import ModuleOp

import opc
from opc.dialects.opc import Opc
from opc.errors import OpcError, UnsupportedError
from opc.ir import parse_text
from opc.ops import elementwise, vjp_rules
from opc.ops.registry import REGISTRY, THROUGH_RULE
from opc.targets.routing import route
from opc.targets.target import BUILTIN_KERNELS, get_target
from opc.transforms.opc_decompose import legalize, resolve_ops

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
TOL = {"f64": 1e-12, "f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}
RNG = np.random.default_rng(1)


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------


def test_registry_covers_every_dialect_op() -> None:
    assert set(REGISTRY) == {op.name for op in Opc.operations}


def test_registry_agrees_with_the_rules() -> None:
    rewritable = {n for n, e in REGISTRY.items() if e.rewrite}
    assert rewritable == {n for n, e in REGISTRY.items() if e.rule is not None}
    for name, e in REGISTRY.items():
        if callable(e.vjp):
            assert inspect.getmodule(e.vjp) in (vjp_rules, elementwise), name
        else:
            assert e.vjp in (None, THROUGH_RULE), name
        assert (e.kind == "grad") == (e.realised_by is not None), name
    assert REGISTRY["opc.cast_grad"].realised_by == "invoke"
    assert REGISTRY["opc.fused_gemm_epilogue_grad"].realised_by == "kernel"
    assert REGISTRY["opc.fused_gemm_epilogue_grad"].composite
    assert REGISTRY["opc.greater_than"].vjp is None and REGISTRY["opc.full"].vjp is None


def test_route() -> None:
    assert route("opc.cast_grad", BUILTIN_KERNELS) == "invoke"
    assert route("opc.fused_gemm_epilogue_grad", BUILTIN_KERNELS) == "kernel"
    assert route("opc.fused_gemm_epilogue_grad", BUILTIN_KERNELS, force=True) == "composite"
    assert route("opc.fused_gemm_epilogue_grad", {"opc.add"}) == "composite"
    assert route("opc.add", BUILTIN_KERNELS, force=True) == "kernel"
    assert route("opc.tanh", {"opc.add"}) == "cannot run"
    # a target that has a cast_grad kernel uses it: kernel beats invoke
    assert route("opc.cast_grad", {"opc.cast_grad"}) == "kernel"


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


def test_builtin_targets() -> None:
    cpu, cuda = get_target("cpu"), get_target("cuda")
    assert (cpu.backend, cuda.backend) == ("cpu", "cuda")
    assert "opc.cast_grad" not in cpu.kernels
    for op in ("opc.add", "opc.matmul", "opc.fused_gemm_epilogue", "opc.fused_gemm_epilogue_grad",
               "opc.relu_grad", "opc.gelu_grad"):  # fmt: skip
        assert op in cpu.kernels and op in cuda.kernels


def test_toml_target(tmp_path) -> None:
    p = tmp_path / "npu.toml"
    p.write_text('name = "npu"\nkernels = ["add", "opc.matmul"]\n')
    t = get_target(str(p))
    assert (t.name, t.backend, t.kernels, t.source) == ("npu", "cpu", frozenset({"opc.add", "opc.matmul"}), str(p))
    t = get_target("examples/device_no_fused.toml")
    assert "opc.fused_gemm_epilogue" not in t.kernels and "opc.matmul" in t.kernels


@pytest.mark.parametrize(
    "text,msg",
    [
        ('kernels = ["add", "frobnicate"]', "unknown op(s) in kernels: frobnicate"),
        ("kernels = [", "malformed"),
        ('kernels = "add"', "'kernels' must be a list"),
        ('backend = "tpu"\nkernels = []', "'backend' must be one of cpu, cuda"),
        ('kernel = ["add"]', "unknown key(s) kernel"),
    ],
)
def test_bad_toml_target(tmp_path, text: str, msg: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(OpcError) as err:
        get_target(str(p))
    assert str(p) in str(err.value) and msg in str(err.value) and "\n" not in str(err.value)


def test_unknown_target() -> None:
    with pytest.raises(OpcError, match="unknown target 'tpu'"):
        get_target("tpu")
    with pytest.raises(OpcError, match="no such target file"):
        get_target("/nonexistent/dev.toml")


# ---------------------------------------------------------------------------
# Legalization
# ---------------------------------------------------------------------------

MLP = open("examples/mlp.mlir").read()


def names(module: ModuleOp) -> set[str]:
    return {op.name for op in module.walk() if op.name.startswith("opc.")}


def test_legalize_cpu_invokes_cast_grad_only() -> None:
    m = parse_text(MLP).module
    from opc.autodiff import add_grad_functions

    add_grad_functions(m)
    assert "opc.cast_grad" in names(m)
    legalize(m, get_target("cpu"))
    assert "opc.cast_grad" not in names(m)
    assert {"opc.fused_gemm_epilogue", "opc.fused_gemm_epilogue_grad"} <= names(m)


def test_legalize_device_without_fused_kernels() -> None:
    m = parse_text(MLP).module
    from opc.autodiff import add_grad_functions

    add_grad_functions(m)
    t = get_target("examples/device_no_fused.toml")
    legalize(m, t)
    assert names(m) <= t.kernels
    assert {"opc.matmul", "opc.gelu", "opc.gelu_grad", "opc.reduce_sum"} <= names(m)


def test_legalize_force_all_leaves_primitives() -> None:
    m = parse_text(MLP).module
    from opc.autodiff import add_grad_functions

    add_grad_functions(m)
    legalize(m, get_target("cpu"), "all")
    assert not names(m) & {"opc.fused_gemm_epilogue", "opc.fused_gemm_epilogue_grad", "opc.gelu",
                           "opc.gelu_grad", "opc.relu", "opc.relu_grad", "opc.cast_grad"}  # fmt: skip


def test_legalize_names_the_op_that_cannot_run(tmp_path) -> None:
    p = tmp_path / "tiny.toml"
    p.write_text('name = "tiny"\nkernels = ["add", "mul", "matmul", "full", "cast", "reduce_sum"]\n')
    m = parse_text(MLP).module
    with pytest.raises(UnsupportedError) as err:
        legalize(m, get_target(str(p)))
    msg = str(err.value)
    assert msg.startswith("opc.tanh cannot run on target 'tiny'")
    assert "opc.fused_gemm_epilogue" in msg and "@mlp" in msg


def test_legalize_names_the_function_of_a_nested_op(tmp_path) -> None:
    """An op inside a region (here a scheduled kernel) is named with its function too."""
    from opc.ir import make_context
    from opc.transforms.opc_schedule import SchedulePass

    p = tmp_path / "tiny.toml"
    p.write_text('name = "tiny"\nkernels = ["add", "mul", "matmul", "full", "cast", "reduce_sum"]\n')
    m = parse_text(MLP).module
    SchedulePass().apply(make_context(), m)
    with pytest.raises(OpcError) as err:
        legalize(m, get_target(str(p)))
    assert str(err.value).endswith("(in @mlp)"), str(err.value)


def test_resolve_ops() -> None:
    assert resolve_ops("cast_grad,opc.fused_gemm_epilogue_grad") == {"opc.cast_grad", "opc.fused_gemm_epilogue_grad"}
    assert resolve_ops("all") == {n for n, e in REGISTRY.items() if e.rule is not None}
    with pytest.raises(OpcError, match="unknown op 'frob'"):
        resolve_ops(["frob"])
    with pytest.raises(OpcError, match="opc.add has no invoke or composite rule"):
        resolve_ops(["add"])


# ---------------------------------------------------------------------------
# Kernel path == composite path, numerically
# ---------------------------------------------------------------------------


def t(shape, dt: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dt}>"


def unary_func(name: str, body: str, dt: str, shape=(3, 4)) -> str:
    ty = t(shape, dt)
    return f"func.func @k_{name}_{dt}(%x: {ty}, %d: {ty}) -> {ty} {{\n  {body.format(T=ty)}\n  func.return %r : {ty}\n}}\n"


UNARY = {
    "relu": "%r = opc.relu %x : ({T}) -> {T}",
    "gelu_tanh": "%r = opc.gelu %x {{approximate = true}} : ({T}) -> {T}",
    "gelu_erf": "%r = opc.gelu %x {{approximate = false}} : ({T}) -> {T}",
    "relu_grad": "%r = opc.relu_grad %x, %d : ({T}, {T}) -> {T}",
    "gelu_grad_tanh": "%r = opc.gelu_grad %x, %d {{approximate = true}} : ({T}, {T}) -> {T}",
    "gelu_grad_erf": "%r = opc.gelu_grad %x, %d {{approximate = false}} : ({T}, {T}) -> {T}",
    "cast_grad": "%r = opc.cast_grad %x, %d : ({T}, {T}) -> {T}",
}


def cast_grad_func() -> str:
    return (
        "func.func @cast_grad_mixed(%x: tensor<3x4xf16>, %d: tensor<3x4xf64>) -> tensor<3x4xf16> {\n"
        "  %r = opc.cast_grad %x, %d : (tensor<3x4xf16>, tensor<3x4xf64>) -> tensor<3x4xf16>\n"
        "  func.return %r : tensor<3x4xf16>\n}\n"
    )


M, K, N = 3, 4, 5
FUSED = [(act, tx, ty, dt) for act in ("none", "relu", "gelu") for tx in (False, True) for ty in (False, True)
         for dt in DTYPES]  # fmt: skip


def fused_name(kind: str, act: str, tx: bool, ty: bool, dt: str) -> str:
    return f"{kind}_{act}_{'T' if tx else 'F'}{'T' if ty else 'F'}_{dt}"


def fused_funcs(act: str, tx: bool, ty: bool, dt: str) -> str:
    xs, ys, o, b = t((K, M) if tx else (M, K), dt), t((N, K) if ty else (K, N), dt), t((M, N), dt), t((N,), dt)
    flags = f"trans_x = {str(tx).lower()}, trans_y = {str(ty).lower()}"
    fwd_results, fwd_names = (f"({o}, {o})", "%out, %z") if act != "none" else (o, "%out")
    tail, tail_t = ("%z, %d", f"{o}, {o}") if act != "none" else ("%d", o)
    grad_act = f"{act}_grad" if act != "none" else "none"
    zarg = f", %z: {o}" if act != "none" else ""
    return (
        f"func.func @{fused_name('fwd', act, tx, ty, dt)}(%x: {xs}, %y: {ys}, %bias: {b}) -> {o} {{\n"
        f"  {fwd_names} = opc.fused_gemm_epilogue %x, %y, %bias {{activation = \"{act}\", {flags}}} : "
        f"({xs}, {ys}, {b}) -> {fwd_results}\n  func.return %out : {o}\n}}\n"
        f"func.func @{fused_name('bwd', act, tx, ty, dt)}(%x: {xs}, %y: {ys}{zarg}, %d: {o}) -> ({xs}, {ys}, {b}) {{\n"
        f"  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, {tail} {{activation_grad = \"{grad_act}\", {flags}}}"
        f" : ({xs}, {ys}, {tail_t}) -> ({xs}, {ys}, {b})\n  func.return %dx, %dy, %db : {xs}, {ys}, {b}\n}}\n"
    )


PATHS_TEXT = (
    "".join(unary_func(n, body, dt) for n, body in UNARY.items() for dt in DTYPES)
    + cast_grad_func()
    + "".join(fused_funcs(*v) for v in FUSED)
)


@pytest.fixture(scope="module")
def paths():
    """The same module compiled twice: kernels where cpu has them, and every rule forced."""
    return opc.compile(PATHS_TEXT, target="cpu"), opc.compile(PATHS_TEXT, target="cpu", decompose="all")


def close(a, b, dt: str, what: str) -> None:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(1.0, float(np.max(np.abs(b))))
    err = float(np.max(np.abs(a - b)))
    assert err <= TOL[dt] * scale, f"{what}: kernel and composite differ by {err:.3g}\n{a}\n{b}"


def near_numpy(got, want, dt: str, what: str, scale: float = 1.0) -> None:
    """Each route against NumPy in f64 (agreeing with each other is not enough: both could be wrong)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = float(np.max(np.abs(got - want)))
    assert err <= TOL[dt] * scale * max(1.0, float(np.max(np.abs(want)))), f"{what}: off NumPy by {err:.3g}"


ERF = np.vectorize(math.erf)


def gelu_erf(z):
    return 0.5 * z * (1 + ERF(z / math.sqrt(2)))


def gelu_erf_grad(z):
    return 0.5 * (1 + ERF(z / math.sqrt(2))) + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


# NumPy's value of each UNARY function of (x, d), in f64
UNARY_REF = {
    "relu": lambda x, d: np.maximum(x, 0), "gelu_tanh": lambda x, d: gelu_tanh(x), "gelu_erf": lambda x, d: gelu_erf(x),
    "relu_grad": lambda x, d: d * (x > 0), "gelu_grad_tanh": lambda x, d: d * gelu_tanh_grad(x),
    "gelu_grad_erf": lambda x, d: d * gelu_erf_grad(x), "cast_grad": lambda x, d: d,
}  # fmt: skip
ACT = {"none": (lambda z: z, lambda z: np.ones_like(z)), "relu": (lambda z: np.maximum(z, 0), lambda z: 1.0 * (z > 0)),
       "gelu": (gelu_tanh, gelu_tanh_grad)}  # fmt: skip


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", list(UNARY))
def test_kernel_and_composite_agree_elementwise(paths, name: str, dt: str) -> None:
    kernel, composite = paths
    x = (RNG.choice([-1.0, 1.0], (3, 4)) * RNG.uniform(0.05, 3.0, (3, 4))).astype(DTYPES[dt])
    d = RNG.uniform(-1, 1, (3, 4)).astype(DTYPES[dt])
    a, b = getattr(kernel, f"k_{name}_{dt}")(x, d), getattr(composite, f"k_{name}_{dt}")(x, d)
    assert a.dtype == b.dtype == DTYPES[dt]
    close(a, b, dt, f"{name}_{dt}")
    want = UNARY_REF[name](x.astype(np.float64), d.astype(np.float64))
    for how, got in (("kernel", a), ("composite", b)):
        near_numpy(got, want, dt, f"{name}_{dt} ({how})", scale=2)


def test_cast_grad_invoke_mixed_dtypes(paths) -> None:
    kernel, composite = paths
    x, d = np.zeros((3, 4), np.float16), RNG.uniform(-4, 4, (3, 4))
    for m in paths:
        r = m.cast_grad_mixed(x, d)
        assert r.dtype == np.float16
        np.testing.assert_array_equal(r, d.astype(np.float16))


@pytest.mark.parametrize("act,tx,ty,dt", FUSED, ids=[fused_name("fge", *v) for v in FUSED])
def test_kernel_and_composite_agree_fused(paths, act: str, tx: bool, ty: bool, dt: str) -> None:
    kernel, composite = paths
    xs, ys = ((K, M) if tx else (M, K)), ((N, K) if ty else (K, N))
    x, y, b = (RNG.uniform(-1, 1, s).astype(DTYPES[dt]) for s in (xs, ys, (N,)))
    d = RNG.uniform(-1, 1, (M, N)).astype(DTYPES[dt])
    fwd = fused_name("fwd", act, tx, ty, dt)
    close(getattr(kernel, fwd)(x, y, b), getattr(composite, fwd)(x, y, b), dt, fwd)
    bwd = fused_name("bwd", act, tx, ty, dt)
    args = (x, y) + ((RNG.uniform(-1, 1, (M, N)).astype(DTYPES[dt]),) if act != "none" else ()) + (d,)
    for what, a, c in zip(("dx", "dy", "dbias"), getattr(kernel, bwd)(*args), getattr(composite, bwd)(*args)):
        assert a.dtype == c.dtype == DTYPES[dt]
        close(a, c, dt, f"{bwd}: {what}")
    # both routes against NumPy: out = act(op(x) @ op(y) + bias); dz = d * act'(z) (rounded to dt,
    # as both routes store it), dx, dy through the transposes, dbias = the column sums of dz
    X, Y, B = (v.astype(np.float64) for v in (x, y, b))
    opx, opy = (X.T if tx else X), (Y.T if ty else Y)
    act_f, act_g = ACT[act]
    z = args[2].astype(np.float64) if act != "none" else None
    dz = d.astype(np.float64) * (act_g(z) if z is not None else 1.0)
    dz = dz.astype(DTYPES[dt]).astype(np.float64)
    dopx, dopy = dz @ opy.T, opx.T @ dz
    want = {"out": act_f(opx @ opy + B), "dx": dopx.T if tx else dopx, "dy": dopy.T if ty else dopy, "dbias": dz.sum(0)}
    for how, m in (("kernel", kernel), ("composite", composite)):
        near_numpy(getattr(m, fwd)(x, y, b), want["out"], dt, f"{fwd} ({how})", scale=4)
        for what, g in zip(("dx", "dy", "dbias"), getattr(m, bwd)(*args)):
            near_numpy(g, want[what], dt, f"{bwd}: {what} ({how})", scale=4)
