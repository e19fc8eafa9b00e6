// RUN: opc opt %s -p opc-attention | filecheck %s
// softmax(q k^T * c + mask) v, as written by hand, by our ONNX importer and by PyTorch's
// exporter, becomes one opc.attention (the scale is the product of the factors; the constants
// are left to dce).

// CHECK-LABEL: func.func @by_hand(
// CHECK-NOT:     opc.matmul
// CHECK:         %o, %o_1 = opc.attention %q, %k, %v, %m {scale = 1.250000e-01 : f64} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>, tensor<2x7x3xf32>, tensor<5x7xf32>) -> (tensor<2x5x3xf32>, tensor<2x5xf32>)
// CHECK-NEXT:    func.return %o
func.func @by_hand(%q: tensor<2x5x8xf32>, %k: tensor<2x7x8xf32>, %v: tensor<2x7x3xf32>, %m: tensor<5x7xf32>) -> tensor<2x5x3xf32> {
  %s = opc.matmul %q, %k {trans_y = true} : (tensor<2x5x8xf32>, tensor<2x7x8xf32>) -> tensor<2x5x7xf32>
  %c = opc.full {value = 0.125 : f64} : () -> tensor<2x5x7xf32>
  %t = opc.mul %s, %c : (tensor<2x5x7xf32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %a = opc.add %m, %t : (tensor<5x7xf32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %p = opc.softmax %a {axis = -1} : (tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %o = opc.matmul %p, %v : (tensor<2x5x7xf32>, tensor<2x7x3xf32>) -> tensor<2x5x3xf32>
  func.return %o : tensor<2x5x3xf32>
}

// k^T by a transpose, the scale as a division, no mask.
// CHECK-LABEL: func.func @transposed_div(
// CHECK-NOT:     opc.matmul
// CHECK:         %o, %o_1 = opc.attention %q, %k, %v {scale = 2.500000e-01 : f64} : (tensor<2x3x4x8xf64>, tensor<2x3x6x8xf64>, tensor<2x3x6x8xf64>) -> (tensor<2x3x4x8xf64>, tensor<2x3x4xf64>)
// CHECK-NEXT:    func.return %o
func.func @transposed_div(%q: tensor<2x3x4x8xf64>, %k: tensor<2x3x6x8xf64>, %v: tensor<2x3x6x8xf64>) -> tensor<2x3x4x8xf64> {
  %kt = opc.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x6x8xf64>) -> tensor<2x3x8x6xf64>
  %s = opc.matmul %q, %kt : (tensor<2x3x4x8xf64>, tensor<2x3x8x6xf64>) -> tensor<2x3x4x6xf64>
  %c = arith.constant dense<4.0> : tensor<f64>
  %t = opc.div %s, %c : (tensor<2x3x4x6xf64>, tensor<f64>) -> tensor<2x3x4x6xf64>
  %p = opc.softmax %t {axis = 3} : (tensor<2x3x4x6xf64>) -> tensor<2x3x4x6xf64>
  %o = opc.matmul %p, %v : (tensor<2x3x4x6xf64>, tensor<2x3x6x8xf64>) -> tensor<2x3x4x8xf64>
  func.return %o : tensor<2x3x4x8xf64>
}

// PyTorch's exporter (torch 2.14, dynamo=True, a boolean attn_mask), through our importer:
// k^T as reshape/transpose/reshape, sqrt(scale) on q and on k^T, the IsNaN/Where guard.
// CHECK-LABEL: func.func @exported_bool_mask(
// CHECK-NOT:     opc.matmul
// CHECK:         %o, %o_1 = opc.attention %q, %k, %v, %mask {scale = 0.35355336801239901 : f64} : (tensor<2x3x5x8xf32>, tensor<2x3x7x8xf32>, tensor<2x3x7x4xf32>, tensor<5x7xf32>) -> (tensor<2x3x5x4xf32>, tensor<2x3x5xf32>)
// CHECK-NEXT:    %[[L:.*]] = opc.reshape %o_1 : (tensor<2x3x5xf32>) -> tensor<2x3x5x1xf32>
// CHECK-NEXT:    %[[NEGINF:.*]] = opc.full {value = 0xfff0000000000000 : f64}
// CHECK-NEXT:    %[[SEEN:.*]] = opc.greater_than %[[L]], %[[NEGINF]]
// CHECK-NEXT:    %[[ZERO:.*]] = opc.full {value = 0.000000e+00 : f64}
// CHECK-NEXT:    %[[OUT:.*]] = opc.select %[[SEEN]], %o, %[[ZERO]]
// CHECK-NEXT:    func.return %[[OUT]]
func.func @exported_bool_mask(%q: tensor<2x3x5x8xf32>, %k: tensor<2x3x7x8xf32>, %v: tensor<2x3x7x4xf32>, %m: tensor<5x7xi1>) -> tensor<2x3x5x4xf32> {
  %k3 = opc.reshape %k : (tensor<2x3x7x8xf32>) -> tensor<6x7x8xf32>
  %kt3 = opc.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<6x7x8xf32>) -> tensor<6x8x7xf32>
  %kt = opc.reshape %kt3 : (tensor<6x8x7xf32>) -> tensor<2x3x8x7xf32>
  %root = arith.constant dense<0.594603539> : tensor<1xf32>
  %qs = opc.mul %q, %root : (tensor<2x3x5x8xf32>, tensor<1xf32>) -> tensor<2x3x5x8xf32>
  %kts = opc.mul %kt, %root : (tensor<2x3x8x7xf32>, tensor<1xf32>) -> tensor<2x3x8x7xf32>
  %zero = arith.constant dense<0.000000e+00> : tensor<f32>
  %low = arith.constant dense<-3.40282347e+38> : tensor<f32>
  %mask = opc.select %m, %zero, %low : (tensor<5x7xi1>, tensor<f32>, tensor<f32>) -> tensor<5x7xf32>
  %s = opc.matmul %qs, %kts : (tensor<2x3x5x8xf32>, tensor<2x3x8x7xf32>) -> tensor<2x3x5x7xf32>
  %a = opc.add %s, %mask : (tensor<2x3x5x7xf32>, tensor<5x7xf32>) -> tensor<2x3x5x7xf32>
  %p = opc.softmax %a {axis = 3 : i64} : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %eq = opc.equal %p, %p : (tensor<2x3x5x7xf32>, tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xi1>
  %f = arith.constant dense<false> : tensor<i1>
  %t = arith.constant dense<true> : tensor<i1>
  %nan = opc.select %eq, %f, %t : (tensor<2x3x5x7xi1>, tensor<i1>, tensor<i1>) -> tensor<2x3x5x7xi1>
  %g = opc.select %nan, %zero, %p : (tensor<2x3x5x7xi1>, tensor<f32>, tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %o = opc.matmul %g, %v : (tensor<2x3x5x7xf32>, tensor<2x3x7x4xf32>) -> tensor<2x3x5x4xf32>
  func.return %o : tensor<2x3x5x4xf32>
}
