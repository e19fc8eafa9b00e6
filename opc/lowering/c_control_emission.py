"""Control flow on the host: the lowered `scf.if` / `scf.index_switch` / `scf.for` / `scf.while`
marked `opc.host` (opc/lowering/control_flow_lowering.py) as C `if` / `switch` / `for` / `while`, and
the calls of their bodies.

A part of CEmitter (c_emitter.py), which mixes it in.

- A body is a function of the module (`opc_fn_NAME`, not exported to Python) with an arena of its
  own (the caller's arena holds the caller's buffers while the body runs). Its status goes up
  through its caller: a failed check -k of the body is the caller's -(base + k).
- Loop-carried tensors are pointers, rotated after each iteration (no copy).
- A `while` polls a flag that opc's SIGINT handler sets: Ctrl-C ends the call with
  KeyboardInterrupt. The handler is installed at the start of each while loop when the current
  one is not opc's, and calls the handler it replaced (Python's, which then raises
  KeyboardInterrupt as usual); where SIGINT is ignored it is left so. `opc.max_trips = N` on the
  scf.while bounds it: iteration N + 1 is a RuntimeError instead.
"""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from opc.dialects.control import MAX_TRIPS_ATTR
from opc.dialects.kinds import element_of
from opc.dialects.opc_stack import DepthOp, PopIntoOp, PushOp
from opc.lowering.abi import ENTRY_PREFIX, STACK_CAPACITY_FN, STACK_PEAK_FN
from opc.lowering.c_expressions import ARENA_ALIGN, c_type
from opc.lowering.c_memory_emission import c_product
from opc.lowering.c_text import c_symbol
from opc.lowering.control_flow_lowering import (
    HOST_ATTR,
    INTERRUPT_CODE_ATTR,
    MAX_TRIPS_CODE_ATTR,
    STATUS_BASE_ATTR,
    STEP_CODE_ATTR,
)
from opc.lowering.emitter_state import EmitterState
from opc.transforms.opc_outline_control_flow import is_body

# One SIGINT watcher per module: a flag, the handler it replaced, and the installer each while calls.
SIGINT_SUPPORT = """#include <signal.h>
#include <string.h>
static volatile sig_atomic_t opc_cf_interrupted = 0;
static struct sigaction opc_cf_previous;
static void opc_cf_on_sigint(int sig) {
  opc_cf_interrupted = 1;
  if (opc_cf_previous.sa_flags & SA_SIGINFO) {
    if (opc_cf_previous.sa_sigaction) opc_cf_previous.sa_sigaction(sig, NULL, NULL);
  } else if (opc_cf_previous.sa_handler != SIG_DFL && opc_cf_previous.sa_handler != SIG_IGN) {
    opc_cf_previous.sa_handler(sig);
  }
}
static void opc_cf_watch_sigint(void) {
  struct sigaction now;
  if (sigaction(SIGINT, NULL, &now) != 0) return;
  if (!(now.sa_flags & SA_SIGINFO) && (now.sa_handler == opc_cf_on_sigint || now.sa_handler == SIG_IGN)) return;
  struct sigaction mine;
  memset(&mine, 0, sizeof mine);
  mine.sa_handler = opc_cf_on_sigint;
  sigemptyset(&mine.sa_mask);
  opc_cf_previous = now;
  opc_cf_interrupted = 0;  /* a flag left from before another handler replaced ours */
  sigaction(SIGINT, &mine, NULL);
}
/* Installed when the module loads, not first when a while starts: a Ctrl-C between the call's
   start and its first while went to Python's handler alone, whose KeyboardInterrupt waits for the
   call to return, and the while never saw it (a hang, found by a CI run under load). */
__attribute__((constructor)) static void opc_cf_watch_at_load(void) { opc_cf_watch_sigint(); }
"""


# The stack of the values loops save for their backward (opc/dialects/opc_stack.py): one per thread,
# growing as needed. One stack serves every loop: a backward pops in exactly the reverse order of
# the forward's pushes, loops nested or in sequence. Each exported call starts it empty and, at its
# end (returned or failed), frees a buffer grown past STACK_KEEP_BYTES: one long loop must not hold
# its memory for the thread's life, while a small buffer is kept for the next call's speed.
# opc_stack_capacity / opc_stack_peak: what the calling thread's stack holds allocated now, and the
# most its last call held (bytes), for tests and memory measurements (declared where it exists,
# build.py).
STACK_KEEP_BYTES = 64 << 20

STACK_SUPPORT = f"""typedef struct {{ char *data; size_t used, cap, peak; }} opc_stack_t;
static __thread opc_stack_t opc_stack = {{NULL, 0, 0, 0}};
static int opc_stack_push(const void *p, size_t n) {{
  if (opc_stack.used + n > opc_stack.cap) {{
    size_t cap = opc_stack.cap ? opc_stack.cap : 4096;
    while (cap < opc_stack.used + n) cap *= 2;
    char *data = (char *)realloc(opc_stack.data, cap);
    if (!data) {{ OPC_STACK_OOM(cap); return 1; }}
    opc_stack.data = data;
    opc_stack.cap = cap;
  }}
  OPC_STACK_COPY(opc_stack.data + opc_stack.used, p, n);
  opc_stack.used += n;
  if (opc_stack.used > opc_stack.peak) opc_stack.peak = opc_stack.used;
  return 0;
}}
static int opc_stack_pop(void *p, size_t n) {{
  opc_stack.used -= n;
  OPC_STACK_COPY(p, opc_stack.data + opc_stack.used, n);
  return 0;
}}
static void opc_stack_start(void) {{ opc_stack.used = 0; opc_stack.peak = 0; }}
static void opc_stack_end(void) {{
  opc_stack.used = 0;
  if (opc_stack.cap > (size_t){STACK_KEEP_BYTES}) {{
    free(opc_stack.data);
    opc_stack.data = NULL;
    opc_stack.cap = 0;
  }}
}}
int64_t {STACK_CAPACITY_FN}(void) {{ return (int64_t)opc_stack.cap; }}
int64_t {STACK_PEAK_FN}(void) {{ return (int64_t)opc_stack.peak; }}
"""


def arena_support(name: str) -> str:
    """A body function's own per-thread arena (as ARENA_SUPPORT's, under its own names)."""
    return (f"static __thread char *{name}_buf = NULL;\nstatic __thread size_t {name}_cap = 0;\n"
            f"static char *{name}(size_t n) {{\n"
            f"  if ({name}_cap >= n) return {name}_buf;\n"
            f"  free({name}_buf);\n  {name}_cap = 0;\n"
            f"  {name}_buf = (char *)aligned_alloc({ARENA_ALIGN}, n);\n"
            f"  if ({name}_buf) {name}_cap = n;\n  else opc_oom_bytes = (int64_t)n;\n"
            f"  return {name}_buf;\n}}\n")


def is_host_control(op: Operation) -> bool:
    if isinstance(op, (func.CallOp, PushOp, PopIntoOp, DepthOp)):
        return True
    return isinstance(op, (scf.IfOp, scf.ForOp, scf.WhileOp, scf.IndexSwitchOp)) and HOST_ATTR in op.attributes


def uses_stack(module: ModuleOp) -> bool:
    return any(isinstance(o, (PushOp, PopIntoOp, DepthOp)) for o in module.walk())


C_STACK_MACROS = ("#define OPC_STACK_COPY(dst, src, n) memcpy(dst, src, n)\n"
                  "#define OPC_STACK_OOM(n) (opc_oom_bytes = (int64_t)(n))\n")


def control_support(module: ModuleOp, stack_macros: str = C_STACK_MACROS) -> str:
    """Module-level C the host control flow needs (the SIGINT watcher where a while loop runs, the
    stack of saved loop values where a gradient runs through a loop). stack_macros: how a saved value
    is copied (CUDA: from and to device buffers) and a failed allocation recorded."""
    stack = stack_macros + STACK_SUPPORT if uses_stack(module) else ""
    return (SIGINT_SUPPORT if watches_sigint(module) else "") + stack


def watches_sigint(module: ModuleOp) -> bool:
    """Whether the module runs a while loop on the host (and so has the SIGINT watcher)."""
    return any(isinstance(o, scf.WhileOp) and HOST_ATTR in o.attributes for o in module.walk())


def int_attr(op: Operation, name: str) -> int:
    a = op.attributes[name]
    assert isinstance(a, IntegerAttr)
    return a.value.data


class ControlEmission(EmitterState):
    outlined: list[str]
    stack_oom_status = 1  # the status of a failed allocation (the C emitter's MemoryError)

    def arena_getter(self, fn: func.FuncOp) -> str:
        """The arena of a function's buffers: the module's, or a body's own."""
        if not is_body(fn):
            return "opc_arena_get"
        name = f"opc_arena_get_{c_symbol(fn.sym_name.data)}"
        self.outlined.append(arena_support(name))
        return name

    def emit_host_control(self, op: Operation) -> None:
        if isinstance(op, DepthOp):
            self.line(f"const int64_t {self.name(op.result)} = (int64_t)opc_stack.used;")
        elif isinstance(op, (PushOp, PopIntoOp)):
            self.emit_stack_op(op)
        elif isinstance(op, func.CallOp):
            self.emit_body_call(op)
        elif isinstance(op, scf.IfOp):
            self.line(f"if ({self.name(op.cond)}) {{")
            self.emit_region_ops(op.true_region.block)
            self.line("} else {")
            self.emit_region_ops(op.false_region.block)
            self.line("}")
        elif isinstance(op, scf.IndexSwitchOp):
            self.emit_host_switch(op)
        elif isinstance(op, scf.ForOp):
            self.emit_host_for(op)
        else:
            assert isinstance(op, scf.WhileOp)
            self.emit_host_while(op)

    def emit_stack_op(self, op: PushOp | PopIntoOp) -> None:
        buf = op.value if isinstance(op, PushOp) else op.buffer
        t = buf.type
        assert isinstance(t, MemRefType)
        size = f"(size_t)({c_product(self.dims_of(buf))}) * sizeof({c_type(element_of(buf))})"  # run-time sizes too
        if isinstance(op, PushOp):
            self.line(f"if (opc_stack_push({self.name(buf)}, {size})) {{ status = {self.stack_oom_status}; "
                      "goto cleanup; }")
        else:
            self.line(f"if (opc_stack_pop({self.name(buf)}, {size})) {{ status = 1; goto cleanup; }}")

    def emit_IndexCastOp(self, op: arith.IndexCastOp) -> None:
        r = op.result
        self.line(f"const {c_type(r.type)} {self.name(r)} = ({c_type(r.type)}){self.name(op.input)};")

    def emit_region_ops(self, block: Block) -> None:
        self.indent += 1
        for o in block.ops:
            if o is not block.last_op:
                self.emit_op(o)
        self.indent -= 1

    def emit_body_call(self, op: func.CallOp) -> None:
        args = ", ".join(self.name(a) for a in op.arguments)
        base = int_attr(op, STATUS_BASE_ATTR)
        shift = f" if (status < 0) status -= {base};" if base else ""
        self.line(f"status = {ENTRY_PREFIX}{c_symbol(op.callee.root_reference.data)}({args});")
        self.line(f"if (status) {{{shift} goto cleanup; }}")

    def declare_carried(self, args: list[SSAValue], inits: list[SSAValue], results: list[SSAValue]) -> None:
        """Pointer variables for loop-carried buffers (the region's arguments and the op's results)."""
        for arg, init, res in zip(args, inits, results):
            ct = c_type(element_of(arg))
            name = self.name(arg)
            self.names[res] = name
            self.line(f"{ct} *{name}; {name} = ({ct} *){self.name(init)};")  # C++ (CUDA): no goto past an init

    def rotate(self, targets: list[SSAValue], values: list[SSAValue]) -> None:
        temps = []
        self.line("{")
        self.indent += 1
        for k, v in enumerate(values):
            temps.append(f"opc_rot{k}")
            self.line(f"{c_type(element_of(v))} *opc_rot{k} = {self.name(v)};")
        for t, tmp in zip(targets, temps):
            self.line(f"{self.name(t)} = {tmp};")
        self.indent -= 1
        self.line("}")

    def emit_host_switch(self, op: scf.IndexSwitchOp) -> None:
        """A C switch; each case in braces of its own (C++, CUDA: no jump past a declaration)."""
        self.line(f"switch ({self.name(op.arg)}) {{")
        for v, region in zip(op.cases.iter_values(), op.case_regions):
            self.line(f"case {v}LL: {{")
            self.emit_region_ops(region.block)
            self.line("  break;")
            self.line("}")
        self.line("default: {")
        self.emit_region_ops(op.default_region.block)
        self.line("}")
        self.line("}")

    def emit_host_for(self, op: scf.ForOp) -> None:
        body = op.body.block
        self.declare_carried(list(body.args[1:]), list(op.iter_args), list(op.results))
        step = self.name(op.step)
        if self.constants.get(op.step, 0) <= 0:
            code = int_attr(op, STEP_CODE_ATTR)
            self.line(f"if ({step} <= 0) {{ opc_error_detail = {step}; status = {code}; goto cleanup; }}")
        iv = self.name(body.args[0])
        self.line(f"for (int64_t {iv} = {self.name(op.lb)}; {iv} < {self.name(op.ub)}; {iv} += {step}) {{")
        self.emit_region_ops(body)
        self.indent += 1
        term = body.last_op
        assert isinstance(term, scf.YieldOp)
        self.rotate(list(body.args[1:]), list(term.operands))
        self.indent -= 1
        self.line("}")

    def emit_host_while(self, op: scf.WhileOp) -> None:
        before, after = op.before_region.block, op.after_region.block
        self.declare_carried(list(before.args), list(op.arguments), list(op.results))
        for a, b in zip(after.args, before.args):
            self.names[a] = self.name(b)
        trips = f"opc_trips_{len(self.names)}"
        limit = op.attributes.get(MAX_TRIPS_ATTR)
        if limit is not None:
            self.line(f"int64_t {trips}; {trips} = 0;")
        self.line("opc_cf_watch_sigint();")
        self.line("for (;;) {")
        self.indent += 1
        code = int_attr(op, INTERRUPT_CODE_ATTR)
        self.line(f"if (opc_cf_interrupted) {{ opc_cf_interrupted = 0; status = {code}; goto cleanup; }}")
        self.indent -= 1
        self.emit_region_ops(before)
        self.indent += 1
        cond = before.last_op
        assert isinstance(cond, scf.ConditionOp)
        self.line(f"if (!{self.name(cond.condition)}) break;")
        if limit is not None:
            n = int_attr(op, MAX_TRIPS_ATTR)
            code = int_attr(op, MAX_TRIPS_CODE_ATTR)
            self.line(f"if ({trips}++ >= {n}) {{ opc_error_detail = {n}; status = {code}; goto cleanup; }}")
        self.indent -= 1
        self.emit_region_ops(after)
        self.indent += 1
        term = after.last_op
        assert isinstance(term, scf.YieldOp)
        self.rotate(list(before.args), list(term.operands))
        self.indent -= 1
        self.line("}")
