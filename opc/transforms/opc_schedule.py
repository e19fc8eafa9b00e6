"""opc-schedule: group the tensor ops of each function into kernels.

A kernel is what runs as one pass over memory: one loop nest (the C emitter
makes each its own function), one row kernel, or one library call. The
planner works in two sweeps over the block, both iterative (worklists, no
recursion, so models of any length plan):

1. Nests (backward sweep, consumers first). Every op that must write memory
   (a reduction, a GEMM, a runtime kernel, a returned value, ...) roots a
   nest; an elementwise op or index map joins its consumers' nest when all of
   them are in one nest and each reads it once per element. Fan-out inside a
   nest is fine: the lowering evaluates a value once per element however many
   ops of the nest read it.

2. Row kernels (forward, from each reduction over the last axis; CPU only).
   The reduction is joined by the elementwise ops that read its result over
   the same rows (through the broadcast of its keepdim result), by further
   last-axis reductions of those (up to MAX_ROW_REDUCTIONS), by the row-wise
   ops on the per-row results, and by the elementwise producers whose every
   consumer joined. The lowering runs such a kernel as one parallel loop over
   rows, each row making one pass per reduction plus one while it is in
   cache; a full-size value that a later pass needs is kept in a row buffer
   (or recomputed) instead of a full-size temporary. Softmax, layer norm and
   log_softmax composed from primitives, and the normalizations of their
   backward, are row kernels.

3. GEMM epilogues (CPU only). A GEMM whose result (through reshape views)
   feeds an elementwise nest that is flat -- every value and operand has the
   GEMM's element count, or is a splat constant or a [n] vector read along the
   rows (a bias): no other broadcast, no transpose --
   takes that nest in as its epilogue: the erf GELU after fc1's matmul + bias,
   a residual add after fc2, the GELU grad chain on fc2's dx in the backward.
   Convs do the same over their [n * c, spatial] output (BatchNorm's [c, 1, 1]
   operands per row), fused_conv_epilogue ones too where nothing reads the
   reserve: a folded BatchNorm's conv + bias, then its Clip or residual add. The GEMM runtime
   runs it on each finished block of the output while the block is in cache
   (runtime/opc_gemm.h), instead of a pass of its own over memory. The kernel runs where the nest's root is, so
   whatever else reads the GEMM's result must come after that.

4. Strided views (CPU only). A transpose that keeps the last axis last and
   whose result only opc.attention / opc.attention_grad read as q, k, v, out
   or dout is a view of its operand: the attention kernel reads the operand
   through strides (per batch dim and per row; features contiguous). A
   transpose of attention's out (or of the grad's dq, dk, dv) that is the
   result's only reader besides attention ops is one too: the kernel writes
   the transposed buffer through strides. So the heads' split of q, k and v
   after their projections and the merge before the output projection cost
   no pass of their own (`views`: transpose -> "operand" or "result").

What stays its own kernel: GEMMs (with their fused epilogue), reshapes
(views), strided views, dense constants, runtime and device kernels, and reductions whose
consumers read them over another iteration space (a column sum walks its
input in memory order: whole rows accumulate at once).

Each kernel records `kind` and `reason`: why it ends where it does.
`opc opt -p opc-schedule` shows the schedule as `opc_sched.kernel` regions;
`opc explain --kernels` lists it; opc-lower-to-loops plans the same way
(and unwraps scheduled input first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf, tensor
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import SymbolTable

from opc.dialects import opc, slices
from opc.dialects.control import CONTROL_OPS, ancestor_in, in_place_carried, is_host_op
from opc.dialects.kinds import (
    ELEMENTWISE,
    INLINABLE,
    PLACEMENTS,
    POINTWISE_CONSUMERS,
    REINDEXING_MAPS,
    element_of,
    is_splat_constant,
    numel,
    reads_once,
    shape_of,
)
from opc.dialects.opc_sched import KernelOp, YieldOp
from opc.targets.device_kernels import external_symbol
from opc.transforms.opc_outline_control_flow import in_place_pairs

MAX_ROW_REDUCTIONS = 8  # passes over a row a row kernel may make before it is split
MAX_ROW_LENGTH = 1 << 16  # a row longer than this is reduced by the plain nests
GEMMS = (opc.MatmulOp, opc.FusedGemmEpilogueOp, opc.FusedGemmEpilogueGradOp)
TERMINATORS = (func.ReturnOp, scf.YieldOp, scf.ConditionOp)  # a function's or a control-flow body's end


@dataclass(eq=False)
class RowKernel:
    """Ops run as one row kernel over `outer` rows of `length` elements."""

    ops: list[Operation]  # block order
    outer: tuple[int, ...]
    length: int


@dataclass(eq=False)
class Kernel:
    kind: str
    ops: list[Operation]  # block order
    reason: str


@dataclass(eq=False)
class GemmEpilogue:
    """A GEMM that runs flat elementwise nests (rooted at `roots`) on its output blocks."""

    gemm: Operation
    views: list[Operation]  # the reshapes from the GEMM's result to what the nest reads, in order
    roots: list[Operation]  # the nests' roots, in block order (their other ops are inlined into them)
    in_place: bool  # one nest and nothing else reads the GEMM's result: it is written into the root's buffer

    @property
    def root(self) -> Operation:
        """Where the kernel runs: the last nest's root."""
        return self.roots[-1]


@dataclass
class Schedule:
    inlined: set[Operation] = field(default_factory=set)
    rows: list[RowKernel] = field(default_factory=list)
    row_of: dict[Operation, RowKernel] = field(default_factory=dict)
    kernels: list[Kernel] = field(default_factory=list)
    epilogue_of: dict[Operation, GemmEpilogue] = field(default_factory=dict)  # the GEMM, views and root
    # transpose -> "operand" / "result" (sweep 4); extract_slice -> "slice" (plan_slice_views)
    views: dict[Operation, str] = field(default_factory=dict)


def is_constant(op: Operation) -> bool:
    return isinstance(op, opc.FullOp) or is_splat_constant(op)


def pointwise(user: Operation) -> bool:
    """A consumer that evaluates its operands point-wise (a device's kernel reads buffers)."""
    return isinstance(user, POINTWISE_CONSUMERS) and external_symbol(user) is None


def evaluated_once(v: SSAValue, user: Operation) -> bool:
    """Inlining must not recompute a value once per broadcast copy."""
    if isinstance(user, (opc.ReduceOp, opc.TransposeOp)):
        return True
    if isinstance(user, (*REINDEXING_MAPS, *PLACEMENTS)):
        return reads_once(v, user)
    return numel(shape_of(v)) == numel(shape_of(user.results[0]))


def users_of(op: Operation) -> list[Operation]:
    """The ops of op's block that read its results (a read inside a control-flow body is its op's)."""
    return list(dict.fromkeys(top_user(u.operation, op) for r in op.results for u in r.uses))


def value_users(v: SSAValue) -> list[Operation]:
    return list(dict.fromkeys(top_user(u.operation, v.owner) for u in v.uses))


def top_user(user: Operation, producer: Operation | Block) -> Operation:
    """`user`, or the op around it in the producer's block (an scf body reading a value from outside)."""
    block = producer if isinstance(producer, Block) else producer.parent_block()
    return (ancestor_in(user, block) or user) if block is not None else user


# ---------------------------------------------------------------------------
# Sweep 1: nests
# ---------------------------------------------------------------------------


def plan_nests(ops: list[Operation], returned: set[SSAValue],
               views: dict[Operation, str] | None = None) -> tuple[set[Operation], dict[Operation, Operation]]:
    """(ops inlined into a consumer's nest, the nest root of every op). A strided view reads its
    operand's buffer: nothing is inlined into it."""
    views = views or {}
    inlined: set[Operation] = set()
    root: dict[Operation, Operation] = {}
    for op in reversed(ops):
        root[op] = op
        if not (isinstance(op, INLINABLE) or is_splat_constant(op)) or len(op.results) != 1:
            continue
        v = op.results[0]
        if v in returned or external_symbol(op) is not None:
            continue
        users = users_of(op)
        if is_constant(op) and fills_in_place(v):
            inlined.add(op)  # written straight into the loop's one buffer (control_flow_lowering.rotation)
            continue
        if any(is_host_op(u) for u in users):
            continue  # read on the host (a condition, a body's input): materialized
        if is_constant(op):
            if users and all(pointwise(u) for u in users):
                inlined.add(op)  # free to recompute anywhere
        elif len(users) == 1 and pointwise(users[0]) and users[0] not in views and evaluated_once(v, users[0]):
            inlined.add(op)
            root[op] = root[users[0]]
        elif len(users) > 1 and fans_out_in_one_nest(v, users, root):
            inlined.add(op)
            root[op] = root[users[0]]
    return inlined, root


def in_place_slots(loop: scf.ForOp) -> set[int]:
    """The carried values loop's body updates in place: in_place_carried of the body, or, once
    opc-outline-control-flow made the body a call, what its function's IN_PLACE_ATTR says."""
    body = loop.body.block
    term = body.last_op
    call = term.operands[0].owner if isinstance(term, scf.YieldOp) and term.operands else None
    if term is not None and isinstance(call, func.CallOp) and list(term.operands) == list(call.res):
        callee = SymbolTable.lookup_symbol(loop, call.callee)
        return {k for _, k in in_place_pairs(callee)} if callee is not None else set()
    return set(in_place_carried(body, reads_slot=True))


def fills_in_place(v: SSAValue) -> bool:
    """Every use of v is an initial value of an scf.for that its body updates in place (one buffer
    all along: a scan's or an RNN's stacked outputs): each loop's buffer can start as v itself, with
    no buffer of v's own copied into it."""
    def in_place(use) -> bool:  # noqa: ANN001  (an xDSL Use)
        loop = use.operation
        if not isinstance(loop, scf.ForOp):
            return False
        first = len(loop.operands) - len(loop.iter_args)
        return use.index >= first and use.index - first in in_place_slots(loop)

    uses = list(v.uses)
    return bool(uses) and all(in_place(u) for u in uses)


def fans_out_in_one_nest(v: SSAValue, users: list[Operation], root: dict[Operation, Operation]) -> bool:
    """v's consumers all sit in one nest and read v at their own index (elementwise of
    v's shape, or a reduction of v): one evaluation per element serves them all."""
    if len({root[u] for u in users}) != 1:
        return False
    for u in users:
        if external_symbol(u) is not None:
            return False
        if isinstance(u, opc.ReduceOp):
            continue
        if not isinstance(u, ELEMENTWISE) or isinstance(u, opc.CastGradOp) or shape_of(u.results[0]) != shape_of(v):
            return False
    return True


# ---------------------------------------------------------------------------
# Sweep 2: row kernels
# ---------------------------------------------------------------------------


def row_reduction(op: Operation) -> tuple[tuple[int, ...], int] | None:
    """(outer shape, row length) of a float reduction over the last axis of a rank >= 2 input."""
    if not isinstance(op, opc.ReduceOp) or external_symbol(op) is not None:
        return None
    shape = shape_of(op.x)
    if len(shape) < 2 or op.axes_list() != (len(shape) - 1,) or not opc.is_float(element_of(op.x)):
        return None
    if not isinstance(shape[-1], int) or not 2 <= shape[-1] <= MAX_ROW_LENGTH:  # a run-time row: its own nest
        return None
    return shape[:-1], shape[-1]


def grow_row_kernel(seed: Operation, taken: dict[Operation, RowKernel], position: dict[Operation, int],
                    returned: set[SSAValue], order: dict[Operation, int]) -> RowKernel | None:
    """The row kernel grown from a row reduction (position: the block's kernel ops; order: every op
    of the block, host ops too, in block order)."""
    seed_row = row_reduction(seed)
    assert seed_row is not None  # the caller grows from a row reduction
    outer, length = seed_row
    full = (*outer, length)
    per_row = {(*outer, 1), tuple(outer)}

    def joins(u: Operation, members: set[Operation], reductions: int) -> bool:
        if u in taken or u in members or u not in position or external_symbol(u) is not None or len(u.results) != 1:
            return False
        if not isinstance(u.results[0].type, TensorType):  # a run-time size (tensor.dim, index arithmetic)
            return False
        if isinstance(u, opc.ReduceOp) and row_reduction(u) is not None:
            return shape_of(u.x) == full and reductions < MAX_ROW_REDUCTIONS
        shape = shape_of(u.results[0])
        if isinstance(u, opc.ReshapeOp):  # [rows] <-> [rows, 1]: the same per-row scalar
            return shape in per_row and shape_of(u.x) in per_row and not read_across_rows(u, shape)
        if not isinstance(u, (*ELEMENTWISE, opc.BroadcastToOp)) or isinstance(u, opc.CastGradOp):
            return False
        # A [rows] value (no kept dim) read by an op over the full rows broadcasts along the trailing dims,
        # not once per row: it must not be a member then (outer [2, 2] of [2, 2, 2] read as [j, k])
        if shape == full:
            return not any(shape_of(x) == tuple(outer) and x.owner in members for x in u.operands)
        if shape == tuple(outer):
            return not read_across_rows(u, shape)
        return shape in per_row

    def read_across_rows(u: Operation, shape: tuple) -> bool:
        """A [rows] value that an op over the full rows reads broadcast along its trailing dims
        (a batch norm's per-channel [C] vector where the rows are C long too)."""
        return shape == tuple(outer) and any(shape_of(w.results[0]) == full for w in users_of(u) if w in members)

    members: set[Operation] = {seed}
    reductions = 1
    todo = [seed]
    while todo:
        m = todo.pop()
        for u in users_of(m):  # forward: consumers over the same rows
            if joins(u, members, reductions):
                members.add(u)
                reductions += isinstance(u, opc.ReduceOp)
                todo.append(u)
        for v in m.operands:  # backward: producers over the same rows all of whose consumers joined
            p = v.owner
            if (isinstance(p, Operation) and not is_constant(p) and joins(p, members, reductions)
                    and all(u in members for u in users_of(p))):
                members.add(p)
                reductions += isinstance(p, opc.ReduceOp)
                todo.append(p)
    ops = sorted(members, key=position.__getitem__)
    while True:  # the kernel runs where its last op is: nobody outside may read it earlier
        last = order[ops[-1]]
        early = [order[u] for o in ops for u in users_of(o) if u not in members and order.get(u, last + 1) < last]
        if not early:
            break
        ops = [o for o in ops if order[o] < min(early)]  # the rest runs after that reader
        members = set(ops)
        if not ops:
            return None
    if not any(isinstance(o, ELEMENTWISE) and reads_a_row_result(o, members) for o in ops):
        return None  # nothing to fuse: the plain reduction does
    return RowKernel(ops, tuple(outer), length)


def reads_a_row_result(op: Operation, members: set[Operation]) -> bool:
    """Whether op consumes, directly or through a member, a reduction of the kernel."""
    todo, seen = [op], set()
    while todo:
        o = todo.pop()
        for v in o.operands:
            p = v.owner
            if isinstance(p, Operation) and p in members and p not in seen:
                if isinstance(p, opc.ReduceOp):
                    return True
                seen.add(p)
                todo.append(p)
    return False


# ---------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------


def plan(fn: func.FuncOp | Block, row_kernels: bool = True, epilogues: bool = True, views: bool = True) -> Schedule:
    """The kernels of one (unscheduled) tensor function, or of one control-flow body. row_kernels=False:
    no row kernels (every reduction its own nest); both backends plan with them.
    epilogues=False: no GEMM epilogues (the CUDA backend's GEMMs take none).
    views=False: no strided views (the CUDA backend's attention reads row-major operands).
    Control flow and scalar ops run on the host, in no kernel (opc/dialects/control.py)."""
    block = fn.body.block if isinstance(fn, func.FuncOp) else fn
    ret = block.last_op
    assert ret is not None  # a verified func ends in its return, a body in its yield
    ops = [o for o in block.ops if o is not ret and not is_host_op(o)]
    returned = set(ret.operands)
    position = {o: i for i, o in enumerate(ops)}
    # every op of the block, host ops too (a stack push, a loop reading a value): a kernel runs where
    # its last op is, so no reader of its members, host op or not, may come before that
    order = {o: i for i, o in enumerate(block.ops)}
    operand_views = plan_operand_views(ops, returned) if views else {}
    inlined, root = plan_nests(ops, returned, operand_views)
    sched = Schedule(inlined, views=operand_views)
    if views:
        sched.views.update(plan_result_views(ops, inlined, returned, operand_views))
        sched.views.update(plan_slice_views(ops, inlined, returned, block))
    if row_kernels:
        for op in ops:
            if op not in sched.row_of and row_reduction(op) is not None:
                rk = grow_row_kernel(op, sched.row_of, position, returned, order)
                if rk is not None:
                    sched.rows.append(rk)
                    sched.row_of.update((o, rk) for o in rk.ops)
    # Members run in their row kernel; an op outside that reads one reads its buffer.
    for o in list(sched.inlined):
        if o in sched.row_of or any(isinstance(v.owner, Operation) and v.owner in sched.row_of for v in o.operands):
            sched.inlined.discard(o)
    if sched.rows:
        root = resolve_roots(ops, sched.inlined)
    if epilogues:
        plan_epilogues(ops, sched, root, position, order)
    sched.kernels = group_kernels(ops, sched, root, returned)
    return sched


# ---------------------------------------------------------------------------
# Sweep 4: strided views (planned first: a view's operand must be in memory)
# ---------------------------------------------------------------------------

STRIDED_OPERANDS = {opc.AttentionOp: (0, 1, 2), opc.AttentionGradOp: (0, 1, 2, 3, 5)}  # q, k, v (out, dout)
STRIDED_RESULTS = {opc.AttentionOp: (0,), opc.AttentionGradOp: (0, 1, 2)}  # out; dq, dk, dv


def read_through_strides(use) -> bool:  # noqa: ANN001  (an xDSL Use)
    """The use reads its operand through per-row and per-batch-dim strides (runtime/opc_nn_attention.h)."""
    u = use.operation
    return use.index in STRIDED_OPERANDS.get(type(u), ()) and external_symbol(u) is None


def keeps_features(t: Operation) -> bool:
    """A transpose of the batch and row dims only: the features stay contiguous."""
    if not isinstance(t, opc.TransposeOp) or external_symbol(t) is not None:
        return False
    perm = t.perm_list()
    static = opc.DYNAMIC not in t.x.type.get_shape()  # type: ignore[attr-defined]  (the view's strides are numbers)
    return static and len(perm) >= 2 and perm[-1] == len(perm) - 1


def plan_operand_views(ops: list[Operation], returned: set[SSAValue]) -> dict[Operation, str]:
    """The transposes only attention reads, through strides: a view of their operand."""
    found = {}
    for t in ops:
        if (keeps_features(t) and t.results[0] not in returned and t.results[0].uses
                and all(read_through_strides(use) for use in t.results[0].uses)):
            found[t] = "operand"
    return found


def plan_result_views(ops: list[Operation], inlined: set[Operation], returned: set[SSAValue],
                      operand_views: dict[Operation, str]) -> dict[Operation, str]:
    """The transposes of an attention result that nothing else reads but attention ops through
    strides: the kernel writes the transpose's buffer. Not one inlined into its readers' nest
    (then it costs no pass anyway, and the nest reads the result row-major)."""
    found = {}
    for a in ops:
        if type(a) not in STRIDED_RESULTS or external_symbol(a) is not None:
            continue
        for i in STRIDED_RESULTS[type(a)]:
            r = a.results[i]
            if r in returned:
                continue
            others = [use for use in r.uses if not read_through_strides(use)]
            if len(others) != 1:
                continue
            t = others[0].operation
            if keeps_features(t) and t not in inlined and t not in operand_views and t.results[0].uses:
                found[t] = "result"
    return found


def contiguous_slice(op: tensor.ExtractSliceOp) -> bool:
    """The slice is one contiguous run of its static source: unit strides, static sizes, and past
    its first dim of more than one element, every dim whole."""
    p = slices.params(op)
    dims = op.source.type.get_shape()  # type: ignore[attr-defined]
    if opc.DYNAMIC in dims or any(st != 1 for st in p.strides) or not all(isinstance(n, int) for n in p.sizes):
        return False
    first = next((d for d, n in enumerate(p.sizes) if n != 1), len(dims))
    return all(n == dims[d] for d, n in enumerate(p.sizes) if d > first)


def plan_slice_views(ops: list[Operation], inlined: set[Operation], returned: set[SSAValue],
                     block: Block) -> dict[Operation, str]:
    """The extract_slices read as a pointer into their source, where one would be copied into a buffer
    of its own (no nest inlines it: a GEMM's bias, an nn op's operand): a contiguous slice of a value
    from outside the block (an argument, or a loop body's loop-invariant value: an argument once the
    body is outlined) that nothing writes in place (no insert_slice into it). An LSTM step's row of
    the input projection: a 2 KB copy per step, 2-4% of the step."""
    found = {}
    for op in ops:
        if (isinstance(op, tensor.ExtractSliceOp) and op not in inlined and op.result not in returned
                and not (isinstance(op.source.owner, Operation) and op.source.owner.parent_block() is block)
                and contiguous_slice(op)
                and not any(isinstance(u.operation, tensor.InsertSliceOp) for u in op.source.uses)):
            found[op] = "slice"
    return found


# ---------------------------------------------------------------------------
# Sweep 3: GEMM epilogues
# ---------------------------------------------------------------------------

EPILOGUE_GEMMS = (opc.MatmulOp, opc.FusedGemmEpilogueOp, opc.FusedGemmEpilogueGradOp)  # results[0]: the
# GEMM's output (fused_gemm_epilogue_grad's dx: its first GEMM, whose epilogue a GELU grad chain can be)
EPILOGUE_CONVS = (opc.ConvOp, opc.FusedConvEpilogueOp)  # the nest runs after the bias and activation of
# the fused one (a folded BatchNorm's conv, then its Clip or residual add), whose reserve nothing reads


def takes_epilogue(g: Operation) -> bool:
    """g is a GEMM or conv whose runtime kernel can run a flat nest on each block it finishes."""
    if not isinstance(g, (*EPILOGUE_GEMMS, *EPILOGUE_CONVS)) or external_symbol(g) is not None:
        return False
    if isinstance(g, opc.FusedConvEpilogueOp) and g.reserve_space is not None and g.reserve_space.uses:
        return False  # the kernel with an epilogue writes no reserve
    if isinstance(g, opc.FusedConvEpilogueOp) and g.out_channels_last is not None:
        return False  # the epilogue walks the output as [n * c, spatial] rows
    return opc.is_float(element_of(g.results[0]))


def plan_epilogues(ops: list[Operation], sched: Schedule, root: dict[Operation, Operation],
                   position: dict[Operation, int], order: dict[Operation, int]) -> None:
    """Each GEMM whose result feeds a flat elementwise nest takes it in (root updated: the GEMM
    and its views join the nest's kernel)."""
    members: dict[Operation, list[Operation]] = {}
    for op in ops:
        if not (is_constant(op) and op in sched.inlined):
            members.setdefault(root[op], []).append(op)
    for g in ops:
        if not takes_epilogue(g):
            continue
        views, v = [], g.results[0]
        while (len(readers := value_users(v)) == 1 and isinstance(readers[0], opc.ReshapeOp)
               and not isinstance(g, EPILOGUE_CONVS)):  # a conv's nest reads its [n, c, ..] result as such
            views.append(readers[0])
            v = readers[0].result
        ep = epilogue_nest(g, views, v, sched, root, members, position, order)
        if ep is not None:
            for o in (g, *views, *ep.roots, *(m for r in ep.roots for m in members[r])):
                if o in ep.roots or o is g or o in views:
                    sched.epilogue_of[o] = ep
                root[o] = ep.root


def column_vector(v: SSAValue, n: int) -> bool:
    """v is [.., 1, n]: one value per column of the GEMM's output (a bias), read along its rows."""
    shape = shape_of(v)
    return len(shape) >= 1 and shape[-1] == n and numel(shape) == n


def channel_vector(v: SSAValue, out: tuple[int, ...]) -> bool:
    """v broadcasts to a conv's [n, c, spatial..] output as one value per channel (BatchNorm's
    [c, 1, 1]): read at row % c of the output seen as [n * c, spatial]."""
    shape = (1,) * (len(out) - len(shape_of(v))) + tuple(shape_of(v))
    return len(shape) == len(out) >= 3 and all(d == (out[1] if i == 1 else 1) for i, d in enumerate(shape))


def depends_on(g: Operation, ops: list[Operation], position: dict[Operation, int]) -> set[Operation]:
    """The ops that read g's results, directly or not (ops in block order)."""
    after = {g}
    for o in ops[position[g] + 1:]:
        if any(isinstance(a.owner, Operation) and a.owner in after for a in o.operands):
            after.add(o)
    return after


def epilogue_nest(g: Operation, views: list[Operation], v: SSAValue, sched: Schedule,
                  root: dict[Operation, Operation], members: dict[Operation, list[Operation]],
                  position: dict[Operation, int], order: dict[Operation, int]) -> GemmEpilogue | None:
    """The epilogue of GEMM g whose result, through `views`, is v: the flat elementwise nests that
    read v, and those that read their roots in turn (training keeps a GELU's intermediate values
    for the backward: three nests), if whatever else reads g's result, its views or the nests'
    roots runs after the last of them."""
    n, cols = numel(shape_of(g.results[0])), shape_of(g.results[0])[-1]
    conv = isinstance(g, EPILOGUE_CONVS)  # operands per channel, not per column; values computed after it
    later = depends_on(g, list(position), position) if conv else set()  # that do not read it are fine

    def nests_reading(w: SSAValue) -> set[Operation]:
        return {root[u] for u in value_users(w) if u in root and (u in sched.inlined or root[u] is u)}

    def flat(r: Operation) -> bool:
        if (r in sched.row_of or r in sched.epilogue_of or not isinstance(r, ELEMENTWISE) or len(r.results) != 1
                or isinstance(r, opc.CastGradOp) or external_symbol(r) is not None):
            return False
        for o in members[r]:
            if not isinstance(o, ELEMENTWISE) or external_symbol(o) is not None or numel(shape_of(o.results[0])) != n:
                return False
            if conv and shape_of(o.results[0]) != shape_of(g.results[0]):
                return False
            for a in o.operands:
                p = a.owner
                if p is g and a is not g.results[0]:
                    return False  # another result of the GEMM (fused_gemm_epilogue_grad's dy, the forward's
                    # reserve Z): not written yet while the epilogue runs on the first GEMM's blocks
                if isinstance(p, Operation) and is_constant(p) and p in sched.inlined:
                    continue  # a splat: the same everywhere
                if conv:
                    if numel(shape_of(a)) != n and not channel_vector(a, shape_of(g.results[0])):
                        return False
                elif numel(shape_of(a)) != n and not (shape_of(r.results[0])[-1] == cols and column_vector(a, cols)):
                    return False
        return True

    def reads_only(r: Operation, roots: set[Operation]) -> bool:
        """r's nest reads v, the roots, constants, and values from before the GEMM only."""
        nest = set(members[r])
        for o in nest:
            for a in o.operands:
                p = a.owner
                if a is v or p in roots or p in nest or (isinstance(p, Operation) and is_constant(p)):
                    continue
                if not isinstance(p, Operation) or p not in position or position[p] < position[g]:
                    continue  # an argument, or computed before the GEMM
                if conv and p not in later:
                    continue  # computed after the conv but not from it (BatchNorm's rsqrt): the conv runs at the root
                return False
        return True

    def valid(roots: set[Operation]) -> GemmEpilogue | None:
        last = max(order[r] for r in roots)
        inside = {o for r in roots for o in members[r]} | set(views)
        outside = [u for o in (g, *views, *roots) for u in users_of(o) if u not in inside]
        if any(order.get(u, len(order)) <= last for u in outside):
            return None  # read before the nests run: the GEMM must run earlier
        ordered = sorted(roots, key=position.__getitem__)
        reads_g = [u for o in (g, *views) for u in value_users(o.results[0]) if u not in inside]
        in_place = len(ordered) == 1 and not reads_g and element_of(g.results[0]) == element_of(ordered[0].results[0])
        return GemmEpilogue(g, views, ordered, in_place)

    if any(isinstance(u, TERMINATORS) for w in views for u in value_users(w.results[0])):
        return None  # a returned view is copied into its output where it is lowered: before the GEMM
    def closure(first: set[Operation]) -> set[Operation]:
        roots, todo = set(first), list(first)
        while todo:  # the flat nests reading a root taken in, and nothing computed since the GEMM
            for r in nests_reading(todo.pop().results[0]):
                if r not in roots and flat(r) and reads_only(r, roots):
                    roots.add(r)
                    todo.append(r)
        return roots

    readers = {r for r in nests_reading(v) if flat(r)}
    # Tried in turn: every flat nest reading v, then those reading nothing computed since the GEMM
    # (a backward nest that reads v late stays outside); each with the nests reading their roots.
    for first in (readers, {r for r in readers if reads_only(r, set())}):
        for roots in (closure(first), first) if first else ():
            if (ep := valid(roots)) is not None:
                return ep
    return None


def resolve_roots(ops: list[Operation], inlined: set[Operation]) -> dict[Operation, Operation]:
    """The nest root of every op (after the row kernels took some ops out of nests)."""
    root: dict[Operation, Operation] = {}
    for op in reversed(ops):
        users = users_of(op)
        root[op] = root[users[0]] if op in inlined and users and not is_constant(op) else op
    return root


def group_kernels(ops: list[Operation], sched: Schedule, root: dict[Operation, Operation],
                  returned: set[SSAValue]) -> list[Kernel]:
    """The kernels in the order they run (a kernel runs where its last op is)."""
    members: dict[Operation | RowKernel, list[Operation]] = {}
    for op in ops:
        if is_constant(op) and op in sched.inlined:
            continue  # recomputed in every kernel that reads it
        r = root.get(op, op)
        key = sched.row_of.get(r, r)
        members.setdefault(key, []).append(op)
    kernels = []
    for key, group in members.items():
        if isinstance(key, RowKernel):
            kind = "row"
        else:  # a conv with its epilogue: library
            kind = (kind_of(sched.epilogue_of[key].gemm) if key in sched.epilogue_of
                    else "view" if key in sched.views else kind_of(key))
        kernels.append(Kernel(kind, group, boundary_reason(group, kind, returned)))
    position = {o: i for i, o in enumerate(ops)}
    kernels.sort(key=lambda k: position[k.ops[-1]])
    return kernels


def kind_of(op: Operation) -> str:
    if external_symbol(op) is not None:
        return "external"
    if isinstance(op, opc.ReduceOp):
        return "reduction"
    if isinstance(op, INLINABLE) or is_splat_constant(op):
        return "elementwise"
    if isinstance(op, GEMMS):
        return "gemm"
    if isinstance(op, opc.ReshapeOp):
        return "view"
    if isinstance(op, arith.ConstantOp):
        return "constant"
    if isinstance(op, PLACEMENTS):
        return "placement"
    return "library"


def boundary_reason(group: list[Operation], kind: str, returned: set[SSAValue]) -> str:
    """Why the kernel's results go to memory instead of into their consumers."""
    inside = set(group)
    why: list[str] = []
    if kind == "gemm":
        why.append("a GEMM runs as the library's blocked kernel (its epilogue fused)")
    elif kind == "library" and len(group) > 1 and isinstance(group[0], EPILOGUE_CONVS):
        why.append(f"{group[0].name} runs as a runtime kernel (its epilogue fused)")
    elif kind == "library":
        why.append(f"{group[-1].name} runs as a runtime kernel")
    elif kind == "external":
        why.append("the device's own kernel")
    elif kind == "placement":
        why.append(f"{group[-1].name} writes its result in place, operand by operand")
    elif kind == "view" and isinstance(group[-1], opc.TransposeOp):
        why.append("a transpose read or written by opc.attention through strides (no loop)")
    elif kind == "view" and isinstance(group[-1], tensor.ExtractSliceOp):
        why.append("a contiguous slice is read in place (no loop)")
    elif kind == "view":
        why.append("a reshape is a view (no loop)")
    elif kind == "reduction" and isinstance(group[-1], opc.ReduceOp):
        r = group[-1]
        if len(shape_of(r.x)) - 1 not in r.axes_list():
            why.append("a reduction over outer axes walks its input in memory order")
    outputs = [r for o in group for r in o.results if r in returned or any(u.operation not in inside for u in r.uses)]
    for v in outputs:
        name = f"%{v.name_hint}" if v.name_hint else v.op.name
        if v in returned:
            why.append(f"{name} is returned")
        consumers = [u.operation for u in v.uses
                     if u.operation not in inside and not isinstance(u.operation, TERMINATORS)]
        for u in dict.fromkeys(consumers):
            if kind in ("elementwise", "row", "reduction"):
                why.append(f"{name} feeds {u.name}: {consumer_reason(v, u, len(set(consumers)))}")
            else:  # the kernel writes memory whatever reads it
                why.append(f"{name} feeds {u.name}")
    return "; ".join(dict.fromkeys(why)) or "no consumers"


def consumer_reason(v: SSAValue, user: Operation, n_consumers: int) -> str:
    if external_symbol(user) is not None:
        return "a device kernel reads buffers"
    if isinstance(user, GEMMS):
        return "a GEMM reads its operands from memory"
    if not pointwise(user):
        return "it reads its operands from memory"
    if not evaluated_once(v, user):
        return "it reads each element several times (broadcast)"
    if n_consumers > 1:
        return f"{n_consumers} consumers in different kernels"
    return "another iteration space"


# ---------------------------------------------------------------------------
# The pass: kernels as opc_sched.kernel regions
# ---------------------------------------------------------------------------


def wrap_kernels(fn: func.FuncOp | Block, sched: Schedule) -> None:
    """Each kernel's ops move into an opc_sched.kernel placed where its last op was."""
    block = fn.body.block if isinstance(fn, func.FuncOp) else fn
    for k in sched.kernels:
        inside = set(k.ops)
        outputs = [r for o in k.ops for r in o.results if any(u.operation not in inside for u in r.uses)]
        last = k.ops[-1]
        body = Block()
        kernel = KernelOp(k.kind, k.reason, [v.type for v in outputs], Region(body))
        block.insert_op_after(kernel, last)
        for o in k.ops:
            o.detach()
            body.add_op(o)
        body.add_op(YieldOp(outputs))
        for v, r in zip(outputs, kernel.res):
            r.name_hint = v.name_hint
            v.replace_uses_with_if(r, lambda use: use.operation.parent_op() is not kernel)


def unwrap_kernels(fn: func.FuncOp) -> None:
    """Undo wrap_kernels (the lowering re-plans the same schedule from the flat ops)."""
    for kernel in [o for o in fn.walk() if isinstance(o, KernelOp)]:
        block = kernel.parent_block()
        assert block is not None
        body = kernel.body.block
        yield_op = body.last_op
        assert isinstance(yield_op, YieldOp)
        for r, v in zip(kernel.res, yield_op.values):
            r.replace_all_uses_with(v)
        yield_op.detach()
        yield_op.erase()
        for o in list(body.ops):
            o.detach()
            block.insert_op_before(o, kernel)
        kernel.detach()
        kernel.erase()


def tensor_functions(module: ModuleOp) -> list[func.FuncOp]:
    return [f for f in module.ops if isinstance(f, func.FuncOp) and not f.is_declaration]


@dataclass(frozen=True)
class SchedulePass(ModulePass):
    """Wrap each kernel of every function in an `opc_sched.kernel` (the same plan for every target,
    but for GEMM epilogues: CUDA's GEMMs take none)."""

    name = "opc-schedule"
    target: str = "cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in tensor_functions(op):
            if any(isinstance(o, KernelOp) for o in fn.body.block.ops):
                continue  # already scheduled
            cpu = self.target != "cuda"
            for block in scheduled_blocks(fn):  # the function's, then each control-flow body's
                wrap_kernels(block, plan(block, epilogues=cpu, views=cpu))  # CUDA's GEMMs take no epilogue


def scheduled_blocks(fn: func.FuncOp) -> list[Block]:
    """The function's block and the blocks of its control-flow bodies (each scheduled on its own)."""
    return [fn.body.block, *(b for o in fn.walk() if isinstance(o, CONTROL_OPS) for r in o.regions for b in r.blocks)]


def describe(module: ModuleOp, row_kernels: bool = True, epilogues: bool = True) -> str:
    """`opc explain --kernels`: every function's kernels, their ops and why each ends
    (epilogues=False: the CUDA backend's, whose GEMMs take no epilogue nor strided views)."""
    lines = []
    for fn in tensor_functions(module):
        for block in scheduled_blocks(fn):
            sched = plan(block, row_kernels, epilogues, views=epilogues)
            around = block.parent_op()
            where = "" if around is None or block is fn.body.block else \
                f" body of {around.name} (host op: its own function)"
            lines.append(f"@{fn.sym_name.data}{where}: {len(sched.kernels)} kernels")
            for i, k in enumerate(sched.kernels):
                names = ", ".join(o.name.removeprefix("opc.") for o in k.ops)
                lines.append(f"  kernel {i} ({k.kind}): {names}")
                lines.append(f"    boundary: {k.reason}")
    return "\n".join(lines) + "\n"
