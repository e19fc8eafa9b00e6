// RUN: opc opt %s -p opc-grad | filecheck %s
// The vjps of the new ops: the fused ops' grad ops fed by what the forward
// saved (layer_norm's mean and rstd, softmax_cross_entropy's softmax);
// matmul's gradient summed back over the batch dims its operand was broadcast
// along; slice / gather / concat by slice_grad, gather_grad and slices of
// dout. Operands that lend only their type (slice_grad's x) become zeros, so
// the backward never recomputes the forward ops that produced them.

// CHECK-LABEL: func.func @net_grad(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %w: tensor<2x8x5xf32>, %label: tensor<2x4x1xi64>, %dloss: tensor<2x4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x8x5xf32>) {
// CHECK-NEXT:    %y, %mean, %rstd = opc.layer_norm %x, %s, %b
// CHECK-NEXT:    %z = opc.matmul %y, %w
// CHECK-NEXT:    %loss, %sm = opc.softmax_cross_entropy %z, %label
// CHECK-NEXT:    %0 = opc.softmax_cross_entropy_grad %label, %sm, %dloss : (tensor<2x4x1xi64>, tensor<2x4x5xf32>, tensor<2x4x1xf32>) -> tensor<2x4x5xf32>
// CHECK-NEXT:    %1 = opc.matmul %0, %w {trans_y = true} : (tensor<2x4x5xf32>, tensor<2x8x5xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %dw = opc.matmul %y, %0 {trans_x = true} : (tensor<4x8xf32>, tensor<2x4x5xf32>) -> tensor<2x8x5xf32>
// CHECK-NEXT:    %2 = opc.reduce_sum %1 {axes = array<i64: 0>} : (tensor<2x4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %dx, %ds, %db = opc.layer_norm_grad %x, %s, %mean, %rstd, %2 : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT:    func.return %dx, %ds, %db, %dw
func.func @net(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %w: tensor<2x8x5xf32>, %label: tensor<2x4x1xi64>) -> tensor<2x4x1xf32> {
  %y, %mean, %rstd = opc.layer_norm %x, %s, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  %z = opc.matmul %y, %w : (tensor<4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
  %loss, %sm = opc.softmax_cross_entropy %z, %label : (tensor<2x4x5xf32>, tensor<2x4x1xi64>) -> (tensor<2x4x1xf32>, tensor<2x4x5xf32>)
  func.return %loss : tensor<2x4x1xf32>
}

// CHECK-LABEL: func.func @pick_grad(%t: tensor<6x3xf32>, %ids: tensor<2xi32>, %dr: tensor<1x3xf32>) -> tensor<6x3xf32> {
// CHECK-NEXT:    %0 = opc.full {value = 0.000000e+00 : f64} : () -> tensor<8x3xf32>
// CHECK-NEXT:    %1 = opc.slice_grad %0, %dr {start = array<i64: 1, 0>, limit = array<i64: 2, 3>, strides = array<i64: 1, 1>}
// CHECK-NEXT:    %2 = opc.slice %1 {start = array<i64: 0, 0>, limit = array<i64: 2, 3>, strides = array<i64: 1, 1>} : (tensor<8x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %3 = opc.slice %1 {start = array<i64: 2, 0>, limit = array<i64: 8, 3>, strides = array<i64: 1, 1>} : (tensor<8x3xf32>) -> tensor<6x3xf32>
// CHECK-NEXT:    %4 = opc.gather_grad %t, %ids, %2 : (tensor<6x3xf32>, tensor<2xi32>, tensor<2x3xf32>) -> tensor<6x3xf32>
// CHECK-NEXT:    %dt = opc.add %3, %4
// CHECK-NEXT:    func.return %dt
func.func @pick(%t: tensor<6x3xf32>, %ids: tensor<2xi32>) -> tensor<1x3xf32> {
  %g = opc.gather %t, %ids : (tensor<6x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
  %c = opc.concat %g, %t {axis = 0} : (tensor<2x3xf32>, tensor<6x3xf32>) -> tensor<8x3xf32>
  %r = opc.slice %c {start = array<i64: 1, 0>, limit = array<i64: 2, 3>, strides = array<i64: 1, 1>} : (tensor<8x3xf32>) -> tensor<1x3xf32>
  func.return %r : tensor<1x3xf32>
}

// softmax / log_softmax: the grad op from the forward's own output
// CHECK-LABEL: func.func @probs_grad
// CHECK-NEXT:    %p = opc.softmax %x {axis = 0 : i64}
// CHECK-NEXT:    %l = opc.log_softmax %p
// CHECK-NEXT:    %0 = opc.log_softmax_grad %l, %dl : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %dx = opc.softmax_grad %p, %0 {axis = 0 : i64} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
func.func @probs(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %p = opc.softmax %x {axis = 0} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = opc.log_softmax %p : (tensor<3x4xf32>) -> tensor<3x4xf32>
  func.return %l : tensor<3x4xf32>
}
