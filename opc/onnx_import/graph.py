"""Reading an ONNX graph into one `func.func` of opc ops.

    load + check (onnx.checker) -> ai.onnx opset 1..newest -> static input shapes
    -> onnx shape inference -> nodes in order:
         all inputs known at compile time?  evaluate (onnx.reference): a constant
         otherwise                          the op's converter (a module by topic)
    -> func.func @graph_name(inputs..., float initializers...) -> (outputs...)

Values are either SSA values of the function or NumPy arrays known at compile
time (integer initializers, Constant nodes, shapes of static tensors and all
that is computed from them). A constant becomes an `arith.constant` only when
a runtime op uses it. Float initializers are function arguments, so that
gradients w.r.t. the weights exist; one that an op needs at compile time (a
shape, say) and nothing else uses is dropped from the arguments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float4E2M1FNType,
    Float6E2M3FNType,
    Float6E3M2FNType,
    Float8E4M3FNType,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float8E5M2Type,
    Float8E8M0FNUType,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    ModuleOp,
    Signedness,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.transforms.common_subexpression_elimination import cse
from xdsl.transforms.dead_code_elimination import region_dce
from xdsl.utils.exceptions import DiagnosticException, VerifyException

from opc.dialects import opc as o
from opc.dialects.builder import OpBuilder
from opc.dialects.kinds import element_of, shape_of
from opc.dialects.opc import SYMBOLIC_SHAPES
from opc.dialects.sizes import symbolic_shapes
from opc.errors import InputError, UnsupportedError, first_line
from opc.onnx_import.lists import Item, Labels, Maps, Opt, Seq, is_list, layout_of, leaves
from opc.onnx_import.proto import (
    TENSOR_TYPES,
    default_opset,
    dims_of,
    domain_opsets,
    dtype_name,
    load,
    onnx_module,
    read,
)
from opc.onnx_import.run_time_sizes import SYMBOLIC_FOLDERS, SizeNeeded, SizeTracker, fold_symbolic, is_symbolic
from opc.symbolic import Size, Sym, SymbolicComparison

MAX_FOLDED_INPUT = 64  # elements of a given input that import may compile in as a constant
BASE_OPSET = 13  # a converter registered without since= serves this opset and later ones


# ONNX TensorProto element type numbers -> (name, opc element type, NumPy dtype): proto.TENSOR_TYPES with
# each type's opc element type
INT32 = 6  # onnx.TensorProto.INT32
OPC_ELEMENTS: dict[int, Attribute] = {
    1: Float32Type(),
    2: IntegerType(8, Signedness.UNSIGNED),
    3: IntegerType(8),
    4: IntegerType(16, Signedness.UNSIGNED),
    5: IntegerType(16),
    12: IntegerType(32, Signedness.UNSIGNED),
    13: IntegerType(64, Signedness.UNSIGNED),
    6: IntegerType(32),
    7: IntegerType(64),
    9: IntegerType(1),
    10: Float16Type(),
    11: Float64Type(),
    16: BFloat16Type(),
    17: Float8E4M3FNType(),
    18: Float8E4M3FNUZType(),
    19: Float8E5M2Type(),
    20: Float8E5M2FNUZType(),
    24: Float8E8M0FNUType(),
    23: Float4E2M1FNType(),
    27: Float6E2M3FNType(),
    28: Float6E3M2FNType(),
    22: IntegerType(4),
    21: IntegerType(4, Signedness.UNSIGNED),
    26: IntegerType(2),
    25: IntegerType(2, Signedness.UNSIGNED),
}
ELEMENT_TYPES: dict[int, tuple[str, Attribute, np.dtype]] = {k: (name, OPC_ELEMENTS[k], dt)
                                                          for k, (name, dt) in TENSOR_TYPES.items()}
FLOAT_ELEMENT_TYPES = (1, 10, 11, 16)
BY_NUMPY = {np_dtype: element for _, element, np_dtype in ELEMENT_TYPES.values()}
# Ops that draw random numbers: not imported, since ONNX defines no generator (its node tests expect the
# draws NumPy's global generator happened to make, unseeded, when the test data was written)
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
# Never evaluated at compile time even when their inputs are known.
NOT_FOLDABLE = RANDOM_OPS | {"If", "Loop", "Scan"}
# Sequence and optional ops: their converters (sequence.py) handle values known at compile time.
LIST_OPS = {"SequenceConstruct", "SequenceEmpty", "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength",
            "ConcatFromSequence", "SplitToSequence", "SequenceMap", "Optional", "OptionalHasElement",
            "OptionalGetElement"}


def supported_dtypes() -> str:
    return ", ".join(name.lower() for name, _, _ in ELEMENT_TYPES.values())


def element_type_for(array: np.ndarray, what: str) -> Attribute:
    element = BY_NUMPY.get(array.dtype)
    if element is None:
        raise UnsupportedError(f"{what} has dtype {array.dtype}, which opc does not support ({supported_dtypes()})")
    return element


def numpy_dtype_of(element: Attribute) -> np.dtype:
    for _, e, np_dtype in ELEMENT_TYPES.values():
        if e == element:
            return np_dtype
    raise UnsupportedError(f"no NumPy dtype for {element}")


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------


def identifier(name: str, taken: set[str], fallback: str = "v") -> str:
    """A Python/MLIR identifier for an ONNX name, unique in `taken` (which it joins)."""
    import keyword

    base = re.sub(r"\W", "_", name, flags=re.ASCII).strip("_") or fallback
    if base[0].isdigit():
        base = f"{fallback}{base}"
    if keyword.iskeyword(base):
        base += "_"
    base = no_number_suffix(base)
    out, n = base, 0
    while out in taken:
        n += 1
        out = f"{base}{n}"
    taken.add(out)
    return out


def no_number_suffix(name: str) -> str:
    """xDSL reads a trailing `_<digits>` as a printer's disambiguation and drops it
    (`input_1` would print as `%input`): join such digits to the name instead."""
    while re.search(r"_\d+$", name):
        name = re.sub(r"_(\d+)$", r"\1", name)
    return name


# ---------------------------------------------------------------------------
# Loading and checking
# ---------------------------------------------------------------------------


def fix_input_shapes(model, shapes: Mapping[str, Sequence[int]], initializers: set[str]) -> None:
    """Give graph inputs the sizes asked for (in place), before shape inference."""
    inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    for name, dims in shapes.items():
        if name not in inputs:
            raise InputError(f"shapes: the graph has no input '{name}' (inputs: {', '.join(inputs) or 'none'})")
        if not inputs[name].type.HasField("tensor_type"):
            del model.graph.value_info[:]
            fix_list_shapes(inputs[name].type, dims, f"input '{name}'")
            continue
        t = inputs[name].type.tensor_type
        old = dims_of(inputs[name]) if t.HasField("shape") else None
        if old is not None and len(old) != len(dims):
            raise InputError(f"shapes: input '{name}' has rank {len(old)}, got {len(dims)} sizes {list(dims)}")
        if old is not None and any(isinstance(d, int) and d != want for d, want in zip(old, dims)):
            raise InputError(f"shapes: input '{name}' has shape {old}, which does not admit {list(dims)}")
        del model.graph.value_info[:]  # inferred for the old sizes: shape inference redoes it
        t.ClearField("shape")
        t.shape.SetInParent()
        for d in dims:
            t.shape.dim.add().dim_value = int(d)


def fix_list_shapes(type_proto, spec: Any, what: str) -> None:
    """A sequence or optional input's declared element shapes made those given (in place), before shape
    inference: a tensor's spec is its shape, a sequence's a list of them (its element type then has the
    dims all share), an empty optional's None."""
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        if spec is not None:
            fix_list_shapes(type_proto.optional_type.elem_type, spec, what)
        return
    if kind == "sequence_type":
        if not isinstance(spec, list) or any(isinstance(d, (int, np.integer)) for d in spec):
            raise InputError(f"shapes: {what} is a sequence: give a list of its tensors' shapes, got {spec!r}")
        elem = type_proto.sequence_type.elem_type
        if spec and elem.HasField("tensor_type"):
            for k, item in enumerate(spec):
                check_tensor_spec(elem.tensor_type, item, f"{what} item {k}")
            ranks = {len(item) for item in spec}
            elem.tensor_type.ClearField("shape")
            if len(ranks) == 1:  # one rank: the dims all items share are static, the others unknown
                elem.tensor_type.shape.SetInParent()
                for dims in zip(*spec):
                    d = elem.tensor_type.shape.dim.add()
                    if len(set(dims)) == 1:
                        d.dim_value = int(dims[0])
        return
    if kind == "tensor_type":
        check_tensor_spec(type_proto.tensor_type, spec, what)
        type_proto.tensor_type.ClearField("shape")
        type_proto.tensor_type.shape.SetInParent()
        for d in spec:
            type_proto.tensor_type.shape.dim.add().dim_value = int(d)
        return
    raise UnsupportedError(f"shapes: {what} is a {kind}: opc imports tensors, sequences and optionals")


def check_tensor_spec(tensor_type, spec: Any, what: str) -> None:
    if not isinstance(spec, (list, tuple)) or not all(isinstance(d, (int, np.integer)) for d in spec):
        raise InputError(f"shapes: {what} is a tensor: give its shape, got {spec!r}")
    if not tensor_type.HasField("shape"):
        return
    old = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    if len(old) != len(spec) or any(d is not None and d != want for d, want in zip(old, spec)):
        raise InputError(f"shapes: {what} has shape {[d if d is not None else '?' for d in old]}, "
                       f"which does not admit {list(spec)}")


def list_arg_types(type_proto, spec: Any, what: str, where: str) -> tuple[Any, list[TensorType]]:
    """A sequence or optional input of the given shapes (fix_list_shapes' spec) as function arguments:
    a template (Seq/Opt with argument numbers as leaves) and the arguments' types."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        elem = type_proto.tensor_type.elem_type
        if elem not in ELEMENT_TYPES:
            raise UnsupportedError(f"{where}: {what} has dtype {dtype_name(elem)}, which opc does not support "
                           f"({supported_dtypes()})")
        return 0, [TensorType(ELEMENT_TYPES[elem][1], [int(d) for d in spec])]
    if kind == "optional_type":
        if spec is None:
            return Opt(None), []
        inner, types = list_arg_types(type_proto.optional_type.elem_type, spec, what, where)
        return Opt(inner), types
    if kind == "sequence_type":
        items, types = [], []
        for k, item_spec in enumerate(spec):
            inner, more = list_arg_types(type_proto.sequence_type.elem_type, item_spec, f"{what} item {k}", where)
            items.append(numbered(inner, len(types)))
            types += more
        return Seq(tuple(items)), types
    raise UnsupportedError(f"{where}: {what} is a {kind}: opc imports tensors, sequences and optionals")


def numbered(template: Any, offset: int) -> Any:
    """A template's argument numbers moved by offset."""
    if isinstance(template, Seq):
        return Seq(tuple(numbered(x, offset) for x in template.items))
    if isinstance(template, Opt):
        return Opt(None if template.item is None else numbered(template.item, offset))
    return template + offset


def filled(template: Any, args: Sequence[SSAValue]) -> Item:
    if isinstance(template, Seq):
        return Seq(tuple(filled(x, args) for x in template.items))
    if isinstance(template, Opt):
        return Opt(None if template.item is None else filled(template.item, args))
    return args[template]


def input_type(value_info, where: str, given: bool = False, dynamic: bool = False) -> TensorType:
    """An input's type; with `dynamic`, a dim the model leaves open (a dim_param, no size) is `?`."""
    name = value_info.name
    if not value_info.type.HasField("tensor_type"):
        raise UnsupportedError(f"{where}: input '{name}' is not a tensor; opc imports tensor inputs only")
    elem = value_info.type.tensor_type.elem_type
    if elem not in ELEMENT_TYPES:
        raise UnsupportedError(f"{where}: input '{name}' has dtype {dtype_name(elem)}, which opc does not support "
                       f"({supported_dtypes()})")
    dims = dims_of(value_info)
    if dynamic and dims != [None]:
        dims = [d if isinstance(d, int) and d >= 0 else DYNAMIC_INDEX for d in dims]
    if dims == [None] or any(not isinstance(d, int) or d < (0 if given else 1) and d != DYNAMIC_INDEX for d in dims):
        shown = "unknown rank" if dims == [None] else "[" + ", ".join(str(d) if d else "?" for d in dims) + "]"
        example = "x".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in dims if dims != [None])
        raise UnsupportedError(f"{where}: input '{name}' has a dynamic shape ({shown}); opc needs static sizes: "
                       f"fix them with `opc import --shape {name}={example or '...'}` or "
                       f"opc.import_onnx(..., shapes={{'{name}': (...)}})")
    return TensorType(ELEMENT_TYPES[elem][1], dims)


def infer_types(model, where: str) -> dict[str, tuple[int, list[int | str | None]]]:
    """Every value's (element type, dims) as ONNX shape inference sees it."""
    onnx = onnx_module()
    model = resize_sizes(constants_as_initializers(model))
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as err:
        # the failure is inside the body onnx expands for a function op (MeanVarianceNormalization's at
        # opset 13 has a Constant onnx's own checker refuses), which opc converts as one op: the types
        # of what inference can still type, the function op's outputs checked by its converter alone.
        # Or it is a Resize output declared one off onnx's floor(n * scale) (see resize_sizes): the
        # declared size stands, as in onnxruntime (sampling.py's declared_sizes checks each axis)
        if not in_function_body(err, default_opset(model, where)) and not resize_rounding(err):
            raise InputError(f"{where}: ONNX shape inference failed: {first_line(err)}") from None
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False, data_prop=True)
    g = inferred.graph
    out = {}
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        if vi.type.HasField("tensor_type"):
            out[vi.name] = (vi.type.tensor_type.elem_type, dims_of(vi))
    return out


ROUNDED_RESIZE = re.compile(r"\(op_type:Resize[^)]*\): \[ShapeInferenceError\] Inferred shape and existing shape "
                            r"differ in dimension \d+: \((\d+)\) vs \((\d+)\)")


def resize_rounding(err: Exception) -> bool:
    """Whether every shape inference error is a Resize output declared one off the size onnx infers."""
    lines = str(err).strip().removeprefix("[ShapeInferenceError] Inference error(s): ").splitlines()
    found = [ROUNDED_RESIZE.fullmatch(line) for line in lines]
    return bool(lines) and all(f is not None and abs(int(f.group(1)) - int(f.group(2))) == 1 for f in found)


def resize_sizes(model):
    """A Resize by constant scales has floor(n * scale) elements along an axis: onnx's shape inference
    and reference compute the product in float64, onnxruntime in float32, where float32(11 / 14) * 14 is
    11, not 10, and 11 is what TF meant when tf2onnx wrote its sizes as such scales. A copy of the model
    whose undeclared Resize outputs have onnxruntime's sizes, declared one at a time in node order (each
    changes the shapes after it), or the model itself where none differs."""
    onnx = onnx_module()
    graph = model.graph
    if default_opset(model, "the model") < 11:
        return model
    scales = {t.name: t for t in graph.initializer}
    scales.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant" and n.output
                   for a in n.attribute if a.name == "value"})
    declared = {vi.name for vi in list(graph.value_info) + list(graph.output)
                if all(isinstance(d, int) and d > 0 for d in dims_of(vi))}
    resizes = [n for n in graph.node if n.op_type == "Resize" and n.domain in ("", "ai.onnx") and len(n.input) > 2
               and n.input[2] in scales and (len(n.input) < 4 or not n.input[3]) and n.output[0] not in declared
               and not any(a.name == "coordinate_transformation_mode" and a.s == b"tf_crop_and_resize"
                           for a in n.attribute)]
    copy = model
    for _ in range(len(resizes)):
        inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True).graph
        types = {vi.name: vi for vi in list(inferred.value_info) + list(inferred.output) + list(inferred.input)}
        for node in resizes:
            dims = dims_of(types[node.input[0]]) if node.input[0] in types else [None]
            factors = onnx.numpy_helper.to_array(scales[node.input[2]]).reshape(-1).astype(np.float32)
            axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), list(range(len(dims))))
            scaled = [(a % len(dims), f) for a, f in zip(axes, factors) if f != 1]  # others may be open
            if dims == [None] or len(axes) != len(factors) or not all(isinstance(dims[a], int) and dims[a] > 0
                                                                       for a, _ in scaled):
                continue
            want = list(dims)
            for a, f in scaled:
                want[a] = int(np.float32(dims[a]) * f)
            have = dims_of(types[node.output[0]]) if node.output[0] in types else [None]
            if len(have) == len(want) and all(have[a] == want[a] for a, _ in scaled):
                continue
            if copy is model:
                copy = onnx.ModelProto()
                copy.CopyFrom(model)
            elem = types[node.input[0]].type.tensor_type.elem_type
            outputs = {o.name: o for o in copy.graph.output}
            info = onnx.helper.make_tensor_value_info(node.output[0], elem, want)
            if node.output[0] in outputs:
                outputs[node.output[0]].CopyFrom(info)
            else:
                copy.graph.value_info.append(info)
            break
        else:
            break
    return copy


def in_function_body(err: Exception, opset: int) -> bool:
    """Whether a shape inference error is one error, raised inside the body of an ai.onnx function op
    (the error of an op in that body nested in the function op's)."""
    text = str(err).strip()
    found = re.match(r"\[ShapeInferenceError\] Inference error\(s\): \(op_type:(\w+)[^)]*\): "
                     r"\[ShapeInferenceError\] (Inference error\(s\): )?\(op_type:", text)
    if found is None or "\n" in text:
        return False
    try:
        schema = onnx_module().defs.get_schema(found.group(1), opset)
    except Exception:  # noqa: BLE001 - onnx raises SchemaError for an op of another domain
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def constants_as_initializers(model):
    """Before opset 9 a Constant holds floats only, but exporters write integer ones there too (paddle2onnx
    at opset 7), which onnxruntime runs: for shape inference, a model whose Constants are initializers
    (the same values; graph inputs too, as IR version 3 wants them). Other models as they are."""
    if default_opset(model, "the model") >= 9 or not any(n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                                                          for n in model.graph.node):
        return model
    onnx = onnx_module()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = []
    for node in copy.graph.node:
        values = [a.t for a in node.attribute if a.name == "value"]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and values and node.output:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(values[0])
            tensor.name = node.output[0]
            copy.graph.initializer.append(tensor)
            copy.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
        else:
            kept.append(node)
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    return copy


def tied_weights(weights: Mapping[str, np.ndarray]) -> dict[str, tuple[str, str]]:
    """Weights that are an exact transpose (2-D) or reshape of an earlier one, as exporters write tied
    embeddings (GPT-2's lm_head = wte.T): name -> (original, 'transpose' | 'reshape'). Arrays whose
    elements are all equal (zeros, ones) are never tied: they match each other by accident."""
    seen: dict[tuple, str] = {}  # (dtype, bytes hash) -> the first weight with those row-major bytes
    tied: dict[str, tuple[str, str]] = {}
    for name, a in weights.items():
        flat = a.reshape(-1)
        if flat.size < 2 or bool(np.all(flat == flat[0])):
            continue
        key = (a.dtype.str, hash(np.ascontiguousarray(a).tobytes()))
        first = seen.get(key)
        if first is not None and weights[first].shape != a.shape and np.array_equal(weights[first].reshape(-1), flat):
            tied[name] = (first, "reshape")
            continue
        if a.ndim == 2:
            first = seen.get((a.dtype.str, hash(np.ascontiguousarray(a.T).tobytes())))
            if first is not None and weights[first].shape == a.T.shape and np.array_equal(weights[first], a.T):
                tied[name] = (first, "transpose")
                continue
        seen.setdefault(key, name)
    return tied


# ---------------------------------------------------------------------------
# Nodes and the emitter converters build with
# ---------------------------------------------------------------------------


class NodeEmitter(OpBuilder):
    """Builds opc ops (OpBuilder's helpers) and verifies each at once, naming the node on failure."""

    def __init__(self) -> None:
        super().__init__()
        self.label = ""
        self.tracker: SizeTracker | None = None  # run-time sizes (import_graph(dynamic=True))

    def emit(self, op: Operation) -> Operation:
        token = SYMBOLIC_SHAPES.set(None)  # verifiers check the declared (`?`) types
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, DiagnosticException) as err:
            raise UnsupportedError(f"{self.label}: cannot express it in opc: {op.name}: {first_line(err)}") from None
        finally:
            SYMBOLIC_SHAPES.reset(token)
        super().emit(op)
        if self.tracker is not None:
            try:
                self.tracker.visit(op)
            except UnsupportedError as err:  # the op's run-time sizes do not follow (opc/dialects/sizes.py)
                raise SizeNeeded(f"{self.label}: {err}") from None
        return op

    def size_operands(self, shape: Sequence[Size]) -> list[SSAValue]:
        """The `index` operands of an op whose result has `shape`: one per run-time size."""
        if self.tracker is None:
            return []
        return [self.tracker.index(self.value, d) for d in shape if isinstance(d, Sym)]

    def size_tensor(self, d: Size) -> SSAValue:
        """A 0-d int64 tensor of the size d (a number, or a run-time size)."""
        if isinstance(d, Sym):
            assert self.tracker is not None
            return self.tracker.size_tensor(self.value, d)
        return self.constant(np.array(d, np.int64))

    def reshape(self, x: SSAValue, shape: Sequence[Size]) -> SSAValue:
        if isinstance(x.owner, o.ReshapeOp) and not x.owner.sizes:  # a reshape of a reshape: one reshape
            x = x.owner.x
        if shape_of(x) == tuple(shape):
            return x
        return self.value(o.ReshapeOp(x, o.tensor(shape, element_of(x)), self.size_operands(shape)))

    def transpose(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        if list(perm) == list(range(len(perm))):
            return x
        return self.value(o.TransposeOp(x, perm))

    def broadcast_to(self, x: SSAValue, shape: Sequence[Size]) -> SSAValue:
        if shape_of(x) == tuple(shape):
            return x
        return self.value(o.BroadcastToOp(x, o.tensor(shape, element_of(x)), self.size_operands(shape)))

    def constant(self, array: np.ndarray) -> SSAValue:
        array = np.asarray(array)
        if is_symbolic(array):  # sizes, some known only at run time: one int64 element each
            parts = [self.reshape(self.size_tensor(d), [1]) for d in array.reshape(-1)]
            flat = parts[0] if len(parts) == 1 else self.value(o.ConcatOp(parts, 0))
            return self.reshape(flat, array.shape)
        t = TensorType(element_type_for(array, "a constant"), array.shape)
        if (array.dtype.kind in "iuf" and array.dtype.itemsize > 1 or array.dtype in (np.int8, np.uint8)
                or isinstance(t.element_type, (BFloat16Type, *o.NARROW_FLOAT_TYPES))):
            # NumPy's bytes are xDSL's packing for these (little-endian, as the C reads them; bf16 and
            # float8/6/4 as ml_dtypes' bits, NaN payloads kept): no Python list of a million floats
            # for an embedding table (int4/int2 are kind 'V' too, but xDSL sign-extends them; bool is 'b')
            data_bytes = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
            return self.value(arith.ConstantOp(DenseIntOrFPElementsAttr(t, BytesAttr(data_bytes))))
        if isinstance(t.element_type, IntegerType):
            # int4/int2 (ml_dtypes' kind 'V') read through int64; NumPy's own as they are (uint64's top half)
            ints = array if array.dtype.kind in "iub" else array.astype(np.int64)
            data = [int(v) for v in ints.reshape(-1)]
        else:
            data = [float(v) for v in array.astype(np.float64).reshape(-1)]
        return self.value(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(t, data)))


@dataclass
class Node:
    """One ONNX node as converters see it: inputs, attributes, compile-time values, the emitter."""

    proto: Any
    opset: int
    importer: GraphImporter
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from onnx import helper

        for a in self.proto.attribute:
            v = helper.get_attribute_value(a)
            self.attrs[a.name] = v.decode() if isinstance(v, bytes) else v

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def label(self) -> str:
        name = self.proto.name or f"#{self.importer.node_index} -> {', '.join(self.proto.output)}"
        return f"node '{name}' ({self.op_type})"

    @property
    def e(self) -> NodeEmitter:
        return self.importer.emitter

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.label}: {message}")

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def n_inputs(self) -> int:
        return len(self.proto.input)

    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def item(self, i: int) -> Item:
        """Input i as it is: a sequence or optional (lists.py), an array known at compile time, an SSA value."""
        if not self.has(i):
            raise self.fail(f"input {i} is missing")
        return self.importer.item(self.proto.input[i])

    def input(self, i: int) -> SSAValue:
        """Input i as an SSA value (a constant becomes an arith.constant)."""
        if not self.has(i):
            raise self.fail(f"input {i} is missing")
        return self.importer.value(self.proto.input[i])

    def inputs(self) -> list[SSAValue]:
        return [self.input(i) for i in range(self.n_inputs) if self.has(i)]

    def known(self, i: int) -> bool:
        return self.has(i) and self.importer.compile_time(self.proto.input[i]) is not None

    def const(self, i: int, what: str, default: np.ndarray | None = None) -> np.ndarray:
        """Input i's value at compile time (shapes, axes, sizes): an error if it is only known at run time."""
        if not self.has(i):
            if default is None:
                raise self.fail(f"input {i} ({what}) is missing")
            return default
        value = self.importer.compile_time(self.proto.input[i], needed=True)
        if value is None:
            raise NeededAtCompileTime(f"{self.label}: input {i} ('{self.proto.input[i]}', {what}) "
                                      "must be known at compile time; opc compiles static shapes only")
        return value

    def shape(self, i: int) -> tuple[Size, ...]:
        """Input i's shape; with run-time sizes, a `?` dim is its size symbol (opc/symbolic.py)."""
        return self.importer.shape_of(self.proto.input[i])

    def element(self, i: int) -> Attribute:
        return self.importer.type_of(self.proto.input[i]).element_type

    def out_dims(self, i: int) -> list[int | str | None] | None:
        """Output i's dims as the model declares them or shape inference gives them; None where unknown."""
        found = self.importer.inferred.get(self.proto.output[i]) if i < len(self.proto.output) else None
        return None if found is None or found[1] == [None] else found[1]

    def axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < max(rank, 1):
            raise self.fail(f"axis {axis} is out of range for rank {rank}")
        return axis % rank if rank else 0


class NeededAtCompileTime(UnsupportedError):
    """A value that must be known at compile time (a shape, axes, a trip count) is known at run time only."""


Converter = Callable[[Node], Sequence["SSAValue | np.ndarray"]]
# op type -> {first opset of these semantics: converter}
CONVERTERS: dict[str, dict[int, Converter]] = {}


def what_list(v: Seq | Opt | Maps | Labels) -> str:
    """What a non-tensor value is, where a tensor is needed."""
    if isinstance(v, Maps):
        return ("ZipMap's sequence of maps, where a tensor is needed: opc returns it as a graph output only "
                "(its input is the probabilities tensor)")
    if isinstance(v, Labels):
        return ("string labels, where a tensor is needed: opc has no string tensors, it returns them as a graph "
                "output only")
    kind = "a sequence" if isinstance(v, Seq) else "an optional"
    return f"{kind}, where a tensor is needed (OptionalGetElement, SequenceAt or ConcatFromSequence give one)"


def converter(*op_types: str, since: int = BASE_OPSET) -> Callable[[Converter], Converter]:
    """Register a converter for op types, valid from opset `since` until a later registration."""

    def register(fn: Converter) -> Converter:
        for t in op_types:
            CONVERTERS.setdefault(t, {})[since] = fn
        return fn

    return register


def same_since(table: Mapping[int, Sequence[str]]) -> None:
    """{first opset: op types}: where an op meant in older opsets what it means at BASE_OPSET, the
    converter that serves BASE_OPSET serves from the opset where that meaning began."""
    for first, op_types in table.items():
        for op_type in op_types:
            fn = find_converter(op_type, BASE_OPSET)
            assert fn is not None, op_type
            converter(op_type, since=first)(fn)


def as_newer(node: Node, opset: int, inputs: Sequence[str | np.ndarray | SSAValue],
             attrs: Mapping[str, Any] | None = None, drop: Sequence[str] = ()) -> Sequence[SSAValue | np.ndarray]:
    """node converted as the opset-`opset` form of its op: for an older form whose attributes became inputs,
    or whose inputs a converter reshapes first. `inputs` are the node's input names ("" for none), arrays
    known at compile time or SSA values; `attrs` are set, `drop` left out."""
    from onnx import helper

    proto = type(node.proto)()
    proto.CopyFrom(node.proto)
    del proto.input[:]
    for k, given in enumerate(inputs):
        name = given if isinstance(given, str) else f"{node.proto.output[0]}::opc_input_{k}"
        if isinstance(given, np.ndarray):
            node.importer.constants[name] = given
        elif isinstance(given, SSAValue):
            node.importer.values[name] = given
        proto.input.append(name)
    kept = [a for a in proto.attribute if a.name not in drop and a.name not in (attrs or {})]
    del proto.attribute[:]
    proto.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in (attrs or {}).items()])
    convert = find_converter(qualified_type(proto), opset)
    assert convert is not None, (node.op_type, opset)
    return convert(Node(proto, opset, node.importer))


# op type -> NumPy evaluation of a node whose inputs are all known (used instead of onnx's reference
# evaluator where that one is wrong or slow): (node, [input arrays]) -> [output arrays]
Folder = Callable[[Node, list[np.ndarray]], list[np.ndarray]]
FOLDERS: dict[str, Folder] = {}


def folder(*op_types: str) -> Callable[[Folder], Folder]:
    def register(fn: Folder) -> Folder:
        for t in op_types:
            FOLDERS[t] = fn
        return fn

    return register


def qualified_type(proto: Any) -> str:
    """A node's op type as converters are registered: 'Relu' for ai.onnx, 'ai.onnx.preview.FlexAttention'
    for another domain."""
    return proto.op_type if proto.domain in ("", "ai.onnx") else f"{proto.domain}.{proto.op_type}"


def find_converter(op_type: str, opset: int) -> Converter | None:
    versions = CONVERTERS.get(op_type, {})
    usable = [v for v in versions if v <= opset]
    return versions[max(usable)] if usable else None


# ---------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------


class GraphImporter:
    def __init__(self, model, where: str, shapes: Mapping[str, Sequence[int]] | None,
                 input_values: Mapping[str, np.ndarray] | None = None, fold_given: bool = False,
                 constants: Any = None, dynamic: bool = False) -> None:
        self.where = where
        self.dynamic = dynamic  # the inputs' open dims stay `?` (one compile for every size)
        self.model = model
        self.graph = model.graph
        self.opset = default_opset(model, where)
        self.opsets = domain_opsets(model)  # other domains' nodes convert at their own domain's opset
        init_names = {t.name for t in self.graph.initializer}
        if shapes:
            fix_input_shapes(model, shapes, init_names)
        self.sized = set(shapes or ())  # inputs whose sizes the caller gave: a 0 there is a real 0
        self.shapes = dict(shapes or {})
        self.values: dict[str, SSAValue] = {}
        self.lists: dict[str, Seq | Opt | Maps | Labels] = {}  # sequences, optionals and the like (lists.py)
        # id -> (a sequence, its tensors stacked) before a Loop whose body reads it by the iteration number
        self.stacked: dict[int, tuple[Seq, SSAValue]] = {}
        self.graph_inputs = {vi.name for vi in self.graph.input}  # a Slice bound among them is bound by value
        self.constants: dict[str, np.ndarray] = {}
        self.materialized: dict[str, SSAValue] = {}
        self.param_values: dict[str, np.ndarray] = {}  # ONNX name -> weight, for compile-time use
        # graph inputs whose values are given (a call's arguments): a converter that needs one at compile
        # time (a shape, axes, a size) gets it, and the input is bound: no argument, its value part of the key
        self.input_values: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in (input_values or {}).items()
                                                    if isinstance(v, np.ndarray)}  # a sequence's: never bound
        self.bound_inputs: list[str] = []
        self.weight_sources: list[str] = []  # each weight argument's initializer, in argument order
        # fold_given: the given values of small inputs are constants from the start, so that what is
        # computed from them (a Range bound from a window length, a shape from sizes) is known too
        small = [n for n, v in self.input_values.items() if v.size <= MAX_FOLDED_INPUT]
        self.folded_inputs = small if fold_given else []
        self.needed_at_compile_time: set[str] = set()
        self.emitter = NodeEmitter()
        self.node_index = 0
        self.inferred: dict[str, tuple[int, list[int | str | None]]] = {}
        self.as_constant = constant_selector(constants, init_names, where)
        self.output_layouts: list[Any] = []  # each graph output's layout (lists.py): how to regroup the results

    # -- values -------------------------------------------------------------
    def compile_time(self, name: str, needed: bool = False) -> np.ndarray | None:
        if name in self.constants:
            return self.constants[name]
        if name in self.param_values:
            if needed:
                self.needed_at_compile_time.add(name)
            return self.param_values[name]
        if needed and name in self.input_values:  # only what a converter asks for: never folded by itself
            self.needed_at_compile_time.add(name)
            return self.input_values[name]
        return None

    def item(self, name: str) -> Item:
        """A value of any kind: a sequence or optional, an array known at compile time, or an SSA value."""
        if name in self.lists:
            return self.lists[name]
        if name in self.constants:
            return self.constants[name]
        return self.value(name)

    def value(self, name: str) -> SSAValue:
        if name in self.values:
            return self.values[name]
        if name in self.lists:
            raise InputError(f"{self.emitter.label or self.where}: '{name}' is {what_list(self.lists[name])}")
        if name not in self.materialized:
            if name not in self.constants:
                raise InputError(f"{self.where}: value '{name}' is used before it is defined")
            v = self.emitter.constant(self.constants[name])
            if is_symbolic(self.constants[name]) and self.symbolic_element(name) != i64:
                v = self.emitter.cast(v, self.symbolic_element(name))
            v.name_hint = self.hint(name)
            self.materialized[name] = v
        return self.materialized[name]

    def type_of(self, name: str) -> TensorType:
        if name in self.values:
            return self.values[name].type  # type: ignore[return-value]
        array = self.constants[name]
        if is_symbolic(array):
            return TensorType(self.symbolic_element(name), array.shape)
        return TensorType(element_type_for(array, f"value '{name}'"), array.shape)

    def symbolic_element(self, name: str) -> Attribute:
        """The type of sizes known at run time only: int64, as opc computes them, or int32 where ONNX
        types them so (tf2onnx casts a run-time shape to int32): cast where the value is used."""
        return ELEMENT_TYPES[INT32][1] if self.inferred.get(name, (None,))[0] == INT32 else i64

    def shape_of(self, name: str) -> tuple[Size, ...]:
        if name in self.values:
            return tuple(shape_of(self.values[name]))
        return tuple(np.shape(self.constants[name]))

    @staticmethod
    def hint(name: str) -> str | None:
        h = re.sub(r"\W", "_", name, flags=re.ASCII).strip("_")
        return h if h and not h[0].isdigit() else None

    # -- the function ---------------------------------------------------------
    def run(self) -> tuple[ModuleOp, dict[str, np.ndarray]]:
        g = self.graph
        initializers = list(g.initializer)
        init_names = {t.name for t in initializers}
        self.check_domains()
        for name in self.folded_inputs:
            self.constants[name] = self.input_values[name]
        inputs = [vi for vi in g.input if vi.name not in init_names and vi.name not in self.folded_inputs]
        arg_types: list[TensorType] = []
        templates: dict[str, Any] = {}  # sequence and optional inputs: several arguments each (or none)
        input_names: list[str | None] = []  # each argument's ONNX input (None: an element of a list)
        for vi in inputs:
            if vi.type.HasField("tensor_type"):
                arg_types.append(input_type(vi, self.where, vi.name in self.input_values or vi.name in self.sized,
                                            self.dynamic))
                input_names.append(vi.name)
                continue
            template, types = self.list_input(vi)
            templates[vi.name] = numbered(template, len(arg_types))
            arg_types += types
            input_names += [None] * len(types)
        weights = self.read_initializers(initializers)
        tied = tied_weights(weights)
        all_weights = dict(weights)
        weights = {n: a for n, a in weights.items() if n not in tied}
        self.inferred = infer_types(self.model, self.where)

        taken: set[str] = set()
        names = [identifier(n, taken, "x") for n in self.argument_names(inputs, templates)]
        names += [identifier(n, taken, "w") for n in weights]
        block = Block(arg_types=arg_types + [TensorType(element_type_for(a, f"initializer '{n}'"), a.shape)
                                             for n, a in weights.items()])
        onnx_names = input_names + list(weights)
        for arg, name, onnx_name in zip(block.args, names, onnx_names):
            arg.name_hint = name
            if onnx_name is not None:
                self.values[onnx_name] = arg
        for name, template in templates.items():
            self.lists[name] = filled(template, block.args)
        self.param_values = dict(all_weights)
        for name, (original, how) in tied.items():  # one argument (and one gradient) for tied weights
            src = self.values[original]
            self.values[name] = (self.emitter.transpose(src, [1, 0]) if how == "transpose"
                                 else self.emitter.reshape(src, all_weights[name].shape))

        # the sizes are tracked in every import: a static model still gets sizes from its data (NonZero)
        self.emitter.tracker = SizeTracker(block.args)
        if self.dynamic:
            self.emitter.tracker.same_names({self.values[vi.name]: dims_of(vi) for vi in inputs
                                             if vi.type.HasField("tensor_type")})
        with symbolic_shapes(self.emitter.tracker.table):
            for i, node in enumerate(g.node):
                self.node_index = i
                self.convert(self.node(node, self.opset))
            results = self.results()
        block.add_ops(self.emitter.ops)
        block.add_op(func.ReturnOp(*results))

        params: dict[str, np.ndarray] = {}
        for k, (arg, name, onnx_name) in enumerate(list(zip(block.args, names, onnx_names))):
            if onnx_name is not None and onnx_name in self.needed_at_compile_time and not arg.uses:
                block.erase_arg(arg)  # known at compile time and used only there: no argument
                if k < len(input_names):
                    self.bound_inputs.append(onnx_name)
            elif k >= len(input_names):
                params[name] = weights[onnx_name]
                self.weight_sources.append(onnx_name)
        fname = identifier(g.name, set(), "main")
        f = func.FuncOp(fname, (list(block.arg_types), [r.type for r in results]), Region(block))
        self.bound_inputs = self.folded_inputs + self.bound_inputs
        cse(f)  # converters may repeat a reshape or a constant
        region_dce(f.body)  # and leave a value behind (bias_after_gemm's reshape)
        return ModuleOp([f]), params

    def list_input(self, vi) -> tuple[Any, list[TensorType]]:
        """A sequence or optional graph input: its template and argument types, for the shapes given."""
        kind = vi.type.WhichOneof("value")
        if kind not in ("sequence_type", "optional_type"):
            raise UnsupportedError(f"{self.where}: input '{vi.name}' is a {kind or 'value of no type'}: "
                           "opc imports tensors, sequences and optionals")
        if vi.name not in self.shapes:
            what = "sequence" if kind == "sequence_type" else "optional"
            raise UnsupportedError(f"{self.where}: input '{vi.name}' is a {what}: opc needs its length and shapes at "
                           f"import: opc.load_onnx takes them from the call, opc.import_onnx from shapes= (a list of "
                           "shapes for a sequence, None for an empty optional)")
        return list_arg_types(vi.type, self.shapes[vi.name], f"input '{vi.name}'", self.where)

    @staticmethod
    def argument_names(inputs: Sequence[Any], templates: Mapping[str, Any]) -> list[str]:
        """Argument names: an input's, or for the tensors of a sequence input x, x_at0, x_at1, ..."""
        names: list[str] = []
        for vi in inputs:
            if vi.name not in templates:
                names.append(vi.name)
                continue
            template = templates[vi.name]
            n = len(leaves(template))
            if isinstance(template, Opt) and not isinstance(template.item, Seq):  # 0 or 1 tensor
                names += [vi.name] * n
            else:
                names += [f"{vi.name}_at{j}" for j in range(n)]
        return names

    def results(self) -> list[SSAValue]:
        """The graph's outputs as the function's results (a sequence's tensors in order), their layouts noted."""
        results: list[SSAValue] = []
        self.output_layouts = []
        for out in self.graph.output:
            item = self.item(out.name)
            self.output_layouts.append(layout_of(item))
            for v in leaves(item):
                results.append(v if isinstance(v, SSAValue) else self.emitter.constant(v))
        if not self.graph.output:
            raise InputError(f"{self.where}: the graph has no outputs")
        if not results:
            raise UnsupportedError(f"{self.where}: the graph's outputs hold no tensor (empty sequences or optionals): "
                           "nothing to compute")
        return results

    def check_domains(self) -> None:
        for i, node in enumerate(self.graph.node):
            if node.domain not in ("", "ai.onnx") and qualified_type(node) not in CONVERTERS:
                self.node_index = i
                label = self.node(node, self.opset).label
                raise UnsupportedError(f"{label}: unsupported op {node.domain}.{node.op_type} "
                               "(opc imports the ai.onnx domain only)")

    def read_initializers(self, initializers) -> dict[str, np.ndarray]:
        """Float initializers (weights: arguments) by name; the others become constants."""
        from onnx import numpy_helper

        weights = {}
        for t in initializers:
            if t.data_type not in ELEMENT_TYPES:
                raise UnsupportedError(f"{self.where}: initializer '{t.name}' has dtype {dtype_name(t.data_type)}, "
                               f"which opc does not support ({supported_dtypes()})")
            try:
                array = numpy_helper.to_array(t, base_dir=self.base_dir())
            except (OSError, ValueError) as err:
                raise InputError(f"{self.where}: cannot read initializer '{t.name}': {first_line(err)}") from None
            if t.data_type in FLOAT_ELEMENT_TYPES and array.size > 1 and not self.as_constant(t.name, array):
                weights[t.name] = array
            # a single float (an exporter's 0.5, 1/sqrt(d)), or one the caller named, is a constant, not a weight
            else:
                self.constants[t.name] = array
        return weights

    def base_dir(self) -> str:
        return os.path.dirname(self.where) if os.path.isfile(self.where) else ""

    # -- one node -------------------------------------------------------------
    def node(self, proto: Any, opset: int) -> Node:
        """proto as converters see it: at the given ai.onnx opset, or at its own domain's."""
        if proto.domain in ("", "ai.onnx"):
            return Node(proto, opset, self)
        return Node(proto, self.opsets.get(proto.domain, 1), self)

    def convert(self, node: Node) -> None:
        self.emitter.label = node.label
        present = [n for n in node.proto.input if n]
        convert = find_converter(qualified_type(node.proto), node.opset)
        foldable = node.op_type not in NOT_FOLDABLE and node.op_type not in LIST_OPS
        if any(is_symbolic(self.constants.get(n)) for n in present) and node.op_type not in SYMBOLIC_FOLDERS:
            foldable = False  # run-time sizes into Reshape, Range, ...: its converter takes them
        if foldable and all(n in self.constants for n in present):
            outputs: Sequence[SSAValue | np.ndarray] = self.evaluate(node)
        elif convert is None and foldable and all(self.compile_time(n) is not None for n in present):
            # only computable at compile time, from weights: they are needed there, not as arguments
            outputs = self.evaluate(node, {n: self.compile_time(n, needed=True) for n in present})
        else:
            if convert is None:
                why = (": it draws random numbers, from a generator ONNX does not define (its node tests expect "
                       "the draws of NumPy's unseeded global generator)" if node.op_type in RANDOM_OPS else
                       ": it decodes image files (JPEG, PNG, WebP, ...) at run time, a codec library's work, not "
                       "tensor arithmetic opc compiles" if node.op_type == "ImageDecoder" else "")
                raise node.fail(f"unsupported op {node.op_type} ({node.proto.domain or 'ai.onnx'} opset "
                                f"{node.opset}){why}")
            try:
                outputs = convert(node)
            except VerifyException as err:  # raised by an op's constructor (shapes it cannot take)
                raise node.fail(f"cannot express it in opc: {first_line(err)}") from None
            except SymbolicComparison as err:  # a run-time size where this converter needs a number
                raise SizeNeeded(f"{node.label}: {err}") from None
        from_lists = any(n in self.lists for n in present)
        for name, out in zip(node.proto.output, outputs):
            if not name:
                continue
            if is_list(out):
                self.values.pop(name, None)
                self.constants.pop(name, None)
                self.lists[name] = out  # type: ignore[assignment]
                continue
            self.lists.pop(name, None)
            if not from_lists:  # a sequence's declared element type may be looser than its tensors
                self.check_inferred(node, name, out)
            if isinstance(out, SSAValue):
                if out.name_hint is None:
                    out.name_hint = self.hint(name)
                self.values[name] = out
            else:
                self.constants[name] = np.asarray(out)
        for name in node.proto.output[len(outputs):]:
            if name and self.used(name):
                raise node.fail(f"output '{name}' is not supported")

    def inline(self, graph: Any, args: Sequence[Item], opset: int, where: str,
               keep_constants: bool = False) -> list[Item]:
        """A graph attribute (FlexAttention's score_mod, a Loop's body) converted in place, its inputs bound
        to args (values, or arrays known at compile time): its own scope (its names shadow the outer graph's,
        which it may read), its initializers constants. Outputs known at compile time stay arrays with
        keep_constants (a Loop's condition), else become values."""
        from onnx import numpy_helper

        if len(graph.input) != len(args):
            raise InputError(f"{where}: graph '{graph.name}' takes {len(graph.input)} inputs, "
                           f"given {len(args)}")
        saved = (dict(self.values), dict(self.constants), dict(self.lists), self.materialized, self.inferred,
                 self.node_index, self.emitter.label)
        self.materialized, self.inferred = {}, {}
        try:
            for t in graph.initializer:
                self.values.pop(t.name, None)
                self.lists.pop(t.name, None)
                self.constants[t.name] = numpy_helper.to_array(t)
            for vi, arg in zip(graph.input, args):
                self.constants.pop(vi.name, None)
                self.values.pop(vi.name, None)
                self.lists.pop(vi.name, None)
                if is_list(arg):
                    self.lists[vi.name] = arg  # type: ignore[assignment]
                elif isinstance(arg, SSAValue):
                    self.values[vi.name] = arg
                else:
                    self.constants[vi.name] = np.asarray(arg)
            for i, n in enumerate(graph.node):
                self.node_index = i
                self.convert(self.node(n, opset))
            return [self.lists[out.name] if out.name in self.lists
                    else self.constants[out.name] if keep_constants and out.name in self.constants
                    else self.value(out.name) for out in graph.output]
        finally:
            (self.values, self.constants, self.lists, self.materialized, self.inferred, self.node_index,
             self.emitter.label) = saved

    def used(self, name: str) -> bool:
        return any(name in n.input for n in self.graph.node) or any(name == o.name for o in self.graph.output)

    def as_inferred(self, name: str, value: np.ndarray) -> np.ndarray:
        """Sizes folded (as int64) into the integer type ONNX gives them (tf2onnx casts shapes to int32)."""
        elem = self.inferred.get(name, (None,))[0]
        if is_symbolic(value) or elem not in ELEMENT_TYPES or value.dtype.kind not in "iu":
            return value
        return value.astype(ELEMENT_TYPES[elem][2]) if ELEMENT_TYPES[elem][2].kind in "iu" else value

    def evaluate(self, node: Node, feeds: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """A node whose inputs are all known, run by our NumPy folder or onnx's reference evaluator."""
        from onnx.reference import ReferenceEvaluator

        if feeds is None:
            feeds = {n: self.constants[n] for n in node.proto.input if n}
        if any(is_symbolic(v) for v in feeds.values()):
            folded = fold_symbolic(node, [feeds[n] if n else None for n in node.proto.input])
            return [self.as_inferred(name, v) for name, v in zip(node.proto.output, folded)]
        fold = FOLDERS.get(qualified_type(node.proto))
        if fold is not None:
            return fold(node, [feeds[n] if n else None for n in node.proto.input])
        try:  # as a model: given a bare node, the evaluator ignores `opsets` and runs the newest version
            model = one_node_model(node.proto, feeds, self.opset if node.proto.domain else node.opset,
                                   {node.proto.domain: node.opset} if node.proto.domain else {})
            return list(ReferenceEvaluator(model).run(None, feeds))
        except Exception as err:  # noqa: BLE001 - the reference evaluator raises anything
            raise node.fail(f"cannot evaluate it at compile time: {type(err).__name__}: {first_line(err)}") from None

    def check_inferred(self, node: Node, name: str, out: SSAValue | np.ndarray) -> None:
        """The converter's result must have the type ONNX shape inference gives (a bug otherwise)."""
        if name not in self.inferred:
            return
        elem, dims = self.inferred[name]
        ours_dims: list[Size]
        if isinstance(out, SSAValue):
            ours_elem, ours_dims = element_of(out), list(shape_of(out))
        else:
            ours_elem = self.symbolic_element(name) if is_symbolic(out) else BY_NUMPY.get(np.asarray(out).dtype)
            ours_dims = list(np.shape(out))
        if elem in ELEMENT_TYPES and ours_elem != ELEMENT_TYPES[elem][1]:
            raise node.fail(f"output '{name}' has element type {ours_elem} in opc, {dtype_name(elem)} in ONNX")
        known = dims != [None] and all(isinstance(d, int) and d > 0 for d in dims)
        if known and (len(dims) != len(ours_dims)
                      or any(not isinstance(w, Sym) and w != d for w, d in zip(ours_dims, dims))):
            raise node.fail(f"output '{name}' has shape {ours_dims} in opc, {dims} in ONNX")


def constant_selector(constants: Any, initializers: set[str], where: str) -> Callable[[str, np.ndarray], bool]:
    """import_onnx's constants= (None, initializer names, or a predicate of (name, array)) as a predicate."""
    if constants is None:
        return lambda name, array: False
    if callable(constants):
        return lambda name, array: bool(constants(name, array))
    if isinstance(constants, (str, bytes)) or not all(isinstance(n, str) for n in constants):
        raise InputError(f"constants: expected initializer names or a predicate, got {constants!r}")
    names = set(constants)
    for name in sorted(names - initializers):
        raise InputError(f"{where}: constants: the graph has no initializer '{name}'")
    return lambda name, array: name in names


def one_node_model(proto, feeds: Mapping[str, np.ndarray], opset: int, others: Mapping[str, int] | None = None):
    """A model of one node at the given opset (and `others`, domain -> opset), its inputs typed by the
    arrays fed to them."""
    from onnx import helper

    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))
              for n, a in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(n) for n in proto.output if n]
    graph = helper.make_graph([proto], "fold", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                             + [helper.make_opsetid(d, v) for d, v in (others or {}).items()])


def import_model(model: Any, shapes: Mapping[str, Sequence[int]] | None,
                 constants: Any = None) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """opc.import_onnx: the open dims `shapes` does not fix stay `?` (run-time sizes)."""
    try:
        module, params, _ = import_graph(model, shapes, constants=constants, dynamic=True)
    except (NeededAtCompileTime, SizeNeeded) as err:
        proto = model if hasattr(model, "graph") else load(model, os.fspath(model))
        open_inputs = [n for n, dims in open_dims(proto).items() if n not in (shapes or {})]
        if not open_inputs:
            raise
        name = open_inputs[0]
        raise type(err)(f"{err}; give the open sizes at import: `opc import --shape {name}=...` or "
                         f"opc.import_onnx(..., shapes={{'{name}': (...)}})") from None
    return module, params


def open_dims(model: Any) -> dict[str, list[int | str | None]]:
    """The graph inputs with a dim left open (a dim_param or no size), and their dims."""
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name not in inits and vi.type.HasField("tensor_type"):
            dims = dims_of(vi)
            if any(not isinstance(d, int) or d <= 0 for d in dims):
                out[vi.name] = dims
    return out


def import_graph(model: Any, shapes: Mapping[str, Any] | None,
                 input_values: Mapping[str, Any] | None = None,
                 where: str | None = None, constants: Any = None,
                 layouts: list[Any] | None = None, dynamic: bool = False,
                 weight_sources: list[str] | None = None, checked: bool = False
                 ) -> tuple[ModuleOp, dict[str, np.ndarray], list[str]]:
    """import_model, where converters may read the given graph inputs' values (shapes, axes) at compile
    time; the third result names the inputs so bound (no longer arguments). A sequence input's shape is a
    list of its tensors' shapes, an empty optional's None (lists.shapes_of); `layouts`, when given, receives
    each graph output's layout, to regroup the function's results into sequences (lists.regroup);
    `weight_sources`, the initializer each param is (unchanged: numpy_helper.to_array of it). A model
    `checked` before (opc.load_onnx's) is not checked again."""
    onnx = onnx_module()
    if where is None:
        where = "<ModelProto>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
    if isinstance(model, onnx.ModelProto) and (shapes or not model.graph.name):
        own = onnx.ModelProto()
        own.CopyFrom(model)  # named and given shapes here: leave the caller's model alone
        model = own
    model = read(model, where)[0] if checked else load(model, where)
    try:
        importer = GraphImporter(model, where, shapes, input_values, constants=constants, dynamic=dynamic)
        module, params = importer.run()
    except NeededAtCompileTime:
        if not input_values:
            raise
        # a value computed from inputs is needed at compile time: those inputs' values are compiled in
        importer = GraphImporter(model, where, shapes, input_values, fold_given=True,
                                 constants=constants)
        module, params = importer.run()
    if layouts is not None:
        layouts[:] = importer.output_layouts
    if weight_sources is not None:
        weight_sources[:] = importer.weight_sources
    return module, params, importer.bound_inputs
