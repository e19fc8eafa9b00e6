// RUN: not opc opt %s 2>&1 | filecheck %s
// A static offset and size past a static dim is refused, naming the dim.

func.func @f(%x: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // CHECK: invalid.mlir:[[# @LINE + 1]]:3: error: 'tensor.extract_slice' op dim 0: offset 3, size 2, stride 1 runs past the dim's size 4
  %r = tensor.extract_slice %x[3, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x4xf32>
  func.return %r : tensor<2x4xf32>
}
