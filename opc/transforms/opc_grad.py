"""`opc-grad{func=NAME wrt=x,w}`: append @NAME_grad(inputs..., douts...) ->
(grads of wrt...) and @NAME_value_and_grad(inputs..., douts...) ->
(results..., grads of wrt...).

Without `func`, every function gets both (as `opc.compile(src, grad=True)`
does), and those with nothing to differentiate are listed, with the reason,
in the module attribute `opc.no_grad`; without `wrt`, the grads are taken
with respect to every float argument not marked `{opc.stop_gradient}`. Any
function can be named, a grad function included (`func=f_grad`: higher
order). Semantics: opc/autodiff/__init__.py.

`checkpoint=k` (k >= 2): the gradient of every scf.for and scf.while without an `opc.checkpoint` of its own
saves the loop-carried values of every k-th iteration only and recomputes the others
(opc/autodiff/control_flow.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func, no_wrt_reason, wrt_indices
from opc.autodiff.control_flow import CHECKPOINT_ATTR
from opc.errors import InputError


def mark_checkpoints(module: ModuleOp, k: int) -> None:
    if k < 2:
        raise InputError(f"opc-grad: checkpoint={k}: give k >= 2 (save every k-th iteration of a loop)")
    for o in module.walk():
        if isinstance(o, (scf.ForOp, scf.WhileOp)) and CHECKPOINT_ATTR not in o.attributes:
            o.attributes[CHECKPOINT_ATTR] = IntegerAttr(k, i64)


@dataclass(frozen=True)
class GradPass(ModulePass):
    name = "opc-grad"

    func: str | None = None
    wrt: tuple[str, ...] = ()
    checkpoint: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.checkpoint:
            mark_checkpoints(op, self.checkpoint)
        if not self.func:
            if self.wrt:
                raise InputError("opc-grad: wrt=... needs func=NAME")
            add_grad_functions(op)
            return
        f = find_func(op, self.func)
        if f is None:
            raise InputError(f"opc-grad: no function @{self.func} in the module")
        wrt = wrt_indices(f, self.wrt) if self.wrt else default_wrt(f)
        if not wrt:
            raise InputError(f"opc-grad: {no_wrt_reason(f)}")
        add_grad_function(op, f, wrt)
        add_grad_function(op, f, wrt, with_values=True)
