// RUN: opc opt %s -p opc-grad | filecheck %s
// fused_gemm_epilogue's vjp is fused_gemm_epilogue_grad fed by reserve_space;
// cast's vjp is cast_grad; reduce_sum's is reshape + broadcast_to.

// CHECK-LABEL: func.func @mlp_grad(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>, %ds: tensor<32xf32>) -> (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) {
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"}
// CHECK-NEXT:    %h16 = opc.cast %h {dtype = f16}
// CHECK-NEXT:    %0 = opc.reshape %ds : (tensor<32xf32>) -> tensor<1x32xf32>
// CHECK-NEXT:    %1 = opc.broadcast_to %0 : (tensor<1x32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %2 = opc.cast_grad %h16, %1 : (tensor<8x32xf16>, tensor<8x32xf32>) -> tensor<8x32xf16>
// CHECK-NEXT:    %3 = opc.cast_grad %h, %2 : (tensor<8x32xf32>, tensor<8x32xf16>) -> tensor<8x32xf32>
// CHECK-NEXT:    %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %3 {activation_grad = "gelu_grad"}
// CHECK-NEXT:    func.return %dx, %dw, %db
func.func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<32xf32> {
  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  %h16 = opc.cast %h {dtype = f16} : (tensor<8x32xf32>) -> tensor<8x32xf16>
  %h32 = opc.cast %h16 {dtype = f32} : (tensor<8x32xf16>) -> tensor<8x32xf32>
  %s = opc.reduce_sum %h32 {axes = array<i64: 0>, keepdim = false} : (tensor<8x32xf32>) -> tensor<32xf32>
  func.return %s : tensor<32xf32>
}

// activation none: no reserve_space operand
// CHECK-LABEL: func.func @lin_grad
// CHECK-NEXT:    %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %do {trans_x = true} : (tensor<16x8xf32>, tensor<16x32xf32>, tensor<8x32xf32>)
func.func @lin(%x: tensor<16x8xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %o = opc.fused_gemm_epilogue %x, %w, %b {trans_x = true} : (tensor<16x8xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %o : tensor<8x32xf32>
}
