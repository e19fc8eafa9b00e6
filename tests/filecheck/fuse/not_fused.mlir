// RUN: opc opt %s -p opc-fuse | filecheck %s
// RUN: opc opt %s -p 'opc-fuse{target="%S/../../../examples/device_no_fused.toml"}' | filecheck %s --check-prefix=NOKERNEL
// What opc-fuse must leave alone (or fuse only in part).

// A target without a fused_gemm_epilogue kernel: nothing fuses.
// NOKERNEL-NOT: opc.fused_gemm_epilogue

// The bias broadcast along columns ([M, 1]), not rows.
// CHECK-LABEL: func.func @bias_columns(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
func.func @bias_columns(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<8x1xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}

// A [M] bias that happens to fit N would broadcast along rows: only [N] is a bias; a full [M, N] addend is not.
// CHECK-LABEL: func.func @full_addend(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
func.func @full_addend(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}

// A [1, N] addend is a bias only where the product has one row: with two it is a full addend.
// CHECK-LABEL: func.func @one_row_addend_two_rows(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
func.func @one_row_addend_two_rows(%x: tensor<2x16xf32>, %w: tensor<16x32xf32>, %b: tensor<1x32xf32>) -> tensor<2x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<2x16xf32>, tensor<16x32xf32>) -> tensor<2x32xf32>
  %z = opc.add %mm, %b : (tensor<2x32xf32>, tensor<1x32xf32>) -> tensor<2x32xf32>
  func.return %z : tensor<2x32xf32>
}

// A scalar addend (ONNX Gemm's C of shape []) is no [N] bias.
// CHECK-LABEL: func.func @scalar_addend(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
func.func @scalar_addend(%x: tensor<2x16xf32>, %w: tensor<16x32xf32>, %b: tensor<f32>) -> tensor<2x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<2x16xf32>, tensor<16x32xf32>) -> tensor<2x32xf32>
  %z = opc.add %mm, %b : (tensor<2x32xf32>, tensor<f32>) -> tensor<2x32xf32>
  func.return %z : tensor<2x32xf32>
}

// The matmul result is used elsewhere too: fusing would compute the GEMM twice.
// CHECK-LABEL: func.func @matmul_used_twice(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
// CHECK-NEXT:    %h = opc.relu %z
func.func @matmul_used_twice(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.relu %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h, %mm : tensor<8x32xf32>, tensor<8x32xf32>
}

// The pre-activation is used elsewhere too: matmul + add fuse, the activation stays apart (as in Paddle).
// CHECK-LABEL: func.func @preactivation_used_twice(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %h = opc.relu %z
// CHECK-NEXT:    func.return %h, %z
func.func @preactivation_used_twice(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.relu %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h, %z : tensor<8x32xf32>, tensor<8x32xf32>
}

// erf-form gelu: the fused gelu is the tanh form, so only matmul + add fuse.
// CHECK-LABEL: func.func @gelu_erf(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    %h = opc.gelu %z {approximate = false}
func.func @gelu_erf(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.gelu %z {approximate = false} : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h : tensor<8x32xf32>
}

// A rank-3 (batched) matmul: the fused op is rank 2.
// CHECK-LABEL: func.func @batched(
// CHECK-NEXT:    %mm = opc.matmul %x, %w
// CHECK-NEXT:    %z = opc.add %mm, %b
// CHECK-NEXT:    %h = opc.relu %z
func.func @batched(%x: tensor<2x8x16xf32>, %w: tensor<2x16x32xf32>, %b: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<2x8x16xf32>, tensor<2x16x32xf32>) -> tensor<2x8x32xf32>
  %z = opc.add %mm, %b : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %h = opc.relu %z : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  func.return %h : tensor<2x8x32xf32>
}

// Other activations (tanh) are not fused: matmul + add are.
// CHECK-LABEL: func.func @tanh_act(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b :
// CHECK-NEXT:    %h = opc.tanh %z
func.func @tanh_act(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.tanh %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h : tensor<8x32xf32>
}
