"""The IR-size figures (bench/results/2026-12-03-readme-records.md): per model of tests/models, the opc ops after import, the ops of
the module that `opc.compile(module, grad=True)` lowers (all three functions), its kernels (as the
profiler counts them) and the lines of C it emits, without running gcc:

    python tests/models/ir_size.py [resnet18 mobilenet_v2 ...]"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from seeded_weights import fill_initializers  # noqa: E402

import opc  # noqa: E402
from opc.api import lower, prepare  # noqa: E402
from opc.ir import Source  # noqa: E402
from opc.lowering.c_emitter import emit_c  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "small_cnn", "lstm", "gru"]


def opc_ops(module) -> Counter:
    return Counter(op.name for op in module.walk() if op.name.startswith("opc."))


def main() -> None:
    for name in sys.argv[1:] or MODELS:
        module, _ = opc.import_onnx(fill_initializers(onnx.load(str(HERE / f"{name}.onnx"))))
        imported = sum(opc_ops(module).values())
        src = prepare(Source(module, name, {}), grad=True)
        compiled = opc_ops(src.module)
        loops = lower(src)
        c_source = emit_c(loops)[0]
        timed = re.search(r"opc_prof_labels\[(\d+)\]", c_source)  # the profiler's kernels: every timed call
        kernels = timed.group(1) if timed else "?"
        c_lines = c_source.count("\n")
        top = ", ".join(f"{n.removeprefix('opc.')} {c}" for n, c in compiled.most_common(6))
        print(f"{name}: {imported} opc ops imported, {sum(compiled.values())} compiled ({top}), "
              f"{kernels} kernels, {c_lines} lines of C", flush=True)


if __name__ == "__main__":
    main()
