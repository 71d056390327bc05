"""OpenVINO INT8 ``float_nodes`` reach activations: nncf puts an activation's quantizer
on its consumers' inputs, so an ignored_scope naming only the activation (HardSwish)
leaves its output quantized; and OpenVINO fuses Sigmoid * x into one Swish named after
the Mul, so a Sigmoid has no op of its own. Real nncf + OpenVINO on a five-layer net."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.convert.openvino import OpenVINOTarget
from tests.convert._formats import export, make_ctx


class _Activations(torch.nn.Module):
    """conv -> HardSwish -> conv -> x * sigmoid(x) (SiLU as EfficientNet writes it) -> conv."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = torch.nn.Conv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.hardswish(self.c1(x))
        y = self.c2(x)
        y = self.c3(y * torch.sigmoid(y))
        return self.fc(y.mean((2, 3)))


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> tuple[Path, np.ndarray]:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ov_activations")
    calib = np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32)
    path, _ = export(_Activations(), calib.shape[1:], folder)
    return path, calib


def _quantizers(path: Path, float_nodes: list[str], folder: Path) -> tuple[dict[str, str], dict]:
    """Each FakeQuantize of the INT8 IR -> the type of the op whose output it quantizes;
    and the artifact's meta."""
    import openvino as ov

    onnx_path, calib = path
    ctx = make_ctx(OpenVINOTarget, "openvino", "int8", onnx_path, calib, folder,
                   float_nodes=float_nodes)
    art = OpenVINOTarget().convert(ctx)
    model = ov.Core().read_model(str(art.path))
    return {op.get_friendly_name(): op.input_value(0).get_node().get_type_name()
            for op in model.get_ops() if op.get_type_name() == "FakeQuantize"}, art.meta


def test_a_float_hardswish_loses_the_quantizer_nncf_put_on_its_consumer(onnx_model,
                                                                        tmp_path):
    plain, _ = _quantizers(onnx_model, [], tmp_path / "plain")
    kept, meta = _quantizers(onnx_model, ["/HardSwish"], tmp_path / "kept")
    assert "HSwish" in plain.values()  # the quantizer the activation's name does not reach
    assert "HSwish" not in kept.values()
    assert len(kept) == len(plain) - 1  # only that one
    assert meta["nncf"]["ignored_scope"] == ["/HardSwish", "/c2/Conv/WithoutBiases"]


def test_a_float_sigmoid_maps_to_the_swish_openvino_fused_it_into(onnx_model, tmp_path):
    plain, _ = _quantizers(onnx_model, [], tmp_path / "plain")
    kept, meta = _quantizers(onnx_model, ["/Sigmoid"], tmp_path / "kept")
    assert "Swish" in plain.values() and "Swish" not in kept.values()
    assert len(kept) == len(plain) - 1
    assert meta["nncf"]["ignored_scope"] == ["/Mul", "/c3/Conv/WithoutBiases"]
