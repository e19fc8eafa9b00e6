// RUN: opc opt %s -p opc-decompose | filecheck %s --check-prefix=CPU
// RUN: opc opt %s -p 'opc-decompose{target="%S/../../../examples/device_no_fused.toml"}' | filecheck %s --check-prefix=DEV
// RUN: not opc opt %s -p 'opc-decompose{target="%S/Inputs/tiny.toml"}' 2>&1 | filecheck %s --check-prefix=TINY
// Without ops, the target decides: cpu has every kernel but cast_grad (invoke);
// a device without fused kernels takes their composites. (Paths in pass
// options are quoted: target="FILE.toml".)

// CPU-LABEL: func.func @f
// CPU-NEXT:    %out, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"}
// CPU-NEXT:    %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %d {activation_grad = "gelu_grad"}
// CPU-NEXT:    %dc = opc.cast %d {dtype = f64}
// CPU-NEXT:    func.return

// DEV-LABEL: func.func @f
// DEV-NEXT:    %0 = opc.matmul %x, %w
// DEV-NEXT:    %z = opc.add %0, %b
// DEV-NEXT:    %out = opc.gelu %z
// DEV-NEXT:    %dz = opc.gelu_grad %z, %d
// DEV-NEXT:    %dx = opc.matmul %dz, %w {trans_y = true}
// DEV-NEXT:    %dw = opc.matmul %x, %dz {trans_x = true}
// DEV-NEXT:    %db = opc.reduce_sum %dz {axes = array<i64: 0>}
// DEV-NEXT:    %dc = opc.cast %d {dtype = f64}
// DEV-NEXT:    func.return

// TINY: error: opc.tanh cannot run on target 'tiny': it has no kernel there and no invoke or composite rule, produced by the rule of opc.fused_gemm_epilogue (in @f)
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x5xf32>, %b: tensor<5xf32>, %d: tensor<4x5xf32>, %c: tensor<4x5xf64>) -> (tensor<4x5xf32>, tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>, tensor<4x5xf64>) {
  %out, %z = opc.fused_gemm_epilogue %x, %w, %b {activation = "gelu"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  %dx, %dw, %db = opc.fused_gemm_epilogue_grad %x, %w, %z, %d {activation_grad = "gelu_grad"} : (tensor<4x8xf32>, tensor<8x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>)
  %dc = opc.cast_grad %c, %d : (tensor<4x5xf64>, tensor<4x5xf32>) -> tensor<4x5xf64>
  func.return %out, %dx, %dw, %db, %dc : tensor<4x5xf32>, tensor<4x8xf32>, tensor<8x5xf32>, tensor<5xf32>, tensor<4x5xf64>
}
