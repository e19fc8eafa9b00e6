// RUN: opc opt %s -p canonicalize | filecheck %s
// A constant condition keeps one branch; a loop of no trips is its initial value.

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %a = opc.exp %x
// CHECK-NEXT:    func.return %a
// CHECK-NOT:     scf.

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %p = arith.constant true
  %r = scf.if %p -> (tensor<4xf32>) {
    %a = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %a : tensor<4xf32>
  } else {
    %b = opc.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %b : tensor<4xf32>
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = scf.for %i = %c0 to %c0 step %c1 iter_args(%acc = %r) -> (tensor<4xf32>) {
    %d = opc.add %acc, %acc : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }
  return %s : tensor<4xf32>
}

// A condition and a trip count read from constant tensors fold too: the else branch, one trip inlined.
// CHECK-LABEL: func.func @from_tensors
// CHECK-NEXT:    %b = opc.neg %x
// CHECK-NEXT:    %d = opc.add %b, %b
// CHECK-NEXT:    func.return %d
// CHECK-NOT:     scf.

func.func @from_tensors(%x: tensor<4xf32>) -> tensor<4xf32> {
  %flag = arith.constant dense<false> : tensor<i1>
  %p = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %p -> (tensor<4xf32>) {
    %a = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %a : tensor<4xf32>
  } else {
    %b = opc.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    scf.yield %b : tensor<4xf32>
  }
  %n = arith.constant dense<1> : tensor<i64>
  %ni = tensor.extract %n[] : tensor<i64>
  %nn = arith.index_cast %ni : i64 to index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = scf.for %i = %c0 to %nn step %c1 iter_args(%acc = %r) -> (tensor<4xf32>) {
    %d = opc.add %acc, %acc : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }
  return %s : tensor<4xf32>
}
