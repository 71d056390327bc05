"""--task regress / raw: labels are target values, not class ids, and the primary metric
(MSE, cosine) judges every artifact against them. A linear model whose targets are its own
FP32 outputs keeps the test to seconds: FP32 artifacts must score MSE ~0, INT8 a little more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SOURCE = '''
import numpy as np
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()


def get():
    x = np.random.default_rng(1).uniform(-1, 1, size=(300, 1, 8, 8)).astype("float32")
    with torch.no_grad():
        y = build()(torch.from_numpy(x)).numpy()
    return x, y   # targets: three real values per sample
'''


@pytest.fixture()
def regress_files(tmp_path: Path) -> Path:
    """One file holds the model and its data (a second file importing the first by a
    module name such as ``model`` would find another test's module in sys.modules)."""
    (tmp_path / "regress.py").write_text(SOURCE)
    return tmp_path


def _build(cli, folder: Path, *extra: str):
    return cli("convert", f"{folder}/regress.py:build", "--data", f"{folder}/regress.py:get",
               "--target", "onnx:fp32", "--target", "onnx:int8", "--out", str(folder / "out"),
               *extra)


def test_regression_targets_are_judged_by_mse(cli, regress_files):
    r = _build(cli, regress_files, "--task", "regress")
    assert r.code == 0, r.out + r.err
    m = json.loads((regress_files / "out" / "manifest.json").read_text())
    assert m["metric"]["name"] == "mse" and m["data"]["num_classes"] == 0
    by_name = {t["name"]: t for t in m["targets"]}
    assert by_name["onnx-fp32"]["metric"]["value"] < 1e-9
    assert 0 < by_name["onnx-int8"]["metric"]["value"] < 0.05  # quantized, still close
    assert "mse on " in r.err


def test_real_labels_without_a_regression_task_name_the_flag(cli, regress_files):
    r = _build(cli, regress_files)
    assert r.code == 2, r.out + r.err
    assert "--task regress" in r.err and "Traceback" not in r.err
