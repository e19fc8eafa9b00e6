"""opc as an ONNX backend (onnx.backend.base.Backend), for onnx's conformance suite:

    import onnx.backend.test, opc.onnx_backend
    globals().update(onnx.backend.test.BackendTest(opc.onnx_backend, __name__).test_cases)

prepare() checks and keeps the model; the first run() with given input shapes
imports and compiles it for them (opc.load_onnx), later runs reuse the build.
A model opc cannot import raises OpcError (one line naming node and reason).
"""

from __future__ import annotations

from typing import Any

from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from opc.onnx_load import OnnxModel


class OpcRep(BackendRep):
    """A prepared model: `run(inputs)` compiles for the inputs' shapes on first use (opc.load_onnx)."""

    def __init__(self, model: OnnxModel) -> None:
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """The outputs for a list of inputs (or one array, or a dict by input name)."""
        if isinstance(inputs, dict):
            return tuple(self.model(**inputs))
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        return tuple(self.model(*inputs))


class OpcBackend(Backend):
    """onnx's backend interface over opc.load_onnx: `onnx.backend.test.BackendTest(opc.onnx_backend)` runs."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> OpcRep:
        """A runnable model (a ModelProto or path) for device CPU (or CUDA where nvcc is)."""
        super().prepare(model, device, **kwargs)
        return OpcRep(OnnxModel(model, target=device_target(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        """prepare(model, device).run(inputs)."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA where nvcc is on PATH."""
        import shutil

        kind = Device(device).type
        return kind == DeviceType.CPU or (kind == DeviceType.CUDA and shutil.which("nvcc") is not None)


def device_target(device: str) -> str:
    return "cuda" if Device(device).type == DeviceType.CUDA else "cpu"


prepare = OpcBackend.prepare
run_model = OpcBackend.run_model
run_node = OpcBackend.run_node
supports_device = OpcBackend.supports_device
