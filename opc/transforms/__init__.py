"""Passes usable in `opc opt -p`, registered lazily so the CLI starts fast."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Name -> factory returning the pass class (imported on first use)."""

    def canonicalize():
        from opc.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def dce():
        from xdsl.transforms.dead_code_elimination import DeadCodeElimination

        return DeadCodeElimination

    def cse():
        from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

        return CommonSubexpressionElimination

    def opc_decompose():
        from opc.transforms.opc_decompose import DecomposePass

        return DecomposePass

    def opc_attention():
        from opc.transforms.opc_attention import AttentionPass

        return AttentionPass

    def opc_fuse():
        from opc.transforms.opc_fuse import FusePass

        return FusePass

    def opc_grad():
        from opc.transforms.opc_grad import GradPass

        return GradPass

    def opc_schedule():
        from opc.transforms.opc_schedule import SchedulePass

        return SchedulePass

    def opc_widen():
        from opc.transforms.opc_widen import WidenPass

        return WidenPass

    def opc_outline_control_flow():
        from opc.transforms.opc_outline_control_flow import OutlineControlFlowPass

        return OutlineControlFlowPass

    def opc_channels_last():
        from opc.transforms.opc_channels_last import ChannelsLastPass

        return ChannelsLastPass

    def opc_lower_to_loops():
        from opc.lowering.opc_lower_to_loops import LowerToLoopsPass

        return LowerToLoopsPass

    return {
        "canonicalize": canonicalize,
        "dce": dce,
        "cse": cse,
        "opc-attention": opc_attention,
        "opc-channels-last": opc_channels_last,
        "opc-decompose": opc_decompose,
        "opc-fuse": opc_fuse,
        "opc-grad": opc_grad,
        "opc-schedule": opc_schedule,
        "opc-widen": opc_widen,
        "opc-outline-control-flow": opc_outline_control_flow,
        "opc-lower-to-loops": opc_lower_to_loops,
    }
