"""Loops: parallel nests (OpenMP, collapsed outer loops and an omp simd innermost loop, tiled
transposes), serial loops, reductions with blocked partial sums.

A part of CEmitter (c_emitter.py), which mixes it in."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    StringAttr,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from opc.dialects.opc import int_of
from opc.lowering.c_expressions import c_type
from opc.lowering.c_memory_emission import c_product
from opc.lowering.emitter_state import EmitterState

SUM_BLOCK_BYTES = 256  # partial sums of one blocked float sum: four AVX-512 (eight AVX2) registers
SUM_FOLD_BYTES = 64  # the partials are halved down to this, then summed across lanes
PASSIVE_SCALE = 16  # runtime/opc_threads.h's OPC_PASSIVE_SCALE: the least work times this always pays
PARALLEL_MIN_WORK = 1 << 17  # scalar steps (ops x trips) below which threads cost more than they give
SIMD_MIN_TRIPS = 8  # an innermost loop shorter than this stays in the collapse (its own loop would not pay)
OUTER_MIN_TRIPS = 16  # fewer outer iterations than this: too few to share among threads, collapse all
CHUNK_MIN_WORK = 1 << 14  # scalar steps of the smallest piece a parallel nest is cut into (opc_par_chunk)
TRANSPOSE_TILE = 16  # a transpose's squares: 16 floats are a cache line


def known_index(v: SSAValue, constants: dict[SSAValue, int]) -> int | None:
    """v's value where it is an index constant, emitted (constants) or not yet (its arith.constant)."""
    if v in constants:
        return constants[v]
    owner = v.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(v.type, IndexType):
        return int_of(owner.value)
    return None


def sum_block_len(t: Attribute) -> int:
    """The iterations of a blocked float sum's block: SUM_BLOCK_BYTES of partials of type t."""
    return SUM_BLOCK_BYTES // (4 if t == f32 else 8)


def at_least(extents: Sequence[int | str], n: int) -> bool:
    """Every extent is at least n, a run-time one assumed so (it is a batch or a sequence)."""
    return all(not isinstance(e, int) or e >= n for e in extents)


def ceil_div(e: int | str, t: int) -> int | str:
    return -(-e // t) if isinstance(e, int) else f"(({e} + {t - 1}) / {t})"


class LoopEmission(EmitterState):
    def extent(self, v: SSAValue) -> int | str:
        """A loop bound: its number where it is a constant, else its C name (a run-time size)."""
        return self.constants[v] if v in self.constants else self.name(v)

    def parallel_work(self, op: scf.ParallelOp) -> int | str:
        """Scalar steps of the whole nest: its trips times the trips of the loops inside (a C
        expression where a bound is a run-time size)."""
        consts = self.constants_in(op)

        def work(block: Block) -> list[int | str]:
            total: list[int | str] = []
            for o in block.ops:
                if isinstance(o, scf.ForOp):
                    inner = c_product([consts.get(o.ub, self.name(o.ub)), *work(o.body.block)])
                    total.append(inner)
                else:
                    total.append(1)
            if all(isinstance(t, int) for t in total):
                return [sum(cast(list[int], total))]
            return ["(" + " + ".join(str(t) for t in total) + ")"]

        return c_product([*(self.extent(u) for u in op.upperBound), *work(op.body.block)])

    @staticmethod
    def constants_in(op: Operation) -> dict[SSAValue, int]:
        return {c.result: int_of(c.value) for c in op.walk()
                if isinstance(c, arith.ConstantOp) and isinstance(c.result.type, IndexType)}

    def emit_ParallelOp(self, op: scf.ParallelOp) -> None:
        """A nest of plain loops; the innermost stays a unit-stride loop of its own.

        `collapse` over every loop makes each iteration recover its indices by
        division and modulo, which keeps the nest scalar; so only the outer loops
        collapse into the threads' iterations and the innermost is an `omp simd`
        loop (its iterations are independent: the nest is an scf.parallel). A
        transpose (a load whose fastest index is the second-innermost loop) walks
        the two inner loops in TRANSPOSE_TILE squares, so reads and writes both
        stay in cache. A run-time extent counts as large for these choices; whether
        threads pay is then decided at run time (an `if` clause on the work)."""
        ivs = list(op.body.block.args)
        work = self.parallel_work(op)
        extents = [self.extent(u) for u in op.upperBound]
        unit = all(self.constants.get(v) == 0 for v in op.lowerBound) and all(
            self.constants.get(v) == 1 for v in op.step)
        flat = unit and not any(o.regions for o in op.body.block.ops)  # no inner loops: a vector body
        tiled = flat and len(ivs) >= 2 and self.transposed_load(op) and at_least(extents[-2:], TRANSPOSE_TILE + 1)
        simd = flat and at_least(extents[-1:], SIMD_MIN_TRIPS) and (
            len(ivs) == 1 or tiled or at_least([c_product(extents[:-1])], OUTER_MIN_TRIPS))
        n = len(ivs)
        # where idle threads sleep a region needs more work (opc_par_min, runtime/opc_threads.h):
        # decided at run time up to PASSIVE_SCALE times the least
        threaded = not isinstance(work, int) or work >= PARALLEL_MIN_WORK
        if threaded:
            # tiled: the outer loops and the two tile loops; simd: all but the innermost
            parallel = n if tiled else n - 1 if simd and n > 1 else n
            collapse = f" collapse({parallel})" if parallel > 1 else ""
            # pieces claimed one at a time, several per thread (runtime/opc_threads.h): on a busy
            # machine the threads that run take a descheduled thread's pieces
            trips = (c_product([*extents[:-2], ceil_div(extents[-2], TRANSPOSE_TILE),
                                ceil_div(extents[-1], TRANSPOSE_TILE)]) if tiled else c_product(extents[:parallel]))
            chunk = f"opc_par_chunk({trips}, {work}, {CHUNK_MIN_WORK})"
            kind = "simd: dynamic" if simd and n == 1 else "dynamic"
            simd_clause = " simd" if simd and n == 1 else ""
            sure = isinstance(work, int) and work >= PARALLEL_MIN_WORK * PASSIVE_SCALE
            when = "" if sure else f" if({work} >= opc_par_min({PARALLEL_MIN_WORK}))"
            self.line(f"#pragma omp parallel for{simd_clause}{collapse} schedule({kind}, {chunk}){when} "
                      "num_threads(opc_num_threads())")
        if tiled:
            self.open_tiled_loops(op, ivs, extents)
        else:
            self.open_loops(op, ivs[:-1])
            if simd and not (n == 1 and threaded):
                self.line("#pragma omp simd")
            self.open_loops(op, ivs[-1:], len(ivs) - 1)
        self.emit_block(op.body.block)
        self.close_loops(len(ivs) + (2 if tiled else 0))

    def transposed_load(self, op: scf.ParallelOp) -> bool:
        """A load in the nest whose innermost loop index strides and whose last index is the
        second-innermost loop (a transpose of the two inner axes)."""
        ivs = op.body.block.args
        for o in op.body.block.ops:
            if isinstance(o, memref.LoadOp) and o.indices:
                idx = list(o.indices)
                if ivs[-1] in idx and idx[-1] is ivs[-2]:
                    return True
        return False

    def open_tiled_loops(self, op: scf.ParallelOp, ivs: Sequence[SSAValue], extents: list[int | str]) -> None:
        """The outer loops, then the two inner ones as TRANSPOSE_TILE squares (the tile loops
        first, so they collapse with the outer ones)."""
        self.open_loops(op, ivs[:-2])
        a, b = self.name(ivs[-2]), self.name(ivs[-1])
        na, nb, t = extents[-2], extents[-1], TRANSPOSE_TILE
        self.line(f"for (int64_t {a}_t = 0; {a}_t < {na}; {a}_t += {t}) {{")
        self.indent += 1
        self.line(f"for (int64_t {b}_t = 0; {b}_t < {nb}; {b}_t += {t}) {{")
        self.indent += 1
        end_a = f"{a}_t + {t}" if isinstance(na, int) and na % t == 0 else f"({a}_t + {t} < {na} ? {a}_t + {t} : {na})"
        end_b = f"{b}_t + {t}" if isinstance(nb, int) and nb % t == 0 else f"({b}_t + {t} < {nb} ? {b}_t + {t} : {nb})"
        self.line(f"for (int64_t {a} = {a}_t; {a} < {end_a}; {a}++) {{")
        self.indent += 1
        self.line("#pragma omp simd")
        self.line(f"for (int64_t {b} = {b}_t; {b} < {end_b}; {b}++) {{")
        self.indent += 1

    def open_loops(self, op: scf.ParallelOp, ivs: Iterable[SSAValue], first: int = 0) -> None:
        """`for` headers of ivs, the loops of op from its loop number `first` on."""
        bounds = list(zip(op.lowerBound, op.upperBound, op.step))[first:]
        for iv, (lb, ub, step) in zip(ivs, bounds):
            i = self.name(iv)
            self.line(f"for (int64_t {i} = {self.name(lb)}; {i} < {self.name(ub)}; {i} += {self.name(step)}) {{")
            self.indent += 1

    def close_loops(self, n: int) -> None:
        for _ in range(n):
            self.indent -= 1
            self.line("}")

    def declare_accumulators(self, op: scf.ForOp) -> list[str]:
        """The loop's carried values as C locals holding their initial values; its block reads them."""
        accs = []
        for arg, init, res in zip(op.body.block.args[1:], op.iter_args, op.results):
            acc = self.name(res)
            self.line(f"{c_type(res.type)} {acc} = {self.name(init)};")
            self.names[arg] = acc
            accs.append(acc)
        return accs

    def emit_ForOp(self, op: scf.ForOp) -> None:
        targets = self.declare_accumulators(op)
        i = self.name(op.body.block.args[0])
        simd = op.attributes.get("opc.simd_reduction")
        clauses = [c.data for c in cast(ArrayAttr[StringAttr], simd).data] if simd is not None else []
        block = self.sum_block(op, clauses)
        if block:
            self.emit_blocked_sums(op, targets, block)
            return
        inner = self.short_row_sum(op)
        if inner is not None:
            self.emit_row_partials(op, inner, targets)
            return
        if simd is not None:  # partial accumulators per lane: the sum reassociates, max/min do not change
            self.line("#pragma omp simd " + " ".join(f"reduction({c}:{t})" for c, t in zip(clauses, targets)))
        self.line(f"for (int64_t {i} = {self.name(op.lb)}; {i} < {self.name(op.ub)}; {i} += {self.name(op.step)}) {{")
        self.indent += 1
        self.yield_targets.append(targets)
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        self.indent -= 1
        self.line("}")

    def emit_IfOp(self, op: scf.IfOp) -> None:
        """A guarded store inside a loop (nonzero's fill pass): no results, no else."""
        if op.results or op.false_region.blocks:
            raise NotImplementedError("C emitter: an scf.if in a loop with results or an else branch")
        self.line(f"if ({self.name(op.cond)}) {{")
        self.indent += 1
        self.yield_targets.append([])
        self.emit_block(op.true_region.block)
        self.yield_targets.pop()
        self.indent -= 1
        self.line("}")

    def sum_block(self, op: scf.ForOp, clauses: list[str]) -> int:
        """Partial sums per carried value for a loop of float sums (0: none).

        `omp simd reduction(+)` keeps one vector of partial sums, so a row's adds
        form one chain bound by the add latency; SUM_BLOCK_BYTES of partials (four
        AVX-512 vectors) are independent chains. Max/min keep `omp simd`: their
        NaN flag is narrower than the value, and partials of mixed widths measured
        slower than the one vector. Short loops (under two blocks) keep it too."""
        if not clauses or any(c != "+" for c in clauses) or op.results[0].type not in (f32, f64):
            return 0
        if any(r.type != op.results[0].type for r in op.results):
            return 0
        if any(o.regions for o in op.body.block.ops):
            return 0
        lb, ub, step = (self.constants.get(v) for v in (op.lb, op.ub, op.step))
        if lb != 0 or ub is None or step != 1:
            return 0
        block = sum_block_len(op.results[0].type)
        return block if ub >= 2 * block else 0

    def short_row_sum(self, op: scf.ForOp) -> scf.ForOp | None:
        """The inner loop where op is a loop over rows whose body is only a short float sum of its row
        (under two of sum_block's blocks; an image row of 16 in a batch norm's statistics), carrying
        op's one sum; else None. Each row's `omp simd reduction` ends in a sum across the vector's
        lanes, which cost more than the row's adds."""
        if len(op.results) != 1 or op.results[0].type not in (f32, f64):
            return None
        loops = [o for o in op.body.block.ops if not isinstance(o, (arith.ConstantOp, scf.YieldOp))]
        if len(loops) != 1 or not isinstance(inner := loops[0], scf.ForOp) or len(inner.results) != 1:
            return None
        simd = inner.attributes.get("opc.simd_reduction")
        if simd is None or [c.data for c in cast(ArrayAttr[StringAttr], simd).data] != ["+"]:
            return None
        yielded = op.body.block.last_op
        if not (isinstance(yielded, scf.YieldOp) and list(yielded.operands) == [inner.results[0]]
                and inner.iter_args[0] == op.body.block.args[1] and inner.results[0].type == op.results[0].type):
            return None
        if any(o.regions for o in inner.body.block.ops):
            return None
        lb, ub, step = (known_index(v, self.constants) for v in (inner.lb, inner.ub, inner.step))
        block = sum_block_len(op.results[0].type)
        return inner if lb == 0 and step == 1 and ub is not None and 4 <= ub < 2 * block else None

    def emit_row_partials(self, op: scf.ForOp, inner: scf.ForOp, targets: list[str]) -> None:
        """A sum over rows of short rows (short_row_sum) with a partial per column for all the rows:
        column k of every row adds into partial k (an omp simd loop over the row, no reduction), then
        the partials are summed across, once, into the sum's initial value. The sum reassociates,
        nothing else (as emit_blocked_sums)."""
        n, ct = known_index(inner.ub, self.constants), c_type(op.results[0].type)
        t, part, i, k = targets[0], f"{targets[0]}_p", self.name(op.body.block.args[0]), f"{targets[0]}_k"
        row = self.name(inner.results[0])
        self.names[inner.body.block.args[1]] = row
        self.line("{")
        self.indent += 1
        self.line(f"{ct} {part}[{n}];")
        self.line(f"for (int64_t {k} = 0; {k} < {n}; {k}++) {part}[{k}] = 0;")
        self.line(f"for (int64_t {i} = {self.name(op.lb)}; {i} < {self.name(op.ub)}; {i} += {self.name(op.step)}) {{")
        self.indent += 1
        for o in op.body.block.ops:  # the row loop's constants (its body may read them)
            if isinstance(o, arith.ConstantOp):
                self.emit_op(o)
        self.line("#pragma omp simd")
        self.blocked_body(inner, [row], [part], ct, f"for (int64_t {k} = 0; {k} < {n}; {k}++)", k, k)
        self.indent -= 1
        self.line("}")
        self.line(f"#pragma omp simd reduction(+:{t})")
        self.line(f"for (int64_t {k} = 0; {k} < {n}; {k}++) {t} = {t} + {part}[{k}];")
        self.indent -= 1
        self.line("}")

    def emit_blocked_sums(self, op: scf.ForOp, targets: list[str], block: int) -> None:
        """The loop as blocks of `block` iterations, iteration k of a block adding into
        partial k of each sum (a vector loop without a reduction, its partials kept in
        registers), then the tail into the first partials, then a pairwise fold of
        the partials added to the initial value: the sum reassociates, nothing else."""
        iv = op.body.block.args[0]
        i, n = self.name(iv), self.constants[op.ub]
        ct = c_type(op.results[0].type)
        parts = [f"{t}_p" for t in targets]
        main = n - n % block
        self.line("{")
        self.indent += 1
        for p in parts:
            self.line(f"{ct} {p}[{block}];")
        self.line(f"for (int64_t {i}_k = 0; {i}_k < {block}; {i}_k++) {{ " +
                  " ".join(f"{p}[{i}_k] = 0;" for p in parts) + " }")
        self.line(f"for (int64_t {i}_b = 0; {i}_b < {main}; {i}_b += {block}) {{")
        self.indent += 1
        self.line("#pragma omp simd")
        self.blocked_body(op, targets, parts, ct, f"for (int64_t {i}_k = 0; {i}_k < {block}; {i}_k++)",
                          f"{i}_b + {i}_k", f"{i}_k")
        self.indent -= 1
        self.line("}")
        if main < n:  # the tail: at most block - 1 elements, into partials 0, 1, ...
            self.blocked_body(op, targets, parts, ct, f"for (int64_t {i}_k = 0; {i}_k < {n - main}; {i}_k++)",
                              f"{main} + {i}_k", f"{i}_k")
        lanes = block * SUM_FOLD_BYTES // SUM_BLOCK_BYTES
        w = block // 2
        while w >= lanes:  # halvings down to one vector of partials, each a vector add
            self.line(f"for (int64_t {i}_k = 0; {i}_k < {w}; {i}_k++) {{ " +
                      " ".join(f"{p}[{i}_k] = {p}[{i}_k] + {p}[{i}_k + {w}];" for p in parts) + " }")
            w //= 2
        # the last vector across its lanes: gcc's own horizontal sum (without SLP, which
        # modules are built without, small unrolled halvings become scalar code, measured slower)
        self.line("#pragma omp simd " + " ".join(f"reduction(+:{t})" for t in targets))
        self.line(f"for (int64_t {i}_k = 0; {i}_k < {lanes}; {i}_k++) {{ " +
                  " ".join(f"{t} = {t} + {p}[{i}_k];" for t, p in zip(targets, parts)) + " }")
        self.indent -= 1
        self.line("}")

    def blocked_body(self, op: scf.ForOp, targets: list[str], parts: list[str], ct: str, header: str,
                     index: str, part: str) -> None:
        """`header { iv = index; each sum reads its partial, runs the body, writes it back }`."""
        self.line(header + " {")
        self.indent += 1
        self.line(f"const int64_t {self.name(op.body.block.args[0])} = {index};")
        for t, p in zip(targets, parts):
            self.line(f"{ct} {t} = {p}[{part}];")
        self.yield_targets.append(targets)
        self.emit_block(op.body.block)
        self.yield_targets.pop()
        for t, p in zip(targets, parts):
            self.line(f"{p}[{part}] = {t};")
        self.indent -= 1
        self.line("}")
