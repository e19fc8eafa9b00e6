// RUN: opc opt %s | filecheck %s
// RUN: opc opt %s --generic | opc opt - | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// The ops whose result sizes depend on the data: round trip, and the loops of a nonzero (a counting
// pass, the count defining the result's size, then the fill), with the count returned in `found`.

// CHECK-LABEL: func.func @nz
// LOOPS-LABEL: func.func @nz(%x: memref<?x4xf32>, %out0: memref<2x?xi64>, %found: memref<1xi64>, %n0: index)
func.func @nz(%x: tensor<?x4xf32>) -> tensor<2x?xi64> {
  // CHECK-NEXT: %r = opc.nonzero %x : (tensor<?x4xf32>) -> tensor<2x?xi64>
  // LOOPS: %count = scf.for
  // LOOPS: memref.reinterpret_cast %out0 {{.*}}%count
  // LOOPS: scf.if
  // LOOPS: memref.store {{.*}}, %found
  %r = opc.nonzero %x : (tensor<?x4xf32>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}

// CHECK-LABEL: func.func @top
func.func @top(%x: tensor<?x8xf32>, %k: tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>) {
  // CHECK-NEXT: %v, %i = opc.topk %x, %k {axis = 1 : i64, largest = false} : (tensor<?x8xf32>, tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  %v, %i = opc.topk %x, %k {axis = 1, largest = false} : (tensor<?x8xf32>, tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  func.return %v, %i : tensor<?x?xf32>, tensor<?x?xi64>
}

// CHECK-LABEL: func.func @uniq
func.func @uniq(%x: tensor<7xi32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<7xi64>, tensor<?xi64>) {
  // CHECK-NEXT: %y, %f, %inv, %c = opc.unique %x {sorted = false} : (tensor<7xi32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<7xi64>, tensor<?xi64>)
  %y, %f, %inv, %c = opc.unique %x {sorted = false} : (tensor<7xi32>) -> (tensor<?xi32>, tensor<?xi64>, tensor<7xi64>, tensor<?xi64>)
  func.return %y, %f, %inv, %c : tensor<?xi32>, tensor<?xi64>, tensor<7xi64>, tensor<?xi64>
}

// CHECK-LABEL: func.func @uniq_rows
func.func @uniq_rows(%x: tensor<?x3xf32>) -> (tensor<3x?xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) {
  %t = opc.transpose %x {perm = array<i64: 1, 0>} : (tensor<?x3xf32>) -> tensor<3x?xf32>
  // CHECK: %y, %f, %inv, %c = opc.unique %t {axis = -1 : i64} : (tensor<3x?xf32>) -> (tensor<3x?xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  %y, %f, %inv, %c = opc.unique %t {axis = -1, sorted = true} : (tensor<3x?xf32>) -> (tensor<3x?xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  func.return %y, %f, %inv, %c : tensor<3x?xf32>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>
}
