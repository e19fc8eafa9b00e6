"""Helpers for the ONNX tests: small graphs built with onnx.helper, many imported
functions compiled as ONE module (a C build per test would cost too much), and
onnxruntime as the oracle of the forward."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from requires import import_or_skip

onnx = import_or_skip("onnx", "the ONNX importer needs the onnx package (pip install '.[onnx]')")
ort = import_or_skip("onnxruntime", "onnxruntime is the oracle of the ONNX tests (pip install '.[test]')")
from onnx import helper, numpy_helper  # noqa: E402
from xdsl.dialects import func  # noqa: E402
from xdsl.dialects.builtin import ModuleOp, StringAttr  # noqa: E402

import opc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))  # the zoo package, train_mlp.py


def graph_model(nodes: Sequence, inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
                initializers: Mapping[str, np.ndarray] | None = None, opset: int = 17,
                name: str = "main_graph") -> onnx.ModelProto:
    """A model of `nodes`: graph inputs typed after the arrays, outputs typed by shape inference."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(helper.make_graph(list(nodes), name, ins, outs, inits), opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def single(op: str, inputs: Mapping[str, np.ndarray], n_outputs: int = 1, initializers=None, opset: int = 17,
           **attrs) -> onnx.ModelProto:
    """A one-node model: op over `inputs` (then the initializers) in order."""
    names = list(inputs) + list(initializers or {})
    outs = [f"y{i}" for i in range(n_outputs)]
    return graph_model([helper.make_node(op, names, outs, name=f"the_{op}", **attrs)], inputs, outs, initializers,
                       opset)


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def function_name(case_id: str) -> str:
    return "f_" + re.sub(r"\W", "_", case_id)


def import_all(models: Mapping[str, onnx.ModelProto],
               constants: Mapping[str, object] | None = None) -> tuple[ModuleOp, dict[str, dict[str, np.ndarray]]]:
    """Every model imported, its function renamed after its case id, all in one module; `constants`
    gives a case's `opc.import_onnx(constants=...)`."""
    functions, params = [], {}
    for case_id, model in models.items():
        module, weights = opc.import_onnx(model, constants=(constants or {}).get(case_id))
        (f,) = list(module.ops)
        assert isinstance(f, func.FuncOp)
        f.detach()
        f.sym_name = StringAttr(function_name(case_id))
        functions.append(f)
        params[case_id] = weights
    return ModuleOp(functions), params


def call(compiled, case_id: str, feeds: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray],
         suffix: str = "") -> list[np.ndarray]:
    out = getattr(compiled, function_name(case_id) + suffix)(*feeds.values(), *weights.values())
    return list(out) if isinstance(out, tuple) else [out]
