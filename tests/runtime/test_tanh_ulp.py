"""opc_tanhf (runtime/opc_runtime.h) against tanh in double rounded to float, in ulps.

tests/support/tanh_ulp.c does the work; here it runs on every 4099th f32 bit pattern plus the
special values (NaN, +-inf, +-0, tiny, saturated), built as generated modules are
(-O3, -march=native where taken) with FMA contraction on (gcc's default) and off. The bound
is the max over all 2^32 inputs, measured by the full sweep (see the comment in tanh_ulp.c).
"""
import os
import subprocess

import pytest

from opc.lowering.build import BASE_FLAGS, native_flags, runtime_dir

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "tanh_ulp.c")
MAX_ULP = 6  # full sweep, both contraction modes
STRIDE = 4099  # prime, so the sample walks through every exponent and mantissa pattern


@pytest.mark.parametrize("contract", ["fast", "off"])
def test_tanh_max_ulp(tmp_path, contract):
    exe = tmp_path / "tanh_ulp"
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, *BASE_FLAGS, *native_flags(), f"-ffp-contract={contract}", "-I", str(runtime_dir()),
                    SOURCE, "-o", str(exe), "-lm"], check=True)
    run = subprocess.run([str(exe), str(STRIDE), str(MAX_ULP)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NaN inputs not NaN: 0" in run.stdout
