"""Fit the coefficients of opc_erff (runtime/opc_runtime.h) and print its two polynomials as C.

    python3 tools/fit_erff.py

Below |x| = 1, erf(x) = x P(x^2), P of degree 6 fitted to erf(x)/x in relative error; from 1 on,
erf(x) = 1 - E(|x| - 2.5), E of degree 14 fitted to erfc on [1, 4] in absolute error (|x| clamped to
4, where erf rounds to 1). Each fit is Lawson's iteration towards the minimax (weighted least
squares, each weight multiplied by its error every round); the coefficients are rounded to float one
at a time, highest degree first, the others refitted after each, so the rounding of one is made up by
the rest. math.erf / math.erfc (double) are the reference. The maximum error of the result over all
2^32 f32 inputs is tests/support/math_ulp.c's to measure (docs/performance.md, Vector math).
"""

from __future__ import annotations

import math

import numpy as np

SPLIT, TOP, CENTRE = 1.0, 4.0, 2.5


def lawson(basis: np.ndarray, target: np.ndarray, rounds: int = 100) -> np.ndarray:
    """Coefficients c minimizing max |basis @ c - target| (approximately)."""
    weight, best, best_err = np.ones(len(target)), None, np.inf
    for _ in range(rounds):
        root = np.sqrt(weight)
        c, *_ = np.linalg.lstsq(basis * root[:, None], target * root, rcond=None)
        err = np.abs(basis @ c - target)
        if err.max() < best_err:
            best, best_err = c, err.max()
        weight = weight * err / (weight * err).sum()
    assert best is not None
    return best


def fit_in_float(basis: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Float coefficients, rounded highest degree first with the others refitted; the max error."""
    fixed: dict[int, float] = {}
    for k in reversed(range(basis.shape[1])):
        free = [j for j in range(basis.shape[1]) if j not in fixed]
        rest = target - sum((v * basis[:, j] for j, v in fixed.items()), np.zeros(len(target)))
        fixed[k] = float(np.float32(lawson(basis[:, free], rest)[free.index(k)]))
    c = np.array([fixed[j] for j in range(basis.shape[1])])
    return c, float(np.abs(basis @ c - target).max())


def main() -> None:
    x = np.sort(np.concatenate([np.linspace(1e-4, SPLIT, 6000), SPLIT * np.sin(np.linspace(0, np.pi / 2, 3000)) ** 2 + 1e-5]))
    ratio = np.array([math.erf(v) / v for v in x])  # erf(x)/x; relative error: both sides divided by it
    small, small_err = fit_in_float(np.stack([(x * x) ** k / ratio for k in range(7)], 1), np.ones(len(x)))
    t = np.linspace(SPLIT, TOP, 8000)
    large, large_err = fit_in_float(np.stack([(t - CENTRE) ** k for k in range(15)], 1), np.array([math.erfc(v) for v in t]))
    print(f"/* P: relative error {small_err:.2g}; E: absolute error {large_err:.2g} (exact arithmetic) */")
    print(f"    float p = {small[-1]:.9e}f;")
    for v in small[-2::-1]:
        print(f"    p = p * s {'-' if v < 0 else '+'} {abs(v):.9e}f;")
    print(f"    float e = {large[-1]:.9e}f;")
    for v in large[-2::-1]:
        print(f"    e = e * u {'-' if v < 0 else '+'} {abs(v):.9e}f;")


if __name__ == "__main__":
    main()
