// RUN: xdsl-opt %s -p opc-lower-to-loops,canonicalize | filecheck %s
// Stock xdsl-opt sees opc's dialects and passes through the xdsl.universe entry point.

// CHECK: func.func @cast(%x: memref<3xf64>, %out0: memref<3xui8>)
// CHECK: arith.fptoui
func.func @cast(%x: tensor<3xf64>) -> tensor<3xui8> {
  %u = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  func.return %u : tensor<3xui8>
}
