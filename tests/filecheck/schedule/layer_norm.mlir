// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// Layer norm composed from primitives is ONE row kernel, the constant eps
// recomputed inside it; the mean and rstd it returns are stored per row.

// CHECK-LABEL: func.func @layer_norm
// CHECK:         %{{.*}} = opc.full
// CHECK:         %mu, %r, %y = opc_sched.kernel attributes {kind = "row", reason = "%mu is returned; %r is returned; %y is returned"}
// CHECK-NEXT:      opc.reduce_mean
// CHECK-NEXT:      opc.sub
// CHECK-NEXT:      opc.mul
// CHECK-NEXT:      opc.reduce_mean
// CHECK-NEXT:      opc.add
// CHECK-NEXT:      opc.rsqrt
// CHECK-NEXT:      opc.mul
// CHECK-NEXT:      opc.mul
// CHECK-NEXT:      opc.add
// CHECK-NEXT:      opc_sched.yield
// CHECK-NOT:     opc_sched.kernel

// LOOPS-LABEL: func.func @layer_norm
// LOOPS-NOT:     memref.alloc()
// LOOPS:         "scf.parallel"
// LOOPS:           } {opc.simd_reduction = ["+"]}
// LOOPS:           } {opc.simd_reduction = ["+"]}
// LOOPS:           math.rsqrt
// LOOPS:           memref.store {{.*}}, %out2
// LOOPS:           scf.for
// LOOPS:             memref.store {{.*}}, %out0
// LOOPS-NOT:     "scf.parallel"
// LOOPS:         func.return
func.func @layer_norm(%x: tensor<4x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> (tensor<4x32xf32>, tensor<4x1xf32>, tensor<4x1xf32>) {
  %mu = opc.reduce_mean %x {axes = array<i64: 1>, keepdim = true} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %d = opc.sub %x, %mu : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  %sq = opc.mul %d, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %var = opc.reduce_mean %sq {axes = array<i64: 1>, keepdim = true} : (tensor<4x32xf32>) -> tensor<4x1xf32>
  %eps = opc.full {value = 1.0e-5 : f64} : () -> tensor<4x1xf32>
  %ve = opc.add %var, %eps : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = opc.rsqrt %ve : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = opc.mul %d, %r : (tensor<4x32xf32>, tensor<4x1xf32>) -> tensor<4x32xf32>
  %ng = opc.mul %n, %g : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %y = opc.add %ng, %b : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  func.return %y, %mu, %r : tensor<4x32xf32>, tensor<4x1xf32>, tensor<4x1xf32>
}
