"""The one place user-given text becomes C or CUDA source: function and value names, ONNX
graph, node and tensor names (they arrive as those), string attributes, doc strings and the
profiler's kernel labels. Whatever the text holds -- control characters, quotes, backslashes,
`*/`, `??/` trigraphs, non-ASCII -- the source stays one well-formed token or comment:

- c_symbol: an exported name (a function, a global) as a C identifier, unique per name;
- c_identifier: a local name's readable part (the emitter appends a counter for uniqueness);
- c_string: a string literal whose bytes are the text's UTF-8, every byte outside printable
  ASCII an octal escape, `?` escaped (no trigraph can form);
- c_comment: the text for the inside of a one-line /* */ comment.

It imports nothing of the compiler, so that loading a compiled module stays fast (abi.py uses it).
"""

from __future__ import annotations

import hashlib
import re

_IDENT = re.compile(r"[A-Za-z0-9_]+")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def c_symbol(name: str) -> str:
    """A function's name as C spells it: itself where it is a C identifier; otherwise (`@a.b`,
    `@"héllo"`) every other character becomes `_` and a hash of the name is appended, so that
    two names never meet. The C and CUDA emitters and the CFFI declarations all use it."""
    if _IDENT.fullmatch(name):  # after a prefix of opc's (opc_fn_, opc_k_), a leading digit is fine
        return name
    return f"{_NOT_IDENT.sub('_', name)}_{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def c_identifier(text: str | None, fallback: str = "v") -> str:
    """The readable part of a local C name: ASCII letters, digits and `_` only (every other
    character, `é` too, becomes `_`); the caller makes it unique (a counter suffix)."""
    return _NOT_IDENT.sub("_", text or fallback)


def _escape(text: str, plain: str, named: str) -> str:
    """Bytes of text's UTF-8 in `plain` as they are, in `named` after a backslash, every other one
    as a three-digit octal escape (never more digits: the next character is not read into it)."""
    out = []
    for b in text.encode("utf-8", "surrogatepass"):
        c = chr(b)
        if c in named:
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F and c in plain:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


_PRINTABLE = "".join(map(chr, range(0x20, 0x7F)))
_STRING_PLAIN = _PRINTABLE.translate({ord(c): None for c in '\\"?'})  # these three after a backslash
_COMMENT_PLAIN = _PRINTABLE.translate({ord(c): None for c in "\\?"})  # these two octal


def c_string(text: str) -> str:
    """A C string literal holding text's UTF-8 bytes (ffi.string(...).decode() gives text back)."""
    return '"' + _escape(text, _STRING_PLAIN, '\\"?') + '"'


def c_comment(text: str) -> str:
    """text for the inside of a one-line comment (/* */ or //): printable ASCII but `\\`, `?`, `*/`
    and `/*`; those and every other byte an octal escape (so no newline, no backslash ending a
    line, no trigraph, no end of the comment)."""
    return _escape(text, _COMMENT_PLAIN, "").replace("*/", "*\\057").replace("/*", "\\057*")
