// RUN: opc opt %s -p 'opc-decompose{ops=relu,relu_grad,gelu,gelu_grad}' | filecheck %s
// relu, relu_grad, gelu (both forms) and gelu_grad in primitives.

// CHECK-LABEL: func.func @relu
// CHECK-NEXT:    %0 = opc.full {value = 0.000000e+00 : f64} : () -> tensor<4xf32>
// CHECK-NEXT:    %r = opc.maximum %x, %0
func.func @relu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func @relu_grad
// CHECK-NEXT:    %0 = opc.full {value = 0.000000e+00 : f64} : () -> tensor<4xf32>
// CHECK-NEXT:    %1 = opc.greater_than %x, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK-NEXT:    %2 = opc.full {value = 0.000000e+00 : f64} : () -> tensor<4xf32>
// CHECK-NEXT:    %r = opc.select %1, %d, %2
func.func @relu_grad(%x: tensor<4xf32>, %d: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.relu_grad %x, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// CHECK-LABEL: func.func @gelu_tanh
// CHECK:         opc.full {value = 4.471500e-02 : f64}
// CHECK:         opc.full {value = 0.79788456080286541 : f64}
// CHECK:         opc.tanh
// CHECK:         opc.full {value = 5.000000e-01 : f64}
// CHECK:         %r = opc.mul
// CHECK-NEXT:    func.return %r
func.func @gelu_tanh(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.gelu %x {approximate = true} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// erf form: 0.5 x (1 + erf(x / sqrt 2))
// CHECK-LABEL: func.func @gelu_erf
// CHECK-NOT:     opc.tanh
// CHECK:         opc.full {value = 0.70710678118654746 : f64}
// CHECK:         opc.erf
// CHECK:         %r = opc.mul
func.func @gelu_erf(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.gelu %x {approximate = false} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// f16 computes in f32 and rounds once at the end, like the kernel.
// CHECK-LABEL: func.func @gelu_f16
// CHECK-NEXT:    %0 = opc.cast %x {dtype = f32} : (tensor<4xf16>) -> tensor<4xf32>
// CHECK:         opc.tanh %{{.*}} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK:         %r = opc.cast %{{.*}} {dtype = f16} : (tensor<4xf32>) -> tensor<4xf16>
func.func @gelu_f16(%x: tensor<4xf16>) -> tensor<4xf16> {
  %r = opc.gelu %x : (tensor<4xf16>) -> tensor<4xf16>
  func.return %r : tensor<4xf16>
}

// CHECK-LABEL: func.func @gelu_grad_erf
// CHECK:         opc.erf
// CHECK:         opc.exp
// CHECK:         %r = opc.mul %d, %{{.*}}
func.func @gelu_grad_erf(%x: tensor<4xf32>, %d: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.gelu_grad %x, %d {approximate = false} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func @gelu_grad_tanh
// CHECK:         opc.tanh
// CHECK:         opc.full {value = 1.341450e-01 : f64}
// CHECK:         %r = opc.mul %d, %{{.*}}
// CHECK-NOT:     opc.gelu
func.func @gelu_grad_tanh(%x: tensor<4xf32>, %d: tensor<4xf32>) -> tensor<4xf32> {
  %r = opc.gelu_grad %x, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}
