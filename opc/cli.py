"""`opc opt | compile | explain | check | profile`: a thin layer over opc's Python API.

Every error meant for the user is an OpcError (or ValueError) printed as one
line, exit code 1; no traceback ever reaches the terminal. The `error:` prefix is
added here (opc.errors.error_line), not by the messages.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from opc.errors import InputError, OpcError, UnsupportedError, error_line, printable
from opc.frontend import read_source
from opc.ir import Source, is_lowered, verify


def run_pipeline(source: Source, spec: str) -> None:
    """Apply `-p` passes through xDSL's PassPipeline, verifying after each."""
    from xdsl.passes import PassPipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    from opc.ir import make_context
    from opc.transforms import get_all_passes

    available = get_all_passes()
    try:
        pipeline = PassPipeline.parse_spec(available, quote_bare_values(spec))
    except ValueError as err:
        text = str(err)
        if m := re.fullmatch(r"Unrecognized passes: \[(.*)\]", text):  # xDSL shows a Python list of them
            text = f"unknown pass {m[1].replace(chr(39), '')}"
        raise InputError(f"{text} (available: {', '.join(sorted(available))})") from None
    except (ArgSpecParseError, Exception) as err:  # malformed options of a known pass
        raise InputError(f"bad pass pipeline '{spec}'{pipeline_error(str(err))}") from None
    ctx = make_context()
    for p in pipeline.passes:
        if p.name.startswith("opc-") and is_lowered(source.module):  # opc's passes read opc-level IR
            raise InputError(f"{p.name}: the module is already lowered (opc-lower-to-loops ran)")
        p.apply(ctx, source.module)
        verify(source, stage=p.name)


# A pass option's value that xDSL's pipeline lexer takes bare: a number, or a word of [A-Za-z0-9_-]
BARE_WORD = re.compile(r"[-+]?[0-9]+(\.[0-9]*([eE][-+]?[0-9]+)?)?|[A-Za-z0-9_-]+")
OPTION_VALUE = re.compile(r'"(?:[^"\\]|\\.)*"|(?<=[=,])[^\s"{}=,\[\]]+')  # a quoted string is left alone


def quote_bare_values(spec: str) -> str:
    """`opc-decompose{target=dev.toml}` as `opc-decompose{target="dev.toml"}`: xDSL's lexer stops
    at the `.` or `/` of an unquoted path; a value of other words or numbers stays as written."""

    def options(m: re.Match[str]) -> str:
        return OPTION_VALUE.sub(lambda v: v[0] if v[0][0] == '"' or BARE_WORD.fullmatch(v[0]) else f'"{v[0]}"', m[0])

    return re.sub(r'\{(?:[^{}\[\]"]|"(?:[^"\\]|\\.)*")*\}', options, spec)


def pipeline_error(text: str) -> str:
    """': at column N: what' from xDSL's multi-line message (location, the spec, a caret, the
    reason), with a hint where a value needed quotes."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    where = next((m for ln in lines if (m := re.fullmatch(r"pass-pipeline:\d+:(\d+)", ln))), None)
    why = lines[-1] if lines else text
    if why == "Unknown token":
        why += ' (an option value other than a word or number goes in quotes: target="dev.toml")'
    return f" at column {where[1]}: {why}" if where else f": {why}"


def cmd_opt(args: argparse.Namespace) -> None:
    if args.file is None:  # stdin, as mlir-opt reads it; a person at a terminal is told so
        args.file = "-"
        if sys.stdin.isatty():
            print("opc opt: reading MLIR from stdin (end it with Ctrl-D), or give a FILE", file=sys.stderr)
    source = read_source(args.file)
    if args.passes:
        run_pipeline(source, args.passes)
    text = str(source.module) + "\n"
    if args.generic:
        import io

        from xdsl.printer import Printer

        buf = io.StringIO()
        Printer(stream=buf, print_generic_format=True).print_op(source.module)
        text = buf.getvalue() + "\n"
    write_output(text, args.output)


def write_output(text: str, path: str | None) -> None:
    if path in (None, "-"):
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def cmd_compile(args: argparse.Namespace) -> None:
    from opc.api import compile_to_dir, emit

    source = read_source(args.file)
    if args.emit:
        write_output(emit(source, args.emit, target=args.target, grad=args.grad, decompose=args.decompose,
                          fuse=args.fuse), None)
        return
    out_dir = args.output or DEFAULT_OUTPUT
    name = os.path.splitext(os.path.basename(args.file))[0] if args.file != "-" else "model"
    with chosen_march("portable" if args.portable else args.march):
        from opc.lowering.build import march, target_flags

        written = compile_to_dir(source, out_dir, name, target=args.target, grad=args.grad,
                                 decompose=args.decompose, fuse=args.fuse)
        native = march() == "native" and any(f.startswith("-march=") for f in target_flags())
    for path in written:
        print(f"wrote {path}")
    if native and args.target != "cuda":
        print("note: built for this machine's CPU (-march=native), it may not run on another; "
              "--portable builds for any CPU of this architecture")
    if any(path.endswith(".py") for path in written):
        print(f"use it: sys.path.insert(0, {out_dir!r}); import {name}"
              + (f"; weights = numpy.load({os.path.join(out_dir, name + '.npz')!r})" if source.weights else ""))


@contextlib.contextmanager
def chosen_march(value: str | None) -> Iterator[None]:
    """$OPC_MARCH (opc/lowering/build.py: march) set to `value` for one command, then as it was."""
    if value is None:
        yield
        return
    before = os.environ.get("OPC_MARCH")
    os.environ["OPC_MARCH"] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ["OPC_MARCH"]
        else:
            os.environ["OPC_MARCH"] = before


# `opc compile` without -o: a folder of its own, not the current directory (three files per
# model) nor build/ (setuptools' own)
DEFAULT_OUTPUT = "opc_out"


def examples_dir() -> str:
    """examples/ of a source checkout, or the copy of its small files inside the package (setup.py)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "_examples"), os.path.join(os.path.dirname(here), "examples")):
        if os.path.isfile(os.path.join(candidate, "mlp.mlir")):
            return candidate
    raise InputError("opc's examples were not found next to the package (reinstall opc)")


def cmd_example(args: argparse.Namespace) -> None:
    """`opc example`: the examples' names; `opc example NAME`: the file, to stdout or -o FILE."""
    directory = examples_dir()
    shipped = sorted(f for f in os.listdir(directory) if f.endswith((".mlir", ".toml")))
    if args.name is None:
        write_output("".join(f"{f}\n" for f in shipped), None)
        return
    name = args.name if args.name in shipped else f"{args.name}.mlir"
    if name not in shipped:
        raise InputError(f"no example '{args.name}' (examples: {', '.join(shipped)})")
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        write_output(f.read(), args.output)
    if args.output not in (None, "-"):
        print(f"wrote {args.output}")


def cmd_explain(args: argparse.Namespace) -> None:
    from opc.explain import ExplainError, explain, explain_target

    if args.file is None:  # the device itself: every op's route, per attribute value
        write_output(explain_target(args.target), None)
        return
    source = read_source(args.file)
    if is_lowered(source.module):
        raise InputError(f"{args.file}: the module is already lowered (opc-lower-to-loops ran); "
                         "explain takes opc-level IR")
    if args.kernels:
        from opc.explain import explain_kernels

        write_output(explain_kernels(source.module, args.target, grad=args.grad, fuse=args.fuse), None)
        return
    try:
        write_output(explain(source.module, args.target, grad=args.grad, fuse=args.fuse), None)
    except ExplainError as err:  # the table still helps: it shows which op cannot run
        write_output(err.table, None)
        raise UnsupportedError(str(err).split("\n", 1)[0]) from None


def cmd_import(args: argparse.Namespace) -> None:
    from opc.onnx_import import parse_shapes, write_import

    for path in write_import(args.file, args.output, parse_shapes(args.shape), args.constant):
        print(f"wrote {path}")


PROFILE_SIZE = 64  # opc profile's size for a `?` dim of a random input (--inputs gives others)


def cmd_profile(args: argparse.Namespace) -> None:
    """Compile (or load from the cache), run every function on random inputs, print the kernel table."""
    import itertools

    import numpy as np

    from opc.api import compile as compile_module
    from opc.lowering.build import numpy_dtype
    from opc.onnx_load import cache_aligned
    from opc.profiler import Profile, extension_of

    if args.repeat < 1:
        raise InputError(f"--repeat must be at least 1, got {args.repeat}")
    inference = onnx_inference(args.file) if args.file.endswith(".onnx") and not args.grad else None
    module = compile_module(inference[0] if inference else args.file, grad=args.grad, fuse=args.fuse)
    rng = np.random.default_rng(0)

    def random_input(shape: tuple[int, ...], dtype: str) -> np.ndarray:
        if dtype in ("float16", "bfloat16", "float32", "float64"):  # integers: 0, a valid index everywhere
            return rng.standard_normal(shape).astype(numpy_dtype(dtype))
        return np.zeros(shape, numpy_dtype(dtype))

    given = load_profile_inputs(args.inputs)
    weights, weights_from = (inference[1], f"{args.file}'s initializers, BatchNorms folded as opc.load_onnx "
                             "folds them") if inference else model_weights(args.file)

    def argument(function: str, name: str, shape: tuple[int | str, ...], dtype: str) -> np.ndarray:
        if given is not None and name in given:
            return given[name]
        if name in weights:
            return weights[name]
        if given is None:  # a run-time size (a symbol such as 'n0') takes PROFILE_SIZE
            return random_input(tuple(d if isinstance(d, int) else PROFILE_SIZE for d in shape), dtype)
        raise InputError(f"--inputs {args.inputs} has no array '{name}' for {function}()")

    calls = []
    for function, fn in module._functions.items():
        inputs = [argument(function, name, shape, dtype) for name, shape, dtype in fn.sig.inputs]
        # the model's weights bound frozen, as opc.load_onnx binds them: kernels time their packed copies
        n_weights = len(list(itertools.takewhile(lambda s: s[0] in weights and (given is None or s[0] not in given),
                                                 reversed(fn.sig.inputs))))
        if n_weights:
            fn, inputs = fn.with_last(cache_aligned(inputs[len(inputs) - n_weights:]), frozen=True), \
                inputs[:len(inputs) - n_weights]
        fn(*inputs)  # warm-up: page faults, OpenMP's threads, packing the frozen weights
        calls.append((fn, inputs))
    prof = Profile(extension_of(module))
    with prof:
        for _ in range(args.repeat):
            for fn, inputs in calls:
                fn(*inputs)
    print(f"{args.file}: {len(calls)} functions x {args.repeat} calls, {len(prof.rows())} kernels"
          + (f"; weights from {weights_from}" if weights_from else ""))
    print(prof.table())
    if routes := prof.routes_table():
        print(routes)
    if args.trace:
        prof.chrome_trace(args.trace)
        print(f"wrote {args.trace}")


def onnx_inference(path: str) -> tuple[Any, dict]:
    """An .onnx model as opc.load_onnx runs it (each inference BatchNorm after a Conv folded into it,
    onnx_import/fold.py) and its weights: the kernels `opc profile` times are the ones it runs."""
    from opc.onnx_import import import_onnx
    from opc.onnx_import.fold import fold_batch_norms
    from opc.onnx_import.proto import load

    return import_onnx(fold_batch_norms(load(path, path)))


def model_weights(path: str) -> tuple[dict, str | None]:
    """The weights a model's arguments have (by argument name) and where they come from: an .onnx
    file's initializers, or the .npz twin `opc import` wrote next to an .mlir file. Random weights
    would time another model: N(0, 1) weights blow the activations up, and the subnormal floats
    they end in make a GEMM 30x slower."""
    import os

    if path.endswith(".onnx"):
        from opc.onnx_import import import_onnx

        return import_onnx(path)[1], f"{path}'s initializers"
    for twin in (os.path.splitext(path)[0] + ".npz", path + ".npz"):
        if twin != path and os.path.isfile(twin):
            return load_profile_inputs(twin) or {}, twin
    return {}, None


def load_profile_inputs(source: str) -> dict | None:
    """`--inputs random` (None: every function gets seeded random arrays) or an .npz of arrays by argument name."""
    import numpy as np

    if source == "random":
        return None
    try:
        with np.load(source) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as e:
        raise InputError(f"--inputs {source}: not 'random' nor a readable .npz ({e})") from None


class ArgumentParser(argparse.ArgumentParser):
    """A bad command line is bad input too: one `error:` line and exit code 1 (argparse: usage and 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from opc import version

    parser = ArgumentParser(prog="opc", description="op compiler for deep-learning ops and their gradients")
    parser.add_argument("--version", action="version", version=f"opc {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    opt = sub.add_parser("opt", help="apply passes and print the IR (like xdsl-opt)")
    opt.add_argument("file", nargs="?", help="input .mlir file, or - (the default) for stdin, as mlir-opt reads it")
    opt.add_argument("-p", "--passes", default="", help="comma-separated pass pipeline")
    opt.add_argument("-o", "--output", help="output file (default stdout)")
    opt.add_argument("--generic", action="store_true", help="print the generic MLIR form")
    opt.set_defaults(func=cmd_opt)

    comp = sub.add_parser("compile", help="compile a model into an importable module")
    comp.add_argument("file")
    comp.add_argument("--target", default="cpu", help="cpu, cuda, or a device FILE.toml")
    comp.add_argument("-o", "--output", help=f"output directory (default {DEFAULT_OUTPUT}/)")
    add_grad_options(comp, "also build NAME_grad and NAME_value_and_grad for every function; --grad 2: "
                           "also NAME_grad_grad")
    comp.add_argument("--decompose", default="", help="ops to decompose (comma list, or all)")
    comp.add_argument("--emit", choices=["mlir", "c", "cuda"], help="print lowered IR or source instead")
    arch = comp.add_mutually_exclusive_group()
    arch.add_argument("--portable", action="store_true",
                      help="build for any CPU of this architecture; by default opc builds for this machine's own "
                           "(-march=native), and the module may not run on another ($OPC_MARCH=portable in Python)")
    arch.add_argument("--march", metavar="ARCH", help="build for these CPUs: gcc's -march value (x86-64-v3, ...)")
    comp.set_defaults(func=cmd_compile)

    exp = sub.add_parser("explain", help="show how every op runs on a target")
    exp.add_argument("file", nargs="?", help="a model; without one, every op's route on the target")
    exp.add_argument("--target", default="cpu", help="cpu, cuda, or a device FILE.toml")
    add_grad_options(exp, "explain the gradient functions too (--grad 2: and the second-order ones)")
    exp.add_argument("--kernels", action="store_true",
                     help="list the kernels each function compiles to, their ops, and why each kernel ends")
    exp.set_defaults(func=cmd_explain)

    imp = sub.add_parser("import", help="import an ONNX model as MLIR (+ its weights as .npz)")
    imp.add_argument("file", help="input .onnx file")
    imp.add_argument("-o", "--output", help="output .mlir file (default stdout); weights go to its .npz twin")
    imp.add_argument("--shape", action="append", default=[], metavar="NAME=D0xD1...",
                     help="static sizes for a graph input with dynamic dims (repeatable)")
    imp.add_argument("--constant", action="append", default=[], metavar="NAME",
                     help="compile this float initializer in as a constant, not an argument (repeatable)")
    imp.set_defaults(func=cmd_import)

    prof = sub.add_parser("profile", help="time every kernel of a model on random inputs (a table, a Chrome trace)")
    prof.add_argument("file", help="input .mlir or .onnx file")
    add_grad_options(prof, "also profile NAME_grad and NAME_value_and_grad; --grad 2: also NAME_grad_grad")
    prof.add_argument("--inputs", default="random", metavar="random|FILE.npz",
                      help="the arguments: seeded random floats and zero integers (the default), or an .npz "
                           "holding an array per argument name; weights come from the .onnx file's "
                           "initializers (or the .npz that `opc import` wrote next to an .mlir file)")
    prof.add_argument("--repeat", type=int, default=10, help="calls of each function (default 10)")
    prof.add_argument("--trace", help="also write the calls as a Chrome trace JSON (chrome://tracing, Perfetto)")
    prof.set_defaults(func=cmd_profile)

    ex = sub.add_parser("example", help="print one of opc's examples (the quick start's mlp.mlir), or list them")
    ex.add_argument("name", nargs="?", help="an example's file name (mlp.mlir, or mlp); without one, the list")
    ex.add_argument("-o", "--output", help="write it to this file (default stdout)")
    ex.set_defaults(func=cmd_example)

    chk = sub.add_parser("check", help="test a device's own kernels against opc's reference over the full grid")
    chk.add_argument("--target", required=True, help="the device FILE.toml")
    chk.add_argument("--ops", default="", help="only these ops' kernels (comma list)")
    chk.add_argument("--case", default=None, metavar="ID", help="only the case of this id (a FAIL row names it)")
    chk.add_argument("--grad", type=int, choices=[1], default=0, metavar="",
                     help="also check the gradient through each forward kernel (opc's vjp over the device's forward)")
    chk.add_argument("--show", action="store_true",
                     help="with --case: print the case (function, inputs, outputs) and write them to opc-check-ID.npz")
    chk.set_defaults(func=cmd_check)
    return parser


def add_grad_options(parser: argparse.ArgumentParser, grad_help: str) -> None:
    """`--grad` (order 1), `--grad 2` / `--grad=2`, and `--no-fuse`."""
    parser.add_argument("--grad", type=int, choices=[1, 2], default=0, metavar="N", help=grad_help)
    parser.add_argument("--no-fuse", dest="fuse", action="store_false",
                        help="do not fuse matmul + bias + activation into fused_gemm_epilogue (opc-fuse)")


def spell_grad_order(argv: Sequence[str]) -> list[str]:
    """`--grad` alone means order 1 even before the input file (`--grad model.mlir`):
    it becomes `--grad=1`; `--grad 2` becomes `--grad=2`."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] == "--grad" and arg.isdigit():
            out[-1] = f"--grad={arg}"
        elif arg == "--grad":
            out.append("--grad=1")
        else:
            out.append(arg)
    return out


def cmd_check(args: argparse.Namespace) -> None:
    from opc.check import check_device, show_case

    if args.show and not args.case:
        raise InputError("--show needs --case ID (a FAIL row names the case)")
    ok = show_case(args.target, args.ops or None, args.case) if args.show else \
        check_device(args.target, args.ops or None, args.case, bool(args.grad))
    if not ok:
        raise CheckFailed()


class CheckFailed(Exception):
    """`opc check` found a failing case: the table said which; exit 1 without another line."""


def message(err: BaseException) -> str:
    """An exception's text; one raised with several arguments (as xDSL does) reads as one sentence,
    not as the tuple str() makes of them."""
    several = len(err.args) > 1 and all(isinstance(a, str) for a in err.args)
    return printable(" ".join(err.args) if several else str(err))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(spell_grad_order(sys.argv[1:] if argv is None else list(argv)))
    try:
        args.func(args)
    except CheckFailed:
        return 1
    except (OpcError, ValueError) as err:
        print(error_line(err, message(err)), file=sys.stderr)
        return 1
    except OSError as err:  # unwritable -o DIR, full disk, ...
        where = f": {err.filename}" if err.filename else ""
        print(f"error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI promises no traceback
        print(f"error: internal compiler error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
