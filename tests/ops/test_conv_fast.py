"""The fast CPU convolutions (issue 19, runtime/opc_nn_conv_fast.h) and fused_conv_epilogue.

The implicit-GEMM kernels take f32 convs whose strides are all 1 (forward, input gradient,
filter gradient, conv_transpose), the depthwise loop nests the depthwise ones: a grid
of geometries aimed at their edges -- channel counts that are not a multiple of the micro-tile,
rows shorter and longer than a tile, pads wider than the kernel (the input gradient's pads
d (k - 1) - p go negative and crop), dilations, groups, 1-D and 3-D, several images -- against
the NumPy references of test_conv.py, in f32 (the fast route) and f64 (the im2col route) from
one module. Then conv + bias + activation fused by opc-fuse: the same numbers as the unfused
ops (fuse=False) and NumPy, forward and gradients, f32 and f64, stride 1 (the kernel's store)
and strided (conv, then one pass); `opc explain` shows the fused op on the CPU and not on cuda."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import func, random_array, ttype
from routes import run_counting_routes, wide_vectors
from test_conv import Geo, assert_near, conv_ref, grad_filter_ref, grad_input_ref

import opc
from opc.api import lower, prepare
from opc.explain import explain
from opc.frontend import load_module
from opc.ir import parse_text
from opc.lowering.c_emitter import emit_c

SEED = 23

# Every non-depthwise geometry here computes at most 1.5 positions per output with AVX-512's
# 48-position tiles (opc_cf_applies), so the fast kernels take them; test_conv.py's smaller
# ones exercise the im2col route.
FAST = [
    Geo("k3_c5_o7", (1, 5, 9, 11), (7, 5, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("k3_c17_o13_n2", (2, 17, 12, 10), (13, 17, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("wide_rows", (1, 3, 4, 70), (9, 3, 3, 3), (1, 1), (1, 1), (0, 2, 1, 0)),
    Geo("pads_past_kernel", (1, 4, 5, 6), (6, 4, 2, 3), (1, 1), (1, 1), (3, 4, 2, 3)),
    Geo("dilated_asym", (2, 6, 14, 15), (5, 6, 3, 2), (1, 1), (2, 3), (2, 0, 1, 3)),
    Geo("groups3", (1, 9, 14, 15), (6, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    Geo("k5_valid", (1, 8, 12, 12), (16, 8, 5, 5), (1, 1), (1, 1), (0, 0, 0, 0)),
    Geo("c1d_k7", (3, 4, 70), (10, 4, 7), (1,), (1,), (3, 3)),
    Geo("c3d", (1, 3, 4, 9, 11), (4, 3, 3, 2, 3), (1, 1, 1), (1, 2, 1), (1, 0, 1, 1, 1, 1)),
    Geo("dw_k3_n2", (2, 10, 13, 9), (10, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 10),
    Geo("dw_k5_dil", (1, 7, 11, 12), (7, 1, 5, 3), (1, 1), (2, 1), (4, 2, 0, 1), 7),
    Geo("dw_1d_long", (2, 3, 100), (3, 1, 4), (1,), (1,), (0, 3), 3),
    Geo("dw_3d", (1, 4, 4, 5, 6), (4, 1, 2, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 1, 1, 1), 4),
    # the f32 forward's other depthwise kernels: channels last where rows are narrower than a
    # vector and a tap reads more than two vectors of a plane (20 channels: a partial vector;
    # stride 2 and dilation), strided ones over rows of at least a vector (stride 2: the shuffle;
    # 3: the plain gather; 3-D); and convs with at most 8 outputs per channel, run transposed (1x1: x itself; 3x3, strided:
    # through im2col)
    Geo("dw_narrow_dil", (2, 20, 9, 9), (20, 1, 3, 3), (1, 1), (2, 1), (2, 1, 0, 2), 20),
    Geo("dw_narrow_s2", (1, 40, 7, 7), (40, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 40),
    # ImageNet's 14x14 (12 whole tiles of positions and 4; 36 channels: two whole blocks and 4) and
    # 20x20 -> 10x10 at stride 2, channels last: whole tiles of whole blocks go straight from registers
    Geo("dw_cl_14x14", (1, 36, 14, 14), (36, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 36),
    Geo("dw_cl_s2_20", (2, 32, 20, 20), (32, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 32),
    # planes of a few vectors whose taps each read at most two of them (opc_cf_dwv_run's two-source
    # permutes, AVX-512; the channels-last kernel without it): 8x8 (whole vectors), 16x16 -> 8x8 at
    # stride 2 (a tap's rows two vectors apart; 22 channels: groups of 4 and 2 alone), 5x5 (80
    # channels: a chunk of 64 and one of 16; a masked last vector), 7x7, dilated, 3-D
    Geo("dw_narrow_8x8", (2, 32, 8, 8), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32),
    Geo("dw_many_s2_16", (2, 22, 16, 16), (22, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 22),
    Geo("dw_narrow_80c", (1, 80, 5, 5), (80, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 80),
    Geo("dw_narrow_7x7", (1, 18, 7, 7), (18, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 18),
    Geo("dw_many_dil_6x7", (1, 5, 6, 7), (5, 1, 3, 3), (1, 1), (2, 1), (2, 1, 2, 1), 5),
    Geo("dw_many_3d", (1, 6, 2, 5, 5), (6, 1, 2, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 0, 1, 1), 6),
    # planes of at most one vector in and out (opc_cf_dwv_run, AVX-512): one permute per tap, 4
    # channels at a time then the rest one by one (7, 130: chunks of 64 and a partial one), any
    # stride, dilation, uneven pads, 1-D and 3-D
    Geo("dw_narrow_2x2", (1, 24, 2, 2), (24, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 24),
    Geo("dw_vec_4x4", (2, 32, 4, 4), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32),
    Geo("dw_vec_s2_7c", (1, 7, 4, 4), (7, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 7),
    Geo("dw_vec_130c", (1, 130, 3, 3), (130, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 130),
    Geo("dw_vec_dil", (2, 6, 3, 5), (6, 1, 2, 3), (1, 1), (2, 1), (1, 0, 0, 2), 6),
    Geo("dw_vec_1d", (2, 5, 12), (5, 1, 3), (1,), (1,), (1, 1), 5),
    Geo("dw_vec_3d", (1, 4, 2, 2, 3), (4, 1, 2, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1, 0, 1, 1), 4),
    # planes of at most 8 positions in and out (opc_cf_dwg_run, AVX-512): 16 / the larger plane's
    # positions channels side by side in a vector: 2x2 (4 a vector), 2x3 (2; 13 channels: a group
    # of one), 5 -> 3 positions at stride 2 (3 a vector, 15 lanes; 11 channels: a group of two), and
    # with the batch's images
    Geo("dw_group_2x3", (2, 13, 2, 3), (13, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 13),
    Geo("dw_group_1x5_s2", (2, 11, 1, 5), (11, 1, 1, 3), (1, 2), (1, 1), (0, 1, 0, 1), 11),
    Geo("dw_group_2x2_many", (2, 70, 2, 2), (70, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 70),
    Geo("dw_s2_rows", (1, 3, 5, 70), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 3),
    # the row kernel (opc_cf_dw_planes_run): 3x3 and 5x5 taps at stride 1 and 2, blocks of 4 rows and
    # vectors of columns whose last ones are shifted back, uneven pads, a depth tap loop
    Geo("dw_rows_k3", (2, 5, 11, 37), (5, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 5),
    Geo("dw_rows_k3_pads", (1, 3, 6, 33), (3, 1, 3, 3), (1, 1), (1, 1), (0, 2, 2, 1), 3),
    Geo("dw_rows_k5_s2", (1, 3, 14, 40), (3, 1, 5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 3),
    Geo("dw_rows_k5_s1", (1, 2, 3, 18), (2, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 2),
    # blocks of 8 rows: 11 and 13 output rows (the last block shifted back over the one before)
    Geo("dw_rows_tall_s2", (1, 4, 21, 36), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 4),
    Geo("dw_rows_tall_k5", (2, 3, 13, 20), (3, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 3),
    Geo("dw_rows_3d", (1, 4, 3, 6, 20), (4, 1, 2, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 1, 1, 1), 4),
    Geo("dw_s3_rows", (1, 2, 4, 60), (2, 1, 2, 3), (1, 3), (1, 2), (0, 1, 1, 0), 2),
    Geo("dw_3d_s2_rows", (1, 4, 3, 4, 40), (4, 1, 2, 3, 3), (1, 2, 2), (1, 1, 1), (0, 1, 1, 1, 0, 1), 4),
    Geo("pointwise_few", (2, 24, 2, 3), (40, 24, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    Geo("few_k3", (2, 6, 2, 2), (10, 6, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("few_k3_s2_dil", (1, 5, 6, 7), (9, 5, 3, 2), (2, 3), (2, 1), (1, 0, 1, 2)),
]
# The channel-vector kernel (runtime/opc_nn_conv_cw.h) takes the f32 forward convs that the one
# above does not take or takes with tiles under 90% outputs: row stride 1 or 2, tiles of 14 or 7 outputs of a row (the last one partial),
# 32 output channels per tile (counts that are not a multiple: a partial tile), K in chunks of
# 256 taps; strided rows and columns, dilations, groups, 1-D and 3-D, several images.
CW = [
    Geo("cw_stem_k7_s2", (1, 3, 20, 56), (40, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    Geo("cw_k3_s2", (2, 8, 15, 27), (20, 8, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    Geo("cw_small_img", (2, 20, 7, 7), (33, 20, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("cw_over_cf_14", (1, 20, 14, 14), (24, 20, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # cf's tiles 82% outputs
    Geo("cw_deep_chunks", (1, 64, 7, 7), (32, 64, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("cw_dil_s12", (1, 16, 9, 28), (17, 16, 2, 3), (1, 2), (2, 1), (0, 1, 2, 0)),
    Geo("cw_groups2_s2", (1, 32, 9, 27), (36, 16, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2),
    Geo("cw_1d_s2", (2, 6, 60), (16, 6, 5), (2,), (1,), (2, 2)),
    Geo("cw_3d_s2", (1, 4, 5, 6, 27), (16, 4, 3, 2, 3), (2, 1, 2), (1, 1, 1), (1, 0, 1, 1, 1, 1)),
    # rows of 16 (8-wide tiles; 4 tile groups share panels packed once, the last 8 of 40 channels
    # zero-padded, K = 216 transposed in 16 x 16 blocks and a tail of 8; stride 2: at stride 1 the
    # kernel above takes a 16x16 image), rows of 8 at stride 2,
    # rows of 4 and 2 (4- and 2-wide tiles)
    Geo("cw_rows16_shared", (1, 24, 32, 32), (40, 24, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    Geo("cw_rows8_s2", (1, 16, 16, 16), (32, 16, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    Geo("cw_rows4", (2, 20, 4, 4), (36, 20, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("cw_rows2", (1, 8, 9, 2), (20, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("cw_rows2_s2", (1, 8, 9, 4), (20, 8, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    # tiles of two rows, where rows are 2 or 4 outputs and come in even counts: 9 tiles (two groups),
    # a partial channel tile; stride 2; 3-D (the pairs inside a plane). (A lone conv on a 2x2 image
    # takes opc_nn_conv_few; test_conv_epilogue's cw_2x2 runs its tiles here.)
    Geo("cw_row_pairs2", (1, 24, 18, 2), (40, 24, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    Geo("cw_row_pairs4_s2", (2, 16, 8, 8), (36, 16, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    Geo("cw_row_pairs_3d", (1, 8, 3, 4, 2), (20, 8, 2, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 0, 1, 1)),
]
OPS = {"conv": lambda g, a, b: conv_ref(g, a, b), "conv_grad_input": lambda g, a, b: grad_input_ref(g, a, b),
       "conv_grad_filter": lambda g, a, b: grad_filter_ref(g, a, b),
       "conv_transpose": lambda g, a, b: grad_input_ref(g, a, b)}
DTYPES = ("float32", "float64")
TOL = {"float32": 2e-6, "float64": 1e-13}


def shapes(g: Geo, op: str) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    return {"conv": ([g.x, g.w], g.y), "conv_grad_input": ([g.y, g.w], g.x),
            "conv_grad_filter": ([g.x, g.y], g.w), "conv_transpose": ([g.y, g.w], g.x)}[op]


def name(g: Geo, op: str, dt: str) -> str:
    return f"{op}_{g.name}_{dt}"


def source(g: Geo, op: str, dt: str) -> str:
    (sa, sb), sr = shapes(g, op)
    line = (f"%r = opc.{op} %a0, %a1 {g.attrs(op == 'conv_transpose')} : ({ttype(sa, dt)}, {ttype(sb, dt)}) -> "
            f"{ttype(sr, dt)}")
    return func(name(g, op, dt), [(sa, dt), (sb, dt)], line, [(sr, dt)])


CASES = [(g, op, dt) for g in FAST for op in OPS for dt in DTYPES] + [(g, "conv", dt) for g in CW for dt in DTYPES]


# The runtime kernel each case takes (its route, runtime/opc_routes.h, counted while a profile is on).
# Every kernel computes the same numbers, so a geometry that falls back to another kernel (a dispatch
# slip: a table's field left 0 sent MobileNetV2's small depthwise planes to a kernel 2x slower) passes
# every comparison here; its route does not. The f32 forward's, by the vector width of the build:
FORWARD_ROUTES = {
    "conv: direct": ("k3_c5_o7", "k3_c17_o13_n2", "wide_rows", "pads_past_kernel", "dilated_asym", "groups3",
                     "c1d_k7", "c3d"),
    "conv: channel vector": ("k5_valid", *(g.name for g in CW)),
    "conv: few positions": ("pointwise_few", "few_k3", "few_k3_s2_dil"),
    "conv: pointwise gemm": ("pw_edges", "pw_deep_k", "pw_few_rows"),
    "depthwise: rows": ("dw_s2_rows", "dw_rows_k3", "dw_rows_k3_pads", "dw_rows_k5_s2", "dw_rows_k5_s1",
                        "dw_rows_tall_s2", "dw_rows_tall_k5", "dw_rows_3d", "dw_s3_rows", "dw_3d_s2_rows"),
    "depthwise: planes": ("dw_1d_long",),
    "depthwise: channels last": ("dw_k3_n2", "dw_k5_dil", "dw_3d", "dw_narrow_dil", "dw_narrow_s2", "dw_cl_14x14",
                                 "dw_cl_s2_20"),
    "depthwise: plane vector": ("dw_narrow_8x8", "dw_many_s2_16", "dw_narrow_80c", "dw_narrow_7x7",
                                "dw_many_dil_6x7", "dw_many_3d", "dw_vec_4x4", "dw_vec_s2_7c", "dw_vec_130c",
                                "dw_vec_dil", "dw_vec_1d", "dw_vec_3d"),
    "depthwise: grouped": ("dw_narrow_2x2", "dw_group_2x3", "dw_group_1x5_s2", "dw_group_2x2_many"),
}
FORWARD_ROUTE = {g: route for route, names in FORWARD_ROUTES.items() for g in names}
# Without AVX-512 (8 floats a vector) the plane-vector and grouped kernels do not exist, rows of 8
# to 15 outputs are a vector or more, and tiles of 24 positions waste less
NARROW_VECTOR_ROUTE = {
    **{g: "depthwise: channels last" for g in (*FORWARD_ROUTES["depthwise: plane vector"],
                                                 *FORWARD_ROUTES["depthwise: grouped"])},
    **{g: "depthwise: rows" for g in ("dw_k3_n2", "dw_cl_14x14", "dw_cl_s2_20", "dw_narrow_8x8", "dw_many_s2_16")},
    **{g: "depthwise: planes" for g in ("dw_k5_dil", "dw_narrow_dil", "dw_vec_1d")},
    "cw_over_cf_14": "conv: direct", "c1d_groups": "conv: direct",
}


def expected_routes(g: Geo, op: str, dt: str) -> dict[str, int]:
    """The route of conv `op` on geometry g in dtype dt, as Profile.routes() counts one call."""
    depthwise = g.w[1] == 1 and g.group == g.x[1] == g.w[0]
    prefix = "conv" if op == "conv" else "conv_grad_filter" if op == "conv_grad_filter" else "conv_grad_input"
    gemm = {"conv": "im2col gemm", "conv_grad_input": "gemm col2im", "conv_grad_filter": "im2col gemm"}[prefix]
    if dt != "float32":  # every f32 fast kernel's fallback: im2col where a group has channels to sum
        return {f"{prefix}: {'loops' if g.w[1] == 1 else gemm}": 1}
    if op == "conv":
        route = FORWARD_ROUTE.get(g.name, "conv: im2col gemm")
        return {(route if wide_vectors() else NARROW_VECTOR_ROUTE.get(g.name, route)): 1}
    if depthwise:  # strided: the stride-1 kernels on dy spread out (opc_cf_dw_grad)
        return {f"{prefix}: depthwise": 1}
    return {f"{prefix}: {gemm if int(np.prod(g.y[2:])) <= 8 else 'direct'}": 1}


@pytest.fixture(scope="module")
def kernels():
    return opc.compile("\n".join(source(*c) for c in CASES), target="cpu")


@pytest.mark.parametrize("g,op,dt", CASES, ids=[name(*c) for c in CASES])
def test_fast_kernels_match_numpy(kernels, g: Geo, op: str, dt: str) -> None:
    rng = np.random.default_rng(SEED)
    a, b = (random_array(s, dt, rng, -1, 1) for s in shapes(g, op)[0])
    got, routes = run_counting_routes(kernels, name(g, op, dt), a, b)
    want = OPS[op](g, a, b)
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert got.shape == want.shape and err <= TOL[dt] * (float(np.max(np.abs(want))) + 1), (err, dt)
    assert routes == expected_routes(g, op, dt)


# ---------------------------------------------------------------------------
# conv + bias + activation
# ---------------------------------------------------------------------------

FUSE_GEOS = [FAST[1], FAST[4], FAST[9],
             Geo("strided", (2, 4, 9, 8), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
             Geo("c1d_groups", (2, 6, 17), (4, 3, 3), (1,), (1,), (1, 1), 2), CW[0], CW[2],
             *(g for g in CW if g.name in ("cw_rows16_shared", "cw_rows4")),  # the cw store's runs of 8
             *(g for g in FAST if g.name in ("dw_narrow_s2", "dw_s2_rows", "dw_narrow_80c", "dw_narrow_2x2",
                                             "dw_many_s2_16", "dw_narrow_8x8",
                                             "dw_vec_s2_7c", "dw_vec_130c", "dw_group_2x3", "dw_group_1x5_s2",
                                             "dw_group_2x2_many", "dw_cl_14x14", "dw_cl_s2_20",
                                             "dw_rows_k3", "dw_rows_k5_s2", "dw_rows_tall_s2")),
             # at most 8 outputs per channel, forward without a reserve: transposed, the few-rows GEMM
             # adding the bias, the act on the copy back (opc_nn_conv_few); 1x1, and strided through im2col
             *(g for g in FAST if g.name in ("pointwise_few", "few_k3_s2_dil")),
             # pointwise convs: the GEMM, its store adding the bias per row (OPC_GEMM_ROW_BIAS): 40 rows
             # (three tiles of 12 and an edge of 4) x 90 positions (an edge of 26), a deep K (two depth
             # blocks: the bias and act on the last), 5 rows (the few-rows GEMM: bias and act after it)
             Geo("pw_edges", (2, 24, 9, 10), (40, 24, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
             Geo("pw_deep_k", (1, 300, 6, 7), (26, 300, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
             Geo("pw_few_rows", (2, 16, 12, 12), (5, 16, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0))]
# relu6: ONNX's Clip to [0, 6] as the importer writes it (maximum, then minimum)
ACTS = ("none", "relu", "gelu", "relu6")


def layer(g: Geo, act: str, dt: str) -> str:
    """conv, + bias reshaped [O, 1, ...] (as the ONNX importer writes it), then the activation."""
    tx, tw, ty = ttype(g.x, dt), ttype(g.w, dt), ttype(g.y, dt)
    o, rank = g.w[0], len(g.x) - 2
    tb, tr = ttype((o,), dt), ttype((o, *[1] * rank), dt)
    lines = [f"%y = opc.conv %x, %w {g.attrs()} : ({tx}, {tw}) -> {ty}",
             f"%br = opc.reshape %b : ({tb}) -> {tr}",
             f"%z = opc.add %y, %br : ({ty}, {tr}) -> {ty}"]
    out = "%z"
    if act == "relu6":
        ts = ttype((), dt)
        lines += [f"%lo = arith.constant dense<0.0> : {ts}", f"%hi = arith.constant dense<6.0> : {ts}",
                  f"%m = opc.maximum %z, %lo : ({ty}, {ts}) -> {ty}", f"%h = opc.minimum %m, %hi : ({ty}, {ts}) -> {ty}"]
        out = "%h"
    elif act != "none":
        attrs = " {approximate = true}" if act == "gelu" else ""
        lines.append(f"%h = opc.{act} %z{attrs} : ({ty}) -> {ty}")
        out = "%h"
    body = "\n  ".join(lines)
    return (f"func.func @{g.name}_{act}_{dt}(%x: {tx}, %w: {tw}, %b: {tb}) -> {ty} {{\n  {body}\n"
            f"  func.return {out} : {ty}\n}}\n")


def numpy_act(z: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(z, 0)
    if act == "relu6":
        return np.clip(z, 0, 6)
    if act == "gelu":
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    return z


def numpy_act_grad(z: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return (z > 0).astype(np.float64)
    if act == "relu6":
        return ((z > 0) & (z < 6)).astype(np.float64)
    if act == "gelu":
        u = np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)
        t = np.tanh(u)
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * z * z)
    return np.ones_like(z)


FUSE_CASES = [(g, act, dt) for g in FUSE_GEOS for act in ACTS for dt in DTYPES]


@pytest.fixture(scope="module")
def layers():
    text = "\n".join(layer(*c) for c in FUSE_CASES)
    return opc.compile(text, grad=True), opc.compile(text, grad=True, fuse=False)


@pytest.mark.parametrize("g,act,dt", FUSE_CASES, ids=[f"{g.name}_{a}_{d}" for g, a, d in FUSE_CASES])
def test_fused_matches_unfused_and_numpy(layers, g: Geo, act: str, dt: str) -> None:
    fused, plain = layers
    rng = np.random.default_rng(SEED)
    x, w, b, dy = (random_array(s, dt, rng, -1, 1) for s in (g.x, g.w, (g.w[0],), g.y))
    if act == "relu6":  # pre-activations well past 6 and below 0 too
        x = x * 8
    fn = f"{g.name}_{act}_{dt}"
    z = conv_ref(g, x, w) + b.astype(np.float64).reshape(-1, *[1] * (len(g.x) - 2))
    dz = dy * numpy_act_grad(z, act)
    want = [numpy_act(z, act), grad_input_ref(g, dz, w), grad_filter_ref(g, x, dz),
            dz.sum(axis=(0, *range(2, len(g.x))))]
    out, routes = run_counting_routes(fused, fn, x, w, b)
    got_f = [out, *getattr(fused, f"{fn}_grad")(x, w, b, dy)]
    got_p = [getattr(plain, fn)(x, w, b), *getattr(plain, f"{fn}_grad")(x, w, b, dy)]
    for what, f, p, ref in zip(("out", "dx", "dw", "dbias"), got_f, got_p, want):
        assert_near(f, ref, dt, f"fused {what}", scale=4.0)
        assert_near(f, p.astype(np.float64), dt, f"fused vs unfused {what}", scale=2.0)
    # the fast kernels apply bias and act in their store; the others take a pass after the conv
    want_routes = expected_routes(g, "conv", dt)
    if not (dt == "float32" and (g.name in FORWARD_ROUTE or not wide_vectors() and g.name in NARROW_VECTOR_ROUTE)):
        want_routes["conv: epilogue pass"] = 1
    assert routes == want_routes


def test_explain_shows_the_fusion_on_cpu_only() -> None:
    g = FAST[1]
    text = layer(g, "relu", "float32")
    cpu = explain(parse_text(text).module, "cpu", grad=True)
    assert "opc.fused_conv_epilogue" in cpu and "opc.relu_grad" in cpu and "opc.add " not in cpu
    cuda = explain(parse_text(text).module, "cuda")
    assert "opc.fused_conv_epilogue" not in cuda and "opc.conv " in cuda and "opc.relu" in cuda


def test_a_reserve_nothing_reads_is_not_written() -> None:
    """The forward (inference) calls the kernel without the pre-activation; its grad keeps it."""
    source, _, _ = emit_c(lower(prepare(load_module(layer(FAST[1], "relu", "float32")), grad=True)))
    forward, grad = source.split(f"{FAST[1].name}_relu_float32_grad(", 1)
    assert "opc_nn_fused_conv_epilogue_f32(" in source and "opc_nn_fused_conv_epilogue_reserve_f32(" in grad
    assert "_reserve_f32(" not in forward.split(f"{FAST[1].name}_relu_float32(", 1)[-1]


def test_fused_epilogue_by_its_rule_matches_numpy() -> None:
    """decompose="all": fused_conv_epilogue by its composite rule (CUDA's route), each activation."""
    cases = [(FUSE_GEOS[3], act, "float32") for act in ACTS]
    rules = opc.compile("\n".join(layer(*c) for c in cases), grad=True, decompose="all")
    rng = np.random.default_rng(SEED)
    for g, act, dt in cases:
        x, w, b = (random_array(s, dt, rng, -1, 1) for s in (g.x, g.w, (g.w[0],)))
        z = conv_ref(g, x, w) + b.astype(np.float64).reshape(-1, *[1] * (len(g.x) - 2))
        assert_near(getattr(rules, f"{g.name}_{act}_{dt}")(x, w, b), numpy_act(z, act), dt, f"{act} out", scale=4.0)
