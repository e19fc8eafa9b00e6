"""Differential fuzzing of ONNX import: random small graphs of the layers users export (LSTM, GRU
and RNN; Conv, ConvTranspose, MaxPool, AveragePool, BatchNormalization) over their attribute grids,
imported by opc and checked against onnxruntime (forward, f32).

An RNN graph is one recurrent node: direction, layout, activations, clip, input_forget,
linear_before_reset, with or without bias, initial states, peepholes and sequence_lens (equal to
the sequence length: what opc supports), and a random subset of its outputs. Some have a run-time
sequence length (X's sequence dim a dim_param): those also go through opc.load_onnx, which must
compile them once, and run at two more lengths against onnxruntime. A CNN graph is a
Conv (or ConvTranspose) with or without bias, then some of BatchNormalization (inference), Relu
and a pool. Weights are initializers, as in an exported model. Many graphs are imported into ONE
module (one C build per batch), through opc.import_onnx as opc.load_onnx does; --load checks a few
through opc.load_onnx itself.

    python tests/support/fuzz_onnx.py --count 500 [--seed 0]     # a long run
    python tests/support/fuzz_onnx.py --seed 0 --index 17 --show # one graph
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_helpers import call, graph_model, helper, import_all, onnx, run_ort  # noqa: E402

BATCH = 20  # graphs per compiled module
# opc's pools need the kernel within the padded input; with ceil_mode onnxruntime also runs a window
# that hangs past it (a kernel of 2 over 1 element): refused with this line, counted apart
POOL_PAST_INPUT = "is larger than the padded input"
RTOL = 1e-4  # |got - want| <= RTOL * max(1, max |want|): f32 through a few sums and a few steps


@dataclass
class Case:
    name: str
    model: Any  # onnx.ModelProto
    feeds: dict[str, np.ndarray]
    kind: str  # the node types, for the report
    twin: Any = None  # for layout = 1 (which onnxruntime does not run): the layout-0 model, the oracle's
    # a run-time sequence length: the model (and twin) with X's sequence dim open, and feeds at other lengths
    open_seq: tuple[Any, Any] | None = None
    other_lengths: list[dict[str, np.ndarray]] = field(default_factory=list)

    def expected(self, feeds: dict[str, np.ndarray] | None = None, models: tuple[Any, Any] | None = None
                 ) -> list[np.ndarray]:
        """onnxruntime's outputs; for a batch-major RNN those of its sequence-major twin, transposed."""
        model, twin = models or (self.model, self.twin)
        feeds = self.feeds if feeds is None else feeds
        if twin is None:
            return run_ort(model, feeds)
        to_seq = {"X": (1, 0, 2), "initial_h": (1, 0, 2), "initial_c": (1, 0, 2)}
        feeds = {k: np.ascontiguousarray(v.transpose(to_seq[k])) for k, v in feeds.items()}
        outs = run_ort(twin, feeds)  # Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; states swap
        return [np.ascontiguousarray(o.transpose((2, 0, 1, 3) if o.ndim == 4 else (1, 0, 2))) for o in outs]


class Graphs:
    """A seeded drawer of one graph."""

    def __init__(self, seed: int, index: int):
        self.rng = np.random.default_rng([seed, index, 38])
        self.name = f"g{index}"
        self.feeds: dict[str, np.ndarray] = {}
        self.inits: dict[str, np.ndarray] = {}

    def tensor(self, shape, scale: float = 1.0) -> np.ndarray:
        return (self.rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)

    def feed(self, name: str, shape, scale: float = 1.0) -> str:
        self.feeds[name] = self.tensor(shape, scale)
        return name

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits[name] = value
        return name

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # -- recurrent layers -----------------------------------------------------
    def rnn(self) -> Case:
        op = str(self.rng.choice(["LSTM", "GRU", "RNN"]))
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        seq, batch, width, hidden = (int(n) for n in self.rng.integers(1, 5, size=4))
        direction = str(self.rng.choice(["forward", "reverse", "bidirectional"]))
        dirs = 2 if direction == "bidirectional" else 1
        layout = int(self.chance(0.3))
        open_seq = self.chance(0.3)  # a run-time sequence length (then no sequence_lens: it holds the length)
        x_shape = (batch, seq, width) if layout else (seq, batch, width)
        state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        inputs = [self.feed("X", x_shape), self.init("W", self.tensor((dirs, gates * hidden, width), 0.6)),
                  self.init("R", self.tensor((dirs, gates * hidden, hidden), 0.6))]
        optional = [("B", lambda: self.init("B", self.tensor((dirs, 2 * gates * hidden), 0.5))),
                    ("sequence_lens", lambda: self.init("sequence_lens", np.full(batch, seq, np.int32))),
                    ("initial_h", lambda: self.feed("initial_h", state_shape))]
        if op == "LSTM":
            optional += [("initial_c", lambda: self.feed("initial_c", state_shape)),
                         ("P", lambda: self.init("P", self.tensor((dirs, 3 * hidden), 0.5)))]
        present = [self.chance(0.6) and not (open_seq and name == "sequence_lens") for name, _ in optional]
        last = max((i for i, p in enumerate(present) if p), default=-1)  # trailing absent inputs are left off
        inputs += [make() if p else "" for (_, make), p in list(zip(optional, present))[:last + 1]]
        attrs: dict[str, Any] = {"hidden_size": hidden, "direction": direction}
        if layout:
            attrs["layout"] = 1
        per = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
        if self.chance(0.4):
            attrs["activations"] = [str(a) for a in self.rng.choice(["Sigmoid", "Tanh", "Relu"], size=per * dirs)]
        if self.chance(0.3):
            attrs["clip"] = float(self.rng.choice([0.5, 1.0, 3.0]))
        if op == "LSTM" and self.chance(0.3):
            attrs["input_forget"] = 1
        if op == "GRU" and self.chance(0.5):
            attrs["linear_before_reset"] = 1
        outs = ["Y", "Y_h", "Y_c"][:{"LSTM": 3}.get(op, 2)]
        keep = [self.chance(0.7) for _ in outs]
        if not any(keep):
            keep[int(self.rng.integers(0, len(outs)))] = True
        names = [n if k else "" for n, k in zip(outs, keep)]
        while names[-1] == "":
            names.pop()
        node = helper.make_node(op, inputs, names, name=f"the_{op}", **attrs)
        twin = None
        if layout:
            seq_feeds = {k: np.ascontiguousarray(v.transpose(1, 0, 2)) for k, v in self.feeds.items()}
            twin = graph_model([helper.make_node(op, inputs, names, name=f"the_{op}", **{**attrs, "layout": 0})],
                               seq_feeds, [n for n in names if n], self.inits, name=self.name)
        case = self.case([node], [n for n in names if n], op + (" layout=1" if layout else ""), twin)
        if open_seq:  # lengths 1 and seq + 2 (not 0: onnxruntime's GRU aborts the process there)
            axis = layout
            case.open_seq = (open_axis(case.model, "X", axis), None if twin is None else open_axis(twin, "X", 0))
            for length in (1, seq + 2):
                shape = list(x_shape)
                shape[axis] = length
                case.other_lengths.append({**self.feeds, "X": self.tensor(shape)})
            case.kind += " run-time seq"
        return case

    # -- convolutional layers -------------------------------------------------
    def conv(self) -> Case:
        r = int(self.rng.choice([1, 2, 2, 3]))
        n, c = int(self.rng.integers(1, 3)), int(self.rng.integers(1, 5))
        inp = [int(d) for d in self.rng.integers(2, {1: 9, 2: 6, 3: 4}[r] + 1, size=r)]
        wide = r == 2 and self.chance(0.3)
        if wide:  # channels and images that the fast kernels take (opc_nn_conv_fast.h, opc_nn_conv_cw.h)
            c = int(self.rng.choice([8, 16, 24, 40]))
            inp = [int(d) for d in self.rng.integers(3, 21, size=r)]
        x = self.feed("X", (n, c, *inp))
        group = c if self.chance(0.3 if not wide else 0.5) else \
            int(self.rng.choice([g for g in range(1, c + 1) if c % g == 0 and (not wide or g <= 2)]))
        o = group * int(self.rng.integers(1, 3)) if not wide or group == c else int(self.rng.choice([16, 24, 40]))
        kernel = [int(k) for k in self.rng.integers(1, 4, size=r)]
        strides = [int(s) for s in self.rng.integers(1, 3, size=r)]
        dilations = [int(d) for d in self.rng.integers(1, 3, size=r)] if self.chance(0.3) else [1] * r
        extent = [dilations[d] * (kernel[d] - 1) + 1 for d in range(r)]
        transpose = self.chance(0.25)
        attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group}
        pad_mode = str(self.rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if pad_mode == "NOTSET":
            attrs["pads"] = [int(self.rng.integers(0, e)) if e > 1 else 0 for e in extent * 2]
        else:
            attrs["auto_pad"] = pad_mode
            if pad_mode != "VALID":
                attrs["dilations"] = dilations = [1] * r  # onnxruntime runs SAME without dilations only
                extent = kernel
        if transpose:
            w = self.init("W", self.tensor((c, o // group, *kernel), 0.7))
            if self.chance(0.3):
                attrs["output_padding"] = [int(self.rng.integers(0, max(s, d))) for s, d in zip(strides, dilations)]
        else:
            w = self.init("W", self.tensor((o, c // group, *kernel), 0.7))
            pads = attrs.get("pads", [0] * 2 * r)
            if any(extent[d] > inp[d] + pads[d] + pads[r + d] for d in range(r)) and pad_mode in ("NOTSET", "VALID"):
                attrs.pop("auto_pad", None)
                attrs["pads"] = [e - 1 for e in extent * 2]  # room for the kernel
        inputs = [x, w] + ([self.init("Bc", self.tensor((o,), 0.5))] if self.chance(0.6) else [])
        op = "ConvTranspose" if transpose else "Conv"
        nodes = [helper.make_node(op, inputs, ["y0"], name="the_conv", **attrs)]
        kinds, last = [op], "y0"
        if self.chance(0.4):
            stats = [self.init(k, self.tensor((o,), 0.5) + (1.0 if k in ("scale", "var") else 0.0))
                     for k in ("scale", "bias", "mean", "var")]
            nodes.append(helper.make_node("BatchNormalization", [last, *stats], ["y1"], name="the_bn",
                                          epsilon=float(self.rng.choice([1e-5, 1e-3]))))
            kinds.append("BatchNormalization")
            last = "y1"
        if self.chance(0.5):
            nodes.append(helper.make_node("Relu", [last], ["y2"], name="the_relu"))
            last = "y2"
        outputs = [last]
        if self.chance(0.6):
            nodes.append(self.pool(last, r, outputs))
            kinds.append(nodes[-1].op_type)
        return self.case(nodes, outputs[::-1][:1 + int(self.chance(0.3))], "+".join(kinds))

    def pool(self, x: str, r: int, outputs: list[str]):
        """A MaxPool (with its Indices now and then) or an AveragePool of small windows; its output is
        appended to outputs."""
        kernel = [int(k) for k in self.rng.integers(1, 3, size=r)]
        attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": [int(s) for s in self.rng.integers(1, 3, size=r)],
                                    "ceil_mode": int(self.chance(0.3))}
        if self.chance(0.5):
            attrs["pads"] = [int(self.rng.integers(0, k)) if k > 1 else 0 for k in kernel * 2]
        if self.chance(0.5):
            attrs["count_include_pad"] = int(self.chance(0.5))
            outputs.append("p0")
            return helper.make_node("AveragePool", [x], ["p0"], name="the_pool", **attrs)
        if self.chance(0.3):
            attrs["dilations"] = [int(d) for d in self.rng.integers(1, 3, size=r)]
        outs = ["p0", "p1"] if self.chance(0.4) else ["p0"]
        outputs.extend(outs)
        return helper.make_node("MaxPool", [x], outs, name="the_pool", **attrs)

    def case(self, nodes, outputs: list[str], kind: str, twin=None) -> Case:
        """The graph, its outputs typed by onnx's shape inference; Invalid("inconsistent") where
        onnxruntime's shapes differ (onnx 1.23 keeps a ceil_mode pool window that starts past the
        input, which onnxruntime, PyTorch and opc drop), as no model can be right for both."""
        model = graph_model(nodes, self.feeds, outputs, self.inits, name=self.name)
        case = Case(self.name, model, self.feeds, kind, twin)
        if any(t.type.tensor_type.shape.dim[i].dim_value == 0 for t in model.graph.output
               for i in range(len(t.type.tensor_type.shape.dim))):
            raise Invalid("empty")  # an empty output: a draw that is not a model
        try:
            want = case.expected()
        except Exception as err:  # noqa: BLE001 - the oracle does not run this draw
            raise Invalid("onnxruntime") from err
        for t, w in zip(model.graph.output, want):
            if [d.dim_value for d in t.type.tensor_type.shape.dim] != list(w.shape):
                raise Invalid("inconsistent")  # no model can say both: opc's importer runs onnx's inference
        return case


def open_axis(model, name: str, axis: int):  # noqa: ANN001, ANN201 - onnx.ModelProto
    """The model with input `name`'s dim `axis` a dim_param, its outputs typed again by shape inference."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    (x,) = [i for i in m.graph.input if i.name == name]
    dim = x.type.tensor_type.shape.dim[axis]
    dim.ClearField("dim_value")
    dim.dim_param = "seq"
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    del m.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def check_open_seq(case: Case) -> list[str]:
    """A case with a run-time sequence length through opc.load_onnx: compiled once (not per shape),
    right at the drawn length and at the others."""
    import opc

    assert case.open_seq is not None
    f = opc.load_onnx(case.open_seq[0])
    out = []
    for i, feeds in enumerate([case.feeds, *case.other_lengths]):
        got = [np.asarray(g) for g in f(*feeds.values())]
        out += compare(got, case.expected(feeds, case.open_seq), f"{case.name} (run-time seq, X {feeds['X'].shape})")
    if f.variants or f.static_reason:
        out.append(f"{case.name}: a run-time sequence length compiled per shape ({f.static_reason})")
    return out


class Invalid(Exception):
    """The draw is not a valid model (onnx's checker or shape inference refuses it, an output is empty)."""


def generate(seed: int, index: int) -> Case | str:
    """Graph `index`: an RNN or a CNN graph, or why the draw is not a model both sides can run
    ("onnx": onnx's checker or shape inference refuses it, "empty", "onnxruntime": it refuses to
    run it, "inconsistent": it and onnx's shape inference disagree on an output's shape)."""
    g = Graphs(seed, index)
    try:
        return g.rnn() if g.chance(0.5) else g.conv()
    except Invalid as why:
        return str(why)
    except Exception as err:  # noqa: BLE001 - onnx's shape inference: an invalid draw, not opc's defect
        if "InferenceError" in type(err).__name__ or "ValidationError" in type(err).__name__:
            return "onnx"
        raise


@dataclass
class Report:
    graphs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # draws not run, by reason (see generate)
    defects: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # graphs opc refuses by a documented limit
    kinds: dict[str, int] = field(default_factory=dict)


def compare(got: list[np.ndarray], want: list[np.ndarray], name: str) -> list[str]:
    if len(got) != len(want):
        return [f"{name}: {len(got)} outputs, onnxruntime {len(want)}"]
    out = []
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.shape != w.shape:
            out.append(f"{name} output {i}: got {g.dtype}{list(g.shape)}, onnxruntime {w.dtype}{list(w.shape)}")
        elif w.dtype.kind != "f" and not np.array_equal(g, w):
            out.append(f"{name} output {i}: integers differ at {np.argwhere(g != w)[:3].tolist()}")
        elif w.dtype.kind == "f":
            err = np.abs(g.astype(np.float64) - w)
            tol = RTOL * max(1.0, float(np.abs(w).max()) if w.size else 1.0)
            if w.size and not err.max() <= tol:
                out.append(f"{name} output {i}: max error {float(err.max()):.3g} > {tol:.3g}")
    return out


def run_batch(cases: list[Case], report: Report) -> None:
    import opc
    from opc.errors import OpcError

    def compiled(batch: list[Case]):
        module, params = import_all({c.name: c.model for c in batch})
        return opc.compile(module), params

    try:
        module, params = compiled(cases)
    except Exception:  # noqa: BLE001 - find the graph(s) opc refuses or crashes on, check the others
        good = []
        for c in cases:
            try:
                compiled([c])
                good.append(c)
            except OpcError as one:
                if POOL_PAST_INPUT in str(one):  # opc's known limit, refused in one line
                    report.refused.append(f"{c.name} ({c.kind}): {one}")
                else:
                    report.defects.append(f"{c.name} ({c.kind}): does not import or compile: {one}")
            except Exception as crash:  # noqa: BLE001
                report.defects.append(f"{c.name} ({c.kind}): internal error: {type(crash).__name__}: {crash}")
        if len(good) == len(cases):
            raise
        cases = good
        if not cases:
            return
        module, params = compiled(cases)
    for c in cases:
        report.graphs += 1
        report.kinds[c.kind] = report.kinds.get(c.kind, 0) + 1
        try:
            got = call(module, c.name, c.feeds, params[c.name])
        except Exception as err:  # noqa: BLE001 - any failure of a valid graph is a defect to report
            report.defects.append(f"{c.name} ({c.kind}): raised {type(err).__name__}: {err}")
            continue
        report.defects += [f"{d} ({c.kind})" for d in compare(got, c.expected(), c.name)]
        if c.open_seq is not None:
            try:
                report.defects += [f"{d} ({c.kind})" for d in check_open_seq(c)]
            except Exception as err:  # noqa: BLE001 - any failure of a valid graph is a defect to report
                report.defects.append(f"{c.name} ({c.kind}, run-time seq): raised {type(err).__name__}: {err}")


def check_load_onnx(case: Case) -> list[str]:
    """The same graph through opc.load_onnx, the entry point users call."""
    import opc

    got = opc.load_onnx(case.model)(*case.feeds.values())
    return compare(list(got), case.expected(), f"{case.name} (load_onnx)")


def run(seed: int, start: int, count: int, report: Report | None = None, batch: int = BATCH) -> Report:
    report = report or Report()
    cases = []
    for i in range(start, start + count):
        case = generate(seed, i)
        if isinstance(case, str):
            report.skipped[case] = report.skipped.get(case, 0) + 1
        else:
            cases.append(case)
    for b in range(0, len(cases), batch):
        run_batch(cases[b:b + batch], report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Differential fuzzing of ONNX import against onnxruntime")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", type=int, default=0, help="the first graph (with --show: the one shown)")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--load", type=int, default=0, help="also check the first LOAD graphs through opc.load_onnx")
    ap.add_argument("--show", action="store_true", help="print graph INDEX")
    ns = ap.parse_args(argv)
    if ns.show:
        case = generate(ns.seed, ns.index)
        print(case if isinstance(case, str) else onnx.printer.to_text(case.model.graph))
        ns.count = 1
    report, began = Report(), time.monotonic()
    for b in range(ns.index, ns.index + ns.count, ns.batch):
        seen = len(report.defects)
        run(ns.seed, b, min(ns.batch, ns.index + ns.count - b), report, ns.batch)
        print(f"[{time.monotonic() - began:.0f} s] graphs {ns.index}-{b + ns.batch - 1}: {report.graphs} run, "
              f"{len(report.defects)} defects", *(f"\nDEFECT {d}" for d in report.defects[seen:]), file=sys.stderr,
              flush=True)
    for i in range(ns.index, ns.index + ns.load):
        case = generate(ns.seed, i)
        if not isinstance(case, str):
            report.defects += check_load_onnx(case)
    print(f"{report.graphs} graphs (draws skipped: {report.skipped}; refused by opc's pool limit: "
          f"{len(report.refused)}), {len(report.defects)} defects; "
          f"{dict(sorted(report.kinds.items()))}")
    for d in report.defects:
        print("DEFECT", d)
    return 1 if report.defects else 0


if __name__ == "__main__":
    sys.exit(main())
