// RUN: not opc opt %s 2>&1 | filecheck %s
// The verifier names what is missing and where.

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>, %g: tensor<4x5xf32>) {
  // CHECK: invalid.mlir:[[# @LINE + 1]]:3: error: 'opc.fused_gemm_epilogue_grad' op activation_grad 'relu_grad' needs the reserve_space operand
  %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %g {activation_grad = "relu_grad"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>)
  func.return
}
