// RUN: opc opt %s -p 'opc-grad{func=mlp}' | filecheck %s
// @mlp_value_and_grad computes the forward once: the fused GEMM saves
// reserve_space (%z) for the backward, and the results come first.

// CHECK-LABEL: func.func @mlp_value_and_grad(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>, %ds: tensor<32xf32>) -> (tensor<32xf32>, tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) {
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"}
// CHECK-NEXT:    %h16 = opc.cast %h {dtype = f16}
// CHECK-NEXT:    %h32 = opc.cast %h16 {dtype = f32}
// CHECK-NEXT:    %s = opc.reduce_sum %h32
// CHECK-NOT:     opc.fused_gemm_epilogue %
// CHECK:         %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %{{.*}} {activation_grad = "gelu_grad"}
// CHECK-NEXT:    func.return %s, %dx, %dw, %db : tensor<32xf32>, tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>
func.func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<32xf32> {
  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  %h16 = opc.cast %h {dtype = f16} : (tensor<8x32xf32>) -> tensor<8x32xf16>
  %h32 = opc.cast %h16 {dtype = f32} : (tensor<8x32xf16>) -> tensor<8x32xf32>
  %s = opc.reduce_sum %h32 {axes = array<i64: 0>, keepdim = false} : (tensor<8x32xf32>) -> tensor<32xf32>
  func.return %s : tensor<32xf32>
}
