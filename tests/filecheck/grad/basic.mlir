// RUN: opc opt %s -p 'opc-grad{func=f wrt=x}' | filecheck %s
// Reverse mode over one block: %t feeds three ops (exp, mul, neg) and its
// three cotangents are summed (in the order they came, once %t is reached); %dead never reaches the result, so it is pruned;
// %k depends on no wrt arg, so it gets no backward (it stays as a forward value
// the backward of %q needs). @f itself is untouched.

// CHECK-LABEL: func.func @f(
// CHECK:         %dead = opc.log

// CHECK-LABEL: func.func @f_grad(%x: tensor<4xf32>, %w: tensor<4xf32>, %do: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    %t = opc.tanh %x
// CHECK-NEXT:    %k = opc.sqrt %w
// CHECK-NEXT:    %p = opc.exp %t
// CHECK-NEXT:    %0 = opc.neg %do
// CHECK-NEXT:    %1 = opc.mul %do, %k
// CHECK-NEXT:    %2 = opc.mul %do, %p
// CHECK-NEXT:    %3 = opc.add %0, %1
// CHECK-NEXT:    %4 = opc.add %3, %2
// tanh' = 4 u / (1 + u)^2, u = e^-|2x|: from x, not 1 - t*t (which cancels near |t| = 1)
// CHECK-NEXT:    %5 = opc.full {value = 2.000000e+00 : f64}
// CHECK-NEXT:    %6 = opc.mul %x, %5
// CHECK-NEXT:    %7 = opc.abs %6
// CHECK-NEXT:    %8 = opc.neg %7
// CHECK-NEXT:    %9 = opc.exp %8
// CHECK-NEXT:    %10 = opc.full {value = 1.000000e+00 : f64}
// CHECK-NEXT:    %11 = opc.add %10, %9
// CHECK-NEXT:    %12 = opc.mul %11, %11
// CHECK-NEXT:    %13 = opc.div %9, %12
// CHECK-NEXT:    %14 = opc.full {value = 4.000000e+00 : f64}
// CHECK-NEXT:    %15 = opc.mul %13, %14
// CHECK-NEXT:    %dx = opc.mul %4, %15
// CHECK-NEXT:    func.return %dx : tensor<4xf32>
func.func @f(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %t = opc.tanh %x : (tensor<4xf32>) -> tensor<4xf32>
  %dead = opc.log %t : (tensor<4xf32>) -> tensor<4xf32>
  %k = opc.sqrt %w : (tensor<4xf32>) -> tensor<4xf32>
  %p = opc.exp %t : (tensor<4xf32>) -> tensor<4xf32>
  %q = opc.mul %t, %k : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r = opc.neg %t : (tensor<4xf32>) -> tensor<4xf32>
  %s = opc.add %p, %q : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %o = opc.add %s, %r : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %o : tensor<4xf32>
}
