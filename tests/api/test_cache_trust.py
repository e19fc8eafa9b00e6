"""The compile cache as a trust boundary and under process faults (issue 38, items 6 and 7), and ONNX
external data kept inside the model's folder.

- the cache directory is created 0700; one another user owns, or group or others may write, is
  refused with one line saying why (opc's default directory, where ours, is made private instead);
- a built file is used only if its bytes' SHA-256 is the one recorded when it was built: a `.so`
  cut short, changed or without its record is built again in the next process, never loaded;
- two processes compiling one module at once, a process killed (SIGKILL) mid-compile, a full disk
  while the cache is written (a monkeypatched write; a 3 MB tmpfs where this runs as root): each
  leaves the cache usable and the next call right (numbers against NumPy).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import opc
from opc import compile_cache
from opc.errors import OpcError
from opc.lowering import build

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def source(c: float, n: int = 1) -> str:
    """A module of n functions (more: a longer build) whose numbers depend on c (a fresh module per c)."""
    return "".join(f"""func.func @f{i}(%x: tensor<4x3xf32>, %y: tensor<3xf32>) -> tensor<4x3xf32> {{
  %c = opc.full {{value = {c + i} : f64}} : () -> tensor<4x3xf32>
  %a = opc.mul %x, %y : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %b = opc.add %a, %c : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %e = opc.tanh %b : (tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return %e : tensor<4x3xf32>
}}
""" for i in range(n))


X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
Y = np.array([1.0, -2.0, 0.5], np.float32)


def want(c: float) -> np.ndarray:
    return np.tanh(X.astype(np.float64) * Y + c)


CHILD = """
import sys
import numpy as np
import opc
c = float(sys.argv[2])
m = opc.compile(open(sys.argv[1]).read(), cache_dir=sys.argv[3])
x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
y = np.array([1.0, -2.0, 0.5], np.float32)
np.testing.assert_allclose(m.f0(x, y), np.tanh(x.astype(np.float64) * y + c), rtol=2e-6, atol=1e-6)
print(m.path)
"""


def child(tmp_path: Path, c: float, cache: Path, n: int = 1, **kw) -> subprocess.Popen:
    path = tmp_path / f"model-{c}.mlir"
    path.write_text(source(c, n))
    return subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(c), str(cache)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, **kw)


def run_child(tmp_path: Path, c: float, cache: Path, n: int = 1) -> Path:
    p = child(tmp_path, c, cache, n)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return Path(out.strip())


def assert_intact(cache: Path) -> None:
    """Every built file in the cache has its digest, and its bytes match it; no build dir is left."""
    built = [p for p in cache.iterdir() if p.suffix in (".so", ".o")]
    assert built
    for p in built:
        assert build.intact(p), p
    assert not [d for d in (cache / "tmp").iterdir()] if (cache / "tmp").exists() else True


# ---------------------------------------------------------------------------
# The directory
# ---------------------------------------------------------------------------


def test_cache_dir_created_private(tmp_path):
    cache = tmp_path / "a" / "cache"
    m = opc.compile(source(0.25), cache_dir=str(cache))
    np.testing.assert_allclose(m.f0(X, Y), want(0.25), rtol=2e-6, atol=1e-6)
    assert cache.stat().st_mode & 0o777 == 0o700
    for sub in ("tmp", "locks", "loaded"):
        assert (cache / sub).stat().st_mode & 0o077 == 0, sub


@pytest.mark.parametrize("mode,who", [(0o777, "its group and all users"), (0o775, "its group"),
                                      (0o757, "all users"), (0o1777, "its group and all users")])
def test_open_cache_dir_refused(tmp_path, mode, who):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(ValueError, match=re.escape(f"cache_dir '{cache}' is writable by {who}, who could put code")):
        opc.compile(source(0.5), cache_dir=str(cache))
    assert list(cache.iterdir()) == []  # nothing written there


def test_open_cache_dir_refused_by_the_cli(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    model = tmp_path / "m.mlir"
    model.write_text(source(0.5))
    proc = subprocess.run([sys.executable, "-m", "opc", "compile", str(model), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env={**ENV, "OPC_CACHE_DIR": str(cache)}, timeout=120)
    assert proc.returncode == 1
    assert re.fullmatch(r"error: OPC_CACHE_DIR '.*' is writable by its group and all users, who could put code "
                        r"there that opc would run: make it private \(chmod go-w '.*'\) or choose another directory\n",
                        proc.stderr), proc.stderr


def test_cache_dir_of_another_user_refused(tmp_path, monkeypatch):
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    uid = cache.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    with pytest.raises(ValueError, match=re.escape(f"cache_dir '{cache}' belongs to another user (uid {uid})")):
        opc.compile(source(0.75), cache_dir=str(cache))


def test_default_cache_dir_made_private(tmp_path, monkeypatch):
    """~/.cache/opc as an older opc left it (the umask's 0775): opc's own, so made 0700, not refused."""
    monkeypatch.delenv("OPC_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    default = tmp_path / ".cache" / "opc"
    default.mkdir(parents=True)
    default.chmod(0o775)
    assert build.cache_dir() == default
    assert default.stat().st_mode & 0o777 == 0o700


# ---------------------------------------------------------------------------
# What is loaded
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "byte_changed", "digest_lost", "record_cut", "emptied"])
def test_damaged_entry_rebuilt_not_loaded(tmp_path, damage):
    """A fresh process (nothing in memory) finds the entry damaged: it compiles and builds again, right."""
    cache = tmp_path / "cache"
    so = run_child(tmp_path, 1.5, cache)
    good = so.read_bytes()
    if damage == "truncated":  # a process killed while it copied the file, a full disk
        so.write_bytes(good[:len(good) // 3])
    elif damage == "byte_changed":
        i = len(good) // 2
        so.write_bytes(good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:])
    elif damage == "digest_lost":
        build.digest_path(so).unlink()
    elif damage == "record_cut":
        (record,) = (cache / "loaded").glob("*.json")
        record.write_text(record.read_text()[:20])
    else:
        so.write_bytes(b"")
    assert run_child(tmp_path, 1.5, cache) == so  # the child checked its numbers
    assert len(so.read_bytes()) > 1000 and build.intact(so)  # built again (gcc's output differs run to run)
    assert_intact(cache)


def test_loading_checks_the_digest(tmp_path):
    """lookup() is a miss for an extension whose bytes changed, a hit for an intact one."""
    cache = tmp_path / "cache"
    so = run_child(tmp_path, 1.75, cache)
    key = compile_cache.key_for(source(1.75), "cpu", False, None, True)
    record = json.loads((cache / "loaded" / f"{key}.json").read_text())
    assert cache / record["ext_file"] == so
    with so.open("r+b") as f:
        f.seek(100)
        f.write(b"\0" * 8)
    compile_cache._memory.clear()
    assert compile_cache.lookup(key, str(cache)) is None


def test_record_pointing_outside_the_cache_is_a_miss(tmp_path):
    cache = tmp_path / "cache"
    run_child(tmp_path, 1.25, cache)
    (record,) = (cache / "loaded").glob("*.json")
    rec = json.loads(record.read_text())
    rec["ext_file"] = "../elsewhere.so"
    record.write_text(json.dumps(rec))
    compile_cache._memory.clear()
    assert compile_cache.lookup(record.stem, str(cache)) is None


# ---------------------------------------------------------------------------
# Process faults
# ---------------------------------------------------------------------------


def test_two_processes_compile_one_module_at_once(tmp_path):
    cache = tmp_path / "cache"
    procs = [child(tmp_path, 2.5, cache, n=6) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]
    assert len(list(cache.glob("*.so"))) == 1
    assert_intact(cache)
    assert run_child(tmp_path, 2.5, cache, n=6) == Path(outs[0][0].strip())


def test_process_killed_mid_compile(tmp_path):
    """SIGKILL to the compiling process and its compilers while its build dir exists; the next call builds."""
    cache = tmp_path / "cache"
    p = child(tmp_path, 3.5, cache, n=40, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        tmp = cache / "tmp"
        if tmp.is_dir() and any(not d.name.startswith(".") for d in tmp.iterdir()):
            break
        time.sleep(0.02)
    assert p.poll() is None, "the child finished before it could be killed"
    os.killpg(p.pid, signal.SIGKILL)  # the child's own session: it and the compilers it started
    p.communicate()
    assert not list(cache.glob("*.so"))  # nothing landed under a final name
    assert run_child(tmp_path, 3.5, cache, n=40).is_file()
    assert_intact(cache)


def enospc(*args, **kwargs):  # noqa: ANN002, ANN003
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_while_the_extension_lands(tmp_path, monkeypatch):
    """The built extension cannot be written into the cache: one OpcError line (BuildError); nothing half-written
    is left under a final name; the next call (disk freed) builds and is right."""
    cache = tmp_path / "cache"
    with monkeypatch.context() as mp:
        mp.setattr(build.os, "replace", enospc)
        with pytest.raises(OpcError, match=r"^cannot write to the compile cache '.*': No space left on device$"):
            opc.compile(source(4.5), cache_dir=str(cache))
    assert not list(cache.glob("*.so")) and not list(cache.glob("*.sha256"))
    m = opc.compile(source(4.5), cache_dir=str(cache))
    np.testing.assert_allclose(m.f0(X, Y), want(4.5), rtol=2e-6, atol=1e-6)
    assert_intact(cache)


def test_full_disk_while_the_record_is_written(tmp_path, monkeypatch):
    """The record cannot be written: the module compiled is returned all the same, no temp file is
    left, and the next process compiles it again (a miss), right."""
    cache = tmp_path / "cache"
    real = Path.write_text

    def full(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        if self.parent.name == "loaded":
            real(self, "{\"format\": 2, \"ext", encoding="utf-8")  # part of it, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *a, **k)

    with monkeypatch.context() as mp:
        mp.setattr(Path, "write_text", full)
        m = opc.compile(source(5.5), cache_dir=str(cache))
    np.testing.assert_allclose(m.f0(X, Y), want(5.5), rtol=2e-6, atol=1e-6)
    assert not list((cache / "loaded").iterdir())
    run_child(tmp_path, 5.5, cache)
    assert len(list((cache / "loaded").glob("*.json"))) == 1


def mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_full_tmpfs(tmp_path):
    """A real full disk: a 3 MB tmpfs as the cache, a module whose build does not fit. One error
    line; then, with the cache moved to a disk with room, right. Needs root (mount)."""
    small = tmp_path / "small"
    if not mount_tmpfs(small, "3m"):
        pytest.skip("mounting a tmpfs needs root (and a kernel that lets this container mount)")
    try:
        (small / "fill").write_bytes(b"\0" * (2900 * 1024))  # leave ~100 KB: less than the extension
        path = tmp_path / "m.mlir"
        path.write_text(source(6.5, n=8))
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), "6.5", str(small / "cache")],
                              capture_output=True, text=True, env=ENV, timeout=300)
        assert proc.returncode != 0
        last = proc.stderr.strip().splitlines()[-1]
        assert "No space left on device" in last or "disk of the compile cache is full" in last, proc.stderr
        assert not list((small / "cache").glob("*.so"))
        (small / "fill").unlink()  # the disk freed: the same cache, the next call right
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), "6.5", str(small / "cache")],
                             capture_output=True, text=True, env=ENV, timeout=300)
        assert out.returncode == 0, out.stderr
        assert_intact(small / "cache")
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


# ---------------------------------------------------------------------------
# ONNX external data
# ---------------------------------------------------------------------------


def external_model(folder: Path, location: str, data: Path | None = None) -> Path:
    """y = x @ w, w [2, 3] kept as external data at `location` (relative to the model's folder)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    folder.mkdir(parents=True, exist_ok=True)
    if data is not None:
        data.write_bytes(w.tobytes())
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], initializer=[t])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    return path


def test_external_data_inside_the_folder_loads(tmp_path):
    path = external_model(tmp_path / "model", "w.bin", tmp_path / "model" / "w.bin")
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    (y,) = opc.load_onnx(str(path))(x)
    np.testing.assert_allclose(y, x.astype(np.float64) @ (np.arange(6).reshape(2, 3) / 4), rtol=1e-6)


@pytest.mark.parametrize("how", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_folder_refused(tmp_path, how):
    secret = tmp_path / "secret.bin"
    folder = tmp_path / "model"
    folder.mkdir()
    location = {"parent": "../secret.bin", "absolute": str(secret), "symlink": "link.bin"}[how]
    if how == "symlink":
        (folder / "link.bin").symlink_to(secret)
    path = external_model(folder, location, secret)
    for call in (lambda: opc.load_onnx(str(path)), lambda: opc.compile(str(path))):
        with pytest.raises(OpcError) as err:
            call()
        assert re.fullmatch(rf"{re.escape(str(path))}: tensor 'w' keeps its data in '{re.escape(location)}', "
                            rf"outside the model's folder .*: refused \(external data must lie in the model's folder\)",
                            str(err.value)), str(err.value)
    proc = subprocess.run([sys.executable, "-m", "opc", "import", str(path), "-o", str(tmp_path / "o.mlir")],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "outside the model's folder" in proc.stderr
