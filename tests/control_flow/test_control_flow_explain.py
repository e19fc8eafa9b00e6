"""`opc explain` on a program with control flow: each op's host route, and each body's kernels."""

from cf_programs import IF_IN_LOOP

from opc.explain import explain, explain_kernels
from opc.frontend import load_module


def test_explain_names_host_routes():
    text = explain(load_module(IF_IN_LOOP).module, "cpu")
    rows = {line.split()[0]: line for line in text.splitlines()[2:] if line.strip()}
    assert "host" in rows["scf.for"] and "C for" in rows["scf.for"]
    assert "host" in rows["scf.if"] and "C if" in rows["scf.if"]
    assert "kernel" in rows["opc.reduce_sum"]


def test_explain_kernels_per_body():
    text = explain_kernels(load_module(IF_IN_LOOP).module, "cpu")
    assert "@f: 0 kernels" in text  # the host function runs no kernel of its own
    assert text.count("body of scf.if") == 2 and text.count("body of scf.for") == 1
    assert "kernel 0 (reduction): reduce_sum" in text
