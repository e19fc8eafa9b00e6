func.func @unary(%x: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
  %a = opc.exp %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %b = opc.gelu %x {approximate = true} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c = opc.sigmoid %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %a, %b, %c : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}
func.func @binary(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>, %r: tensor<8xf32>, %c: tensor<?x1xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
  %a = opc.mul %x, %y : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %b = opc.sub %x, %r : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %d = opc.div %x, %c : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  func.return %a, %b, %d : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}
func.func @compare(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  %p = opc.greater_than %x, %y : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xi1>
  %s = opc.select %p, %x, %y : (tensor<?x8xi1>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %i = opc.cast %x {dtype = i32} : (tensor<?x8xf32>) -> tensor<?x8xi32>
  func.return %s, %i : tensor<?x8xf32>, tensor<?x8xi32>
}
func.func @reduce(%x: tensor<?x8xf64>) -> (tensor<?xf64>, tensor<8xf64>, tensor<f64>, tensor<?x1xf64>) {
  %a = opc.reduce_sum %x {axes = array<i64: 1>} : (tensor<?x8xf64>) -> tensor<?xf64>
  %b = opc.reduce_min %x {axes = array<i64: 0>} : (tensor<?x8xf64>) -> tensor<8xf64>
  %c = opc.reduce_mean %x {axes = array<i64: 0, 1>} : (tensor<?x8xf64>) -> tensor<f64>
  %d = opc.reduce_max %x {axes = array<i64: 1>, keepdim = true} : (tensor<?x8xf64>) -> tensor<?x1xf64>
  func.return %a, %b, %c, %d : tensor<?xf64>, tensor<8xf64>, tensor<f64>, tensor<?x1xf64>
}
func.func @matmuls(%x: tensor<?x16xf32>, %w: tensor<16x24xf32>, %b: tensor<24xf32>, %q: tensor<?x3x16xf32>, %k: tensor<?x16x5xf32>) -> (tensor<?x24xf32>, tensor<?x3x24xf32>, tensor<?x3x5xf32>) {
  %y = opc.matmul %x, %w : (tensor<?x16xf32>, tensor<16x24xf32>) -> tensor<?x24xf32>
  %z = opc.add %y, %b : (tensor<?x24xf32>, tensor<24xf32>) -> tensor<?x24xf32>
  %r = opc.relu %z : (tensor<?x24xf32>) -> tensor<?x24xf32>
  %u = opc.matmul %q, %w : (tensor<?x3x16xf32>, tensor<16x24xf32>) -> tensor<?x3x24xf32>
  %v = opc.matmul %q, %k : (tensor<?x3x16xf32>, tensor<?x16x5xf32>) -> tensor<?x3x5xf32>
  func.return %r, %u, %v : tensor<?x24xf32>, tensor<?x3x24xf32>, tensor<?x3x5xf32>
}
func.func @rows(%x: tensor<?x?x32xf32>, %g: tensor<32xf32>, %h: tensor<32xf32>) -> (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>) {
  %a = opc.softmax %x {axis = -1} : (tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  %b = opc.log_softmax %x {axis = -1} : (tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  %y, %m, %s = opc.layer_norm %x, %g, %h {begin_norm_axis = -1, epsilon = 1.0e-05 : f64} : (tensor<?x?x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<?x?x32xf32>, tensor<?x?xf32>, tensor<?x?xf32>)
  func.return %a, %b, %y : tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>
}
func.func @layout(%x: tensor<?x4x6xf32>, %a: tensor<?x6xf32>, %b: tensor<?x6xf32>) -> (tensor<6x4x?xf32>, tensor<?x24xf32>, tensor<?x6xf32>, tensor<?x6xf32>, tensor<?x6xf32>) {
  %t = opc.transpose %x {perm = array<i64: 2, 1, 0>} : (tensor<?x4x6xf32>) -> tensor<6x4x?xf32>
  %r = opc.reshape %x : (tensor<?x4x6xf32>) -> tensor<?x24xf32>
  %c = opc.concat %a, %b {axis = 0} : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?x6xf32>
  %f = opc.full %n {value = 3.0 : f64} : (index) -> tensor<?x6xf32>
  %row = opc.reduce_sum %b {axes = array<i64: 0>, keepdim = true} : (tensor<?x6xf32>) -> tensor<1x6xf32>
  %s = opc.broadcast_to %row, %n : (tensor<1x6xf32>, index) -> tensor<?x6xf32>
  func.return %t, %r, %c, %f, %s : tensor<6x4x?xf32>, tensor<?x24xf32>, tensor<?x6xf32>, tensor<?x6xf32>, tensor<?x6xf32>
}
func.func @take(%x: tensor<10x?xf32>, %i: tensor<?xi64>) -> tensor<?x?xf32> {
  %g = opc.gather %x, %i {axis = 0} : (tensor<10x?xf32>, tensor<?xi64>) -> tensor<?x?xf32>
  func.return %g : tensor<?x?xf32>
}

// A key/value cache grown by a step: concat along a run-time dim, operands of different run-time sizes.
func.func @grow(%cache: tensor<2x?x4xf32>, %step: tensor<2x1x4xf32>, %other: tensor<2x?x4xf32>) -> (tensor<2x?x4xf32>, tensor<2x?x4xf32>) {
  %a = opc.concat %cache, %step {axis = 1 : i64} : (tensor<2x?x4xf32>, tensor<2x1x4xf32>) -> tensor<2x?x4xf32>
  %b = opc.concat %cache, %other, %step {axis = 1 : i64} : (tensor<2x?x4xf32>, tensor<2x?x4xf32>, tensor<2x1x4xf32>) -> tensor<2x?x4xf32>
  func.return %a, %b : tensor<2x?x4xf32>, tensor<2x?x4xf32>
}
