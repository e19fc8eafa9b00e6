"""Per-call overhead: an add of 16 float32s, where the work is nothing and the call is everything.

    python bench/bench_overhead.py [--repeat 7]

Rows: opc's NumPy binding (NumPy arrays in; torch tensors in through DLPack; torch tensors out
with arrays="torch"), opc.torch.op (a torch.library custom op, without and with autograd),
opc.torch.function (its autograd.Function form), opc.jax.op eager and under jax.jit (a
pure_callback), against torch eager's `a + b`, a torch.library custom op that does nothing (the
dispatcher's own cost), jax.jit(jnp.add) and NumPy's `a + b`. One thread; best of --repeat
interleaved rounds (benchlib.best_of). Every row but the empty op is checked against NumPy.
"""

from __future__ import annotations

import argparse

import benchlib

SOURCE = """func.func @add(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %r = opc.add %a, %b : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  func.return %r : tensor<16xf32>
}"""


def contenders(frameworks: set[str]) -> dict[str, object]:
    import numpy as np

    import opc

    a, b = np.arange(16, dtype=np.float32), np.full(16, 0.5, np.float32)
    m = opc.compile(SOURCE, grad=True)
    rows: dict[str, object] = {"NumPy a + b": lambda: a + b, "opc, NumPy arrays": lambda: m.add(a, b)}
    torch = benchlib.import_torch() if "torch" in frameworks else None
    if torch is not None:
        mt = opc.compile(SOURCE, grad=True, arrays="torch")
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        ga, gb = ta.clone().requires_grad_(), tb.clone().requires_grad_()
        op, fn = opc.torch.op(m.add), opc.torch.function(m.add)

        nothing = torch.library.custom_op("opc_bench::nothing", lambda x, y: torch.empty_like(x), mutates_args=(),
                                          schema="(Tensor x, Tensor y) -> Tensor")

        rows.update({
            "torch eager a + b": lambda: ta + tb,
            "torch custom_op doing nothing": lambda: nothing(ta, tb),
            "opc, torch tensors in (DLPack)": lambda: m.add(ta, tb),
            'opc, arrays="torch"': lambda: mt.add(ta, tb),
            "opc.torch.op": lambda: op(ta, tb),
            "opc.torch.op, inputs requiring grad": lambda: op(ga, gb),
            "opc.torch.function, inputs requiring grad": lambda: fn(ga, gb),
        })
    jax = benchlib.import_jax() if "jax" in frameworks else None
    if jax is not None:
        ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
        jop = opc.jax.op(m.add)
        jitted, jadd = jax.jit(jop), jax.jit(jax.numpy.add)
        rows.update({
            "jax.jit(jnp.add)": lambda: jadd(ja, jb).block_until_ready(),
            "opc.jax.op, eager": lambda: jop(ja, jb).block_until_ready(),
            "opc.jax.op under jax.jit": lambda: jitted(ja, jb).block_until_ready(),
        })
    for name, call in rows.items():
        if name != "torch custom_op doing nothing":
            got = call()
            benchlib.check(name, np.asarray(got.detach() if hasattr(got, "detach") else got), a + b)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--with", dest="frameworks", default="torch,jax",
                    help="the frameworks' rows, comma-separated (JAX's threads share the one core with the rest)")
    args = ap.parse_args()
    benchlib.apply_threads(1)
    rows = contenders(set(args.frameworks.split(",")))
    times = benchlib.best_of(rows, repeat=args.repeat, min_time=0.05)
    base = times.get("torch eager a + b")
    print(f"{'call (16 x f32 add, 1 thread)':44s} {'us/call':>8s} {'x torch eager':>14s}")
    for name, t in times.items():
        ratio = f"{t / base:14.2f}" if base else ""
        print(f"{name:44s} {t * 1e6:8.2f} {ratio}")


if __name__ == "__main__":
    main()
