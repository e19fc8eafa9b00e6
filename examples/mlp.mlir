// A two-layer MLP head: gelu(x @ w + b), rounded through f16, summed over rows.
func.func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<32xf32> {
  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  %h16 = opc.cast %h {dtype = f16} : (tensor<8x32xf32>) -> tensor<8x32xf16>
  %h32 = opc.cast %h16 {dtype = f32} : (tensor<8x32xf16>) -> tensor<8x32xf32>
  %s = opc.reduce_sum %h32 {axes = array<i64: 0>, keepdim = false} : (tensor<8x32xf32>) -> tensor<32xf32>
  func.return %s : tensor<32xf32>
}
