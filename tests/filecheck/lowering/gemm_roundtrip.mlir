// RUN: opc opt %s -p opc-lower-to-loops | opc opt | filecheck %s
// The lowered IR prints in a form that parses again, with and without the
// optional bias and reserve operands (their types carry the same keywords).

// CHECK-LABEL: func.func @plain
// CHECK: opc_loops.gemm %x, %w, %out0 {{{.*}}} : memref<4x8xf32>, memref<8x5xf32>, memref<4x5xf32>
func.func @plain(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>) -> tensor<4x5xf32> {
  %r = opc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  func.return %r : tensor<4x5xf32>
}

// CHECK-LABEL: func.func @epilogue
// CHECK: opc_loops.gemm %x, %w bias %b, %out0 reserve %out1 {{{.*}}} : memref<4x8xf32>, memref<8x5xf32> bias memref<5xf32>, memref<4x5xf32> reserve memref<4x5xf32>
func.func @epilogue(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>, %b: tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %out, %reserve = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  func.return %out, %reserve : tensor<4x5xf32>, tensor<4x5xf32>
}
