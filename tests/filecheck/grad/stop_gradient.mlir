// RUN: opc opt %s -p opc-grad | filecheck %s
// Without func, every function gets a _grad; without wrt, the grads are taken
// for every float arg not marked {opc.stop_gradient}. A wrt arg without a
// path to the result gets zeros. A function without float args is skipped.

// CHECK-LABEL: func.func @f_grad(%x: tensor<4xf32>, %s: tensor<4xf32> {opc.stop_gradient}, %n: tensor<4xi32>, %u: tensor<4xf32>, %dr: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK-NEXT:    %dx = opc.mul %dr, %s
// CHECK-NEXT:    %du = opc.full {value = 0.000000e+00 : f64} : () -> tensor<4xf32>
// CHECK-NEXT:    func.return %dx, %du : tensor<4xf32>, tensor<4xf32>
func.func @f(%x: tensor<4xf32>, %s: tensor<4xf32> {opc.stop_gradient}, %n: tensor<4xi32>, %u: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.mul %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// CHECK-NOT: @ints_grad
func.func @ints(%n: tensor<4xi32>) -> tensor<4xi32> {
  %r = opc.neg %n : (tensor<4xi32>) -> tensor<4xi32>
  func.return %r : tensor<4xi32>
}
