// RUN: not opc opt %s 2>&1 | filecheck %s
// bitcast reads the same bits as another type: the widths must agree.

func.func @f(%x: tensor<4xf64>) -> tensor<4xi32> {
  // CHECK: invalid_bitcast.mlir:[[# @LINE + 1]]:3: error: 'opc.bitcast' op bitcast needs element types of one width: f64 has 64 bits, i32 has 32
  %r = opc.bitcast %x {dtype = i32} : (tensor<4xf64>) -> tensor<4xi32>
  func.return %r : tensor<4xi32>
}
