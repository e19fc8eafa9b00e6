// Run-time batch through the nn ops and their gradients (tests/shapes/test_dynamic_nn.py).

// conv (dynamic batch) + relu + max_pool + avg over all: a scalar loss
func.func @cnn(%x: tensor<?x2x6x6xf64>, %w: tensor<3x2x3x3xf64>) -> tensor<f64> {
  %y = opc.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<?x2x6x6xf64>, tensor<3x2x3x3xf64>) -> tensor<?x3x6x6xf64>
  %r = opc.tanh %y : (tensor<?x3x6x6xf64>) -> tensor<?x3x6x6xf64>
  %p, %i = opc.max_pool %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<?x3x6x6xf64>) -> (tensor<?x3x3x3xf64>, tensor<?x3x3x3xi64>)
  %l = opc.reduce_mean %p {axes = array<i64: 0, 1, 2, 3>} : (tensor<?x3x3x3xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}

// layer norm + self-attention over a run-time sequence + softmax cross entropy on run-time rows
func.func @seq(%x: tensor<?x4xf64>, %g: tensor<4xf64>, %h: tensor<4xf64>, %label: tensor<?x1xi64>) -> tensor<f64> {
  %n, %mu, %rs = opc.layer_norm %x, %g, %h {begin_norm_axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<?x4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<?x4xf64>, tensor<?xf64>, tensor<?xf64>)
  %q = opc.reshape %n : (tensor<?x4xf64>) -> tensor<1x?x4xf64>
  %a, %lse = opc.attention %q, %q, %q {scale = 0.5 : f64, is_causal = true} : (tensor<1x?x4xf64>, tensor<1x?x4xf64>, tensor<1x?x4xf64>) -> (tensor<1x?x4xf64>, tensor<1x?xf64>)
  %rows = opc.reshape %a : (tensor<1x?x4xf64>) -> tensor<?x4xf64>
  %loss, %sm = opc.softmax_cross_entropy %rows, %label {axis = -1} : (tensor<?x4xf64>, tensor<?x1xi64>) -> (tensor<?x1xf64>, tensor<?x4xf64>)
  %l = opc.reduce_sum %loss {axes = array<i64: 0, 1>} : (tensor<?x1xf64>) -> tensor<f64>
  func.return %l : tensor<f64>
}
