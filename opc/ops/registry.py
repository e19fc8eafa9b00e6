"""The op registry: one table saying, per opc op, how it is differentiated and
how it can run. The analogue of Paddle's ops.yaml + backward.yaml.

Columns
  kind         primitive | fused | grad
  vjp          the rule in opc/ops/vjp_rules.py that builds its gradient, or
               None: not differentiable (compares, full: no gradient flows
               through it). Grad ops are differentiable too (higher order):
               a grad op without a vjp of its own is differentiated through
               its invoke or composite rule (the autodiff expands the rule
               and differentiates that), so a grad op with a rule needs
               nothing more. A kernel-only grad op (no rule) must give its
               own vjp (`OpEntry("grad", R.vjp_x_grad, ...)`); without one,
               differentiating it is an error ("no gradient rule").
  any_dtype    True if the vjp also carries cotangents of integer and i1
               values (cast, whatever the dtypes, as Paddle's cast_grad;
               pure data movement). Elsewhere no cotangent flows through an
               integer result: compares and integer arithmetic stop it.
  composite    True if opc/ops/decompositions.py has a decomposition of the
               op into other opc ops (which may decompose further): derived
               from its PATTERNS, never written here.
  realised_by  grad ops only, with backward.yaml's meaning:
                 invoke     reuse a forward op (`invoke` says which)
                 composite  a decomposition into primitives
                 kernel     a dedicated kernel; `composite` says whether a
                            fallback exists for targets without the kernel
  invoke       for realised_by == "invoke": the forward call it stands for.

Which way an op runs on a target comes from this table and the target's
kernel list alone (opc/targets/routing.py): its kernel if the target has one,
else its invoke, else its composite rule, else it cannot run there. A device
may also bring its own kernel for some instances of an op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from opc.ops import vjp_rules as R
from opc.ops.decompositions import PATTERNS


@dataclass(frozen=True)
class OpEntry:
    kind: str
    vjp: Callable | str | None = None  # a rule, THROUGH_RULE, or None: no gradient flows through
    composite: bool = False
    realised_by: str | None = None
    invoke: str | None = None
    any_dtype: bool = False

    @property
    def rewrite(self) -> str | None:
        """'invoke' or 'composite' when the op can be rewritten into other ops."""
        if self.realised_by == "invoke" or self.invoke:
            return "invoke"
        return "composite" if self.composite else None


def prim(vjp: Callable | None, any_dtype: bool = False) -> OpEntry:
    return OpEntry("primitive", vjp, any_dtype=any_dtype)


def grad(realised_by: str, invoke: str | None = None, vjp: Callable | None = None, any_dtype: bool = False) -> OpEntry:
    """A grad op; without a vjp of its own it is differentiated through its invoke / composite rule."""
    return OpEntry("grad", vjp, realised_by=realised_by, invoke=invoke, any_dtype=any_dtype)


# fmt: off
REGISTRY: dict[str, OpEntry] = {
    # --- primitives ------------------------------------- vjp rule ---------------------------
    "opc.add":              prim(R.vjp_add),
    "opc.sub":              prim(R.vjp_sub),
    "opc.mul":              prim(R.vjp_mul),
    "opc.div":              prim(R.vjp_div),
    "opc.maximum":          prim(R.vjp_maximum),
    "opc.minimum":          prim(R.vjp_minimum),
    "opc.pow":              prim(R.vjp_pow),
    "opc.bitwise_and":      prim(None),                   # integers only: no gradient flows
    "opc.bitwise_or":       prim(None),
    "opc.bitwise_xor":      prim(None),
    "opc.bitwise_not":      prim(None),
    "opc.shift_left":       prim(None),
    "opc.shift_right":      prim(None),
    "opc.greater_than":     prim(None),
    "opc.less_than":        prim(None),
    "opc.equal":            prim(None),
    "opc.select":           prim(R.vjp_select),
    "opc.neg":              prim(R.vjp_neg),
    "opc.exp":              prim(R.vjp_exp),
    "opc.log":              prim(R.vjp_log),
    "opc.tanh":             prim(R.vjp_tanh),
    "opc.erf":              prim(R.vjp_erf),
    "opc.floor":            prim(R.vjp_step),
    "opc.ceil":             prim(R.vjp_step),
    "opc.round":            prim(R.vjp_step),
    "opc.sin":              prim(R.vjp_sin),
    "opc.cos":              prim(R.vjp_cos),
    "opc.tan":              prim(R.vjp_tan),
    "opc.asin":             prim(R.vjp_asin),
    "opc.acos":             prim(R.vjp_acos),
    "opc.atan":             prim(R.vjp_atan),
    "opc.sinh":             prim(R.vjp_sinh),
    "opc.cosh":             prim(R.vjp_cosh),
    "opc.asinh":            prim(R.vjp_asinh),
    "opc.acosh":            prim(R.vjp_acosh),
    "opc.atanh":            prim(R.vjp_atanh),
    "opc.sqrt":             prim(R.vjp_sqrt),
    "opc.rsqrt":            prim(R.vjp_rsqrt),
    "opc.abs":              prim(R.vjp_abs),
    "opc.relu":             prim(R.vjp_relu),             # composite: maximum(x, 0)
    "opc.gelu":             prim(R.vjp_gelu),             # composite: tanh or erf form
    # cast passes gradients through every dtype, ints included, as Paddle does
    # (cast_grad = cast(dout, x.dtype)): f64 -> ui8 -> f64 has gradient 1.
    "opc.cast":             prim(R.vjp_cast,             any_dtype=True),
    # bitcast reinterprets bits: no gradient flows (a small change of x is no small change of its bits)
    "opc.bitcast":          prim(None),
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
    "opc.fused_gemm_epilogue": OpEntry("fused", R.vjp_fused_gemm_epilogue),
    # vjp: the grad op fed by what the forward saved; composite: Paddle's prim rules (max-subtracted)
    "opc.softmax":          OpEntry("fused", R.vjp_softmax),
    "opc.log_softmax":      OpEntry("fused", R.vjp_log_softmax),
    "opc.layer_norm":       OpEntry("fused", R.vjp_layer_norm),   # saves mean, rstd
    "opc.softmax_cross_entropy": OpEntry("fused", R.vjp_softmax_cross_entropy),  # saves softmax
    # vjp: conv_grad_input + conv_grad_filter; composite: im2col by slices, a batched matmul
    "opc.conv":             OpEntry("fused", R.vjp_conv),
    # conv + bias + activation (opc-fuse), a CPU kernel; vjp: act grad from reserve_space, the conv's
    # grad ops, reduce_sum for the bias; composite: conv + add + activation
    "opc.fused_conv_epilogue": OpEntry("fused", R.vjp_fused_conv_epilogue),
    # vjp: conv (its input gradient) + conv_grad_filter with dout and x swapped; a kernel only
    "opc.conv_transpose":   OpEntry("fused", R.vjp_conv_transpose),
    # saves indices for max_pool_grad; any_dtype: a cotangent of the i64 indices (a returned result
    # gets one) must not stop y's from flowing; the rule ignores it
    "opc.max_pool":         OpEntry("fused", R.vjp_max_pool, any_dtype=True),
    "opc.avg_pool":         OpEntry("fused", R.vjp_avg_pool),       # avg_pool_grad
    # no kernels yet (NO_KERNEL below): their composites; batch_norm's vjp is batch_norm_grad in
    # training, instance_norm / group_norm run as layer_norm over [N * groups, rest] (its kernel)
    "opc.batch_norm":       OpEntry("fused", R.vjp_batch_norm),
    "opc.instance_norm":    OpEntry("fused", R.THROUGH_RULE),
    "opc.group_norm":       OpEntry("fused", R.THROUGH_RULE),
    # vjp: attention_grad fed by out and lse (a mask's gradient from the primitives); composite:
    # matmul, max-subtracted exp, reduce_sum, matmul
    "opc.attention":        OpEntry("fused", R.vjp_attention),
    # --- grad ops --------------------------------------- realised by ------------------------
    "opc.cast_grad":        grad("invoke", invoke="cast(dout, x.dtype)", any_dtype=True),
    "opc.fused_gemm_epilogue_grad": grad("kernel"),  # composite: matmuls, act grad, reduce_sum
    "opc.relu_grad":        grad("kernel"),  # composite: select(x > 0, dout, 0)
    "opc.gelu_grad":        grad("kernel"),  # composite: closed form in mul/add/tanh/erf/exp
    "opc.softmax_grad":     grad("kernel"),  # composite: out * (dout - sum(dout * out))
    "opc.log_softmax_grad": grad("kernel"),  # composite: dout - exp(out) * sum(dout)
    "opc.layer_norm_grad":  grad("kernel"),  # composite: from mean, rstd: reduce_mean / reduce_sum
    "opc.softmax_cross_entropy_grad": grad("kernel"),  # composite: (softmax - onehot(label)) * dloss
    "opc.conv_grad_input":  grad("kernel", invoke="conv_transpose(dout, w)"),
    "opc.conv_grad_filter": grad("kernel"),  # composite: im2col by slices, a batched matmul with dout
    "opc.attention_grad":   grad("kernel"),  # composite: p from lse, the matmuls of the backward
    "opc.batch_norm_grad":  grad("composite"),  # composite: reduce_mean / reduce_sum over N, spatial
    # kernels only (as in Paddle); their own vjps for higher-order gradients: slice, gather of ddx,
    # avg_pool of ddx
    "opc.slice_grad":       OpEntry("grad", R.vjp_slice_grad, realised_by="kernel"),
    "opc.gather_grad":      OpEntry("grad", R.vjp_gather_grad, realised_by="kernel"),
    "opc.max_pool_grad":    OpEntry("grad", R.vjp_max_pool_grad, realised_by="kernel"),
    "opc.avg_pool_grad":    OpEntry("grad", R.vjp_avg_pool_grad, realised_by="kernel"),
}
# fmt: on
# The composite column, from the one list of rules (a grad op realised by invoke has its rule there too).
REGISTRY = {name: replace(e, composite=name in PATTERNS and e.rewrite != "invoke") for name, e in REGISTRY.items()}

ALL_OPS: frozenset[str] = frozenset(REGISTRY)
NO_KERNEL: frozenset[str] = frozenset({"opc.batch_norm", "opc.batch_norm_grad", "opc.instance_norm",
                                       "opc.group_norm"})
"""Ops without a dedicated CPU / CUDA lowering: the built-in targets run them by their rules."""
CPU_ONLY: frozenset[str] = frozenset({"opc.fused_conv_epilogue"})
"""Ops with a CPU kernel but no CUDA one: the cuda target runs them by their rules."""


def entry(name: str) -> OpEntry | None:
    return REGISTRY.get(name)
