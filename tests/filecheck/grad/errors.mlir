// RUN: not opc opt %s -p 'opc-grad{func=f}' 2>&1 | filecheck %s --check-prefix=RULE
// RUN: not opc opt %s -p 'opc-grad{func=g}' 2>&1 | filecheck %s --check-prefix=FUNC
// RUN: not opc opt %s -p 'opc-grad{func=f wrt=q}' 2>&1 | filecheck %s --check-prefix=ARG
// RUN: not opc opt %s -p 'opc-grad{func=f wrt=s}' 2>&1 | filecheck %s --check-prefix=STOP

// RULE: error: no gradient rule for opc.relu_grad
// FUNC: error: opc-grad: no function @g in the module
// ARG: error: @f has no argument %q (arguments: %x, %s)
// STOP: error: @f: argument %s is marked {opc.stop_gradient} and has no gradient
func.func @f(%x: tensor<4xf32>, %s: tensor<4xf32> {opc.stop_gradient}) -> tensor<4xf32> {
  %r = opc.relu_grad %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}
