// RUN: not opc opt %s 2>&1 | filecheck %s
// gather takes integer indices.

func.func @f(%x: tensor<4x8xf32>, %i: tensor<3xf32>) {
  // CHECK: invalid_gather.mlir:[[# @LINE + 1]]:3: error: 'opc.gather' op indices must have an integer element type (i8, ui8, i16, i32, i64), got f32
  %g = opc.gather %x, %i : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<3x8xf32>
  func.return
}
