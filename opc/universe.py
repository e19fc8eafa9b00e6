"""Makes stock `xdsl-opt` see opc's dialect and passes (entry point
`xdsl.universe` in pyproject.toml)."""

from xdsl.universe import Universe

from opc.transforms import get_all_passes


def _opc_dialect():
    from opc.dialects.opc import Opc

    return Opc


OPC_UNIVERSE = Universe(all_dialects={"opc": _opc_dialect}, all_passes=get_all_passes())
