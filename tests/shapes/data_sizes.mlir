// Functions whose result sizes depend on the data (tests/shapes/test_data_sizes.py).
func.func @nz_f32(%x: tensor<?x4xf32>) -> tensor<2x?xi64> {
  %r = opc.nonzero %x : (tensor<?x4xf32>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}
func.func @nz_f64(%x: tensor<?xf64>) -> tensor<1x?xi64> {
  %r = opc.nonzero %x : (tensor<?xf64>) -> tensor<1x?xi64>
  func.return %r : tensor<1x?xi64>
}
func.func @nz_f16(%x: tensor<?x3xf16>) -> tensor<2x?xi64> {
  %r = opc.nonzero %x : (tensor<?x3xf16>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}
func.func @nz_bf16(%x: tensor<?x3xbf16>) -> tensor<2x?xi64> {
  %r = opc.nonzero %x : (tensor<?x3xbf16>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}
func.func @nz_i1(%x: tensor<?xi1>) -> tensor<1x?xi64> {
  %r = opc.nonzero %x : (tensor<?xi1>) -> tensor<1x?xi64>
  func.return %r : tensor<1x?xi64>
}
func.func @nz_i8(%x: tensor<3x?xi8>) -> tensor<2x?xi64> {
  %r = opc.nonzero %x : (tensor<3x?xi8>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}
func.func @nz_ui8(%x: tensor<?x2xui8>) -> tensor<2x?xi64> {
  %r = opc.nonzero %x : (tensor<?x2xui8>) -> tensor<2x?xi64>
  func.return %r : tensor<2x?xi64>
}
func.func @nz_i32(%x: tensor<?x2x3xi32>) -> tensor<3x?xi64> {
  %r = opc.nonzero %x : (tensor<?x2x3xi32>) -> tensor<3x?xi64>
  func.return %r : tensor<3x?xi64>
}
func.func @nz_i64(%x: tensor<?xi64>) -> tensor<1x?xi64> {
  %r = opc.nonzero %x : (tensor<?xi64>) -> tensor<1x?xi64>
  func.return %r : tensor<1x?xi64>
}
// A static operand: only the count is known at run time.
func.func @nz_static(%x: tensor<2x3x4xf32>) -> tensor<3x?xi64> {
  %r = opc.nonzero %x : (tensor<2x3x4xf32>) -> tensor<3x?xi64>
  func.return %r : tensor<3x?xi64>
}
// The data size used by later ops: a compress (nonzero + gather), a function of the count, a
// static result from a data-sized intermediate, and the same count in two results.
func.func @compress(%x: tensor<?x3xf64>, %c: tensor<?xi1>) -> tensor<?x3xf64> {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?x3xf64>, tensor<?xi64>) -> tensor<?x3xf64>
  %r = opc.tanh %g : (tensor<?x3xf64>) -> tensor<?x3xf64>
  func.return %r : tensor<?x3xf64>
}
func.func @positive_sum(%x: tensor<?x5xf32>) -> (tensor<f32>, tensor<?xf32>, tensor<2x?xi64>) {
  %z = arith.constant dense<0.0> : tensor<f32>
  %p = opc.greater_than %x, %z : (tensor<?x5xf32>, tensor<f32>) -> tensor<?x5xi1>
  %nz = opc.nonzero %p : (tensor<?x5xi1>) -> tensor<2x?xi64>
  %flat = opc.reshape %x : (tensor<?x5xf32>) -> tensor<?xf32>
  %c5 = arith.constant dense<5> : tensor<1xi64>
  %c0 = arith.constant dense<0> : tensor<1xi64>
  %c1 = arith.constant dense<1> : tensor<1xi64>
  %rows = opc.gather %nz, %c0 {axis = 0} : (tensor<2x?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
  %cols = opc.gather %nz, %c1 {axis = 0} : (tensor<2x?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
  %r5 = opc.mul %rows, %c5 : (tensor<1x?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
  %at2 = opc.add %r5, %cols : (tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?xi64>
  %at = opc.reshape %at2 : (tensor<1x?xi64>) -> tensor<?xi64>
  %v = opc.gather %flat, %at {axis = 0} : (tensor<?xf32>, tensor<?xi64>) -> tensor<?xf32>
  %s = opc.reduce_sum %v {axes = array<i64: 0>, keepdim = false} : (tensor<?xf32>) -> tensor<f32>
  func.return %s, %v, %nz : tensor<f32>, tensor<?xf32>, tensor<2x?xi64>
}
// A nonzero of a data-sized value: its bound is the first count's bound.
func.func @nested(%x: tensor<?xf32>) -> tensor<1x?xi64> {
  %nz = opc.nonzero %x : (tensor<?xf32>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?xf32>, tensor<?xi64>) -> tensor<?xf32>
  %z = arith.constant dense<0.0> : tensor<f32>
  %p = opc.greater_than %g, %z : (tensor<?xf32>, tensor<f32>) -> tensor<?xi1>
  %r = opc.nonzero %p : (tensor<?xi1>) -> tensor<1x?xi64>
  func.return %r : tensor<1x?xi64>
}
// A count equated with an argument's size: checked when the count is known.
func.func @masked_add(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
  %nz = opc.nonzero %x : (tensor<?xf32>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %g = opc.gather %x, %i {axis = 0} : (tensor<?xf32>, tensor<?xi64>) -> tensor<?xf32>
  %r = opc.add %g, %y : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  func.return %r : tensor<?xf32>
}
// TopK with k read at run time: the axis dim of the results is k.
func.func @top_f32(%x: tensor<?x6xf32>, %k: tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>) {
  %v, %i = opc.topk %x, %k {axis = 1, largest = true} : (tensor<?x6xf32>, tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  func.return %v, %i : tensor<?x?xf32>, tensor<?x?xi64>
}
func.func @bottom_i32(%x: tensor<5x?xi32>, %k: tensor<1xi64>) -> (tensor<?x?xi32>, tensor<?x?xi64>) {
  %v, %i = opc.topk %x, %k {axis = 0, largest = false} : (tensor<5x?xi32>, tensor<1xi64>) -> (tensor<?x?xi32>, tensor<?x?xi64>)
  func.return %v, %i : tensor<?x?xi32>, tensor<?x?xi64>
}
func.func @top_ui8(%x: tensor<?xui8>, %k: tensor<i64>) -> (tensor<?xui8>, tensor<?xi64>) {
  %v, %i = opc.topk %x, %k {axis = 0, largest = true} : (tensor<?xui8>, tensor<i64>) -> (tensor<?xui8>, tensor<?xi64>)
  func.return %v, %i : tensor<?xui8>, tensor<?xi64>
}
func.func @top_f16_middle(%x: tensor<2x?x3xf16>, %k: tensor<i64>) -> (tensor<2x?x3xf16>, tensor<2x?x3xi64>) {
  %v, %i = opc.topk %x, %k {axis = 1, largest = true} : (tensor<2x?x3xf16>, tensor<i64>) -> (tensor<2x?x3xf16>, tensor<2x?x3xi64>)
  func.return %v, %i : tensor<2x?x3xf16>, tensor<2x?x3xi64>
}
// Unique of a 1-D value: the number of distinct values is a data size.
func.func @unique_f64(%x: tensor<?xf64>) -> (tensor<?xf64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) {
  %y, %f, %i, %c = opc.unique %x {sorted = true} : (tensor<?xf64>) -> (tensor<?xf64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  func.return %y, %f, %i, %c : tensor<?xf64>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>
}
func.func @unique_i8_unsorted(%x: tensor<?xi8>) -> (tensor<?xi8>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) {
  %y, %f, %i, %c = opc.unique %x {sorted = false} : (tensor<?xi8>) -> (tensor<?xi8>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
  func.return %y, %f, %i, %c : tensor<?xi8>, tensor<?xi64>, tensor<?xi64>, tensor<?xi64>
}
func.func @unique_ui8(%x: tensor<9xui8>) -> (tensor<?xui8>, tensor<?xi64>, tensor<9xi64>, tensor<?xi64>) {
  %y, %f, %i, %c = opc.unique %x {sorted = true} : (tensor<9xui8>) -> (tensor<?xui8>, tensor<?xi64>, tensor<9xi64>, tensor<?xi64>)
  func.return %y, %f, %i, %c : tensor<?xui8>, tensor<?xi64>, tensor<9xi64>, tensor<?xi64>
}
