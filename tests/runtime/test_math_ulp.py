"""The runtime's vectorizable f32 math (runtime/opc_runtime.h: opc_expf, opc_erff, opc_logf, and
sigmoid as opc lowers it) against the double libm function rounded to float, in ulps.

tests/support/math_ulp.c does the work; here it runs on every 4099th f32 bit pattern plus the special
values (NaN, +-inf, +-0, tiny, saturated), built as generated modules are (-O3, -march=native
where taken) with FMA contraction on (gcc's default) and off. The bounds are the max over all
2^32 inputs, measured by the full sweep (stride 1; docs/performance.md, Vector math). tanh has its own driver
(tests/support/tanh_ulp.c, test_tanh_ulp.py).

The f64 functions (opc_exp, opc_tanh, opc_erf, opc_log, and sigmoid on opc_exp) the same way
through tests/support/math_ulp_f64.c, against the long double libm functions, in fractions of an ulp:
N inputs over all bit patterns and N in each of [2^-30, 40] and [-40, -2^-30]; the bounds are
those of the sweep in docs/performance.md (N = 2^25) rounded up.
"""
import os
import subprocess

import pytest

from opc.lowering.build import BASE_FLAGS, native_flags, runtime_dir

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support", "math_ulp.c")
SOURCE_F64 = os.path.join(os.path.dirname(SOURCE), "math_ulp_f64.c")
MAX_ULP = {"exp": 1, "erf": 3, "log": 1, "sigmoid": 3}  # full sweep, both contraction modes
STRIDE = 4099  # prime, so the sample walks through every exponent and mantissa pattern


MAX_ULP_F64 = {"exp": 1.1, "tanh": 1.4, "erf": 1.1, "log": 0.9, "sigmoid": 2.8}  # sweep: 1.005 1.33 0.995 0.83 2.68
N_F64 = 100_000


def build(tmp_path_factory, source, contract):
    exe = tmp_path_factory.mktemp("math_ulp") / f"{os.path.basename(source)[:-2]}_{contract}"
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, *BASE_FLAGS, *native_flags(), f"-ffp-contract={contract}", "-I", str(runtime_dir()),
                    source, "-o", str(exe), "-lm"], check=True)
    return exe


@pytest.fixture(scope="module", params=["fast", "off"])
def driver(request, tmp_path_factory):
    return build(tmp_path_factory, SOURCE, request.param)


@pytest.fixture(scope="module", params=["fast", "off"])
def driver_f64(request, tmp_path_factory):
    return build(tmp_path_factory, SOURCE_F64, request.param)


@pytest.mark.parametrize("name", sorted(MAX_ULP))
def test_max_ulp(driver, name):
    run = subprocess.run([str(driver), name, str(STRIDE), str(MAX_ULP[name])], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NaN mismatches: 0" in run.stdout


@pytest.mark.parametrize("name", sorted(MAX_ULP_F64))
def test_max_ulp_f64(driver_f64, name):
    run = subprocess.run([str(driver_f64), name, str(N_F64), str(MAX_ULP_F64[name])], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NaN mismatches: 0" in run.stdout
