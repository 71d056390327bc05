"""Who reads each tensor of an ONNX graph: the map every graph walk outside ``targets/``
starts from.

The exact-GELU matcher (``_onnx_gelu``), the TFLite and OpenVINO fallback maps
(``_tflite_select``, ``openvino``) and the sensitivity ranking (``pipeline/sensitivity``)
each follow a tensor to the nodes reading it; the map lives here, in ``convert/``, because
``pipeline/`` may import this room and not the other way round.
"""

from __future__ import annotations

from typing import Any


def consumers_of(graph: Any) -> dict[str, list[Any]]:
    """Tensor name -> the nodes of an ONNX ``graph`` that read it, in graph order (a node
    reading one tensor twice is listed twice)."""
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return consumers
