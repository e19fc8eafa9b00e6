// A name with a non-ASCII character after the first: a located, plain error.
func.func @cast(%xé: tensor<2x3x4xf64>) -> tensor<2x3x4xf64> {
  %u = opc.cast %xé {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>
  %y = opc.cast %u {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
