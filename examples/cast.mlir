// Paddle's report: a [2,3,4] float64 tensor cast to uint8 and back.
func.func @cast(%x: tensor<2x3x4xf64>) -> tensor<2x3x4xf64> {
  %u = opc.cast %x {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>
  %y = opc.cast %u {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
