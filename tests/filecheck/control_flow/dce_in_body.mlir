// RUN: opc opt %s -p dce | filecheck %s
// dce removes dead ops inside a loop body and an if's branches as anywhere else.

// CHECK-LABEL: func.func @f
// CHECK:         scf.for
// CHECK-NOT:       opc.neg
// CHECK:           opc.add
// CHECK:         scf.if
// CHECK-NOT:       opc.exp
// CHECK:           scf.yield %x
// CHECK:         func.return

func.func @f(%x: tensor<4xf32>, %nt: tensor<i64>, %pt: tensor<i1>) -> tensor<4xf32> {
  %ni = tensor.extract %nt[] : tensor<i64>
  %n = arith.index_cast %ni : i64 to index
  %p = tensor.extract %pt[] : tensor<i1>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<4xf32>) {
    %u = opc.neg %acc : (tensor<4xf32>) -> tensor<4xf32>
    %d = opc.add %acc, %acc : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }
  %r = scf.if %p -> (tensor<4xf32>) {
    %e = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %x : tensor<4xf32>
  } else {
    scf.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
