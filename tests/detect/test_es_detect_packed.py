"""es_detect.c on a packed detector (one (5 + K, 16*16 + 8*8) output, as the build packs a
two-output model): model.h states the levels' offsets in the packed output and the channel
stride, and es_detect gives the boxes Python decodes from the same packed outputs. The
small detector of conftest.py (160 scenes, 12 epochs), compiled with the real compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from edgesmith.pipeline import detection
from edgesmith.pipeline.packing import pack_torch
from edgesmith.targets import codegen
from tests.conftest import require_tools
from tests.detect.test_es_detect_c import MAIN_C, assert_same_boxes, parse_boxes


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools('cc')


@pytest.fixture(scope="module")
def packed_c(small_detector, tmp_path_factory) -> Path:
    """The C folder generated from the packed detector's ONNX, with detect_main built."""
    model, x, _ = small_detector
    packed, packing = pack_torch(model, x[:2], "small detector")
    assert packing is not None and packing.layout == "channels"
    work = tmp_path_factory.mktemp("detect_packed")
    onnx_path = work / "packed.onnx"
    torch.onnx.export(packed, torch.zeros(1, 3, 128, 128), str(onnx_path), dynamo=False,
                      opset_version=17)
    out = codegen.from_onnx(onnx_path, work / "c", precision="fp32").out_dir
    (out / "detect_main.c").write_text(MAIN_C)
    subprocess.run(["make", "-s", "lib"], cwd=out, check=True)
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", "detect", "detect_main.c",
                    "libedgesmith_model.a", "-lm"], cwd=out, check=True)
    return out


def test_model_h_states_the_packed_levels(packed_c):
    h = (packed_c / "model.h").read_text()
    for line in ("#define ES_DETECT_PACKED 1", "#define ES_DETECT_CHANNEL_STRIDE 320",
                 "#define ES_DETECT_OFFSETS {0, 256}", "#define ES_DETECT_LEVELS 2",
                 "#define ES_DETECT_STRIDES {8, 16}", "#define ES_DETECT_HEIGHTS {16, 8}",
                 "#define ES_DETECT_MAX_CANDIDATES 320"):
        assert line in h


def _run(folder: Path, x: np.ndarray, score: float, iou: float):
    (folder / "images.bin").write_bytes(np.ascontiguousarray(x, np.float32).tobytes())
    text = subprocess.run(["./detect", "images.bin", str(len(x)), repr(score), repr(iou),
                           "outputs.bin"], cwd=folder, check=True, capture_output=True,
                          text=True).stdout.splitlines()
    packed = np.fromfile(folder / "outputs.bin", np.float32).reshape(len(x), 9, 320)
    images = parse_boxes(text)
    return images, packed


def test_c_decodes_the_packed_output_as_python_does(packed_c, small_detector):
    _, x, _ = small_detector
    x = x[128:160]  # images the model did not train on
    c_boxes, packed = _run(packed_c, x, 0.05, 0.5)
    py = detection.decode(packed, score_threshold=0.05, iou_threshold=0.5)
    assert_same_boxes(py, c_boxes)
