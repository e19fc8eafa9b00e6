"""Malformed input as a user meets it: each case gets `file:line:col: error:` at the
offending spot (or one `error:` line for non-IR input) and exit code 1, never a
traceback or "internal compiler error". The CLI runs in-process (its main()), so
the whole table costs no compiles; the few cases that need gcc share one module."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import opc
from opc.cli import main

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp.mlir"
CAST = ROOT / "examples" / "cast.mlir"

EXP = "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %r = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>\n" \
      "  func.return %r : tensor<4xf32>\n}\n"


def identity(t: str) -> str:
    """A function returning its argument of type t."""
    return f"func.func @f(%a: {t}) -> {t} {{\n  func.return %a : {t}\n}}\n"


def constant(literal: str, t: str) -> str:
    return f"func.func @f() -> {t} {{\n  %c = arith.constant {literal} : {t}\n  func.return %c : {t}\n}}\n"


def deep(opening: str, inner: str, closing: str, n: int = 500) -> str:
    return opening * n + inner + closing * n


# (id, input text, line:col of the error, a fragment of the message)
MALFORMED = [
    ("stray-first-char", "x" + EXP, "1:", "Operation xfunc.func is not registered"),
    ("stray-brace", "}" + EXP, "1:1", "error: expected an operation here, got `}`"),
    ("empty-file", "", "1:1", "error: the input holds no operation: expected a func.func"),
    ("only-a-comment", "// nothing\n\n", "1:1", "error: the input holds no operation"),
    ("used-never-defined", EXP.replace("opc.exp %a", "opc.exp %q"), "2:16", "error: %q is used but never defined"),
    ("two-used-never-defined", EXP.replace("opc.exp %a", "opc.add %q, %p").replace("(tensor<4xf32>)", "(tensor<4xf32>, "
                                                                                  "tensor<4xf32>)", 1),
     "2:16", "error: %q is used but never defined (also %p)"),
    ("unknown-attribute", EXP.replace("%a :", "%a {foo = 1} :"), "2:20",
     "error: 'opc.exp' op has no attribute 'foo' (it takes none)"),
    ("misspelt-attribute", EXP.replace("opc.exp %a :", "opc.softmax %a {axes = 0} :"), "2:24",
     "error: 'opc.softmax' op has no attribute 'axes' (it takes axis)"),
    ("result-of-another-dtype", EXP.replace("-> tensor<4xf32>\n  func", "-> tensor<4xf64>\n  func"), "2:3",
     "error: 'opc.exp' op has tensor<4xf64> where tensor<4xf32> is expected: these operand and result types must"),
    ("op-named-once", EXP.replace("opc.exp %a :", "opc.softmax %a {axis = 3} :"), "2:3",
     "error: 'opc.softmax' op axis 3 is out of range for rank 1"),
    ("parens-500-deep", "func.func @f() -> " + deep("(", "f32", ")") + " {\n}\n", "1:83", "nested deeper than 64"),
    ("attr-dict-500-deep", identity("tensor<4xf32>").replace(" {\n", " attributes {x = " + deep("{a = ", "1", "}")
                                                              + "} {\n", 1), "1:", "nested deeper than 64"),
    ("tensor-of-tensor-500-deep", identity(deep("tensor<", "f32", ">")), "1:", "nested deeper than 64"),
    ("splat-2^31-elements", constant("dense<1.5>", "tensor<2147483648xf32>"), "2:36",
     "dense literal of 2147483648 elements: opc takes at most 4194304"),
    ("splat-2^63-elements", constant("dense<1.5>", "tensor<9223372036854775808xf32>"), "2:36",
     "dense literal of 9223372036854775808 elements"),
    ("shape-2^63", identity("tensor<9223372036854775808xf32>"), "1:1",
     "argument %a of @f (tensor<9223372036854775808xf32>) has 9223372036854775808 elements"),
    ("shape-2^62", identity("tensor<4611686018427387904xf32>"), "1:1", "bytes: opc bounds a tensor at 2^47 bytes"),
    ("shape-2^64", identity("tensor<18446744073709551616xi8>"), "1:1", "opc bounds a tensor at 2^47 bytes"),
    ("value-2^48-bytes", "func.func @f(%a: tensor<4xf32>) -> tensor<f32> {\n"
                         "  %b = opc.broadcast_to %a : (tensor<4xf32>) -> tensor<65536x1073741824x4xf32>\n"
                         "  %r = opc.reduce_sum %b {axes = array<i64: 0, 1, 2>} : (tensor<65536x1073741824x4xf32>) "
                         "-> tensor<f32>\n  func.return %r : tensor<f32>\n}\n",
     "2:3", "result #0 (tensor<65536x1073741824x4xf32>) has 281474976710656 elements"),
    ("f16-literal-overflow", constant("dense<70000.0>", "tensor<2xf16>"), "2:28",
     "out of range of its element type"),
    ("array-i0", EXP.replace("%r = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>",
                             "%r = opc.reduce_sum %a {axes = array<i0: 0>} : (tensor<4xf32>) -> tensor<f32>"),
     "2:39", "dense array elements must be at least 1 bit wide"),
    ("array-i128", EXP.replace("%r = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>",
                               "%r = opc.reduce_sum %a {axes = array<i128: 0>} : (tensor<4xf32>) -> tensor<f32>"),
     "2:39", "dense array elements must be at most 64 bits wide"),
    ("array-i128-on-a-function", EXP.replace(" {\n", " attributes {a = array<i128: 1>} {\n", 1), "1:71",
     "dense array elements must be at most 64 bits wide"),
    ("empty-array-ui72", EXP.replace(" {\n", " attributes {a = array<ui72>} {\n", 1), "1:71",
     "dense array elements must be at most 64 bits wide"),
    ("literal-i128", constant("dense<1>", "tensor<2xi128>"), "2:28", "dense literal elements must be at most 64 bits"),
    ("use-before-definition", "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                              "  %r = opc.exp %s : (tensor<4xf32>) -> tensor<4xf32>\n"
                              "  %s = opc.exp %a : (tensor<4xf32>) -> tensor<4xf32>\n"
                              "  func.return %r : tensor<4xf32>\n}\n", "2:3", "'opc.exp' op uses %s before its definition"),
    ("scalar-argument", EXP.replace("(%a: tensor<4xf32>)", "(%s: f32, %a: tensor<4xf32>)"), "1:1",
     "argument %s of @f has type f32: opc functions take and return tensors"),
    ("private-declaration", "func.func private @g(tensor<4xf32>) -> tensor<4xf32>\n" + EXP, "1:1",
     "@g is a declaration without a body"),
    ("tensor-of-tensor", identity("tensor<3xtensor<2xf32>>"), "1:1",
     "argument %a of @f has unsupported element type tensor<2xf32>"),
    ("bare-non-ascii-name", EXP.replace("@f", "@héllo"), "1:13", "'(' expected"),
    ("nul-in-an-op-name", EXP.replace("opc.exp", "opc.e\x00xp"), "2:13", "Unexpected character: '\\x00'"),
    ("escape-character", EXP.replace("opc.exp", "opc.\x1bexp"), "2:12", "Unexpected character: '\\x1b'"),
    ("unfilled-field-in-xdsl-message", EXP.replace("%a", "%é"), "1:14", "Expected suffix identifier after '%'"),
]  # fmt: skip


def run_cli(capsys, *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().err


def assert_one_located_error(err: str, path: Path, where: str, fragment: str) -> None:
    assert "internal compiler error" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{path}:{where}"), err
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: error: ", err), err
    assert fragment in err, err


@pytest.mark.parametrize("text,where,fragment", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_input_gets_a_located_error(tmp_path, capsys, text, where, fragment):
    path = tmp_path / "bad.mlir"
    path.write_text(text, encoding="utf-8")
    for command in (["opt"], ["compile", "--emit", "c"]):
        rc, err = run_cli(capsys, command[0], str(path), *command[1:])
        assert rc == 1
        assert_one_located_error(err, path, where, fragment)


def test_byte_order_mark_is_accepted(tmp_path, capsys):
    path = tmp_path / "bom.mlir"
    path.write_text("\ufeff" + EXP, encoding="utf-8")
    rc, err = run_cli(capsys, "opt", str(path))
    assert rc == 0 and err == ""


def test_nesting_within_the_bound_is_fine(tmp_path, capsys):
    path = tmp_path / "nested.mlir"
    path.write_text(EXP.replace(" {\n", " attributes {x = " + deep("[", "1", "]", 60) + "} {\n", 1))
    assert main(["opt", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "x = " + "[" * 60 + "1" in out


def test_lowering_twice_says_the_module_is_lowered(tmp_path, capsys):
    rc, err = run_cli(capsys, "opt", str(MLP), "-p", "opc-lower-to-loops,opc-lower-to-loops")
    assert rc == 1 and err == "error: opc-lower-to-loops: the module is already lowered (opc-lower-to-loops ran)\n"
    lowered = tmp_path / "lowered.mlir"
    assert main(["opt", str(MLP), "-p", "opc-lower-to-loops", "-o", str(lowered)]) == 0
    for command in ("compile", "explain"):
        rc, err = run_cli(capsys, command, str(lowered))
        assert rc == 1 and "the module is already lowered" in err and len(err.splitlines()) == 1, err


def test_device_toml_nested_deeply(tmp_path, capsys):
    path = tmp_path / "deep.toml"
    path.write_text('name = "deep"\nkernels = ["add"]\nx = ' + deep("[", "1", "]", 100_000) + "\n")
    rc, err = run_cli(capsys, "explain", str(MLP), "--target", str(path))
    assert rc == 1 and err == f"error: {path}: malformed target file: arrays or tables nested too deeply\n"


@pytest.mark.parametrize("args,message", [
    (["compile", str(MLP), "--grad", "3"], "error: argument --grad: invalid choice: 3 (choose from 1, 2)"),
    (["frobnicate"], "error: argument command: invalid choice: 'frobnicate'"),
    ([], "error: the following arguments are required: command"),
])  # fmt: skip
def test_bad_command_line_is_one_error_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.startswith(message) and len(err.splitlines()) == 1, err


def test_a_file_that_is_not_utf8_is_located(tmp_path, capsys, monkeypatch):
    """The file, line and column of the first byte that is not UTF-8, from a file and from stdin."""
    import io
    import sys

    data = EXP.encode().replace(b"opc.exp", b"opc.\xffexp")
    path = tmp_path / "latin.mlir"
    path.write_bytes(data)
    for command in (["opt"], ["compile", "--emit", "c"], ["explain"]):
        rc, err = run_cli(capsys, command[0], str(path), *command[1:])
        assert rc == 1 and err == f"{path}:2:12: error: not UTF-8 text: byte 0xff (invalid start byte)\n", err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    rc, err = run_cli(capsys, "opt", "-")
    assert rc == 1 and err == "<stdin>:2:12: error: not UTF-8 text: byte 0xff (invalid start byte)\n", err


def test_a_path_in_a_pass_option_needs_no_quotes(tmp_path, capsys):
    """`opc-decompose{target=dev.toml}` reads as `target="dev.toml"` (xDSL's lexer stops at the dot)."""
    toml = ROOT / "examples" / "device_no_fused.toml"
    outs = []
    for spec in (f'opc-decompose{{target="{toml}"}}', f"opc-decompose{{target={toml}}}",
                 f"opc-decompose{{ops=fused_gemm_epilogue target={toml}}},cse"):
        rc, err = run_cli(capsys, "opt", str(MLP), "-p", spec, "-o", str(tmp_path / "out.mlir"))
        assert rc == 0, err
        outs.append((tmp_path / "out.mlir").read_text())
    assert outs[0] == outs[1] and "opc.fused_gemm_epilogue" not in outs[0]  # the target has no fused kernel
    assert "opc.fused_gemm_epilogue" not in outs[2] and "opc.cast" in outs[2]  # a list of ops, then the path
    rc, err = run_cli(capsys, "opt", str(MLP), "-p", "opc-decompose{target=dev.toml")  # no closing brace
    assert rc == 1 and err.startswith("error: bad pass pipeline 'opc-decompose{target=dev.toml' at column 25: "
                                      "Unknown token (an option value other than a word or number goes in quotes: "
                                      'target="dev.toml")'), err


def test_an_error_of_several_arguments_reads_as_one_sentence(monkeypatch, capsys):
    """xDSL raises ValueError(what, hint): the line shows both, not the tuple str() makes of them."""
    import opc.cli

    def fail(args):  # noqa: ANN001, ANN202
        raise ValueError("Invalid name `x`.", "Use letters.")

    monkeypatch.setattr(opc.cli, "cmd_opt", fail)
    assert main(["opt", str(CAST)]) == 1
    assert capsys.readouterr().err == "error: Invalid name `x`. Use letters.\n"


# ---------------------------------------------------------------------------
# What used to fail on valid input: zero-size constants, names that are not C identifiers
# ---------------------------------------------------------------------------

NAMES = """
func.func @a.b(%a: tensor<3xf32>) -> tensor<3xf32> {
  %r = opc.exp %a : (tensor<3xf32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
func.func @a$b(%a: tensor<3xf32>) -> tensor<3xf32> {
  %r = opc.neg %a : (tensor<3xf32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
func.func @"héllo"(%a: tensor<3xf32>) -> tensor<3xf32> {
  %c = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %r = opc.mul %a, %c : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
func.func @a_b(%a: tensor<0xf32>) -> tensor<0xf32> {
  %c = arith.constant dense<> : tensor<0xf32>
  %r = opc.add %a, %c : (tensor<0xf32>, tensor<0xf32>) -> tensor<0xf32>
  func.return %r : tensor<0xf32>
}
"""


MODULE_ATTRIBUTES = ["no_grad", "_functions", "path", "__getitem__"]
NAMES += "".join(NAMES.split("func.func @a$b")[0].replace("@a.b", f"@{name}") for name in MODULE_ATTRIBUTES)


@pytest.fixture(scope="module")
def names():
    return opc.compile(NAMES, grad=True)


def test_function_names_that_are_not_c_identifiers(names):
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(names["a.b"](x), np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(names["a$b"](x), -x)
    np.testing.assert_array_equal(names["héllo"](x), x * [1, 2, 3])
    assert names.héllo is names["héllo"]  # a Python identifier: an attribute too
    np.testing.assert_allclose(names["a.b_grad"](x, np.ones(3, np.float32)), np.exp(x), rtol=1e-6)
    with pytest.raises(KeyError, match="no function 'a.c'"):
        names["a.c"]


@pytest.mark.parametrize("name", MODULE_ATTRIBUTES)
def test_function_named_like_a_module_attribute(names, name):
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(names[name](x), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(names[f"{name}_grad"](x, np.ones(3, np.float32)), np.exp(x), rtol=1e-6)
    assert names.no_grad == {} and "a.b" in names._functions  # the module's own attributes still work


def test_mangled_c_symbols_are_identifiers_and_distinct():
    from opc.lowering.abi import c_symbol

    mangled = {c_symbol(n) for n in ["a.b", "a$b", "a_b", "héllo", "a b", "1x"]}
    assert len(mangled) == 6 and all(re.fullmatch(r"[A-Za-z0-9_]+", s) for s in mangled)
    assert c_symbol("a_b") == "a_b"  # identifiers are kept


def test_zero_size_dense_constant(names):
    assert names.a_b(np.zeros(0, np.float32)).shape == (0,)


# ---------------------------------------------------------------------------
# The Python API's arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(target=None), TypeError, "target must be 'cpu', 'cuda' or the path of a device .toml file, got None"),
    (dict(target=3), TypeError, "target must be 'cpu', 'cuda' or the path of a device .toml file, got 3"),
    (dict(cache_dir=3), TypeError, "cache_dir must be a directory path, got 3"),
    (dict(decompose=["exp"]), TypeError, "decompose must be a comma-separated string"),
])  # fmt: skip
def test_api_argument_errors(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        opc.compile(str(CAST), **kwargs)


def test_api_cache_dir_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=re.escape(f"cache_dir '{blocker}' is a file, not a directory")):
        opc.compile(str(CAST), cache_dir=str(blocker))
    with pytest.raises(ValueError, match="a part of its path is a file"):
        opc.compile(str(CAST), cache_dir=str(blocker / "sub"))


def test_api_source_types():
    with pytest.raises(TypeError, match="source must be a path, MLIR text or a ModuleOp, got int"):
        opc.compile(3)
    with pytest.raises(ValueError, match="MLIR given as bytes must be UTF-8"):
        opc.compile(b"\xff\xfe")
    with pytest.raises(opc.OpcError, match=r"^<bytes>:1:1: error: "):
        opc.compile(b"}")
    m = opc.compile(CAST.read_bytes())  # UTF-8 bytes are MLIR text
    x = np.linspace(-5, 300, 24).reshape(2, 3, 4)
    np.testing.assert_array_equal(m.cast(x), np.clip(np.trunc(x), 0, 255))


# ---------------------------------------------------------------------------
# The kinds of error (opc/errors.py): catch OpcError, or one kind
# ---------------------------------------------------------------------------


def test_bad_input_is_an_input_error_located():
    from opc.autodiff import add_grad_functions
    from opc.errors import InputError
    from opc.ir import parse_text

    with pytest.raises(InputError) as err:
        opc.compile(EXP.replace("opc.exp", "opc.frob"))
    assert err.value.where.startswith("<string>:2:") and str(err.value) == f"{err.value.where}: error: Operation " \
        "opc.frob is not registered"
    assert "error" not in err.value.message  # the class writes the `error:` of a located message
    with pytest.raises(InputError, match=r"^no function @g in the module$") as err:
        add_grad_functions(parse_text(EXP).module, ["g"])
    assert err.value.where is None


def test_unsupported_is_an_unsupported_error():
    from opc.autodiff import add_grad_functions
    from opc.errors import InputError, UnsupportedError
    from opc.ir import parse_text

    with pytest.raises(UnsupportedError, match=r"^gradients of order 3 are not supported \(1 to 2\)$"):
        add_grad_functions(parse_text(EXP).module, order=3)
    assert not issubclass(UnsupportedError, InputError) and issubclass(UnsupportedError, opc.OpcError)


def test_messages_leave_the_prefix_to_the_cli():
    """Only opc/onnx_import (its files moving at the time) still types `error:` in a message."""
    typed = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "opc").rglob("*.py"))
             if "onnx_import" not in path.parts
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"""Error\(f?["']error: """, line)]
    assert typed == []


def test_the_kinds_are_opc_errors_exported_from_opc():
    from opc import errors

    for kind in ("InputError", "UnsupportedError", "BuildError", "InternalError"):
        assert getattr(opc, kind) is getattr(errors, kind) and issubclass(getattr(opc, kind), opc.OpcError)
    assert len({opc.InputError, opc.UnsupportedError, opc.BuildError, opc.InternalError}) == 4
