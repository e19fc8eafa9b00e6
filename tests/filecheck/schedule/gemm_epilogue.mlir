// RUN: opc opt %s -p opc-fuse,opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-fuse,opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// RUN: opc opt %s -p opc-fuse,opc-lower-to-loops | opc opt | filecheck %s --check-prefix=LOOPS
// GEMM epilogues: the exporter's erf GELU after an MLP's matmul + bias (2-D, the bias fused into
// the GEMM by opc-fuse) and a residual add after the next matmul are each ONE kernel with their
// GEMM; the lowered GEMM carries the chain as its epilogue region (no loop nest of its own), which
// prints and parses again. The GELU writes in place: the GEMM's result is the chain's buffer.

// CHECK-LABEL: func.func @mlp
// CHECK:         %g = opc_sched.kernel attributes {kind = "gemm", reason = "a GEMM runs as the library's blocked kernel (its epilogue fused); %g feeds opc.matmul"}
// CHECK-NEXT:      opc.fused_gemm_epilogue %x, %w1, %b1 :
// CHECK-NEXT:      opc.div
// CHECK-NEXT:      opc.erf
// CHECK-NEXT:      opc.add
// CHECK-NEXT:      opc.mul
// CHECK-NEXT:      opc.mul
// CHECK-NEXT:      opc_sched.yield
// CHECK:         %y = opc_sched.kernel attributes {kind = "gemm", reason = "a GEMM runs as the library's blocked kernel (its epilogue fused); %y is returned"}
// CHECK-NEXT:      opc.matmul %g, %w2
// CHECK-NEXT:      opc.add %x
// CHECK-NEXT:      opc_sched.yield
// CHECK-NOT:     opc_sched.kernel

// LOOPS-LABEL: func.func @mlp
// LOOPS-NOT:     "scf.parallel"
// LOOPS:         %[[Z:.*]] = memref.reinterpret_cast %g to
// LOOPS:         opc_loops.gemm %x, %w1 bias %b1, %[[Z]] epilogue {
// LOOPS-NEXT:    ^bb0(%[[R:.*]]: index, %[[C:.*]]: index):
// LOOPS:           arith.muli %[[R]]
// LOOPS-NEXT:      %[[I:.*]] = arith.addi %{{.*}}, %[[C]] : index
// LOOPS-NEXT:      memref.load %{{.*}}[%[[I]]]
// LOOPS:           arith.divf
// LOOPS-NEXT:      math.erf
// LOOPS:           arith.addf
// LOOPS-NEXT:      arith.mulf
// LOOPS:           arith.mulf
// LOOPS-NEXT:      memref.store %{{.*}}, %g_flat[%[[I]]]
// LOOPS-NEXT:    } {opc.epilogue = "div, erf, add, mul, mul"
// LOOPS:         opc_loops.gemm %g, %w2, %{{.*}} epilogue {
// LOOPS:           arith.addf
// LOOPS-NEXT:      memref.store %{{.*}}, %out0_flat
// LOOPS-NEXT:    } {opc.epilogue = "add"
// LOOPS-NOT:     "scf.parallel"
// LOOPS:         func.return
func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x16xf32>) -> tensor<8x16xf32> {
  %mm = opc.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b1 : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %s2 = arith.constant dense<1.41421354> : tensor<f32>
  %d = opc.div %z, %s2 : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %e = opc.erf %d : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %a = opc.add %e, %one : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %p = opc.mul %z, %a : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %half = arith.constant dense<0.5> : tensor<f32>
  %g = opc.mul %p, %half : (tensor<8x32xf32>, tensor<f32>) -> tensor<8x32xf32>
  %m2 = opc.matmul %g, %w2 : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %y = opc.add %x, %m2 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}

// A transpose in the chain keeps it apart (the epilogue is flat): GEMM, then a nest.
// CHECK-LABEL: func.func @transposed
// CHECK:         opc_sched.kernel attributes {kind = "gemm"
// CHECK-NEXT:      opc.matmul
// CHECK-NEXT:      opc_sched.yield
// CHECK:         opc_sched.kernel attributes {kind = "elementwise"
// LOOPS-LABEL: func.func @transposed
// LOOPS:         opc_loops.gemm %x, %w, %{{[a-z0-9_]+}} {
// LOOPS:         "scf.parallel"
func.func @transposed(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>) -> tensor<32x8xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %e = opc.exp %mm : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %y = opc.transpose %e {perm = array<i64: 1, 0>} : (tensor<8x32xf32>) -> tensor<32x8xf32>
  func.return %y : tensor<32x8xf32>
}
