// RUN: opc opt %s -p opc-grad | filecheck %s
// Every result gets a dout, integer and i1 ones included; cotangents flow
// through cast (cast_grad = cast(dout, x.dtype), as in Paddle), reshape and
// transpose whatever the dtypes, never through integer arithmetic or compares.
// An integer value used twice sums its cotangents; an i1 value ors them.
// A function with no float argument gets no grad function, and the module
// records why.

// CHECK: builtin.module attributes {opc.no_grad = {count_grad = "@count has no float argument to differentiate with respect to (arguments: tensor<3xi32>)", count_value_and_grad = "@count has no float argument

// Paddle's report: y = cast(x, 'uint8'); y.backward() gives x.grad = 1.
// CHECK-LABEL: func.func @to_u8_grad(%x: tensor<3xf64>, %dy: tensor<3xui8>) -> tensor<3xf64> {
// CHECK-NEXT:    %dx = opc.cast_grad %x, %dy : (tensor<3xf64>, tensor<3xui8>) -> tensor<3xf64>
// CHECK-NEXT:    func.return %dx
func.func @to_u8(%x: tensor<3xf64>) -> tensor<3xui8> {
  %y = opc.cast %x {dtype = ui8} : (tensor<3xf64>) -> tensor<3xui8>
  func.return %y : tensor<3xui8>
}

// i1 fan-out: select(a, a, b) is a or b (opc.add refuses i1).
// CHECK-LABEL: func.func @bools_grad(%x: tensor<3xf32>, %dc: tensor<3xi1>, %dc_: tensor<3xi1>) -> tensor<3xf32> {
// CHECK-NEXT:    %0 = opc.select %dc, %dc, %dc_ : (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
// CHECK-NEXT:    %dx = opc.cast_grad %x, %0 : (tensor<3xf32>, tensor<3xi1>) -> tensor<3xf32>
func.func @bools(%x: tensor<3xf32>) -> (tensor<3xi1>, tensor<3xi1>) {
  %c = opc.cast %x {dtype = i1} : (tensor<3xf32>) -> tensor<3xi1>
  func.return %c, %c : tensor<3xi1>, tensor<3xi1>
}

// Integer fan-out sums; the path through opc.neg (integer arithmetic) and the
// compare carry nothing.
// CHECK-LABEL: func.func @ints_grad(%x: tensor<3xf32>, %dt: tensor<3xi8>, %dn: tensor<3xi8>, %dg: tensor<3xi1>, %dr: tensor<3xf32>) -> tensor<3xf32> {
// CHECK-NEXT:    %c = opc.cast %x {dtype = i8}
// CHECK-NEXT:    %0 = opc.cast_grad %c, %dr : (tensor<3xi8>, tensor<3xf32>) -> tensor<3xi8>
// CHECK-NEXT:    %1 = opc.transpose %dt {perm = array<i64: 0>}
// CHECK-NEXT:    %2 = opc.add %0, %1 : (tensor<3xi8>, tensor<3xi8>) -> tensor<3xi8>
// CHECK-NEXT:    %dx = opc.cast_grad %x, %2 : (tensor<3xf32>, tensor<3xi8>) -> tensor<3xf32>
// CHECK-NEXT:    func.return %dx
func.func @ints(%x: tensor<3xf32>) -> (tensor<3xi8>, tensor<3xi8>, tensor<3xi1>, tensor<3xf32>) {
  %c = opc.cast %x {dtype = i8} : (tensor<3xf32>) -> tensor<3xi8>
  %t = opc.transpose %c {perm = array<i64: 0>} : (tensor<3xi8>) -> tensor<3xi8>
  %n = opc.neg %c : (tensor<3xi8>) -> tensor<3xi8>
  %z = opc.full {value = 0.0 : f64} : () -> tensor<3xi8>
  %g = opc.greater_than %c, %z : (tensor<3xi8>, tensor<3xi8>) -> tensor<3xi1>
  %r = opc.cast %c {dtype = f32} : (tensor<3xi8>) -> tensor<3xf32>
  func.return %t, %n, %g, %r : tensor<3xi8>, tensor<3xi8>, tensor<3xi1>, tensor<3xf32>
}

// CHECK-NOT: func.func @count_grad
func.func @count(%n: tensor<3xi32>) -> tensor<3xf32> {
  %f = opc.cast %n {dtype = f32} : (tensor<3xi32>) -> tensor<3xf32>
  func.return %f : tensor<3xf32>
}
