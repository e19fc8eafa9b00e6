// A two-layer MLP on the npu device: gelu(x @ w1 + b1) @ w2 + b2, the logits
// rounded to f16. On examples/npu/npu.toml the first layer (gelu) runs by its
// composite rule and the second (activation none) through the device's
// npu_fused_gemm_epilogue; the f32 -> f16 cast through npu_cast.
func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x10xf32>, %b2: tensor<10xf32>) -> tensor<8x10xf16> {
  %h, %z = opc.fused_gemm_epilogue %x, %w1, %b1 {activation = "gelu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  %y = opc.fused_gemm_epilogue %h, %w2, %b2 {activation = "none"} : (tensor<8x32xf32>, tensor<32x10xf32>, tensor<10xf32>) -> tensor<8x10xf32>
  %logits = opc.cast %y {dtype = f16} : (tensor<8x10xf32>) -> tensor<8x10xf16>
  func.return %logits : tensor<8x10xf16>
}
