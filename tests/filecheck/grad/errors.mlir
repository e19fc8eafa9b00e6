// RUN: not opc opt %s -p 'opc-grad{func=f}' 2>&1 | filecheck %s --check-prefix=RULE
// RUN: not opc opt %s -p 'opc-grad{func=g}' 2>&1 | filecheck %s --check-prefix=FUNC
// RUN: not opc opt %s -p 'opc-grad{func=f wrt=q}' 2>&1 | filecheck %s --check-prefix=ARG
// RUN: not opc opt %s -p 'opc-grad{func=f wrt=s}' 2>&1 | filecheck %s --check-prefix=STOP
// RUN: not opc opt %s -p 'opc-grad{func=ints}' 2>&1 | filecheck %s --check-prefix=INTS
// RUN: not opc opt %s -p 'opc-grad{func=stopped}' 2>&1 | filecheck %s --check-prefix=STOPPED

// RULE: error: no gradient rule for arith.addf
// FUNC: error: opc-grad: no function @g in the module
// ARG: error: @f has no argument %q (arguments: %x, %s)
// STOP: error: @f: argument %s is marked {opc.stop_gradient} and has no gradient
// INTS: error: opc-grad: @ints has no float argument to differentiate with respect to (arguments: tensor<4xi32>)
// STOPPED: error: opc-grad: every float argument of @stopped is marked {opc.stop_gradient}
func.func @f(%x: tensor<4xf32>, %s: tensor<4xf32> {opc.stop_gradient}) -> tensor<4xf32> {
  %r = arith.addf %x, %s : tensor<4xf32>
  func.return %r : tensor<4xf32>
}
func.func @ints(%n: tensor<4xi32>) -> tensor<4xf32> {
  %r = opc.cast %n {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}
func.func @stopped(%x: tensor<4xf32> {opc.stop_gradient}) -> tensor<4xf32> {
  %r = opc.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}
