// RUN: opc opt %s -p opc-fuse | filecheck %s
// Paddle's fuse_gemm_epilogue_pass: matmul + bias add [+ relu / tanh gelu]
// -> fused_gemm_epilogue, reserve_space (the pre-activation) saved when an
// activation is fused; transposes fold into the trans flags.

// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
// CHECK-NEXT:    func.return %z
func.func @linear(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}

// The bias may come first.
// CHECK-LABEL: func.func @bias_first(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf64>, tensor<16x32xf64>, tensor<32xf64>) -> tensor<8x32xf64>
func.func @bias_first(%x: tensor<8x16xf64>, %w: tensor<16x32xf64>, %b: tensor<32xf64>) -> tensor<8x32xf64> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf64>, tensor<16x32xf64>) -> tensor<8x32xf64>
  %z = opc.add %b, %mm : (tensor<32xf64>, tensor<8x32xf64>) -> tensor<8x32xf64>
  func.return %z : tensor<8x32xf64>
}

// CHECK-LABEL: func.func @relu(
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "relu"} : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
// CHECK-NEXT:    func.return %h
func.func @relu(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.relu %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h : tensor<8x32xf32>
}

// tanh-form gelu; the matmul's own trans flags carry over.
// CHECK-LABEL: func.func @gelu(
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w, %b {trans_x = true, trans_y = true, activation = "gelu"} : (tensor<16x8xf16>, tensor<32x16xf16>, tensor<32xf16>) -> (tensor<8x32xf16>, tensor<8x32xf16>)
// CHECK-NEXT:    func.return %h
func.func @gelu(%x: tensor<16x8xf16>, %w: tensor<32x16xf16>, %b: tensor<32xf16>) -> tensor<8x32xf16> {
  %mm = opc.matmul %x, %w {trans_x = true, trans_y = true} : (tensor<16x8xf16>, tensor<32x16xf16>) -> tensor<8x32xf16>
  %z = opc.add %mm, %b : (tensor<8x32xf16>, tensor<32xf16>) -> tensor<8x32xf16>
  %h = opc.gelu %z {approximate = true} : (tensor<8x32xf16>) -> tensor<8x32xf16>
  func.return %h : tensor<8x32xf16>
}

// Explicit transposes fold into the trans flags (and vanish when nothing else reads them);
// one that is read elsewhere stays for that reader.
// CHECK-LABEL: func.func @transposed(
// CHECK-NEXT:    %wt = opc.transpose %w {perm = array<i64: 1, 0>}
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w, %b {trans_x = true, trans_y = true, activation = "relu"} : (tensor<16x8xf32>, tensor<32x16xf32>, tensor<32xf32>)
// CHECK-NEXT:    func.return %h, %wt
func.func @transposed(%x: tensor<16x8xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<16x32xf32>) {
  %xt = opc.transpose %x {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %wt = opc.transpose %w {perm = array<i64: 1, 0>} : (tensor<32x16xf32>) -> tensor<16x32xf32>
  %mm = opc.matmul %xt, %wt : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.relu %z : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %h, %wt : tensor<8x32xf32>, tensor<16x32xf32>
}

// A transpose of a matmul flag flips it back: trans_x = true of a transposed x is trans_x = false.
// CHECK-LABEL: func.func @double_transpose(
// CHECK-NEXT:    %z = opc.fused_gemm_epilogue %x, %w, %b : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
func.func @double_transpose(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32> {
  %xt = opc.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %mm = opc.matmul %xt, %w {trans_x = true} : (tensor<16x8xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %z : tensor<8x32xf32>
}

// Two layers: both fuse.
// CHECK-LABEL: func.func @mlp2(
// CHECK-NEXT:    %h, %z = opc.fused_gemm_epilogue %x, %w1, %b1 {activation = "gelu"}
// CHECK-NEXT:    %y = opc.fused_gemm_epilogue %h, %w2, %b2 :
// CHECK-NEXT:    func.return %y
func.func @mlp2(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x4xf32>, %b2: tensor<4xf32>) -> tensor<8x4xf32> {
  %mm = opc.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %z = opc.add %mm, %b1 : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h = opc.gelu %z {approximate = true} : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm2 = opc.matmul %h, %w2 : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
  %y = opc.add %mm2, %b2 : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}

// One row: a [1, N] addend is a bias (a batch-1 recurrent step adds its input's projection so),
// flattened to [N] for the fused op.
// CHECK-LABEL: func.func @one_row_addend(
// CHECK-NEXT:    %{{.*}} = opc.reshape %b : (tensor<1x32xf32>) -> tensor<32xf32>
// CHECK-NEXT:    %z, %a = opc.fused_gemm_epilogue %x, %w, %{{.*}} {activation = "relu"}
func.func @one_row_addend(%x: tensor<1x16xf32>, %w: tensor<16x32xf32>, %b: tensor<1x32xf32>) -> tensor<1x32xf32> {
  %mm = opc.matmul %x, %w : (tensor<1x16xf32>, tensor<16x32xf32>) -> tensor<1x32xf32>
  %a = opc.add %mm, %b : (tensor<1x32xf32>, tensor<1x32xf32>) -> tensor<1x32xf32>
  %z = opc.relu %a : (tensor<1x32xf32>) -> tensor<1x32xf32>
  func.return %z : tensor<1x32xf32>
}
