"""An ONNX model read and checked, without xDSL: what `opc.load_onnx` needs before (and, where
the load is cached, instead of) an import.

`read` parses the file (its external data read in, from the model's folder only) and names what
identifies the model: its bytes, or, for a model with external data or a proto given in memory,
its serialization after the read. `check` runs onnx.checker on it. `load` is both.
"""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np

from opc.errors import BuildError, InputError, UnsupportedError, first_line

MIN_OPSET = 1  # the oldest ai.onnx opset imported: every one the installed onnx knows
INSTALL_HINT = 'pip install "opc[onnx]" (in a checkout of opc: pip install ".[onnx]")'


# ONNX TensorProto element type numbers -> (name, NumPy dtype): the types opc supports
TENSOR_TYPES: dict[int, tuple[str, np.dtype]] = {
    1: ("FLOAT", np.dtype(np.float32)),
    2: ("UINT8", np.dtype(np.uint8)),
    3: ("INT8", np.dtype(np.int8)),
    4: ("UINT16", np.dtype(np.uint16)),
    5: ("INT16", np.dtype(np.int16)),
    12: ("UINT32", np.dtype(np.uint32)),
    13: ("UINT64", np.dtype(np.uint64)),
    6: ("INT32", np.dtype(np.int32)),
    7: ("INT64", np.dtype(np.int64)),
    9: ("BOOL", np.dtype(np.bool_)),
    10: ("FLOAT16", np.dtype(np.float16)),
    11: ("DOUBLE", np.dtype(np.float64)),
    16: ("BFLOAT16", np.dtype(ml_dtypes.bfloat16)),
    # low precision (SPEC.md: Types); onnx.numpy_helper.to_array unpacks the 4- and 2-bit ones, which
    # ONNX packs two (four) to a byte, low bits first, into one ml_dtypes element a byte
    17: ("FLOAT8E4M3FN", np.dtype(ml_dtypes.float8_e4m3fn)),
    18: ("FLOAT8E4M3FNUZ", np.dtype(ml_dtypes.float8_e4m3fnuz)),
    19: ("FLOAT8E5M2", np.dtype(ml_dtypes.float8_e5m2)),
    20: ("FLOAT8E5M2FNUZ", np.dtype(ml_dtypes.float8_e5m2fnuz)),
    24: ("FLOAT8E8M0", np.dtype(ml_dtypes.float8_e8m0fnu)),
    23: ("FLOAT4E2M1", np.dtype(ml_dtypes.float4_e2m1fn)),
    27: ("FLOAT6E2M3", np.dtype(ml_dtypes.float6_e2m3fn)),  # packed four to three bytes
    28: ("FLOAT6E3M2", np.dtype(ml_dtypes.float6_e3m2fn)),
    22: ("INT4", np.dtype(ml_dtypes.int4)),
    21: ("UINT4", np.dtype(ml_dtypes.uint4)),
    26: ("INT2", np.dtype(ml_dtypes.int2)),
    25: ("UINT2", np.dtype(ml_dtypes.uint2)),
}


def max_opset() -> int:
    """The newest ai.onnx opset the installed onnx knows (28 for onnx 1.23)."""
    return int(onnx_module().defs.onnx_opset_version())


def onnx_module():
    try:
        import onnx
    except ImportError:
        raise BuildError(f"importing ONNX models needs the onnx package: {INSTALL_HINT}") from None
    return onnx


def dtype_name(elem_type: int) -> str:
    try:
        return onnx_module().TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def load(model: Any, where: str):
    """An onnx.ModelProto from a path or a ModelProto, checked by onnx.checker."""
    model = read(model, where)[0]
    check(model, where)
    return model


def read(model: Any, where: str, identify: bool = False) -> tuple[Any, bytes | None, bool]:
    """(the model from a path or a ModelProto, named `main` where unnamed, not yet checked; with
    `identify`, the bytes that identify it: the file's where they are all of it, else the serialized
    proto; whether they are the file's)."""
    onnx = onnx_module()
    from google.protobuf.message import DecodeError

    data = None
    if not isinstance(model, onnx.ModelProto):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InputError(f"no such file: {path}")
        fmt = onnx.serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1]) or "protobuf"
        try:
            with open(path, "rb") as f:
                data = f.read()
            model = onnx.load_model_from_string(data, format=fmt)
        except DecodeError as err:
            raise InputError(f"{where} is not an ONNX model (or is truncated): {first_line(err)}") from None
        except (OSError, ValueError, RuntimeError) as err:  # unreadable file
            raise InputError(f"cannot read {where}: {first_line(err)}") from None
        if load_external_data(onnx, model, path, where):
            data = None  # the file is not all of the model
    if not model.HasField("graph") or model.ir_version == 0:
        raise InputError(f"{where} is not an ONNX model (no graph or IR version)")
    default_opset(model, where)  # an opset opc cannot read: say so before the checker does
    if not model.graph.name:  # the checker wants a name; SPEC.md: an unnamed graph is `main`
        data = None
        model.graph.name = "main"
    whole_file = data is not None
    if identify and data is None:
        data = model.SerializeToString()
    return model, data, whole_file


def check(model: Any, where: str) -> None:
    onnx = onnx_module()
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise InputError(f"{where} is not a valid ONNX model: {first_line(err)}") from None


def load_external_data(onnx, model, path: str, where: str) -> bool:  # noqa: ANN001
    """The tensors' external data read in, each file checked first to lie inside the model's folder
    (symbolic links resolved): a model must not make opc read, and compile into a module, a file
    elsewhere. Refused as one InputError line. Whether there was any."""
    from onnx import external_data_helper as helper

    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    tensors = [t for t in helper._get_all_tensors(model) if helper.uses_external_data(t)]
    for t in tensors:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = os.path.realpath(os.path.join(folder, location))
        if not location or os.path.isabs(location) or os.path.commonpath([folder, target]) != folder:
            raise InputError(f"{where}: tensor '{t.name}' keeps its data in '{location}', outside the model's "
                             f"folder {folder}: refused (external data must lie in the model's folder)")
    if tensors:
        try:
            helper.load_external_data_for_model(model, folder)
        except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as err:  # missing, cut short
            raise InputError(f"cannot read {where}'s external data: {first_line(err)}") from None
    return bool(tensors)


def domain_opsets(model) -> dict[str, int]:
    """The opset the model imports for each domain, ai.onnx under that name (not "")."""
    return {op.domain or "ai.onnx": op.version for op in model.opset_import}


def default_opset(model, where: str) -> int:
    versions = domain_opsets(model)
    version = versions.get("ai.onnx")
    if version is None and len(versions) > 0:
        # only other domains (ai.onnx.ml, ai.onnx.preview.training): the checker refuses an ai.onnx node
        # in it, so the ai.onnx opset only serves folding, where the newest is as good as any
        return max_opset()
    if version is None:
        raise UnsupportedError(f"{where} imports no ai.onnx opset; opc imports opsets {MIN_OPSET} to {max_opset()}")
    newest = max_opset()
    if version > newest:
        raise UnsupportedError(f"{where} uses ai.onnx opset {version}, newer than the installed onnx "
                       f"{onnx_module().__version__} knows ({newest}): upgrade onnx")
    if version < MIN_OPSET:
        raise UnsupportedError(f"{where} uses ai.onnx opset {version}; opc imports opsets {MIN_OPSET} to {newest}")
    return version


def dims_of(value_info) -> list[int | str | None]:
    """Static dims as ints, dynamic ones as their name (dim_param) or None."""
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return [None]
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


