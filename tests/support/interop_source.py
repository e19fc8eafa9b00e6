"""The compiled functions the torch and JAX interop tests share: f is float64 with two results
(a second-order gradient with grad=2); g is float32 with an integer input and an integer result
(gather by index, a cast), whose cotangents the frameworks never send; RUN_TIME's mlp takes
any batch (a run-time `?` dim); DATA_SIZED's compress has results whose size depends on the data
(the rows a mask selects, opc.nonzero's count): a float one with a gradient and an int64 one."""

SOURCE = """
func.func @f(%x: tensor<3x4xf64>, %w: tensor<4x2xf64>) -> (tensor<3x2xf64>, tensor<3xf64>) {
  %m = opc.matmul %x, %w : (tensor<3x4xf64>, tensor<4x2xf64>) -> tensor<3x2xf64>
  %t = opc.tanh %m : (tensor<3x2xf64>) -> tensor<3x2xf64>
  %e = opc.exp %x : (tensor<3x4xf64>) -> tensor<3x4xf64>
  %s = opc.reduce_sum %e {axes = array<i64: 1>, keepdim = false} : (tensor<3x4xf64>) -> tensor<3xf64>
  func.return %t, %s : tensor<3x2xf64>, tensor<3xf64>
}
func.func @g(%x: tensor<4x3xf32>, %i: tensor<5xi64>) -> (tensor<5x3xf32>, tensor<4x3xi32>) {
  %y = opc.gather %x, %i {axis = 0} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<5x3xf32>
  %s = opc.sigmoid %y : (tensor<5x3xf32>) -> tensor<5x3xf32>
  %c = opc.cast %x {dtype = i32} : (tensor<4x3xf32>) -> tensor<4x3xi32>
  func.return %s, %c : tensor<5x3xf32>, tensor<4x3xi32>
}
"""

RUN_TIME = """func.func @mlp(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>) -> tensor<?x4xf32> {
  %h = opc.matmul %x, %w : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %r = opc.tanh %h : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %r : tensor<?x4xf32>
}"""

DATA_SIZED = """func.func @compress(%x: tensor<?x3xf64>, %c: tensor<?xi1>) -> (tensor<?x3xf64>, tensor<?xi64>) {
  %nz = opc.nonzero %c : (tensor<?xi1>) -> tensor<1x?xi64>
  %i = opc.reshape %nz : (tensor<1x?xi64>) -> tensor<?xi64>
  %r = opc.gather %x, %i {axis = 0} : (tensor<?x3xf64>, tensor<?xi64>) -> tensor<?x3xf64>
  %t = opc.tanh %r : (tensor<?x3xf64>) -> tensor<?x3xf64>
  func.return %t, %i : tensor<?x3xf64>, tensor<?xi64>
}"""

# masks (one per row of x): some rows, none selected, every row, no rows at all, one row
MASKS = [[1, 0, 1, 1, 0], [0, 0, 0], [1, 1, 1, 1, 1, 1, 1], [], [1]]


def numpy_compress(x, c):  # noqa: ANN001, ANN201
    """compress's results and the gradient of sum(t ** 2) with respect to x, in NumPy."""
    import numpy as np

    idx = np.flatnonzero(c)
    t = np.tanh(x[idx])
    dx = np.zeros_like(x)
    np.add.at(dx, idx, 2 * t * (1 - t ** 2))
    return t, idx.astype(np.int64), dx
