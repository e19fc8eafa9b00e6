// RUN: opc opt %s | filecheck %s
// RUN: opc opt %s --generic | opc opt - | filecheck %s
// MLIR's own slice ops with run-time offsets and sizes, and opc.iota, print and parse as written.

// CHECK-LABEL: func.func @f
// CHECK:         %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1] : tensor<?x4xf32> to tensor<4xf32>
// CHECK:         %s = tensor.extract_slice %x[1, 0] [%m, 4] [1, 1] : tensor<?x4xf32> to tensor<?x4xf32>
// CHECK:         %y = tensor.insert_slice %row into %x[%i, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<?x4xf32>
// CHECK:         %a = opc.iota %n : (index) -> tensor<?xi64>
// CHECK:         %b = opc.iota : () -> tensor<4xf32>
func.func @f(%x: tensor<?x4xf32>, %o: tensor<i64>) -> (tensor<4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?xi64>, tensor<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %oi = tensor.extract %o[] : tensor<i64>
  %i = arith.index_cast %oi : i64 to index
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %m = arith.subi %n, %c1 : index
  %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1] : tensor<?x4xf32> to tensor<4xf32>
  %s = tensor.extract_slice %x[1, 0] [%m, 4] [1, 1] : tensor<?x4xf32> to tensor<?x4xf32>
  %y = tensor.insert_slice %row into %x[%i, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<?x4xf32>
  %a = opc.iota %n : (index) -> tensor<?xi64>
  %b = opc.iota : () -> tensor<4xf32>
  func.return %row, %s, %y, %a, %b : tensor<4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?xi64>, tensor<4xf32>
}
