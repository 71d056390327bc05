"""es_detect.c against pipeline/detection.py on a real detector: the C target generated
from the two-output ONNX, compiled with the real compiler, runs the images and decodes its
own outputs with es_detect (static buffers sized by model.h); Python decodes the same
outputs. Same boxes, scores within 1e-5. Small: 32 images of a briefly trained model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from edgesmith.pipeline import detection
from edgesmith.targets import codegen
from tests.conftest import require_tools


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools('cc')

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
#include "es_detect.h"

static unsigned char arena[ES_ARENA_BYTES] __attribute__((aligned(ES_ARENA_ALIGN)));
static float input[ES_INPUT0_ELEMS];
static es_box boxes[ES_DETECT_MAX_BOXES];

/* detect IMAGES.bin N SCORE IOU OUTPUTS.bin: boxes as text, raw outputs as floats */
int main(int argc, char **argv) {
    es_model m;
    if (argc != 6) return 2;
    int rc = es_init(&m, arena, sizeof arena, "weights.bin");
    if (rc != ES_OK) { fprintf(stderr, "init: %s\n", es_strerror(rc)); return 1; }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[5], "wb");
    const int n = atoi(argv[2]);
    const float score = (float)atof(argv[3]), iou = (float)atof(argv[4]);
    if (!in || !out) return 1;
    for (int i = 0; i < n; i++) {
        if (fread(input, sizeof input, 1, in) != 1) return 1;
        if (es_input(&m, 0, input, sizeof input) != ES_OK || es_run(&m, NULL) != ES_OK) return 1;
        for (int o = 0; o < ES_NUM_OUTPUTS; o++)
            fwrite(es_output_ptr(&m, o), es_output_bytes[o], 1, out);
        const int k = es_detect(&m, score, iou, boxes, ES_DETECT_MAX_BOXES);
        if (k < 0) { fprintf(stderr, "es_detect: %s\n", es_strerror(k)); return 1; }
        printf("image %d %d\n", i, k);
        for (int j = 0; j < k; j++)
            printf("%d %.9g %.9g %.9g %.9g %.9g\n", (int)boxes[j].cls, boxes[j].x0, boxes[j].y0,
                   boxes[j].x1, boxes[j].y1, boxes[j].score);
    }
    fclose(in);
    fclose(out);
    return 0;
}
"""


@pytest.fixture(scope="module")
def detector_c(small_detector, tmp_path_factory) -> tuple[Path, Path]:
    """(the built C folder, the ONNX it came from)."""
    model, _, _ = small_detector
    work = tmp_path_factory.mktemp("detect_c")
    onnx_path = work / "detector.onnx"
    torch.onnx.export(model, torch.zeros(1, 3, 128, 128), str(onnx_path), dynamo=False,
                      opset_version=17, output_names=["stride8", "stride16"])
    out = codegen.from_onnx(onnx_path, work / "c", precision="fp32").out_dir
    (out / "detect_main.c").write_text(MAIN_C)
    subprocess.run(["make", "-s", "lib"], cwd=out, check=True)
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", "detect", "detect_main.c",
                    "libedgesmith_model.a", "-lm"], cwd=out, check=True)
    return out, onnx_path


def _run_c(folder: Path, x: np.ndarray, score: float, iou: float):
    """C boxes per image, and the C model's raw outputs as two level arrays."""
    (folder / "images.bin").write_bytes(np.ascontiguousarray(x, np.float32).tobytes())
    text = subprocess.run(["./detect", "images.bin", str(len(x)), repr(score), repr(iou),
                           "outputs.bin"], cwd=folder, check=True, capture_output=True,
                          text=True).stdout.splitlines()
    raw = np.fromfile(folder / "outputs.bin", np.float32).reshape(len(x), -1)
    levels = [raw[:, :9 * 256].reshape(-1, 9, 16, 16), raw[:, 9 * 256:].reshape(-1, 9, 8, 8)]
    images = parse_boxes(text)
    return images, levels


def test_model_h_sizes_the_detection_buffers_from_the_outputs(detector_c):
    h = (detector_c[0] / "model.h").read_text()
    for line in ("#define ES_DETECT_LEVELS 2", "#define ES_DETECT_CLASSES 4",
                 "#define ES_DETECT_STRIDES {8, 16}", "#define ES_DETECT_MAX_CANDIDATES 320",
                 "#define ES_DETECT_MAX_BOXES 100"):
        assert line in h


@pytest.mark.parametrize("score, iou", [(0.05, 0.5), (0.3, 0.3)])
def test_c_decode_and_nms_give_the_python_boxes(detector_c, small_detector, score, iou):
    folder, onnx_path = detector_c
    _, x, _ = small_detector
    x = x[128:160]  # images the model did not train on
    c_boxes, c_levels = _run_c(folder, x, score, iou)
    # the C model computes what onnxruntime does (so these are the real model's outputs)
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    runs = [sess.run(None, {name: x[i:i + 1]}) for i in range(len(x))]
    ref = [np.concatenate([r[level] for r in runs]) for level in range(2)]
    for c_lv, r_lv in zip(c_levels, ref, strict=True):
        assert np.abs(c_lv - r_lv).max() < 1e-3 * np.abs(r_lv).max()
    py = detection.decode(c_levels, score_threshold=score, iou_threshold=iou,
                          max_boxes=100)
    total = assert_same_boxes(py, c_boxes)
    # and NMS did work: more candidates than kept boxes
    n_cand = sum(len(detection.candidates(c_levels, i, (8, 16), score)[0])
                 for i in range(len(x)))
    assert n_cand > total


def assert_same_boxes(py: list, c_boxes: list) -> int:
    """C's rows (class, x0, y0, x1, y1, score) equal Python's decode, image by image: same
    count, classes and order, boxes within 1e-4, scores within 1e-5. Returns the box count,
    which must not be vacuous."""
    total = 0
    for (boxes, scores, classes), cb in zip(py, c_boxes, strict=True):
        assert len(cb) == len(boxes)
        assert cb[:, 0].astype(int).tolist() == classes.tolist()
        np.testing.assert_allclose(cb[:, 1:5], boxes, atol=1e-4)
        np.testing.assert_allclose(cb[:, 5], scores, atol=1e-5)
        total += len(cb)
    assert total >= 5  # boxes were found: the comparison was not vacuous
    return total


def parse_boxes(text: list[str]) -> list[np.ndarray]:
    """The driver's printout, per image a header line ("image I COUNT") and COUNT rows of
    (class, x0, y0, x1, y1, score), as one (COUNT, 6) array per image."""
    images, i = [], 0
    while i < len(text):
        count = int(text[i].split()[2])
        rows = [list(map(float, line.split())) for line in text[i + 1:i + 1 + count]]
        images.append(np.array(rows, np.float64).reshape(-1, 6))
        i += 1 + count
    return images
