// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// An elementwise chain whose values are read twice (`mul %d, %d`, `add %e, %d`)
// is ONE kernel: each value is computed once per element, nothing is stored
// in between.

// CHECK-LABEL: func.func @chain
// CHECK:         %h = opc_sched.kernel attributes {kind = "elementwise", reason = "%h is returned"}
// CHECK-COUNT-7:   opc.
// CHECK-NEXT:      opc_sched.yield
// CHECK-NOT:     opc_sched.kernel

// LOOPS-LABEL: func.func @chain
// LOOPS-NOT:     memref.alloc
// LOOPS:         "scf.parallel"
// LOOPS-COUNT-2:   memref.load
// LOOPS:           arith.mulf
// LOOPS:           arith.addf
// LOOPS:           arith.maximumf
// LOOPS:           arith.subf
// LOOPS:           arith.mulf
// LOOPS:           arith.addf
// LOOPS:           math.tanh
// LOOPS-NEXT:      memref.store
// LOOPS-NOT:     "scf.parallel"
// LOOPS:         func.return
func.func @chain(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {
  %a = opc.mul %x, %y : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %b = opc.add %a, %x : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %c = opc.relu %b : (tensor<1024xf32>) -> tensor<1024xf32>
  %d = opc.sub %c, %y : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %e = opc.mul %d, %d : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %g = opc.add %e, %d : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %h = opc.tanh %g : (tensor<1024xf32>) -> tensor<1024xf32>
  func.return %h : tensor<1024xf32>
}
