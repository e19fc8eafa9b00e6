// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// Softmax composed from primitives is ONE row kernel: one parallel loop over
// the rows; per row a max pass, an exp+sum pass that keeps exp in a row
// buffer (no full-size temporary), and a divide pass. Both reductions are
// vectorizable (omp simd reduction), max with a NaN flag of its own.

// CHECK-LABEL: func.func @softmax
// CHECK:         %y = opc_sched.kernel attributes {kind = "row", reason = "%y is returned"} : tensor<8x16xf32> {
// CHECK-NEXT:      opc.reduce_max
// CHECK-NEXT:      opc.sub
// CHECK-NEXT:      opc.exp
// CHECK-NEXT:      opc.reduce_sum
// CHECK-NEXT:      opc.div
// CHECK-NEXT:      opc_sched.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y

// LOOPS-LABEL: func.func @softmax
// LOOPS-NOT:     memref.alloc()
// LOOPS:         "scf.parallel"
// LOOPS:           memref.alloca() : memref<16xf32>
// LOOPS:           scf.for
// LOOPS:             arith.cmpf ogt
// LOOPS:             arith.cmpf une
// LOOPS:           } {opc.simd_reduction = ["max", "|"]}
// LOOPS:           scf.for
// LOOPS:             math.exp
// LOOPS:             memref.store {{.*}} : memref<16xf32>
// LOOPS:             arith.addf
// LOOPS:           } {opc.simd_reduction = ["+"]}
// LOOPS:           scf.for
// LOOPS:             arith.divf
// LOOPS:             memref.store {{.*}}, %out0
// LOOPS:         scf.reduce
// LOOPS-NOT:     "scf.parallel"
// LOOPS:         func.return
func.func @softmax(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %m = opc.reduce_max %x {axes = array<i64: 1>, keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %s = opc.sub %x, %m : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  %e = opc.exp %s : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %z = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %y = opc.div %e, %z : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
