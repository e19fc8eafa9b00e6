"""`opc explain model.mlir --target T`: how every op of a model runs on T.

    target cpu (backend cpu), kernel list: built-in (33 ops)
    op                            count  path        into
    opc.fused_gemm_epilogue           1  kernel
    opc.cast_grad                     2  invoke      -> opc.cast

One row per op name occurring in the module (with grad=True, after adding
the _grad functions), in order of first occurrence: how many there are, the
path the registry and the target's kernel list give it (kernel, invoke,
composite or CANNOT RUN), and, for invoke and composite, the kernel ops it
finally runs as after full legalization (each occurrence is legalized on its own; the row shows the
union, so a fused_gemm_epilogue_grad with relu_grad and one with gelu_grad
show both activation grads).

When some op cannot run on the target, `explain` still builds the whole
table (the op reads CANNOT RUN, and an op whose rule produces it names it
as `opc.tanh (CANNOT RUN)`), then raises `ExplainError`: an OpcError whose
message is the error line naming the op, followed by the table, and whose
`.table` holds the table alone. The CLI prints it and exits 1: a device that
cannot run a model is an error for a script, and the table says why.

A device with kernels of its own ([external.OP] in its .toml) routes each
op instance by its dtype and attribute values: an op whose instances go
different ways gets one row per path (`external` rows name the kernel), and
a section after the table gives each device kernel's routes per attribute
value. `explain_target` prints that for every op, without a model:

    opc.fused_gemm_epilogue   external npu_fused_gemm_epilogue (activation = none; dtypes f32, f16, bf16);
                              composite (activation = relu, gelu; other dtypes)
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region

from opc.dialects.control import CONTROL_OPS, HOST_RUNS
from opc.dialects.slices import SLICE_OPS
from opc.errors import UnsupportedError
from opc.ops.registry import REGISTRY
from opc.targets.device_kernels import external_symbol
from opc.targets.routing import route, route_op
from opc.targets.target import Target, get_target


class ExplainError(UnsupportedError):
    def __init__(self, message: str, table: str):
        super().__init__(f"{message}\n{table}".rstrip("\n"))
        self.table = table


def isolate(op: Operation) -> ModuleOp:
    """A module with one function holding a copy of `op`, operands as arguments."""
    block = Block(arg_types=[v.type for v in op.operands])
    clone = op.clone(value_mapper=dict(zip(op.operands, block.args)))
    block.add_op(clone)
    block.add_op(func.ReturnOp(*clone.results))
    f = func.FuncOp("explain", ([v.type for v in op.operands], [r.type for r in op.results]), Region(block))
    return ModuleOp([f])


def runs_as(op: Operation, target: Target) -> tuple[list[str], list[str]]:
    """The kernel ops `op` becomes on the target, and the ops among them that cannot run."""
    from opc.transforms.opc_decompose import legalize_ops

    module = isolate(op)
    bad = legalize_ops(module, target)
    names = [f"{o.name} (external {sym})" if (sym := external_symbol(o)) else o.name
             for o in module.walk() if o.name.startswith("opc.")]
    return list(dict.fromkeys(names)), list(dict.fromkeys(o.name for o, _ in bad))


def explain(module: ModuleOp, target_spec: str, grad: bool | int = False, fuse: bool = True) -> str:
    """The table for `module` on the target named by `target_spec` (cpu, cuda, FILE.toml),
    after opc-fuse (unless fuse=False) and, with grad, the grad functions (grad=2: second order too)."""
    from opc.autodiff import grad_order

    target = get_target(target_spec)
    order = grad_order(grad)
    module = module.clone()
    if fuse:
        from opc.ir import make_context
        from opc.transforms.opc_fuse import FusePass

        FusePass(target_spec).apply(make_context(), module)
    if order:
        from opc.autodiff import add_grad_functions

        add_grad_functions(module, order=order)

    rows: dict[tuple[str, str], dict] = {}
    for op in module.walk():
        if isinstance(op, CONTROL_OPS):  # runs on the host: a C if / for / while calling its bodies
            row = rows.setdefault((op.name, "host"), {"count": 0, "into": {HOST_RUNS[type(op)]: None}, "bad": {}})
            row["count"] += 1
            continue
        if isinstance(op, SLICE_OPS):  # MLIR's own slices: loops of every target (an index map, a placement)
            row = rows.setdefault((op.name, "kernel"), {"count": 0, "into": {}, "bad": {}})
            row["count"] += 1
            continue
        if not op.name.startswith("opc."):
            continue
        path = route_op(op, target)
        row = rows.setdefault((op.name, path), {"count": 0, "into": {}, "bad": {}})
        row["count"] += 1
        if path == "external":
            kernel = target.external_for(op)
            assert kernel is not None  # routed "external": a kernel admits it
            row["into"][kernel.symbol] = None
            continue
        into, bad = runs_as(op, target)
        row["into"].update(dict.fromkeys(into))
        row["bad"].update(dict.fromkeys(bad))

    lines = [heading(target)]
    width = max([len("op")] + [len(n) for n, _ in rows]) + 2
    lines.append(f"{'op':<{width}}{'count':>5}  {'path':<11} into")
    failing: list[tuple[str, str]] = []
    for (name, path), row in rows.items():
        shown = "CANNOT RUN" if path == "cannot run" else path
        if path in ("cannot run", "kernel"):
            into = ""
        elif path == "external":
            into = "-> " + ", ".join(row["into"])
        else:
            names = [f"{n} (CANNOT RUN)" if n in row["bad"] else n for n in row["into"]]
            into = "-> " + (", ".join(names) or "(nothing)")
        if row["bad"]:
            failing.append((name, path))
        lines.append(f"{name:<{width}}{row['count']:>5}  {shown:<11} {into}".rstrip())
    if not rows:
        lines.append("(no opc ops)")
    if target.externals:
        lines += ["", "device kernels:", *route_lines(target, [k.op for k in target.externals])]
    table = "\n".join(lines) + "\n"
    if failing:
        direct = [n for n, path in failing if path == "cannot run"]
        if direct:
            why = "no kernel for it there and no invoke or composite rule"
            first = direct[0]
        else:
            first, path = failing[0]
            why = f"its {path} rule needs {', '.join(rows[failing[0]]['bad'])}, which the target cannot run"
        raise ExplainError(f"{first} cannot run on target '{target.name}': {why}", table)
    return table


def heading(target: Target) -> str:
    where = "built-in" if target.source == "built-in" else target.source
    own = f", {len(target.externals)} device kernel(s)" if target.externals else ""
    return f"target {target.name} (backend {target.backend}), kernel list: {where} ({len(target.kernels)} ops){own}"


def route_lines(target: Target, names: list[str]) -> list[str]:
    """One line per op: its route on the target, per attribute value where a device kernel takes part."""
    width = max(len(n) for n in names) + 2
    lines = []
    for name in names:
        path = route(name, target.kernels)
        shown = "CANNOT RUN" if path == "cannot run" else path
        kernel = target.external_of(name)
        lines.append(f"{name:<{width}}{kernel.describe(shown) if kernel else shown}")
    return lines


def explain_target(target_spec: str) -> str:
    """`opc explain --target DEVICE.toml` without a model: how every op runs on the target."""
    target = get_target(target_spec)
    names = list(REGISTRY)
    width = max(len(n) for n in names) + 2
    return "\n".join([heading(target), f"{'op':<{width}}route", *route_lines(target, names)]) + "\n"


def explain_kernels(module: ModuleOp, target_spec: str, grad: bool | int = False, fuse: bool = True) -> str:
    """`opc explain --kernels`: the kernels each function compiles to on the target (after
    the same preparation as `opc compile`), their ops, and why each kernel ends."""
    from opc.api import prepare, target_backend
    from opc.ir import Source
    from opc.transforms.opc_schedule import describe

    source = prepare(Source(module.clone(), "<explain>", {}), target_spec, grad, None, fuse)
    return describe(source.module, epilogues=target_backend(target_spec) != "cuda")
