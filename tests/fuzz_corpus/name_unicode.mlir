// A name the lexer refuses (non-ASCII first character): a located, plain error.
func.func @cast(%é: tensor<2x3x4xf64>) -> tensor<2x3x4xf64> {
  %u = opc.cast %é {dtype = ui8} : (tensor<2x3x4xf64>) -> tensor<2x3x4xui8>
  %y = opc.cast %u {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %y : tensor<2x3x4xf64>
}
