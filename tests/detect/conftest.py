"""The detection example's files (examples/detect is not a package) and a small trained
detector shared by the tests: 160 generated scenes, 12 epochs (a few seconds on one core).
It is far from the cached checkpoint's mAP, but its outputs are a trained head's (confident
cells, overlapping boxes for NMS to remove), which random weights would not give."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

DETECT_DIR = Path(__file__).resolve().parents[2] / "examples" / "detect"


def detect_module(name: str):
    """examples/detect/NAME.py, imported once under a name of its own (as train.py does)."""
    key = f"edgesmith_detect_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, DETECT_DIR / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


@pytest.fixture(scope="session")
def scenes_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scenes")
    detect_module("data").write(out, n=160, size=128, seed=3)
    return out


@pytest.fixture(scope="session")
def small_detector(scenes_dir):
    """(model, x, labels): trained briefly on the first 128 scenes."""
    from edgesmith.pipeline.detection import load_coco

    train = detect_module("train")
    x, labels = load_coco(scenes_dir)
    torch.set_num_threads(1)
    model = detect_module("model").arch()
    train.fit(model, x[:128], labels[:128], epochs=12, lr=6e-3, progress=False)
    return model.eval(), np.ascontiguousarray(x), labels
