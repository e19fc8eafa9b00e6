"""Compiling emitted C through CFFI into importable extension modules, cached
on disk by content hash, and binding their functions to NumPy.

The cache key covers the C source, the runtime headers, the flags, and the
versions of gcc, CFFI and Python, so a changed toolchain never loads a stale
module. Builds happen in a private temp dir and land with an atomic rename,
so concurrent compiles of one model cannot corrupt the cache; a cross-process
lock per cache key makes concurrent compiles of one thing build it once. The
compiler's output is captured (shown only when a build fails, whose source
is then kept under CACHE/failed/).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import io
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from opc.dtypes import ML_DTYPES_NAMES, numpy_dtype
from opc.errors import BuildError, InputError, InternalError
from opc.lowering.abi import (
    ENTRY_PREFIX,
    FROZEN_FN,
    KERNEL_MESSAGE_FN,
    KERNEL_STATUS,
    OOM_FN,
    RELEASE_FN,
    SET_THREADS_FN,
    STACK_CAPACITY_FN,
    STACK_PEAK_FN,
    FunctionSignature,
    c_symbol,
)
from opc.threads import one_thread

# -fno-math-errno and -fno-trapping-math change no result (opc never reads errno
# or FP exception flags) but let loops with selects and sqrt vectorize.
BASE_FLAGS = ["-O3", "-std=gnu11", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
              "-Wno-unused-variable", "-Wno-unused-function", "-Wno-unused-label"]


def runtime_dir() -> Path:
    """runtime/ of a source checkout, or the copy shipped inside the package."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_runtime", here.parent / "runtime"):
        if (candidate / "opc_runtime.h").is_file():
            return candidate
    raise BuildError("opc's runtime headers (opc_runtime.h) were not found next to the package")


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The compile cache: `override` (cache_dir=), else $OPC_CACHE_DIR, else ~/.cache/opc.
    Created 0700. opc loads the compiled code it finds there, so a directory another user owns,
    or one that group or others may write, is refused (the default one, opc's own, is made
    private instead where it is ours but open: an older opc created it with the umask's mode)."""
    what = "cache_dir" if override else "OPC_CACHE_DIR" if os.environ.get("OPC_CACHE_DIR") else "the cache"
    path = Path(override or os.environ.get("OPC_CACHE_DIR") or Path.home() / ".cache" / "opc")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} '{path}' is a file, not a directory")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file on the way to it
        raise ValueError(f"{what} '{path}' cannot be created: a part of its path is a file") from None
    except OSError as err:
        raise ValueError(f"{what} '{path}' cannot be created: {err.strerror}") from None
    check_private(path, what, tighten=what == "the cache")
    return path


def check_private(path: Path, what: str, tighten: bool = False) -> None:
    """Refuse a cache directory that is not this user's alone to write (ValueError, one line)."""
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ValueError(f"{what} '{path}' belongs to another user (uid {st.st_uid}): opc runs the compiled code "
                         "it finds there, so it uses a directory of your own only")
    open_bits = st.st_mode & 0o022
    if open_bits and tighten:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
            return
    if open_bits:
        who = {0o020: "its group", 0o002: "all users", 0o022: "its group and all users"}[open_bits]
        raise ValueError(f"{what} '{path}' is writable by {who}, who could put code there that opc would run: "
                         f"make it private (chmod go-w '{path}') or choose another directory")


DIGEST_SUFFIX = ".sha256"  # next to every built file in the cache: the SHA-256 of its bytes


def digest_path(target: Path) -> Path:
    return target.with_name(target.name + DIGEST_SUFFIX)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def intact(target: Path) -> bool:
    """The built file is there and its bytes are those recorded when it was built (not cut short by
    a full disk or a killed copy, not changed since). Costs a read of the file: about 2 ms per MB."""
    try:
        return file_digest(target) == digest_path(target).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return False


def cache_write_error(cache: Path, err: OSError) -> BuildError:
    return BuildError(f"cannot write to the compile cache '{cache}': {err.strerror or err}")


def require_compiler() -> None:
    """BuildError unless the C compiler opc runs ($CC, else gcc) is there: a build needs one."""
    import shutil

    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        how = f"$CC is {cc!r}: point it at an installed compiler" if "CC" in os.environ else \
            "install gcc (apt install gcc, dnf install gcc, conda install -c conda-forge gcc) or set $CC to one"
        raise BuildError(f"opc needs a C compiler to build a module, and {cc!r} is not on PATH: {how}")


@functools.cache
def compiler_version() -> str:
    import subprocess  # (here, not above: loading a cached module starts no compiler)

    cc = os.environ.get("CC", "gcc")
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


@functools.cache
def native_flags() -> tuple[str, ...]:
    """-march=native where the compiler takes it (it is the point of a local build), and 512-bit
    vectors in the vectorized loops where that includes AVX-512."""
    import subprocess

    cc = os.environ.get("CC", "gcc")
    try:
        probe = subprocess.run([cc, "-march=native", "-x", "c", "-c", "-o", os.devnull, "-"],
                               input="int x;", capture_output=True, text=True, check=False)
    except OSError:
        return ()
    if probe.returncode != 0:
        return ()
    # With AVX-512, gcc's tuning still keeps vectorized loops at 256 bits; the math-heavy ones
    # (the erf GELU: 2.0 -> 1.0 ms per 1M floats) run twice as fast at 512. The GEMM's kernels
    # choose their width themselves (opc_gemm.h).
    macros = subprocess.run([cc, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                            capture_output=True, text=True, check=False).stdout
    flags = ("-march=native", "-mprefer-vector-width=512") if "__AVX512F__" in macros else ("-march=native",)
    return flags if copies_constants_right(cc, flags) else (*flags, "-mtune=generic")


# gcc 12.2 tuned for skylake-avx512, icelake or rocketlake (what -march=native says on a Sapphire
# Rapids it does not know) expands a copy of a constant array (a memcpy, or a loop it turns into
# one: a generated module's constant tensor) into vector stores and takes [3, 3, 0, 0] for a
# broadcast of 3: silently wrong numbers. -mtune=generic (or sapphirerapids) stores it right.
CONSTANT_COPY_PROBE = r"""
#include <stdio.h>
#include <string.h>
static const long long g[15] = {0, 0, 1, 2, 2, 1, 3, 0, 3, 3, 0, 0, 1, 2, 1};
__attribute__((noinline)) void copy(long long *out) { memcpy(out, g, sizeof g); }
int main(void) { long long out[15]; copy(out); for (int i = 0; i < 15; i++) printf("%lld ", out[i]); return 0; }
"""


def copies_constants_right(cc: str, flags: tuple[str, ...]) -> bool:
    """Whether `cc -O3 flags` copies a constant array right (see CONSTANT_COPY_PROBE); True where
    the probe cannot run at all (then the build itself says what is wrong)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "probe"
        built = subprocess.run([cc, "-O3", *flags, "-x", "c", "-o", str(exe), "-"], input=CONSTANT_COPY_PROBE,
                               capture_output=True, text=True, check=False)
        if built.returncode != 0:
            return True
        try:
            ran = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return True
        return ran.stdout.split() == "0 0 1 2 2 1 3 0 3 3 0 0 1 2 1".split()


def content_key(*parts: str | bytes, length: int = 24) -> str:
    """A cache key: the hash of every part, each ended by a NUL so parts cannot run together."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:length]


def runtime_digest() -> str:
    h = hashlib.sha256()
    for path in sorted([*runtime_dir().glob("*.h"), *runtime_dir().glob("*.c")]):
        h.update(path.read_bytes())
    return h.hexdigest()


# The end of every module file `opc compile -o` writes (CPU and CUDA): its names, and an
# AttributeError that says why a gradient function was not built. Filled by str.format.
MODULE_TEMPLATE_TAIL = '''__all__ = {names!r}
_NO_GRAD = {no_grad!r}  # gradient functions opc did not build, and why


def __getattr__(name):
    if name in _NO_GRAD:
        raise AttributeError(f"{{name}}: opc built no such function: {{_NO_GRAD[name]}}")
    for suffix, flag in (("_grad_grad", "--grad 2"), ("_value_and_grad", "--grad"), ("_grad", "--grad")):
        if name.endswith(suffix) and name[:-len(suffix)] in __all__:
            raise AttributeError(f"module {{__name__!r}} has no function {{name!r}}: compile with opc compile {{flag}} "
                                 "to build it")
    raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")
'''


def python_names(sigs: list[FunctionSignature]) -> list[str]:
    """__all__ of a written module: the functions whose MLIR names are Python identifiers
    (getattr(module, "a.b") reaches the others)."""
    return [s.name for s in sigs if s.name.isidentifier()]


# gcc 12.2 at -O3 miscompiles a float narrowing followed by a widening, `(double)(float)x`,
# when it SLP-vectorizes straight-line code (short loops it unrolls, loop tails): it folds
# vec_unpack(vec_pack_trunc(v)) back to v, so the rounding is lost ([1/3, 1e300] came back
# unrounded). Loop vectorization is not affected, and a generated module is loops, so
# basic-block SLP is switched off for modules only (the runtime's GEMM keeps it).
MODULE_FLAGS = ["-fno-tree-slp-vectorize"]

# OPC_SANITIZE=1 (see opc/sanitize.py): every module, runtime object and device kernel is
# built with ASan and UBSan, float-cast-overflow included (not part of -fsanitize=undefined
# on gcc), and any report aborts the process, so a test run cannot pass over one. -O1 (after
# -O3) is ASan's advice and builds several times faster than -O3 with the instrumentation.
SANITIZE_FLAGS = ["-fsanitize=address,undefined,float-cast-overflow", "-fno-sanitize-recover=all",
                  "-fno-omit-frame-pointer", "-g", "-O1"]


def sanitizing() -> bool:
    return os.environ.get("OPC_SANITIZE", "") not in ("", "0")


def march() -> str:
    """$OPC_MARCH: the CPUs a build is for. "native" (the default): this machine's, the fastest
    code, which may not run on another machine; "portable": the compiler's baseline for the
    architecture (any x86-64); else an -march value (x86-64-v3, skylake, ...)."""
    return os.environ.get("OPC_MARCH", "").strip() or "native"


def target_flags() -> tuple[str, ...]:
    chosen = march()
    if chosen == "native":
        return native_flags()
    if chosen == "portable":
        return ("-mtune=generic",)
    return arch_flags(chosen)


@functools.cache
def arch_flags(arch: str) -> tuple[str, ...]:
    """-march=ARCH, once the compiler has taken it (a typo is bad input, not a bug in opc)."""
    import subprocess

    require_compiler()
    probe = subprocess.run([os.environ.get("CC", "gcc"), f"-march={arch}", "-x", "c", "-c", "-o", os.devnull, "-"],
                           input="int x;", capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        why = next((line for line in probe.stderr.splitlines() if "error" in line), probe.stderr.strip())
        raise InputError(f"-march={arch}: the C compiler does not take it ({why.split('error: ')[-1]})")
    return (f"-march={arch}",)


def compile_flags() -> list[str]:
    """Flags of every C object opc builds: runtime objects, device kernels and modules."""
    return BASE_FLAGS + list(target_flags()) + (SANITIZE_FLAGS if sanitizing() else [])


def module_flags() -> list[str]:
    """Flags of a generated module's C source: compile_flags() and MODULE_FLAGS."""
    return compile_flags() + MODULE_FLAGS


def link_flags() -> list[str]:
    return ["-fopenmp"] + (SANITIZE_FLAGS[:1] if sanitizing() else [])


def runtime_object(cache: Path, lib: str = "opc_gemm_lib", defines: tuple[str, ...] = ()) -> Path:
    """runtime/LIB.c (with `defines`) compiled once per toolchain and flags, shared by every module;
    concurrent processes wait for the one that builds it."""
    key = content_key(runtime_digest(), compiler_version(), *compile_flags(), *defines, length=16)
    variant = "".join(f"-{d.split('=')[-1]}" for d in defines)

    def build(tmp: Path) -> Path:
        import subprocess

        out = tmp / f"{lib}.o"
        cmd = [os.environ.get("CC", "gcc"), *compile_flags(), *defines, "-fPIC", "-I", str(runtime_dir()), "-c",
               str(runtime_dir() / f"{lib}.c"), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"building opc's runtime {lib} failed:\n{first_lines(proc.stderr)}")
        return out

    return built_once(cache / f"{lib}{variant}-{key}.o", lib, build)


# ---------------------------------------------------------------------------
# Building safely: cross-process locks, private temp dirs, captured output
# ---------------------------------------------------------------------------

# A build dir still being set up (its hidden name, before it is locked) that is older than
# this was left by a build killed in those few instructions.
STALE_BUILD_S = 10
# Lines of the compiler's output a failed build shows.
FAILED_LINES = 20


def built_once(target: Path, prefix: str, build: Callable[[Path], Path]) -> Path:
    """`target` (in the cache dir), built by `build(private_dir) -> file` on a miss. Concurrent
    processes wait for the one that builds it and then find it built; the file lands by atomic
    rename, so a reader never sees half of it. Its SHA-256 lands first (TARGET.sha256): a file
    whose bytes do not match it (cut short, changed, or without one) is built again, never used."""
    if intact(target):
        return target
    try:
        with build_lock(target.parent, target.name):
            if intact(target):  # built by the process we waited for
                return target
            with build_dir(target.parent, prefix) as tmp:
                built = build(tmp)
                digest = tmp / "digest.tmp"
                digest.write_text(file_digest(built) + "\n", encoding="ascii")
                os.replace(digest, digest_path(target))
                os.replace(built, target)
    except OSError as err:  # a full disk, a cache made read-only under us
        raise cache_write_error(target.parent, err) from None
    return target


@contextlib.contextmanager
def build_lock(cache: Path, name: str) -> Iterator[None]:
    """Held while one thing (named by its content key) is built: another process building the
    same thing waits, then finds it built. The kernel drops the lock of a killed process."""
    locks = cache / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(locks / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def build_dir(cache: Path, prefix: str) -> Iterator[Path]:
    """A private dir under CACHE/tmp for one build, removed after it. Its `.lock` stays locked
    while the build runs, so that a later build can tell a dir left by a killed one and remove it.
    The dir is made under a hidden name and takes its visible one only once locked: a visible
    dir with a free lock has no owner, whatever its age."""
    root = cache / "tmp"
    root.mkdir(mode=0o700, exist_ok=True)
    sweep_dead_builds(root)
    path = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=root))
    fd = os.open(path / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):  # (a name taken since: the dir keeps its hidden one)
            path = path.rename(path.with_name(path.name[1:]))
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep_dead_builds(root: Path) -> None:
    """Remove the build dirs whose builder is gone: the lock of a visible dir is free (the kernel
    drops a killed process's lock), a hidden one is also older than STALE_BUILD_S (a younger one
    may belong to a build that has not locked it yet)."""
    now = time.time()
    for d in root.iterdir():
        try:
            if d.name.startswith(".") and now - d.stat().st_mtime < STALE_BUILD_S:
                continue
            fd = os.open(d / ".lock", os.O_RDWR)
        except FileNotFoundError:  # killed between mkdtemp and the lock, or already swept
            shutil.rmtree(d, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its build is running
            os.close(fd)
            continue
        shutil.rmtree(d, ignore_errors=True)
        os.close(fd)


@dataclass
class CapturedOutput:
    text: str = ""


@contextlib.contextmanager
def captured_output(out: CapturedOutput) -> Iterator[None]:
    """This process's stdout and stderr at the file-descriptor level, so that what the compilers it
    runs print (gcc's warnings) lands in out.text instead of the user's terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as log:
        try:
            saved = [os.dup(1), os.dup(2)]
        except OSError:  # no stdout/stderr to capture
            yield
            return
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            log.seek(0)
            out.text = log.read().decode(errors="replace")


def first_lines(text: str, n: int = FAILED_LINES) -> str:
    lines = text.strip().splitlines()
    more = f"\n  ... ({len(lines) - n} more lines)" if len(lines) > n else ""
    return "\n".join(f"  {line}" for line in lines[:n]) + more


def keep_failed(cache: Path, name: str, files: dict[str, str]) -> Path | None:
    """Keep a failed build's generated source (and the compiler's output) for a bug report."""
    kept = cache / "failed" / name
    try:
        kept.mkdir(mode=0o700, parents=True, exist_ok=True)
        for file, text in files.items():
            (kept / file).write_text(text, encoding="utf-8")
    except OSError:  # a full disk: the failure is reported without its source kept
        return None
    return kept


def build_failure(compiler: str, log: str, kept: Path | None) -> BuildError | InternalError:
    if "No space left on device" in log or "Disk quota exceeded" in log:
        return BuildError(f"{compiler} could not write its output: the disk of the compile cache is full "
                          f"({kept.parent.parent if kept else 'see OPC_CACHE_DIR'})")
    if kept is None:
        return InternalError(f"{compiler} failed on the generated code; this is a bug in opc: please report it "
                             f"(the source could not be kept)\n{first_lines(log)}")
    return InternalError(f"{compiler} failed on the generated code; this is a bug in opc: please report it with "
                         f"the source kept in {kept}\n{first_lines(log)}")


# ---------------------------------------------------------------------------
# Self-contained sources (--emit c / cuda)
# ---------------------------------------------------------------------------

INCLUDE_LINE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.MULTILINE)


# In its own file nvcc warns of a header's helpers that this module does not call (#177,
# "declared but never referenced"); inlined, the header says so itself.
CUDA_QUIET_BEGIN = "#ifdef __CUDACC__\n#pragma nv_diag_suppress 177\n#endif\n"
CUDA_QUIET_END = "\n#ifdef __CUDACC__\n#pragma nv_diag_default 177\n#endif\n"


def self_contained(source: str, stack: tuple[str, ...] = ()) -> str:
    """The source with every `#include "opc_*.h"` of opc's runtime replaced by the header's text
    (recursively; the headers' include guards keep repeats harmless), so that a bare
    `gcc -c` or `nvcc -c` compiles it."""

    def inline(m: re.Match[str]) -> str:
        header = runtime_dir() / m.group(1)
        if m.group(1) in stack or not header.is_file():
            return m.group(0)
        text = self_contained(header.read_text(encoding="utf-8"), (*stack, m.group(1)))
        if not stack:  # the outermost header: quiet for all it includes
            text = f"{CUDA_QUIET_BEGIN}{text.rstrip()}{CUDA_QUIET_END}"
        return f"/* ---- {m.group(1)} (opc runtime) ---- */\n{text.rstrip()}\n/* ---- end of {m.group(1)} ---- */"

    return INCLUDE_LINE.sub(inline, source)


# The kernels of runtime/opc_nn.h: one object per dtype (opc_nn_lib.c, -DOPC_NN_ONLY=code).
NN_DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3}


def runtime_objects(source: str, cache: Path) -> list[str]:
    """The runtime objects a module's C source calls into, built at once where missing: they are
    independent gcc runs of several seconds each (a first compile waits for the longest, not the sum)."""
    wanted: list[tuple[str, tuple[str, ...]]] = [("opc_nn_lib", (f"-DOPC_NN_ONLY={code}",))
              for dt, code in NN_DTYPE_CODES.items() if re.search(rf"\bopc_nn_\w+_{dt}(_i32|_i64)?\(", source)]
    if "opc_rt_gemm_" in source or wanted:  # opc_nn_lib's convolutions call the GEMM
        wanted.insert(0, ("opc_gemm_lib", ()))
    if len(wanted) < 2:
        return [str(runtime_object(cache, lib, defines)) for lib, defines in wanted]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:  # built_once locks each across processes
        return [str(o) for o in pool.map(lambda w: runtime_object(cache, *w), wanted)]


def freeze_while_alive(call: Callable, arrays: Sequence, freeze) -> None:  # noqa: ANN001
    """Register the NumPy arrays' bytes with the module's opc_frozen (runtime/opc_frozen.h) until `call`
    is collected: its kernels may then keep packed copies of them. The registration is dropped while
    `call` is being collected, before the arrays it holds can be freed and their memory reused."""
    ranges = [(a.ctypes.data, a.nbytes) for a in arrays if isinstance(a, np.ndarray) and a.nbytes]
    if freeze is None or not ranges:
        return
    for address, nbytes in ranges:
        freeze(address, nbytes, 1)
    weakref.finalize(call, thaw, freeze, ranges)


def thaw(freeze, ranges: list[tuple[int, int]]) -> None:  # noqa: ANN001
    for address, nbytes in ranges:
        freeze(address, nbytes, 0)


def cdef_for(signatures: list[FunctionSignature], suffix: str = "") -> str:
    """The entry points' declarations (opc_fn_NAME, or opc_fn_NAME_host with suffix="_host")."""
    lines = []
    for sig in signatures:
        params = [f"const {c_type_of(dt)} *" for _, _, dt in sig.inputs]
        params += [f"{c_type_of(dt) if i not in sig.handed else 'int64_t'} *" for i, (_, dt) in enumerate(sig.outputs)]
        params += ["int64_t"] * len(sig.sizes)
        lines.append(f"int {ENTRY_PREFIX}{c_symbol(sig.name)}{suffix}({', '.join(params) or 'void'});")
    return "\n".join(lines)


def status_cdef(signatures: list[FunctionSignature]) -> str:
    """The module's opc_error_value(), declared where a function has run-time checks (runtime/opc_status.h)."""
    return "\nint64_t opc_error_value(void);" if any(s.errors for s in signatures) else ""


RUNTIME_ERRORS: dict[str, type[Exception]] = {"IndexError": IndexError, "ValueError": ValueError}


def byte_size(n: int) -> str:
    """n bytes as people read them: `17179869184 bytes (16.0 GiB)`."""
    for i, unit in reversed(list(enumerate(("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"), 1))):
        if n >= 1 << (10 * i):
            return f"{n} bytes ({n / (1 << (10 * i)):.1f} {unit})"
    return f"{n} bytes"


def status_error(sig: FunctionSignature, status: int, detail=None, oom=None) -> Exception:  # noqa: ANN001
    """The exception a nonzero status stands for (runtime/opc_status.h): < 0 a failed run-time
    check, named by sig.errors and given the offending value by `detail()`; 1 out of memory,
    of the size `oom()` says (the allocation that failed)."""
    if status < 0 and -status <= len(sig.errors):
        kind, message = sig.errors[-status - 1]
        value = detail() if detail is not None else "?"
        return RUNTIME_ERRORS.get(kind, RuntimeError)(f"{sig.name}(): {message.format(value=value)}")
    if status < 0:
        return RuntimeError(f"{sig.name}(): run-time check {-status} failed")
    size = oom() if oom is not None else 0
    if size > 0:
        return MemoryError(f"{sig.name}(): out of memory: {byte_size(size)} for intermediate buffers could not be "
                           "allocated")
    return MemoryError(f"{sig.name}(): out of memory for intermediate buffers")


# How a module's units are made and compiled (opc/lowering/parallel_build.py): a change to it
# is a new key, so an extension built the old way is never taken for one built the new way.
BUILD_SCHEME = "units-2"


def module_key(source: str, cdef: str) -> str:
    import cffi

    return content_key(source, cdef, " ".join(module_flags() + link_flags()), compiler_version(), cffi.__version__,
                       sys.version, runtime_digest(), BUILD_SCHEME)


def extension_path(directory: Path, name: str) -> Path:
    import sysconfig

    return directory / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def build_extension(source: str, signatures: list[FunctionSignature], cache: Path,
                    objects: Sequence[Path] = (), data: Mapping[str, bytes] | None = None) -> tuple[str, Path]:
    """(module name, path of the built extension); built only on a cache miss.
    objects: compiled device kernels to link in (their names carry their content's hash).
    data: the files the source's .incbin lines name (large constants, c_data.py)."""
    import cffi

    with BUILD_LOCK:  # CFFI's build changes the process's working directory
        return _build_extension(cffi, source, signatures, cache, objects, data or {})


BUILD_LOCK = threading.Lock()


def _build_extension(cffi, source: str, signatures: list[FunctionSignature], cache: Path,
                     kernels: Sequence[Path], data: Mapping[str, bytes]) -> tuple[str, Path]:
    cdef = cdef_for(signatures) + status_cdef(signatures)
    if f"{KERNEL_MESSAGE_FN}(void)" in source:
        cdef += f"\nconst char *{KERNEL_MESSAGE_FN}(void);"
    if f"{SET_THREADS_FN}(int n)" in source:
        cdef += f"\nvoid {SET_THREADS_FN}(int);"
    if f"void {FROZEN_FN}(" in source:
        cdef += f"\nvoid {FROZEN_FN}(uintptr_t, int64_t, int);"
    if f"int64_t {OOM_FN}(void)" in source:
        cdef += f"\nint64_t {OOM_FN}(void);\nvoid {RELEASE_FN}(void *);"
    if f"int64_t {STACK_CAPACITY_FN}(void)" in source:
        cdef += f"\nint64_t {STACK_CAPACITY_FN}(void);\nint64_t {STACK_PEAK_FN}(void);"
    if "int opc_profile(int on)" in source:
        from opc.lowering.c_emitter import PROFILE_CDEF

        cdef += "\n" + PROFILE_CDEF
    name = f"_opc_{module_key(source, cdef + ''.join(f' {k.name}' for k in kernels))}"
    target = extension_path(cache, name)
    if intact(target):
        return name, target
    require_compiler()
    objects = runtime_objects(source, cache)
    objects += [str(k) for k in kernels]

    from opc.lowering import parallel_build

    units = parallel_build.split_source(source, parallel_build.build_jobs()) if parallel_build.supported() else None

    def build(tmp: Path) -> Path:
        for file, blob in data.items():  # the assembler finds them on its include path (c_data.py)
            (tmp / file).write_bytes(blob)
        flags = module_flags() + ([f"-Wa,-I{tmp}"] if data else [])
        if units is not None:  # the kernels in several translation units, compiled at once
            built, text = parallel_build.compile_units(cffi, name, units, cdef, tmp, flags, str(runtime_dir()),
                                                       objects, link_flags())
            if built is not None:
                return built
            kept = keep_failed(cache, name, {"module.c": self_contained(source), "module.cdef": cdef,
                                             "build.log": text})
            raise build_failure("the C compiler", text, kept)
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source(name, source, include_dirs=[str(runtime_dir())], libraries=["m"], extra_objects=objects,
                       extra_compile_args=flags, extra_link_args=link_flags())
        log = CapturedOutput()
        try:
            with captured_output(log):
                return Path(ffi.compile(tmpdir=str(tmp), verbose=False))
        except Exception as err:  # CompileError, LinkError, VerificationError
            kept = keep_failed(cache, name, {"module.c": self_contained(source), "module.cdef": cdef,
                                             "build.log": f"{log.text}\n{err}\n"})
            raise build_failure("the C compiler", log.text or str(err), kept) from None

    return name, built_once(target, name, build)


def load_extension(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


# ---------------------------------------------------------------------------
# NumPy binding
# ---------------------------------------------------------------------------


def c_type_of(dtype: str) -> str:
    if dtype in ML_DTYPES_NAMES and dtype != "bfloat16":
        return "uint8_t"  # float8, float4, int4, int2: one byte an element, as ml_dtypes holds them
    return {"bool": "uint8_t", "float16": "uint16_t", "bfloat16": "uint16_t", "float32": "float",
            "float64": "double"}.get(dtype, f"{dtype}_t")


# DLPack device types (dlpack.h DLDeviceType) whose memory the host reads: kDLCPU, kDLCUDAHost
# (pinned), kDLROCMHost, kDLCUDAManaged.
HOST_DLPACK_DEVICES = frozenset({1, 3, 11, 13})
DLPACK_DEVICE_NAMES = {2: "CUDA device", 4: "OpenCL device", 7: "Vulkan device", 8: "Metal device",
                       9: "VPI device", 10: "ROCm device", 12: "extension device", 14: "oneAPI device",
                       15: "WebGPU device", 16: "Hexagon device", 17: "MAIA device"}


def bfloat16_view(value) -> np.ndarray | None:  # noqa: ANN001
    """A torch or JAX bfloat16 array as an ml_dtypes.bfloat16 view, or None (NumPy's DLPack has no
    bfloat16): torch's through its int16 view, JAX's through its buffer (np.asarray, checked in place)."""
    package = type(value).__module__.split(".")[0]
    if package == "torch" and str(value.dtype) == "torch.bfloat16":
        import torch

        return np.from_dlpack(value.view(torch.int16)).view(numpy_dtype("bfloat16"))
    if package in ("jax", "jaxlib") and hasattr(value, "unsafe_buffer_pointer"):
        arr = np.asarray(value)
        return arr if arr.size == 0 or arr.ctypes.data == value.unsafe_buffer_pointer() else None
    return None


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, alignment: int = 64) -> np.ndarray:
    """np.empty whose data starts on an `alignment`-byte boundary (JAX takes a DLPack buffer
    without copying only when it is 64-byte aligned)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def torch_view(t, where: str) -> np.ndarray:  # noqa: ANN001
    """A CPU torch tensor as the NumPy array over its memory (Tensor.numpy() shares it; bfloat16
    through its int16 view); device memory and conjugate/negative views refused."""
    import torch

    if t.device.type != "cpu":
        raise ValueError(f"{where} lives in {t.device} memory, which this function cannot read: it runs on the "
                         "host; copy the tensor to the CPU first (x.cpu())")
    try:
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
        return t.numpy()
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{where} cannot be read in place: {err}") from None


def storage_dtype(dtype: np.dtype) -> np.dtype | None:
    """How the C side sees an array of `dtype` (halves as their bits, bool as bytes), or None: as it is."""
    if dtype.itemsize == 2 and dtype.kind in "fV":
        return np.dtype(np.uint16)
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    return None


def storage_view(a: np.ndarray) -> np.ndarray:
    """The array as the C side sees it: halves as their bits, bool as bytes."""
    if a.dtype.itemsize == 2 and a.dtype.kind in "fV":
        return a.view(np.uint16)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a


class CompiledFunction:
    """A compiled function: checks its arguments, allocates its results."""

    freeze = None  # the module's opc_frozen (binding.py), where it has one
    set_threads: Callable[[int], None] | None = None  # the module's opc_set_num_threads (binding.py), if any

    def __init__(self, ffi, cfunc, sig: FunctionSignature, kernel_message=None, detail=None,  # noqa: ANN001
                 oom=None):  # noqa: ANN001
        self.ffi, self.cfunc, self.sig = ffi, cfunc, sig
        self.oom = oom  # the module's opc_oom_size: the bytes of the calling thread's last failed allocation
        self.kernel_message = kernel_message  # the module's last device-kernel error, if it calls any
        self.detail = detail  # the module's opc_error_value, where it has run-time checks
        self.__name__ = sig.name
        self.module: CompiledModule | None = None  # set by the module that holds it
        # the results' conversion when the caller asked for torch or JAX arrays (arrays=)
        self.wrap: Callable[[np.ndarray], object] | None = None
        # allocates the results (aligned_empty where the conversion needs it)
        self.empty: Callable[..., np.ndarray] = np.empty
        self.in_dtypes = [numpy_dtype(dt) for _, _, dt in sig.inputs]
        self.out_dtypes = [numpy_dtype(dt) for _, dt in sig.outputs]
        # Worked out once, not per call: each argument's shape, C array type and storage dtype.
        self.in_shapes = [tuple(shape) for _, shape, _ in sig.inputs]
        self.in_spec = [(ffi.typeof(f"{c_type_of(dt)}[]"), d, tuple(shape), storage_dtype(d))
                        for (_, shape, dt), d in zip(sig.inputs, self.in_dtypes)]
        self.in_range = range(len(sig.inputs))
        self.in_pointers = [ffi.typeof(f"{c_type_of(dt)} *") for _, _, dt in sig.inputs]
        self.out_c = [(tuple(shape), d, ffi.typeof(f"{c_type_of(dt)}[]"), storage_dtype(d)) for (shape, dt), d in
                      zip(sig.outputs, self.out_dtypes)]
        names = ", ".join(n for n, _, _ in sig.inputs)
        self.__doc__ = f"{sig.name}({names}) -> {len(sig.outputs) - bool(sig.found)} array(s), compiled by opc"

    def check(self, i: int, value) -> np.ndarray:
        name, shape, _ = self.sig.inputs[i]
        want = self.in_dtypes[i]
        if type(value) is np.ndarray and value.dtype == want and value.shape == self.in_shapes[i] \
                and value.flags.c_contiguous:
            return value  # the common case, first: nothing to check further, nothing to convert
        arr = self.as_array(i, value)
        if not self.shape_fits(i, arr.shape):
            raise ValueError(
                f"{self.sig.name}(): argument '{name}' must have shape {self.shape_text(i)}, got {arr.shape}")
        return np.ascontiguousarray(arr)

    def shape_fits(self, i: int, shape: tuple[int, ...]) -> bool:
        return shape == self.in_shapes[i]

    def shape_text(self, i: int) -> str:
        return str(self.in_shapes[i])

    def as_array(self, i: int, value) -> np.ndarray:  # noqa: ANN001
        """Argument i as a NumPy array of its dtype (DLPack arrays read in place), shape unchecked."""
        name = self.sig.inputs[i][0]
        want = self.in_dtypes[i]
        if isinstance(value, (np.ndarray, np.generic)):
            arr = np.asarray(value)
            if arr.dtype != want:
                raise ValueError(f"{self.sig.name}(): argument '{name}' must have dtype {want}, got {arr.dtype}")
        elif hasattr(value, "__dlpack__"):
            arr = self.dlpack_view(name, value, want)
        else:
            try:
                arr = np.asarray(value, dtype=want)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"{self.sig.name}(): argument '{name}' cannot be read as a {want} array: {err}") from None
        return arr

    def pointer(self, i: int, value):  # noqa: ANN001, ANN201
        """What the C function gets for argument i: a torch tensor's own data pointer (checked like
        any DLPack array, without the cost of a NumPy view), else the buffer of check()'s array."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            return self.torch_pointer(i, value, torch)
        ctype, _, _, storage = self.in_spec[i]
        arr = self.check(i, value)
        return self.ffi.from_buffer(ctype, arr if storage is None else arr.view(storage))

    def torch_pointer(self, i: int, t, torch):  # noqa: ANN001, ANN201
        name, shape, dt = self.sig.inputs[i]
        where = f"{self.sig.name}(): argument '{name}'"
        if t.requires_grad:
            raise ValueError(f"{where} requires grad, and a plain opc function records no autograd: "
                             f"{self.autograd_advice(name)}")
        if not t.is_cpu:
            raise ValueError(f"{where} lives in {t.device} memory, which this function cannot read: it runs on the "
                             "host; copy the tensor to the CPU first (x.cpu())")
        if t.dtype != getattr(torch, dt):
            raise ValueError(f"{where} must have dtype {self.in_dtypes[i]}, got {str(t.dtype).removeprefix('torch.')}; "
                             "opc reads DLPack arrays in place and does not convert them (that would copy): convert "
                             "it first (torch: x.to(...))")
        if t.shape != tuple(shape):
            raise ValueError(f"{where} must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if not t.is_contiguous():
            strides = tuple(s * t.element_size() for s in t.stride())
            raise ValueError(f"{where} is not contiguous (strides {strides} for shape {tuple(t.shape)}); opc reads "
                             "DLPack arrays in place and does not copy them: pass a contiguous one "
                             "(torch: x.contiguous())")
        return self.ffi.cast(self.in_pointers[i], t.data_ptr())

    def dlpack_view(self, name: str, value, want: np.dtype) -> np.ndarray:  # noqa: ANN001
        """A torch / JAX / CuPy / ... array read in place through DLPack (np.from_dlpack: a view, no copy).
        Nothing is converted: a copy the caller did not ask for would be silent, so a wrong dtype, a
        non-contiguous layout, device memory or a tensor that records autograd is a ValueError."""
        where = f"{self.sig.name}(): argument '{name}'"
        if getattr(value, "requires_grad", False):
            raise ValueError(f"{where} requires grad, and a plain opc function records no autograd: "
                             f"{self.autograd_advice(name)}")
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            arr = torch_view(value, where)  # the same view by torch's own (faster) route
        else:
            device, index = value.__dlpack_device__()
            if device not in HOST_DLPACK_DEVICES:
                kind = DLPACK_DEVICE_NAMES.get(int(device), f"DLPack device type {int(device)}")
                raise ValueError(f"{where} lives in {kind} memory (device {index}), which this function cannot "
                                 "read: it runs on the host; copy the array to the CPU first (torch: x.cpu())")
            try:
                arr = np.from_dlpack(value)
            except (BufferError, TypeError, ValueError, RuntimeError) as err:
                arr = bfloat16_view(value) if want == numpy_dtype("bfloat16") else None
                if arr is None:
                    raise ValueError(f"{where} cannot be read through DLPack: {err}") from None
        if arr.dtype != want:
            raise ValueError(f"{where} must have dtype {want}, got {arr.dtype}; opc reads DLPack arrays in place "
                             f"and does not convert them (that would copy): convert it first (torch: x.to(...))")
        if not arr.flags.c_contiguous:
            raise ValueError(f"{where} is not contiguous (strides {arr.strides} for shape {arr.shape}); opc reads "
                             "DLPack arrays in place and does not copy them: pass a contiguous one "
                             "(torch: x.contiguous())")
        return arr

    def autograd_advice(self, name: str) -> str:
        if self.module is not None and f"{self.sig.name}_grad" in self.module._functions:
            return (f"call opc.torch.op(m.{self.sig.name}) for a differentiable torch op, "
                    f"or pass {name}.detach() to drop the gradient")
        return (f"compile with grad=True and call opc.torch.op(m.{self.sig.name}) for a differentiable torch op, "
                f"or pass {name}.detach() to drop the gradient")

    def __call__(self, *args, **kwargs):
        """Run the function: arguments by position or by their MLIR names; one array, or a tuple of several."""
        if kwargs:
            args = self.by_name(args, kwargs)
        if len(args) != len(self.in_spec):
            sig = self.sig
            names = ", ".join(n for n, _, _ in sig.inputs)
            raise TypeError(f"{sig.name}() takes {len(sig.inputs)} arguments ({names}), got {len(args)}")
        return self.run(self.pointers(args))

    def pointers(self, args: Sequence, first: int = 0) -> list:
        """The C arguments of args, the arguments from index `first` on."""
        from_buffer = self.ffi.from_buffer
        ptrs = []
        for i, a, (ctype, want, shape, storage) in zip(self.in_range[first:], args, self.in_spec[first:]):
            if type(a) is np.ndarray and a.dtype == want and a.shape == shape and storage is None \
                    and a.flags.c_contiguous:
                ptrs.append(from_buffer(ctype, a))  # the common case inline: a call costs a few us in all
            else:
                ptrs.append(self.pointer(i, a))
        return ptrs

    def with_last(self, last: Sequence, frozen: bool = False) -> Callable:
        """f(*first) = self(*first, *last), `last` checked and made into C pointers once: for arrays
        that stay the same from call to call (a loaded model's weights), which then cost nothing per
        call. The pointers keep the arrays alive; changing them in place is seen by later calls,
        unless `frozen`: the caller promises that nobody changes them (arrays of its own), and the
        kernels may keep packed copies of them for as long as the returned function lives."""
        n_first = len(self.in_spec) - len(last)
        fixed = self.pointers(last, n_first)
        # the first call packs the frozen arrays and touches every buffer for the first time: serial
        # work, which a second thread only slowed, spinning beside it (ResNet-18's first call at 2
        # threads 33-60 ms, at 1 thread 25), so it runs on one thread
        first_call_setter = self.set_threads if frozen and self.freeze is not None else None

        def call(*first):  # noqa: ANN002, ANN202
            nonlocal first_call_setter
            if len(first) != n_first:
                return self(*first, *last)  # the full call's message
            args = self.pointers(first) + fixed
            if (setter := first_call_setter) is None:
                return self.run(args)
            first_call_setter = None
            with one_thread(setter):
                return self.run(args)

        if frozen:
            freeze_while_alive(call, last, self.freeze)
        return call

    def run(self, ptrs: list):  # noqa: ANN201
        """Allocate the results, call the C function on ptrs and them, return them."""
        from_buffer = self.ffi.from_buffer
        outs = []
        empty = self.empty
        try:
            for shape, dtype, ctype, storage in self.out_c:
                out = empty(shape, dtype)
                outs.append(out)
                ptrs.append(from_buffer(ctype, out if storage is None else out.view(storage), require_writable=True))
        except MemoryError:
            raise self.result_memory_error(len(outs)) from None
        status = self.cfunc(*ptrs)
        if status != 0:
            raise self.error(status)
        if self.wrap is not None:
            outs = [self.wrap(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def by_name(self, args: tuple, kwargs: dict) -> tuple:
        """Positional arguments, then keywords by their MLIR argument names (`%x` -> x=...)."""
        names = [n for n, _, _ in self.sig.inputs]
        if len(args) > len(names):
            return args  # too many: __call__ says so
        bound: dict[int, object] = dict(enumerate(args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{self.sig.name}() got an unexpected keyword argument '{key}' "
                                f"(arguments: {', '.join(names)})")
            i = names.index(key)
            if i in bound:
                raise TypeError(f"{self.sig.name}() got multiple values for argument '{key}'")
            bound[i] = value
        missing = [repr(n) for i, n in enumerate(names) if i not in bound]
        if missing:
            raise TypeError(f"{self.sig.name}() takes {len(names)} arguments ({', '.join(names)}): "
                             f"missing argument(s) {', '.join(missing)}")
        return tuple(bound[i] for i in range(len(names)))

    def error(self, status: int) -> Exception:
        """The exception of a nonzero status: a device kernel's failure, or status_error's."""
        if status == KERNEL_STATUS and self.kernel_message is not None:
            message = self.ffi.string(self.kernel_message()).decode(errors="replace")
            return RuntimeError(f"{self.sig.name}(): {message}")
        return status_error(self.sig, status, self.detail, self.oom)

    def result_memory_error(self, i: int) -> MemoryError:
        """Result #i could not be allocated (the results already allocated are dropped with the call)."""
        shape, dtype, _, _ = self.out_c[i]
        n = math.prod(int(d) for d in shape) * dtype.itemsize
        return MemoryError(f"{self.sig.name}(): out of memory: result #{i} ({dtype}{list(shape)}, {byte_size(n)}) "
                           "could not be allocated")

    def __repr__(self) -> str:
        return f"<opc function {self.sig.name}>"


class CompiledModule:
    """Attributes are the compiled functions, named after the func.funcs (m["a.b"] reaches every one)."""

    OWN_ATTRIBUTES = frozenset({"_functions", "c_source", "path", "no_grad", "wrt", "arrays", "cuda_source", "ffi",
                                "lib"})

    def __init__(self, functions: dict[str, CompiledFunction], source: str, path: Path | None = None):
        self._functions = functions
        self.c_source = source
        self.path = path
        self.no_grad: dict[str, str] = {}
        """Gradient functions opc did not build (no float argument...), and why."""
        self.wrt: dict[str, list[int]] = {}
        """Per function with a NAME_grad: the arguments (indices) it gives gradients for, in order."""
        self.arrays = "numpy"
        for name, fn in functions.items():
            fn.module = self
            if name not in self.OWN_ATTRIBUTES and not hasattr(type(self), name):  # else only m[name]
                setattr(self, name, fn)

    def set_arrays(self, kind: str) -> None:
        """The kind of array every function returns: "numpy", "torch" or "jax" (a view, no copy)."""
        from opc.interop.arrays import result_converter

        wrap = result_converter(kind)
        for fn in self._functions.values():
            fn.wrap = wrap
            fn.empty = aligned_empty if kind == "jax" else np.empty
        self.arrays = kind

    def __getattr__(self, name: str):
        raise AttributeError(self.missing(name))

    def __getitem__(self, name: str) -> CompiledFunction:
        """m["a.b"]: a function by its MLIR name, also where that is no Python identifier."""
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(self.missing(name)) from None

    def missing(self, name: str) -> str:
        """Why the module has no function `name`: opc declined to build it, it is a gradient of
        an order the module was not compiled for (then: the grad= that builds it), or no such name."""
        why = self.__dict__.get("no_grad", {}).get(name)
        if why is not None:
            return f"{name}: opc built no such function: {why}"
        functions = self.__dict__.get("_functions", {})
        for suffix, grad, flag in (("_grad_grad", "grad=2", "--grad 2"), ("_value_and_grad", "grad=True", "--grad"),
                                   ("_grad", "grad=True", "--grad")):
            if name.endswith(suffix) and name.removesuffix(suffix) in functions:
                return f"opc module has no function {name!r}: compile with {grad} to build it (opc compile {flag})"
        return f"opc module has no function {name!r} (functions: {', '.join(functions)})"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._functions))

    def __repr__(self) -> str:
        return f"<opc module {', '.join(self._functions)}>"
