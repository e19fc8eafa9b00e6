// RUN: opc opt %s -p dce | filecheck %s
// Unused pure ops disappear; the returned chain stays.

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %y = opc.exp %x
// CHECK-NEXT:    func.return %y
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %dead = opc.tanh %x : (tensor<4xf32>) -> tensor<4xf32>
  %y = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
