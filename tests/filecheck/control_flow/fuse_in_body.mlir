// RUN: opc opt %s -p opc-fuse | filecheck %s
// opc-fuse rewrites inside a loop body as anywhere else.

// CHECK:       scf.for
// CHECK:         opc.fused_gemm_epilogue
// CHECK-NOT:     opc.matmul
// CHECK:         scf.yield

func.func @f(%n: tensor<i64>, %x: tensor<2x3xf32>, %w: tensor<3x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %r = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %x) -> (tensor<2x3xf32>) {
    %m = opc.matmul %acc, %w {trans_x = false, trans_y = false} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %y = opc.add %m, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %z = opc.relu %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
    scf.yield %z : tensor<2x3xf32>
  }
  return %r : tensor<2x3xf32>
}
