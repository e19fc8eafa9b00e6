// RUN: opc opt %s -p 'opc-decompose{target="%S/../../../examples/npu/npu.toml"}' | filecheck %s
// RUN: opc opt %s -p 'opc-decompose{target="%S/../../../examples/npu/npu.toml"},opc-lower-to-loops' | filecheck %s --check-prefix=LOOPS
// Routing per instance on a device with kernels of its own: the gelu layer takes
// the composite rule, the activation-none layer and the f32 -> f16 cast the
// device's kernels (marked opc.external), the f16 -> i8 cast opc's own kernel.
// At the loop level each marked op is one opc_loops.external_call.

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %0 = opc.matmul %x, %w1
// CHECK-NEXT:    %z = opc.add %0, %b1
// CHECK-NEXT:    %h = opc.gelu %z
// CHECK-NEXT:    %y = opc.fused_gemm_epilogue %h, %w2, %b2 {opc.external = "npu_fused_gemm_epilogue"}
// CHECK-NEXT:    %y16 = opc.cast %y {opc.external = "npu_cast", dtype = f16}
// CHECK-NEXT:    %q = opc.cast %y16 {dtype = i8}
// CHECK-NEXT:    func.return

// LOOPS-LABEL: func.func @f
// LOOPS:         opc_loops.external_call(%h, %w2, %b2) -> (%y) {symbol = "npu_fused_gemm_epilogue", op = "opc.fused_gemm_epilogue", kernel_attrs = {trans_x = false, trans_y = false, activation = "none"}} : (memref<4x8xf32>, memref<8x5xf32>, memref<5xf32>) -> (memref<4x5xf32>)
// LOOPS:         opc_loops.external_call(%y) -> (%y16) {symbol = "npu_cast", op = "opc.cast", kernel_attrs = {dtype = f16}} : (memref<4x5xf32>) -> (memref<4x5xf16>)
// LOOPS-NOT:     external_call
// LOOPS:         func.return
func.func @f(%x: tensor<4x6xf32>, %w1: tensor<6x8xf32>, %b1: tensor<8xf32>, %w2: tensor<8x5xf32>, %b2: tensor<5xf32>) -> tensor<4x5xi8> {
  %h, %z = opc.fused_gemm_epilogue %x, %w1, %b1 {activation = "gelu"} : (tensor<4x6xf32>, tensor<6x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %y = opc.fused_gemm_epilogue %h, %w2, %b2 {activation = "none"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %y16 = opc.cast %y {dtype = f16} : (tensor<4x5xf32>) -> tensor<4x5xf16>
  %q = opc.cast %y16 {dtype = i8} : (tensor<4x5xf16>) -> tensor<4x5xi8>
  func.return %q : tensor<4x5xi8>
}
