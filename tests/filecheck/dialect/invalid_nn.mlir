// RUN: not opc opt %s 2>&1 | filecheck %s
// layer_norm's scale must have x's trailing (normalized) shape.

func.func @f(%x: tensor<4x8xf32>, %s: tensor<4xf32>, %b: tensor<8xf32>) {
  // CHECK: invalid_nn.mlir:[[# @LINE + 1]]:3: error: 'opc.layer_norm' op scale must have shape [8], got [4]
  %y, %m, %r = opc.layer_norm %x, %s, %b : (tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  func.return
}
