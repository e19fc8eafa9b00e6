// RUN: opc opt %s -p 'opc-decompose{ops=cast_grad}' | filecheck %s
// cast_grad is realised by invoke: cast(dout, x.dtype); x only gives the dtype.

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %dx = opc.cast %d {dtype = f64} : (tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
// CHECK-NEXT:    func.return %dx
func.func @f(%x: tensor<2x3x4xf64>, %d: tensor<2x3x4xui8>) -> tensor<2x3x4xf64> {
  %dx = opc.cast_grad %x, %d : (tensor<2x3x4xf64>, tensor<2x3x4xui8>) -> tensor<2x3x4xf64>
  func.return %dx : tensor<2x3x4xf64>
}
