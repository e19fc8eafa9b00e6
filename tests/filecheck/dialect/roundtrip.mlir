// RUN: opc opt %s | filecheck %s
// RUN: opc opt %s --generic | opc opt - | filecheck %s

// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<32xf32> {
  // CHECK-NEXT: %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu", trans_x = false} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
  // CHECK-NEXT: %u = opc.cast %h {dtype = ui8} : (tensor<8x32xf32>) -> tensor<8x32xui8>
  %u = opc.cast %h {dtype = ui8} : (tensor<8x32xf32>) -> tensor<8x32xui8>
  // CHECK-NEXT: %bits = opc.bitcast %h {dtype = i32} : (tensor<8x32xf32>) -> tensor<8x32xi32>
  %bits = opc.bitcast %h {dtype = i32} : (tensor<8x32xf32>) -> tensor<8x32xi32>
  // CHECK-NEXT: %s = opc.reduce_sum %z {axes = array<i64: 0>} : (tensor<8x32xf32>) -> tensor<32xf32>
  %s = opc.reduce_sum %z {axes = array<i64: 0>, keepdim = false} : (tensor<8x32xf32>) -> tensor<32xf32>
  // CHECK-NEXT: %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %h {activation_grad = "gelu_grad"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>)
  %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %h {activation_grad = "gelu_grad"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>) -> (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>)
  // CHECK-NEXT: %f = opc.full {value = 1.000000e+00 : f64} : () -> tensor<32xf32>
  %f = opc.full {value = 1.0 : f64} : () -> tensor<32xf32>
  // CHECK-NEXT: func.return %s : tensor<32xf32>
  func.return %s : tensor<32xf32>
}
