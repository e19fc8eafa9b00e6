"""Reading and checking IR: a context with every dialect opc uses, a parser
that remembers where each op was written, and verification that reports
`file:line:col: error: ...` at the offending op."""

from __future__ import annotations

import os
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span

from opc.dialects.opc import Opc
from opc.dialects.opc_loops import OpcLoops
from opc.dialects.opc_sched import OpcSched


class OpcError(Exception):
    """An error meant for the user: printed as one line, no traceback."""


def make_context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, Opc, OpcLoops, OpcSched):
        ctx.load_dialect(dialect)
    return ctx


class LocatingParser(Parser):
    """A parser that records the source span of every op it builds."""

    def __init__(self, ctx: Context, text: str, name: str):
        super().__init__(ctx, text, name)
        self.spans: dict[int, Span] = {}
        self.ops: list[Operation] = []

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as err:  # a type constraint checked while parsing
            loc = span.get_location()
            raise OpcError(f"{loc.file}:{loc.line}:{loc.col}: error: {err}") from None
        self.spans[id(op)] = span
        self.ops.append(op)  # keeps ids unique while the spans are in use
        return op


@dataclass
class Source:
    module: ModuleOp
    name: str
    spans: dict[int, Span]

    def where(self, op: Operation) -> str:
        span = self.spans.get(id(op))
        if span is None:
            return self.name
        loc = span.get_location()
        return f"{loc.file}:{loc.line}:{loc.col}"


def parse_text(text: str, name: str = "<stdin>", ctx: Context | None = None) -> Source:
    """Parse and verify; raise OpcError with a located message on bad input."""
    parser = LocatingParser(ctx or make_context(), text, name)
    try:
        module = parser.parse_module()
    except ParseError as err:
        loc = err.span.get_location()
        raise OpcError(f"{loc.file}:{loc.line}:{loc.col}: error: {err.msg}") from None
    source = Source(module, name, parser.spans)
    verify(source)
    return source


def read_source(path: str) -> Source:
    if path == "-":
        import sys

        return parse_text(sys.stdin.read(), "<stdin>")
    if not os.path.isfile(path):
        raise OpcError(f"error: no such file: {path}")
    if path.endswith(".onnx"):
        from opc.onnx_import import import_onnx

        return Source(import_onnx(path)[0], path, {})
    with open(path, encoding="utf-8") as f:
        return parse_text(f.read(), path)


def verify(source: Source, stage: str = "") -> None:
    """Verify op by op, innermost first, so the message points at the culprit."""
    for op in source.module.walk(reverse=False):
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, DiagnosticException) as err:
            msg = str(err).strip().splitlines()
            text = next((line for line in msg if "Operation does not verify" in line), msg[-1] if msg else "")
            text = text.replace("Operation does not verify: ", "")
            after = f" (after {stage})" if stage else ""
            raise OpcError(f"{source.where(op)}: error: '{op.name}' op {text}{after}") from None


def load_module(src: str | os.PathLike[str] | ModuleOp) -> Source:
    """A path, MLIR text or ModuleOp, verified."""
    if isinstance(src, ModuleOp):
        source = Source(src, "<module>", {})
        verify(source)
        return source
    text = os.fspath(src)
    if "\n" not in text and (text.endswith((".mlir", ".onnx")) or os.path.exists(text)):
        return read_source(text)
    return parse_text(text, "<string>")
