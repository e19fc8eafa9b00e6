"""opc.attention and opc.attention_grad (issue 20) on the CPU: the tiled kernel (runtime/opc_nn_attention.h)
and the composite rule against a NumPy formula in f64 over a grid (ranks 2 to 4, Lq != Lk across the
kernel's 32-query and 64-key blocks, masks broadcast every way, is_causal, f16 / bf16 / f32 / f64),
the gradient against the formula and finite differences, kernel route against composite route, operands
read and results written through strides (transposes folded: bit for bit against row-major operands),
scores spanning hundreds (weights below 2^-126 made 0), the opc-attention pass end to end (our importer's
transformer block, PyTorch's exporter's graph against onnxruntime) and the verifier's errors. Modules: the
kernel's and the composite's, the strided views', the large scores'."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from oracle import np_dtype, random_array, ttype

import opc
from opc.errors import OpcError
from opc.ir import parse_text

STATS = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
# |got - want| <= TOL * max(1, max |want|): one rounding of the result plus sums in another order
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-5, "float64": 1e-12}
SEED = 20


@dataclass(frozen=True)
class Case:
    name: str
    batch: tuple[int, ...]
    lq: int
    lk: int
    d: int
    dv: int
    mask: tuple[int, ...] | None  # the mask's own shape, broadcast to [batch..., lq, lk]
    causal: bool
    dt: str

    @property
    def scale(self) -> float:
        return 1 / math.sqrt(self.d)


CASES = [
    Case("r3_plain_f32", (2,), 5, 7, 8, 3, None, False, "float32"),
    Case("r4_mask_blocks_f32", (2, 3), 70, 33, 5, 6, (70, 33), False, "float32"),  # 3 query blocks
    Case("r4_causal_keys_f32", (1, 2), 40, 70, 4, 4, None, True, "float32"),  # 2 key blocks, Lq < Lk
    Case("r4_causal_mask_f64", (2, 2), 66, 9, 3, 5, (2, 1, 1, 9), True, "float64"),  # Lq > Lk, padding mask
    Case("r4_heads_mask_f64", (2, 3), 6, 65, 7, 2, (3, 6, 65), False, "float64"),  # per-head mask
    Case("r3_column_mask_f16", (3,), 9, 6, 8, 4, (9, 1), True, "float16"),  # mask broadcast along keys
    Case("r3_bf16", (2,), 6, 10, 16, 8, (1, 10), False, "bfloat16"),
    Case("r2_causal_f64", (), 12, 5, 6, 3, None, True, "float64"),  # no batch dims
    # the tiles' edges (8 rows by 2 vectors: 32 f32 / 16 f64 lanes with AVX-512, 16 / 8 with AVX; keys padded
    # to 64-key blocks; v read in place when its rows are whole tiles, else copied and padded)
    Case("r4_v_in_place_f32", (2, 2), 33, 129, 64, 32, (1, 1, 33, 129), False, "float32"),  # one key past 2 blocks
    Case("r3_one_key_f32", (3,), 1, 1, 40, 64, None, True, "float32"),
    Case("r3_v_in_place_f64", (2,), 17, 64, 9, 16, (2, 17, 1), False, "float64"),
    Case("r4_wide_f16", (1, 2), 9, 65, 33, 32, (2, 1, 65), True, "float16"),
]
LSE_CASES = [CASES[7], Case("r3_small_mask_f64", (2,), 4, 3, 2, 2, (4, 3), False, "float64")]


def shapes(c: Case) -> list[tuple[int, ...]]:
    return [(*c.batch, c.lq, c.d), (*c.batch, c.lk, c.d), (*c.batch, c.lk, c.dv)] + ([c.mask] if c.mask else [])


def source(c: Case) -> str:
    """@NAME returns out (its grad: attention_grad), @NAME_lse returns out and lse (its grad takes
    lse's cotangent too: through the composite rule)."""
    args = shapes(c)
    types = [ttype(s, c.dt) for s in args]
    out, lse = ttype((*c.batch, c.lq, c.dv), c.dt), ttype((*c.batch, c.lq), STATS[c.dt])
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(args)))
    attrs = f"scale = {c.scale:.17e} : f64" + (", is_causal = true" if c.causal else "")
    op = f"  %o, %l = opc.attention {operands} {{{attrs}}} : ({', '.join(types)}) -> ({out}, {lse})\n"
    return (f"func.func @{c.name}({params}) -> {out} {{\n{op}  func.return %o : {out}\n}}\n"
            f"func.func @{c.name}_lse({params}) -> ({out}, {lse}) {{\n{op}  func.return %o, %l : {out}, {lse}\n}}\n")


# the composite route (a module of primitives, several times the kernel's C) on a part of the grid
COMPOSITE_CASES = [CASES[i] for i in (1, 3, 5, 7)] + LSE_CASES[1:]


def inputs(c: Case) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED + len(c.name))
    arrays = [random_array(s, c.dt, rng, -2.0, 2.0) for s in shapes(c)]
    if c.mask:  # an additive mask with hidden keys (-inf), never a whole row
        m = arrays[3].astype(np.float64)
        m[rng.random(c.mask) < 0.3] = -np.inf
        m[..., 0] = 0.0
        arrays[3] = m.astype(np_dtype(c.dt))
    return arrays


def causal_addend(c: Case) -> np.ndarray:
    return np.where(np.tril(np.ones((c.lq, c.lk), bool)), 0.0, -np.inf)


def reference(c: Case, arrays: list[np.ndarray], dout: np.ndarray | None = None):
    """out, lse (and dq, dk, dv, dmask given dout) in f64 from the formula."""
    q, k, v = (a.astype(np.float64) for a in arrays[:3])
    s = q @ np.swapaxes(k, -1, -2) * c.scale
    if c.mask:
        s = s + arrays[3].astype(np.float64)
    if c.causal:
        s = s + causal_addend(c)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(-1, keepdims=True)
    out, lse = p @ v, (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    if dout is None:
        return out, lse
    do = dout.astype(np.float64)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq, dk = ds @ k * c.scale, np.swapaxes(ds, -1, -2) @ q * c.scale
    dv = np.swapaxes(p, -1, -2) @ do
    grads = [dq, dk, dv]
    if c.mask:
        lead = ds.ndim - len(c.mask)
        g = ds.sum(tuple(range(lead)))
        grads.append(g.sum(tuple(i for i, n in enumerate(c.mask) if n == 1), keepdims=True))
    return out, lse, grads


def close(got, want, dt: str, what: str) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= TOL[dt] * scale, f"{what}: max error {err:.3g} > {TOL[dt] * scale:.3g}"


def compile_module(cases: list[Case], decompose: str | None = None):
    """The cases' functions and their grads, less the grads of @NAME_lse beyond LSE_CASES (through
    the composite rule, they cost C for nothing): less to build."""
    from opc.autodiff import add_grad_functions

    module = parse_text("\n".join(source(c) for c in cases)).module
    add_grad_functions(module)
    keep = {f"{c.name}_lse_{tail}" for c in LSE_CASES for tail in ("grad", "value_and_grad")}
    for f in list(module.ops):
        name = f.sym_name.data  # type: ignore[attr-defined]
        if "_lse_" in name and name not in keep:
            f.detach()
            f.erase()
    return opc.compile(module, decompose=decompose)


@pytest.fixture(scope="module")
def kernel():
    return compile_module(CASES + LSE_CASES[1:])


@pytest.fixture(scope="module")
def composite():
    return compile_module(COMPOSITE_CASES, "opc.attention,opc.attention_grad")


def test_routes_are_the_kernel_and_the_composite(kernel, composite) -> None:
    assert "opc_nn_attention_f32(" in kernel.c_source and "opc_nn_attention_grad_f64(" in kernel.c_source
    assert "opc_nn_attention" not in composite.c_source


ROUTES = [("kernel", c) for c in CASES + LSE_CASES[1:]] + [("composite", c) for c in COMPOSITE_CASES]


@pytest.mark.parametrize("route,c", ROUTES, ids=[f"{r}-{c.name}" for r, c in ROUTES])
def test_forward_against_numpy(kernel, composite, route: str, c: Case) -> None:
    m = kernel if route == "kernel" else composite
    arrays = inputs(c)
    out, lse = getattr(m, f"{c.name}_lse")(*arrays)
    assert out.dtype == np_dtype(c.dt) and lse.dtype == np.dtype(STATS[c.dt])
    want_out, want_lse = reference(c, arrays)
    close(out, want_out, c.dt, f"{route} out")
    close(lse, want_lse, c.dt, f"{route} lse")


@pytest.mark.parametrize("route,c", ROUTES, ids=[f"{r}-{c.name}" for r, c in ROUTES])
def test_grad_against_numpy(kernel, composite, route: str, c: Case) -> None:
    """dq, dk, dv (and an additive mask's gradient) for a cotangent of out (lse not returned)."""
    m = kernel if route == "kernel" else composite
    arrays = inputs(c)
    rng = np.random.default_rng(SEED)
    dout = random_array((*c.batch, c.lq, c.dv), c.dt, rng, -1.0, 1.0)
    got = getattr(m, f"{c.name}_grad")(*arrays, dout)
    _, _, want = reference(c, arrays, dout)
    for name, g, w in zip(["dq", "dk", "dv", "dmask"], got, want):
        close(g, w, c.dt, f"{route} {name}")


@pytest.mark.parametrize("c", COMPOSITE_CASES, ids=[c.name for c in COMPOSITE_CASES])
def test_kernel_route_equals_composite_route(kernel, composite, c: Case) -> None:
    arrays = inputs(c)
    dout = random_array((*c.batch, c.lq, c.dv), c.dt, np.random.default_rng(SEED), -1.0, 1.0)
    for what, a, b in (("forward", getattr(kernel, f"{c.name}_lse")(*arrays), getattr(composite, f"{c.name}_lse")(*arrays)),
                       ("grad", getattr(kernel, f"{c.name}_grad")(*arrays, dout),
                        getattr(composite, f"{c.name}_grad")(*arrays, dout))):
        for x, y in zip(a, b):
            close(x, y, c.dt, f"{c.name} {what}: kernel vs composite")


FD_CASES = LSE_CASES


@pytest.mark.parametrize("c", FD_CASES, ids=[c.name for c in FD_CASES])
def test_grad_against_finite_differences(kernel, c: Case) -> None:
    """The loss <out, dout> + <lse, dlse> (lse's cotangent too: through the composite rule)."""
    arrays = inputs(c)
    rng = np.random.default_rng(SEED + 1)
    f = getattr(kernel, f"{c.name}_lse")
    out, lse = f(*arrays)
    dout, dlse = rng.standard_normal(out.shape), rng.standard_normal(lse.shape)
    got = getattr(kernel, f"{c.name}_lse_grad")(*arrays, dout, dlse)
    eps = 1e-6
    for i, g in enumerate(got):
        flat = np.flatnonzero(np.isfinite(arrays[i]))
        for idx in rng.choice(flat, size=min(12, flat.size), replace=False):  # 12 entries of each input
            plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
            plus[i].flat[idx] += eps
            minus[i].flat[idx] -= eps
            num = sum(float(np.sum(a * b)) for a, b in zip(f(*plus), (dout, dlse)))
            num -= sum(float(np.sum(a * b)) for a, b in zip(f(*minus), (dout, dlse)))
            assert abs(g.flat[idx] - num / (2 * eps)) <= 1e-6 * max(1.0, abs(num / (2 * eps))), (i, idx)


def test_a_row_of_hidden_keys_is_nan_in_both_routes(kernel, composite) -> None:
    """Every key -inf: softmax's 0 / 0, in the kernel as in the primitives."""
    c = CASES[1]
    arrays = inputs(c)
    arrays[3] = arrays[3].copy()
    arrays[3][4, :] = -np.inf
    for m in (kernel, composite):
        out, lse = getattr(m, f"{c.name}_lse")(*arrays)
        assert np.isnan(out[:, :, 4]).all() and np.isnan(lse[:, :, 4]).all()
        with np.errstate(invalid="ignore"):
            want_out, _ = reference(c, arrays)
        rows = np.arange(c.lq) != 4
        close(out[:, :, rows], want_out[:, :, rows], c.dt, "other rows")


LARGE_CASES = [Case("large_causal_f32", (2, 2), 40, 70, 16, 8, None, True, "float32"),
               Case("large_mask_f64", (2,), 9, 65, 8, 4, (9, 65), False, "float64")]


@pytest.fixture(scope="module")
def large():
    from opc.autodiff import add_grad_functions

    module = parse_text("\n".join(source(c) for c in LARGE_CASES)).module
    add_grad_functions(module)
    return opc.compile(module)


@pytest.mark.parametrize("c", LARGE_CASES, ids=[c.name for c in LARGE_CASES])
def test_scores_spread_over_hundreds(large, c: Case) -> None:
    """q and k scaled so the scores of a row span hundreds: most weights are below 2^-126 of the row's
    largest (the kernel makes them 0 instead of subnormal numbers, which cost a microcode assist each),
    the formula's numbers all the same; a NaN in q makes its row NaN (out and lse), the rest unchanged."""
    arrays = inputs(c)
    for i in (0, 1):
        arrays[i] = (arrays[i].astype(np.float64) * 12).astype(arrays[i].dtype)
    s = np.abs(arrays[0].astype(np.float64) @ np.swapaxes(arrays[1].astype(np.float64), -1, -2)) * c.scale
    assert s.max() > 200  # e^-200 is far below f32's and within f64's normal range: both regimes
    out, lse = getattr(large, f"{c.name}_lse")(*arrays)
    want_out, want_lse = reference(c, arrays)
    close(out, want_out, c.dt, "out")
    close(lse, want_lse, c.dt, "lse")
    dout = random_array((*c.batch, c.lq, c.dv), c.dt, np.random.default_rng(SEED), -1.0, 1.0)
    _, _, want = reference(c, arrays, dout)
    for name, g, w in zip(["dq", "dk", "dv", "dmask"], getattr(large, f"{c.name}_grad")(*arrays, dout), want):
        close(g, w, c.dt, name)
    row = (0,) * len(c.batch) + (3,)
    arrays[0] = arrays[0].copy()
    arrays[0][(*row, 1)] = np.nan
    out, lse = getattr(large, f"{c.name}_lse")(*arrays)
    assert np.isnan(out[row]).all() and np.isnan(lse[row])
    keep = np.ones(out.shape[:-1], bool)
    keep[row] = False
    close(out[keep], want_out[keep], c.dt, "other rows")


# ---------------------------------------------------------------------------
# Strided views: transposes of the batch and row dims folded into the kernels' operand layouts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Views:
    """c's q, k, v arrive in another layout and are transposed to [batch..., L, D] by `perms` (None:
    they arrive so); with `merge`, out is transposed back to q's layout (the heads' merge)."""
    c: Case
    perms: tuple[tuple[int, ...] | None, ...]
    merge: bool

    @property
    def name(self) -> str:
        return self.c.name


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


HEADS = (0, 2, 1, 3)  # [B, L, H, D] -> [B, H, L, D]: the heads' split after the projections
VIEW_CASES = [
    Views(Case("v_heads_mask_f32", (2, 3), 70, 33, 8, 8, (70, 33), False, "float32"), (HEADS,) * 3, True),
    # v read in place (dv a whole tile), k by 16 x 16 blocks (d = 16), Lq < Lk over two key blocks
    Views(Case("v_heads_causal_f32", (2, 2), 40, 70, 16, 32, None, True, "float32"), (HEADS,) * 3, True),
    Views(Case("v_seq_first_f64", (3,), 17, 65, 5, 16, (3, 17, 65), False, "float64"), ((1, 0, 2),) * 3, True),
    Views(Case("v_mixed_f16", (2, 2), 9, 12, 8, 4, None, True, "float16"), (HEADS, None, HEADS), False),
    Views(Case("v_two_head_dims_f32", (2, 2, 2), 6, 10, 4, 3, (1, 10), False, "float32"), ((0, 2, 3, 1, 4),) * 3,
          True),
    Views(Case("v_unmerged_bf16", (1, 2), 8, 6, 16, 8, (8, 6), False, "bfloat16"), (None, HEADS, HEADS), False),
    # the backward reads q and dout in place (rows of whole tiles, Lq a multiple of the tile's 8 rows)
    Views(Case("v_in_place_f64", (1, 2), 24, 40, 16, 16, None, True, "float64"), (HEADS,) * 3, True),
    Views(Case("v_in_place_f32", (2,), 16, 70, 32, 64, None, False, "float32"), ((1, 0, 2),) * 3, True),
]


def view_shapes(w: Views) -> list[tuple[int, ...]]:
    """The shapes the @NAME_views function takes: q, k, v in their own layouts, then the mask."""
    own = [tuple(s[i] for i in inverse(p)) if p else s for s, p in zip(shapes(w.c)[:3], w.perms)]
    return own + shapes(w.c)[3:]


def views_source(w: Views) -> str:
    """@NAME_views (transposes around opc.attention) and @NAME_plain (row-major operands)."""
    c = w.c
    out, lse = ttype((*c.batch, c.lq, c.dv), c.dt), ttype((*c.batch, c.lq), STATS[c.dt])
    attrs = f"scale = {c.scale:.17e} : f64" + (", is_causal = true" if c.causal else "")
    types = [ttype(s, c.dt) for s in shapes(c)]
    own = [ttype(s, c.dt) for s in view_shapes(w)]
    lines, names = [], []
    for i, perm in enumerate(w.perms):
        if perm is None:
            names.append(f"%a{i}")
            continue
        lines.append(f"  %t{i} = opc.transpose %a{i} {{perm = array<i64: {', '.join(map(str, perm))}>}} : "
                     f"({own[i]}) -> ({types[i]})")
        names.append(f"%t{i}")
    names += ["%a3"] if c.mask else []
    lines.append(f"  %o, %l = opc.attention {', '.join(names)} {{{attrs}}} : ({', '.join(types)}) -> ({out}, {lse})")
    ret, rtype = "%o", out
    if w.merge:
        back = inverse(w.perms[0])
        rtype = ttype(tuple((*c.batch, c.lq, c.dv)[i] for i in back), c.dt)
        lines.append(f"  %r = opc.transpose %o {{perm = array<i64: {', '.join(map(str, back))}>}} : "
                     f"({out}) -> ({rtype})")
        ret = "%r"
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(own))
    plain = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(types)))
    body = "\n".join(lines)
    return (f"func.func @{c.name}_views({params}) -> {rtype} {{\n{body}\n  func.return {ret} : {rtype}\n}}\n"
            f"func.func @{c.name}_plain({plain}) -> {out} {{\n"
            f"  %o, %l = opc.attention {operands} {{{attrs}}} : ({', '.join(types)}) -> ({out}, {lse})\n"
            f"  func.return %o : {out}\n}}\n")


@pytest.fixture(scope="module")
def views():
    from opc.autodiff import add_grad_functions

    module = parse_text("\n".join(views_source(w) for w in VIEW_CASES)).module
    add_grad_functions(module)
    return opc.compile(module)


def view_inputs(w: Views) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The @NAME_views arguments (q, k, v in their own layouts) and the same values row-major."""
    arrays = inputs(w.c)
    own = [np.ascontiguousarray(np.transpose(a, inverse(p))) if p else a for a, p in zip(arrays[:3], w.perms)]
    return own + arrays[3:], arrays


def merged(w: Views, out: np.ndarray) -> np.ndarray:
    return np.transpose(out, inverse(w.perms[0])) if w.merge else out


def test_views_fold_every_transpose(views) -> None:
    """No transpose nest is left in the views' functions (forward, and the grad where it is the grad
    kernel's: a mask's gradient takes the composite rule, whose matmuls read q and k row-major): the
    kernels read and write through strides."""
    import re

    kept = {f for f in re.findall(r'"(\w+)\telementwise: transpose"', views.c_source)}
    want = {f"{w.name}_views_{tail}" for w in VIEW_CASES if w.c.mask for tail in ("grad", "value_and_grad")}
    assert kept == want
    assert "opc_nn_attention_grad_f32(" in views.c_source


@pytest.mark.parametrize("w", VIEW_CASES, ids=[w.name for w in VIEW_CASES])
def test_views_forward(views, w: Views) -> None:
    """Strided operands give the row-major operands' numbers bit for bit, and the formula's."""
    own, arrays = view_inputs(w)
    got = getattr(views, f"{w.name}_views")(*own)
    plain = getattr(views, f"{w.name}_plain")(*arrays)
    np.testing.assert_array_equal(got, merged(w, plain))
    want, _ = reference(w.c, arrays)
    close(got, merged(w, want), w.c.dt, "views out")


@pytest.mark.parametrize("w", VIEW_CASES, ids=[w.name for w in VIEW_CASES])
def test_views_grad(views, w: Views) -> None:
    """dq, dk, dv written through strides (and dout and out read so): the row-major grads bit for bit,
    and the formula's."""
    own, arrays = view_inputs(w)
    c = w.c
    dout = random_array((*c.batch, c.lq, c.dv), c.dt, np.random.default_rng(SEED), -1.0, 1.0)
    got = getattr(views, f"{w.name}_views_grad")(*own, np.ascontiguousarray(merged(w, dout)))
    plain = getattr(views, f"{w.name}_plain_grad")(*arrays, dout)
    _, _, want = reference(c, arrays, dout)
    for i, (name, g, p, r) in enumerate(zip(["dq", "dk", "dv", "dmask"], got, plain, want)):
        perm = w.perms[i] if i < 3 else None
        back = (lambda a: np.transpose(a, inverse(perm))) if perm else (lambda a: a)  # noqa: E731
        np.testing.assert_array_equal(g, back(p), err_msg=name)
        close(g, back(r), c.dt, f"views {name}")


def test_views_grad_against_finite_differences(views) -> None:
    """<out, dout> of the f64 case with seq-first operands and the merge, against central differences."""
    w = VIEW_CASES[2]
    own, _ = view_inputs(w)
    f = getattr(views, f"{w.name}_views")
    rng = np.random.default_rng(SEED + 2)
    dout = rng.standard_normal(f(*own).shape)
    got = getattr(views, f"{w.name}_views_grad")(*own, dout)
    eps = 1e-6
    for i, g in enumerate(got):
        flat = np.flatnonzero(np.isfinite(own[i]))
        for idx in rng.choice(flat, size=min(8, flat.size), replace=False):
            plus, minus = [a.copy() for a in own], [a.copy() for a in own]
            plus[i].flat[idx] += eps
            minus[i].flat[idx] -= eps
            num = (float(np.sum(f(*plus) * dout)) - float(np.sum(f(*minus) * dout))) / (2 * eps)
            assert abs(g.flat[idx] - num) <= 1e-6 * max(1.0, abs(num)), (i, idx)


def test_transposes_read_elsewhere_stay_nests() -> None:
    """A transpose that something besides attention reads (here: it is also returned), or that moves
    the features, is no view: it keeps its nest, and the numbers stay the formula's."""
    c = Case("v_kept", (2, 3), 5, 7, 4, 4, None, False, "float32")
    q, k, v = (f"tensor<2x{n}x3x4xf32>" for n in (5, 7, 7))
    qt, kt, vt, ot = "tensor<2x3x5x4xf32>", "tensor<2x3x7x4xf32>", "tensor<2x3x7x4xf32>", "tensor<2x3x5x4xf32>"
    text = (f"func.func @kept(%q: {q}, %k: {k}, %v: {v}, %kf: tensor<2x3x4x7xf32>) -> ({ot}, {qt}, {kt}) {{\n"
            f"  %tq = opc.transpose %q {{perm = array<i64: 0, 2, 1, 3>}} : ({q}) -> {qt}\n"
            f"  %tk = opc.transpose %kf {{perm = array<i64: 0, 1, 3, 2>}} : (tensor<2x3x4x7xf32>) -> {kt}\n"
            f"  %tv = opc.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : ({v}) -> {vt}\n"
            f"  %o, %l = opc.attention %tq, %tk, %tv {{scale = 0.5 : f64}} : ({qt}, {kt}, {vt}) -> "
            f"({ot}, tensor<2x3x5xf32>)\n"
            f"  func.return %o, %tq, %tk : {ot}, {qt}, {kt}\n}}\n")
    m = opc.compile(text)
    # q's (also returned) and k's (features moved); v's is a view
    assert m.c_source.count('"kept\telementwise: transpose"') == 2
    rng = np.random.default_rng(4)
    qa, ka, va = (rng.standard_normal((2, n, 3, 4)).astype(np.float32) for n in (5, 7, 7))
    out, tq, tk = m.kept(qa, ka, va, np.ascontiguousarray(np.transpose(ka, (0, 2, 3, 1))))
    arrays = [np.transpose(a, HEADS) for a in (qa, ka, va)]
    np.testing.assert_array_equal(tq, arrays[0])
    np.testing.assert_array_equal(tk, arrays[1])
    close(out, reference(c, arrays)[0], "float32", "kept out")


# ---------------------------------------------------------------------------
# opc-attention end to end
# ---------------------------------------------------------------------------


def test_transformer_block_fused_equals_unfused() -> None:
    """The zoo's block (our importer: the causal mask a folded constant, so is_causal), with the pass
    (opc.compile's default) and without (fuse=False), forward and backward; with the pass, the heads'
    transposes are folded into the kernels."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "zoo"))
    import transformer_block as tb

    s = tb.Sizes(batch=2, seq=40, width=32, heads=2, mlp=64)
    model = tb.build(s, np.float32, opset=17, seed=0)
    module, params = opc.import_onnx(model)
    fused = opc.compile(module, grad=True)
    assert "opc_nn_attention_f32(" in fused.c_source and "opc_nn_attention_grad_f32(" in fused.c_source
    # the heads' split of q, k, v and the merge of out (and their grads' in the backward) are strided
    # views: no transpose runs as a kernel of its own
    assert "elementwise: transpose" not in fused.c_source
    module, _ = opc.import_onnx(model)
    plain = opc.compile(module, grad=True, fuse=False)
    assert "opc_nn_attention" not in plain.c_source
    x = np.random.default_rng(1).standard_normal((s.batch, s.seq, s.width)).astype(np.float32)
    w = list(params.values())
    y = fused.main_graph(x, *w)
    close(y, tb.reference({"x": x}, tb.common.weights(model), s), "float32", "fused block vs NumPy")
    close(y, plain.main_graph(x, *w), "float32", "fused vs unfused")
    dy = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    for a, b in zip(fused.main_graph_value_and_grad(x, *w, dy), plain.main_graph_value_and_grad(x, *w, dy)):
        close(a, b, "float32", "value and grad: fused vs unfused")


def exported_sdpa_graph(lq: int, lk: int):
    """The graph torch 2.14's exporter writes for scaled_dot_product_attention(q, k, v, attn_mask=bool)
    (torch.onnx.export(..., dynamo=True), nodes as it names them), built here without torch."""
    from onnx import TensorProto, helper, numpy_helper

    b, h, d, dv = 2, 3, 8, 4
    consts = {"val_18": np.array([b * h, lk, d], np.int64), "val_21": np.array([b, h, d, lk], np.int64),
              "val_23": np.array([1 / math.sqrt(math.sqrt(d))], np.float32), "val_27": np.array(0.0, np.float32),
              "val_28": np.array(np.finfo(np.float32).min, np.float32)}
    nodes = [helper.make_node("Reshape", ["k", "val_18"], ["val_19"]),
             helper.make_node("Transpose", ["val_19"], ["val_20"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["val_20", "val_21"], ["val_22"]),
             helper.make_node("Mul", ["q", "val_23"], ["val_24"]),
             helper.make_node("Mul", ["val_22", "val_23"], ["val_26"]),
             helper.make_node("Where", ["m", "val_27", "val_28"], ["val_29"]),
             helper.make_node("MatMul", ["val_24", "val_26"], ["val_30"]),
             helper.make_node("Add", ["val_30", "val_29"], ["val_31"]),
             helper.make_node("Softmax", ["val_31"], ["val_32"], axis=-1),
             helper.make_node("IsNaN", ["val_32"], ["val_33"]),
             helper.make_node("Where", ["val_33", "val_27", "val_32"], ["val_34"]),
             helper.make_node("MatMul", ["val_34", "v"], ["out"])]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "sdpa", [helper.make_tensor_value_info("q", f, [b, h, lq, d]),
                        helper.make_tensor_value_info("k", f, [b, h, lk, d]),
                        helper.make_tensor_value_info("v", f, [b, h, lk, dv]),
                        helper.make_tensor_value_info("m", TensorProto.BOOL, [lq, lk])],
        [helper.make_tensor_value_info("out", f, [b, h, lq, dv])],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), (b, h, d, dv)


def test_pytorch_exported_sdpa_against_onnxruntime() -> None:
    """The exporter's form (sqrt(scale) on q and k^T, a boolean mask, the IsNaN/Where guard) fused,
    with a fully masked row (min-float scores: uniform weights, as onnxruntime gives)."""
    ort = pytest.importorskip("onnxruntime")
    lq, lk = 5, 70
    model, (b, h, d, dv) = exported_sdpa_graph(lq, lk)
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((b, h, lq, d), np.float32), "k": rng.standard_normal((b, h, lk, d), np.float32),
             "v": rng.standard_normal((b, h, lk, dv), np.float32), "m": rng.random((lq, lk)) > 0.4}
    feeds["m"][2, :] = False
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    module, _ = opc.import_onnx(model)
    m = opc.compile(module)
    assert "opc_nn_attention_f32(" in m.c_source
    close(m.sdpa(*feeds.values()), want, "float32", "opc vs onnxruntime")


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

Q, K, V = "tensor<2x5x8xf32>", "tensor<2x7x8xf32>", "tensor<2x7x3xf32>"
OUT, LSE = "tensor<2x5x3xf32>", "tensor<2x5xf32>"
BAD = [  # operand types, result types, attributes, the message
    ([Q, K, V], [OUT, "tensor<2x5xf16>"], "", "lse must have element type f32"),
    ([Q, K, V], ["tensor<2x5x4xf32>", LSE], "", "out must have shape [2, 5, 3]"),
    ([Q, "tensor<3x7x8xf32>", V], [OUT, LSE], "", "q, k and v must have the same batch dims"),
    ([Q, "tensor<2x7x4xf32>", V], [OUT, LSE], "", "k must have q's feature dim 8"),
    ([Q, K, "tensor<2x6x3xf32>"], [OUT, LSE], "", "v must have k's length 7"),
    ([Q, K, V, "tensor<5x6xf32>"], [OUT, LSE], "", "mask of shape [5, 6] does not broadcast to the scores' shape"),
    ([Q, K, V, "tensor<5x7xf64>"], [OUT, LSE], "", "q and mask: element types differ"),
    (["tensor<5x7xf64>"] * 3, ["tensor<5x7xf64>", "tensor<5xf64>"], " {scale = 0x7FF0000000000000 : f64}",
     "scale must be finite"),
    (["tensor<4x2xi32>"] * 3, ["tensor<4x2xi32>", "tensor<4xf32>"], "", "q must have a float element type"),
    (["tensor<8xf32>"] * 3, ["tensor<8xf32>", "tensor<f32>"], "", "q must have rank >= 2"),
]


@pytest.mark.parametrize("operands,results,attrs,message", BAD, ids=[b[3].split(" ")[0] + str(i) for i, b in enumerate(BAD)])
def test_verifier_names_the_operand(operands, results, attrs, message) -> None:
    params = ", ".join(f"%x{i}: {t}" for i, t in enumerate(operands))
    names = ", ".join(f"%x{i}" for i in range(len(operands)))
    text = (f"func.func @f({params}) {{\n"
            f"  %o, %l = opc.attention {names}{attrs} : ({', '.join(operands)}) -> ({', '.join(results)})\n"
            "  func.return\n}\n")
    with pytest.raises(OpcError) as err:
        parse_text(text, "bad.mlir")
    first = str(err.value).splitlines()[0]
    assert first.startswith("bad.mlir:2:") and ": error:" in first and message in first, first


def test_grad_op_checks_out_and_lse() -> None:
    text = ("func.func @f(%q: tensor<5x8xf32>, %k: tensor<7x8xf32>, %v: tensor<7x3xf32>, %o: tensor<5x3xf32>, "
            "%l: tensor<5xf64>, %d: tensor<5x3xf32>) {\n"
            "  %a, %b, %c = opc.attention_grad %q, %k, %v, %o, %l, %d : (tensor<5x8xf32>, tensor<7x8xf32>, "
            "tensor<7x3xf32>, tensor<5x3xf32>, tensor<5xf64>, tensor<5x3xf32>) -> (tensor<5x8xf32>, tensor<7x8xf32>, "
            "tensor<7x3xf32>)\n  func.return\n}\n")
    with pytest.raises(OpcError, match=r"bad\.mlir:2:\d+: error: .*lse must have element type f32"):
        parse_text(text, "bad.mlir")


# ---------------------------------------------------------------------------
# The CUDA kernels (runtime/opc_nn_attention.cuh) on tests/support/cuda_sim.h: no GPU here
# ---------------------------------------------------------------------------

SIM_STUBS = """#include "cuda_sim.h"
#define __device__
#define __forceinline__ inline
#include <stdint.h>
#include "opc_runtime.h"
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline __half __ushort_as_half(uint16_t v) { return __half{v}; }
static inline float __half2float(__half h) { return opc_f16_to_f32(h.x); }
static inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t v) { return __nv_bfloat16{v}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return opc_bf16_to_f32(h.x); }
"""
G = ", ".join(f"g[{i}]" for i in range(22 + 4 * 7))  # the geometry, then q, k, v and out's layouts
GG = ", ".join(f"g[{i}]" for i in range(22 + 8 * 7))  # the grad's: q, k, v, out, dout, dq, dk and dv's
SIM_ENTRY = f"""
extern "C" int at_f64(const double *q, const double *k, const double *v, const double *mask, double *out,
                      double *lse, const int64_t *g, double scale) {{
    return opc_cuda_nn_attention_f64(q, k, v, mask, out, lse, {G}, scale);
}}
extern "C" int at_grad_f64(const double *q, const double *k, const double *v, const double *out, const double *lse,
                           const double *dout, const double *mask, double *dq, double *dk, double *dv,
                           const int64_t *g, double scale) {{
    return opc_cuda_nn_attention_grad_f64(q, k, v, out, lse, dout, mask, dq, dk, dv, {GG}, scale);
}}
"""


@pytest.fixture(scope="module")
def simulated_attention(tmp_path_factory):
    """opc_nn.cuh's preamble and opc_nn_attention.cuh built with g++ against cuda_sim.h (blocks run as threads)."""
    import ctypes
    import re
    import shutil
    import subprocess

    from opc.lowering.build import runtime_dir

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH (it builds the CUDA simulation)")
    full = (runtime_dir() / "opc_nn.cuh").read_text()
    text = full[:full.index("/* A row's max m")] + (runtime_dir() / "opc_nn_attention.cuh").read_text()
    for inc in ("#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
                '#include "opc_runtime.h"'):
        text = text.replace(inc, "")
    text = re.sub(r"([\w:]+<\w+>)<<<([^;]*?), ([^;]*?)>>>\(([^;]*)\);", r"opc_sim_launch(\2, \3, [&] { \1(\4); });",
                  text)
    tmp = tmp_path_factory.mktemp("attention-sim")
    (tmp / "at_sim.cpp").write_text(SIM_STUBS + text + "\n#endif\n" + SIM_ENTRY)
    tests = str(runtime_dir().parent / "tests" / "support")
    done = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-I", str(runtime_dir()),
                           "-I", tests, "-o", str(tmp / "libat.so"), str(tmp / "at_sim.cpp")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(tmp / "libat.so"))


SIM_CASES = [Case("sim_mask", (2, 2), 3, 9, 3, 2, (2, 1, 3, 9), False, "float64"),
             Case("sim_causal", (1,), 5, 4, 2, 3, None, True, "float64")]


def seq_major(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A NaN buffer laid out [L, batch..., D] and its view as [batch..., L, D] (a strided operand)."""
    buf = np.full((shape[-2], *shape[:-2], shape[-1]), np.nan)
    return buf, np.moveaxis(buf, 0, -2)


SIM_LAYOUTS = [(c, lay) for c in SIM_CASES for lay in ("row-major", "strided")]


@pytest.mark.parametrize("c,layout", SIM_LAYOUTS, ids=[f"{c.name}-{lay}" for c, lay in SIM_LAYOUTS])
def test_cuda_kernels_on_the_simulator(simulated_attention, c: Case, layout: str) -> None:
    """Forward and grad against the formula, with row-major operands and with every operand and result
    read or written through strides (sequence-major buffers: what the CPU's strided views pass)."""
    import ctypes

    from opc.lowering.nn_lowering import attention_ints

    arrays = [np.ascontiguousarray(a) for a in inputs(c)]
    mask = arrays[3] if c.mask else arrays[0]
    op = parse_text(source(c)).module.ops.first.body.block.first_op  # type: ignore[union-attr]
    strided = layout == "strided"

    def operand(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the buffer passed, its view as [batch..., L, D])"""
        if not strided:
            return a, a
        buf, view = seq_major(a.shape)
        view[...] = a
        return buf, view

    def result(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if not strided:
            a = np.full(shape, np.nan)
            return a, a
        return seq_major(shape)

    def layouts(views: list[np.ndarray]) -> list[list[int]]:
        return [[st // 8 for st in v.strides] for v in views]

    ins = [operand(a) for a in arrays[:3]]
    out, lse = result((*c.batch, c.lq, c.dv)), np.full((*c.batch, c.lq), np.nan)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib = simulated_attention
    lib.at_f64.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_double]
    lib.at_grad_f64.argtypes = [ctypes.c_void_p] * 11 + [ctypes.c_double]
    ints = np.array(attention_ints(op, layouts([*(v for _, v in ins), out[1]])), np.int64)
    assert lib.at_f64(*map(ptr, (*(b for b, _ in ins), mask, out[0], lse, ints)), c.scale) == 0
    dout = operand(np.random.default_rng(SEED).standard_normal(out[1].shape))
    want_out, want_lse, want = reference(c, arrays, dout[1])
    close(out[1], want_out, c.dt, "cuda out")
    close(lse, want_lse, c.dt, "cuda lse")
    grads = [result(a.shape) for a in arrays[:3]]
    views = [*(v for _, v in ins), out[1], dout[1], *(v for _, v in grads)]
    ints = np.array(attention_ints(op, layouts(views), grad=True), np.int64)
    assert lib.at_grad_f64(*map(ptr, (*(b for b, _ in ins), out[0], lse, dout[0], mask, *(b for b, _ in grads),
                                      ints)), c.scale) == 0
    for name, (_, g), w in zip(["dq", "dk", "dv"], grads, want):
        close(g, w, c.dt, f"cuda {name}")


def test_grad_without_the_dq_parts(tmp_path) -> None:
    """The backward's other way (dq by a pass over query blocks, taken where the per-key-block parts of dq
    would exceed OPC_AT_PART_MAX): opc_nn.h built with the limit at 0, against the formula."""
    import ctypes
    import shutil
    import subprocess

    from opc.lowering.build import runtime_dir
    from opc.lowering.nn_lowering import attention_ints

    if shutil.which("gcc") is None:
        pytest.skip("gcc not on PATH")
    (tmp_path / "two_pass.c").write_text(
        '#include "opc_nn.h"\n'
        "int at_grad_f64(const double *q, const double *k, const double *v, const double *out, const double *lse,\n"
        "                const double *dout, const double *mask, double *dq, double *dk, double *dv, const int64_t *g,\n"
        "                double scale) {\n"
        f"    opc_nn_attention_grad_f64(q, k, v, out, lse, dout, mask, dq, dk, dv, {GG}, scale);\n"
        "    return 0;\n}\n")
    done = subprocess.run(["gcc", "-O1", "-fopenmp", "-shared", "-fPIC", "-DOPC_AT_PART_MAX=0", "-I", str(runtime_dir()),
                           "-o", str(tmp_path / "libtwo.so"), str(tmp_path / "two_pass.c"), "-lm"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lib = ctypes.CDLL(str(tmp_path / "libtwo.so"))
    lib.at_grad_f64.argtypes = [ctypes.c_void_p] * 11 + [ctypes.c_double]
    for c in (CASES[3], CASES[4]):  # causal with a padding mask, Lq > Lk; a per-head mask over 2 key blocks
        arrays = [np.ascontiguousarray(a) for a in inputs(c)]
        dout = np.random.default_rng(SEED).standard_normal((*c.batch, c.lq, c.dv))
        want_out, want_lse, want = reference(c, arrays, dout)
        op = parse_text(source(c)).module.ops.first.body.block.first_op  # type: ignore[union-attr]
        ints = np.array(attention_ints(op, grad=True), np.int64)
        grads = [np.full(a.shape, np.nan) for a in arrays[:3]]
        mask = arrays[3] if c.mask else arrays[0]
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        lib.at_grad_f64(*map(ptr, (*arrays[:3], want_out, want_lse, dout, mask, *grads, ints)), c.scale)
        for name, g, w in zip(["dq", "dk", "dv"], grads, want):
            close(g, w, c.dt, f"two passes {c.name} {name}")
