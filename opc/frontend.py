"""Where a program comes from: a .mlir path, MLIR text, a ModuleOp or an .onnx model, each
read into a verified `Source`. The one place that knows both frontends (MLIR and ONNX)."""

from __future__ import annotations

import os
import sys

from xdsl.dialects.builtin import ModuleOp

from opc.errors import InputError
from opc.ir import Source, decode, parse_text, settle_names, verify
from opc.onnx_import import import_onnx


def read_source(path: str) -> Source:
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)  # bytes, so that non-UTF-8 input is located like a file's
        return parse_text(decode(stdin.read(), "<stdin>") if stdin else sys.stdin.read(), "<stdin>")
    if not os.path.isfile(path):
        raise InputError(f"no such file: {path}")
    if path.endswith(".onnx"):
        module, weights = import_onnx(path)
        settle_names(module)
        return Source(module, path, {}, weights)
    with open(path, "rb") as f:
        return parse_text(decode(f.read(), path), path)


def load_module(src: str | bytes | os.PathLike[str] | ModuleOp) -> Source:
    """A path, MLIR text (str, or bytes in UTF-8) or ModuleOp, verified."""
    if isinstance(src, ModuleOp):
        source = Source(src, "<module>", {})
        settle_names(src)
        verify(source)
        return source
    if isinstance(src, (bytes, bytearray)):
        try:
            return parse_text(bytes(src).decode("utf-8"), "<bytes>")
        except UnicodeDecodeError as err:
            raise ValueError(f"source: MLIR given as bytes must be UTF-8 ({err})") from None
    if not isinstance(src, (str, os.PathLike)):
        raise TypeError(f"source must be a path, MLIR text or a ModuleOp, got {type(src).__name__}")
    text = os.fspath(src)
    if "\n" not in text and (text.endswith((".mlir", ".onnx")) or os.path.exists(text)):
        return read_source(text)
    return parse_text(text, "<string>")
