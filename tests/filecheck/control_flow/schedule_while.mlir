// RUN: opc opt %s -p opc-schedule | filecheck %s
// RUN: opc opt %s -p opc-lower-to-loops | filecheck %s --check-prefix=LOOPS
// The scheduler leaves control flow and scalar ops on the host (in no kernel) and schedules each
// body on its own; the lowering makes each body a function called from the host loop.

// CHECK-LABEL: func.func @f
// CHECK:         scf.while
// CHECK:           opc_sched.kernel attributes {kind = "reduction"
// CHECK:           opc_sched.kernel attributes {kind = "elementwise", reason = "%t feeds tensor.extract
// CHECK-NEXT:        opc.less_than
// CHECK:           %c = tensor.extract %t[] : tensor<i1>
// CHECK-NEXT:      scf.condition(%c) %a : tensor<4xf32>
// CHECK:         } do {
// CHECK:           opc_sched.kernel attributes {kind = "elementwise", reason = "%d is returned"}

// LOOPS:       func.func @f__while0_before(
// LOOPS:       func.func @f__while0_after(
// LOOPS-LABEL: func.func @f(
// LOOPS:         scf.while
// LOOPS:           func.call @f__while0_before
// LOOPS:           scf.condition
// LOOPS:           func.call @f__while0_after
// LOOPS:         opc.host

func.func @f(%x: tensor<4xf32>, %lim: tensor<f32>) -> tensor<4xf32> {
  %r = scf.while (%a = %x) : (tensor<4xf32>) -> (tensor<4xf32>) {
    %s = opc.reduce_sum %a {axes = array<i64: 0>, keepdim = false} : (tensor<4xf32>) -> tensor<f32>
    %t = opc.less_than %s, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %c = tensor.extract %t[] : tensor<i1>
    scf.condition(%c) %a : tensor<4xf32>
  } do {
  ^bb0(%b: tensor<4xf32>):
    %d = opc.add %b, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    scf.yield %d : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
