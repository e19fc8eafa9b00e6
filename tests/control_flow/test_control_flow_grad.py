"""Gradients through scf.if (a grad if on the same condition) against central differences in f64."""

import numpy as np
import pytest

import opc

# y = flag ? exp(x) * w : x * x - w ; a branch reads w from outside, both read x
IF64 = """
func.func @f(%flag: tensor<i1>, %x: tensor<4xf64>, %w: tensor<4xf64>) -> tensor<4xf64> {
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<4xf64>) {
    %a = opc.exp %x : (tensor<4xf64>) -> tensor<4xf64>
    %b = opc.mul %a, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %b : tensor<4xf64>
  } else {
    %c = opc.mul %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    %d = opc.sub %c, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %d : tensor<4xf64>
  }
  %s = opc.tanh %r : (tensor<4xf64>) -> tensor<4xf64>
  return %s : tensor<4xf64>
}
"""

# an if inside an if: the inner one only on the outer's then branch
NESTED_IF = """
func.func @f(%p1: tensor<i1>, %p2: tensor<i1>, %x: tensor<3xf64>) -> tensor<3xf64> {
  %a = tensor.extract %p1[] : tensor<i1>
  %r = scf.if %a -> (tensor<3xf64>) {
    %b = tensor.extract %p2[] : tensor<i1>
    %s = scf.if %b -> (tensor<3xf64>) {
      %e = opc.sin %x : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %e : tensor<3xf64>
    } else {
      scf.yield %x : tensor<3xf64>
    }
    %t = opc.mul %s, %x : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    scf.yield %t : tensor<3xf64>
  } else {
    %n = opc.neg %x : (tensor<3xf64>) -> tensor<3xf64>
    scf.yield %n : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
"""


@pytest.fixture(scope="module")
def mods():
    return {"if": opc.compile(IF64, grad=True), "nested": opc.compile(NESTED_IF.replace("opc.sin", "opc.tanh"),
                                                                      grad=True)}


def check_grad(m, flags, floats, rng, tail=()):
    """<grad, v> against (L(a + hv) - L(a - hv)) / 2h, L = <f(a), dout>; `tail`: inputs after the
    floats that are held fixed (their gradients are not checked)."""
    out = m.f(*flags, *floats, *tail)
    dout = rng.standard_normal(out.shape)
    grads = m.f_grad(*flags, *floats, *tail, dout)
    grads = grads if isinstance(grads, tuple) else (grads,)
    vs = [rng.standard_normal(a.shape) for a in floats]
    h = 1e-6

    def loss(s):
        return float(np.sum(m.f(*flags, *[a + s * h * v for a, v in zip(floats, vs)], *tail) * dout))

    fd = (loss(1) - loss(-1)) / (2 * h)
    analytic = sum(float(np.sum(g * v)) for g, v in zip(grads, vs))
    assert abs(fd - analytic) <= 1e-6 * max(1.0, abs(fd)), (fd, analytic)


@pytest.mark.parametrize("flag", [True, False])
def test_grad_through_if(mods, flag):
    rng = np.random.default_rng(1)
    check_grad(mods["if"], [np.array(flag)], [rng.standard_normal(4), rng.standard_normal(4)], rng)


@pytest.mark.parametrize("p1, p2", [(True, True), (True, False), (False, True)])
def test_grad_through_nested_if(mods, p1, p2):
    rng = np.random.default_rng(2)
    check_grad(mods["nested"], [np.array(p1), np.array(p2)], [rng.standard_normal(3)], rng)


def test_grad_if_on_the_same_condition():
    """The gradient function holds an scf.if on the forward's condition, not a select of both."""
    from opc.api import prepare
    from opc.frontend import load_module

    src = load_module(IF64)
    prepare(src, grad=True)
    text = str(src.module)
    grad_fn = text[text.index("@f_grad("):]
    grad_fn = grad_fn[:grad_fn.find("func.func")] if "func.func" in grad_fn else grad_fn
    assert grad_fn.count("scf.if") == 2 and "opc.select" not in grad_fn  # the forward's, and its grad


# acc <- tanh(acc * w + i), n times: the body reads the induction variable and a captured weight
FOR64 = """
func.func @f(%n: tensor<i64>, %x: tensor<4xf64>, %w: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
    %i64 = arith.index_cast %i : index to i64
    %it = tensor.from_elements %i64 : tensor<i64>
    %if = opc.cast %it {dtype = f64} : (tensor<i64>) -> tensor<f64>
    %y = opc.mul %acc, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    %z = opc.add %y, %if : (tensor<4xf64>, tensor<f64>) -> tensor<4xf64>
    %t = opc.tanh %z : (tensor<4xf64>) -> tensor<4xf64>
    scf.yield %t : tensor<4xf64>
  }
  %s = opc.mul %r, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  return %s : tensor<4xf64>
}
"""

# two carried values (a, b) <- (a * b, sin(a)) over a loop nested in a loop, the inner count m
NESTED_FOR64 = """
func.func @f(%n: tensor<i64>, %m: tensor<i64>, %a0: tensor<3xf64>, %b0: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %mi = tensor.extract %m[] : tensor<i64>
  %mm = arith.index_cast %mi : i64 to index
  %r:2 = scf.for %i = %c0 to %nn step %c1 iter_args(%a = %a0, %b = %b0) -> (tensor<3xf64>, tensor<3xf64>) {
    %s:2 = scf.for %j = %c0 to %mm step %c1 iter_args(%p = %a, %q = %b) -> (tensor<3xf64>, tensor<3xf64>) {
      %pq = opc.mul %p, %q : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
      %sp = opc.sin %p : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %pq, %sp : tensor<3xf64>, tensor<3xf64>
    }
    %u = opc.add %s#0, %b0 : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    scf.yield %u, %s#1 : tensor<3xf64>, tensor<3xf64>
  }
  %o = opc.add %r#0, %r#1 : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  return %o : tensor<3xf64>
}
"""


@pytest.fixture(scope="module")
def loops():
    from cf_programs import IF_IN_LOOP, LOOP_IN_IF

    loop_in_if = LOOP_IN_IF.replace("f32", "f64")
    return {"for": opc.compile(FOR64, grad=True), "nested": opc.compile(NESTED_FOR64, grad=True),
            "if_in_loop": opc.compile(IF_IN_LOOP, grad=True), "loop_in_if": opc.compile(loop_in_if, grad=True)}


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_grad_through_for(loops, n):
    rng = np.random.default_rng(3)
    check_grad(loops["for"], [np.array(n)], [rng.standard_normal(4), rng.uniform(-0.5, 0.5, 4)], rng)


@pytest.mark.parametrize("n, m", [(0, 3), (2, 0), (1, 1), (3, 4)])
def test_grad_through_nested_for(loops, n, m):
    rng = np.random.default_rng(4)
    check_grad(loops["nested"], [np.array(n), np.array(m)],
               [rng.uniform(-0.9, 0.9, 3), rng.uniform(-0.9, 0.9, 3)], rng)


@pytest.mark.parametrize("n", [0, 1, 9])
def test_grad_through_if_in_loop(loops, n):
    rng = np.random.default_rng(5)
    m = loops["if_in_loop"]
    x = rng.standard_normal(4)
    out = m.f(np.array(n), np.array(3.0), x)
    dout = rng.standard_normal(4)
    g = m.f_grad(np.array(n), np.array(3.0), x, dout)
    g = g if not isinstance(g, tuple) else g
    v = rng.standard_normal(4)
    h = 1e-6
    fd = (np.sum(m.f(np.array(n), np.array(3.0), x + h * v) * dout)
          - np.sum(m.f(np.array(n), np.array(3.0), x - h * v) * dout)) / (2 * h)
    gx = g[1] if isinstance(g, tuple) else g  # (dt, dx): t is a float input too
    assert out.shape == (4,)
    assert abs(fd - np.sum(gx * v)) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("flag, n", [(True, 0), (True, 5), (False, 5)])
def test_grad_through_loop_in_if(loops, flag, n):
    rng = np.random.default_rng(6)
    check_grad(loops["loop_in_if"], [np.array(flag), np.array(n)], [rng.standard_normal(5)], rng)


def test_for_grad_saves_carried_values_and_runs_in_reverse():
    """The forward loop of @f_grad pushes the carried value each iteration; a second loop pops it."""
    from opc.api import prepare
    from opc.frontend import load_module

    src = load_module(FOR64)
    prepare(src, grad=True)
    text = str(src.module)
    grad_fn = text[text.index("@f_grad("):]
    grad_fn = grad_fn[:grad_fn.find("func.func")] if "func.func" in grad_fn else grad_fn
    assert grad_fn.count("scf.for") == 2
    assert grad_fn.count("opc_stack.push") == 1 and grad_fn.count("opc_stack.pop") == 1
    assert grad_fn.index("opc_stack.push") < grad_fn.index("opc_stack.pop")


# a <- e * w + sigmoid(e), e = a + tanh(a), while sum(a) < lim: the trip count depends on the input
WHILE64 = """
func.func @f(%x: tensor<4xf64>, %w: tensor<4xf64>, %lim: tensor<f64>) -> tensor<4xf64> {
  %r = scf.while (%a = %x) : (tensor<4xf64>) -> (tensor<4xf64>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4xf64>) -> tensor<f64>
    %t = opc.less_than %s, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    %th = opc.tanh %a : (tensor<4xf64>) -> tensor<4xf64>
    %e = opc.add %a, %th : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.condition(%c) %e : tensor<4xf64>
  } do {
  ^bb0(%b: tensor<4xf64>):
    %m = opc.mul %b, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    %d = opc.sigmoid %b : (tensor<4xf64>) -> tensor<4xf64>
    %n = opc.add %m, %d : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    scf.yield %n : tensor<4xf64>
  }
  %o = opc.mul %r, %w : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  return %o : tensor<4xf64>
}
"""


def while_ref(x, w, lim):
    a, trips = x.copy(), 0
    while a.sum() < lim:
        e = a + np.tanh(a)
        a = e * w + 1 / (1 + np.exp(-e))
        trips += 1
    return (a + np.tanh(a)) * w, trips


@pytest.mark.parametrize("lim, trips", [(-100.0, 0), (2.5, 1), (40.0, None)])
def test_grad_through_while(lim, trips):
    m = opc.compile(WHILE64, grad=True)
    rng = np.random.default_rng(8)
    x, w = rng.uniform(0.0, 0.2, 4), rng.uniform(0.9, 1.0, 4)
    want, n = while_ref(x, w, lim)
    assert trips is None and n > 3 or n == trips, n
    np.testing.assert_allclose(m.f(x, w, np.array(lim)), want, rtol=1e-12)
    # finite differences keep the trip count: a small move of x and w does not cross the limit
    check_grad(m, [], [x, w], rng, tail=[np.array(lim)])


def test_value_and_grad_through_for(loops):
    """@f_value_and_grad saves and pops like @f_grad: its values and gradients are theirs."""
    m = loops["for"]
    rng = np.random.default_rng(9)
    x, w, dout = rng.standard_normal(4), rng.uniform(-0.5, 0.5, 4), rng.standard_normal(4)
    n = np.array(25)
    out, dx, dw = m.f_value_and_grad(n, x, w, dout)
    np.testing.assert_array_equal(out, m.f(n, x, w))
    gx, gw = m.f_grad(n, x, w, dout)
    np.testing.assert_array_equal(dx, gx)
    np.testing.assert_array_equal(dw, gw)


def with_checkpoint(src: str, k: int) -> str:
    """Each scf.for of src marked to save every k-th iteration's carried values only."""
    out, depth = [], 0
    for line in src.splitlines():
        depth += line.count("{") - line.count("}")
        if line.strip() == "}" and out and "scf.yield" in out[-1]:
            line = line + f" {{opc.checkpoint = {k} : i64}}"
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 6, 23])
def test_grad_through_checkpointed_for(k, n):
    """Saving every k-th state and recomputing the rest gives the full-save gradients."""
    m = opc.compile(with_checkpoint(FOR64, k), grad=True)
    full = opc.compile(FOR64, grad=True)
    rng = np.random.default_rng(12)
    x, w, dout = rng.standard_normal(4), rng.uniform(-0.5, 0.5, 4), rng.standard_normal(4)
    for a, b in zip(m.f_grad(np.array(n), x, w, dout), full.f_grad(np.array(n), x, w, dout)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    check_grad(m, [np.array(n)], [x, w], rng)


def test_checkpoint_option_of_opc_grad():
    """opc-grad{checkpoint=k} marks every loop; the forward pushes under an scf.if (every k-th)."""
    from opc.frontend import load_module
    from opc.ir import make_context
    from opc.transforms.opc_grad import GradPass

    src = load_module(NESTED_FOR64)
    GradPass(checkpoint=3).apply(make_context(), src.module)
    text = str(src.module)
    assert text.count("opc.checkpoint = 3") >= 2
    grad_fn = text[text.index("@f_grad("):]
    assert "scf.if" in grad_fn[:grad_fn.index("opc_stack.pop")]
    assert grad_fn.count("scf.for") >= 4  # forward, segments, the segment rerun, its reverse


# one tensor as the start of two loop-carried values: its cotangent is the sum of both
SHARED_INIT_FOR64 = """
func.func @f(%n: tensor<i64>, %x: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r:2 = scf.for %i = %c0 to %nn step %c1 iter_args(%a = %x, %b = %x) -> (tensor<3xf64>, tensor<3xf64>) {
    %ab = opc.mul %a, %b : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    %sa = opc.sin %a : (tensor<3xf64>) -> tensor<3xf64>
    scf.yield %sa, %ab : tensor<3xf64>, tensor<3xf64>
  }
  %o = opc.add %r#0, %r#1 : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  return %o : tensor<3xf64>
}
"""


@pytest.mark.parametrize("checkpoint", [0, 2])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_grad_of_a_value_starting_two_carried_values(n, checkpoint):
    m = opc.compile(with_checkpoint(SHARED_INIT_FOR64, checkpoint) if checkpoint else SHARED_INIT_FOR64, grad=True)
    rng = np.random.default_rng(13)
    check_grad(m, [np.array(n)], [rng.uniform(-0.9, 0.9, 3)], rng)
