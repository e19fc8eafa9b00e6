// RUN: opc compile %s --emit c | filecheck %s
// Loop nests keep a unit-stride innermost loop of their own (an `omp simd` loop, no index
// recovered by division inside it): only the outer loops collapse into the threads'
// iterations. A transpose of the two inner axes walks 16x16 squares. erf is the runtime's
// vectorizable opc_erff. tests/test_vectorize.py checks that gcc vectorizes these loops.

// The erf GELU as the ONNX exporter writes it (div, erf, add, mul, mul).
// CHECK-LABEL: void opc_k_gelu_0(
// CHECK:         #pragma omp parallel for collapse(2) schedule(dynamic, opc_par_chunk({{.*}})) num_threads(opc_num_threads())
// CHECK-NEXT:    for (int64_t [[B:v_[0-9]+]] =
// CHECK-NEXT:      for (int64_t [[S:v_[0-9]+]] =
// CHECK-NEXT:        #pragma omp simd
// CHECK-NEXT:        for (int64_t [[C:v_[0-9]+]] =
// CHECK:               x_0[[[B]] * 131072 + [[S]] * 1024 + [[C]]]
// CHECK:               opc_erff(
// CHECK-NOT:     erff(
// CHECK:         }
func.func @gelu(%x: tensor<8x128x1024xf32>) -> tensor<8x128x1024xf32> {
  %s = opc.full {value = 1.4142135623730951 : f64} : () -> tensor<f32>
  %a = opc.div %x, %s : (tensor<8x128x1024xf32>, tensor<f32>) -> tensor<8x128x1024xf32>
  %b = opc.erf %a : (tensor<8x128x1024xf32>) -> tensor<8x128x1024xf32>
  %one = opc.full {value = 1.0 : f64} : () -> tensor<f32>
  %c = opc.add %b, %one : (tensor<8x128x1024xf32>, tensor<f32>) -> tensor<8x128x1024xf32>
  %d = opc.mul %x, %c : (tensor<8x128x1024xf32>, tensor<8x128x1024xf32>) -> tensor<8x128x1024xf32>
  %h = opc.full {value = 0.5 : f64} : () -> tensor<f32>
  %e = opc.mul %d, %h : (tensor<8x128x1024xf32>, tensor<f32>) -> tensor<8x128x1024xf32>
  func.return %e : tensor<8x128x1024xf32>
}

// Heads out of the sequence axis: the innermost axis stays innermost on both sides.
// CHECK-LABEL: void opc_k_heads_0(
// CHECK:         #pragma omp parallel for collapse(3) schedule(dynamic, opc_par_chunk({{.*}}))
// CHECK:         #pragma omp simd
// CHECK-NEXT:    for (int64_t
func.func @heads(%x: tensor<8x128x4x64xf32>) -> tensor<8x4x128x64xf32> {
  %t = opc.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<8x128x4x64xf32>) -> tensor<8x4x128x64xf32>
  func.return %t : tensor<8x4x128x64xf32>
}

// K^T: the two inner axes swap, so they are walked in 16x16 tiles.
// CHECK-LABEL: void opc_k_keys_t_0(
// CHECK:         #pragma omp parallel for collapse(4) schedule(dynamic, opc_par_chunk({{.*}}))
// CHECK:         for (int64_t [[I:v_[0-9]+]]_t = 0; [[I]]_t < 64; [[I]]_t += 16) {
// CHECK-NEXT:      for (int64_t [[J:v_[0-9]+]]_t = 0; [[J]]_t < 128; [[J]]_t += 16) {
// CHECK-NEXT:        for (int64_t [[I]] = [[I]]_t; [[I]] < [[I]]_t + 16; [[I]]++) {
// CHECK-NEXT:          #pragma omp simd
// CHECK-NEXT:          for (int64_t [[J]] = [[J]]_t; [[J]] < [[J]]_t + 16; [[J]]++) {
func.func @keys_t(%x: tensor<8x4x128x64xf32>) -> tensor<8x4x64x128xf32> {
  %t = opc.transpose %x {perm = array<i64: 0, 1, 3, 2>} : (tensor<8x4x128x64xf32>) -> tensor<8x4x64x128xf32>
  func.return %t : tensor<8x4x64x128xf32>
}

// The attention mask added over heads and query rows.
// CHECK-LABEL: void opc_k_mask_0(
// CHECK:         #pragma omp parallel for collapse(3) schedule(dynamic, opc_par_chunk({{.*}}))
// CHECK:         #pragma omp simd
// CHECK-NEXT:    for (int64_t [[K:v_[0-9]+]] =
// CHECK:           m_1[{{v_[0-9]+}} * 128 + [[K]]]
func.func @mask(%x: tensor<8x4x128x128xf32>, %m: tensor<8x1x1x128xf32>) -> tensor<8x4x128x128xf32> {
  %t = opc.add %x, %m : (tensor<8x4x128x128xf32>, tensor<8x1x1x128xf32>) -> tensor<8x4x128x128xf32>
  func.return %t : tensor<8x4x128x128xf32>
}
