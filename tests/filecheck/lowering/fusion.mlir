// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s
// A chain of six elementwise ops becomes ONE loop nest: its inputs are read
// once, its output written once, and no intermediate buffer is allocated.

// CHECK-LABEL: func.func @chain(%x: memref<64x32xf32>, %y: memref<32xf32>, %out0: memref<64x32xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         "scf.parallel"
// CHECK-COUNT-2: memref.load
// CHECK:         arith.mulf
// CHECK:         arith.addf
// CHECK:         math.tanh
// CHECK:         arith.maximumf
// CHECK:         arith.subf
// CHECK:         math.exp
// CHECK-NEXT:    memref.store
// CHECK-NOT:     "scf.parallel"
// CHECK:         func.return
func.func @chain(%x: tensor<64x32xf32>, %y: tensor<32xf32>) -> tensor<64x32xf32> {
  %a = opc.mul %x, %y : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  %b = opc.add %a, %x : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %c = opc.tanh %b : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %d = opc.relu %c : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %e = opc.sub %d, %y : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  %f = opc.exp %e : (tensor<64x32xf32>) -> tensor<64x32xf32>
  func.return %f : tensor<64x32xf32>
}

// A value its consumer reads twice (fan-out inside one nest) is computed
// once per element: one nest, no buffer, one exp.
// CHECK-LABEL: func.func @shared
// CHECK-NOT:     memref.alloc
// CHECK:         "scf.parallel"
// CHECK:         math.exp
// CHECK-NOT:     math.exp
// CHECK:         arith.addf
// CHECK-NOT:     "scf.parallel"
// CHECK:         func.return
func.func @shared(%x: tensor<8xf32>) -> tensor<8xf32> {
  %t = opc.exp %x : (tensor<8xf32>) -> tensor<8xf32>
  %s = opc.add %t, %t : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %s : tensor<8xf32>
}

// The GEMM carries its epilogue: bias, gelu and the reserve store in one op.
// CHECK-LABEL: func.func @fused
// CHECK:         opc_loops.gemm %x, %w bias %b, %out0 reserve %out1 {{.*}}activation = "gelu"
// CHECK-NOT:     "scf.parallel"
func.func @fused(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>, %b: tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %o, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  func.return %o, %z : tensor<4x5xf32>, tensor<4x5xf32>
}

// Without broadcasts or transposes a nest runs flat: one long loop over
// 1-D views of the buffers, whatever the rank (here an inner extent of 3
// would otherwise be the only vectorizable loop).
// CHECK-LABEL: func.func @flat
// CHECK:         %x_flat = memref.reinterpret_cast %x to offset: [0], sizes: [192], strides: [1]
// CHECK:         %out0_flat = memref.reinterpret_cast %out0
// CHECK:         "scf.parallel"(%{{.*}}, %{{.*}}, %{{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}>
// CHECK:         memref.load %x_flat
// CHECK:         memref.store {{.*}}, %out0_flat
func.func @flat(%x: tensor<64x3xf32>, %y: tensor<64x3xf32>) -> tensor<64x3xf32> {
  %a = opc.mul %x, %y : (tensor<64x3xf32>, tensor<64x3xf32>) -> tensor<64x3xf32>
  %b = opc.exp %a : (tensor<64x3xf32>) -> tensor<64x3xf32>
  func.return %b : tensor<64x3xf32>
}

// A column sum walks its input in memory order, accumulating whole rows
// (contiguous, vectorizable), instead of one strided scalar loop per output.
// CHECK-LABEL: func.func @colsum
// CHECK:         "scf.parallel"
// CHECK:         memref.store %{{.*}}, %out0
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             %[[ACC:.*]] = memref.load %out0
// CHECK:             %[[X:.*]] = memref.load %x
// CHECK:             arith.addf %[[ACC]], %[[X]]
func.func @colsum(%x: tensor<64x32xf32>) -> tensor<32xf32> {
  %r = opc.reduce_sum %x {axes = array<i64: 0>} : (tensor<64x32xf32>) -> tensor<32xf32>
  func.return %r : tensor<32xf32>
}
