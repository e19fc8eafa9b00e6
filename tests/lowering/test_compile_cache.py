"""The compile cache keyed before parsing (opc/compile_cache.py): a module compiled before loads in
a fresh process without importing xDSL, gives the same numbers, and any change of source, options or
a lost extension compiles anew."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import opc
from opc import compile_cache

SRC = """func.func @f(%x: tensor<4x3xf32>, %y: tensor<3xf32>) -> tensor<4x3xf32> {
  %a = opc.mul %x, %y : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %b = opc.exp %a : (tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return %b : tensor<4x3xf32>
}
"""

CHILD = """
import sys
import numpy as np
import opc
m = opc.compile(open(sys.argv[1]).read(), grad=sys.argv[3] == "grad", cache_dir=sys.argv[2])
x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
y = np.array([1.0, -2.0, 0.5], np.float32)
print("xdsl" in sys.modules, sorted(n for n in dir(m) if n.startswith("f")))
np.testing.assert_allclose(m.f(x, y), np.exp(x.astype(np.float64) * y), rtol=2e-6)
"""


def run_child(tmp_path, src: str, grad: str = "") -> tuple[bool, list[str]]:
    path = tmp_path / "model.mlir"
    path.write_text(src)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "cache"), grad],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    xdsl, names = out.stdout.split(" ", 1)
    return xdsl == "True", eval(names)  # noqa: S307 - our own child's list of names


def test_second_process_skips_the_pipeline(tmp_path):
    assert run_child(tmp_path, SRC) == (True, ["f"])  # compiled: the pipeline ran
    assert run_child(tmp_path, SRC) == (False, ["f"])  # found by its text: no xDSL imported
    assert run_child(tmp_path, SRC, "grad") == (True, ["f", "f_grad", "f_value_and_grad"])  # another option
    edited = SRC.replace("opc.exp %a", "opc.exp %a ")
    assert run_child(tmp_path, edited) == (True, ["f"])  # other text, even if the same program


def test_lost_extension_compiles_again(tmp_path):
    cache = tmp_path / "cache"
    m = opc.compile(SRC, cache_dir=str(cache))
    key = compile_cache.key_for(SRC, "cpu", False, None, True)
    assert compile_cache.lookup(key, str(cache)) is m  # in memory
    compile_cache._memory.clear()
    os.remove(m.path)
    assert compile_cache.lookup(key, str(cache)) is None
    again = opc.compile(SRC, cache_dir=str(cache))
    x, y = np.ones((4, 3), np.float32), np.full(3, 2.0, np.float32)
    np.testing.assert_allclose(again.f(x, y), np.exp(2.0) * np.ones((4, 3)), rtol=2e-6)


@pytest.mark.parametrize("source,target,cached", [(SRC, "cpu", True), (SRC.encode(), "cpu", True),
                                                  (SRC, "cuda", False), (object(), "cpu", False)])
def test_what_is_keyed(source, target, cached):
    assert (compile_cache.key_for(source, target, False, None, True) is not None) == cached


def test_key_follows_options_and_flavor(monkeypatch):
    base = compile_cache.key_for(SRC, "cpu", False, None, True)
    assert base != compile_cache.key_for(SRC, "cpu", True, None, True)
    assert base != compile_cache.key_for(SRC, "cpu", False, "all", True)
    assert base != compile_cache.key_for(SRC, "cpu", False, None, False)
    monkeypatch.setenv("OPC_SANITIZE", "1")
    assert base != compile_cache.key_for(SRC, "cpu", False, None, True)


def test_a_record_keeps_its_callers_extra_and_notes(tmp_path):
    # opc.load_onnx stores what a hit needs besides the module (onnx_cache.py), and small facts as notes
    cache = str(tmp_path / "cache")
    m = opc.compile(SRC, cache_dir=cache)
    key = compile_cache.key_for(SRC, "cpu", False, None, True)
    assert key is not None
    own = compile_cache.lookup_entry(key, cache)
    assert own is not None and own[1] is None  # opc.compile's own records carry none
    from opc.api import full_compile, load_extension_name

    again, signatures = full_compile(SRC, "cpu", cache_dir=cache)
    assert signatures is not None
    compile_cache.store("k" * 32, again, signatures, load_extension_name(again), cache, {"function": "f", "n": [1]})
    compile_cache._memory.clear()
    found = compile_cache.lookup_entry("k" * 32, cache)
    assert found is not None and found[1] == {"function": "f", "n": [1]}
    x, y = np.ones((4, 3), np.float32), np.full(3, 2.0, np.float32)
    np.testing.assert_allclose(found[0].f(x, y), m.f(x, y))
    assert compile_cache.read_note("n" * 32, cache) is None
    compile_cache.write_note("n" * 32, {"bound": ["shape"]}, cache)
    assert compile_cache.read_note("n" * 32, cache) == {"bound": ["shape"]}
    (tmp_path / "cache" / "loaded" / f"{'n' * 32}.note.json").write_text("{\"bound\": [")  # cut short
    assert compile_cache.read_note("n" * 32, cache) is None
