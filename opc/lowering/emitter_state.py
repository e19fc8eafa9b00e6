"""What the C and CUDA emitters' parts (loops, memory, calls; kernels, row kernels) read of one
another: the emitter's state and the methods each part offers the others. Declarations only,
for the type checker; CEmitter (c_emitter.py) and CudaEmitter (cuda_emitter.py) define them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects import func, scf
from xdsl.ir import Attribute, Block, Operation, SSAValue


class EmitterState:
    lines: list[str]
    names: dict[SSAValue, str]
    constants: dict[SSAValue, int]
    indent: int
    const_ptrs: set[SSAValue]
    yield_targets: list[list[str]]
    arena: dict[SSAValue, int | str]  # a buffer -> its offset in the arena (a C expression where sizes give it)
    function: func.FuncOp

    if TYPE_CHECKING:
        def name(self, v: SSAValue) -> str: ...

        def line(self, text: str) -> None: ...

        def param(self, v: SSAValue) -> str: ...

        def expression_with(self, op: Operation, texts: dict[SSAValue, str]) -> str: ...

        def emit_block(self, block: Block) -> None: ...

        def emit_op(self, op: Operation) -> None: ...

        def emit_local_defs(self, local_defs: list[Operation]) -> None: ...

        def dims_of(self, ref: SSAValue) -> list[int | str]: ...

        def captured_values(self, ops: list[Operation], fn: func.FuncOp) -> tuple[list[SSAValue], list[Operation]]:
            ...

        def begin_outlined(self, fn: func.FuncOp, label: Attribute | None, what: str,
                           params: str) -> tuple[str, list[str], int]: ...

        def outline(self, kernel: str, saved_lines: list[str], saved_indent: int) -> str: ...

        def declare_accumulators(self, op: scf.ForOp) -> list[str]: ...

        def emit_ForOp(self, op: scf.ForOp) -> None: ...


class CudaEmitterState(EmitterState):
    kernels: list[str]
    host_scalars: set[SSAValue]
    slots: dict[SSAValue, int]
    fn_name: str
    row_team: int
    row_body: object
    row_passes: int
    shared_at: int

    if TYPE_CHECKING:
        def row_kernel(self, ivs: list[tuple[SSAValue, tuple[int, int | str, int]]], total: int | str,
                       body: list[Operation], length: int) -> tuple[int, int | str]: ...

        def row_pass(self, op: scf.ForOp) -> None: ...

        def decompose(self, ivs: list[tuple[SSAValue, tuple[int, int | str, int]]], flat: str) -> None: ...

        def emit_ops(self, ops: list[Operation]) -> None: ...

        def combine_expr(self, op: Operation, a: str, b: str) -> str: ...

        @staticmethod
        def find_combine(loop: scf.ForOp, k: int = 0) -> Operation | None: ...
