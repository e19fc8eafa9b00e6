"""What FunctionLowering's parts (the pointwise, reduction, row-kernel and GEMM mixins) read of
one another: the function's state and the methods each part offers the others. Declarations
only, for the type checker; FunctionLowering (opc_lower_to_loops.py) defines them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects import func
from xdsl.ir import Attribute, Block, Operation, SSAValue

if TYPE_CHECKING:
    from opc.dialects import opc
    from opc.lowering.scalars import Emitter
    from opc.symbolic import Sym


@dataclass
class Accumulator:
    """One reduction's running state in a loop: its carried values, how an element
    folds in, their `omp simd reduction` operators (None: none), the result."""

    inits: list[SSAValue]
    clauses: list[str] | None
    step: Callable[[list[SSAValue], SSAValue], list[SSAValue]]
    result: Callable[[list[SSAValue]], SSAValue]


class LoweringState:
    fn: func.FuncOp
    e: Emitter
    entry: Block
    buffers: dict[SSAValue, SSAValue]
    allocs: list[SSAValue]
    returned: list[SSAValue]
    inlined: set[Operation]
    memo: dict[tuple, SSAValue]
    flat: bool
    simd: bool
    memory_order_reductions: bool
    row_buffer_bytes: int
    row_rank: int
    row_scalars: dict[SSAValue, SSAValue]
    row_staged: dict[SSAValue, SSAValue]
    columns: dict[SSAValue, tuple[SSAValue, SSAValue]]
    REDUCE_KINDS: ClassVar[dict[type[Operation], str]]

    if TYPE_CHECKING:
        def buffer_for(self, v: SSAValue) -> SSAValue: ...

        def size_value(self, d: int | Sym) -> SSAValue: ...

        def alloc(self, shape: Sequence[int | Sym], element: Attribute) -> SSAValue: ...

        def view(self, src: SSAValue, shape: Sequence[int | Sym], element: Attribute,
                 strides: Sequence[int | Sym] | None = None) -> SSAValue: ...

        def operand_buffer(self, v: SSAValue) -> SSAValue: ...

        def lower_op(self, op: Operation) -> None: ...

        def lower_reshape(self, op: opc.ReshapeOp) -> None: ...

        def value_at(self, v: SSAValue, idx: list[SSAValue]) -> SSAValue: ...

        def value_at_root(self, v: SSAValue, idx: list[SSAValue]) -> SSAValue: ...

        def flat_view(self, buf: SSAValue) -> SSAValue: ...

        def reduce_into(self, out: SSAValue, elem: Attribute, in_shape: Sequence[int], axes: Sequence[int],
                        keepdim: bool, kind: str, load: Callable[[list[SSAValue]], SSAValue]) -> None: ...

        def accumulator(self, kind: str, elem: Attribute) -> Accumulator: ...

        def finish_mean(self, kind: str, acc: SSAValue, count: int) -> SSAValue: ...

        def reduction_loop(self, extent: int, inits: list[SSAValue],
                           step: Callable[[SSAValue, list[SSAValue]], list[SSAValue]],
                           clauses: list[str] | None) -> list[SSAValue]: ...
