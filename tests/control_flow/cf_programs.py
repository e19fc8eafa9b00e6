"""MLIR programs with control flow, shared by the control-flow tests, with NumPy references."""

import numpy as np

IF = """
func.func @f(%flag: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<4xf32>) {
    %a = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %a : tensor<4xf32>
  } else {
    %b = opc.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %b : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
"""


def if_ref(flag, x):
    return np.exp(x) if flag else -x


# acc <- acc * w + i, n times (the body reads the induction variable)
FOR = """
func.func @f(%n: tensor<i64>, %x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<4xf32>) {
    %i64 = arith.index_cast %i : index to i64
    %it = tensor.from_elements %i64 : tensor<i64>
    %if = opc.cast %it {dtype = f32} : (tensor<i64>) -> tensor<f32>
    %y = opc.mul %acc, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %z = opc.add %y, %if : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    scf.yield %z : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
"""


def for_ref(n, x, w):
    acc = x.copy()
    for i in range(int(n)):
        acc = acc * w + np.float32(i)
    return acc


# two loop-carried values, one yielded unchanged, the other doubled: a doubling until the sum
# reaches the limit; results: (the value, the count of doublings as a float)
WHILE = """
func.func @f(%x: tensor<4xf64>, %lim: tensor<f64>) -> (tensor<4xf64>, tensor<f64>) {
  %z = arith.constant dense<0.0> : tensor<f64>
  %r:2 = scf.while (%a = %x, %k = %z) : (tensor<4xf64>, tensor<f64>) -> (tensor<4xf64>, tensor<f64>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4xf64>) -> tensor<f64>
    %t = opc.less_than %s, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    scf.condition(%c) %a, %k : tensor<4xf64>, tensor<f64>
  } do {
  ^bb0(%b: tensor<4xf64>, %j: tensor<f64>):
    %d = opc.add %b, %b : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
    %one = arith.constant dense<1.0> : tensor<f64>
    %j1 = opc.add %j, %one : (tensor<f64>, tensor<f64>) -> tensor<f64>
    scf.yield %d, %j1 : tensor<4xf64>, tensor<f64>
  }
  return %r#0, %r#1 : tensor<4xf64>, tensor<f64>
}
"""


def while_ref(x, lim):
    a, k = x.copy(), 0.0
    while a.sum() < lim:
        a, k = a + a, k + 1.0
    return a, np.float64(k)


# nested: for i < n { for j < m { acc = acc + (i * 10 + j) } }
NESTED = """
func.func @f(%n: tensor<i64>, %m: tensor<i64>, %x: tensor<3xf64>) -> tensor<3xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %mi = tensor.extract %m[] : tensor<i64>
  %mm = arith.index_cast %mi : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<3xf64>) {
    %s = scf.for %j = %c0 to %mm step %c1 iter_args(%b = %acc) -> (tensor<3xf64>) {
      %ten = arith.constant 10 : index
      %i10 = arith.muli %i, %ten : index
      %ij = arith.addi %i10, %j : index
      %v = arith.index_cast %ij : index to i64
      %vt = tensor.from_elements %v : tensor<i64>
      %vf = opc.cast %vt {dtype = f64} : (tensor<i64>) -> tensor<f64>
      %b1 = opc.add %b, %vf : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64>
      scf.yield %b1 : tensor<3xf64>
    }
    scf.yield %s : tensor<3xf64>
  }
  return %r : tensor<3xf64>
}
"""


def nested_ref(n, m, x):
    acc = x.copy()
    for i in range(int(n)):
        for j in range(int(m)):
            acc = acc + (i * 10 + j)
    return acc


# a loop inside an if: flag ? (x * 2^n) : x - 1
LOOP_IN_IF = """
func.func @f(%flag: tensor<i1>, %n: tensor<i64>, %x: tensor<5xf32>) -> tensor<5xf32> {
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<5xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %ni = tensor.extract %n[] : tensor<i64>
    %nn = arith.index_cast %ni : i64 to index
    %l = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<5xf32>) {
      %d = opc.add %acc, %acc : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
      scf.yield %d : tensor<5xf32>
    }
    scf.yield %l : tensor<5xf32>
  } else {
    %one = arith.constant dense<1.0> : tensor<5xf32>
    %m = opc.sub %x, %one : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
    scf.yield %m : tensor<5xf32>
  }
  return %r : tensor<5xf32>
}
"""


def loop_in_if_ref(flag, n, x):
    return x * np.float32(2.0 ** max(int(n), 0)) if flag else x - 1


# an if inside a loop: n times, acc = (sum(acc) > t) ? acc * 0.5 : acc + 1
IF_IN_LOOP = """
func.func @f(%n: tensor<i64>, %t: tensor<f64>, %x: tensor<4xf64>) -> tensor<4xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<4xf64>) {
    %s = opc.reduce_sum %acc {axes = array<i64: 0>, keepdim = false} : (tensor<4xf64>) -> tensor<f64>
    %g = opc.greater_than %s, %t : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %p = tensor.extract %g[] : tensor<i1>
    %y = scf.if %p -> (tensor<4xf64>) {
      %h = arith.constant dense<0.5> : tensor<4xf64>
      %a = opc.mul %acc, %h : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
      scf.yield %a : tensor<4xf64>
    } else {
      %o = arith.constant dense<1.0> : tensor<4xf64>
      %b = opc.add %acc, %o : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
      scf.yield %b : tensor<4xf64>
    }
    scf.yield %y : tensor<4xf64>
  }
  return %r : tensor<4xf64>
}
"""


def if_in_loop_ref(n, t, x):
    acc = x.copy()
    for _ in range(int(n)):
        acc = acc * 0.5 if acc.sum() > t else acc + 1.0
    return acc


# a while whose condition never turns false unless x is negative
FOREVER = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = scf.while (%a = %x) : (tensor<4xf32>) -> (tensor<4xf32>) {
    %z = arith.constant dense<0.0> : tensor<f32>
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4xf32>) -> tensor<f32>
    %t = opc.greater_than %s, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    scf.condition(%c) %a : tensor<4xf32>
  } do {
  ^bb0(%b: tensor<4xf32>):
    %d = opc.abs %b : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }MAXTRIPS
  return %r : tensor<4xf32>
}
"""


def forever(max_trips=None):
    attr = "" if max_trips is None else f" attributes {{opc.max_trips = {max_trips} : i64}}"
    return FOREVER.replace("MAXTRIPS", attr)


# run-time sizes through a loop: a carried tensor<?x4xf32> and a captured one of the same size,
# acc <- acc * w + p, n times (one compiled module for every row count and trip count)
FOR_SIZES = """
func.func @f(%n: tensor<i64>, %x: tensor<?x4xf32>, %w: tensor<4xf32>, %p: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<?x4xf32>) {
    %y = opc.mul %acc, %w : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
    %z = opc.add %y, %p : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
    scf.yield %z : tensor<?x4xf32>
  }
  return %r : tensor<?x4xf32>
}
"""


def for_sizes_ref(n, x, w, p):
    acc = x.copy()
    for _ in range(int(n)):
        acc = acc * w + p
    return acc


# a while over a tensor<?xf64>: doubled until its sum reaches the limit
WHILE_SIZES = """
func.func @f(%x: tensor<?xf64>, %lim: tensor<f64>) -> tensor<?xf64> {
  %r = scf.while (%a = %x) : (tensor<?xf64>) -> (tensor<?xf64>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<?xf64>) -> tensor<f64>
    %t = opc.less_than %s, %lim : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    scf.condition(%c) %a : tensor<?xf64>
  } do {
  ^bb0(%b: tensor<?xf64>):
    %d = opc.add %b, %b : (tensor<?xf64>, tensor<?xf64>) -> tensor<?xf64>
    scf.yield %d : tensor<?xf64>
  }
  return %r : tensor<?xf64>
}
"""


def while_sizes_ref(x, lim):
    while x.sum() < lim:
        x = x + x
    return x
