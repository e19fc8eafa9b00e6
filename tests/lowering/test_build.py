"""Building modules as a user's machine sees it: the compiler's chatter stays out of the
terminal, a failed build says where its source is kept, concurrent processes build a
shared runtime object once, builds killed with SIGKILL leave nothing behind for long,
and `--emit c` / `--emit cuda` print sources a bare `gcc -c` / `nvcc -c` compiles."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opc.cli import main
from opc.errors import InternalError
from opc.lowering import build

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp.mlir"
# every runtime header: the GEMM, the nn kernels (softmax, layer_norm), run-time checks (gather)
ALL_HEADERS = """
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
             %i: tensor<3xi64>) -> (tensor<4x8xf32>, tensor<3x8xf32>) {
  %m = opc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = opc.softmax %m {axis = 1} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y, %mean, %rstd = opc.layer_norm %s, %g, %b {begin_norm_axis = 1, epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %r = opc.gather %y, %i {axis = 0} : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  func.return %y, %r : tensor<4x8xf32>, tensor<3x8xf32>
}
"""


def test_compiler_warnings_are_captured(tmp_path, capfd):
    source = '#warning "a warning the user must not see"\nint opc_fn_quiet(void) { return 0; }\n'
    build.build_extension(source, [], tmp_path)
    out, err = capfd.readouterr()
    assert "warning" not in out + err


def test_failed_build_shows_the_compiler_and_keeps_the_source(tmp_path):
    with pytest.raises(InternalError) as info:
        build.build_extension('#include "opc_runtime.h"\nint f(void) { return undeclared_name; }\n', [], tmp_path)
    message = str(info.value)
    assert message.startswith("the C compiler failed on the generated code; this is a bug in opc")
    assert "'undeclared_name' undeclared" in message.replace("‘", "'").replace("’", "'")
    assert len(message.splitlines()) <= build.FAILED_LINES + 2
    kept = Path(message.split("the source kept in ", 1)[1].splitlines()[0])
    assert kept.parent == tmp_path / "failed"
    kept_source = (kept / "module.c").read_text()
    assert "undeclared_name" in kept_source and '#include "opc_runtime.h"' not in kept_source  # self-contained
    assert "undeclared" in (kept / "build.log").read_text()
    assert not list((tmp_path / "tmp").iterdir())  # the build dir went away


CHILD = """
import sys
from pathlib import Path
import subprocess
from opc.lowering import build
real_run = subprocess.run
def counting_run(cmd, *args, **kwargs):
    if any("opc_nn_lib.c" in str(c) for c in cmd):
        with open(sys.argv[2], "a") as log:
            log.write("built\\n")
    return real_run(cmd, *args, **kwargs)
subprocess.run = counting_run
print(build.runtime_object(Path(sys.argv[1]), "opc_nn_lib", ("-DOPC_NN_ONLY=3",)))  # the f64 nn kernels
"""


def test_concurrent_processes_build_the_runtime_once(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    cache.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(cache), str(log)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o.strip() for o, _ in outs}) == 1 and Path(outs[0][0].strip()).is_file()
    assert log.read_text() == "built\n"
    assert not list((cache / "tmp").iterdir())


def backdate(path: Path) -> None:
    old = time.time() - 10 * build.STALE_BUILD_S
    os.utime(path, (old, old))


def test_sweep_removes_only_dead_builds(tmp_path):
    root = tmp_path / "tmp"
    root.mkdir()
    names = ("dead", "running", "dead-young", "unlocked", ".being-made", ".killed-while-made")
    dead, running, young, unlocked, being_made, killed_while_made = (root / n for n in names)
    for d in (dead, running, young):
        d.mkdir()
        (d / ".lock").touch()
    for d in (unlocked, being_made, killed_while_made):
        d.mkdir()  # no lock yet
    held = os.open(running / ".lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        for d in (dead, running, unlocked, killed_while_made):
            backdate(d)
        build.sweep_dead_builds(root)
        assert sorted(p.name for p in root.iterdir()) == [".being-made", "running"]
    finally:
        os.close(held)


def test_build_killed_with_sigkill_is_cleaned_up(tmp_path):
    script = ("import sys, time\nfrom pathlib import Path\nfrom opc.lowering import build\n"
              "with build.build_dir(Path(sys.argv[1]), 'killed') as d:\n"
              "    (d / 'half-written.o').write_bytes(b'x' * 4096)\n    print(d, flush=True)\n    time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    left = Path(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (left / "half-written.o").is_file() and not left.name.startswith(".")
    with build.build_dir(tmp_path, "next"):  # the next build sweeps, right after the kill
        assert not left.exists()


# ---------------------------------------------------------------------------
# --emit c / --emit cuda: self-contained sources
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("emit") / "model.mlir"
    path.write_text(ALL_HEADERS)
    return path


@pytest.mark.parametrize("emit,compiler,suffix", [("c", "gcc", ".c"), ("cuda", "nvcc", ".cu")])
def test_emitted_source_compiles_alone(model, tmp_path, capsys, emit, compiler, suffix):
    if compiler == "nvcc" and shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    assert main(["compile", str(model), "--grad", "--emit", emit]) == 0
    source = capsys.readouterr().out
    assert '#include "' not in source
    for header in ("opc_runtime.h", "opc_status.h", "opc_gemm_api.h" if emit == "c" else "opc_cuda_gemm.cuh",
                   "opc_nn_api.h" if emit == "c" else "opc_nn.cuh"):
        assert f"---- {header} (opc runtime) ----" in source
    src = tmp_path / f"model{suffix}"
    src.write_text(source)
    strict = ["-Werror", "all-warnings"] if compiler == "nvcc" else []  # unused runtime helpers are no warning
    proc = subprocess.run([compiler, "-c", *strict, str(src), "-o", str(tmp_path / "model.o")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("dtype", ["i64", "i32", "f64", "f32"])
def test_constant_tensors_copy_right(dtype):
    """gcc 12.2 tuned for Skylake-AVX512 / Ice Lake / Rocket Lake (-march=native on a Sapphire Rapids)
    stored [3, 3, 0, 0] of this constant as a broadcast of 3 (build.CONSTANT_COPY_PROBE): the build
    probes for it and tunes generically where it happens."""

    import opc

    values = [0, 0, 1, 2, 2, 1, 3, 0, 3, 3, 0, 0, 1, 2, 1]
    lit = ", ".join(str(v) if dtype[0] == "i" else f"{v}.0" for v in values)
    m = opc.compile(f"""func.func @g() -> tensor<15x{dtype}> {{
  %c = arith.constant dense<[{lit}]> : tensor<15x{dtype}>
  func.return %c : tensor<15x{dtype}>
}}""")
    assert m.g().tolist() == values


def test_probe_tells_a_wrong_copy():
    """The probe itself: right for plain -O3, and it runs (a probe that cannot fail would hide the bug)."""
    cc = os.environ.get("CC", "gcc")
    assert build.copies_constants_right(cc, ())
    flags = build.native_flags()
    if "-mtune=generic" in flags:  # this machine's gcc has the bug: the probe saw it
        assert not build.copies_constants_right(cc, tuple(f for f in flags if f != "-mtune=generic"))


def test_runtime_objects_build_at_once(tmp_path, monkeypatch):
    # the GEMM and nn objects are independent gcc runs of seconds each: a first compile waits for the longest
    running, most, lock = [0], [0], threading.Lock()

    def fake_object(cache, lib="opc_gemm_lib", defines=()):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return cache / f"{lib}{''.join(defines)}.o"

    monkeypatch.setattr(build, "runtime_object", fake_object)
    source = "opc_rt_gemm_f32(a); opc_nn_conv_f32(b); opc_nn_pool_f64(c);"
    objects = build.runtime_objects(source, tmp_path)
    assert objects == [str(tmp_path / n) for n in ("opc_gemm_lib.o", "opc_nn_lib-DOPC_NN_ONLY=0.o",
                                                   "opc_nn_lib-DOPC_NN_ONLY=3.o")]
    assert most[0] == 3
    assert build.runtime_objects("opc_rt_gemm_f32(a);", tmp_path) == [str(tmp_path / "opc_gemm_lib.o")]
