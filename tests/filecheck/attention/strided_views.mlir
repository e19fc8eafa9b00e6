// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// RUN: opc opt %s -p 'opc-lower-to-loops{target=cuda}' | filecheck %s --check-prefix=CUDA
// The heads' split of q, k and v ([B, L, H, D] -> [B, H, L, D] after their projections) and the
// merge of attention's out are strided views on the CPU: opc.attention reads its operands and
// writes its result through strides (the layouts after the geometry's 22 integers: the row
// stride, then the batch dims' strides), and no transpose runs as a nest. CUDA's kernels read
// row-major operands: there the transposes stay nests.

// CHECK-LABEL: func.func @heads
// CHECK:         opc_sched.kernel attributes {kind = "view", reason = "a transpose read or written by opc.attention through strides (no loop); %q feeds opc.attention"}
// CHECK-NEXT:      opc.transpose %x
// CHECK:         opc_sched.kernel attributes {kind = "view"
// CHECK-NEXT:      opc.transpose %y
// CHECK:         opc_sched.kernel attributes {kind = "view"
// CHECK-NEXT:      opc.transpose %z
// CHECK:         opc_sched.kernel attributes {kind = "library"
// CHECK-NEXT:      opc.attention
// CHECK:         opc_sched.kernel attributes {kind = "view", reason = "a transpose read or written by opc.attention through strides (no loop); %r is returned"}
// CHECK-NEXT:      opc.transpose %o

// LOOPS-LABEL: func.func @heads
// LOOPS-NOT:     scf.parallel
// LOOPS:         %q = memref.reinterpret_cast %x to offset: [0], sizes: [2, 3, 5, 8], strides: [120, 8, 24, 1] : memref<2x5x3x8xf32> to memref<2x3x5x8xf32, strided<[120, 8, 24, 1]>>
// LOOPS:         %k = memref.reinterpret_cast %y to offset: [0], sizes: [2, 3, 7, 8], strides: [168, 8, 24, 1]
// LOOPS:         %v = memref.reinterpret_cast %z to offset: [0], sizes: [2, 3, 7, 8], strides: [168, 8, 24, 1]
// LOOPS:         %o = memref.reinterpret_cast %out0 to offset: [0], sizes: [2, 3, 5, 8], strides: [120, 8, 24, 1] : memref<2x5x3x8xf32> to memref<2x3x5x8xf32, strided<[120, 8, 24, 1]>>
// LOOPS-NEXT:    %l = memref.alloc() : memref<2x3x5xf32>
// LOOPS-NEXT:    opc_loops.call %q, %k, %v, %q, %o, %l {callee = "attention_f32", ints = array<i64: 6, 5, 7, 8, 8, 1, 0, 0, 0, 2, 2, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 24, 120, 8, 0, 0, 0, 0, 24, 168, 8, 0, 0, 0, 0, 24, 168, 8, 0, 0, 0, 0, 24, 120, 8, 0, 0, 0, 0>
// LOOPS-NOT:     scf.parallel
// LOOPS:         func.return

// CUDA-LABEL: func.func @heads
// CUDA-COUNT-3:  {opc.kernel = "elementwise: transpose"}
// CUDA:          callee = "attention_f32", ints = array<i64: 6, 5, 7, 8, 8, 1, 0, 0, 0, 2, 2, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 8, 120, 40, 0, 0, 0, 0,
// CUDA:          {opc.kernel = "elementwise: transpose"}
func.func @heads(%x: tensor<2x5x3x8xf32>, %y: tensor<2x7x3x8xf32>, %z: tensor<2x7x3x8xf32>) -> tensor<2x5x3x8xf32> {
  %q = opc.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x8xf32>) -> tensor<2x3x5x8xf32>
  %k = opc.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x7x3x8xf32>) -> tensor<2x3x7x8xf32>
  %v = opc.transpose %z {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x7x3x8xf32>) -> tensor<2x3x7x8xf32>
  %o, %l = opc.attention %q, %k, %v {scale = 0.35355339059327379 : f64, is_causal = true} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x8xf32>) -> (tensor<2x3x5x8xf32>, tensor<2x3x5xf32>)
  %r = opc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x5x8xf32>) -> tensor<2x5x3x8xf32>
  func.return %r : tensor<2x5x3x8xf32>
}
