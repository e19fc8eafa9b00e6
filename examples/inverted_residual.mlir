// MobileNetV2's last 320 -> 960 -> 320 inverted residual block at 7x7 as opc-fuse leaves it (ReLU6 fused):
// 1x1 expand, 3x3 depthwise, 1x1 project, plus the input. `opc opt -p opc-channels-last` rewrites it.
func.func @inverted_residual(%x: tensor<1x320x7x7xf32>, %w1: tensor<960x320x1x1xf32>, %b1: tensor<960xf32>, %w2: tensor<960x1x3x3xf32>, %b2: tensor<960xf32>, %w3: tensor<320x960x1x1xf32>, %b3: tensor<320xf32>) -> (tensor<1x320x7x7xf32>) {
  %h, %hz = opc.fused_conv_epilogue %x, %w1, %b1 {activation = "relu6"} : (tensor<1x320x7x7xf32>, tensor<960x320x1x1xf32>, tensor<960xf32>) -> (tensor<1x960x7x7xf32>, tensor<1x960x7x7xf32>)
  %d, %dz = opc.fused_conv_epilogue %h, %w2, %b2 {activation = "relu6", group = 960 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x960x7x7xf32>, tensor<960x1x3x3xf32>, tensor<960xf32>) -> (tensor<1x960x7x7xf32>, tensor<1x960x7x7xf32>)
  %p = opc.fused_conv_epilogue %d, %w3, %b3 : (tensor<1x960x7x7xf32>, tensor<320x960x1x1xf32>, tensor<320xf32>) -> tensor<1x320x7x7xf32>
  %y = opc.add %p, %x : (tensor<1x320x7x7xf32>, tensor<1x320x7x7xf32>) -> tensor<1x320x7x7xf32>
  func.return %y : tensor<1x320x7x7xf32>
}
