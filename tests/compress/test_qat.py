"""NNCF QAT: Q/DQ ONNX that onnxruntime runs, at the accuracy the report claims."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

from edgesmith.compress.calibration import from_splits
from edgesmith.compress.qat import ort_accuracy, run_qat
from edgesmith.compress.train import evaluate, fit
from edgesmith.errors import UsageError
from edgesmith.profiles.schema import Calibration, Qat, Train

pytestmark = pytest.mark.slow  # first use builds NNCF's C++ extension (~1 min, then cached)


def test_qat_exports_qdq_onnx_that_onnxruntime_runs(trained, splits, tmp_path):
    calib = from_splits(splits, Calibration(samples=128))
    res = run_qat(trained, splits, calib, Qat(enabled=True, epochs=1), Train(),
                  tmp_path / "q.onnx")
    ops = {n.op_type for n in onnx.load(str(res.onnx_path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert not any(n.domain for n in onnx.load(str(res.onnx_path)).graph.node)
    r = res.report
    assert r["qdq_nodes"]["QuantizeLinear"] >= 7  # every conv + the classifier, at least
    assert r["accuracy_after"] == ort_accuracy(res.onnx_path, splits.val_x, splits.val_y)
    assert r["accuracy_before"] - r["accuracy_after"] <= 0.02
    assert r["calibration"]["samples"] == 128


def test_sequential_model_and_ignored_scope(splits, tmp_path):
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 10))
    fit(seq, splits, epochs=2, lr=0.05)
    calib = from_splits(splits, Calibration(samples=64, method="percentile"))
    res = run_qat(seq, splits, calib, Qat(enabled=True, epochs=0, ignored_scopes=["3"]),
                  Train(), tmp_path / "s.onnx")
    assert res.report["qdq_nodes"]["QuantizeLinear"] == 2  # input + conv weight; fc ignored
    assert abs(res.report["accuracy_after"] - evaluate(seq, splits.val_x, splits.val_y)) < 0.03


def test_unknown_ignored_scope_lists_close_matches(trained, splits, tmp_path):
    calib = from_splits(splits, Calibration(samples=32))
    with pytest.raises(UsageError) as e:
        run_qat(trained, splits, calib, Qat(enabled=True, epochs=0, ignored_scopes=["clasifier"]),
                Train(), tmp_path / "q.onnx")
    assert "classifier" in (e.value.fix or "")
