// RUN: opc opt %s -p opc-attention | filecheck %s
// What opc-attention leaves as written.

// The probabilities are returned too: fusing would compute the softmax twice.
// CHECK-LABEL: func.func @probs_used_twice(
// CHECK-NOT:     opc.attention
// CHECK:         opc.softmax
func.func @probs_used_twice(%q: tensor<5x8xf32>, %k: tensor<7x8xf32>, %v: tensor<7x3xf32>) -> (tensor<5x3xf32>, tensor<5x7xf32>) {
  %s = opc.matmul %q, %k {trans_y = true} : (tensor<5x8xf32>, tensor<7x8xf32>) -> tensor<5x7xf32>
  %p = opc.softmax %s {axis = -1} : (tensor<5x7xf32>) -> tensor<5x7xf32>
  %o = opc.matmul %p, %v : (tensor<5x7xf32>, tensor<7x3xf32>) -> tensor<5x3xf32>
  func.return %o, %p : tensor<5x3xf32>, tensor<5x7xf32>
}

// A softmax over the queries, not the keys.
// CHECK-LABEL: func.func @softmax_over_queries(
// CHECK-NOT:     opc.attention
// CHECK:         opc.softmax %s {axis = 0 : i64}
func.func @softmax_over_queries(%q: tensor<5x8xf32>, %k: tensor<7x8xf32>, %v: tensor<7x3xf32>) -> tensor<5x3xf32> {
  %s = opc.matmul %q, %k {trans_y = true} : (tensor<5x8xf32>, tensor<7x8xf32>) -> tensor<5x7xf32>
  %p = opc.softmax %s {axis = 0} : (tensor<5x7xf32>) -> tensor<5x7xf32>
  %o = opc.matmul %p, %v : (tensor<5x7xf32>, tensor<7x3xf32>) -> tensor<5x3xf32>
  func.return %o : tensor<5x3xf32>
}

// A factor that is an argument, not a constant: the scale must be known.
// CHECK-LABEL: func.func @scale_not_constant(
// CHECK-NOT:     opc.attention
// CHECK:         opc.softmax
func.func @scale_not_constant(%q: tensor<5x8xf32>, %k: tensor<7x8xf32>, %v: tensor<7x3xf32>, %c: tensor<5x7xf32>) -> tensor<5x3xf32> {
  %s = opc.matmul %q, %k {trans_y = true} : (tensor<5x8xf32>, tensor<7x8xf32>) -> tensor<5x7xf32>
  %t = opc.mul %s, %c : (tensor<5x7xf32>, tensor<5x7xf32>) -> tensor<5x7xf32>
  %p = opc.softmax %t {axis = -1} : (tensor<5x7xf32>) -> tensor<5x7xf32>
  %o = opc.matmul %p, %v : (tensor<5x7xf32>, tensor<7x3xf32>) -> tensor<5x3xf32>
  func.return %o : tensor<5x3xf32>
}

// k without a batch, broadcast by the matmul: opc.attention wants the same batch dims.
// CHECK-LABEL: func.func @broadcast_keys(
// CHECK-NOT:     opc.attention
// CHECK:         opc.softmax
func.func @broadcast_keys(%q: tensor<2x5x8xf32>, %k: tensor<7x8xf32>, %v: tensor<2x7x3xf32>) -> tensor<2x5x3xf32> {
  %s = opc.matmul %q, %k {trans_y = true} : (tensor<2x5x8xf32>, tensor<7x8xf32>) -> tensor<2x5x7xf32>
  %p = opc.softmax %s {axis = -1} : (tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %o = opc.matmul %p, %v : (tensor<2x5x7xf32>, tensor<2x7x3xf32>) -> tensor<2x5x3xf32>
  func.return %o : tensor<2x5x3xf32>
}

// k^T not a transpose of the last two dims: no k to take.
// CHECK-LABEL: func.func @not_k_transposed(
// CHECK-NOT:     opc.attention
// CHECK:         opc.softmax
func.func @not_k_transposed(%q: tensor<5x8xf32>, %w: tensor<8x7xf32>, %v: tensor<7x3xf32>) -> tensor<5x3xf32> {
  %s = opc.matmul %q, %w : (tensor<5x8xf32>, tensor<8x7xf32>) -> tensor<5x7xf32>
  %p = opc.softmax %s {axis = -1} : (tensor<5x7xf32>) -> tensor<5x7xf32>
  %o = opc.matmul %p, %v : (tensor<5x7xf32>, tensor<7x3xf32>) -> tensor<5x3xf32>
  func.return %o : tensor<5x3xf32>
}
