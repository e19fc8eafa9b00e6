"""Errors meant for the user: the bottom layer, imported by every other. It imports nothing,
so that loading a compiled module from the cache (opc/compile_cache.py) does not import xDSL.

A small hierarchy, as xDSL's utils/exceptions.py: catch `OpcError` for all of them, or one
kind. A message says what went wrong, without an `error:` prefix: the CLI adds that once
(`error_line`), and a located one is written `file:line:col: error: what` by the class."""

from __future__ import annotations


class OpcError(Exception):
    """An error meant for the user: printed as one line, no traceback.

    `where` (optional) locates it in the user's input: `file:line:col`, or a file's name."""

    def __init__(self, message: str = "", *args: object, where: str | None = None):
        super().__init__(message, *args)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        text = super().__str__()
        return f"{self.where}: error: {text}" if self.where else text


class InputError(OpcError):
    """Bad input: MLIR that does not parse or verify (located: file:line:col), a malformed
    model, option, argument or environment variable."""


class UnsupportedError(OpcError):
    """Valid input opc cannot handle (yet): an op, dtype, opset or gradient order it lacks,
    or an op a target cannot run."""


class BuildError(OpcError):
    """Building the compiled code failed outside opc's control: no C compiler (or nvcc) on
    PATH, missing runtime headers, a device's own kernel source that does not compile."""


class InternalError(OpcError):
    """A bug in opc (the generated C does not compile, an invariant broke): please report it."""


def error_line(err: BaseException, text: str | None = None) -> str:
    """What the CLI prints for `err` (or its `text`): `error: what`, or `file:line:col: error: what`
    (a compiler's output may follow on the next lines)."""
    text = str(err) if text is None else text
    if isinstance(err, OpcError) and err.where or text.startswith("error:") or ": error:" in text.split("\n", 1)[0]:
        return text
    return f"error: {text}"


def first_line(err: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def printable(text: str) -> str:
    """`text` with every character that does not print as itself (NUL, ESC, a lone surrogate
    from undecodable input) written as its Python escape, as in '\\x00'; line breaks stay
    (a compiler's output quoted under a message)."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)
