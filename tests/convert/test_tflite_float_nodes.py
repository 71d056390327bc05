"""TFLite INT8 ``float_nodes``: which TFLite ops compute an ONNX node, found by values.

onnx2tf 1.28 names TFLite tensors after the TF ops it emitted, not the ONNX nodes, so
``convert/_tflite_select.py`` matches the tensors of the ONNX model (onnxruntime) and of
onnx2tf's calibrated float TFLite model on the same samples. Real onnx2tf, TensorFlow and
LiteRT on a four-layer net (16 calibration samples: one onnx2tf run, ~1 min)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgesmith.convert.tflite import TFLiteTarget
from tests.convert._formats import export, make_ctx


class _Net(torch.nn.Module):
    """conv + ReLU (TFLite fuses them), a strided conv (onnx2tf pads explicitly), HardSwish."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.c3 = torch.nn.Conv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.hardswish(self.c2(torch.relu(self.c1(x))))
        return self.fc(self.c3(x).mean((2, 3)))


FLOAT = ["/c1/Conv", "/c2/Conv", "/HardSwish"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tflite_float_nodes")
    calib = np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32)
    path, _ = export(_Net(), calib.shape[1:], folder)
    ctx = make_ctx(TFLiteTarget, "tflite", "int8", path, calib, folder, float_nodes=FLOAT)
    return TFLiteTarget().convert(ctx)


def _ops(art) -> dict[str, tuple[str, str]]:
    """TFLite op output tensor name -> (op name, output dtype)."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(art.path))
    t = {d["index"]: d for d in interp.get_tensor_details()}
    return {t[o]["name"]: (op["op_name"], np.dtype(t[o]["dtype"]).name)
            for op in interp._get_ops_details() for o in op["outputs"]}


def test_each_float_node_maps_to_the_tflite_ops_that_compute_it(converted):
    ops = _ops(converted)
    kinds = {node: [ops[t][0] for t in converted.meta["float_ops"][node]] for node in FLOAT}
    assert kinds == {"/c1/Conv": ["CONV_2D"],  # with the ReLU fused into it
                     "/c2/Conv": ["PAD", "CONV_2D"],  # onnx2tf's explicit padding
                     "/HardSwish": ["HARD_SWISH"]}


def test_the_mapped_ops_compute_in_float_and_the_rest_in_int8(converted):
    ops = _ops(converted)
    kept = {t for ts in converted.meta["float_ops"].values() for t in ts}
    assert all(ops[t][1] == "float32" for t in kept)
    assert [dtype for name, (op, dtype) in ops.items() if op == "CONV_2D" and name not in kept
            ] == ["int8"]  # c3
