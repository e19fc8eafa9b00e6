// RUN: opc opt %s -p 'opc-decompose{ops=fused_gemm_epilogue_grad}' | filecheck %s
// The composite: dZ from the activation grad on reserve_space, dX and dY by
// matmul trans flags only (no explicit transposes), dbias = reduce_sum(dZ, 0).

// CHECK-LABEL: func.func @ff_relu
// CHECK-NEXT:    %dz = opc.relu_grad %z, %d
// CHECK-NEXT:    %dx = opc.matmul %dz, %y {trans_y = true} : (tensor<4x5xf32>, tensor<8x5xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %dy = opc.matmul %x, %dz {trans_x = true} : (tensor<4x8xf32>, tensor<4x5xf32>) -> tensor<8x5xf32>
// CHECK-NEXT:    %db = opc.reduce_sum %dz {axes = array<i64: 0>} : (tensor<4x5xf32>) -> tensor<5xf32>
// CHECK-NEXT:    func.return %dx, %dy, %db
func.func @ff_relu(%x: tensor<4x8xf32>, %y: tensor<8x5xf32>, %z: tensor<4x5xf32>, %d: tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) {
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, %z, %d {activation_grad = "relu_grad"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>)
  func.return %dx, %dy, %db : tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>
}

// T,F: dX = Y.dZ^T, dY = X.dZ
// CHECK-LABEL: func.func @tf_gelu
// CHECK-NEXT:    %dz = opc.gelu_grad %z, %d : (tensor<4x5xf32>, tensor<4x5xf32>)
// CHECK-NEXT:    %dx = opc.matmul %y, %dz {trans_y = true} : (tensor<8x5xf32>, tensor<4x5xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %dy = opc.matmul %x, %dz : (tensor<8x4xf32>, tensor<4x5xf32>) -> tensor<8x5xf32>
// CHECK-NEXT:    %db = opc.reduce_sum %dz {axes = array<i64: 0>}
func.func @tf_gelu(%x: tensor<8x4xf32>, %y: tensor<8x5xf32>, %z: tensor<4x5xf32>, %d: tensor<4x5xf32>) -> (tensor<8x4xf32>, tensor<8x5xf32>, tensor<5xf32>) {
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, %z, %d {activation_grad = "gelu_grad", trans_x = true} : (tensor<8x4xf32>, tensor<8x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<8x4xf32>, tensor<8x5xf32>, tensor<5xf32>)
  func.return %dx, %dy, %db : tensor<8x4xf32>, tensor<8x5xf32>, tensor<5xf32>
}

// F,T: dX = dZ.Y, dY = dZ^T.X; activation_grad none: dZ is dout itself
// CHECK-LABEL: func.func @ft_none
// CHECK-NEXT:    %dx = opc.matmul %d, %y : (tensor<4x5xf32>, tensor<5x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %dy = opc.matmul %d, %x {trans_x = true} : (tensor<4x5xf32>, tensor<4x8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT:    %db = opc.reduce_sum %d {axes = array<i64: 0>}
func.func @ft_none(%x: tensor<4x8xf32>, %y: tensor<5x8xf32>, %d: tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<5x8xf32>, tensor<5xf32>) {
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, %d {trans_y = true} : (tensor<4x8xf32>, tensor<5x8xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<5x8xf32>, tensor<5xf32>)
  func.return %dx, %dy, %db : tensor<4x8xf32>, tensor<5x8xf32>, tensor<5xf32>
}

// T,T: dX = Y^T.dZ^T, dY = dZ^T.X^T
// CHECK-LABEL: func.func @tt_relu
// CHECK-NEXT:    %dz = opc.relu_grad %z, %d
// CHECK-NEXT:    %dx = opc.matmul %y, %dz {trans_x = true, trans_y = true} : (tensor<5x8xf64>, tensor<4x5xf64>) -> tensor<8x4xf64>
// CHECK-NEXT:    %dy = opc.matmul %dz, %x {trans_x = true, trans_y = true} : (tensor<4x5xf64>, tensor<8x4xf64>) -> tensor<5x8xf64>
// CHECK-NEXT:    %db = opc.reduce_sum %dz {axes = array<i64: 0>}
func.func @tt_relu(%x: tensor<8x4xf64>, %y: tensor<5x8xf64>, %z: tensor<4x5xf64>, %d: tensor<4x5xf64>) -> (tensor<8x4xf64>, tensor<5x8xf64>, tensor<5xf64>) {
  %dx, %dy, %db = opc.fused_gemm_epilogue_grad %x, %y, %z, %d {activation_grad = "relu_grad", trans_x = true, trans_y = true} : (tensor<8x4xf64>, tensor<5x8xf64>, tensor<4x5xf64>, tensor<4x5xf64>) -> (tensor<8x4xf64>, tensor<5x8xf64>, tensor<5xf64>)
  func.return %dx, %dy, %db : tensor<8x4xf64>, tensor<5x8xf64>, tensor<5xf64>
}
