// Dense arrays and literals wider than 64 bits (xDSL cannot pack them): a located error, never an internal one.
func.func @f(%x: tensor<4x8xf32>) -> tensor<8xf32> attributes {a = array<i128: 1>} {
  %r = opc.reduce_sum %x {axes = array<i128: 0>, keepdim = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
func.func @g() -> tensor<2xi128> {
  %c = arith.constant dense<1> : tensor<2xi128>
  func.return %c : tensor<2xi128>
}
