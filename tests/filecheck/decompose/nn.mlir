// RUN: opc opt %s -p 'opc-decompose{ops=softmax,log_softmax,layer_norm,softmax_cross_entropy,softmax_grad,log_softmax_grad,layer_norm_grad,softmax_cross_entropy_grad}' | filecheck %s
// The composites of the fused normalizations and losses and of their grad ops
// (Paddle's prim rules): max-subtracted, in f32 for halves, rounded once.

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %0 = opc.cast %x {dtype = f32} : (tensor<4x8xf16>) -> tensor<4x8xf32>
// CHECK-NEXT:    %1 = opc.reduce_max %0 {axes = array<i64: 0>, keepdim = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT:    %2 = opc.sub %0, %1
// CHECK-NEXT:    %3 = opc.exp %2
// CHECK-NEXT:    %4 = opc.reduce_sum %3 {axes = array<i64: 0>, keepdim = true}
// CHECK-NEXT:    %5 = opc.div %3, %4
// CHECK-NEXT:    %r = opc.cast %5 {dtype = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
func.func @softmax(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %r = opc.softmax %x {axis = 0} : (tensor<4x8xf16>) -> tensor<4x8xf16>
  func.return %r : tensor<4x8xf16>
}

// log_softmax = (x - max) - log(sum(exp(x - max)))
// CHECK-LABEL: func.func @log_softmax
// CHECK-NEXT:    %0 = opc.reduce_max %x {axes = array<i64: 1>, keepdim = true}
// CHECK-NEXT:    %1 = opc.sub %x, %0
// CHECK-NEXT:    %2 = opc.exp %1
// CHECK-NEXT:    %3 = opc.reduce_sum %2 {axes = array<i64: 1>, keepdim = true}
// CHECK-NEXT:    %4 = opc.log %3
// CHECK-NEXT:    %r = opc.sub %1, %4
func.func @log_softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = opc.log_softmax %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT:    %0 = opc.reduce_mean %x {axes = array<i64: 2>, keepdim = true}
// CHECK-NEXT:    %1 = opc.sub %x, %0
// CHECK-NEXT:    %2 = opc.mul %1, %1
// CHECK-NEXT:    %3 = opc.reduce_mean %2 {axes = array<i64: 2>, keepdim = true}
// CHECK-NEXT:    %4 = opc.full {value = 1.000000e-06 : f64} : () -> tensor<2x4x1xf32>
// CHECK-NEXT:    %5 = opc.add %3, %4
// CHECK-NEXT:    %6 = opc.rsqrt %5
// CHECK-NEXT:    %7 = opc.mul %1, %6
// CHECK-NEXT:    %8 = opc.mul %7, %s
// CHECK-NEXT:    %y = opc.add %8, %b
// CHECK-NEXT:    %mean = opc.reshape %0 : (tensor<2x4x1xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %rstd = opc.reshape %6 : (tensor<2x4x1xf32>) -> tensor<2x4xf32>
func.func @layer_norm(%x: tensor<2x4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %y, %mean, %rstd = opc.layer_norm %x, %s, %b {epsilon = 1.0e-06 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
  func.return %y, %mean, %rstd : tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// The label picks its log-probability through a one-hot compare with iota; a
// negative label is made an index past the end, so the gather from iota
// raises IndexError for any label outside [0, 3).
// CHECK-LABEL: func.func @sce
// CHECK:         %[[LS:.*]] = opc.sub %1, %4
// CHECK-NEXT:    %[[IOTA:.*]] = arith.constant dense<[0, 1, 2]> : tensor<3xi64>
// CHECK-NEXT:    %[[ZERO:.*]] = opc.full {value = 0.000000e+00 : f64} : () -> tensor<4x1xi64>
// CHECK-NEXT:    %[[NEG:.*]] = opc.less_than %label, %[[ZERO]]
// CHECK-NEXT:    %[[PAST:.*]] = opc.full {value = 3.000000e+00 : f64} : () -> tensor<4x1xi64>
// CHECK-NEXT:    %[[GUARD:.*]] = opc.select %[[NEG]], %[[PAST]], %label
// CHECK-NEXT:    %[[CHECKED:.*]] = opc.gather %[[IOTA]], %[[GUARD]] : (tensor<3xi64>, tensor<4x1xi64>) -> tensor<4x1xi64>
// CHECK-NEXT:    %[[ROW:.*]] = opc.reshape %[[IOTA]] : (tensor<3xi64>) -> tensor<1x3xi64>
// CHECK-NEXT:    %[[HOT:.*]] = opc.equal %[[CHECKED]], %[[ROW]] : (tensor<4x1xi64>, tensor<1x3xi64>) -> tensor<4x3xi1>
// CHECK-NEXT:    opc.full {value = 0.000000e+00 : f64} : () -> tensor<4x3xf32>
// CHECK-NEXT:    %[[PICK:.*]] = opc.select %[[HOT]], %[[LS]]
// CHECK-NEXT:    %[[SUM:.*]] = opc.reduce_sum %[[PICK]] {axes = array<i64: 1>, keepdim = true}
// CHECK-NEXT:    %loss = opc.neg %[[SUM]]
// CHECK-NEXT:    %sm = opc.div %2, %3
func.func @sce(%x: tensor<4x3xf32>, %label: tensor<4x1xi64>) -> (tensor<4x1xf32>, tensor<4x3xf32>) {
  %loss, %sm = opc.softmax_cross_entropy %x, %label : (tensor<4x3xf32>, tensor<4x1xi64>) -> (tensor<4x1xf32>, tensor<4x3xf32>)
  func.return %loss, %sm : tensor<4x1xf32>, tensor<4x3xf32>
}

// dx = out * (dout - sum(dout * out))
// CHECK-LABEL: func.func @softmax_grad
// CHECK-NEXT:    %0 = opc.mul %d, %out
// CHECK-NEXT:    %1 = opc.reduce_sum %0 {axes = array<i64: 1>, keepdim = true}
// CHECK-NEXT:    %2 = opc.sub %d, %1
// CHECK-NEXT:    %r = opc.mul %out, %2
func.func @softmax_grad(%out: tensor<4x8xf32>, %d: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = opc.softmax_grad %out, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}

// dx = dout - exp(out) * sum(dout)
// CHECK-LABEL: func.func @log_softmax_grad
// CHECK-NEXT:    %0 = opc.reduce_sum %d {axes = array<i64: 1>, keepdim = true}
// CHECK-NEXT:    %1 = opc.exp %out
// CHECK-NEXT:    %2 = opc.mul %1, %0
// CHECK-NEXT:    %r = opc.sub %d, %2
func.func @log_softmax_grad(%out: tensor<4x8xf32>, %d: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = opc.log_softmax_grad %out, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}

// From the saved mean and rstd: no reduction recomputes them.
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK:         %3 = opc.reshape %m : (tensor<4xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %4 = opc.reshape %r : (tensor<4xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %5 = opc.sub %0, %3
// CHECK-NEXT:    %6 = opc.mul %5, %4
// CHECK-NEXT:    %7 = opc.mul %1, %2
// CHECK-NEXT:    %8 = opc.reduce_mean %7 {axes = array<i64: 1>, keepdim = true}
// CHECK:         %16 = opc.reduce_sum %15 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %17 = opc.reduce_sum %1 {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %dx = opc.cast %14 {dtype = bf16}
// CHECK-NEXT:    %ds = opc.cast %16 {dtype = bf16}
// CHECK-NEXT:    %db = opc.cast %17 {dtype = bf16}
func.func @layer_norm_grad(%x: tensor<4x8xbf16>, %s: tensor<8xbf16>, %m: tensor<4xf32>, %r: tensor<4xf32>, %dy: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) {
  %dx, %ds, %db = opc.layer_norm_grad %x, %s, %m, %r, %dy : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>)
  func.return %dx, %ds, %db : tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
}

// dlogits = (softmax - onehot(label)) * dloss
// CHECK-LABEL: func.func @sce_grad
// CHECK:         %[[HOT:.*]] = opc.equal
// CHECK-NEXT:    %[[F:.*]] = opc.cast %[[HOT]] {dtype = f32} : (tensor<4x3xi1>) -> tensor<4x3xf32>
// CHECK-NEXT:    %[[D:.*]] = opc.sub %sm, %[[F]]
// CHECK-NEXT:    %r = opc.mul %[[D]], %d : (tensor<4x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
func.func @sce_grad(%label: tensor<4x1xi32>, %sm: tensor<4x3xf32>, %d: tensor<4x1xf32>) -> tensor<4x3xf32> {
  %r = opc.softmax_cross_entropy_grad %label, %sm, %d : (tensor<4x1xi32>, tensor<4x3xf32>, tensor<4x1xf32>) -> tensor<4x3xf32>
  func.return %r : tensor<4x3xf32>
}
