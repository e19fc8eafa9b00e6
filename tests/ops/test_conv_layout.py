"""fused_conv_epilogue with channels-last operands (x_channels_last / out_channels_last) and the
pass that makes them, opc-channels-last (runtime/opc_nn_conv_layout.h).

The op on a grid of geometries x layouts x activations x dtypes against NumPy (the channels-first
conv + bias + act, transposed), each case's runtime route asserted: the f32 pointwise convs through
the GEMM's transposed operands, the f32 depthwise ones on both sides channels-last through the
vector kernel, everything else (f64, gelu on a depthwise conv, a reserve, a 3x3 conv) through the
layout-aware loops. Then the pass: which chains it rewrites and which it leaves, the same numbers
as without it, its absence where gradients are built, and the op's gradient and composite rule
with layouts."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import random_array, ttype
from routes import run_counting_routes
from test_conv import Geo, assert_near, conv_ref
from test_conv_fast import numpy_act

import opc
from opc.api import prepare
from opc.frontend import load_module
from opc.ir import parse_text

SEED = 31
DTYPES = ("float32", "float64")
ACTS = ("none", "relu", "relu6", "gelu")
LAYOUTS = {1: "x_channels_last", 2: "out_channels_last", 3: "x_channels_last, out_channels_last"}

GEOS = [
    # pointwise: 1x1, stride 1, unpadded, one group (the GEMM reads or writes channels-last); 2x3 has
    # at most 8 positions (from channels-last: the transposed GEMM, its few rows copied back)
    Geo("pw_7x7", (2, 24, 7, 7), (40, 24, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    Geo("pw_few", (2, 20, 2, 3), (36, 20, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    Geo("pw_1d", (1, 16, 30), (18, 16, 1), (1,), (1,), (0, 0)),
    # depthwise: 80 channels (a step of four vectors and one of one), 40 (two, and 8 one by one on
    # AVX-512), stride 2, dilation with uneven pads, 1-D and 3-D, a 5x5 window, a 1x1 plane
    Geo("dw_80c_7x7", (1, 80, 7, 7), (80, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 80),
    Geo("dw_40c_s2", (2, 40, 9, 8), (40, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 40),
    Geo("dw_dil_pads", (1, 19, 6, 7), (19, 1, 3, 2), (1, 1), (2, 1), (2, 0, 1, 3), 19),
    Geo("dw_1d", (2, 33, 12), (33, 1, 5), (2,), (1,), (2, 2), 33),
    Geo("dw_3d", (1, 16, 3, 4, 5), (16, 1, 2, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 1, 1, 1), 16),
    Geo("dw_k5_1x1", (1, 64, 1, 1), (64, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 64),
    # an image of 1 MiB: its next input row prefetched as each output row passes (OPC_CL_STREAM_BYTES)
    Geo("dw_streamed_s2", (1, 64, 64, 64), (64, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 64),
    # neither: the loops, in any layout
    Geo("k3_groups", (1, 6, 5, 6), (8, 3, 3, 3), (2, 1), (1, 1), (1, 1, 0, 1), 2),
]
CASES = [(g, layout, act, dt) for g in GEOS for layout in LAYOUTS for act in ACTS for dt in DTYPES]


def last(shape):
    return (shape[0], *shape[2:], shape[1])


def case_name(g: Geo, layout: int, act: str, dt: str) -> str:
    return f"{g.name}_l{layout}_{act}_{dt}"


def op_text(g: Geo, layout: int, act: str, dt: str, reserve: bool = False) -> str:
    tx = ttype(last(g.x) if layout & 1 else g.x, dt)
    ty = ttype(last(g.y) if layout & 2 else g.y, dt)
    tw, tb = ttype(g.w, dt), ttype((g.w[0],), dt)
    attrs = g.attrs()[:-1] + f', activation = "{act}", {LAYOUTS[layout]}}}'
    results = f"({ty}, {ty})" if act != "none" else ty
    lhs = "%y, %z" if act != "none" else "%y"
    returned = ("%y, %z", f"{ty}, {ty}") if reserve else ("%y", ty)
    name = case_name(g, layout, act, dt) + ("_reserve" if reserve else "")
    return (f"func.func @{name}(%x: {tx}, %w: {tw}, %b: {tb}) -> ({returned[1]}) {{\n"
            f"  {lhs} = opc.fused_conv_epilogue %x, %w, %b {attrs} : ({tx}, {tw}, {tb}) -> {results}\n"
            f"  func.return {returned[0]} : {returned[1]}\n}}\n")


def to_last(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, 1, -1)


def inputs(g: Geo, layout: int, dt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x in the case's layout, w, b, and the channels-first pre-activation NumPy computes."""
    rng = np.random.default_rng(SEED)
    x, w, b = (random_array(s, dt, rng, -1, 1) for s in (g.x, g.w, (g.w[0],)))
    x = x * 4  # pre-activations past relu6's 6 and below 0
    z = conv_ref(g, x, w) + b.astype(np.float64).reshape(-1, *[1] * (len(g.x) - 2))
    return (np.ascontiguousarray(to_last(x)) if layout & 1 else x), w, b, z


def expected_route(g: Geo, layout: int, act: str, dt: str) -> str:
    pointwise = g.group == 1 and all(k == 1 for k in g.w[2:]) and not any(g.pads) and set(g.strides) == {1}
    depthwise = g.w[1] == 1 and g.group == g.x[1] == g.w[0]
    if dt == "float32" and pointwise and layout in (1, 2):
        return "conv channels-last: pointwise gemm"
    if dt == "float32" and depthwise and layout == 3 and act != "gelu":
        return "conv channels-last: depthwise"
    return "conv channels-last: loops"


@pytest.fixture(scope="module")
def module():
    return opc.compile("\n".join(op_text(*c) for c in CASES), target="cpu")


@pytest.mark.parametrize("g,layout,act,dt", CASES, ids=[case_name(*c) for c in CASES])
def test_layouts_match_numpy(module, g: Geo, layout: int, act: str, dt: str) -> None:
    x, w, b, z = inputs(g, layout, dt)
    got, routes = run_counting_routes(module, case_name(g, layout, act, dt), x, w, b)
    want = numpy_act(z, act)
    assert_near(got, to_last(want) if layout & 2 else want, dt, "out", scale=4.0)
    assert routes == {expected_route(g, layout, act, dt): 1}


@pytest.mark.parametrize("g", [GEOS[0], GEOS[3], GEOS[4]], ids=lambda g: g.name)
def test_reserve_in_the_output_layout(g: Geo) -> None:
    """A reserve something reads: the pre-activation in out's layout (the loops write both)."""
    m = opc.compile(op_text(g, 3 if g.group > 1 else 2, "relu6", "float32", reserve=True), target="cpu")
    layout = 3 if g.group > 1 else 2
    x, w, b, z = inputs(g, layout, "float32")
    y, r = getattr(m, case_name(g, layout, "relu6", "float32") + "_reserve")(x, w, b)
    assert_near(r, to_last(z), "float32", "reserve", scale=4.0)
    assert_near(y, to_last(np.clip(z, 0, 6)), "float32", "out", scale=4.0)


def test_verifier_names_the_layout_shape() -> None:
    """out declared channels-first under out_channels_last: a located error naming out."""
    g = GEOS[4]
    text = op_text(g, 3, "none", "float32").replace(ttype(last(g.y), "float32"), ttype(g.y, "float32"))
    with pytest.raises(opc.InputError, match=r"^<string>:2:\d+: error: .*out"):
        load_module(text)


# ---------------------------------------------------------------------------
# opc-channels-last
# ---------------------------------------------------------------------------

def block(name: str, c: int, hidden: int, hw: tuple[int, int], stride: int = 1, dt: str = "float32",
          residual: bool = False, extra_use: str = "", batch: str = "1") -> str:
    """MobileNetV2's inverted residual: 1x1 expand + relu6, 3x3 depthwise + relu6, 1x1 project
    (+ the input, where residual), as opc-fuse makes them; extra_use: "expand" or "depthwise" also
    returns that conv's output."""
    h, w = hw
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    tx, th, td = ttype((batch, c, h, w), dt), ttype((batch, hidden, h, w), dt), ttype((batch, hidden, oh, ow), dt)
    ty = ttype((batch, c, oh, ow), dt)
    tw1, tw2, tw3 = ttype((hidden, c, 1, 1), dt), ttype((hidden, 1, 3, 3), dt), ttype((c, hidden, 1, 1), dt)
    tbh, tbc = ttype((hidden,), dt), ttype((c,), dt)
    dw = f'group = {hidden} : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: {stride}, {stride}>'
    lines = [f'%h, %hz = opc.fused_conv_epilogue %x, %w1, %b1 {{activation = "relu6"}} : ({tx}, {tw1}, {tbh}) -> ({th}, {th})',
             f'%d, %dz = opc.fused_conv_epilogue %h, %w2, %b2 {{activation = "relu6", {dw}}} : ({th}, {tw2}, {tbh}) -> ({td}, {td})',
             f"%p = opc.fused_conv_epilogue %d, %w3, %b3 : ({td}, {tw3}, {tbc}) -> {ty}"]
    out = "%p"
    if residual:
        lines.append(f"%y = opc.add %p, %x : ({ty}, {tx}) -> {ty}")
        out = "%y"
    rets, types = [out], [ty]
    if extra_use:
        rets.append({"expand": "%h", "depthwise": "%d"}[extra_use])
        types.append({"expand": th, "depthwise": td}[extra_use])
    body = "\n  ".join(lines)
    return (f"func.func @{name}(%x: {tx}, %w1: {tw1}, %b1: {tbh}, %w2: {tw2}, %b2: {tbh}, %w3: {tw3}, %b3: {tbc})"
            f" -> ({', '.join(types)}) {{\n  {body}\n  func.return {', '.join(rets)} : {', '.join(types)}\n}}\n")


BLOCKS = {  # name: (block's arguments, whether the pass rewrites it)
    "narrow_rows": (dict(c=16, hidden=96, hw=(7, 7), residual=True), True),
    "strided_wide": (dict(c=8, hidden=48, hw=(20, 40), stride=2), True),
    "wide_rows": (dict(c=8, hidden=48, hw=(6, 20)), False),  # rows of 20 at stride 1: NCHW's row kernel
    "batch_at_run_time": (dict(c=8, hidden=32, hw=(7, 7), residual=True, batch="?"), True),
    "float64": (dict(c=8, hidden=32, hw=(7, 7), dt="float64"), False),
    "expand_read_twice": (dict(c=8, hidden=32, hw=(7, 7), extra_use="expand"), False),
    "depthwise_read_twice": (dict(c=8, hidden=32, hw=(7, 7), extra_use="depthwise"), False),
}


def block_args(kw: dict, rng: np.random.Generator) -> list[np.ndarray]:
    c, hidden, (h, w), dt = kw["c"], kw["hidden"], kw["hw"], kw.get("dt", "float32")
    shapes = [(1 if kw.get("batch", "1") == "1" else 3, c, h, w), (hidden, c, 1, 1), (hidden,), (hidden, 1, 3, 3), (hidden,), (c, hidden, 1, 1), (c,)]
    return [random_array(s, dt, rng, -1, 1) for s in shapes]


def prepared(text: str, **kw) -> str:
    return str(prepare(load_module(text), **kw).module)


@pytest.mark.parametrize("name", BLOCKS)
def test_pass_rewrites_whole_chains_only(name: str) -> None:
    kw, rewritten = BLOCKS[name]
    ir = prepared(block(name, **kw))
    flags = (ir.count("x_channels_last"), ir.count("out_channels_last"))
    assert flags == ((2, 2) if rewritten else (0, 0)), (name, flags)
    if rewritten:  # the chain's ends keep the function's layout
        assert f"-> tensor<{kw.get('batch', '1')}x{kw['c']}x" in ir


@pytest.mark.parametrize("name", BLOCKS)
def test_pass_keeps_the_values(name: str) -> None:
    kw, _ = BLOCKS[name]
    text = block(name, **kw)
    args = block_args(kw, np.random.default_rng(SEED))
    got = getattr(opc.compile(text, target="cpu"), name)(*args)
    want = getattr(opc.compile(text, target="cpu", fuse=False), name)(*args)
    for g, p in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        assert_near(g, p.astype(np.float64), kw.get("dt", "float32"), name, scale=4.0)


def two_chains() -> str:
    """pointwise -> depthwise -> pointwise -> depthwise -> pointwise, 16 channels at 7x7: the middle
    pointwise conv ends the first chain and begins the second."""
    t, tw, td, tb = (ttype(s, "float32") for s in ((1, 16, 7, 7), (16, 16, 1, 1), (16, 1, 3, 3), (16,)))
    dw = 'group = 16 : i64, pads = array<i64: 1, 1, 1, 1>'
    lines, v = [], "%x"
    for i, kind in enumerate("pdpdp"):
        attrs, tk = ('{activation = "relu6"}', tw) if kind == "p" else (f'{{activation = "relu6", {dw}}}', td)
        lines.append(f"%v{i}, %z{i} = opc.fused_conv_epilogue {v}, %w{i}, %b{i} {attrs} : ({t}, {tk}, {tb}) -> ({t}, {t})")
        v = f"%v{i}"
    params = ", ".join(f"%w{i}: {tw if k == 'p' else td}, %b{i}: {tb}" for i, k in enumerate("pdpdp"))
    body = "\n  ".join(lines)
    return f"func.func @two_chains(%x: {t}, {params}) -> {t} {{\n  {body}\n  func.return %v4 : {t}\n}}\n"


def test_pass_rewrites_chains_that_share_a_pointwise_conv() -> None:
    text = two_chains()
    ir = prepared(text)
    assert (ir.count("x_channels_last"), ir.count("out_channels_last")) == (4, 4), ir
    rng = np.random.default_rng(SEED)
    shapes = [(1, 16, 7, 7)] + [s for k in "pdpdp" for s in (((16, 16, 1, 1) if k == "p" else (16, 1, 3, 3)), (16,))]
    args = [random_array(s, "float32", rng, -1, 1) for s in shapes]
    got = opc.compile(text, target="cpu").two_chains(*args)
    want = opc.compile(text, target="cpu", fuse=False).two_chains(*args)
    assert_near(got, want.astype(np.float64), "float32", "two chains", scale=4.0)


def test_pass_stays_out_of_gradients() -> None:
    """With grad functions built the forward's tensors are the backward's too: no layouts."""
    ir = prepared(block("narrow_rows", **BLOCKS["narrow_rows"][0]), grad=True)
    assert "channels_last" not in ir


def test_pass_by_name_in_opc_opt() -> None:
    from opc.transforms import get_all_passes

    assert get_all_passes()["opc-channels-last"]().name == "opc-channels-last"


# ---------------------------------------------------------------------------
# the op's gradient and composite rule with layouts
# ---------------------------------------------------------------------------

def test_gradient_with_layouts_matches_channels_first() -> None:
    """x, dx channels-last for a depthwise conv with both layouts: its gradients are the
    channels-first op's, transposed."""
    g = GEOS[4]
    flagged = op_text(g, 3, "relu6", "float32")
    plain = op_text(g, 3, "relu6", "float32").replace(", x_channels_last, out_channels_last", "")
    plain = plain.replace(ttype(last(g.x), "float32"), ttype(g.x, "float32"))
    plain = plain.replace(ttype(last(g.y), "float32"), ttype(g.y, "float32"))
    name = case_name(g, 3, "relu6", "float32")
    a = opc.compile(flagged, grad=True)
    b = opc.compile(plain, grad=True)
    rng = np.random.default_rng(SEED)
    x, w, bias, dy = (random_array(s, "float32", rng, -1, 1) for s in (g.x, g.w, (g.w[0],), g.y))
    x = x * 4
    ga = getattr(a, f"{name}_grad")(np.ascontiguousarray(to_last(x)), w, bias, np.ascontiguousarray(to_last(dy)))
    gb = getattr(b, f"{name}_grad")(x, w, bias, dy)
    assert_near(ga[0], to_last(gb[0]).astype(np.float64), "float32", "dx")
    for what, p, q in zip(("dw", "dbias"), ga[1:], gb[1:]):
        assert_near(p, q.astype(np.float64), "float32", what)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_composite_rule_with_layouts(layout: int) -> None:
    """The rule a target without the kernel (cuda) runs: transposes around conv + bias + act."""
    g = GEOS[4]
    text = op_text(g, layout, "relu", "float32")
    m = opc.compile(text, target="cpu", decompose="opc.fused_conv_epilogue")
    assert "opc_nn_fused_conv_epilogue" not in m.c_source
    x, w, b, z = inputs(g, layout, "float32")
    got = getattr(m, case_name(g, layout, "relu", "float32"))(x, w, b)
    want = np.maximum(z, 0)
    assert_near(got, to_last(want) if layout & 2 else want, "float32", "out", scale=4.0)
    assert "transpose" in str(prepare(parse_text(text), decompose="opc.fused_conv_epilogue").module)
