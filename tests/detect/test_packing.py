"""Packing a multi-output model into one output (pipeline/packing.py), for torch modules and
ONNX graphs: the packed tensor holds every output where the recorded packing says, the
finest map first, and onnxruntime runs the rewritten graph. Small untrained modules:
these tests are about layout, not accuracy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from edgesmith.errors import ModelLoadError
from edgesmith.pipeline import detection, model
from edgesmith.pipeline.model import LoadedModel
from edgesmith.pipeline.packing import pack_onnx, plan


class TwoMaps(nn.Module):
    """Two head maps of 9 channels, returned coarse first (stride 16, then 8)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 9, 3, stride=8, padding=1)
        self.b = nn.Conv2d(3, 9, 3, stride=16, padding=1)

    def forward(self, x):
        return self.b(x), self.a(x)


class Mixed(nn.Module):
    """Outputs of different ranks: only the flat layout can hold them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, stride=4, padding=1)
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)), self.conv(x)


class Named(nn.Module):
    def forward(self, x):
        return {"boxes": x}


X64 = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
X32 = X64[:, :, :32, :32].copy()


def test_two_map_torch_model_is_packed_finest_first_in_yolo_layout():
    net = TwoMaps().eval()
    loaded = model.pack_outputs(LoadedModel("two.py:build", torch_model=net), X64)
    p = loaded.packing.to_json()
    assert p["layout"] == "channels" and p["packed_shape"] == ["N", 9, 80]
    assert [(o["index"], o["shape"], o["offset"], o["length"]) for o in p["outputs"]] == [
        (1, ["N", 9, 8, 8], 0, 64), (0, ["N", 9, 4, 4], 64, 16)]
    with torch.no_grad():
        packed = loaded.torch_model(torch.from_numpy(X64)).numpy()
        coarse, fine = (o.numpy() for o in net(torch.from_numpy(X64)))
    assert packed.shape == (4, 9, 80)
    np.testing.assert_array_equal(packed[:, :, :64], fine.reshape(4, 9, 64))
    np.testing.assert_array_equal(packed[:, :, 64:], coarse.reshape(4, 9, 16))
    back = loaded.packing.unpack(packed)  # the model's order again
    np.testing.assert_array_equal(back[0], coarse)
    np.testing.assert_array_equal(back[1], fine)
    # detection.decode reads the packed layout as the two maps it packs
    levels = detection.as_levels(packed, (8, 16))
    np.testing.assert_array_equal(levels[0], fine)


def test_outputs_of_different_shapes_are_flattened_and_concatenated():
    net = Mixed().eval()
    loaded = model.pack_outputs(LoadedModel("mixed.py:build", torch_model=net), X32)
    p = loaded.packing.to_json()
    assert p["layout"] == "flat" and p["packed_shape"] == ["N", 10 + 4 * 8 * 8]
    with torch.no_grad():
        packed = loaded.torch_model(torch.from_numpy(X32)).numpy()
        logits, maps = (o.numpy() for o in net(torch.from_numpy(X32)))
    np.testing.assert_array_equal(packed[:, :10], logits)
    np.testing.assert_array_equal(packed[:, 10:], maps.reshape(4, -1))


def test_one_output_model_is_left_as_it_is():
    net = nn.Conv2d(3, 2, 3).eval()
    loaded = LoadedModel("one.py:build", torch_model=net)
    assert model.pack_outputs(loaded, X32) is loaded


def test_forward_returning_a_dict_is_refused_with_what_it_returned():
    with pytest.raises(ModelLoadError) as e:
        model.check_forward(Named(), (2, 3, 8, 8), "named.py:build")
    assert "forward returned dict" in e.value.what and "tuple" in (e.value.fix or "")


def test_two_output_onnx_graph_gets_one_packed_output(tmp_path):
    path = tmp_path / "two.onnx"
    torch.onnx.export(TwoMaps().eval(), torch.zeros(1, 3, 64, 64), str(path), dynamo=False,
                      opset_version=17, input_names=["image"],
                      output_names=["stride16", "stride8"],
                      dynamic_axes={"image": {0: "n"}, "stride16": {0: "n"}, "stride8": {0: "n"}})
    data, packing = pack_onnx(path, X64, None)
    assert [o["name"] for o in packing.to_json()["outputs"]] == ["stride8", "stride16"]
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["packed_output"]
    (packed,) = sess.run(None, {"image": X64})
    assert packed.shape == (4, 9, 80)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    coarse, fine = original.run(None, {"image": X64})
    np.testing.assert_array_equal(packed[:, :, :64], fine.reshape(4, 9, 64))
    np.testing.assert_array_equal(packed[:, :, 64:], coarse.reshape(4, 9, 16))


def test_one_output_onnx_graph_is_not_rewritten(tmp_path):
    path = tmp_path / "one.onnx"
    torch.onnx.export(nn.Conv2d(3, 2, 3).eval(), torch.zeros(1, 3, 32, 32), str(path),
                      dynamo=False, opset_version=17)
    assert pack_onnx(path, X32, None) is None


def test_channels_layout_needs_one_channel_count():
    assert plan(["a", "b"], [(1, 9, 8, 8), (1, 7, 4, 4)]).layout == "flat"
    assert plan(["a", "b"], [(1, 9, 8, 8), (1, 9, 4, 4)]).layout == "channels"
