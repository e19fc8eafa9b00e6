"""The runtime's vectorizable f32 math (runtime/opc_runtime.h: opc_expf, opc_erff, opc_logf, and
sigmoid as opc lowers it) against the double libm function rounded to float, in ulps.

tests/math_ulp.c does the work; here it runs on every 4099th f32 bit pattern plus the special
values (NaN, +-inf, +-0, tiny, saturated), built as generated modules are (-O3, -march=native
where taken) with FMA contraction on (gcc's default) and off. The bounds are the max over all
2^32 inputs, measured by the full sweep (stride 1; README, Speed). tanh has its own driver
(tests/tanh_ulp.c, test_tanh_ulp.py).
"""
import os
import subprocess

import pytest

from opc.lowering.build import BASE_FLAGS, native_flags, runtime_dir

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "math_ulp.c")
MAX_ULP = {"exp": 1, "erf": 3, "log": 1, "sigmoid": 3}  # full sweep, both contraction modes
STRIDE = 4099  # prime, so the sample walks through every exponent and mantissa pattern


@pytest.fixture(scope="module", params=["fast", "off"])
def driver(request, tmp_path_factory):
    exe = tmp_path_factory.mktemp("math_ulp") / f"math_ulp_{request.param}"
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, *BASE_FLAGS, *native_flags(), f"-ffp-contract={request.param}", "-I", str(runtime_dir()),
                    SOURCE, "-o", str(exe), "-lm"], check=True)
    return exe


@pytest.mark.parametrize("name", sorted(MAX_ULP))
def test_max_ulp(driver, name):
    run = subprocess.run([str(driver), name, str(STRIDE), str(MAX_ULP[name])], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NaN mismatches: 0" in run.stdout
