"""Second-order gradients (grad=2's f_grad_grad: f_grad differentiated w.r.t. its float arguments,
the cotangent dout included) through scf.if, scf.for and scf.while in f64, against central
differences of opc's own first-order gradient: <f_grad_grad(a, dout, dd), v> ==
(G(a + hv) - G(a - hv)) / 2h with G = <f_grad(a, dout), dd>. Trip counts 0, 1 and 5, conditions
both ways, and a loop nested in a loop and in an if. f_grad_grad differentiates an f_grad whose loops
recompute their carried values (no stacks: opc/autodiff/control_flow.py, "Recomputing"); a while's
trip count is counted by a copy of it."""

import numpy as np
import pytest
from test_control_flow_grad import FOR64, IF64, NESTED_FOR64, SHARED_INIT_FOR64, WHILE64, while_ref, with_checkpoint
from test_index_switch import SWITCH
from test_loop_stack_memory import with_while_checkpoint

import opc


@pytest.fixture(scope="module")
def mods():
    from cf_programs import IF_IN_LOOP, LOOP_IN_IF

    programs = {"if": IF64, "for": FOR64, "while": WHILE64, "nested": NESTED_FOR64,
                "loop_in_if": LOOP_IN_IF.replace("f32", "f64"), "if_in_loop": IF_IN_LOOP,
                "checkpointed": with_checkpoint(FOR64, 2), "shared_init": SHARED_INIT_FOR64,
                "checkpointed_while": with_while_checkpoint(WHILE64, 2), "switch": SWITCH}
    return {name: opc.compile(src, grad=2) for name, src in programs.items()}


def as_tuple(v) -> tuple:  # noqa: ANN001 - one array or a tuple of them, as a compiled function returns
    return v if isinstance(v, tuple) else (v,)


def check_grad2(m, flags, floats, rng, held=()) -> None:  # noqa: ANN001 - a compiled module
    """f_grad_grad against central differences of f_grad. `flags`: the non-float inputs (first);
    `floats`: every float input (f_grad gives one gradient each); `held`: indices into floats not
    moved (a while's limit: moving it could change the trip count)."""
    out = m.f(*flags, *floats)
    dout = rng.standard_normal(out.shape)
    grads = as_tuple(m.f_grad(*flags, *floats, dout))
    assert len(grads) == len(floats)
    dd = [rng.standard_normal(g.shape) for g in grads]
    second = as_tuple(m.f_grad_grad(*flags, *floats, dout, *dd))
    assert len(second) == len(floats) + 1  # the floats', then dout's
    vs = [np.zeros_like(a) if i in held else rng.standard_normal(a.shape) for i, a in enumerate(floats)]
    vd = rng.standard_normal(dout.shape)
    h = 1e-6

    def g(s: float) -> float:
        moved = [a + s * h * v for a, v in zip(floats, vs)]
        return sum(float(np.sum(gi * di)) for gi, di in zip(as_tuple(m.f_grad(*flags, *moved, dout + s * h * vd)), dd))

    fd = (g(1) - g(-1)) / (2 * h)
    analytic = sum(float(np.sum(s * v)) for s, v in zip(second, [*vs, vd]))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)


@pytest.mark.parametrize("flag", [True, False])
def test_grad2_through_if(mods, flag):
    rng = np.random.default_rng(21)
    check_grad2(mods["if"], [np.array(flag)], [rng.standard_normal(4), rng.standard_normal(4)], rng)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_grad2_through_for(mods, n):
    rng = np.random.default_rng(22)
    check_grad2(mods["for"], [np.array(n)], [rng.standard_normal(4), rng.uniform(-0.5, 0.5, 4)], rng)


@pytest.mark.parametrize("lim, trips", [(-100.0, 0), (2.5, 1), (25.0, 5)])
@pytest.mark.parametrize("which", ["while", "checkpointed_while"])
def test_grad2_through_while(mods, lim, trips, which):
    """The limit is held: finite differences keep the trip count (checked at both ends)."""
    m = mods[which]
    rng = np.random.default_rng(8)
    x, w = rng.uniform(0.0, 0.2, 4), rng.uniform(0.9, 1.0, 4)
    for s in (-1e-6, 0.0, 1e-6):
        assert while_ref(x + s, w + s, lim)[1] == trips
    check_grad2(m, [], [x, w, np.array(lim)], rng, held=(2,))


@pytest.mark.parametrize("n, m", [(0, 3), (1, 1), (5, 2)])
def test_grad2_through_nested_for(mods, n, m):
    rng = np.random.default_rng(23)
    check_grad2(mods["nested"], [np.array(n), np.array(m)], [rng.uniform(-0.9, 0.9, 3), rng.uniform(-0.9, 0.9, 3)],
                rng)


@pytest.mark.parametrize("flag, n", [(True, 0), (True, 1), (True, 5), (False, 5)])
def test_grad2_through_loop_in_if(mods, flag, n):
    rng = np.random.default_rng(24)
    check_grad2(mods["loop_in_if"], [np.array(flag), np.array(n)], [rng.standard_normal(5)], rng)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_grad2_through_if_in_loop(mods, n):
    """The threshold t is held: moving it could flip a branch."""
    rng = np.random.default_rng(25)
    check_grad2(mods["if_in_loop"], [np.array(n)], [np.array(3.0), rng.standard_normal(4)], rng, held=(0,))


@pytest.mark.parametrize("n", [0, 1, 5])
def test_grad2_through_checkpointed_for(mods, n):
    rng = np.random.default_rng(26)
    check_grad2(mods["checkpointed"], [np.array(n)], [rng.standard_normal(4), rng.uniform(-0.5, 0.5, 4)], rng)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_grad2_of_a_value_starting_two_carried_values(mods, n):
    rng = np.random.default_rng(27)
    check_grad2(mods["shared_init"], [np.array(n)], [rng.uniform(-0.9, 0.9, 3)], rng)


def test_differentiating_a_stack_backward_is_refused():
    """opc-grad on a function whose loops save on stacks (a loop's f_grad): a one-line refusal, not a
    gradient that misses the values going through the stacks."""
    from opc.autodiff import add_grad_function, add_grad_functions, default_wrt, find_func
    from opc.errors import UnsupportedError
    from opc.frontend import load_module

    src = load_module(FOR64)
    add_grad_functions(src.module)
    g = find_func(src.module, "f_grad")
    assert g is not None
    with pytest.raises(UnsupportedError, match="saves or reads loop values on stacks"):
        add_grad_function(src.module, g, default_wrt(g))


@pytest.mark.parametrize("k", [0, 2, -1, 4])
def test_grad2_through_index_switch(mods, k):
    rng = np.random.default_rng(24)
    check_grad2(mods["switch"], [np.array(k)], [rng.standard_normal(4), rng.standard_normal(4)], rng)
