"""Errors meant for the user: the bottom layer, imported by every other."""

from __future__ import annotations


class OpcError(Exception):
    """An error meant for the user: printed as one line, no traceback."""


def first_line(err: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
