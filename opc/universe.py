"""Makes stock `xdsl-opt` see opc's dialects and passes (entry point
`xdsl.universe` in pyproject.toml). Only opc's own: xDSL registers
canonicalize, dce and cse itself, and duplicates are refused."""

from xdsl.universe import Universe

from opc.transforms import get_all_passes


def _opc_dialect():
    from opc.dialects.opc import Opc

    return Opc


def _opc_loops_dialect():
    from opc.dialects.opc_loops import OpcLoops

    return OpcLoops


OPC_UNIVERSE = Universe(
    all_dialects={"opc": _opc_dialect, "opc_loops": _opc_loops_dialect},
    all_passes={name: factory for name, factory in get_all_passes().items() if name.startswith("opc-")},
)
