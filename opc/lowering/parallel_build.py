"""A generated module built as several C translation units at once.

gcc's time on a module is mostly its kernels at -O3, and one gcc process uses one core. The
emitter outlines every top-level loop nest into its own function (`static
__attribute__((noinline)) void opc_k_F_N(...) { ... }`, ended by a `}` in column 0), so the
source splits without parsing C: the kernels go, in order, into up to `jobs` units of about
equal size, each with the module's #includes and the constant globals it names; the rest
(entry points, profiling and thread support, the CFFI wrapper) stays in the main unit, which
declares the kernels. The kernels lose `static` for hidden visibility: visible across the
units of one extension, never outside it. Every unit compiles at once (a thread per gcc
process), then one `gcc -shared` links them with the runtime objects.

Flags per unit: the kernels take module_flags() (-O3); the main unit takes -O1 when it has
no loop of its own (its entry points only call kernels, the GEMM and the runtime: straight
code that -O3 takes long over and cannot speed up), else the same as the kernels.

The extension is the same module CFFI builds (CFFI writes the wrapper's C, `ffi.emit_c_code`);
only the compiling is ours. Used on Linux (gcc -shared, no libpython link) for modules whose
kernels are big enough to be worth a second process (MIN_SPLIT_CHARS).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Kernel source (in characters) below which one gcc process does it all: a unit costs a
# process (~0.05 s of CPU), which a few small kernels do not win back. Above it even one
# kernel unit pays: the main unit then compiles at -O1 (the tiny BERT: 0.5 s of gcc CPU
# instead of 0.8 s).
MIN_SPLIT_CHARS = 8_000
# A unit holds at least this much kernel source (a few hundred lines), so a mid-sized module
# does not start a process per core for a few kernels each.
MIN_UNIT_CHARS = 12_000

KERNEL_DEF = re.compile(
    r"^(?:/\* kernel [^\n]*\*/\n)?static __attribute__\(\(noinline\)\) void (opc_k_\w+)\(([^\n]*)\) \{\n.*?^\}\n",
    re.MULTILINE | re.DOTALL)
# a constant's definition (C text) or, for one bound as data (c_data.py), its declaration: what a unit copies
GLOBAL_DEF = re.compile(r'^(?:static const|extern __attribute__\(\(visibility\("hidden"\)\)\) const) [\w ]+ '
                        r"(opc_global_\w+)\[\d+\](?: = [^\n]*|;)$", re.MULTILINE)
INCLUDES = re.compile(r"(?:#include [^\n]*\n)+")
HIDDEN = '__attribute__((noinline, visibility("hidden"))) void'
LOOP = re.compile(r"\bfor \(|#pragma omp")


@dataclass
class Units:
    """A module's C source as translation units: `main` (all but the kernels' bodies) and `kernels`."""

    main: str
    kernels: list[str]
    main_has_loops: bool


def build_jobs() -> int:
    """gcc processes at once: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def split_source(source: str, jobs: int) -> Units | None:
    """The source as translation units, or None where one unit is best (small, or no kernels)."""
    spans = list(KERNEL_DEF.finditer(source))
    total = sum(m.end() - m.start() for m in spans)
    if jobs < 2 or not spans or total < MIN_SPLIT_CHARS:
        return None
    includes = INCLUDES.match(source)
    head = includes.group(0) if includes else ""
    globals_by_name = {m.group(1): m.group(0) for m in GLOBAL_DEF.finditer(source)}
    n = max(1, min(jobs, len(spans), total // MIN_UNIT_CHARS))
    groups: list[list[re.Match[str]]] = [[]]
    size = 0
    for j, m in enumerate(spans):  # n contiguous groups of about total / n characters each
        need = n - len(groups)  # groups still to open
        if groups[-1] and need > 0 and (size >= len(groups) * total / n or len(spans) - j <= need):
            groups.append([])
        groups[-1].append(m)
        size += m.end() - m.start()
    kernels = []
    for group in groups:
        body = "\n".join(m.group(0).replace("static __attribute__((noinline)) void", HIDDEN, 1) for m in group)
        used = [text for name, text in globals_by_name.items() if name in body]
        kernels.append(head + "\n".join(used) + "\n" + body)
    parts, at = [], 0
    for m in spans:
        parts.append(source[at:m.start()])
        parts.append(f'__attribute__((visibility("hidden"))) void {m.group(1)}({m.group(2)});\n')
        at = m.end()
    parts.append(source[at:])
    main = "".join(parts)
    return Units(main, kernels, bool(LOOP.search(main)))


def python_code_flags() -> list[str]:
    """The flags of Python's CFLAGS that change code (-fwrapv, -DNDEBUG, ...): CFFI's own build
    passes all of CFLAGS before opc's flags, so a split module means the same C as a one-unit one
    (-g and the warnings, which change no code, are left out: -g costs gcc time)."""
    import shlex

    return [f for f in shlex.split(sysconfig.get_config_var("CFLAGS") or "") if f.startswith(("-f", "-D", "-U"))]


def python_includes() -> list[str]:
    paths = sysconfig.get_paths()
    return [p for p in dict.fromkeys((paths.get("include"), paths.get("platinclude"))) if p]


def compile_units(cffi, name: str, units: Units, cdef: str, tmp: Path, flags: list[str],  # noqa: ANN001
                  include: str, objects: Sequence[str], link: list[str]) -> tuple[Path | None, str]:
    """(the built extension, or None, and the compilers' output)."""
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(name, units.main)
    wrapper = tmp / f"{name}.c"
    with contextlib.redirect_stdout(io.StringIO()):  # CFFI says "generating ..."
        ffi.emit_c_code(str(wrapper))
    cc = os.environ.get("CC", "gcc")
    flags = [*python_code_flags(), *flags]
    main_flags = flags if units.main_has_loops else [*flags, "-O1"]
    jobs = [(wrapper, main_flags, [f"-I{p}" for p in python_includes()])]
    for i, text in enumerate(units.kernels):
        path = tmp / f"{name}_k{i}.c"
        path.write_text(text, encoding="utf-8")
        jobs.append((path, flags, []))

    from concurrent.futures import ThreadPoolExecutor  # (here: a module loaded from the cache builds nothing)

    def run(job: tuple[Path, list[str], list[str]]) -> subprocess.CompletedProcess[str]:
        src, unit_flags, extra = job
        return subprocess.run([cc, *unit_flags, "-fPIC", f"-I{include}", *extra, "-c", str(src), "-o",
                               str(src.with_suffix(".o"))], capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    log = "".join(r.stdout + r.stderr for r in results)
    if any(r.returncode != 0 for r in results):
        return None, log
    out = tmp / f"{name}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    linked = subprocess.run([cc, "-shared", "-o", str(out), *(str(src.with_suffix(".o")) for src, _, _ in jobs),
                             *objects, "-lm", *link], capture_output=True, text=True, check=False)
    log += linked.stdout + linked.stderr
    return (out if linked.returncode == 0 else None), log


def supported() -> bool:
    """Linux: an extension links with `gcc -shared` alone."""
    return sys.platform.startswith("linux")
