"""Parsing and checking IR: a context with every dialect opc uses, a parser
that remembers where each op was written, and verification that reports
`file:line:col: error: ...` at the offending op. Reading files (and ONNX models)
is `opc/frontend.py`'s."""

from __future__ import annotations

import math as pymath
import re
import struct
import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf, tensor
from xdsl.dialects.builtin import AnyFloat, BFloat16Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Location, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

from opc.dialects.control import check_control_flow
from opc.dialects.opc import Opc, check_storable
from opc.dialects.opc_loops import OpcLoops
from opc.dialects.opc_sched import OpcSched
from opc.dialects.opc_stack import OpcStack
from opc.dialects.slices import check_slice
from opc.errors import InputError, InternalError, first_line, printable


def make_context() -> Context:
    ctx = Context()
    dialects = (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, tensor.Tensor, Opc,
                OpcLoops, OpcSched, OpcStack)
    for dialect in dialects:
        ctx.load_dialect(dialect)
    return ctx


# Deeper nesting than this of (), [], {} or <> is refused before parsing: xDSL's
# parser and printer recurse once per level (opc's own IR nests a few levels).
MAX_NESTING = 64
# A dense literal is expanded element by element (a splat too): past this it is refused.
MAX_DENSE_ELEMENTS = 1 << 22


class HexElement(Parser._TensorLiteralElement):
    """A hexadecimal dense-literal element: for a float type, the bits of the value (MLIR's meaning)."""

    def to_type(self, parser, type):  # noqa: ANN001, ANN201 - xDSL's signature
        if not isinstance(type, AnyFloat):
            return super().to_type(parser, type)
        width = type.bitwidth
        assert isinstance(self.value, int)  # a hexadecimal literal's bits
        if self.value >= 1 << width:
            parser.raise_error(f"hexadecimal float literal {self.span.text} has more than {width} bits",
                               at_position=self.span)
        if isinstance(type, BFloat16Type):  # bfloat16: the top half of a float32
            return struct.unpack("<f", struct.pack("<I", self.value << 16))[0]
        code = {16: ("<e", "<H"), 32: ("<f", "<I"), 64: ("<d", "<Q")}[width]
        return struct.unpack(code[0], struct.pack(code[1], self.value))[0]


class LocatingParser(Parser):
    """A parser that records the source span of every op it builds, and where each value
    was first used; it refuses an attribute an op of opc's dialects does not take."""

    def __init__(self, ctx: Context, text: str, name: str):
        super().__init__(ctx, text, name)
        self.spans: dict[int, Span] = {}
        self.ops: list[Operation] = []
        self.first_use: dict[str, Span] = {}  # %name -> its first use, for one used but never defined

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        """xDSL's parse_module, with its two end-of-input messages made to say what and where."""
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as err:
            if err.msg.startswith("values used but not defined"):
                undefined = sorted(self.forward_ssa_references, key=lambda n: self.first_use[n].start)
                also = f" (also {', '.join('%' + n for n in undefined[1:])})" if undefined[1:] else ""
                self.raise_error(f"%{undefined[0]} is used but never defined{also}", self.first_use[undefined[0]])
            if err.msg == "Could not parse entire input!":
                token = self._current_token
                if token.kind == MLIRTokenKind.EOF:
                    self.raise_error("the input holds no operation: expected a func.func (or a builtin.module)",
                                     Span(0, 0, token.span.input))
                self.raise_error(f"expected an operation here, got `{printable(token.text)}`")
            raise

    def resolve_operand(self, operand, type):  # noqa: ANN001, ANN201 - xDSL's signature
        if operand.operand_name not in self.ssa_values:  # a forward reference: remember where, for the error
            self.first_use.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as err:  # a type constraint checked while parsing
            loc = span.get_location()
            name = op_name_at(span.input.content, span.start)
            text = plain_verify_message(str(err))
            where = f"{loc.file}:{loc.line}:{loc.col}"
            raise InputError(f"'{name}' op {text}" if name else text, where=where) from None
        self.spans[id(op)] = span
        self.ops.append(op)  # keeps ids unique while the spans are in use
        self.check_attribute_names(op, span)
        return op

    def check_attribute_names(self, op: Operation, span: Span) -> None:
        """An op of opc's dialects takes the attributes it declares, and discardable ones named
        with a dialect prefix (`opc.stop_gradient`); `{foo = 1}` is refused, at the `foo`."""
        if not op.name.startswith(OWN_DIALECTS):
            return
        assert isinstance(op, IRDLOperation)  # opc's dialects: IRDL ops
        definition = op.get_irdl_definition()
        declared = {*definition.attributes, *definition.properties}
        for name in op.attributes:
            if "." not in name and name not in declared:
                text = span.input.content
                at = re.compile(rf"(?<![\w.$]){re.escape(name)}\s*=").search(text, span.start, self.pos)
                takes = f"it takes {', '.join(sorted(declared))}" if declared else "it takes none"
                self.raise_error(f"'{op.name}' op has no attribute '{name}' ({takes})",
                                 Span(at.start(), at.start() + len(name), span.input) if at else span)

    def _parse_dense_literal_type(self):  # noqa: ANN202 - xDSL's signature
        """The type of a dense literal, refused before its elements are expanded when too big."""
        start = self.pos
        t = super()._parse_dense_literal_type()
        count = pymath.prod(t.get_shape())
        if count > MAX_DENSE_ELEMENTS:
            self.raise_error(f"dense literal of {count} elements: opc takes at most {MAX_DENSE_ELEMENTS} (2^22) "
                             "elements in a constant", start, self.pos)
        return t

    def _parse_tensor_literal_element(self):  # noqa: ANN202 - xDSL's signature
        """An element of a dense literal; a hexadecimal one is kept as its bits (HexElement), since xDSL
        0.75 turns `0xFF800000` in a float literal into 4.29e9 instead of -inf (MLIR prints inf and NaN
        so: `dense<[0.0, 0xFF800000]> : tensor<2xf32>`)."""
        element = super()._parse_tensor_literal_element()
        if element.span.text[:2] in ("0x", "0X") and isinstance(element.value, int):
            return HexElement(element.is_negative, element.value, element.span)
        return element

    def parse_dense_int_or_fp_elements_attr(self, type):  # noqa: ANN001, ANN201 - xDSL's signature
        start = self.pos
        try:
            return super().parse_dense_int_or_fp_elements_attr(type)
        except OverflowError:  # struct.pack of a value its element type cannot hold (70000.0 in f16)
            self.raise_error("a value of this dense literal is out of range of its element type", start, self.pos)
        except NotImplementedError:  # dense<1> : tensor<2xi128>: xDSL packs at most 64 bits per element
            self.raise_error("dense literal elements must be at most 64 bits wide", start, self.pos)

    def _parse_builtin_densearray_attr(self):  # noqa: ANN202 - xDSL's signature
        start = self.pos
        try:
            return super()._parse_builtin_densearray_attr()
        except ZeroDivisionError:  # array<i0: ...>: elements of no bits
            self.raise_error("dense array elements must be at least 1 bit wide", start, self.pos)
        except NotImplementedError:  # array<i128: ...>: xDSL packs at most 64 bits per element
            self.raise_error("dense array elements must be at most 64 bits wide", start, self.pos)


OWN_DIALECTS = ("opc.", "opc_loops.", "opc_sched.")
# `%a, %b = "opc.exp"` or `opc.exp`: the op's name after its results
OP_NAME = re.compile(r'(?:%[^\s=]+(?:\s*,\s*%[^\s=]+)*\s*=\s*)?"?([A-Za-z_][\w$.]*)')
# xDSL's message when two types an op's definition ties together (one variable) differ
TIED_TYPES = re.compile(r"attribute (.+) expected from variable '[^']*', but got (.+)")


def op_name_at(text: str, start: int) -> str | None:
    m = OP_NAME.match(text, start)
    return m[1] if m else None


def plain_verify_message(text: str) -> str:
    """A verifier's message without xDSL's jargon: two types that must agree, both named."""
    m = TIED_TYPES.search(text)
    if m:
        return f"has {m[2]} where {m[1]} is expected: these operand and result types must be the same"
    return text


# What the pre-scan looks at: string literals (exactly the strings xDSL's lexer takes), a `"`
# that starts none, // comments, `->`, and brackets.
# The string pattern is Friedl's unrolled loop (plain runs, then escapes each followed by a plain
# run): linear in the literal's length, so a hex dense literal of megabytes scans in C speed.
PRESCAN_TOKENS = re.compile(r'(?P<string>"[^"\\\n\v\f]*(?:\\(?:["nt\\]|[0-9A-Fa-f]{2})[^"\\\n\v\f]*)*")|(?P<bad>")'
                            r'|//[^\n]*|->|(?P<open>[(\[{<])|(?P<close>[)\]}>])')


def prescan(text: str) -> tuple[int, str] | None:
    """(offset, why) of what xDSL's parser must not see: nesting deeper than MAX_NESTING (it
    recurses per level) and a malformed string literal (its lexer's regex backtracks
    exponentially on one)."""
    depth = 0
    for m in PRESCAN_TOKENS.finditer(text):
        if m.lastgroup == "open":
            depth += 1
            if depth > MAX_NESTING:
                return m.start(), f"nested deeper than {MAX_NESTING} levels"
        elif m.lastgroup == "close":
            depth = max(depth - 1, 0)
        elif m.lastgroup == "bad":
            return m.start(), ("string literal not closed on its line, or with an escape other than "
                               "\\n \\t \\\\ \\\" \\XX")
    return None


def decode(data: bytes, name: str) -> str:
    """UTF-8 text, or a located error at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[:err.start].decode("utf-8")
        raise InputError(f"not UTF-8 text: byte 0x{data[err.start]:02x} ({err.reason})",
                         where=location(before, name, len(before))) from None


def location(text: str, name: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    return f"{name}:{text.count(chr(10), 0, offset) + 1}:{offset - line_start + 1}"


@dataclass
class Source:
    module: ModuleOp
    name: str
    spans: dict[int, Span]
    weights: dict | None = None  # an ONNX model's initializers, by argument name (NumPy arrays)

    def where(self, op: Operation) -> str:
        span = self.spans.get(id(op))
        if span is None:
            return self.name
        loc = span.get_location()
        return f"{loc.file}:{loc.line}:{loc.col}"


def parse_text(text: str, name: str = "<stdin>", ctx: Context | None = None) -> Source:
    """Parse and verify; raise InputError with a located message on bad input."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark, as editors on Windows write it
    refused = prescan(text)
    if refused is not None:
        raise InputError(refused[1], where=location(text, name, refused[0]))
    # xDSL recurses a few frames per level of nesting; MAX_NESTING levels fit in this
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 8000))
    parser = None
    try:
        parser = LocatingParser(ctx or make_context(), text, name)  # lexes the first token
        module = parser.parse_module()
    except ParseError as err:
        loc = err.span.get_location()
        # xDSL's lexer leaves this field unfilled ("after {first_char}"): the % # ! or ^ before a bad name
        msg = err.msg.replace("{first_char}", f"'{err.span.text[:1]}'")
        if msg.startswith("Unexpected character: "):  # the character quoted, a NUL or ESC as its escape
            msg = f"Unexpected character: {printable(repr(msg.removeprefix('Unexpected character: ')))}"
        msg = printable(msg)
        raise InputError(msg, where=f"{loc.file}:{loc.line}:{loc.col}") from None
    except (RecursionError, MemoryError, OverflowError, ValueError, ArithmeticError, LookupError, AttributeError,
            TypeError, AssertionError, NotImplementedError) as err:  # xDSL gave up inside an attribute or type
        where = parser._current_token.span.get_location() if parser is not None else None
        loc = where or Location(name, 1, 1)
        why = "nested too deeply" if isinstance(err, RecursionError) else first_line(err)
        raise InputError(f"malformed input here: {why}", where=f"{loc.file}:{loc.line}:{loc.col}") from None
    source = Source(module, name, parser.spans)
    settle_names(module)
    verify(source)
    return source


def settled_name(hint: str | None) -> str | None:
    """`hint` in a form that xDSL's name_hint setter keeps as it is, or None when nothing is left.

    The setter drops a trailing `_<digits>` and refuses the empty string, so a hint it stored
    (`%_0` -> '', `%x_1_2` -> 'x_1') can fail or shrink when a pass copies it onto a new value
    (`new.name_hint = old.name_hint`, as xDSL's rewriter and opc's lowering do). Names are
    only hints: strip until nothing changes (and drop one the setter would refuse)."""
    if not SSAValue.is_valid_name(hint):
        return None
    while hint and SSAValue.extract_valid_name(hint) != hint:
        hint = SSAValue.extract_valid_name(hint)
    return hint or None


def settle_names(module: Operation) -> None:
    """Every value's name hint settled (see settled_name): any pass can copy it unchanged."""
    for op in module.walk():
        for v in op.results:
            v.name_hint = settled_name(v.name_hint)
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    arg.name_hint = settled_name(arg.name_hint)


def verify(source: Source, stage: str = "") -> None:
    """Verify op by op, outermost first, so the message points at the culprit: opc's rules
    for values and functions (opc-level IR), xDSL's verifiers, then dominance. Bad input is an
    InputError; IR that a pass (`stage`) made from verified IR and that fails is an InternalError."""
    after = f" (after {stage})" if stage else ""
    kind = InternalError if stage else InputError
    lowered = is_lowered(source.module)
    order = BlockOrder()
    for op in source.module.walk(reverse=False):
        try:
            if not lowered:
                check_values(op)
            op.verify(verify_nested_ops=False)
            check_dominance(op, order)
        except (VerifyException, DiagnosticException) as err:
            msg = str(err).strip().splitlines()
            text = next((line for line in msg if "Operation does not verify" in line), msg[-1] if msg else "")
            text = plain_verify_message(text.replace("Operation does not verify: ", ""))
            text = text.removeprefix(f"{op.name} ")  # a verifier that names its op: not twice
            raise kind(f"'{op.name}' op {text}{after}", where=source.where(op)) from None


def is_lowered(module: ModuleOp) -> bool:
    """opc-lower-to-loops ran on this module (its functions take memrefs and say how many are inputs)."""
    return any(isinstance(op, func.FuncOp) and "opc.num_inputs" in op.attributes for op in module.ops)


def check_values(op: Operation) -> None:
    """opc-level IR: functions with bodies over tensors, and every tensor one opc can hold
    (static, an admitted element type, at most 2^47 bytes; each op checks the ranks it takes)."""
    check_control_flow(op)
    check_slice(op)
    if isinstance(op, func.FuncOp):
        name = op.sym_name.data
        if not op.body.blocks:
            raise VerifyException(f"@{name} is a declaration without a body: opc compiles only functions it can see")
        args = op.body.blocks[0].args
        for i, t in enumerate(op.function_type.inputs.data):
            arg = f"%{args[i].name_hint}" if i < len(args) and args[i].name_hint else f"#{i}"
            check_signature_type(t, f"argument {arg} of @{name}")
        for i, t in enumerate(op.function_type.outputs.data):
            check_signature_type(t, f"result #{i} of @{name}")
    for i, r in enumerate(op.results):
        if isinstance(r.type, TensorType):
            check_storable(r.type, f"result #{i}")
    for region in op.regions:
        for block in region.blocks:
            for arg in block.args:
                if isinstance(arg.type, TensorType):
                    check_storable(arg.type, f"block argument %{arg.name_hint or arg.index}")


def check_signature_type(t: Attribute, what: str) -> None:
    if not isinstance(t, TensorType):
        raise VerifyException(f"{what} has type {t}: opc functions take and return tensors "
                              "(a scalar is a rank-0 tensor, e.g. tensor<f32>)")
    check_storable(t, what)


class BlockOrder:
    """Each op's position in its block, computed once per block."""

    def __init__(self) -> None:
        self.index: dict[int, dict[int, int]] = {}

    def __call__(self, op: Operation) -> int:
        block = op.parent_block()
        assert block is not None
        if id(block) not in self.index:
            self.index[id(block)] = {id(o): i for i, o in enumerate(block.ops)}
        return self.index[id(block)][id(op)]


def check_dominance(op: Operation, order: BlockOrder) -> None:
    """Every operand is defined before its use, in the use's block or one around it."""
    for operand in op.operands:
        block = operand.block if isinstance(operand, BlockArgument) else operand.owner.parent_block()
        user = ancestor_in(op, block)
        defined = user is not None and (isinstance(operand, BlockArgument)
                                        or isinstance(operand, OpResult) and order(operand.op) < order(user))
        if not defined:
            name = f"%{operand.name_hint}" if operand.name_hint else "an operand"
            where = "before its definition" if user is not None else "outside the region that defines it"
            raise VerifyException(f"uses {name} {where}")


def ancestor_in(op: Operation, block: Block | None) -> Operation | None:
    """op or the op around it that sits in `block`."""
    around: Operation | None = op
    while around is not None and around.parent_block() is not block:
        around = around.parent_op()
    return around
