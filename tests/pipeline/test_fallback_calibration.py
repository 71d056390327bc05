"""The fallback's calibration rung (issue 15): when one outlier in the calibration set sets
a min/max range, percentile calibration fixes the cause and no layer needs to stay in
float, on the real onnxruntime and the real C compiler.

The model is test_fallback's two-channel digits net (channel 0 reaches the stem with zero
weights). Channel 0 is zero everywhere except one pixel of one calibration sample: min/max
stretches the input's one per-tensor scale over that outlier and the image rounds away;
its 99.99th percentile is the image's own range."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.pipeline.test_fallback import MODEL, STEM, _profile

OUTLIER = 1000.0


@pytest.fixture(scope="module")
def two_channel_model(digits_ckpt, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("fallback_calibration_model")
    (folder / "two_channel.py").write_text(MODEL.format(ckpt=str(digits_ckpt)))
    return f"{folder}/two_channel.py:build"


def _outlier_data(path: Path) -> Path:
    """digits as channel 1; channel 0 zero but for one pixel of the first calibration sample."""
    from sklearn.datasets import load_digits

    from edgesmith.pipeline.data import split_indices

    d = load_digits()
    image = (d.images.astype(np.float32) / 16 - 0.5) / 0.5
    nuisance = np.zeros_like(image)
    first_calib = split_indices(len(image), 0)["calib"][0]
    nuisance[first_calib, 3, 4] = OUTLIER
    np.savez(path, x=np.stack([nuisance, image], 1), y=d.target.astype(np.int64))
    return path


def test_an_outlier_set_range_is_fixed_by_percentile_calibration_with_no_layer_in_float(
        cli, two_channel_model, tmp_path):
    data = _outlier_data(tmp_path / "data.npz")
    profile = _profile(tmp_path / "profile.yaml", ["onnx:int8", "c:int8"], 2.0)
    out = tmp_path / "out"
    r = cli("convert", two_channel_model, "--data", data, "--profile", profile, "--out", out,
            "--json")
    assert r.code == 0, r.err
    summary = json.loads(r.out)  # stdout is the JSON alone: ORT's calibrator prints go to the log
    assert [t["fallback"]["layers"] for t in summary["targets"]] == [[], []]
    m = json.loads((out / "manifest.json").read_text())
    for t in m["targets"]:
        fb = t["fallback"]
        assert t["status"] == "ok", t
        assert fb["drop_before_pt"] > 20  # min/max: the image channel rounds away
        assert fb["applied"] and fb["layers"] == []  # without the rung: [STEM]
        assert fb["drop_after_pt"] == t["accuracy_drop"] <= 2.0
        screen = {s["method"]: s["drop_pt"] for s in fb["calibration"]["screen"]}
        assert fb["calibration"]["method"] == "percentile"
        assert screen["percentile"] < screen["minmax"]
        assert t["meta"]["calibration"]["method"] == "percentile"
        assert t["meta"]["float_nodes"] == []
    md = (out / "report.md").read_text()  # the report says which calibration fixed it
    assert "| onnx-int8 | — | " in md and "| yes | percentile (minmax " in md
    # the shipped ONNX quantizes the stem's input with the image's range, not the outlier's
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(out / "targets" / "onnx-int8" / "model.onnx")).graph
    stem = next(n for n in graph.node if n.name == STEM)
    dq = next(n for n in graph.node if n.output[0] == stem.input[0])
    scale = next(numpy_helper.to_array(i) for i in graph.initializer if i.name == dq.input[1])
    assert float(scale) < 0.05  # min/max would give (OUTLIER + 1) / 255 = 3.9


def outlier_fixed_by_own_ranges(cli, model: str, tmp_path: Path, target: str) -> tuple[Path, dict]:
    """Convert the outlier model for one INT8 ``target`` that calibrates in its own
    converter (openvino, tflite) and check its fallback's calibration rung brought it back
    with no layer in float; returns the build folder and the target's manifest entry."""
    data = _outlier_data(tmp_path / "data.npz")
    profile = _profile(tmp_path / "profile.yaml", [target], 2.0)
    out = tmp_path / "out"
    r = cli("convert", model, "--data", data, "--profile", profile, "--out", out)
    assert r.code == 0, r.err
    t = json.loads((out / "manifest.json").read_text())["targets"][0]
    fb = t["fallback"]
    assert t["status"] == "ok", t
    assert fb["drop_before_pt"] > 20  # min/max: the image channel rounds away
    assert fb["applied"] and fb["layers"] == []  # without the rung: the stem in float
    assert fb["drop_after_pt"] == t["accuracy_drop"] <= 2.0
    assert fb["calibration"]["method"] == "percentile"
    own = fb["calibration"]["screen"][-1]
    assert own["runtime"] == target.replace(":", "-") and own["kept"]
    return out, t


def test_openvino_int8_takes_its_own_ranges_for_an_outlier_with_no_layer_in_float(
        cli, two_channel_model, tmp_path):
    _, t = outlier_fixed_by_own_ranges(cli, two_channel_model, tmp_path, "openvino:int8")
    assert t["meta"]["nncf"]["activation_ranges"] == "mean of per-sample min/max"
