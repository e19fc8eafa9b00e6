// RUN: opc opt %s -p 'opc-grad{func=f},opc-grad{func=f_grad}' | filecheck %s
// RUN: opc opt %s -p 'opc-grad{func=c},opc-grad{func=c_grad},opc-grad{func=c_grad_grad}' | filecheck %s --check-prefix=CAST
// Grad ops are differentiated through their invoke / composite rule (the
// rules of opc-decompose), recomputed in the backward: relu_grad through
// select(x > 0, dout, 0), so its grad w.r.t. the dout is select again and
// w.r.t. x nothing (the compare stops it).

// CHECK-LABEL: func.func @f_grad_grad(%x: tensor<4xf32>, %dr: tensor<4xf32>, %ddx: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// CHECK-NEXT:    %0 = opc.full {value = 0.000000e+00 : f64}
// CHECK-NEXT:    %1 = opc.greater_than %x, %0
// CHECK-NEXT:    %2 = opc.full {value = 0.000000e+00 : f64}
// CHECK-NEXT:    %ddr = opc.select %1, %ddx, %2
// CHECK-NEXT:    %dx = opc.full {value = 0.000000e+00 : f64}
// CHECK-NEXT:    func.return %dx, %ddr
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// Paddle's cast double and triple grad: cast_grad through cast(dout, x.dtype).
// CAST-LABEL: func.func @c_grad(%x: tensor<2x3x4xf32>, %dy: tensor<2x3x4xf64>) -> tensor<2x3x4xf32> {
// CAST-NEXT:    %dx = opc.cast_grad %x, %dy : (tensor<2x3x4xf32>, tensor<2x3x4xf64>) -> tensor<2x3x4xf32>
// CAST-LABEL: func.func @c_grad_grad(%x: tensor<2x3x4xf32>, %dy: tensor<2x3x4xf64>, %ddx: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf64>) {
// CAST-NEXT:    %ddy = opc.cast_grad %dy, %ddx : (tensor<2x3x4xf64>, tensor<2x3x4xf32>) -> tensor<2x3x4xf64>
// CAST-NEXT:    %dx = opc.full {value = 0.000000e+00 : f64} : () -> tensor<2x3x4xf32>
// CAST-NEXT:    func.return %dx, %ddy
// CAST-LABEL: func.func @c_grad_grad_grad(%x: tensor<2x3x4xf32>, %dy: tensor<2x3x4xf64>, %ddx: tensor<2x3x4xf32>, %ddx_: tensor<2x3x4xf32>, %dddy: tensor<2x3x4xf64>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf64>, tensor<2x3x4xf32>) {
// CAST-NEXT:    %dddx = opc.cast_grad %ddx, %dddy : (tensor<2x3x4xf32>, tensor<2x3x4xf64>) -> tensor<2x3x4xf32>
// CAST-NEXT:    %dx = opc.full {value = 0.000000e+00 : f64} : () -> tensor<2x3x4xf32>
// CAST-NEXT:    %ddy = opc.full {value = 0.000000e+00 : f64} : () -> tensor<2x3x4xf64>
// CAST-NEXT:    func.return %dx, %ddy, %dddx
func.func @c(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf64> {
  %y = opc.cast %x {dtype = f64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
