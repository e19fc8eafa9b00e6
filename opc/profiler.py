"""Where a model's time goes, kernel by kernel, without reading C.

Every CPU module times each kernel call of its entry points while profiling is on (the C
emitter's profile_support: a monotonic clock read before and after each kernel, per-kernel
totals, and the first 65,536 calls one by one):

    with opc.profile(m) as p:      # or p = opc.profile(m); ...; p.stop()
        m.block(x, ...)
    print(p.table())               # kernel, kind, ops, calls, total ms, share
    print(p.routes())              # the runtime kernels convs took: {"conv: direct": 3, ...}
    p.chrome_trace("trace.json")   # chrome://tracing / Perfetto (onnxruntime's format)

`OPC_PROFILE=1 python model.py` profiles every module the process loads and prints the tables
when it exits (to stderr); `OPC_PROFILE=trace.json` also writes the Chrome trace there.
`opc profile model.mlir|model.onnx [--grad] [--repeat N] [--trace FILE]` runs each function
on random inputs and prints the table.

A kernel is named FUNCTION#N (its place among the function's kernels), its kind and ops are
the schedule's (`opc explain --kernels`); a GEMM is one kernel, its epilogue included.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from types import ModuleType


def extension_of(module) -> ModuleType:  # noqa: ANN001 - a CompiledModule
    name = Path(module.path).name.split(".")[0]
    ext = sys.modules.get(name)
    if ext is None or not hasattr(ext.lib, "opc_profile"):
        raise ValueError("profile: module must be a CPU module compiled by opc (its kernels carry the timers)")
    return ext


class Profile:
    """The kernel timers of one compiled module."""

    def __init__(self, ext: ModuleType):
        self.ext, self.lib, self.ffi = ext, ext.lib, ext.ffi
        self.count = self.lib.opc_profile(0)
        labels = [self.ffi.unpack(self.lib.opc_profile_label(k), self.lib.opc_profile_label_size(k)).decode()
                  for k in range(self.count)]  # by size: a function's name may hold a NUL
        self.kernels = []  # (name, kind, ops)
        seen: dict[str, int] = {}
        for label in labels:
            fn, kind_ops = label.rsplit("\t", 1)  # a function name may hold a tab; "kind: ops" does not
            kind, _, ops = kind_ops.partition(": ")
            seen[fn] = seen.get(fn, -1) + 1
            self.kernels.append((f"{fn}#{seen[fn]}", kind, ops))

    def start(self) -> Profile:
        """Turn the module's kernel timers on (also `with opc.profile(m) as p:`)."""
        self.lib.opc_profile(1)
        return self

    def stop(self) -> None:
        """Turn the timers off; what they measured stays."""
        self.lib.opc_profile(0)

    def reset(self) -> None:
        """Forget the totals and events measured so far."""
        self.lib.opc_profile_reset()

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.stop()

    def rows(self) -> list[dict]:
        """One row per kernel that ran, the slowest first."""
        totals = [(self.lib.opc_profile_ns(k) / 1e6, self.lib.opc_profile_calls(k)) for k in range(self.count)]
        whole = sum(ms for ms, _ in totals) or 1.0
        rows = [{"kernel": name, "kind": kind, "ops": ops, "calls": calls, "total_ms": ms, "share": ms / whole}
                for (name, kind, ops), (ms, calls) in zip(self.kernels, totals) if calls]
        return sorted(rows, key=lambda r: -r["total_ms"])

    def table(self) -> str:
        """The rows as a Markdown table: kernel, kind, ops, calls, total ms, share, and a total row."""
        rows = self.rows()
        lines = ["| kernel | kind | ops | calls | total ms | share |", "|---|---|---|---|---|---|"]
        for r in rows:
            ops = r["ops"] if len(r["ops"]) <= 60 else r["ops"][:57] + "..."
            lines.append(f"| {r['kernel']} | {r['kind']} | {ops} | {r['calls']} | {r['total_ms']:.3f} | "
                         f"{100 * r['share']:.1f}% |")
        total = sum(r["total_ms"] for r in rows)
        lines.append(f"| total | | | {sum(r['calls'] for r in rows)} | {total:.3f} | 100% |")
        return "\n".join(lines)

    def routes(self) -> dict[str, int]:
        """How many times each of the runtime's kernel routes ran (a conv's kernel, picked by its geometry:
        runtime/opc_routes.h), those that ran, by name ("conv: direct", "depthwise: rows", ...)."""
        n = self.lib.opc_profile_routes(self.ffi.NULL, 0)
        counts = self.ffi.new("int64_t[]", n)
        self.lib.opc_profile_routes(counts, n)
        return {self.ffi.string(self.lib.opc_profile_route_name(k)).decode(): counts[k] for k in range(n) if counts[k]}

    def routes_table(self) -> str:
        """routes() as a Markdown table ("" when no route ran: a module without convolutions)."""
        routes = self.routes()
        return "\n".join(["| route | calls |", "|---|---|", *(f"| {r} | {n} |" for r, n in routes.items())]) \
            if routes else ""

    def events(self) -> list[tuple[int, int, int]]:
        """(kernel, start ns, end ns) of the first calls, in the order they ended."""
        buf = self.ffi.new("int64_t[]", 3 * (1 << 16))
        n = self.lib.opc_profile_events(buf, 1 << 16)
        return [(buf[3 * i], buf[3 * i + 1], buf[3 * i + 2]) for i in range(n)]

    def chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """The calls as Chrome trace "complete" events (µs; chrome://tracing, Perfetto)."""
        events = self.events()
        t0 = min((s for _, s, _ in events), default=0)
        trace = [{"name": self.kernels[k][0], "cat": self.kernels[k][1], "ph": "X", "ts": (s - t0) / 1e3,
                  "dur": (e - s) / 1e3, "pid": os.getpid(), "tid": 0, "args": {"ops": self.kernels[k][2]}}
                 for k, s, e in events]
        Path(path).write_text(json.dumps({"traceEvents": trace, "displayTimeUnit": "ms"}), encoding="utf-8")


def profile(module) -> Profile:  # noqa: ANN001
    """Start timing every kernel of `module` (an opc CPU module); see the module docstring."""
    return Profile(extension_of(module)).start()


_at_exit: list[Profile] = []


def profile_at_exit(ext: ModuleType) -> None:
    """OPC_PROFILE: time this extension from now on; its table printed when the process exits."""
    if any(p.ext is ext for p in _at_exit):
        return
    if not _at_exit:
        atexit.register(report_at_exit)
    _at_exit.append(Profile(ext).start())


def report_at_exit() -> None:
    trace = os.environ.get("OPC_PROFILE", "")
    for i, p in enumerate(_at_exit):
        if p.rows():
            routes = p.routes_table()
            print(f"opc profile ({p.ext.__name__}):\n{p.table()}" + (f"\n{routes}" if routes else ""), file=sys.stderr)
            if trace.endswith(".json"):
                p.chrome_trace(trace if len(_at_exit) == 1 else trace.replace(".json", f".{i}.json"))
