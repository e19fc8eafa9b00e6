"""opc-lower-to-loops: functions on tensors become functions on buffers whose
bodies are loop nests of scalar arith/math ops (xDSL's memref/scf/arith/math)
plus `opc_loops.gemm` for the GEMMs.

Each function `@f(inputs) -> results` becomes `@f(inputs..., outputs...)` in
destination-passing style: results are written into caller-owned buffers.

Fusion follows the kernel schedule (opc/transforms/opc_schedule.py): an
elementwise op, broadcast_to, transpose or full is *inlined* into its
consumers' loop nest when they all sit in one nest (a value read twice in a
nest is computed once per element: value_at memoizes); every other value
gets a buffer. So a chain of elementwise ops becomes one `scf.parallel` nest
reading the chain's inputs once and writing its output once, and reductions
read their elementwise producers directly. A row kernel (softmax, layer norm
composed from primitives) becomes one parallel loop over rows with one pass
per reduction level over each row. Float reductions on the CPU carry
`opc.simd_reduction`, which the C emitter turns into `omp simd reduction`.
Evaluation is iterative (an explicit stack), so chains of any length lower.

Scalars travel in their storage type (f16/bf16 included) and ops compute in
f32 for f16/bf16, rounding to nearest even on every op result, which keeps
the numbers of fused and unfused code identical (opc/lowering/scalars.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf, tensor
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from opc.dialects import opc
from opc.dialects.control import is_host_op
from opc.dialects.kinds import ELEMENTWISE, INLINABLE, element_of, is_splat_constant, shape_of
from opc.dialects.opc_loops import ExternalCallOp, HandOutOp
from opc.dialects.sizes import FunctionSizes, Shape, analyze, has_dynamic_shapes, symbolic_shapes
from opc.dialects.slices import SLICE_OPS
from opc.errors import UnsupportedError
from opc.lowering import nn_lowering as nn
from opc.lowering.control_flow_lowering import ControlState, lower_host_op
from opc.lowering.gemm_lowering import GemmLowering
from opc.lowering.pointwise_lowering import PointwiseLowering
from opc.lowering.reduction_lowering import ReductionLowering
from opc.lowering.row_kernel_lowering import ROW_BUFFER_BYTES, RowKernelLowering
from opc.lowering.scalars import (
    Emitter,
    has_scalar_rule,
    memref_of,
)
from opc.lowering.size_lowering import SizeLowering
from opc.lowering.slice_lowering import emit_checks, host_index, known_size, lower_insert_slice, lower_slice_view
from opc.targets.device_kernels import external_symbol, kernel_attributes
from opc.transforms.opc_outline_control_flow import BODY_ATTR, IN_PLACE_ATTR, is_body, outline_control_flow
from opc.transforms.opc_schedule import Kernel, plan, unwrap_kernels

# Function lowering
# ---------------------------------------------------------------------------

HANDLE = MemRefType(i64, [])
"""A handed output's parameter: where the function puts the address of the result it allocated."""

KERNEL_ATTR = "opc.kernel"
"""On a top-level scf.parallel: the kernel it runs (kind: ops), from opc-schedule."""


class FunctionLowering(PointwiseLowering, ReductionLowering, RowKernelLowering, GemmLowering, SizeLowering):
    """Lowers one tensor function to a buffer function of loop nests."""

    def __init__(self, fn: func.FuncOp, globals_out: list[memref.GlobalOp] | None = None,
                 memory_order_reductions: bool = True, row_kernels: bool = True,
                 row_buffer_bytes: int = ROW_BUFFER_BYTES, gemm_epilogues: bool = True, strided_views: bool = True,
                 sizes: FunctionSizes | None = None, symbolic: dict[SSAValue, Shape] | None = None,
                 cpu: bool = True):
        self.fn = fn
        self.cpu = cpu  # the runtime called: runtime/opc_nn.h's entries (else opc_nn.cuh's)
        self.sizes = sizes
        self.symbolic = symbolic if symbolic is not None else {}
        self.row_buffer_bytes = row_buffer_bytes
        self.memory_order_reductions = memory_order_reductions
        self.globals = globals_out if globals_out is not None else []
        ret = fn.body.block.last_op
        assert ret is not None  # a verified func ends in its return
        self.returned = list(ret.operands)
        arg_types = [memref_of(a.type) for a in fn.args]
        self.found = self.found_sizes()
        self.handed = self.handed_outputs()  # allocated here and handed to the caller (no bound before the call)
        out_types = [memref_of(t) if i not in self.handed else HANDLE
                     for i, t in enumerate(fn.function_type.outputs.data)]
        found_types = [MemRefType(i64, [len(self.found)])] if self.found else []  # the data sizes, for the caller
        self.entry = Block(arg_types=[*arg_types, *out_types, *found_types])
        self.e = Emitter(self.entry, sizer=self.size_value)
        for old, new in zip(fn.args, self.entry.args):
            new.name_hint = old.name_hint
        outputs = list(self.entry.args[len(fn.args):len(fn.args) + len(out_types)])
        for i, out in enumerate(outputs):
            out.name_hint = f"out{i}"
        self.found_buf = self.entry.args[-1] if self.found else None
        if self.found_buf is not None:
            self.found_buf.name_hint = "found"
        self.add_size_params(self.size_param_names())
        self.out_shapes = [shape_of(v) for v in self.returned] if sizes is not None else []
        in_shapes = [shape_of(a) for a in fn.args] if sizes is not None else []
        self.buffers: dict[SSAValue, SSAValue] = dict(zip(fn.args, self.argument_views(self.entry.args, in_shapes)
                                                          if sizes is not None else self.entry.args))
        self.outputs: list[SSAValue] = (self.argument_views(outputs, self.out_shapes) if sizes is not None
                                        else list(outputs))
        self.allocs: list[SSAValue] = []
        # sizes read from tensors' values (sizes.value_size): the ops computing them run on the host
        self.value_defs = {v.owner: name for name, v in sizes.value_sizes().items()} if sizes is not None else {}
        self.value_ops = feeding(list(self.value_defs))
        self.flat = False  # True while a flat (1-D) nest is emitted
        self.checks = nn.RuntimeChecks(self)
        self.memo: dict[tuple, SSAValue] = {}  # (value, index, block) -> scalar, within one op's nests
        self.control: ControlState | None = None  # the module's outlined control flow (LowerToLoopsPass sets it)
        self.row_scalars: dict[SSAValue, SSAValue] = {}  # inside a row kernel: per-row reduction results
        self.row_staged: dict[SSAValue, SSAValue] = {}  # inside a row kernel: values kept in a row buffer
        # in a GEMM epilogue: [n] value -> (buffer, column)
        self.columns: dict[SSAValue, tuple[SSAValue, SSAValue]] = {}
        self.row_rank = 0
        self.simd = memory_order_reductions  # the CPU: float reductions vectorize (omp simd)
        self.schedule = plan(fn, row_kernels=row_kernels, epilogues=gemm_epilogues, views=strided_views)
        self.inlined = set(self.schedule.inlined)
        # attention results written through a transpose's buffer (a strided view, nn.result_view)
        self.written_through = {t.x: t for t, how in self.schedule.views.items()
                                if how == "result" and isinstance(t, opc.TransposeOp)}  # views: transposes

    # -- planning -------------------------------------------------------------

    # -- buffers ----------------------------------------------------------------

    def buffer_for(self, v: SSAValue) -> SSAValue:
        """The buffer a materialized value is written to: an output, a fresh alloc, or (an attention
        result planned so) a strided view of its transpose's buffer."""
        if v in self.buffers:
            return self.buffers[v]
        if v in self.written_through:
            buf = nn.result_view(self, v, self.written_through[v])
        elif v in self.returned and self.returned.count(v) == 1:
            buf = self.output_buffer(self.returned.index(v))
        else:
            buf = self.alloc(shape_of(v), element_of(v))
            buf.name_hint = v.name_hint
            self.allocs.append(buf)
        self.buffers[v] = buf
        return buf

    def output_buffer(self, i: int) -> SSAValue:
        """Output i, viewed at its run-time shape; one holding a data size is viewed once it is known
        (here, at its first write: its op has computed the size)."""
        out = self.outputs[i]
        if i in self.handed and out.owner is self.entry:
            out = self.outputs[i] = self.alloc(self.out_shapes[i], element_of(self.returned[i]))
            out.name_hint = f"result{i}"
        elif self.found and out.owner is self.entry and self.holds_data(self.out_shapes[i]):
            out = self.outputs[i] = self.view(out, self.out_shapes[i], element_of(self.returned[i]))
        return out

    def operand_buffer(self, v: SSAValue) -> SSAValue:
        if v not in self.buffers:
            raise AssertionError(f"{v} used before it was materialized")
        return self.buffers[v]

    # -- scalar evaluation --------------------------------------------------------


    # -- materializing ops ----------------------------------------------------------


    REDUCE_KINDS = {opc.ReduceSumOp: "sum", opc.ReduceMaxOp: "max", opc.ReduceMinOp: "min", opc.ReduceMeanOp: "mean"}


    # -- reductions: accumulators ---------------------------------------------------


    # -- row kernels ------------------------------------------------------------------

    def lower_reshape(self, op: opc.ReshapeOp) -> None:
        """A reshape of a contiguous buffer is a view: no copy, no loop."""
        view = self.view(self.operand_buffer(op.x), shape_of(op.result), element_of(op.result))
        view.name_hint = op.result.name_hint
        if op.result in self.returned:
            self.buffers[op.result] = view
            self.copy_into_output(op.result)
        else:
            self.buffers[op.result] = view

    def copy_into_output(self, v: SSAValue) -> None:
        src = self.buffers[v]
        for i, r in enumerate(self.returned):
            if r is v and self.outputs[i] is not src:
                dst = self.output_buffer(i)
                self.e.parallel(shape_of(v), lambda idx, dst=dst: self.e.emit(
                    memref.StoreOp.get(self.e.value(memref.LoadOp.get(src, idx)), dst, idx)))  # same type: no bitcast

    # -- driver ---------------------------------------------------------------------

    def run(self) -> func.FuncOp:
        kernel_of = {o: k for k in self.schedule.kernels for o in k.ops}
        for op in self.fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                break
            if isinstance(op, SLICE_OPS):
                emit_checks(self, op)  # on the host, before any nest reads or writes the slice
            if op in self.inlined or (is_size_op(op) and not feeds_host(op) and op not in self.value_ops):
                continue
            before = self.entry.last_op
            rk = self.schedule.row_of.get(op)
            ep = self.schedule.epilogue_of.get(op)
            if rk is not None:
                if op is not rk.ops[-1]:
                    continue
                self.memo = {}
                self.lower_row_kernel(rk)  # at its last op: every operand is materialized by now
            elif ep is not None:
                if op is not ep.root:
                    continue
                self.memo = {}
                self.lower_gemm_epilogue(ep)  # at the nest's root, as a row kernel at its last op
            else:
                self.lower_op(op)
            if op in self.value_defs:
                self.define_value_size(op)
            if op in kernel_of:
                self.label_nests(before, kernel_of[op])
        # Results that are arguments or returned twice are copied into their outputs.
        for v in dict.fromkeys(self.returned):
            if self.returned.count(v) > 1 or v in self.fn.args:
                self.copy_into_output(v)
        if self.found_buf is not None:
            self.store_found(self.found_buf)
        for i in self.handed:
            self.e.emit(HandOutOp(self.output_buffer(i), self.entry.args[len(self.fn.args) + i]))
        self.checks.finish()
        for buf in self.allocs:
            self.e.emit(memref.DeallocOp.get(buf))
        self.e.emit(func.ReturnOp())
        new = func.FuncOp(self.fn.sym_name.data, ([a.type for a in self.entry.args], []), Region(self.entry))
        new.attributes["opc.num_inputs"] = IntegerAttr(len(self.fn.args), 64)
        self.annotate_sizes(new, self.out_shapes)
        self.checks.annotate(new)
        return new

    def lower_constant(self, op: arith.ConstantOp) -> None:
        """A dense tensor constant becomes a constant memref.global read in place."""
        v = op.result
        name = f"{self.fn.sym_name.data}_const{len(self.globals)}"
        t = memref_of(v.type)
        self.globals.append(memref.GlobalOp.get(StringAttr(name), t, op.value, constant=UnitAttr()))
        buf = self.e.value(memref.GetGlobalOp(name, t))
        buf.name_hint = v.name_hint
        self.buffers[v] = buf
        if v in self.returned:
            self.copy_into_output(v)

    def lower_external(self, op: Operation, symbol: str) -> None:
        """A device's own kernel: every operand in a buffer, every result into one (used or not)."""
        inputs = [self.operand_buffer(v) for v in op.operands]
        outputs = [self.buffer_for(r) for r in op.results]
        self.e.emit(ExternalCallOp(symbol, op.name, inputs, outputs, kernel_attributes(op)))

    def label_nests(self, before: Operation | None, kernel: Kernel) -> None:
        """The nests just emitted carry their kernel (`opc.kernel`: kind and ops), for
        `--emit mlir` and the C emitter's comment on each kernel function."""
        label = StringAttr(f"{kernel.kind}: {', '.join(o.name.removeprefix('opc.') for o in kernel.ops)}")
        op = before.next_op if before is not None else self.entry.first_op
        while op is not None:
            if isinstance(op, scf.ParallelOp):
                op.attributes[KERNEL_ATTR] = label
            op = op.next_op

    def lower_op(self, op: Operation) -> None:
        self.memo = {}
        if isinstance(op, tensor.DimOp):  # read on the host (a loop bound): a number or a size parameter's
            self.buffers[op.result] = host_index(self, known_size(self, op.result))
        elif is_host_op(op):  # control flow and scalars (opc/lowering/control_flow_lowering.py)
            lower_host_op(self, op)
        elif (symbol := external_symbol(op)) is not None:
            self.lower_external(op, symbol)
        elif isinstance(op, opc.TransposeOp) and op in self.schedule.views:  # views: transposes
            nn.lower_strided_view(self, op)
        elif isinstance(op, tensor.ExtractSliceOp) and op in self.schedule.views:  # and contiguous slices
            lower_slice_view(self, op)
        elif isinstance(op, arith.ConstantOp):
            if is_splat_constant(op):  # every use inlined it; a returned splat fills its output
                self.lower_pointwise(op.result)
            else:
                self.lower_constant(op)
        elif isinstance(op, INLINABLE):
            self.lower_pointwise(op.results[0])
        elif isinstance(op, opc.ReduceOp):
            self.lower_reduce(op)
        elif isinstance(op, opc.MatmulOp):
            self.lower_matmul(op)
        elif isinstance(op, opc.FusedGemmEpilogueOp):
            self.lower_fused_gemm(op)
        elif isinstance(op, opc.FusedGemmEpilogueGradOp):
            self.lower_fused_gemm_grad(op)
        elif isinstance(op, opc.ReshapeOp):
            self.lower_reshape(op)
        elif isinstance(op, tensor.InsertSliceOp):
            lower_insert_slice(self, op)
        elif type(op) in nn.LOWERINGS:
            nn.LOWERINGS[type(op)](self, op)
        else:
            raise UnsupportedError(f"no lowering to loops for '{op.name}'")


def is_size_op(op: Operation) -> bool:
    """An op computing a size (tensor.dim, index arithmetic): the size analysis already knows
    its value as a polynomial of the size parameters, which the nests read where they need it."""
    return bool(op.results) and all(isinstance(r.type, IndexType) for r in op.results)


def feeds_host(op: Operation) -> bool:
    """Whether an index op is read on the host (a loop bound, a condition, an induction variable's
    arithmetic, a slice's offset): then it is lowered as scalar code, not left to the size analysis."""
    return any((is_host_op(u.operation) and (not is_size_op(u.operation) or feeds_host(u.operation)))
               or isinstance(u.operation, SLICE_OPS) for r in op.results for u in r.uses)


def feeding(ops: Sequence[Operation | Block]) -> set[Operation]:
    """ops and the ops of their block whose results they read, transitively."""
    seen: set[Operation] = set()
    todo = [op for op in ops if isinstance(op, Operation)]
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        todo += [v.owner for v in op.operands if isinstance(v.owner, Operation)
                 and v.owner.parent_block() is op.parent_block()]
    return seen


def drop_size_operands(fn: func.FuncOp, sizes: FunctionSizes) -> None:
    """The ops' `index` size operands go once the size analysis has read them: the lowering reads
    every size from the analysis, and its nests walk tensor operands only. A size read from a
    tensor's values stays computed (the lowering defines its size there)."""
    for op in fn.walk():
        if isinstance(op, (opc.FullOp, opc.IotaOp, opc.BroadcastToOp, opc.ReshapeOp)) and op.sizes:
            op.operands = [o for o in op.operands if not isinstance(o.type, IndexType)]
    kept = feeding([v.owner for v in sizes.value_sizes().values()])
    for op in reversed(list(fn.body.block.ops)):  # the size ops, now unused: tensor.dim, index arithmetic
        if is_size_op(op) and not any(r.uses for r in op.results) and op not in kept:
            op.detach()
            op.erase()


OWN_LOWERINGS = (opc.ReduceOp, opc.MatmulOp, opc.FusedGemmEpilogueOp, opc.FusedGemmEpilogueGradOp, opc.ReshapeOp)
"""The ops `lower_op` lowers by a method of its own (besides INLINABLE and nn.LOWERINGS)."""


def lowers(op: type[Operation]) -> bool:
    """Whether `lower_op` has a lowering for ops of this class (tests/ops/test_op_checklist.py asks):
    an elementwise op through its scalar rule, the others through their own method or nn.LOWERINGS.
    The CUDA backend lowers through the same pass."""
    if issubclass(op, ELEMENTWISE):
        return has_scalar_rule(op)
    return issubclass(op, (*INLINABLE, *OWN_LOWERINGS)) or op in nn.LOWERINGS


@dataclass(frozen=True)
class LowerToLoopsPass(ModulePass):
    """Every tensor func.func becomes a buffer function of loop nests.
    `target=cuda` keeps one accumulator per output (a warp each on the GPU) and
    recomputes instead of keeping row buffers (the threads of a block share a row)."""

    name = "opc-lower-to-loops"
    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        constants: list[memref.GlobalOp] = []
        control = ControlState(outline_control_flow(op, self.target), op)  # region bodies: functions of their own
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                unwrap_kernels(fn)  # scheduled input (opc-schedule): the lowering re-plans the same kernels
                cpu = self.target != "cuda"
                sizes = analyze(fn) if has_dynamic_shapes(fn) else None
                if sizes is not None:
                    drop_size_operands(fn, sizes)
                table = dict(sizes.shapes) if sizes is not None else {}
                with symbolic_shapes(table) if sizes is not None else nullcontext():
                    lowering = FunctionLowering(fn, constants, memory_order_reductions=cpu,
                                                row_buffer_bytes=ROW_BUFFER_BYTES if cpu else 0, gemm_epilogues=cpu,
                                                strided_views=cpu, sizes=sizes, symbolic=table, cpu=cpu)
                    lowering.control = control
                    new = lowering.run()
                if is_body(fn):
                    new.attributes[BODY_ATTR] = fn.attributes[BODY_ATTR]
                if IN_PLACE_ATTR in fn.attributes:  # (the C prototype: those buffers may alias)
                    new.attributes[IN_PLACE_ATTR] = fn.attributes[IN_PLACE_ATTR]
                op.body.block.insert_op_before(new, fn)
                fn.detach()
                fn.erase(safe_erase=False)
        first = op.body.block.first_op
        assert first is not None  # the module's functions
        for g in constants:
            op.body.block.insert_op_before(g, first)
