// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc explain --kernels %s | filecheck %s --check-prefix=EXPLAIN
// A column sum is a kernel of its own (with its elementwise producer fused
// in): it walks its input in memory order, accumulating whole rows, so its
// consumer, which reads the per-column result broadcast over the rows, is
// another kernel.

// CHECK-LABEL: func.func @colsum
// CHECK:         %c = opc_sched.kernel attributes {kind = "reduction", reason = "a reduction over outer axes walks its input in memory order; %c feeds opc.broadcast_to: it reads each element several times (broadcast)"}
// CHECK-NEXT:      opc.exp
// CHECK-NEXT:      opc.reduce_sum
// CHECK:         opc_sched.kernel attributes {kind = "elementwise", reason = "%y is returned"}
// CHECK-NEXT:      opc.broadcast_to
// CHECK-NEXT:      opc.sub

// EXPLAIN:      @colsum: 2 kernels
// EXPLAIN-NEXT:   kernel 0 (reduction): exp, reduce_sum
// EXPLAIN-NEXT:     boundary: a reduction over outer axes walks its input in memory order; %c feeds opc.broadcast_to
// EXPLAIN-NEXT:   kernel 1 (elementwise): broadcast_to, sub
func.func @colsum(%x: tensor<64x32xf32>) -> tensor<64x32xf32> {
  %e = opc.exp %x : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %c = opc.reduce_sum %e {axes = array<i64: 0>} : (tensor<64x32xf32>) -> tensor<32xf32>
  %b = opc.broadcast_to %c : (tensor<32xf32>) -> tensor<64x32xf32>
  %y = opc.sub %x, %b : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  func.return %y : tensor<64x32xf32>
}
