// name grid of tests/transforms/test_names.py: %$ as an argument, a result and the first of two results
func.func @arg(%$: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %t = opc.tanh %$ : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = opc.matmul %t, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = opc.softmax %m {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}
func.func @res(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %$ = opc.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = opc.cast %$ {dtype = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  %d = opc.cast %c {dtype = f32} : (tensor<4x8xf16>) -> tensor<4x8xf32>
  %r = opc.reduce_sum %d {axes = array<i64: 0>, keepdim = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
func.func @pair(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %$, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %y = opc.mul %$, %z : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
