"""Large constants bound as data, never as C text.

A dense constant written as a C initializer list costs the C compiler time in proportion to its
size (a 256 MB CumSum triangle took 371 s of gcc). From DATA_MIN_BYTES up, the emitter instead
writes the constant's bytes to a file and has the assembler copy them into the extension's
read-only data (`.incbin`): the C source names the file by the hash of its bytes, so the module's
cache key (the hash of its source) still covers the data, and a cached module maps it from the
cache with the rest of the `.so`. The C code sees an ordinary `const T name[n]`.

Where the bytes come from: xDSL keeps a dense attribute's values packed in the element type's
C layout for f16/bf16/f32/f64, float8/6/4 (a byte each) and 8- to 64-bit integers, so they are
used as they are. i1 (stored as 0xff) and int4/int2 (xDSL sign-extends them; C keeps the low bits)
stay C text.
"""

from __future__ import annotations

import hashlib

from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute

from opc.dialects.opc import NARROW_FLOAT_TYPES

DATA_MIN_BYTES = 4096  # below this, an initializer list compiles in no time worth saving

# the assembler's include path (-Wa,-I) for the data files is the build's own directory
DATA_FILE_PREFIX = "opc_data_"


def element_bytes(t: Attribute) -> int | None:
    """Bytes per element where xDSL packs t as C stores it, else None."""
    if isinstance(t, (Float16Type, BFloat16Type, Float32Type, Float64Type)):
        return {Float16Type: 2, BFloat16Type: 2, Float32Type: 4, Float64Type: 8}[type(t)]
    if isinstance(t, NARROW_FLOAT_TYPES):  # float8/6/4: one byte, its bits as ml_dtypes has them
        return 1
    if isinstance(t, IndexType):
        return 8
    if isinstance(t, IntegerType) and t.width.data in (8, 16, 32, 64):
        return t.width.data // 8
    return None


def constant_bytes(value: DenseIntOrFPElementsAttr, n: int) -> bytes | None:
    """The n elements of a dense constant as C stores them, or None where that is not its packing."""
    size = element_bytes(value.get_element_type())
    if size is None:
        return None
    raw = value.data.data
    if len(raw) == size and n != 1:  # a splat kept as one value
        return raw * n
    return raw if len(raw) == size * n else None


def data_file(data: bytes) -> str:
    return f"{DATA_FILE_PREFIX}{hashlib.sha256(data).hexdigest()[:32]}.bin"


def data_definition(symbol: str, c_type: str, n: int, file: str, size: int) -> str:
    """The constant's symbol in .rodata, 64-byte aligned, filled from `file` by the assembler, and
    its C declaration (hidden: seen by every translation unit of the extension, none outside)."""
    asm = "\\n".join([".pushsection .rodata", ".balign 64", f".globl {symbol}", f".hidden {symbol}",
                      f".type {symbol}, @object", f".size {symbol}, {size}", f"{symbol}:",
                      f'.incbin \\"{file}\\"', ".popsection"])
    return (f'__asm__("{asm}");\n'
            f'extern __attribute__((visibility("hidden"))) const {c_type} {symbol}[{n}];')
