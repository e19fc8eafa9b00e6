// RUN: not opc opt %s 2>&1 | filecheck %s
// CHECK: syntax_error.mlir:[[# @LINE + 2]]:19: error: Expected ','
func.func @f(%a: tensor<4xf32>) {
  %r = opc.add %a %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
