// RUN: opc opt %s -p 'opc-fuse{target="%S/../../../examples/npu/npu.toml"}' | filecheck %s
// A device whose own fused_gemm_epilogue admits activation "none" and f32 /
// f16 / bf16 only (examples/npu, like Paddle's XPU kernel): opc-fuse fuses
// what that kernel runs, and leaves the activation, or everything, apart.

// CHECK-LABEL: func.func @relu_f32(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %h = opc.relu %z
func.func @relu_f32(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.relu %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h : tensor<8x32xf32>
}

// f64: the device kernel does not take it, and the device lists no kernel of opc's.
// CHECK-LABEL: func.func @linear_f64(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
func.func @linear_f64(%x: tensor<8x16xf64>, %w: tensor<16x32xf64>, %b: tensor<32xf64>) -> tensor<8x32xf64> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf64>, tensor<16x32xf64>) -> tensor<8x32xf64>
  %z = opc.add %mm, %b : (tensor<8x32xf64>, tensor<32xf64>) -> tensor<8x32xf64>
  func.return %z : tensor<8x32xf64>
}
