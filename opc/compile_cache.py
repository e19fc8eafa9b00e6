"""Compiles that don't make users wait: a module compiled before is found by its source text,
the options and opc's own code, before anything is parsed.

`opc.compile` asks `lookup` first: a hit loads the built extension and binds its functions
without importing xDSL or running a pass (parse, passes, lowering and C emission take
0.3-1.2 s for a model; a hit takes a few ms after NumPy's import). The key:

- the source: MLIR text or UTF-8 bytes as given; a path: its name and its bytes (.mlir or .onnx);
  a ModuleOp is not cached here (its text would cost what the pipeline costs): opc.load_onnx keys
  its imports on the model instead (opc/onnx_cache.py) and stores them here with `extra`;
- target "cpu" only (a device file's kernels and CUDA builds take the full path), grad,
  decompose, fuse;
- opc's code: the path, size and modification time of every file of the package and of its
  runtime headers (an edited checkout is a new key; reading them is stat calls only), Python's
  version, the C compiler ($CC) by path and modification time, and OPC_SANITIZE / OPC_PROFILE.

The record (CACHE/loaded/KEY.json: the extension's name and file, the signatures, why a
gradient was not built; KEY.c: the C source) is written after a full compile, by atomic
rename (where the disk is full, not at all). A record whose extension is gone, cut short or changed
(its bytes' SHA-256 is not the one recorded when it was built, opc/lowering/build.py `intact`) is a
miss, and the compile builds it again. In a process, hits are kept in memory. A record may carry
its caller's `extra` (JSON); notes (CACHE/loaded/KEY.note.json) keep small facts that go with no
module (which inputs a load_onnx variant binds; a model that passed onnx.checker).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from opc.interop.arrays import ARRAY_KINDS
from opc.lowering.abi import FunctionSignature
from opc.lowering.binding import bind
from opc.lowering.build import CompiledModule, cache_dir, content_key, intact, load_extension, runtime_dir

RECORD_FORMAT = 6
FLAVOR_ENV = ("OPC_SANITIZE", "OPC_PROFILE", "CC", "OPC_MARCH")  # environment that changes what a compile builds
_memory: dict[str, tuple[CompiledModule, Any]] = {}  # (module, extra)


@functools.cache
def code_digest() -> str:
    """opc's package files, its runtime headers, Python and the C compiler, by stat (no reading)."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for root in (package, runtime_dir()):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".h", ".c", ".cuh", ".toml") and "__pycache__" not in path.parts:
                st = path.stat()
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    cc = shutil.which(os.environ.get("CC", "gcc")) or "none"
    cc_stat = os.stat(cc) if cc != "none" else None
    h.update(f"{sys.version}\0{cc}\0{cc_stat.st_mtime_ns if cc_stat else 0}\0{RECORD_FORMAT}".encode())
    return h.hexdigest()


def source_bytes(source: object) -> bytes | None:
    """What identifies the source, or None where it is not cached here (a ModuleOp, a bad path)."""
    if isinstance(source, (bytes, bytearray)):
        return b"bytes\0" + bytes(source)
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and (
            source.endswith((".mlir", ".onnx")) or os.path.exists(source))):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                return f"path\0{os.path.abspath(path)}\0".encode() + f.read()
        except OSError:
            return None  # the full path reports it
    if isinstance(source, str):
        return b"text\0" + source.encode("utf-8", "surrogatepass")
    return None


def key_for(source: object, target: object, grad: object, decompose: object, fuse: object) -> str | None:
    if not isinstance(target, str) or target != "cpu":
        return None
    text = source_bytes(source)
    if text is None:
        return None
    return content_key(text, repr((grad, decompose, fuse)), flavor(), code_digest(), length=32)


def flavor() -> str:
    """The environment that changes what a compile builds (FLAVOR_ENV), as part of a key."""
    return "\0".join(os.environ.get(v, "") for v in FLAVOR_ENV)


def find(source: object, target: object, grad: object, decompose: object, fuse: object,
         cache_override: object, arrays: object = "numpy") -> tuple[str | None, CompiledModule | None]:
    """(the key, or None where not cached here; the module compiled for it before, returning
    `arrays`, or None)."""
    if cache_override is not None and not isinstance(cache_override, (str, os.PathLike)):
        return None, None  # the full path reports it
    if arrays not in ARRAY_KINDS:
        return None, None  # the full path reports it
    key = key_for(source, target, grad, decompose, fuse)
    return key, (lookup(key, cache_override, arrays) if key is not None else None)


def record_paths(cache: Path, key: str) -> tuple[Path, Path]:
    d = cache / "loaded"
    return d / f"{key}.json", d / f"{key}.c"


def lookup(key: str, cache_override: str | os.PathLike[str] | None = None,
           arrays: str = "numpy") -> CompiledModule | None:
    """The module compiled for `key`, returning `arrays` (one module object per kind: the kind is
    its state), or None."""
    found = lookup_entry(key, cache_override, arrays)
    return found[0] if found is not None else None


def lookup_entry(key: str, cache_override: str | os.PathLike[str] | None = None,
                 arrays: str = "numpy") -> tuple[CompiledModule, Any] | None:
    """(the module compiled for `key`, what its caller stored with it: `store`'s extra), or None."""
    cache = cache_dir(cache_override)
    memo = f"{cache}\0{key}\0{arrays}"
    if memo in _memory:
        return _memory[memo]
    record, c_path = record_paths(cache, key)
    try:
        rec = json.loads(record.read_text(encoding="utf-8"))
        c_source = c_path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    try:
        if rec.get("format") != RECORD_FORMAT or Path(rec["ext_file"]).name != rec["ext_file"]:
            return None
        ext_path = cache / rec["ext_file"]
        sigs = [FunctionSignature(n, [(a, tuple(s), d) for a, s, d in ins], [(tuple(s), d) for s, d in outs],
                                  [tuple(e) for e in errs], list(sizes), [tuple(c) for c in checks],
                                  [tuple(f) for f in found], list(handed), [tuple(d) for d in derived])
                for n, ins, outs, errs, sizes, checks, found, handed, derived in rec["signatures"]]
    except (AttributeError, KeyError, TypeError, ValueError):  # a record not written by this opc
        return None
    if not intact(ext_path):  # gone, cut short or changed: compiled (and built) again
        return None
    module = CompiledModule(bind(load_extension(rec["ext_name"], ext_path), sigs), c_source, ext_path)
    module.no_grad.update(rec["no_grad"])
    module.wrt.update(rec["wrt"])
    module.set_arrays(arrays)
    _memory[memo] = (module, rec.get("extra"))
    return _memory[memo]


def store(key: str, module: CompiledModule, sigs: list[FunctionSignature], ext_name: str,
          cache_override: str | os.PathLike[str] | None = None, extra: Any = None) -> None:
    """The record of a module just compiled, with `extra` (JSON: what a caller such as opc.load_onnx
    needs besides the module), atomic: a reader sees all of it or none. Where it cannot be written
    (a full disk), the module is not recorded: the next compile of it is a miss."""
    cache = cache_dir(cache_override)
    record, c_path = record_paths(cache, key)
    assert module.path is not None  # a module just built from its extension file
    rec = {"format": RECORD_FORMAT, "ext_name": ext_name, "ext_file": Path(module.path).name,
           "signatures": [[s.name, s.inputs, s.outputs, s.errors, s.sizes, s.checks, s.found, s.handed, s.derived]
                          for s in sigs],
           "no_grad": module.no_grad,
           "wrt": module.wrt,
           "extra": extra}
    write_atomically([(c_path, module.c_source), (record, json.dumps(rec))])  # the .c first: a record is
    _memory[f"{cache}\0{key}\0{module.arrays}"] = (module, extra)  # only ever seen with its source


def read_note(key: str, cache_override: str | os.PathLike[str] | None = None) -> Any:
    """A note written by `write_note` (JSON), or None."""
    try:
        return json.loads(note_path(cache_dir(cache_override), key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_note(key: str, value: Any, cache_override: str | os.PathLike[str] | None = None) -> None:
    """A small fact found by a compile, kept for the next one (a model passed onnx.checker, which inputs a
    compile bound by value): no module goes with it. Atomic; not written on a full disk."""
    write_atomically([(note_path(cache_dir(cache_override), key), json.dumps(value))])


def note_path(cache: Path, key: str) -> Path:
    return cache / "loaded" / f"{key}.note.json"


def write_atomically(files: list[tuple[Path, str]]) -> None:
    """Each file by rename from a private temporary, in order; where one fails (a full disk), the
    temporaries go and the files not yet renamed are not written."""
    written = []
    try:
        files[0][0].parent.mkdir(mode=0o700, exist_ok=True)
        for path, text in files:
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            written.append(tmp)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
    except OSError:
        for tmp in written:
            with contextlib.suppress(OSError):
                tmp.unlink()
