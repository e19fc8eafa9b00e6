// Programs of tests/support/fuzz_dynamic.py (seed 0: 1, 9, 11, 26) for the CLI fuzzer to mutate: `?` dims
// through nn ops and attention, scf.for with static and run-time trip counts, a scan-output stack
// (tensor.insert_slice at the loop index), topk with a run-time k, nonzero and unique.
func.func @d1(%a0: tensor<?x4xf64>, %a1: tensor<6xf64>, %a2: tensor<6x2xf64>, %a3: tensor<?x3xf64>, %a4: tensor<5x14xf64>, %a5: tensor<4x1x1xf64>, %a6: tensor<4xf64>, %a7: tensor<16x2xf64>, %a8: tensor<3x1x1xf64>) -> tensor<?x2xf64> {
  %v2 = arith.constant 0 : index
  %v1 = tensor.dim %a0, %v2 : tensor<?x4xf64>
  %v3 = opc.tanh %a0 : (tensor<?x4xf64>) -> tensor<?x4xf64>
  %v4 = opc.concat %a0, %v3 {axis = 0 : i64} : (tensor<?x4xf64>, tensor<?x4xf64>) -> tensor<?x4xf64>
  %v5 = tensor.extract_slice %v4[%v1, 1] [%v1, 3] [1, 1] : tensor<?x4xf64> to tensor<?x3xf64>
  %v7 = opc.reshape %v5 : (tensor<?x3xf64>) -> tensor<?x3x1xf64>
  %v6, %v6l = opc.attention %v7, %v7, %v7 {scale = 1.00000000000000000e+00 : f64, is_causal = true} : (tensor<?x3x1xf64>, tensor<?x3x1xf64>, tensor<?x3x1xf64>) -> (tensor<?x3x1xf64>, tensor<?x3xf64>)
  %v8 = opc.reshape %v6 : (tensor<?x3x1xf64>) -> tensor<?x3xf64>
  %v9 = opc.concat %v8, %v6l {axis = 1 : i64} : (tensor<?x3xf64>, tensor<?x3xf64>) -> tensor<?x6xf64>
  %v10 = opc.sub %v9, %a1 : (tensor<?x6xf64>, tensor<6xf64>) -> tensor<?x6xf64>
  %v11 = opc.matmul %v10, %a2 : (tensor<?x6xf64>, tensor<6x2xf64>) -> tensor<?x2xf64>
  %v12 = arith.constant 0 : index
  %v13 = arith.constant 1 : index
  %v14 = arith.constant 3 : index
  %v20 = arith.constant 0 : index
  %v19 = tensor.dim %v11, %v20 : tensor<?x2xf64>
  %v21 = opc.full %v19 {value = 0.0 : f64} : (index) -> tensor<3x?x2xf64>
  %v18:2 = scf.for %v15 = %v12 to %v14 step %v13 iter_args(%v16 = %v11, %v17 = %v21) -> (tensor<?x2xf64>, tensor<3x?x2xf64>) {
    %v22 = opc.sin %v16 : (tensor<?x2xf64>) -> tensor<?x2xf64>
    %v23 = opc.concat %v22, %a3 {axis = 1 : i64} : (tensor<?x2xf64>, tensor<?x3xf64>) -> tensor<?x5xf64>
    %v24 = opc.matmul %v23, %a4 : (tensor<?x5xf64>, tensor<5x14xf64>) -> tensor<?x14xf64>
    %v25 = opc.reshape %v24 : (tensor<?x14xf64>) -> tensor<?x2x7xf64>
    %v26, %v26z = opc.fused_conv_epilogue %v25, %a5, %a6 {strides = array<i64: 2>, dilations = array<i64: 1>, pads = array<i64: 1, 0>, group = 2, activation = "gelu"} : (tensor<?x2x7xf64>, tensor<4x1x1xf64>, tensor<4xf64>) -> (tensor<?x4x4xf64>, tensor<?x4x4xf64>)
    %v27 = opc.reshape %v26 : (tensor<?x4x4xf64>) -> tensor<?x16xf64>
    %v28 = opc.matmul %v27, %a7 : (tensor<?x16xf64>, tensor<16x2xf64>) -> tensor<?x2xf64>
    %v29 = opc.tanh %v28 : (tensor<?x2xf64>) -> tensor<?x2xf64>
    %v33 = arith.constant 0 : index
    %v32 = tensor.dim %v29, %v33 : tensor<?x2xf64>
    %v30 = opc.reshape %v29 : (tensor<?x2xf64>) -> tensor<1x?x2xf64>
    %v31 = tensor.insert_slice %v30 into %v17[%v15, 0, 0] [1, %v32, 2] [1, 1, 1] : tensor<1x?x2xf64> into tensor<3x?x2xf64>
    scf.yield %v29, %v31 : tensor<?x2xf64>, tensor<3x?x2xf64>
  }
  %v34 = opc.mul %v18#1, %a8 : (tensor<3x?x2xf64>, tensor<3x1x1xf64>) -> tensor<3x?x2xf64>
  %v35 = opc.reduce_sum %v34 {axes = array<i64: 0>} : (tensor<3x?x2xf64>) -> tensor<?x2xf64>
  %v36 = opc.add %v18#0, %v35 : (tensor<?x2xf64>, tensor<?x2xf64>) -> tensor<?x2xf64>
  func.return %v36 : tensor<?x2xf64>
}
func.func @d9(%a0: tensor<?x2xf64>, %a1: tensor<2x4xf64>, %a2: tensor<?x2xf64>, %a3: tensor<6x2xf64>, %a4: tensor<3xf64>, %a5: tensor<?xi64>, %a6: tensor<1x3xf64>, %a7: tensor<3x1x1xf64>) -> tensor<?x3xf64> {
  %v1 = arith.constant 0 : index
  %v2 = arith.constant 1 : index
  %v3 = arith.constant 2 : index
  %v7:1 = scf.for %v4 = %v1 to %v3 step %v2 iter_args(%v5 = %a0) -> (tensor<?x2xf64>) {
    %v8 = opc.matmul %v5, %a1 : (tensor<?x2xf64>, tensor<2x4xf64>) -> tensor<?x4xf64>
    %v9 = opc.concat %v8, %a2 {axis = 1 : i64} : (tensor<?x4xf64>, tensor<?x2xf64>) -> tensor<?x6xf64>
    %v10 = opc.transpose %v9 {perm = array<i64: 1, 0>} : (tensor<?x6xf64>) -> tensor<6x?xf64>
    %v11 = opc.transpose %v10 {perm = array<i64: 1, 0>} : (tensor<6x?xf64>) -> tensor<?x6xf64>
    %v12 = opc.matmul %v11, %a3 : (tensor<?x6xf64>, tensor<6x2xf64>) -> tensor<?x2xf64>
    %v13 = opc.tanh %v12 : (tensor<?x2xf64>) -> tensor<?x2xf64>
    scf.yield %v13 : tensor<?x2xf64>
  }
  %v15 = opc.reshape %v7#0 : (tensor<?x2xf64>) -> tensor<1x?x2xf64>
  %v14, %v14l = opc.attention %v15, %v15, %v15 {scale = 5.00000000000000000e-01 : f64, is_causal = true} : (tensor<1x?x2xf64>, tensor<1x?x2xf64>, tensor<1x?x2xf64>) -> (tensor<1x?x2xf64>, tensor<1x?xf64>)
  %v16 = opc.reshape %v14 : (tensor<1x?x2xf64>) -> tensor<?x2xf64>
  %v17 = opc.reshape %v14l : (tensor<1x?xf64>) -> tensor<?x1xf64>
  %v18 = opc.concat %v16, %v17 {axis = 1 : i64} : (tensor<?x2xf64>, tensor<?x1xf64>) -> tensor<?x3xf64>
  %v19 = arith.constant 0 : index
  %v20 = arith.constant 1 : index
  %v21 = arith.constant 3 : index
  %v27 = arith.constant 0 : index
  %v26 = tensor.dim %v18, %v27 : tensor<?x3xf64>
  %v28 = opc.full %v26 {value = 0.0 : f64} : (index) -> tensor<3x?x3xf64>
  %v25:2 = scf.for %v22 = %v19 to %v21 step %v20 iter_args(%v23 = %v18, %v24 = %v28) -> (tensor<?x3xf64>, tensor<3x?x3xf64>) {
    %v29 = opc.sub %v23, %a4 : (tensor<?x3xf64>, tensor<3xf64>) -> tensor<?x3xf64>
    %v30 = opc.reduce_sum %v29 {axes = array<i64: 1>, keepdim = true} : (tensor<?x3xf64>) -> tensor<?x1xf64>
    %v31, %v31f, %v31i, %v31c = opc.unique %a5 {sorted = false} : (tensor<?xi64>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
    %v32 = opc.gather %v30, %v31f {axis = 0} : (tensor<?x1xf64>, tensor<?xi64>) -> tensor<?x1xf64>
    %v33 = opc.cast %v31c {dtype = f64} : (tensor<?xi64>) -> tensor<?xf64>
    %v34 = opc.reshape %v33 : (tensor<?xf64>) -> tensor<?x1xf64>
    %v35 = opc.mul %v32, %v34 : (tensor<?x1xf64>, tensor<?x1xf64>) -> tensor<?x1xf64>
    %v36 = opc.tanh %v35 : (tensor<?x1xf64>) -> tensor<?x1xf64>
    %v37 = opc.gather %v36, %v31i {axis = 0} : (tensor<?x1xf64>, tensor<?xi64>) -> tensor<?x1xf64>
    %v38 = opc.matmul %v37, %a6 : (tensor<?x1xf64>, tensor<1x3xf64>) -> tensor<?x3xf64>
    %v39 = opc.tanh %v38 : (tensor<?x3xf64>) -> tensor<?x3xf64>
    %v43 = arith.constant 0 : index
    %v42 = tensor.dim %v39, %v43 : tensor<?x3xf64>
    %v40 = opc.reshape %v39 : (tensor<?x3xf64>) -> tensor<1x?x3xf64>
    %v41 = tensor.insert_slice %v40 into %v24[%v22, 0, 0] [1, %v42, 3] [1, 1, 1] : tensor<1x?x3xf64> into tensor<3x?x3xf64>
    scf.yield %v39, %v41 : tensor<?x3xf64>, tensor<3x?x3xf64>
  }
  %v44 = opc.mul %v25#1, %a7 : (tensor<3x?x3xf64>, tensor<3x1x1xf64>) -> tensor<3x?x3xf64>
  %v45 = opc.reduce_sum %v44 {axes = array<i64: 0>} : (tensor<3x?x3xf64>) -> tensor<?x3xf64>
  %v46 = opc.add %v25#0, %v45 : (tensor<?x3xf64>, tensor<?x3xf64>) -> tensor<?x3xf64>
  func.return %v46 : tensor<?x3xf64>
}
func.func @d11(%a0: tensor<?x1xf64>, %a1: tensor<1x3xf64>, %a2: tensor<3x2xf64>, %a3: tensor<i64>, %a4: tensor<?x1xf64>, %a5: tensor<3x2xf64>) -> tensor<?x2xf64> {
  %v1 = opc.matmul %a0, %a1 : (tensor<?x1xf64>, tensor<1x3xf64>) -> tensor<?x3xf64>
  %v2 = opc.matmul %v1, %a2 : (tensor<?x3xf64>, tensor<3x2xf64>) -> tensor<?x2xf64>
  %v3 = arith.constant 0 : index
  %v4 = arith.constant 1 : index
  %v5 = tensor.extract %a3[] : tensor<i64>
  %v6 = arith.index_cast %v5 : i64 to index
  %v10:1 = scf.for %v7 = %v3 to %v6 step %v4 iter_args(%v8 = %v2) -> (tensor<?x2xf64>) {
    %v11 = opc.tanh %v8 : (tensor<?x2xf64>) -> tensor<?x2xf64>
    %v12 = opc.concat %v11, %a4 {axis = 1 : i64} : (tensor<?x2xf64>, tensor<?x1xf64>) -> tensor<?x3xf64>
    %v13 = opc.matmul %v12, %a5 : (tensor<?x3xf64>, tensor<3x2xf64>) -> tensor<?x2xf64>
    %v14 = opc.tanh %v13 : (tensor<?x2xf64>) -> tensor<?x2xf64>
    scf.yield %v14 : tensor<?x2xf64>
  }
  func.return %v10#0 : tensor<?x2xf64>
}
func.func @d26(%a0: tensor<?x2xf64>, %a1: tensor<i64>, %a2: tensor<1x72xf64>, %a3: tensor<2x4x1x1x1xf64>, %a4: tensor<2xf64>) -> tensor<?x16xf64> {
  %v1, %v1i = opc.topk %a0, %a1 {axis = 1, largest = false} : (tensor<?x2xf64>, tensor<i64>) -> (tensor<?x?xf64>, tensor<?x?xi64>)
  %v2 = opc.cast %v1i {dtype = f64} : (tensor<?x?xi64>) -> tensor<?x?xf64>
  %v4 = arith.constant dense<0.01> : tensor<f64>
  %v3 = opc.mul %v2, %v4 : (tensor<?x?xf64>, tensor<f64>) -> tensor<?x?xf64>
  %v5 = opc.add %v1, %v3 : (tensor<?x?xf64>, tensor<?x?xf64>) -> tensor<?x?xf64>
  %v6 = opc.reduce_sum %v5 {axes = array<i64: 1>, keepdim = true} : (tensor<?x?xf64>) -> tensor<?x1xf64>
  %v7 = opc.transpose %v6 {perm = array<i64: 1, 0>} : (tensor<?x1xf64>) -> tensor<1x?xf64>
  %v8 = opc.transpose %v7 {perm = array<i64: 1, 0>} : (tensor<1x?xf64>) -> tensor<?x1xf64>
  %v9 = opc.reduce_sum %v8 {axes = array<i64: 1>} : (tensor<?x1xf64>) -> tensor<?xf64>
  %v10 = arith.constant dense<0.0> : tensor<f64>
  %v11 = opc.greater_than %v9, %v10 : (tensor<?xf64>, tensor<f64>) -> tensor<?xi1>
  %v12 = opc.nonzero %v11 : (tensor<?xi1>) -> tensor<1x?xi64>
  %v13 = opc.reshape %v12 : (tensor<1x?xi64>) -> tensor<?xi64>
  %v14 = opc.gather %v8, %v13 {axis = 0} : (tensor<?x1xf64>, tensor<?xi64>) -> tensor<?x1xf64>
  %v15 = opc.matmul %v14, %a2 : (tensor<?x1xf64>, tensor<1x72xf64>) -> tensor<?x72xf64>
  %v16 = opc.reshape %v15 : (tensor<?x72xf64>) -> tensor<?x4x3x2x3xf64>
  %v17 = opc.fused_conv_epilogue %v16, %a3, %a4 {strides = array<i64: 2, 1, 2>, dilations = array<i64: 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0>, group = 1, activation = "none"} : (tensor<?x4x3x2x3xf64>, tensor<2x4x1x1x1xf64>, tensor<2xf64>) -> tensor<?x2x2x2x2xf64>
  %v18 = opc.reshape %v17 : (tensor<?x2x2x2x2xf64>) -> tensor<?x16xf64>
  %v19 = opc.reshape %v18 : (tensor<?x16xf64>) -> tensor<?x8x2xf64>
  %v20 = opc.transpose %v19 {perm = array<i64: 0, 2, 1>} : (tensor<?x8x2xf64>) -> tensor<?x2x8xf64>
  %v21 = opc.reshape %v20 : (tensor<?x2x8xf64>) -> tensor<?x16xf64>
  func.return %v21 : tensor<?x16xf64>
}
