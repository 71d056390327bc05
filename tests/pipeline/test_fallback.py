"""The accuracy-aware INT8 fallback (issue 15 item 3): a model whose plain INT8 breaks the
accuracy budget, and the layer kept in float that brings it back, on the real
onnxruntime, the real C compiler and the real nncf/OpenVINO.

The model is the trained digits CNN reading a second input channel with zero weights: a
nuisance of huge magnitude (uniform noise). The FP32 model ignores it exactly; INT8 gives
the input one per-tensor scale, so the image channel rounds to the zero point and the
stem convolution sees nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT

STEM = "/net/stem/stem.0/Conv"

MODEL = f'''
import sys
import torch
from torch import nn
sys.path.insert(0, {str(ROOT / "examples" / "digits")!r})
from model import build as digits_net


class TwoChannel(nn.Module):
    """The digits net on channel 1; channel 0 reaches the stem with zero weights."""

    def __init__(self):
        super().__init__()
        net = digits_net()
        net.load_state_dict(torch.load({{ckpt!r}}, weights_only=True))
        old = net.stem[0]
        new = nn.Conv2d(2, old.out_channels, 3, padding=1, bias=False)
        with torch.no_grad():
            new.weight.zero_()
            new.weight[:, 1:2] = old.weight
        net.stem[0] = new
        self.net = net.eval()

    def forward(self, x):
        return self.net(x)


def build():
    return TwoChannel().eval()
'''

PROFILE = """description: fallback test
device: {{name: host, arch: x86_64, cores: 2, ram_mb: 4000}}
compress: {{calibration: {{samples: 128, method: minmax, per_channel: true}}}}
targets:
{targets}
budgets: {{accuracy_drop: {budget}}}
"""


@pytest.fixture(scope="module")
def two_channel(digits_ckpt, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("fallback_model")
    (folder / "two_channel.py").write_text(MODEL.format(ckpt=str(digits_ckpt)))
    return f"{folder}/two_channel.py:build"


def _data(path: Path, amplitude: float) -> Path:
    """digits (normalised as the demo's) as channel 1, uniform noise of +-amplitude as 0."""
    from sklearn.datasets import load_digits

    d = load_digits()
    image = (d.images.astype(np.float32) / 16 - 0.5) / 0.5
    noise = np.random.default_rng(0).uniform(-amplitude, amplitude, image.shape)
    np.savez(path, x=np.stack([noise.astype(np.float32), image], 1),
             y=d.target.astype(np.int64))
    return path


def _profile(path: Path, targets: list[str], budget: float) -> Path:
    lines = []
    for t in targets:
        fmt, prec = t.split(":")
        lines.append(f"  - {{format: {fmt}, precision: {prec}}}")
    path.write_text(PROFILE.format(targets="\n".join(lines), budget=budget))
    return path


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _build(cli, model: str, tmp_path: Path, targets: list[str], amplitude: float,
           budget: float = 2.0, *extra: str):
    data = _data(tmp_path / "data.npz", amplitude)
    profile = _profile(tmp_path / "profile.yaml", targets, budget)
    out = tmp_path / "out"
    r = cli("convert", model, "--data", data, "--profile", profile, "--out", out, *extra)
    return r, out


def test_fallback_keeps_the_stem_in_float_and_brings_onnx_and_c_int8_within_budget(
        cli, two_channel, tmp_path):
    r, out = _build(cli, two_channel, tmp_path, ["onnx:int8", "c:int8"], 1000.0, 2.0, "--json")
    assert r.code == 0, r.err
    m = _manifest(out)
    for t in m["targets"]:
        fb = t["fallback"]
        assert t["status"] == "ok", t
        assert fb["applied"] and fb["layers"] == [STEM]  # the one layer to blame, alone
        assert fb["drop_before_pt"] > 50  # plain INT8: the image channel is rounded away
        assert fb["drop_after_pt"] == t["accuracy_drop"] <= 2.0
        assert fb["tried"] == 1 and fb["ranking"][0]["node"] == STEM
        assert fb["ranking"][0]["sqnr_db"] < 10 < fb["ranking"][1]["sqnr_db"]
        assert t["meta"]["float_nodes"] == [STEM]
    assert not (out / "rejected").exists()  # the plain INT8 artifacts were replaced
    # onnx-int8 ships the QDQ model with the stem in float: its input is not quantized
    import onnx

    graph = onnx.load(str(out / "targets" / "onnx-int8" / "model.onnx")).graph
    stem = next(n for n in graph.node if n.name == STEM)
    assert stem.input[0] == "input"
    # c-int8 lowered the mixed graph (float conv -> Q -> int8 kernels) and compiled it
    model_c = (out / "targets" / "c-int8" / "model.c").read_text()
    steps = [model_c.find(f) for f in ("es_conv2d_f32", "es_quantize_f32_i8", "es_conv2d_i8")]
    assert -1 < steps[0] < steps[1] < steps[2], steps
    summary = json.loads(r.out)
    assert [t["fallback"]["layers"] for t in summary["targets"]] == [[STEM], [STEM]]
    md = (out / "report.md").read_text()
    assert "## INT8 layers kept in float (accuracy-aware fallback)" in md
    assert f"| c-int8 | {STEM} | " in md
    assert [s["stage"] for s in m["timings"]].count("fallback c-int8") == 1


def test_openvino_int8_fallback_ignores_the_stem_in_nncf(cli, two_channel, tmp_path):
    r, out = _build(cli, two_channel, tmp_path, ["openvino:int8"], 1000.0)
    assert r.code == 0, r.err
    (t,) = _manifest(out)["targets"]
    assert t["status"] == "ok" and t["fallback"]["layers"] == [STEM]
    assert t["fallback"]["drop_before_pt"] > 50 and t["accuracy_drop"] <= 2.0
    assert t["meta"]["float_nodes"] == [STEM]
    import openvino as ov

    # nncf put no FakeQuantize in front of the stem's convolution
    model = ov.Core().read_model(str(out / "targets" / "openvino-int8" / "model.xml"))
    conv = next(op for op in model.get_ops() if op.get_friendly_name() == f"{STEM}/WithoutBiases")
    assert conv.input_value(0).get_node().get_type_name() != "FakeQuantize"


def test_no_fallback_runs_when_the_budget_holds(cli, two_channel, tmp_path):
    r, out = _build(cli, two_channel, tmp_path, ["onnx:int8"], 1.0)
    assert r.code == 0, r.err
    m = _manifest(out)
    (t,) = m["targets"]
    assert t["status"] == "ok" and t["accuracy_drop"] <= 2.0
    assert "fallback" not in t
    assert not any("fallback" in s["stage"] for s in m["timings"])  # no ranking either
    assert "kept in float" not in (out / "report.md").read_text()


def test_no_fallback_flag_leaves_the_broken_int8_target_rejected(cli, two_channel, tmp_path):
    r, out = _build(cli, two_channel, tmp_path, ["onnx:int8"], 1000.0, 2.0, "--no-fallback")
    assert r.code == 4, r.err  # a rejected target: conversion exit code
    assert "output parity off" in r.err
    (t,) = _manifest(out)["targets"]
    assert t["status"] == "rejected" and "fallback" not in t
    assert (out / "rejected" / "onnx-int8" / "model.onnx").is_file()


def test_fallback_also_runs_for_a_budget_miss_with_parity_intact(cli, two_channel, tmp_path):
    r, out = _build(cli, two_channel, tmp_path, ["onnx:int8"], 50.0, 0.2)
    assert r.code == 0, r.err
    (t,) = _manifest(out)["targets"]
    fb = t["fallback"]
    assert fb["drop_before_pt"] > 0.2 >= fb["drop_after_pt"]
    assert t["status"] == "ok" and fb["layers"] == [STEM]


@pytest.mark.parametrize("fmt,said", [
    ("openvino", "float_nodes: no op of the OpenVINO model comes from ONNX node '/no/such'"),
    ("tflite", "float_nodes: no ONNX node named '/no/such'"),
])
def test_a_float_node_the_model_does_not_have_is_a_clear_conversion_error(
        cli, two_channel, tmp_path, fmt, said):
    data = _data(tmp_path / "data.npz", 1.0)
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE.format(
        targets=f"  - {{format: {fmt}, precision: int8, options: {{float_nodes: [/no/such]}}}}",
        budget=2.0))
    r = cli("convert", two_channel, "--data", data, "--profile", profile,
            "--out", tmp_path / "out")
    assert r.code == 4
    assert said in r.err
    assert "Traceback" not in r.err


def test_quantize_qdq_refuses_an_unknown_node_to_keep_in_float(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgesmith.convert.onnx_qdq import quantize_qdq
    from edgesmith.errors import ConversionError
    from edgesmith.inputs import CalibrationSet

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    calib = CalibrationSet(x=np.ones((2, 4), np.float32))
    with pytest.raises(ConversionError, match="no node named 'relu2' to keep in float"):
        quantize_qdq(src, calib, tmp_path / "q.onnx", exclude=["relu2"])


def test_tflite_int8_fallback_keeps_the_stem_op_in_float(cli, two_channel, tmp_path):
    """onnx2tf's calibrated model requantized by TensorFlow with the stem's CONV_2D
    denylisted; onnx2tf names that op after TF ops, not the ONNX node, so the map comes
    from matching tensor values (convert/_tflite_select.py)."""
    r, out = _build(cli, two_channel, tmp_path, ["tflite:int8"], 1000.0)
    assert r.code == 0, r.err
    (t,) = _manifest(out)["targets"]
    fb = t["fallback"]
    assert t["status"] == "ok" and fb["applied"] and fb["layers"] == [STEM]
    assert fb["drop_before_pt"] > 50 and fb["drop_after_pt"] == t["accuracy_drop"] <= 2.0
    assert t["meta"]["float_nodes"] == [STEM]
    (float_ops,) = t["meta"]["float_ops"][STEM]
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(str(out / "targets" / "tflite-int8" / "model.tflite"))
    tensors = {d["index"]: d for d in interp.get_tensor_details()}
    convs = [op for op in interp._get_ops_details() if op["op_name"] == "CONV_2D"]
    # the stem reads the float input and computes in float; the convolutions after it, int8
    assert tensors[convs[0]["outputs"][0]]["name"] == float_ops
    assert [tensors[c["outputs"][0]]["dtype"].__name__ for c in convs][:2] == ["float32",
                                                                              "int8"]
    assert f"| tflite-int8 | {STEM} | " in (out / "report.md").read_text()
