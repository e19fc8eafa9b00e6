"""The ONNX node cases under the sanitizers (tests/support/onnx_node_sanitize.py; the whole set is a
by-hand run, bench/results/2026-12-06-sanitize-onnx.md): a fixed, varied sample must run with 0
ASan/UBSan reports and the results of the expectations file, and a bug planted in the generated C
(an out-of-bounds read for ASan, a signed overflow for UBSan) must be reported against its case
while the other cases of the batch still run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from opc.sanitize import runtime_library, sanitized_env

pytest.importorskip("onnx", reason="the ONNX node cases need the onnx package (pip install '.[onnx]')")
pytestmark = pytest.mark.skipif(runtime_library("libasan.so") is None,
                                reason="the C compiler has no ASan runtime (libasan.so)")

import onnx_node_sanitize as sanitize  # noqa: E402
import onnx_node_suite as suite  # noqa: E402

# one or two cases per family whose C is its own: convs and pools (runtime kernels, padding, ceil
# mode, dilations), gathers and scatters (negative and batched indices), slices with negative
# steps, resize (cubic, antialias), the RNNs with sequence lengths, reductions, attention with a
# KV cache, control flow (If, Loop, Scan), and the odd kernels (grid sample, RoiAlign, Col2Im, DFT,
# TopK, NonZero, CumSum, pads), and one of each family added since the full run 2
SAMPLE = [
    "test_conv_with_strides_padding", "test_convtranspose_group_2",
    "test_averagepool_2d_ceil_last_window_starts_on_pad", "test_maxpool_2d_dilations",
    "test_maxpool_with_argmax_2d_precomputed_strides", "test_lppool_2d_pads",
    "test_gather_elements_negative_indices", "test_gathernd_example_int32_batch_dim1",
    "test_scatter_elements_with_reduction_max", "test_scatternd_add", "test_slice_neg_steps",
    "test_resize_upsample_sizes_cubic", "test_resize_downsample_scales_linear_antialias",
    "test_lstm_with_peepholes", "test_gru_seq_length", "test_rnn_seq_length",
    "test_reduce_log_sum_exp_keepdims_random", "test_reduce_max_do_not_keepdims_random",
    "test_attention_4d_gqa_with_past_and_present", "test_layer_normalization_4d_axis_negative_2",
    "test_if_seq", "test_loop13_seq", "test_scan9_sum",
    "test_gridsample_bicubic", "test_roialign_aligned_true", "test_col2im_5d", "test_dft_rfft",
    "test_top_k_negative_axis", "test_nonzero_example", "test_cumsum_1d_reverse_exclusive", "test_reflect_pad",
    # since run 2: Loop at run time (scan outputs stacked), sizes from the data, ml ops, seeded Dropout
    "test_loop11", "test_unique_sorted_with_axis", "test_nonmaxsuppression_two_batches", "test_compress_default_axis",
    "test_ai_onnx_ml_tree_ensemble_single_tree", "test_ai_onnx_ml_array_feature_extractor", "test_dropout_default_mask",
]

# C planted at the top of one case's function: heap memory read one byte past its end (ASan; the
# pointer is volatile so that UBSan's object-size check cannot see the bound first), and a float
# cast to int out of its range (UBSan, which would go on after a report without
# -fno-sanitize-recover; a signed overflow would not do: CFFI builds with Python's -fwrapv)
OUT_OF_BOUNDS = ("{ char *volatile opc_p = (char *)malloc(4); volatile char opc_c = opc_p[4]; (void)opc_c; "
                 "free(opc_p); }")
OVERFLOW = "{ volatile float opc_f = 1e10f; volatile int opc_i = (int)opc_f; (void)opc_i; }"
PLANT = f"""
import re
import opc.api

_build = opc.api.build_extension
def _planted(source, *args, **kwargs):
    for fn, line in (("test_relu_0", {OUT_OF_BOUNDS!r}), ("test_abs_0", {OVERFLOW!r})):
        source = re.sub(rf"(\\nint opc_fn_{{fn}}\\([^)]*\\) {{{{\\n)", lambda m: m.group(1) + "  " + line + "\\n", source)
    return _build(source, *args, **kwargs)
opc.api.build_extension = _planted
"""


def test_a_cpp_exception_in_onnx_is_caught_in_a_sanitized_process():
    """onnx's strict shape inference throws a C++ exception that Python catches (the loader's
    fallback does this): in a sanitized child, once aborted with ASan's "CHECK failed:
    real___cxa_throw != 0" (libstdc++ not loaded when ASan started), which stopped a batch of the
    full run; sanitized_env preloads libstdc++ so the exception is caught as without ASan."""
    code = ("import onnx, onnx.helper as h, onnx.shape_inference as si\n"
            "t = onnx.TensorProto.FLOAT\n"
            "g = h.make_graph([h.make_node('Add', ['a', 'b'], ['c'])], 'g', [h.make_tensor_value_info('a', t, [2]),"
            " h.make_tensor_value_info('b', t, [3])], [h.make_tensor_value_info('c', t, [2])])\n"
            "try:\n    si.infer_shapes(h.make_model(g), strict_mode=True)\nexcept Exception as e:\n"
            "    print('caught', type(e).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=sanitized_env())
    assert proc.returncode == 0 and proc.stdout.startswith("caught"), proc.stdout + proc.stderr[-2000:]


def test_node_sample_runs_clean_under_sanitizers():
    result = sanitize.sanitize(SAMPLE, batch=len(SAMPLE), log=lambda _: None)
    assert result.failure is None, result.failure
    assert not result.reports, "\n\n".join(f"{c}:\n{r}" for c, r in sorted(result.reports.items()))
    expected = suite.read_expectations()
    assert sorted(result.status) == sorted(SAMPLE)
    assert sanitize.changed(result.status, expected, ()) == {}
    assert all(expected[c] == "pass" for c in SAMPLE), "the sample is meant to be cases that pass"


def test_a_planted_bug_is_reported_against_its_case(tmp_path, monkeypatch):
    # a cache of its own: the planted modules must not be found (or left) in the session's
    monkeypatch.setenv("OPC_CACHE_DIR", str(tmp_path / "cache"))
    cases = ["test_abs", "test_neg", "test_relu"]
    result = sanitize.run_batch(cases, prelude=PLANT)
    assert result.failure is None, result.failure
    assert sorted(result.reports) == ["test_abs", "test_relu"], result.reports
    assert "AddressSanitizer: heap-buffer-overflow" in result.reports["test_relu"], result.reports["test_relu"]
    assert "READ of size 1" in result.reports["test_relu"], result.reports["test_relu"]
    assert "runtime error: 1e+10 is outside the range of representable values" in result.reports["test_abs"], result.reports["test_abs"]
    # the case between them ran, and was right, in the child that finished the batch
    assert result.status == {"test_abs": "sanitizer report", "test_neg": "pass", "test_relu": "sanitizer report"}


def test_report_is_read_after_the_last_case_named():
    stderr = (f"{sanitize.MARK}test_a\n{sanitize.MARK}test_b\nsome warning\n"
              "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\nREAD of size 4\n")
    assert sanitize.report_of(stderr) == ("test_b", "==1==ERROR: AddressSanitizer: heap-buffer-overflow on "
                                                    "address 0x1\nREAD of size 4")
    case, report = sanitize.report_of(f"{sanitize.MARK}test_c\nSegmentation fault\n")
    assert case == "test_c" and report.startswith("no sanitizer report") and "Segmentation fault" in report
    assert sanitize.report_of("ImportError: no module\n")[0] is None
