"""The compiled functions the torch and JAX interop tests share: f is float64 with two results
(a second-order gradient with grad=2); g is float32 with an integer input and an integer result
(gather by index, a cast), whose cotangents the frameworks never send; RUN_TIME's mlp takes
any batch (a run-time `?` dim)."""

SOURCE = """
func.func @f(%x: tensor<3x4xf64>, %w: tensor<4x2xf64>) -> (tensor<3x2xf64>, tensor<3xf64>) {
  %m = opc.matmul %x, %w : (tensor<3x4xf64>, tensor<4x2xf64>) -> tensor<3x2xf64>
  %t = opc.tanh %m : (tensor<3x2xf64>) -> tensor<3x2xf64>
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = false} : (tensor<3x4xf64>) -> tensor<3xf64>
  func.return %t, %s : tensor<3x2xf64>, tensor<3xf64>
}
func.func @g(%x: tensor<4x3xf32>, %i: tensor<5xi64>) -> (tensor<5x3xf32>, tensor<4x3xi32>) {
  %y = opc.gather %x, %i {axis = 0} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<5x3xf32>
  %s = opc.sigmoid %y : (tensor<5x3xf32>) -> tensor<5x3xf32>
  %c = opc.cast %x {dtype = i32} : (tensor<4x3xf32>) -> tensor<4x3xi32>
  func.return %s, %c : tensor<5x3xf32>, tensor<4x3xi32>
}
"""

RUN_TIME = """func.func @mlp(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>) -> tensor<?x4xf32> {
  %h = opc.matmul %x, %w : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %r = opc.tanh %h : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %r : tensor<?x4xf32>
}"""
