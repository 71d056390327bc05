"""A detector's post-processing in the device bench script (issue 19 item 3): the script's
stdlib decode (devices/remote_detect.py) gives the boxes pipeline/detection.decode gives,
and `edgesmith bench --local` reports each target's boxes per bench sample, judged on the
host against the build's own decode of the reference outputs (and mAP@0.5 on the labels).

The end-to-end build is the tiny detector of conftest.py (12 epochs on 128 generated
scenes): a trained head's confident, overlapping cells, which random weights lack."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.devices import script
from edgesmith.devices.verdict import judge_detections
from edgesmith.pipeline import bench_detect, detection
from tests.detect.conftest import DETECT_DIR

ARCH = f"{DETECT_DIR}/model.py:arch"
PROFILE = """description: detection device test
device: {name: host, arch: x86_64, cpu: x86-64, cores: 2, ram_mb: 24000}
compress:
  calibration: {samples: 16, method: minmax, per_channel: true}
targets:
  - {format: onnx, precision: fp32}
  - {format: onnx, precision: int8}
  - {format: c, precision: fp32, options: {cflags: "-O2"}}
budgets:
  accuracy_drop: 100
"""


def _device_part() -> types.ModuleType:
    """remote_detect.py exactly as the uploaded script compiles it (from PART_SOURCES)."""
    source = script.PARTS["detect"].read_text(encoding="utf-8")
    script._python38(source, "remote_detect.py")
    module = types.ModuleType("edgesmith_part_detect")
    exec(compile(source, "<detect part>", "exec"), module.__dict__)
    return module


def _random_packed(seed: int, n: int = 3, classes: int = 4, side: int = 16) -> np.ndarray:
    """Packed (n, 5 + K, cells) outputs at strides 8, 16 (a 128x128 input): logits around
    the score threshold, so thresholding and NMS both have work to do."""
    rng = np.random.default_rng(seed)
    cells = side * side + (side // 2) ** 2
    out = rng.normal(0.0, 2.0, size=(n, 5 + classes, cells)).astype(np.float32)
    out[:, :4] = rng.uniform(-0.5, 3.0, size=(n, 4, cells))  # some negative: max(d, 0)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_device_decode_gives_the_hosts_boxes_on_random_outputs(seed):
    part = _device_part()
    packed = _random_packed(seed)
    settings = bench_detect.settings(packed, detection.DEFAULT_STRIDES)
    assert settings["levels"] == [[8, 16, 16], [16, 8, 8]]
    host = detection.decode(packed, detection.DEFAULT_STRIDES)
    total = 0
    for i, (boxes, scores, classes) in enumerate(host):
        device = part.decode([float(v) for v in packed[i].ravel()], settings)
        assert len(device) == len(scores)  # same boxes survive threshold and NMS ...
        for d, b, s, c in zip(device, boxes, scores, classes, strict=True):
            assert np.abs(np.asarray(d[:4]) - b).max() <= 1e-4  # ... in the same order
            assert abs(d[4] - float(s)) <= 1e-6 and d[5] == int(c)
        total += len(device)
    assert total > 10  # the case is not vacuous


def test_device_decode_refuses_an_output_of_the_wrong_size():
    part = _device_part()
    settings = bench_detect.settings(_random_packed(0), detection.DEFAULT_STRIDES)
    with pytest.raises(ValueError, match="not \\(5 \\+ 4\\) x 320 cells"):
        part.decode([0.0] * 100, settings)


def test_judge_tells_a_shifted_box_and_a_wrong_class_from_agreement():
    host = [[[10.0, 10.0, 50.0, 50.0, 0.9, 1], [60.0, 60.0, 90.0, 90.0, 0.5, 0]], []]
    same = judge_detections({"boxes_per_sample": host}, host, None)
    assert same["agree_with_host"] is True and same["match_rate"] == 1.0
    shifted = [[[20.0, 10.0, 60.0, 50.0, 0.9, 1], host[0][1]], []]  # IoU 0.6
    judged = judge_detections({"boxes_per_sample": shifted}, host, None)
    assert judged["agree_with_host"] is False and judged["match_rate"] == 0.5
    relabelled = [[host[0][0], [*host[0][1][:5], 2]], []]
    assert judge_detections({"boxes_per_sample": relabelled}, host, None)[
        "agree_with_host"] is False
    rescored = [[host[0][0], [*host[0][1][:4], 0.502, 0]], []]  # int8's kind of difference
    judged = judge_detections({"boxes_per_sample": rescored}, host, None)
    assert judged["agree_with_host"] is False and judged["match_rate"] == 1.0


@pytest.fixture(scope="module")
def detector_build(small_detector, tmp_path_factory) -> Path:
    """A folder with the tiny detector's checkpoint and a profile of onnx fp32/int8 and
    c fp32 targets."""
    root = tmp_path_factory.mktemp("detect-device")
    ckpt = root / "detector.pt"
    torch.save(small_detector[0].state_dict(), ckpt)
    (root / "detect.yaml").write_text(PROFILE)
    return root


def test_bench_reports_device_boxes_that_match_the_hosts_decode(cli, detector_build,
                                                                 scenes_dir):
    root, out = detector_build, detector_build / "build"
    r = cli("build", root / "detector.pt", "--arch", ARCH, "--data", scenes_dir, "--task",
            "detect", "--profile", root / "detect.yaml", "--out", out)
    assert r.code == 0, r.out + r.err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["bench_data"]["detect"] == "data/bench_detect.json"
    saved = json.loads((out / "data" / "bench_detect.json").read_text())
    reference = np.load(out / "data" / "bench_reference.npy")
    assert saved["host_boxes"] == bench_detect.host_boxes(reference, (8, 16))  # 128 px input
    assert saved["labels"] is not None and any(saved["labels"])

    r = cli("bench", out, "--local", "--runs", "2", "--warmup", "0", "--json")
    assert r.code == 0, r.out + r.err
    targets = {t["name"]: t for t in json.loads(r.out)["devices"]["local"]["targets"]}
    assert set(targets) == {"onnx-fp32", "onnx-int8", "c-fp32"}, targets
    host = saved["host_boxes"]
    assert sum(map(len, host)) >= 5  # a trained head: the samples hold boxes to compare
    for name, t in targets.items():
        assert t["status"] == "ok", t
        det = t["detections"]
        assert len(det["boxes_per_sample"]) == len(host), name
        assert det["host_boxes"] == sum(map(len, host)), name
        assert 0.0 <= det["match_rate"] <= 1.0 and det["map50"] is not None, name
        if t["precision"] == "fp32":  # same count, IoU >= 0.9, same class, scores 1e-3
            assert det["agree_with_host"] is True, (name, det)
            assert det["match_rate"] == 1.0 and det["map50"] == det["host_map50"], name
    stored = json.loads((out / "manifest.json").read_text())["bench"]["local"]["targets"]
    assert all(t["detections"]["agree_with_host"] is not None for t in stored)
