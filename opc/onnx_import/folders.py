"""What exported transformer models need beyond the op-by-op converters (tests/models/, issue 18 item 7):
NumPy folders for nodes an exporter leaves with all inputs known, where onnx's reference evaluator
fails (GatherElements over an axis of 64 or more elements: BERT's token_type_ids buffer of 512)."""

from __future__ import annotations

import numpy as np

from opc.onnx_import.graph import Node, folder


@folder("GatherElements")
def fold_gather_elements(node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    data, indices = inputs
    if data.ndim != indices.ndim:
        raise node.fail(f"indices have rank {indices.ndim}, data rank {data.ndim}: they must match")
    axis = node.axis(node.attr("axis", 0), data.ndim)
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise node.fail(f"an index is out of range [{-n}, {n - 1}] along axis {axis}")
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise node.fail(f"indices of shape {list(indices.shape)} exceed data of shape {list(data.shape)}")
    # output[..., j, ...] = data[..., indices[..., j, ...], ...]: the other axes as far as the indices reach
    data = data[tuple(slice(None) if k == axis else slice(0, i) for k, i in enumerate(indices.shape))]
    return [np.take_along_axis(data, np.where(indices < 0, indices + n, indices).astype(np.int64), axis)]
