// RUN: opc opt %s -p canonicalize,dce,opc-fuse,opc-schedule | filecheck %s
// A slice read at a run-time offset is an index map and insert_slice a placement: the read, the
// exp and the write are one kernel (the offset computed on the host before it).

// CHECK-LABEL: func.func @f
// CHECK:         %i = arith.index_cast
// CHECK-NEXT:    %y = opc_sched.kernel attributes {kind = "placement"
// CHECK-NEXT:      %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1]
// CHECK-NEXT:      %e = opc.exp %row
// CHECK-NEXT:      tensor.insert_slice %e into %x[%i, 0] [1, 4] [1, 1]
func.func @f(%x: tensor<?x4xf32>, %o: tensor<i64>) -> tensor<?x4xf32> {
  %oi = tensor.extract %o[] : tensor<i64>
  %i = arith.index_cast %oi : i64 to index
  %row = tensor.extract_slice %x[%i, 0] [1, 4] [1, 1] : tensor<?x4xf32> to tensor<4xf32>
  %e = opc.exp %row : (tensor<4xf32>) -> tensor<4xf32>
  %y = tensor.insert_slice %e into %x[%i, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
