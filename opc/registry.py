"""The op registry: one table saying, per opc op, how it is differentiated and
how it can run. The analogue of Paddle's ops.yaml + backward.yaml.

Columns
  kind         primitive | fused | grad
  vjp          the rule in opc/autodiff/rules.py that builds its gradient, or
               None: not differentiable (compares, full: no gradient flows
               through it). Grad ops are differentiable too (higher order):
               by default through their invoke or composite rule
               (R.vjp_through_rule: the rule of opc-decompose is expanded and
               differentiated), so a grad op with a rule needs nothing more.
               A kernel-only grad op (no rule) must give its own vjp
               (`grad("kernel", vjp=R.vjp_x_grad)`); without one,
               differentiating it is an error ("no gradient rule").
  any_dtype    True if the vjp also carries cotangents of integer and i1
               values (cast, whatever the dtypes, as Paddle's cast_grad;
               pure data movement). Elsewhere no cotangent flows through an
               integer result: compares and integer arithmetic stop it.
  composite    True if opc/transforms/opc_decompose.py has a decomposition of
               the op into other opc ops (which may decompose further).
  realised_by  grad ops only, with backward.yaml's meaning:
                 invoke     reuse a forward op (`invoke` says which)
                 composite  a decomposition into primitives
                 kernel     a dedicated kernel; `composite` says whether a
                            fallback exists for targets without the kernel
  invoke       for realised_by == "invoke": the forward call it stands for.

Which way an op runs on a target comes from this table and the target's
kernel list alone (see `route`): its kernel if the target has one, else its
invoke, else its composite rule, else it cannot run there. A device may also
bring its own kernel for some instances of an op (`route_op`: external where
that kernel admits the instance's dtype and attributes, `route` elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opc.autodiff import rules as R

if TYPE_CHECKING:
    from xdsl.ir import Operation

    from opc.targets import Target


@dataclass(frozen=True)
class OpEntry:
    kind: str
    vjp: Callable | None = None
    composite: bool = False
    realised_by: str | None = None
    invoke: str | None = None
    any_dtype: bool = False

    @property
    def rewrite(self) -> str | None:
        """'invoke' or 'composite' when the op can be rewritten into other ops."""
        if self.realised_by == "invoke":
            return "invoke"
        return "composite" if self.composite else None


def prim(vjp: Callable | None, composite: bool = False, any_dtype: bool = False) -> OpEntry:
    return OpEntry("primitive", vjp, composite, any_dtype=any_dtype)


def grad(realised_by: str, composite: bool = False, invoke: str | None = None,
         vjp: Callable | None = None, any_dtype: bool = False) -> OpEntry:
    """A grad op; its vjp defaults to differentiating its invoke / composite rule."""
    if vjp is None and (realised_by == "invoke" or composite):
        vjp = R.vjp_through_rule
    return OpEntry("grad", vjp, composite, realised_by, invoke, any_dtype)


# fmt: off
REGISTRY: dict[str, OpEntry] = {
    # --- primitives ------------------------------------- vjp rule ----------------- composite
    "opc.add":              prim(R.vjp_add),
    "opc.sub":              prim(R.vjp_sub),
    "opc.mul":              prim(R.vjp_mul),
    "opc.div":              prim(R.vjp_div),
    "opc.maximum":          prim(R.vjp_maximum),
    "opc.minimum":          prim(R.vjp_minimum),
    "opc.pow":              prim(R.vjp_pow),
    "opc.greater_than":     prim(None),
    "opc.less_than":        prim(None),
    "opc.equal":            prim(None),
    "opc.select":           prim(R.vjp_select),
    "opc.neg":              prim(R.vjp_neg),
    "opc.exp":              prim(R.vjp_exp),
    "opc.log":              prim(R.vjp_log),
    "opc.tanh":             prim(R.vjp_tanh),
    "opc.erf":              prim(R.vjp_erf),
    "opc.floor":         prim(R.vjp_step),
    "opc.ceil":          prim(R.vjp_step),
    "opc.round":         prim(R.vjp_step),
    "opc.sin":           prim(R.vjp_sin),
    "opc.cos":           prim(R.vjp_cos),
    "opc.tan":           prim(R.vjp_tan),
    "opc.asin":          prim(R.vjp_asin),
    "opc.acos":          prim(R.vjp_acos),
    "opc.atan":          prim(R.vjp_atan),
    "opc.sinh":          prim(R.vjp_sinh),
    "opc.cosh":          prim(R.vjp_cosh),
    "opc.asinh":         prim(R.vjp_asinh),
    "opc.acosh":         prim(R.vjp_acosh),
    "opc.atanh":         prim(R.vjp_atanh),
    "opc.sqrt":             prim(R.vjp_sqrt),
    "opc.rsqrt":            prim(R.vjp_rsqrt),
    "opc.abs":              prim(R.vjp_abs),
    "opc.relu":             prim(R.vjp_relu,             composite=True),   # maximum(x, 0)
    "opc.gelu":             prim(R.vjp_gelu,             composite=True),   # tanh or erf form
    # cast passes gradients through every dtype, ints included, as Paddle does
    # (cast_grad = cast(dout, x.dtype)): f64 -> ui8 -> f64 has gradient 1.
    "opc.cast":             prim(R.vjp_cast,             any_dtype=True),
    "opc.full":             prim(None),
    "opc.broadcast_to":     prim(R.vjp_broadcast_to),
    "opc.reshape":          prim(R.vjp_reshape,          any_dtype=True),
    "opc.transpose":        prim(R.vjp_transpose,        any_dtype=True),
    "opc.reduce_sum":       prim(R.vjp_reduce_sum),
    "opc.reduce_max":       prim(R.vjp_reduce_max),
    "opc.matmul":           prim(R.vjp_matmul),
    "opc.reduce_min":       prim(R.vjp_reduce_min),
    "opc.reduce_mean":      prim(R.vjp_reduce_mean),
    "opc.sigmoid":          prim(R.vjp_sigmoid),
    "opc.slice":            prim(R.vjp_slice),              # slice_grad
    "opc.concat":           prim(R.vjp_concat),             # a slice of dout per operand
    "opc.gather":           prim(R.vjp_gather),             # gather_grad
    # --- fused ------------------------------------------------------------------------------
    # vjp: fused_gemm_epilogue_grad fed by reserve_space; composite: matmul + add + activation
    "opc.fused_gemm_epilogue": OpEntry("fused", R.vjp_fused_gemm_epilogue, composite=True),
    # vjp: the grad op fed by what the forward saved; composite: Paddle's prim rules (max-subtracted)
    "opc.softmax":          OpEntry("fused", R.vjp_softmax, composite=True),
    "opc.log_softmax":      OpEntry("fused", R.vjp_log_softmax, composite=True),
    "opc.layer_norm":       OpEntry("fused", R.vjp_layer_norm, composite=True),   # saves mean, rstd
    "opc.softmax_cross_entropy": OpEntry("fused", R.vjp_softmax_cross_entropy, composite=True),  # saves softmax
    # --- grad ops --------------------------------------- realised by ------------------------
    "opc.cast_grad":        grad("invoke", invoke="cast(dout, x.dtype)", any_dtype=True),
    "opc.fused_gemm_epilogue_grad": grad("kernel", composite=True),  # matmuls, act grad, reduce_sum
    "opc.relu_grad":        grad("kernel", composite=True),  # select(x > 0, dout, 0)
    "opc.gelu_grad":        grad("kernel", composite=True),  # closed form in mul/add/tanh/erf/exp
    "opc.softmax_grad":     grad("kernel", composite=True),  # out * (dout - sum(dout * out))
    "opc.log_softmax_grad": grad("kernel", composite=True),  # dout - exp(out) * sum(dout)
    "opc.layer_norm_grad":  grad("kernel", composite=True),  # from mean, rstd: reduce_mean / reduce_sum
    "opc.softmax_cross_entropy_grad": grad("kernel", composite=True),  # (softmax - onehot(label)) * dloss
    # kernels only (as in Paddle); their own vjps for higher-order gradients: slice, gather of ddx
    "opc.slice_grad":       OpEntry("grad", R.vjp_slice_grad, realised_by="kernel"),
    "opc.gather_grad":      OpEntry("grad", R.vjp_gather_grad, realised_by="kernel"),
}
# fmt: on

ALL_OPS: frozenset[str] = frozenset(REGISTRY)


def entry(name: str) -> OpEntry | None:
    return REGISTRY.get(name)


def vjp_of(name: str) -> tuple[Callable | None, bool]:
    """(vjp rule or None if no gradient flows through the op, any_dtype), for autodiff.

    An op unknown to the registry, or a grad op without a vjp, has no
    gradient rule: an error, never a silent zero."""
    from opc.ir import OpcError

    e = REGISTRY.get(name)
    if e is None or (e.kind == "grad" and e.vjp is None):
        why = " (a kernel-only grad op needs a vjp of its own in opc/registry.py)" if e else ""
        raise OpcError(f"error: no gradient rule for {name}{why}")
    return e.vjp, e.any_dtype


def route(name: str, kernels: Collection[str], force: bool = False) -> str:
    """How `name` runs given a kernel list: kernel, invoke, composite or cannot run.

    force: take the invoke/composite path even where a kernel exists (when there is one).
    """
    e = REGISTRY.get(name)
    rewrite = e.rewrite if e else None
    if name in kernels and not (force and rewrite):
        return "kernel"
    return rewrite or "cannot run"


def route_op(op: Operation, target: Target, force: bool = False) -> str:
    """How this op instance runs on the target: "external" where the device's own
    kernel admits its dtype and attribute values, else `route` as if the device had
    no kernel of its own. force: the invoke/composite path (when there is one) wins."""
    e = REGISTRY.get(op.name)
    if not (force and e is not None and e.rewrite) and target.external_for(op) is not None:
        return "external"
    return route(op.name, target.kernels, force)
