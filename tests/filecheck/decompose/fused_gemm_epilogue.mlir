// RUN: opc opt %s -p 'opc-decompose{ops=fused_gemm_epilogue}' | filecheck %s
// The forward composite: matmul + add (bias broadcast) + activation;
// reserve_space is the pre-activation.

// CHECK-LABEL: func.func @relu
// CHECK-NEXT:    %0 = opc.matmul %x, %y {trans_y = true} : (tensor<4x8xf32>, tensor<5x8xf32>) -> tensor<4x5xf32>
// CHECK-NEXT:    %z = opc.add %0, %b : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
// CHECK-NEXT:    %out = opc.relu %z : (tensor<4x5xf32>) -> tensor<4x5xf32>
// CHECK-NEXT:    func.return %out, %z
func.func @relu(%x: tensor<4x8xf32>, %y: tensor<5x8xf32>, %b: tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %out, %z = opc.fused_gemm_epilogue %x, %y, %b {activation = "relu", trans_y = true} : (tensor<4x8xf32>, tensor<5x8xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  func.return %out, %z : tensor<4x5xf32>, tensor<4x5xf32>
}

// CHECK-LABEL: func.func @gelu
// CHECK-NEXT:    %0 = opc.matmul %x, %y {trans_x = true}
// CHECK-NEXT:    %z = opc.add %0, %b
// CHECK-NEXT:    %out = opc.gelu %z : (tensor<4x5xf32>)
func.func @gelu(%x: tensor<8x4xf32>, %y: tensor<8x5xf32>, %b: tensor<5xf32>) -> tensor<4x5xf32> {
  %out, %z = opc.fused_gemm_epilogue %x, %y, %b {activation = "gelu", trans_x = true} : (tensor<8x4xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  func.return %out : tensor<4x5xf32>
}

// CHECK-LABEL: func.func @none
// CHECK-NEXT:    %0 = opc.matmul %x, %y : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
// CHECK-NEXT:    %out = opc.add %0, %b
// CHECK-NEXT:    func.return %out
func.func @none(%x: tensor<4x8xf32>, %y: tensor<8x5xf32>, %b: tensor<5xf32>) -> tensor<4x5xf32> {
  %out = opc.fused_gemm_epilogue %x, %y, %b : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  func.return %out : tensor<4x5xf32>
}
