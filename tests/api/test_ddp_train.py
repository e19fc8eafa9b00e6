"""examples/ddp_train.py: two processes on localhost (torchrun, gloo, DistributedDataParallel over
opc.torch.Module) step like one process on the concatenated batch: the weights after every step
agree within float32 rounding (DDP averages the two slices' gradients; one process takes the
mean over all rows)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

for package in ("torch", "onnx"):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import ddp_train  # noqa: E402

STEPS, GLOBAL_BATCH, LR = 3, 32, 0.1


def test_two_processes_step_like_one_on_the_concatenated_batch(tmp_path):
    out = tmp_path / "ddp.npz"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(ROOT / "examples" / "ddp_train.py"), "--steps", str(STEPS), "--global-batch",
                           str(GLOBAL_BATCH), "--lr", str(LR), "--save", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    got = np.load(out)
    want = ddp_train.train(STEPS, GLOBAL_BATCH, LR)  # here, one process, all 32 rows per step
    assert sorted(got) == sorted(f"{step}/{k}" for step, ws in enumerate(want) for k in ws)
    for step, weights in enumerate(want):
        for k, w in weights.items():
            np.testing.assert_allclose(got[f"{step}/{k}"], w, rtol=1e-5, atol=1e-6, err_msg=f"step {step}: {k}")
    assert not np.allclose(want[0]["fc1_weight"], want[-1]["fc1_weight"])  # the steps moved the weights
