"""How an op runs on a target: the one function (`route_op`) that legalization,
opc-fuse, `opc explain` and `opc check` all ask.

An op instance runs through the device's own kernel where one admits its dtype and
attribute values ("external"); else through the target's kernel for the op
("kernel"); else by its invoke or composite rule (the registry's columns),
rewritten into other ops that are routed in turn; else it "cannot run".
"""

from __future__ import annotations

from collections.abc import Collection

from xdsl.ir import Operation

from opc.ops.registry import REGISTRY
from opc.targets.target import Target


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
