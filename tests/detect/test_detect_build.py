"""`edgesmith build --task detect` end to end on a tiny detector: conftest's small_detector
(trained 12 epochs on 128 of 160 generated 128x128 scenes; the build splits the 160 by its
own seed, so its 32 validation images are partly ones the model trained on: these tests
judge the pipeline, not the detector). Its two outputs are packed into one, every target
is judged by mAP@0.5 against FP32, the C target decodes the packed output, and the faults
of a detection build exit 2 before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.pipeline import detection
from tests.detect.conftest import DETECT_DIR

ARCH = f"{DETECT_DIR}/model.py:arch"
PROFILE = """description: detection test
device: {name: host, arch: x86_64, cpu: x86-64, cores: 2, ram_mb: 24000}
compress:
  calibration: {samples: 16, method: minmax, per_channel: true}
targets:
%s
budgets:
  accuracy_drop: 100
"""


@pytest.fixture(scope="module")
def detector_ckpt(small_detector, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "detector.pt"
    torch.save(small_detector[0].state_dict(), path)
    return path


def _profile(tmp_path: Path, *targets: str) -> Path:
    path = tmp_path / "detect.yaml"
    path.write_text(PROFILE % "\n".join(f"  - {t}" for t in targets))
    return path


def test_detector_builds_onnx_and_c_int8_judged_by_map(cli, tmp_path, scenes_dir,
                                                        detector_ckpt):
    profile = _profile(tmp_path, "{format: onnx, precision: fp32}",
                       "{format: onnx, precision: int8}",
                       '{format: c, precision: int8, options: {cflags: "-O2"}}')
    out = tmp_path / "build"
    r = cli("build", detector_ckpt, "--arch", ARCH, "--data", scenes_dir, "--task", "detect",
            "--profile", profile, "--out", out)
    assert r.code == 0, r.out + r.err
    # the console states mAP as mAP: no binomial interval, no top-1 "flipped prediction"
    assert "map50 on " in r.err and "flipped prediction" not in r.err, r.err
    m = json.loads((out / "manifest.json").read_text())
    assert m["metric"]["name"] == "map50"
    packing = m["outputs"]
    assert packing["layout"] == "channels" and packing["packed_shape"] == ["N", 9, 320]
    assert [(o["index"], o["offset"], o["length"]) for o in packing["outputs"]] == [
        (0, 0, 256), (1, 256, 64)]
    ref = m["reference"]["accuracy"]
    assert 0.05 < ref <= 1.0  # a trained head finds boxes: mAP is no vacuous 0
    for t in m["targets"]:
        assert t["status"] == "ok", t
        assert t["metric"]["name"] == "map50" and t["metric"]["reference"] == ref
        assert 0.0 <= t["metric"]["value"] <= 1.0 and t["accuracy_drop"] == t["metric"]["drop"]
    by_name = {t["name"]: t for t in m["targets"]}
    assert abs(by_name["onnx-fp32"]["metric"]["drop"]) < 0.5
    assert "#define ES_DETECT_PACKED 1" in (out / "targets" / "c-int8" / "model.h").read_text()
    assert m["detection"]["image"] == "report_detect.png" and (out / "report_detect.png").is_file()
    assert m["detection"]["int8_target"] == "onnx-int8"
    report = (out / "report.md").read_text()
    assert "## Detection" in report and "c-int8" in report.split("## Detection")[1]


def test_two_output_onnx_file_builds_with_its_outputs_packed(cli, tmp_path, scenes_dir,
                                                            small_detector):
    path = tmp_path / "detector.onnx"
    torch.onnx.export(small_detector[0], torch.zeros(1, 3, 128, 128), str(path),
                      dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["stride8", "stride16"],
                      dynamic_axes={n: {0: "n"} for n in ("image", "stride8", "stride16")})
    out = tmp_path / "build"
    r = cli("build", path, "--data", scenes_dir, "--task", "detect", "--profile",
            _profile(tmp_path, "{format: onnx, precision: fp32}"), "--out", out)
    assert r.code == 0, r.out + r.err
    m = json.loads((out / "manifest.json").read_text())
    assert [o["name"] for o in m["outputs"]["outputs"]] == ["stride8", "stride16"]
    assert m["targets"][0]["status"] == "ok" and m["targets"][0]["metric"]["drop"] == 0.0


def test_detection_folder_without_task_detect_is_exit_2(cli, tmp_path, scenes_dir,
                                                        detector_ckpt):
    r = cli("build", detector_ckpt, "--arch", ARCH, "--data", scenes_dir, "--profile",
            _profile(tmp_path, "{format: onnx, precision: fp32}"), "--out", tmp_path / "b")
    assert r.code == 2 and "--task detect" in r.out + r.err
    assert not (tmp_path / "b").exists()


def test_compressing_a_detector_is_exit_2_before_any_work(cli, tmp_path, scenes_dir,
                                                          detector_ckpt):
    """Fine-tuning trains cross-entropy on class ids: a detector would train the wrong loss
    for minutes and then be judged by mAP."""
    r = cli("build", detector_ckpt, "--arch", ARCH, "--data", scenes_dir, "--task", "detect",
            "--prune-ratio", "0.5", "--profile",
            _profile(tmp_path, "{format: onnx, precision: fp32}"), "--out", tmp_path / "b")
    assert r.code == 2, r.out + r.err
    assert "cross-entropy on class labels" in r.out + r.err and "edgesmith convert" in r.out + r.err
    assert "Traceback" not in r.out + r.err and not (tmp_path / "b").exists()


@pytest.mark.parametrize("data, words", [("digits", "is not a folder"),
                                         ("classes", "no annotations.json")])
def test_task_detect_without_a_detection_folder_is_exit_2(cli, tmp_path, detector_ckpt, data,
                                                          words):
    if data == "classes":  # an image folder of the classification kind
        (tmp_path / "classes" / "a").mkdir(parents=True)
        data = str(tmp_path / "classes")
    r = cli("build", detector_ckpt, "--arch", ARCH, "--data", data, "--task", "detect",
            "--profile", _profile(tmp_path, "{format: onnx, precision: fp32}"),
            "--out", tmp_path / "b")
    assert r.code == 2 and words in r.out + r.err
    assert "Traceback" not in r.out + r.err


def test_map50_is_cocoevals_ap_at_iou_half(small_detector):
    model, x, labels = small_detector
    with torch.no_grad():
        out = model(torch.from_numpy(x[128:160]))
    assert detection.map50(out, labels[128:160]) == pytest.approx(
        detection._coco_stats(out, labels[128:160], (8, 16))[1], abs=1e-12)
    assert np.isfinite(detection.map50(out, labels[128:160]))


def _head(logit: float) -> np.ndarray:
    """Two images of a (9, 320) packed head: boxes 0..3.5 strides, logits -12..logit."""
    out = np.zeros((2, 9, 320), np.float32)
    out[:, :4] = np.linspace(0, 3.5, 320, dtype=np.float32)
    out[:, 4:] = np.linspace(-12, logit, 320, dtype=np.float32)
    return out


def test_parity_reads_a_detectors_logits_as_scores():
    """INT8 clipping a confident class logit (28 -> 20.6) changes no score: parity passes
    in score space; raw logits would call it a 27 % error and reject the artifact."""
    from edgesmith.pipeline import validate

    ref, clipped = _head(28.0), _head(28.0)
    clipped[:, 4:] = np.minimum(clipped[:, 4:], 20.6)
    labels = [[] for _ in range(2)]
    raw = validate.validate(lambda x: clipped[:len(x)], np.zeros((2, 1)), labels, ref, 0.0,
                            measure_latency=False)
    scored = validate.validate(lambda x: clipped[:len(x)], np.zeros((2, 1)), labels, ref, 0.0,
                               measure_latency=False, parity_view=detection.parity_view)
    assert not raw.parity_ok("int8") and scored.parity_ok("int8")
    # a box off by 2 strides is still an error in score space
    moved = ref.copy()
    moved[:, 0] += 2.0
    boxes = validate.validate(lambda x: moved[:len(x)], np.zeros((2, 1)), labels, ref, 0.0,
                              measure_latency=False, parity_view=detection.parity_view)
    assert not boxes.parity_ok("int8")


def test_report_names_the_reference_figure_map_for_a_detector():
    from edgesmith.pipeline import report

    manifest = {"reference": {"source": "torch", "accuracy": 0.8358}, "targets": [],
                "metric": {"name": "map50", "unit": "pt"}, "data": {"val": 240},
                "detection": {"sample": 0, "image": None, "int8_target": None}}
    assert "- reference (torch): map50 83.58%" in report.render_markdown(manifest, [])
    manifest["detection"] = None  # not a detector: the figure is top-1
    assert "- reference (torch): top-1 83.58%" in report.render_markdown(manifest, [])
