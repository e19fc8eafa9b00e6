"""Bad control flow in IR: located one-line verifier errors, never a traceback."""

import pytest

import opc
from opc.errors import OpcError

HEAD = "func.func @f(%flag: tensor<2xi1>, %x: tensor<4xf32>) -> tensor<4xf32> {\n"

CASES = {
    # a condition read from a tensor of two elements with no index
    "condition of two elements": (HEAD + """  %p = tensor.extract %flag[] : tensor<2xi1>
  %r = scf.if %p -> (tensor<4xf32>) {
    scf.yield %x : tensor<4xf32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}""", "one index per dim"),
    # a branch yields a value of another type than the if's result
    "yield of the wrong type": (HEAD + """  %c = arith.constant 1 : index
  %p = tensor.extract %flag[%c] : tensor<2xi1>
  %r = scf.if %p -> (tensor<4xf32>) {
    %e = opc.reduce_sum %x {axes = array<i64: 0>, keepdim = false} : (tensor<4xf32>) -> tensor<f32>
    scf.yield %e : tensor<f32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}""", "the then branch's scf.yield gives (tensor<f32>)"),
    # a loop carrying a scalar, not a tensor
    "scalar carried": (HEAD + """  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %z) -> (f32) {
    scf.yield %a : f32
  }
  return %x : tensor<4xf32>
}""", "carries tensors"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_control_flow_is_a_located_one_line_error(case):
    src, words = CASES[case]
    with pytest.raises(OpcError) as err:
        opc.compile(src)
    text = str(err.value)
    assert "\n" not in text and "<string>:" in text and words in text, text
