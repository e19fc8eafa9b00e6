"""Benchmark results as JSON, and the JSON as the SVG plots of the docs' Performance page.

    python3 bench/plot_results.py extract bench/results/2026-12-03-round4-quiet.txt \
        --command "bash bench/results/2026-12-03-round4-quiet.sh" --commit 00826b8 \
        --machine "..." -o bench/results/2026-12-03-round4-quiet.json
    python3 bench/plot_results.py plot bench/results/2026-12-03-round4-quiet.json -o docs/img
    python3 bench/plot_results.py trace trace.json -o docs/img/profile-trace.svg

`extract` reads the output of bench_transformer.py, bench_cpu.py, bench_models_cpu.py and
bench_control_flow.py --only lstm as results files hold it (the tables and lines those scripts
print) and writes every figure it finds, nothing else, with the machine, date, command and source
files. `plot` draws the ratios of such a JSON file: one SVG per
bench (ratio = the other system's time / opc's time; above 1, opc is faster). `trace` draws a
Chrome trace of `opc profile --trace` as a timeline, one row per kernel. Needs matplotlib
(the `bench` extra); the plots are committed, so building the docs does not.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TRANSFORMER_HEAD = re.compile(r"^threads (\d+); load average ([\d.]+); (.*)$")
TRANSFORMER_ROW = re.compile(r"^(forward(?: \+ backward)?)\s+vs (.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$")
CPU_HEAD = re.compile(r"^numpy .*; threads (\d+) of (\d+) cores;.*load average ([\d.]+)")
CPU_ROW = re.compile(r"^  (\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)$")
# bench_models_cpu.py: "resnet18: opc 6.38 ms, onnxruntime 5.08 ms, onnxruntime/opc 0.80 (CPU time per call, 1 ..."
MODEL_ROW = re.compile(r"^([\w+]+): opc ([\d.]+) ms, onnxruntime ([\d.]+) ms, onnxruntime/opc ([\d.]+) "
                       r"\((\w+) time per call, (\d+) thread")
# bench_control_flow.py --only lstm: a head naming the threads, then "static seq 300 | first | opc | onnxruntime | diff"
LSTM_HEAD = re.compile(r"^(\d+-layer LSTM) \((.*?)\), (\d+) thread")
LSTM_ROW = re.compile(r"^\s+(static|run-time seq) seq\s+(\d+) \|\s+[\d.]+ ms \|\s+([\d.]+) ms \|\s+([\d.]+) ms \|")
LOAD = re.compile(r"load average: ([\d.]+)")
MODEL_NAMES = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2", "small_cnn": "small CNN"}


def model_name(row: str) -> str:
    """bench_models_cpu.py's row name as the plots print it (`mobilenet_v2+fold`: --fold-bn's rows)."""
    name, fold, _ = row.partition("+fold")
    return MODEL_NAMES.get(name, name) + (" (BatchNorm folded)" if fold else "")


def extract(text: str) -> list[dict]:
    """Every bench_transformer.py and bench_cpu.py table in a results file, as runs of rows."""
    return extract_benches(text) + extract_models(text)


def extract_models(text: str) -> list[dict]:
    """bench_models_cpu.py's rows and bench_control_flow.py's LSTM table (one run per thread count):
    opc's and onnxruntime's time per call, ratio = onnxruntime's / opc's."""
    runs: dict[int, dict] = {}
    load = None
    lstm: tuple[str, int] | None = None

    def run(threads: int) -> dict:
        return runs.setdefault(threads, {"bench": "models", "threads": threads, "load": load, "statistic": "best",
                                         "busy": False, "rows": []})

    for line in text.splitlines():
        if (m := LOAD.search(line)) and load is None:
            load = float(m.group(1))
        elif m := MODEL_ROW.match(line):
            run(int(m.group(6)))["rows"].append({"case": model_name(m.group(1)), "vs": "onnxruntime",
                                                 "clock": m.group(5), "opc_ms": float(m.group(2)),
                                                 "them_ms": float(m.group(3)), "ratio": float(m.group(4))})
        elif m := LSTM_HEAD.match(line):
            lstm = (f"{m.group(1)}, {m.group(2).split(', ')[-1]}", int(m.group(3)))
        elif lstm and (m := LSTM_ROW.match(line)):
            opc_ms, them_ms = float(m.group(3)), float(m.group(4))
            length = "" if m.group(1) == "static" else " (length at run time)"
            run(lstm[1])["rows"].append({"case": f"{lstm[0]}, seq {m.group(2)}{length}", "vs": "onnxruntime",
                                         "clock": "CPU" if lstm[1] == 1 else "wall", "opc_ms": opc_ms,
                                         "them_ms": them_ms, "ratio": round(them_ms / opc_ms, 3)})
    return list(runs.values())


def extract_benches(text: str) -> list[dict]:
    runs: list[dict] = []
    cpu_threads = None
    title = None
    for line in text.splitlines():
        if m := TRANSFORMER_HEAD.match(line):
            stat = m.group(3)
            runs.append({"bench": "bench_transformer.py", "threads": int(m.group(1)), "load": float(m.group(2)),
                         "statistic": "median" if "median" in stat else "best", "busy": stat.startswith("busy"),
                         "rows": []})
            cpu_threads = None
        elif (m := TRANSFORMER_ROW.match(line)) and runs and runs[-1]["bench"] == "bench_transformer.py":
            runs[-1]["rows"].append({"case": m.group(1), "vs": m.group(2), "them_ms": float(m.group(3)),
                                     "opc_ms": float(m.group(4)), "ratio": float(m.group(5))})
        elif m := CPU_HEAD.match(line):
            cpu_threads = int(m.group(1))
            runs.append({"bench": "bench_cpu.py", "threads": cpu_threads, "load": float(m.group(3)),
                         "statistic": "best", "busy": False, "rows": []})
        elif cpu_threads is not None and line and not line.startswith((" ", "+", "BLAS", "ms ")):
            title = line.strip()
        elif cpu_threads is not None and (m := CPU_ROW.match(line)) and title:
            runs[-1]["rows"].append({"case": title, "vs": m.group(1), "ms": float(m.group(2)),
                                     "rate": float(m.group(3)), "ratio": float(m.group(4))})
    return [r for r in runs if r["rows"]]


def cmd_extract(args: argparse.Namespace) -> None:
    sources = [Path(f) for f in args.file]
    date = re.match(r"\d{4}-\d{2}-\d{2}", sources[0].name)
    runs = merged([run for source in sources for run in extract(source.read_text(encoding="utf-8"))])
    data = {"source": ", ".join(str(s) for s in sources), "command": args.command, "commit": args.commit,
            "machine": args.machine, "date": date.group(0) if date else None,
            "ratio": "the other system's time / opc's time (> 1: opc is faster)", "runs": runs}
    Path(args.output).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}: {sum(len(r['rows']) for r in data['runs'])} figures from {data['source']}")


def merged(runs: list[dict]) -> list[dict]:
    """The models' runs of several files as one run per thread count (the highest load kept)."""
    out: list[dict] = []
    for run in runs:
        same = next((r for r in out if r["bench"] == "models" == run["bench"] and r["threads"] == run["threads"]), None)
        if same is None:
            out.append(run)
            continue
        same["rows"] += run["rows"]
        same["load"] = max((x for x in (same["load"], run["load"]) if x is not None), default=None)
    return out


def setup_matplotlib():
    import matplotlib

    matplotlib.use("svg")
    matplotlib.rcParams.update({"svg.hashsalt": "opc", "svg.fonttype": "none", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def bars(plt, groups: list[str], series: dict[str, list[float | None]], title: str, path: Path, note: str) -> None:
    import textwrap

    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        pos = [x[j] + (i - (len(series) - 1) / 2) * width for j, v in enumerate(values) if v is not None]
        vals = [v for v in values if v is not None]
        rects = ax.bar(pos, vals, width, label=name)
        ax.bar_label(rects, labels=[f"{v:.2f}" for v in vals], fontsize=6, padding=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    every = [v for vs in series.values() for v in vs if v]
    if every and max(every) / min(every) > 8:
        ax.set_yscale("log")
        ax.set_ylabel("their time / opc's time (log scale)")
    ax.set_xticks(x, [textwrap.fill(g, 18) for g in groups], fontsize=7)
    if ax.get_yscale() != "log":
        ax.set_ylabel("their time / opc's time")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.text(0.01, 0.01, textwrap.fill(note, 170), fontsize=6)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, metadata={"Date": None, "Creator": "bench/plot_results.py"})
    plt.close(fig)
    print(f"wrote {path}")


def cmd_plot(args: argparse.Namespace) -> None:
    plt = setup_matplotlib()
    data = json.loads(Path(args.file).read_text(encoding="utf-8"))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    note = f"{data['machine']}; {data['date']}; {data['command']} (figures: {data['source']})"
    stem = Path(args.file).stem

    def label(run: dict) -> str:
        return f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}" + (
            ", busy" if run["busy"] else "") + (", median" if run["statistic"] == "median" else "")

    block = [r for r in data["runs"] if r["bench"] == "bench_transformer.py"]
    if block:
        groups = [label(r) for r in block]
        names = list(dict.fromkeys(f"{row['case']} vs {row['vs']}" for r in block for row in r["rows"]))
        series = {n: [next((row["ratio"] for row in r["rows"] if f"{row['case']} vs {row['vs']}" == n), None)
                      for r in block] for n in names}
        bars(plt, groups, series, "Transformer block (bench_transformer.py)", out / f"{stem}-transformer.svg", note)
    models = sorted((r for r in data["runs"] if r["bench"] == "models"), key=lambda r: r["threads"])
    if models:
        cases = list(dict.fromkeys(row["case"] for r in models for row in r["rows"]))
        series = {label(r): [next((row["ratio"] for row in r["rows"] if row["case"] == c), None) for c in cases]
                  for r in models}
        bars(plt, cases, series, "CNNs and an LSTM against onnxruntime (onnxruntime's time / opc's)",
             out / f"{stem}-models.svg", note)
    layers = [r for r in data["runs"] if r["bench"] == "bench_cpu.py"]
    for run in layers:
        cases = list(dict.fromkeys(row["case"].split(" (")[0].split(", pads")[0] for row in run["rows"]))
        short = {row["case"]: row["case"].split(" (")[0].split(", pads")[0] for row in run["rows"]}
        def who(vs: str) -> str:
            return vs.replace("(vjp)", "").strip()

        others = [v for v in dict.fromkeys(who(row["vs"]) for row in run["rows"]) if not v.startswith("opc")]
        series = {v: [next((row["ratio"] for row in run["rows"] if short[row["case"]] == c and who(row["vs"]) == v),
                           None) for c in cases] for v in others}
        groups = [c.replace(" f32", "").replace("the block's GEMM ", "") for c in cases]
        kind = "gemm" if run["rows"][0]["case"].startswith("the block's GEMM") else "layers"
        name = out / f"{stem}-{kind}-{run['threads']}t.svg"
        bars(plt, groups, series, f"bench_cpu.py, {label(run)}", name, note)


def cmd_trace(args: argparse.Namespace) -> None:
    """A Chrome trace (opc profile --trace, Profile.chrome_trace) as a timeline: one row per kernel."""
    plt = setup_matplotlib()
    events = [e for e in json.loads(Path(args.file).read_text(encoding="utf-8"))["traceEvents"] if e["ph"] == "X"]
    names = list(dict.fromkeys(e["name"] for e in events))
    kinds = list(dict.fromkeys(e["cat"] for e in events))
    colors = dict(zip(kinds, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.28 * len(names)))
    for e in events:
        ax.barh(names.index(e["name"]), e["dur"] / 1e3, left=e["ts"] / 1e3, color=colors[e["cat"]], height=0.7)
    ops = {e["name"]: e["args"].get("ops", "") for e in events}
    ax.set_yticks(range(len(names)), [f"{n}  {ops[n][:40]}" for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first kernel started")
    ax.set_title(args.title or f"{Path(args.file).name}: {len(events)} kernel calls")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    if args.note:
        fig.text(0.01, 0.01, args.note, fontsize=6)
    fig.tight_layout(rect=(0, 0.04 if args.note else 0, 1, 1))
    fig.savefig(args.output, metadata={"Date": None, "Creator": "bench/plot_results.py"})
    plt.close(fig)
    print(f"wrote {args.output}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="a results .txt -> JSON")
    e.add_argument("file", nargs="+", help="results files (the models' runs of several are merged)")
    e.add_argument("--command", required=True, help="the command(s) that produced the file(s)")
    e.add_argument("--commit", default=None)
    e.add_argument("--machine", required=True)
    e.add_argument("-o", "--output", required=True)
    p = sub.add_parser("plot", help="a results JSON -> SVG plots")
    p.add_argument("file")
    p.add_argument("-o", "--output", default="docs/img")
    t = sub.add_parser("trace", help="a Chrome trace JSON -> an SVG timeline")
    t.add_argument("file")
    t.add_argument("--title", default=None)
    t.add_argument("--note", default=None, help="machine, date, command: printed under the plot")
    t.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    {"extract": cmd_extract, "plot": cmd_plot, "trace": cmd_trace}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
