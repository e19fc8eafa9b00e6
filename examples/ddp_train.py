"""Data-parallel training of the zoo's MLP classifier with opc ops as its layers, on PyTorch's
DistributedDataParallel over the gloo backend.

The model comes in as ONNX (examples/zoo/mlp_classifier.py: Gemm, GELU, Gemm,
SoftmaxCrossEntropyLoss), is compiled by opc with its gradient, and is held by
`opc.torch.Module`: its weights are nn.Parameters, its forward and backward are opc's
(torch.library custom ops). DDP all-reduces the gradients (the mean over the processes), so each
step equals one step on the concatenated batch of all processes.

    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --steps 100
    python examples/ddp_train.py --steps 100            # one process, no torch.distributed

Several machines: the same script under torchrun's rendezvous, on every machine
(NODE_RANK 0..N-1, HOST one of them):

    torchrun --nnodes=2 --node_rank=NODE_RANK --nproc_per_node=4 \\
        --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 --rdzv_id=mlp examples/ddp_train.py

Every process draws the same global batch of --global-batch rows per step (train_mlp's seeded
order) and trains on its own slice of it, rank r taking rows [r*B, (r+1)*B), B = global / world.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the zoo package, train_mlp
import train_mlp  # noqa: E402
from zoo import mlp_classifier  # noqa: E402

import opc  # noqa: E402


def model(batch: int) -> opc.torch.Module:
    sizes = mlp_classifier.Sizes(batch=batch, features=8, hidden=32, classes=4)
    return opc.torch.Module(opc.import_onnx(mlp_classifier.build(sizes, np.float32, opset=17, seed=0)))


def train(steps: int, global_batch: int, lr: float, rank: int = 0, world: int = 1,
          log_every: int = 0) -> list[dict[str, np.ndarray]]:
    """The weights after every step (every process holds the same ones)."""
    if global_batch % world:
        raise SystemExit(f"error: --global-batch {global_batch} is not a multiple of the {world} processes")
    batch = global_batch // world
    net = model(batch)
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    x_all, labels_all = train_mlp.make_data()
    history = []
    for step, idx in enumerate(train_mlp.batches(len(x_all), global_batch, steps)):
        mine = idx[rank * batch:(rank + 1) * batch]
        opt.zero_grad()
        loss, _logits = net(torch.from_numpy(x_all[mine]), torch.from_numpy(labels_all[mine]))
        loss.backward()  # DDP: the gradients all-reduced (averaged) over the processes here
        opt.step()
        history.append({k: p.detach().numpy().copy() for k, p in net.named_parameters()})
        if log_every and rank == 0 and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f} (rank 0's slice)")
    return history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--global-batch", type=int, default=32, help="rows per step over all processes")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save", help="rank 0 writes the weights after every step here (.npz)")
    args = parser.parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    try:
        history = train(args.steps, args.global_batch, args.lr, rank, world, log_every=10)
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()
    if args.save and rank == 0:
        np.savez(args.save, **{f"{step}/{k.removeprefix('module.')}": w for step, ws in enumerate(history)
                               for k, w in ws.items()})
    if world > 1:
        # Leave without the interpreter's finalization: gloo's worker thread may still be freeing its
        # last work, whose thread-local state holds Python objects; freeing them wants the GIL, and
        # during finalization that ends the thread inside a noexcept destructor: std::terminate, an
        # abort after a complete run (gdb: c10d::ProcessGroupGloo::runLoop -> ~AsyncWork ->
        # gil_scoped_acquire -> pthread_exit; about 1 run in 6 on a loaded 2-core machine).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
