"""Adding an op is a short checklist: this test names what an op lacks.

Every op of the dialect needs
  * a gradient rule: `@vjp(o.XOp)`, or `not_differentiable(o.XOp)` / `through_rule(o.XOp)`
    said out loud (a grad op with an invoke or composite rule is differentiated through it);
  * a lowering on each built-in target its KERNELS names (an elementwise op: its
    `elementwise(...)` registration or a scalar formula), and where KERNELS leaves a target
    out, an invoke or composite rule to run by there;
  * for an elementwise op whose name is an ONNX op type too (sin: Sin), an ONNX mapping:
    `elementwise(..., onnx="Sin")`, or a converter of the importer's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import onnx
import pytest
from xdsl.irdl import irdl_op_definition

from opc.dialects import opc as o
from opc.lowering.opc_lower_to_loops import lowers
from opc.ops import registry
from opc.ops.registry import BUILTIN_TARGETS, OpEntry, entries


def onnx_name(e: OpEntry) -> str | None:
    """The ONNX op type spelled like the op (sin: Sin, bitwise_not: BitwiseNot), if ONNX has one."""
    camel = "".join(w.capitalize() for w in e.name.removeprefix("opc.").split("_"))
    return camel if onnx.defs.has(camel) else None


def imported(op_type: str) -> bool:
    from opc.onnx_import import register_converters
    from opc.onnx_import.graph import CONVERTERS

    register_converters()
    return op_type in CONVERTERS


def missing(e: OpEntry, imported: Callable[[str], bool] = imported) -> list[str]:
    """What the op lacks, one phrase each (`imported`: whether the ONNX importer converts an op type)."""
    gaps = []
    if not registry.has_vjp_rule(e):
        gaps.append(f"no vjp: add @vjp({e.op.__name__}) or say not_differentiable({e.op.__name__})")
    for target in BUILTIN_TARGETS:
        if target in e.kernels and not lowers(e.op):
            gaps.append(f"no lowering on {target} (KERNELS names it): an elementwise(...) registration "
                        "with its scalar op, or a lowering in opc/lowering")
        if target not in e.kernels and e.rewrite is None and target not in getattr(e.op, "UNSUPPORTED", {}):
            gaps.append(f"cannot run on {target}: no kernel there and no invoke or composite rule")
    elementwise = issubclass(e.op, (o.UnaryElementwiseOp, o.BinaryElementwiseOp))
    wanted = onnx_name(e) if elementwise else None
    if e.onnx is not None and not imported(e.onnx):
        gaps.append(f"ONNX mapping {e.onnx} declared, but the importer has no converter for it")
    if wanted and e.onnx is None and not imported(wanted):
        gaps.append(f"no ONNX mapping: ONNX has {wanted}; add elementwise(..., onnx={wanted!r})")
    return gaps


def test_every_op_has_its_rules() -> None:
    gaps = [f"{e.name}: {gap}" for e in entries() for gap in missing(e)]
    assert not gaps, "\n".join(gaps)


@irdl_op_definition
class SoftplusProbeOp(o.UnaryElementwiseOp):
    """An op declared and nothing more: what the checklist must name."""

    name = "opc.softplus"


@irdl_op_definition
class GradProbeOp(o.UnaryElementwiseOp):
    """A grad op with no kernel anywhere and no rule."""

    name = "opc.probe_grad"
    KIND: ClassVar[str] = "grad"
    KERNELS: ClassVar[tuple[str, ...]] = ()


def test_the_checklist_names_what_a_bare_op_lacks() -> None:
    gaps = missing(registry.build(SoftplusProbeOp), imported=lambda op_type: False)
    assert gaps[0].startswith("no vjp: add @vjp(SoftplusProbeOp)")
    assert [g.split(" (")[0] for g in gaps[1:3]] == ["no lowering on cpu", "no lowering on cuda"]
    assert gaps[3] == "no ONNX mapping: ONNX has Softplus; add elementwise(..., onnx='Softplus')"
    assert len(gaps) == 4


def test_the_checklist_names_an_op_that_cannot_run() -> None:
    gaps = missing(registry.build(GradProbeOp))
    assert gaps == ["no vjp: add @vjp(GradProbeOp) or say not_differentiable(GradProbeOp)",
                    "cannot run on cpu: no kernel there and no invoke or composite rule",
                    "cannot run on cuda: no kernel there and no invoke or composite rule"]


@pytest.mark.parametrize("name", ["opc.sin", "opc.add", "opc.layer_norm", "opc.cast_grad"])
def test_entry_by_class_instance_or_name(name: str) -> None:
    e = registry.entry(name)
    assert e is not None and registry.entry(e.op) is e and registry.entry(name.removeprefix("opc.")) is e
    assert e.name == name == e.op.name
