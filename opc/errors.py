"""Errors meant for the user: the bottom layer, imported by every other. It imports nothing,
so that loading a compiled module from the cache (opc/compile_cache.py) does not import xDSL."""

from __future__ import annotations


class OpcError(Exception):
    """An error meant for the user: printed as one line, no traceback."""


def first_line(err: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def printable(text: str) -> str:
    """`text` with every character that does not print as itself (NUL, ESC, a lone surrogate
    from undecodable input) written as its Python escape, as in '\\x00'; line breaks stay
    (a compiler's output quoted under a message)."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)
